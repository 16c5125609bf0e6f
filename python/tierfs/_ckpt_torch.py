# SPDX-License-Identifier: MIT
"""tierfs.torch checkpoints: save, load and Checkpointer (re-exported by
tierfs.torch).

save() flattens a nested state dict (model + optimizer, lists and tuples
too) into tensors named by dotted keys ("model.layers.0.weight",
"optimizer.state.3.exp_avg") and a JSON description of the structure with
every non-tensor leaf; nothing is pickled, ever.  The tensors go to
safetensors shards through the C writer: save() blocks only while they are
copied into local staging, then returns a handle while the library's
threads upload and commit.  load() opens the checkpoint and returns the
same structure; with lazy=True its dicts hand out each tensor when first
used while the rest stream in on the library's threads (Python only
blocks on the one it asked for; nothing calls back into Python).

A rank may save a slice of a larger tensor (FSDP / ZeRO style) as a
ShardSlice; load() gives the full tensor, or with rank/world_size the
slice that rank needs under that world size.
"""
import atexit
import collections
import copy
import json
import math
import os
import secrets
import threading
import time

import torch

from . import ckpt as _ck
from ._capi import TierfsError

__all__ = ["save", "load", "Checkpointer", "SaveHandle", "ShardSlice",
           "shard", "LazyStateDict"]

_DTYPES = {
    torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.float64: "F64", torch.int8: "I8", torch.uint8: "U8",
    torch.int16: "I16", torch.int32: "I32", torch.int64: "I64",
    torch.bool: "BOOL", torch.complex64: "C64",
}
for _name, _st in (("float8_e4m3fn", "F8_E4M3"), ("float8_e5m2", "F8_E5M2"),
                   ("uint16", "U16"), ("uint32", "U32"), ("uint64", "U64")):
    if hasattr(torch, _name):
        _DTYPES[getattr(torch, _name)] = _st
_TORCH = {v: k for k, v in _DTYPES.items()}

_FORMAT = "tierfs.torch/1"


class ShardSlice:
    """The part of a larger tensor one rank holds: `tensor` starts at
    `offsets` in a tensor of `full_shape`."""

    __slots__ = ("tensor", "offsets", "full_shape")

    def __init__(self, tensor, offsets, full_shape):
        if len(offsets) != tensor.dim() or len(full_shape) != tensor.dim():
            raise ValueError("offsets and full_shape need one entry per "
                             "dimension of the tensor")
        self.tensor = tensor
        self.offsets = tuple(int(x) for x in offsets)
        self.full_shape = tuple(int(x) for x in full_shape)

    def __repr__(self):
        return (f"ShardSlice(shape={tuple(self.tensor.shape)}, "
                f"offsets={self.offsets}, full_shape={self.full_shape})")


def _chunk(n, rank, world_size):
    """[lo, hi) of rank's chunk of n along one dimension (torch.chunk)."""
    size = -(-n // world_size) if n else 0
    lo = min(rank * size, n)
    return lo, min(lo + size, n)


def shard(tensor, rank, world_size, dim=0):
    """rank's chunk of tensor along dim (torch.chunk sizes) as a
    ShardSlice; a view, no copy."""
    lo, hi = _chunk(tensor.shape[dim], rank, world_size)
    offsets = [0] * tensor.dim()
    offsets[dim] = lo
    return ShardSlice(tensor.narrow(dim, lo, hi - lo), offsets,
                      tuple(tensor.shape))


# ---- flattening ----

def _key(k, where):
    if isinstance(k, bool) or not isinstance(k, (str, int)):
        raise TypeError(f"{where or 'state dict'}: key {k!r} is not a str "
                        "or int; tierfs stores structure as JSON")
    return k


def _leaf(v, where):
    if v is None or isinstance(v, (bool, int, str)):
        return {"v": v}
    if isinstance(v, float):
        if math.isfinite(v):
            return {"v": v}
        return {"f": "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")}
    if isinstance(v, torch.Size):
        return {"z": list(v)}
    if isinstance(v, torch.dtype):
        return {"dt": str(v).replace("torch.", "")}
    raise TypeError(f"{where}: {type(v).__name__} is neither a tensor nor a "
                    "JSON value (tierfs never pickles)")


