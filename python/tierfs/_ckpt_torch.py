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
import errno
import hashlib
import heapq
import json
import math
import os
import threading
import time

import torch

from . import ckpt as _ck
from ._capi import TierfsError, error_class

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


# ---- replicated state: one copy, written by all ranks ----

# A tensor larger than total / (world_size * _CUT) is cut into dim-0
# slices, one per rank (the writer takes one piece of a tensor per rank;
# fewer when it has fewer rows), so it loads every rank alike; the other
# tensors, each at most a quarter of a rank's share, go largest first to
# the least loaded rank, so greedy placement ends within a quarter of
# the mean.
_CUT = 4


def _nbytes(shape, elem):
    n = elem
    for x in shape:
        n *= int(x)
    return n


def _plan(items, world_size):
    """Which rank writes what of a replicated state, from names, dtypes
    and shapes only: every rank computes the same plan without talking.
    items: [(name, dtype, shape, element size)].  Returns (units, digest):
    units[rank] = [(name, lo, hi)], lo None for a whole tensor, else the
    dim-0 rows [lo, hi) of a slice (at most one slice of a tensor per
    rank); digest names the input (ranks whose
    digests differ hold different states)."""
    desc = json.dumps([[n, d, list(map(int, sh))] for n, d, sh, _ in items]
                      + [world_size], separators=(",", ":"))
    digest = hashlib.sha256(desc.encode()).hexdigest()[:16]
    units = [[] for _ in range(world_size)]
    if world_size == 1:
        units[0] = [(n, None, None) for n, _, _, _ in items]
        return units, digest
    total = sum(_nbytes(sh, e) for _, _, sh, e in items)
    limit = max(1, total // (world_size * _CUT))
    order = []                          # (bytes, name, rows, pieces)
    for name, _, shape, elem in items:
        nb = _nbytes(shape, elem)
        rows = int(shape[0]) if len(shape) else 0
        k = min(world_size, rows) if nb > limit else 1
        order.append((nb, name, rows, max(1, k)))
    order.sort(key=lambda x: (-x[0], x[1]))
    heap = [(0, r) for r in range(world_size)]
    for nb, name, rows, k in order:     # largest first, least loaded
        got = [heapq.heappop(heap) for _ in range(k)]   # k distinct ranks
        for i, (load, r) in enumerate(got):
            if k == 1:
                units[r].append((name, None, None))
                heapq.heappush(heap, (load + nb, r))
                continue
            lo, hi = rows * i // k, rows * (i + 1) // k
            units[r].append((name, lo, hi))
            heapq.heappush(heap, (load + nb // rows * (hi - lo), r))
    return units, digest


def _dist_group(world_size):
    """torch.distributed when a process group is up and world_size > 1."""
    dist = getattr(torch, "distributed", None)
    if (world_size > 1 and dist is not None and dist.is_available() and
            dist.is_initialized()):
        return dist
    return None


def _check_plan(dist, world_size, digest, described):
    """With a process group, refuse a replicated save whose ranks hold
    different states, on every rank, naming the first tensor that
    differs (one small all_gather; a second only on a mismatch)."""
    got = [None] * world_size
    dist.all_gather_object(got, digest)
    if len(set(got)) == 1:
        return
    maps = [None] * world_size
    dist.all_gather_object(maps, described)
    names = sorted(set().union(*[set(m) for m in maps]))
    for name in names:
        seen = [m.get(name) for m in maps]
        if any(x != seen[0] for x in seen):
            where = ", ".join(f"rank {r}: " + ("absent" if x is None else
                                               f"{x[0]} {tuple(x[1])}")
                              for r, x in enumerate(seen))
            raise ValueError(f"replicated save: tensor {name!r} differs "
                             f"between ranks ({where})")
    raise ValueError("replicated save: the ranks' states differ in the "
                     "order of their tensors")


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
        """"none", "local" (this rank's staging copy finished), "peer"
        (a copy on another node of the cache group; only with group) or
        "store" (committed)."""
        return self._w.level()

    def wait(self, timeout=None, level="store"):
        """True once level ("local", "peer", "store"; "peer" without a
        group raises) is reached, False if timeout seconds passed
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


def _replicated_share(flat, rank, world_size, check):
    """This rank's units of the replicated tensors in flat, and the plan's
    digest (with check, compared across ranks when a process group is
    up: a collective on the caller's thread)."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is outside a world of {world_size}")
    items, described = [], {}
    for name, v in flat.tensors.items():
        if isinstance(v, ShardSlice):
            continue
        if v.dtype not in _DTYPES:
            raise TypeError(f"tensor {name!r}: dtype {v.dtype} has no "
                            "safetensors name")
        items.append((name, _DTYPES[v.dtype], tuple(v.shape),
                      v.element_size()))
        described[name] = (_DTYPES[v.dtype], list(v.shape))
    units, digest = _plan(items, world_size)
    dist = _dist_group(world_size) if check else None
    if dist is not None:
        _check_plan(dist, world_size, digest, described)
    mine = {}
    for name, lo, hi in units[rank]:
        mine.setdefault(name, []).append((lo, hi))
    return mine, digest


def save(state_dict, uri, rank=0, world_size=1, async_=True, step=None,
         keep_last=0, shard_size=None, staging_dir=None, staging_keep=None,
         options=None, run_id=None, overwrite=False, upload_bw=0,
         upload_threads=None, sync_staging=False, commit_timeout=None,
         timeout_s=None, replicated=False, check_replicas=False,
         group=None):
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
    rank, the step and what it last did.

    replicated=True (DDP): every plain tensor is the same on every rank;
    each rank writes only its share of them (whole tensors, or dim-0
    slices of large ones, balanced by bytes, planned from names, dtypes
    and shapes alone), so the checkpoint holds one copy and load() gives
    full tensors.  ShardSlices are still saved by their own rank.
    check_replicas=True also compares the ranks' plans before anything is
    written, with one all_gather over the process group: a collective on
    this thread, which a stopped rank holds for the group's timeout, so
    it is off by default (the commit and load check it anyway).

    group (tierfs.ckpt.group_options: {"members": LIST, "secret_file":
    F, "self": "HOST:PORT"}; default from $TIERFS_GROUP): once the local
    copy is finished, it is also sent to another node of the cache group
    (the "peer" level: handle.wait(level="peer")), and resume fetches it
    back on a node that lost its staging."""
    _reap()
    root, in_uri = _ck.split_uri(uri)
    step = _pick_step(root, step if step is not None else in_uri, world_size,
                      options)
    t0 = time.perf_counter()
    flat = _Flat()
    tree = flat.node(state_dict, "")
    doc = {"format": _FORMAT, "tree": tree}
    mine = None                         # replicated: name -> [(lo, hi)]
    if replicated:
        mine, doc["plan"] = _replicated_share(flat, rank, world_size,
                                              check_replicas)
    extra = json.dumps(doc, separators=(",", ":"), allow_nan=False)
    w = _ck.Writer(root, step, rank=rank, world_size=world_size,
                   shard_size=shard_size, staging_dir=staging_dir,
                   staging_keep=staging_keep, keep_last=keep_last,
                   options=options,
                   run_id=_run_id(run_id, world_size), overwrite=overwrite,
                   upload_bw=upload_bw, upload_threads=upload_threads,
                   sync=sync_staging,
                   timeout_s=commit_timeout if commit_timeout is not None
                   else timeout_s, extra=extra, group=group)
    try:
        hold = []                       # alive until w.save() returns
        for name, v in flat.tensors.items():
            if isinstance(v, ShardSlice):
                t = _host(v.tensor)
                hold.append(t)
                w.add_slice(name, _DTYPES[t.dtype], tuple(t.shape),
                            v.offsets, v.full_shape, t.data_ptr(),
                            t.numel() * t.element_size())
                continue
            for lo, hi in (mine.get(name, ()) if mine is not None
                           else [(None, None)]):
                t = _host(v if lo is None else v.narrow(0, lo, hi - lo))
                hold.append(t)
                nbytes = t.numel() * t.element_size()
                if lo is None:
                    w.add(name, _DTYPES[t.dtype], tuple(t.shape),
                          t.data_ptr(), nbytes)
                else:
                    w.add_slice(name, _DTYPES[t.dtype], tuple(t.shape),
                                (lo,) + (0,) * (v.dim() - 1), tuple(v.shape),
                                t.data_ptr(), nbytes)
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
        try:
            info = r.info(name)
        except KeyError:
            raise ValueError(f"checkpoint step {r.step}: tensor {name!r} is "
                             "in the stored structure but in no shard (a "
                             "replicated save whose ranks held different "
                             "states?)") from None
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
    plans = {}
    for rank in range(reader.world_size):
        doc = json.loads(reader.extra(rank))
        if isinstance(doc, dict) and doc.get("format") == _FORMAT:
            tree = doc["tree"] if tree is None else _merge(tree, doc["tree"])
            if "plan" in doc:
                plans[rank] = doc["plan"]
    if len(set(plans.values())) > 1:
        odd = [r for r, p in plans.items() if p != plans[min(plans)]]
        raise ValueError(f"checkpoint step {reader.step}: a replicated save "
                         f"whose ranks held different states (rank {odd[0]}'s "
                         f"plan differs from rank {min(plans)}'s)")
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
         staging_dir=None, options=None, threads=None, use_staging=True,
         index=None):
    """Load the checkpoint at uri (ROOT/step-N, or ROOT for the latest)
    into the structure it was saved with.  lazy=True returns at once with
    LazyStateDicts whose tensors stream in the background (in file order)
    and are handed out as soon as each is read; lazy=False waits for all
    and returns plain dicts.  Slices saved by several ranks come back as
    full tensors, or, with rank and world_size, as the ShardSlice that rank
    needs under that world size (replicated tensors always come back
    whole).  map_location: a device (or its name).  index: the index text
    another rank read (ckpt.Reader.index_text()), used instead of reading
    `latest` and the index here, and checked the same way."""
    if (rank is None) != (world_size is None):
        raise ValueError("give both rank and world_size, or neither")
    reader = _ck.Reader(uri, staging_dir=staging_dir, threads=threads,
                        options=options, use_staging=use_staging,
                        index=index)
    return _load_from(reader, lazy, map_location, rank, world_size)


def _load_from(reader, lazy, map_location, rank, world_size):
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

def _error_box(e):
    """An exception as plain values for a broadcast: [kind, rc, message,
    detail] (str and int only)."""
    if isinstance(e, TierfsError):
        return ["tierfs", int(e.rc), str(e.message), str(e.detail)]
    return ["other", 0, type(e).__name__, str(e)]


def _error_from_box(b):
    kind, rc, message, detail = b
    if kind == "tierfs":
        return error_class(int(rc))(int(rc), str(message),
                                    f"{detail}; read by rank 0")
    return RuntimeError(f"resume failed on rank 0: {message}: {detail}")


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
        return self._find_step()[0]

    def _find_step(self):
        """(newest committed step, the step `latest` led to) or (None,
        None): `latest` (one read, and a stat of its index), then one
        listing of the root."""
        opts = self.save_kwargs.get("options")
        step = _ck.latest(self.uri, opts)
        if step is None:
            return None, None
        return max([step] + _ck.list_steps(self.uri, opts)), step

    def resume(self, map_location="cpu", lazy=False, **load_kwargs):
        """(step, state) of the newest checkpoint, or (None, None).

        First recovers a locally complete, uncommitted save (the previous
        job was killed after every rank's staging copy was finished and
        before the commit): every rank calls resume, rank 0 decides, each
        re-uploads its copy and rank 0 commits it (tierfs.ckpt.recover;
        bounded by commit_timeout; with several ranks it needs the run id
        save() uses).  If a rank lacks it, nobody commits it and the
        newest committed step is loaded.  Loading reads this node's
        staging copy when it matches the index, else the store.  With a
        cache group (save_kwargs group=, or $TIERFS_GROUP), a staging
        copy this node lacks is first fetched back from the peer that
        keeps it: local, then peer, then store.

        Then one rank reads the control state.  With a torch.distributed
        process group and world_size > 1, rank 0 alone finds the step
        (`latest`, then a listing) and reads the index; it broadcasts
        (step, index text) and every rank opens the checkpoint from that
        text.  A failure on rank 0 is broadcast too and raised on every
        rank.  Without a group, ranks other than 0 read the `latest`
        object and stat the index of the step `every` after it (two
        requests, no listing) and load the newest of those and of the
        step they just recovered; rank 0 first moves a stale `latest` to
        the newest committed step.
        Store errors (403, 5xx, timeouts) raise; only a missing `latest`
        means a fresh run."""
        kw = self.save_kwargs
        timeout = kw.get("commit_timeout")
        if timeout is None:
            timeout = kw.get("timeout_s")
        recovered = _ck.recover(
            self.uri, rank=self.rank, world_size=self.world_size,
            staging_dir=kw.get("staging_dir"),
            staging_keep=kw.get("staging_keep"), keep_last=self.keep_last,
            timeout_s=timeout, options=kw.get("options"),
            run_id=_run_id(kw.get("run_id"), self.world_size),
            group=kw.get("group"))
        if "staging_dir" in kw and "staging_dir" not in load_kwargs:
            load_kwargs["staging_dir"] = kw["staging_dir"]
        dist = _dist_group(self.world_size)
        if dist is not None:
            return self._resume_group(dist, map_location, lazy, load_kwargs)
        if self.world_size > 1 and self.rank != 0:
            step = _ck.read_latest(self.uri, self.save_kwargs.get("options"))
            if step is not None:
                step = self._probe_newer(step)
            # The recovery this rank took part in is committed, but rank 0
            # may move `latest` to it only after we read it (and the probe
            # stats step+every, not the recovered step).
            if recovered is not None and (step is None or recovered > step):
                step = recovered
        else:
            step, named = self._find_step()
            if step is not None and self.world_size > 1 and step != named:
                self._repoint_latest(step)
        if step is None:
            return None, None
        state = load(_ck.step_uri(self.uri, step), lazy=lazy,
                     map_location=map_location,
                     **self._load_opts(load_kwargs))
        return step, state

    _LOAD_OPTS = ("rank", "world_size", "staging_dir", "options", "threads",
                  "use_staging")

    def _load_opts(self, load_kwargs):
        kw = dict(load_kwargs)
        bad = sorted(set(kw) - set(self._LOAD_OPTS))
        if bad:
            raise TypeError(f"resume() got an unexpected argument {bad[0]!r}")
        if "options" not in kw and self.save_kwargs.get("options"):
            kw["options"] = self.save_kwargs["options"]
        return kw

    def _probe_newer(self, step):
        """A rank other than 0 without a process group: `latest` may lag
        the newest commit (a save killed between its index and `latest`),
        which rank 0 finds by listing and then writes to `latest`, maybe
        after this rank read it.  Checkpointer saves multiples of
        `every`, so stat the index of the next one, and on while there is
        one: one request in the usual case, never a listing, and the same
        step as rank 0's."""
        from . import Store
        root, _ = _ck.split_uri(self.uri)
        with Store(root, self.save_kwargs.get("options")) as st:
            while True:
                nxt = (step // self.every + 1) * self.every
                try:
                    st.stat(f"step-{nxt:06d}/model.safetensors.index.json")
                except TierfsError as e:
                    if e.errno == errno.ENOENT:
                        return step
                    raise
                step = nxt

    def _repoint_latest(self, step):
        """Rank 0 without a process group: make `latest` name the step it
        resumes from, so that the other ranks, which read `latest` only,
        take the same one (after a save killed between its index and
        `latest`).  A rank that read `latest` before this write finds the
        newer step by _probe_newer."""
        opts = self.save_kwargs.get("options")
        from . import Store
        root, _ = _ck.split_uri(self.uri)
        with Store(root, opts) as st:
            st.put("latest", f"step-{int(step):06d}\n".encode())

    def _resume_group(self, dist, map_location, lazy, load_kwargs):
        kw = self._load_opts(load_kwargs)
        reader = None
        box = [None, None, None]        # step, index text, error
        if self.rank == 0:
            try:
                step = self.latest_step()
                if step is not None:
                    reader = _ck.Reader(
                        _ck.step_uri(self.uri, step),
                        staging_dir=kw.get("staging_dir"),
                        threads=kw.get("threads"), options=kw.get("options"),
                        use_staging=kw.get("use_staging", True))
                    box = [step, reader.index_text(), None]
            except Exception as e:      # noqa: BLE001 - sent to every rank
                box = [None, None, _error_box(e)]
                dist.broadcast_object_list(box, src=0)
                raise
        dist.broadcast_object_list(box, src=0)
        step, text, err = box
        if err is not None:
            raise _error_from_box(err)
        if step is None:
            return None, None
        if reader is None:
            if not isinstance(text, str) or not isinstance(step, int):
                raise TypeError("resume: rank 0 sent something other than "
                                "(int, str)")
            reader = _ck.Reader(_ck.step_uri(self.uri, step), index=text,
                                staging_dir=kw.get("staging_dir"),
                                threads=kw.get("threads"),
                                options=kw.get("options"),
                                use_staging=kw.get("use_staging", True))
        return step, _load_from(reader, lazy, map_location, kw.get("rank"),
                                kw.get("world_size"))

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