class _Flat:
    def __init__(self):
        self.tensors = collections.OrderedDict()   # name -> tensor/slice

    def add(self, name, v):
        if not name:
            raise ValueError("a bare tensor needs to be inside a dict")
        if name in self.tensors:
            raise ValueError(f"two entries flatten to the same name {name!r}")
        self.tensors[name] = v

    def node(self, obj, name):
        if isinstance(obj, torch.Tensor):
            self.add(name, obj)
            return {"t": name}
        if isinstance(obj, ShardSlice):
            self.add(name, obj)
            return {"s": name}
        if isinstance(obj, dict):
            return self.mapping(obj, name)
        if isinstance(obj, (list, tuple)):
            kids = [self.node(v, f"{name}.{i}" if name else str(i))
                    for i, v in enumerate(obj)]
            return {"u" if isinstance(obj, tuple) else "l": kids}
        return _leaf(obj, name)

    def mapping(self, obj, name):
        items = []
        for k, v in obj.items():
            k = _key(k, name)
            items.append([k, self.node(v, f"{name}.{k}" if name else str(k))])
        node = {"d": items}
        if isinstance(obj, collections.OrderedDict):
            node["o"] = 1
        meta = getattr(obj, "_metadata", None)
        if isinstance(meta, dict):
            try:
                node["m"] = json.loads(json.dumps(meta))
            except (TypeError, ValueError):
                pass
        return node


def _host(t):
    """A contiguous CPU tensor with t's bytes (a copy only if needed)."""
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if not t.is_contiguous():
        t = t.contiguous()
    if t.dtype not in _DTYPES:
        raise TypeError(f"dtype {t.dtype} has no safetensors name")
    if t.is_sparse or t.is_quantized:
        raise TypeError("sparse and quantized tensors are not supported")
    return t


# ---- saving ----

_orphans = []                           # writers whose handles were dropped
_orphans_lock = threading.Lock()


def _reap(block=False):
    with _orphans_lock:
        keep = []
        for w in _orphans:
            if block or w.done():
                try:
                    w.wait()
                except TierfsError:
                    pass
                w.close()
            else:
                keep.append(w)
        _orphans[:] = keep


atexit.register(_reap, True)


class SaveHandle:
    """An asynchronous save: the tensors are already copied; wait() until
    the checkpoint is committed in the store, or wait(level="local") until
    this rank's staging copy is finished (it then survives the trainer's
    crash: Checkpointer.resume recovers it)."""

    def __init__(self, writer, step, blocked_s):
        self._w = writer
        self.step = step
        self.blocked_s = blocked_s      # seconds save() blocked the caller

    def level(self):
        """"none", "local" (this rank's staging copy finished) or "store"
        (committed); "peer" is not built and never reported."""
        return self._w.level()

    def wait(self, timeout=None, level="store"):
        """True once level ("local", "store"; "peer" raises: no cache
        group configured) is reached, False if timeout seconds passed
        first; raises TierfsError once the save is known to have failed
        short of that level (local copy done, upload failed: "local" is
        True, "store" raises)."""
        return self._w.wait(timeout, level)

    def done(self):
        return self._w.done()

    def progress(self):
        """(bytes uploaded, bytes to upload)."""
        return self._w.progress()

    def __del__(self):
        w = getattr(self, "_w", None)
        if w is None:
            return
        if w.done():
            w.close()
        else:
            with _orphans_lock:
                _orphans.append(w)


def _run_id(run_id, world_size):
    """The run id of a save, agreed without a collective (a broadcast on
    the training thread would hang for the process group's timeout if one
    rank is stopped): run_id=, else $TIERFS_RUN_ID, else torchrun's
    $TORCHELASTIC_RUN_ID plus $TORCHELASTIC_RESTART_COUNT (the same on
    every rank of one generation of the group), else none (the attempt
    nonce still keeps a retry from committing stale markers)."""
    if run_id:
        return run_id
    if os.environ.get("TIERFS_RUN_ID"):
        return os.environ["TIERFS_RUN_ID"]
    elastic = os.environ.get("TORCHELASTIC_RUN_ID")
    if world_size > 1 and elastic:
        return "%s.%s" % (elastic,
                          os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    return ""


def _pick_step(root, step, world_size, options):
    if step is not None:
        return int(step)
    if world_size > 1:
        raise ValueError("saving with several ranks needs a step (in the "
                         "URI as .../step-N, or step=N)")
    last = _ck.latest(root, options)
    return 0 if last is None else last + 1


def save(state_dict, uri, rank=0, world_size=1, async_=True, step=None,
         keep_last=0, shard_size=None, staging_dir=None, staging_keep=None,
         options=None, run_id=None, overwrite=False, upload_bw=0,
         upload_threads=None, sync_staging=False, commit_timeout=None,
         timeout_s=None):
    """Save state_dict (nested dicts, lists, tuples of tensors, ShardSlices
    and JSON values) as this rank's part of the checkpoint at uri
    (ROOT/step-N, or ROOT with step=N; with one rank and no step, the step
    after the latest).  Blocks only while the tensors are copied into
    local staging; returns a SaveHandle (already waited for when
    async_=False).  keep_last: rank 0 then removes all but the newest
    keep_last checkpoints; staging_keep: local staging copies this rank
    keeps (default 1, for fast restores on this node).  commit_timeout
    (seconds, default 300; timeout_s is an alias): the most the commit
    may take on each rank after save() returns, uploads and the wait for
    the other ranks included; wait() then raises TierfsError naming the
    rank, the step and what it last did."""
    _reap()
    root, in_uri = _ck.split_uri(uri)
    step = _pick_step(root, step if step is not None else in_uri, world_size,
                      options)
    t0 = time.perf_counter()
    flat = _Flat()
    tree = flat.node(state_dict, "")
    extra = json.dumps({"format": _FORMAT, "tree": tree},
                       separators=(",", ":"), allow_nan=False)
    w = _ck.Writer(root, step, rank=rank, world_size=world_size,
                   shard_size=shard_size, staging_dir=staging_dir,
                   staging_keep=staging_keep, keep_last=keep_last,
                   options=options,
                   run_id=_run_id(run_id, world_size), overwrite=overwrite,
                   upload_bw=upload_bw, upload_threads=upload_threads,
                   sync=sync_staging,
                   timeout_s=commit_timeout if commit_timeout is not None
                   else timeout_s, extra=extra)
    try:
        hold = []                       # alive until w.save() returns
        for name, v in flat.tensors.items():
            t = _host(v.tensor if isinstance(v, ShardSlice) else v)
            hold.append(t)
            nbytes = t.numel() * t.element_size()
            if isinstance(v, ShardSlice):
                w.add_slice(name, _DTYPES[t.dtype], tuple(t.shape),
                            v.offsets, v.full_shape, t.data_ptr(), nbytes)
            else:
                w.add(name, _DTYPES[t.dtype], tuple(t.shape), t.data_ptr(),
                      nbytes)
        w.save()
    except BaseException:
        w.close()
        raise
    del hold
    handle = SaveHandle(w, step, time.perf_counter() - t0)
    if not async_:
        handle.wait()
    return handle


# ---- loading ----

class _Loader:
    """The reader and the buffers it fills; closed once every read was
    taken (or when dropped)."""

    def __init__(self, reader, map_location):
        self.reader = reader
        self.device = torch.device(map_location) if map_location else None
        self.buffers = {}               # rid -> tensor being filled
        self.left = 0
        self.lock = threading.Lock()

    def submit(self, name, shape, dtype, offsets=None, sizes=None):
        t = torch.empty(tuple(shape), dtype=dtype)
        rid = self.reader.submit(name, t.data_ptr(),
                                 t.numel() * t.element_size(), offsets, sizes)
        self.buffers[rid] = t
        self.left += 1
        return rid

    def take(self, rid):
        self.reader.wait(rid)
        with self.lock:
            t = self.buffers.pop(rid)
            self.left -= 1
            if self.left == 0:
                self.close()
        if self.device is not None and self.device.type != "cpu":
            t = t.to(self.device)
        return t

    def close(self):
        if self.reader is not None:
            self.reader.close()
            self.reader = None
        self.buffers.clear()

    def __del__(self):
        self.close()


class _Pending:
    """A tensor (or slice) still streaming in."""

    __slots__ = ("loader", "rid", "slice")

    def __init__(self, loader, rid, slice_of=None):
        self.loader, self.rid, self.slice = loader, rid, slice_of

    def get(self):
        t = self.loader.take(self.rid)
        if self.slice is not None:
            return ShardSlice(t, *self.slice)
        return t


class _PendingSeq:
    """A list or tuple holding pending tensors."""

    __slots__ = ("kind", "items")

    def __init__(self, kind, items):
        self.kind, self.items = kind, items

    def get(self):
        v = [_resolve(x) for x in self.items]
        return tuple(v) if self.kind == "u" else v


def _resolve(v):
    return v.get() if isinstance(v, (_Pending, _PendingSeq)) else v


class LazyStateDict(dict):
    """A dict whose tensors arrive in the background: reading an item
    waits for that one only.  Iterating, copying, deep-copying or pickling
    it waits for what it touches; to_dict() waits for everything."""

    def __getitem__(self, key):
        v = dict.__getitem__(self, key)
        if isinstance(v, (_Pending, _PendingSeq)):
            v = v.get()
            dict.__setitem__(self, key, v)
        return v

    def get(self, key, default=None):
        return self[key] if key in self else default

    def __iter__(self):
        return iter(list(dict.keys(self)))

    def items(self):
        return [(k, self[k]) for k in list(dict.keys(self))]

    def values(self):
        return [self[k] for k in list(dict.keys(self))]

    def pop(self, key, *default):
        if key in self:
            v = self[key]
            dict.__delitem__(self, key)
            return v
        if default:
            return default[0]
        raise KeyError(key)

    def popitem(self):
        key = next(reversed(list(dict.keys(self))))
        return key, self.pop(key)

    def setdefault(self, key, default=None):
        if key not in self:
            dict.__setitem__(self, key, default)
        return self[key]

    def copy(self):
        return type(self)(self.items())

    def __eq__(self, other):
        return dict(self.items()) == other

    __hash__ = None

    def __repr__(self):
        return "LazyStateDict(" + repr(dict(self.items())) + ")"

    def to_dict(self):
        """Wait for everything; a plain (nested) dict."""
        return {k: _plain(v) for k, v in self.items()}

    def __copy__(self):
        return self.copy()

    def __deepcopy__(self, memo):
        out = collections.OrderedDict() if getattr(self, "_ordered", False) \
            else {}
        for k, v in self.items():
            out[copy.deepcopy(k, memo)] = copy.deepcopy(v, memo)
        if hasattr(self, "_metadata"):
            out._metadata = copy.deepcopy(self._metadata, memo)
        return out

    def __reduce__(self):
        return (dict, (self.to_dict(),))


def _plain(v):
    if isinstance(v, LazyStateDict):
        return v.to_dict()
    return v


def _from_float(s):
    return {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}[s]


class _Builder:
    """Turn the stored structure back into objects, submitting reads."""

    def __init__(self, loader, lazy, rank, world_size):
        self.loader, self.lazy = loader, lazy
        self.rank, self.world_size = rank, world_size

    def tensor(self, name, sliced):
        r = self.loader.reader
        info = r.info(name)
        dtype = _TORCH.get(info.dtype)
        if dtype is None:
            raise TypeError(f"tensor {name!r}: dtype {info.dtype} has no "
                            "torch equivalent here")
        if not sliced or self.rank is None:
            return _Pending(self.loader, self.loader.submit(
                name, info.shape, dtype))
        offsets, sizes = self.box(name, info)
        rid = self.loader.submit(name, sizes, dtype, offsets, sizes)
        return _Pending(self.loader, rid, (offsets, info.shape))

    def box(self, name, info):
        """The part of a sliced tensor rank needs under world_size: its
        chunk along the dimension the saved slices were cut on."""
        saved = self.loader.reader.slices(name)
        dim = 0
        for d in range(len(info.shape)):
            if len({o[d] for o, _ in saved}) > 1:
                dim = d
                break
        lo, hi = _chunk(info.shape[dim] if info.shape else 0, self.rank,
                        self.world_size)
        offsets = [0] * len(info.shape)
        sizes = list(info.shape)
        if info.shape:
            offsets[dim], sizes[dim] = lo, hi - lo
        return offsets, sizes

    def node(self, n):
        if "t" in n or "s" in n:
            return self.tensor(n.get("t", n.get("s")), "s" in n)
        if "d" in n:
            return self.mapping(n)
        if "l" in n or "u" in n:
            kind = "l" if "l" in n else "u"
            items = [self.node(x) for x in n[kind]]
            if any(isinstance(x, (_Pending, _PendingSeq)) for x in items):
                return _PendingSeq(kind, items)
            return tuple(items) if kind == "u" else items
        if "v" in n:
            return n["v"]
        if "f" in n:
            return _from_float(n["f"])
        if "z" in n:
            return torch.Size(n["z"])
        if "dt" in n:
            return getattr(torch, n["dt"])
        raise ValueError(f"unknown node in the stored structure: {n!r}")

    def mapping(self, n):
        d = LazyStateDict()
        for k, v in n["d"]:
            dict.__setitem__(d, k, self.node(v))
        if n.get("o"):
            d._ordered = True
        if "m" in n:
            d._metadata = n["m"]
        return d


def _merge(a, b):
    """The structure of several ranks: the union of their dicts."""
    if "d" not in a or "d" not in b:
        return a
    keys = {json.dumps(k): i for i, (k, _) in enumerate(a["d"])}
    out = dict(a, d=[list(x) for x in a["d"]])
    for k, v in b["d"]:
        i = keys.get(json.dumps(k))
        if i is None:
            out["d"].append([k, v])
        else:
            out["d"][i][1] = _merge(out["d"][i][1], v)
    return out


def _tree(reader):
    """The merged structure of every rank, or a flat one for checkpoints
    written without tierfs.torch."""
    tree = None
    for rank in range(reader.world_size):
        doc = json.loads(reader.extra(rank))
        if isinstance(doc, dict) and doc.get("format") == _FORMAT:
            tree = doc["tree"] if tree is None else _merge(tree, doc["tree"])
    if tree is None:
        tree = {"d": [[t.name, {"s" if t.n_slices > 1 else "t": t.name}]
                      for t in reader.tensors]}
    return tree


def _materialise(v):
    if isinstance(v, LazyStateDict):
        out = collections.OrderedDict() if getattr(v, "_ordered", False) \
            else {}
        for k in list(dict.keys(v)):
            out[k] = _materialise(v[k])
        if hasattr(v, "_metadata"):
            out._metadata = v._metadata
        return out
    if isinstance(v, list):
        return [_materialise(x) for x in v]
    if isinstance(v, tuple):
        return tuple(_materialise(x) for x in v)
    return v


def load(uri, lazy=True, map_location="cpu", rank=None, world_size=None,
         staging_dir=None, options=None, threads=None, use_staging=True):
    """Load the checkpoint at uri (ROOT/step-N, or ROOT for the latest)
    into the structure it was saved with.  lazy=True returns at once with
    LazyStateDicts whose tensors stream in the background (in file order)
    and are handed out as soon as each is read; lazy=False waits for all
    and returns plain dicts.  Slices saved by several ranks come back as
    full tensors, or, with rank and world_size, as the ShardSlice that rank
    needs under that world size.  map_location: a device (or its name)."""
    if (rank is None) != (world_size is None):
        raise ValueError("give both rank and world_size, or neither")
    reader = _ck.Reader(uri, staging_dir=staging_dir, threads=threads,
                        options=options, use_staging=use_staging)
    loader = _Loader(reader, map_location)
    try:
        tree = _tree(reader)
        obj = _Builder(loader, lazy, rank, world_size).node(tree)
        reader.start()
    except BaseException:
        loader.close()
        raise
    if not lazy:
        obj = _materialise(_resolve(obj))
    return _resolve(obj) if not isinstance(obj, LazyStateDict) else obj


# ---- the training-loop helper ----

class Checkpointer:
    """Save every `every` steps, keep the newest `keep_last`, resume from
    the latest:

        ck = Checkpointer("s3://b/run", every=500, keep_last=3)
        step, state = ck.resume()          # (None, None) on a fresh run
        ...
        ck.step(step, lambda: {"model": m.state_dict(),
                               "optim": opt.state_dict()})
        ...
        ck.close()                         # waits for the last save

    At most one save is in flight: the next one first waits for it (and
    raises if it failed)."""

    def __init__(self, uri, every=1, keep_last=3, rank=0, world_size=1,
                 async_=True, **save_kwargs):
        if every < 1:
            raise ValueError("every must be at least 1")
        self.uri, self.every, self.keep_last = uri, every, keep_last
        self.rank, self.world_size, self.async_ = rank, world_size, async_
        self.save_kwargs = save_kwargs
        self._handle = None

    def latest_step(self):
        """The newest committed step, or None on a fresh run.  Not only
        the one `latest` names: a save killed after its commit and before
        `latest` moved leaves a newer complete checkpoint, and a job
        resumed from the older one would save that step again and fail
        "already committed" after every restart."""
        opts = self.save_kwargs.get("options")
        step = _ck.latest(self.uri, opts)
        if step is None:
            return None
        return max([step] + _ck.list_steps(self.uri, opts))

    def resume(self, map_location="cpu", lazy=False, **load_kwargs):
        """(step, state) of the newest checkpoint, or (None, None).

        First recovers a locally complete, uncommitted save (the previous
        job was killed after every rank's staging copy was finished and
        before the commit): every rank calls resume, rank 0 decides, each
        re-uploads its copy and rank 0 commits it (tierfs.ckpt.recover;
        bounded by commit_timeout; with several ranks it needs the run id
        save() uses).  If a rank lacks it, nobody commits it and the
        newest committed step is loaded.  Loading reads this node's
        staging copy when it matches the index, else the store."""
        kw = self.save_kwargs
        timeout = kw.get("commit_timeout")
        if timeout is None:
            timeout = kw.get("timeout_s")
        _ck.recover(self.uri, rank=self.rank, world_size=self.world_size,
                    staging_dir=kw.get("staging_dir"),
                    staging_keep=kw.get("staging_keep"),
                    keep_last=self.keep_last, timeout_s=timeout,
                    options=kw.get("options"),
                    run_id=_run_id(kw.get("run_id"), self.world_size))
        if "staging_dir" in kw and "staging_dir" not in load_kwargs:
            load_kwargs["staging_dir"] = kw["staging_dir"]
        step = self.latest_step()
        if step is None:
            return None, None
        state = load(_ck.step_uri(self.uri, step), lazy=lazy,
                     map_location=map_location, **load_kwargs)
        return step, state

    def step(self, step, state):
        """Save state (a state dict, or a callable returning one) if step
        is a multiple of `every`; returns the SaveHandle or None."""
        if step % self.every != 0:
            return None
        return self.save(step, state)

    def save(self, step, state):
        self.wait()
        if callable(state):
            state = state()
        self._handle = save(state, self.uri, rank=self.rank,
                            world_size=self.world_size, async_=self.async_,
                            step=step, keep_last=self.keep_last,
                            **self.save_kwargs)
        return self._handle

    def wait(self):
        """Wait for the save in flight; raises TierfsError if it failed."""
        h, self._handle = self._handle, None
        if h is not None:
            h.wait()

    def close(self):
        self.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
