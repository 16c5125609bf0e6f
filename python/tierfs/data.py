# SPDX-License-Identifier: MIT
"""Packed datasets for training: the reader of `tierfs pack` output.

    from tierfs.torch import ShardDataset, StallMeter
    ds = ShardDataset("s3://bucket/imagenet-packed", shuffle=True, seed=0,
                      decode=True, cache_dir="/nvme/tierfs")
    loader = torch.utils.data.DataLoader(ds, batch_size=256, num_workers=8)
    meter = StallMeter(loader)
    for epoch in range(10):
        ds.set_epoch(epoch)
        for batch in meter.epoch(epoch):
            train_step(batch)

- Cache: a store and the node-local cache over it (RAM + optional disk
  tier shared with other processes and mounts through cache_dir).
- PackedDataset: one process's open dataset (the C reader, libtierfs
  src/pack/): map-style get(i), and epoch iterators.
- ShardDataset: torch IterableDataset; each DataLoader worker opens its
  own reader after the fork and reads its own partition (rank, worker);
  set_epoch(e) reshuffles; resume(epoch, samples_seen, batch_size)
  continues an interrupted epoch.
- ShardIndexDataset: map-style torch Dataset (len, [i]).
- StallMeter: data-wait vs compute per step, stall share and cache hit
  rate per epoch, a warning above 20% stall.

Samples are dicts {"__key__": str, "__url__": shard name, "__index__":
int, field: bytes, ...}; each field's bytes are copied once, from the
cached block into the bytes object handed out.  docs/pack.md has the
formats and the sampler.
"""
import atexit
import ctypes
import errno
import glob
import io
import json
import math
import multiprocessing
import os
import shutil
import tempfile
import time
import warnings

from . import _capi
from ._capi import encode as _b

try:
    import torch.utils.data as _tud
    _IterableBase, _MapBase = _tud.IterableDataset, _tud.Dataset
except ImportError:                     # the reader works without torch
    _tud = None
    _IterableBase = _MapBase = object

__all__ = ["Cache", "PackedDataset", "ShardDataset", "ShardIndexDataset",
           "StallMeter", "DECODERS"]

_check = _capi.check
_new_bytes = ctypes.pythonapi.PyBytes_FromStringAndSize
_new_bytes.restype = ctypes.py_object
_new_bytes.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t]


# ---- decoders (by the field's last extension, as WebDataset does) ----

def _dec_npy(data):
    import numpy
    return numpy.load(io.BytesIO(data), allow_pickle=False)


def _dec_int(data):
    return int(data.decode("ascii").strip())


def _dec_json(data):
    return json.loads(data)


def _dec_txt(data):
    return data.decode("utf-8")


# Module-level functions, so a dataset pickles for spawned workers.
DECODERS = {
    "npy": _dec_npy, "json": _dec_json, "txt": _dec_txt,
    "cls": _dec_int, "cls2": _dec_int, "index": _dec_int,
    "inx": _dec_int, "id": _dec_int,
}


def _decoder_table(decode, decoders):
    """{extension: fn} from decode (True, False or a list of extensions)
    and decoders (extra or overriding functions)."""
    table = {}
    if decode is True:
        table.update(DECODERS)
    elif decode:
        for ext in decode:
            table[ext] = DECODERS[ext]
    table.update(decoders or {})
    return table


# ---- the cache ----

class Cache(_capi.Handle):
    """A store (URI) and the cache over it.  Options are the cache's
    (cache.h: block_size, mem_cache, cache_size, immutable, ...); a
    cache_dir shares its disk tier with mounts and other processes."""

    def __init__(self, uri, cache_dir=None, store_options=None, **options):
        self._pid = os.getpid()
        self._st = self._c = None
        st = ctypes.c_void_p()
        _check(_capi.tfs_store_open(ctypes.byref(st), _b(uri),
                                    _b(store_options) if store_options
                                    else None))
        self._st = st
        self._c = None
        c = ctypes.c_void_p()
        try:
            _check(_capi.tfs_cache_create(ctypes.byref(c)))
            self._c = c
            if cache_dir:
                options["cache_dir"] = cache_dir
            for name, value in options.items():
                if isinstance(value, bool):
                    value = int(value)
                _check(_capi.tfs_cache_set(c, _b(name), _b(str(value))))
            _check(_capi.tfs_cache_open(c, st))
        except BaseException:
            self.close()
            raise

    @property
    def handle(self):
        return self._c

    def stats(self):
        """The counters since open (docs/metrics.md) as a dict."""
        size = 8192
        while True:
            buf = ctypes.create_string_buffer(size)
            n = ctypes.c_size_t()
            rc = _capi.tfs_cache_stats_json(self._c, buf, size,
                                            ctypes.byref(n))
            if rc == -errno.ENOSPC:
                size = n.value + 1
                continue
            _check(rc)
            return json.loads(buf.raw[:n.value])

    def close(self):
        if self._pid != os.getpid():    # a fork's copy: the threads are
            self._c = self._st = None   # the parent's; leave it be
        if self._c:
            _capi.tfs_cache_close(self._c)
            self._c = None
        if self._st:
            _capi.tfs_store_close(self._st)
            self._st = None


# ---- one process's open dataset ----

class _Sample:
    """A reusable C sample handle and the buffers to describe it."""

    def __init__(self, ds):
        self._pid = os.getpid()
        self.h = None
        h = ctypes.c_void_p()
        _check(_capi.tfs_pack_sample_create(ctypes.byref(h)))
        self.h = h
        self.ds = ds
        self._alloc(4096, 64)
        self.names_len = ctypes.c_size_t()
        self.n = ctypes.c_size_t()
        self._len_ref = ctypes.byref(self.names_len)
        self._n_ref = ctypes.byref(self.n)
        self._strs = {}                 # field name bytes -> str

    def _alloc(self, names, fields):
        self.names = ctypes.create_string_buffer(names)
        self.max_fields = fields
        self.sizes = (ctypes.c_uint64 * fields)()

    def close(self):
        if self.h and self._pid == os.getpid():
            _capi.tfs_pack_sample_close(self.h)
        self.h = None

    def _info(self):
        while True:
            rc = _capi.tfs_pack_sample_info(
                self.h, self.names, len(self.names), self._len_ref,
                self.sizes, self.max_fields, self._n_ref)
            if rc != -errno.ENOSPC:
                return _check(rc)
            self._alloc(max(len(self.names), self.names_len.value),
                        max(self.max_fields, self.n.value))

    def _str(self, b):
        s = self._strs.get(b)
        if s is None:
            s = b.decode("utf-8", "surrogateescape")
            if len(self._strs) < 4096:
                self._strs[b] = s
        return s

    def to_dict(self, decoders):
        """The filled sample as a dict; data copied once, into bytes."""
        h = self.h
        self._info()
        return self._dict(decoders, self.names_len.value, self.n.value,
                          _capi.tfs_pack_sample_shard(h),
                          _capi.tfs_pack_sample_index(h))

    def _dict(self, decoders, names_len, n_fields, shard, index):
        """The dict of the sample described (names and sizes filled)."""
        h = self.h
        parts = ctypes.string_at(self.names, names_len).split(b"\0")
        out = {"__key__": parts[0].decode("utf-8", "surrogateescape"),
               "__url__": self.ds.shard_names[shard],
               "__index__": index}
        sizes = self.sizes
        read = _capi.tfs_pack_sample_read
        for i in range(n_fields):
            size = sizes[i]
            if size:
                data = _new_bytes(None, size)
                _check(read(h, i, data, size))
            else:
                data = b""
            field = self._str(parts[i + 1])
            if decoders:
                fn = decoders.get(field.rsplit(".", 1)[-1])
                if fn is not None:
                    data = fn(data)
            out[field] = data
        return out


class PackedDataset(_capi.Handle):
    """A packed dataset open in this process: uri is the dataset's
    directory (s3://bucket/prefix, a path, fault+..., ...).  Reads go
    through a Cache made from cache_dir and cache options (or an existing
    one: cache=...).  Not for sharing across fork: open one per process
    (ShardDataset does that for DataLoader workers)."""

    def __init__(self, uri, cache=None, cache_dir=None, verify=True,
                 store_options=None, cache_options=None):
        self._pid = os.getpid()
        self._p = self._sample = None
        self._own_cache = cache is None
        self.cache = cache or Cache(uri, cache_dir=cache_dir,
                                    store_options=store_options,
                                    **(cache_options or {}))
        self._p = None
        p = ctypes.c_void_p()
        try:
            _check(_capi.tfs_pack_create(ctypes.byref(p)))
            self._p = p
            _check(_capi.tfs_pack_set(p, b"verify", b"1" if verify
                                      else b"0"))
            _check(_capi.tfs_pack_open(p, self.cache.handle, b""))
        except BaseException:
            self.close()
            raise
        self.shard_names = [
            _capi.tfs_pack_shard_name(p, i).decode()
            for i in range(_capi.tfs_pack_shards(p))]
        self._sample = None

    def __len__(self):
        return _capi.tfs_pack_samples(self._p)

    def get(self, i, decoders=None):
        """Sample i (map-style) as a dict."""
        if self._sample is None:
            self._sample = _Sample(self)
        _check(_capi.tfs_pack_get(self._p, i, self._sample.h))
        return self._sample.to_dict(decoders)

    def iterator(self, **options):
        """An epoch iterator; options as tfs_pack_iter_set (seed,
        shuffle, shuffle_buffer, rank, world_size, worker, num_workers,
        drop_last, prefetch, prefetch_bytes); shuffle_buffer and
        prefetch_bytes left out are sized from the cache's mem_cache."""
        return _EpochIter(self, options)

    def close(self):
        if getattr(self, "_pid", None) != os.getpid():
            self._p = self._sample = None       # a fork's copy
        if getattr(self, "_sample", None) is not None:
            self._sample.close()
            self._sample = None
        if self._p:
            _capi.tfs_pack_close(self._p)
            self._p = None
        if self._own_cache and getattr(self, "cache", None) is not None:
            self.cache.close()
            self.cache = None


_ram_warned = [None]                    # the pid that warned


def _check_ram(it, shared=None):
    """Warn once per process when the cache's RAM tier is smaller than the
    stream needs: blocks would be read again (docs/pack.md).  shared: a
    ShardDataset's flag, set by the first warning of any of its loader
    workers, so that workers forked again for a later epoch stay quiet."""
    if _ram_warned[0] == os.getpid() or (shared is not None and shared[4]):
        return
    need = it.ram_need()
    have = _capi.tfs_cache_mem_limit(it.ds.cache.handle)
    if have >= need:
        return
    _ram_warned[0] = os.getpid()
    if shared is not None:
        shared[4] = 1
    warnings.warn(
        f"tierfs: the RAM tier (mem_cache {have / 2**20:.0f} MiB) is "
        f"smaller than this epoch stream needs (about {need / 2**20:.0f} "
        "MiB: the prefetch window and the blocks of the samples in the "
        f"shuffle buffer of {it.shuffle_buffer}); blocks will be read "
        "more than once: raise cache_options['mem_cache'] or lower "
        "shuffle_buffer", RuntimeWarning, stacklevel=3)


class _EpochIter:
    """tfs_pack_iter: one partition of one epoch."""

    def __init__(self, ds, options):
        self.ds = ds
        self._pid = os.getpid()
        self._it = self._sample = None
        it = ctypes.c_void_p()
        _check(_capi.tfs_pack_iter_create(ds._p, ctypes.byref(it)))
        self._it = it
        # The C reader's own warning would be a second one: this one is
        # raised through `warnings` (_check_ram).
        _check(_capi.tfs_pack_iter_set(it, b"warn_ram", b"0"))
        self.shuffle_buffer = options.get("shuffle_buffer", "auto")
        for name, value in options.items():
            if isinstance(value, bool):
                value = int(value)
            _check(_capi.tfs_pack_iter_set(it, _b(name), _b(str(value))))
        self._sample = _Sample(ds)

    def __len__(self):
        n = ctypes.c_uint64()
        _check(_capi.tfs_pack_iter_length(self._it, ctypes.byref(n)))
        return n.value

    def start(self, epoch, position=0, warn=True, shared=None):
        """Begin epoch `epoch` at `position`; warn (once per process, or
        once per `shared` flag) when the RAM tier is short of ram_need."""
        _check(_capi.tfs_pack_iter_start(self._it, epoch, position))
        if warn:
            _check_ram(self, shared)

    def ram_need(self):
        """Bytes of RAM tier this stream needs (tfs_pack_iter_ram_need):
        the prefetch window and the blocks of the samples waiting in the
        shuffle buffer."""
        return _capi.tfs_pack_iter_ram_need(self._it)

    @property
    def position(self):
        return _capi.tfs_pack_iter_position(self._it)

    def samples(self, decoders=None):
        """The epoch's samples as dicts.  One C call per sample fetches
        and describes it (tfs_pack_iter_next_info), one per field copies
        its bytes."""
        d = _capi.PackDesc()
        d_ref = ctypes.byref(d)
        got = ctypes.c_bool()
        got_ref = ctypes.byref(got)
        nxt = _capi.tfs_pack_iter_next_info
        it, s = self._it, self._sample
        while True:
            rc = nxt(it, s.h, s.names, len(s.names), s.sizes, s.max_fields,
                     d_ref, got_ref)
            if rc < 0:
                _check(rc)
            if not got.value:
                return
            names_len, n_fields = d.names_len, d.n_fields
            if not d.described:         # buffers too small: grown
                s._info()
                names_len, n_fields = s.names_len.value, s.n.value
            yield s._dict(decoders, names_len, n_fields, d.shard, d.index)

    def close(self):
        if self._pid != os.getpid():
            self._it = self._sample = None      # a fork's copy
        if self._sample is not None:
            self._sample.close()
            self._sample = None
        if self._it:
            _capi.tfs_pack_iter_close(self._it)
            self._it = None

    def __del__(self):
        self.close()


# ---- torch datasets ----

def _dist_rank_world(rank, world_size):
    if rank is not None and world_size is not None:
        return rank, world_size
    try:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            return (dist.get_rank() if rank is None else rank,
                    dist.get_world_size() if world_size is None
                    else world_size)
    except ImportError:
        pass
    return (int(os.environ.get("RANK", 0)) if rank is None else rank,
            int(os.environ.get("WORLD_SIZE", 1)) if world_size is None
            else world_size)


def _worker():
    info = _tud.get_worker_info() if _tud is not None else None
    return (info.id, info.num_workers) if info is not None else (0, 1)


def worker_positions(samples_seen, batch_size, lengths, drop_last=False):
    """Where each partition stands after the training loop received
    samples_seen samples from a DataLoader with this batch_size whose
    workers read partitions of these lengths: batches are taken
    round-robin from worker 0 on, a worker's last batch may be short (or,
    with the loader's drop_last, is dropped), and workers that ran out
    are skipped, as torch's DataLoader does.  samples_seen is the sum of
    the lengths of the batches received, short ones included (counting
    batches x batch_size would put a resume after a short batch one
    batch early).  Returns (positions, next): the partition the next
    batch would have come from, which the resumed loader's worker 0 must
    read."""
    pos = [0] * len(lengths)
    left = samples_seen
    w = 0

    def has_batch(i):
        rest = lengths[i] - pos[i]
        return rest >= batch_size if drop_last else rest > 0

    while left > 0 and any(has_batch(i) for i in range(len(lengths))):
        if has_batch(w):
            take = min(batch_size, lengths[w] - pos[w])
            pos[w] += take
            left -= take
        w = (w + 1) % len(lengths)
    return pos, w


class _Shared:
    """Epoch and resume point, shared with forked DataLoader workers
    (persistent ones included): [epoch, resume_epoch, samples, batch,
    warned (the RAM tier warning was given), the loader's drop_last]."""

    def __init__(self):
        self.v = multiprocessing.RawArray("q", [0, -1, 0, 1, 0, 0])


class _Opener:
    """Per-process PackedDataset, reopened after a fork."""

    def __init__(self, uri, kw):
        self.uri, self.kw = uri, kw
        self._ds, self._pid = None, None

    def get(self):
        if self._ds is None or self._pid != os.getpid():
            self._ds = PackedDataset(self.uri, **self.kw)
            self._pid = os.getpid()
        return self._ds

    def __getstate__(self):
        return {"uri": self.uri, "kw": self.kw, "_ds": None, "_pid": None}


class ShardDataset(_IterableBase):
    """An IterableDataset over a packed dataset (`tierfs pack` output).

    rank/world_size default to torch.distributed's (or $RANK and
    $WORLD_SIZE, or 0 and 1).  Each DataLoader worker opens its own
    reader after the fork and reads its own contiguous part of the rank's
    samples; every rank gets the same number of samples per epoch: with
    drop_last=False (default) ceil(N / world_size), the last rank's short
    part padded by wrapping around to the epoch's first samples; with
    drop_last=True floor(N / world_size).  Shard order is shuffled by
    (seed, epoch), samples pass a shuffle buffer of shuffle_buffer slots;
    the next `prefetch` shards are hinted to the cache.

    decode=True decodes .npy/.json/.txt/.cls (and .cls2/.index/.inx/.id)
    fields; a list picks some; decoders={ext: fn} adds or overrides.
    cache_dir shares a disk tier between workers, processes and mounts;
    cache_options go to the cache (mem_cache, block_size, ...).  Each
    process (every DataLoader worker) has its own RAM tier, 128M by
    default: a stream reads each sample once per epoch, so the RAM tier
    need only hold the prefetch window and the blocks of the samples
    still in the shuffle buffer (about 6 x shuffle_buffer x the average
    sample: 55M for 1000 samples of 9 KiB).  The defaults are sized
    from the RAM tier so that they fit it: the window is a quarter of
    mem_cache (at most 32M), shuffle_buffer=None takes as many slots as
    the rest holds (between 16 and 1000: 1000 for samples up to about
    15 KiB at 128M and 4M blocks, about 310 for 48 KiB ones); raise mem_cache for a larger
    buffer.  A RAM tier short of an explicit shuffle_buffer warns once
    per training process (the first worker to see it).  The disk tier,
    when given, keeps the dataset for the next epochs.
    """

    def __init__(self, uri, rank=None, world_size=None, shuffle=True,
                 seed=0, shuffle_buffer=None, drop_last=False, prefetch=2,
                 decode=False, decoders=None, cache_dir=None,
                 cache_options=None, store_options=None, verify=True,
                 stats_dir=None):
        self.uri = uri
        self.rank, self.world_size = _dist_rank_world(rank, world_size)
        self.options = {"seed": seed, "shuffle": shuffle,
                        "shuffle_buffer": shuffle_buffer,
                        "drop_last": drop_last, "prefetch": prefetch,
                        "rank": self.rank, "world_size": self.world_size}
        if shuffle_buffer is None:      # sized from the RAM tier
            del self.options["shuffle_buffer"]
        self.decoders = _decoder_table(decode, decoders)
        copts = {"mem_cache": "128M", "immutable": 1}
        copts.update(cache_options or {})
        self._opener = _Opener(uri, {"cache_dir": cache_dir,
                                     "cache_options": copts,
                                     "store_options": store_options,
                                     "verify": verify})
        self._shared = _Shared()
        self.stats_dir = stats_dir
        if stats_dir is None:
            self.stats_dir = tempfile.mkdtemp(prefix="tierfs-stats-")
            atexit.register(_remove_dir, self.stats_dir, os.getpid())

    # -- epochs and resumption --

    def set_epoch(self, epoch):
        """The epoch the next iteration reads (reshuffles); clears a
        resume point set for another epoch."""
        self._shared.v[0] = epoch
        if self._shared.v[1] != epoch:
            self._shared.v[1] = -1

    def resume(self, epoch, samples_seen, batch_size=1, drop_last=False):
        """Start the next iteration of epoch `epoch` after samples_seen
        samples, as received from a DataLoader with this batch_size and
        drop_last (use the loader's; batch_size 1 without batching).
        samples_seen is the sum of len() of the batches received: a
        worker's last batch of an epoch may be short, and counting it as
        a whole batch would resume one batch early.  No data is read to
        skip."""
        self._shared.v[0] = epoch
        self._shared.v[1] = epoch
        self._shared.v[2] = samples_seen
        self._shared.v[3] = max(1, batch_size)
        self._shared.v[5] = 1 if drop_last else 0

    @property
    def epoch(self):
        return self._shared.v[0]

    def _iter_options(self, worker, workers):
        opts = dict(self.options)
        opts.update(worker=worker, num_workers=workers)
        return opts

    def __len__(self):
        """Samples per rank per epoch."""
        n = len(self._opener.get())
        w = self.world_size
        return n // w if self.options["drop_last"] else math.ceil(n / w)

    def _partition(self, ds, worker, workers):
        """(partition, start position) for this loader worker.  A resumed
        epoch continues each partition where it stopped, and rotates the
        workers' partitions so that the loader, which asks worker 0
        first, gets the batches in the order the first run had them."""
        v = self._shared.v
        if v[1] != v[0] or v[2] == 0:
            return worker, 0
        lengths = []
        for w in range(workers):
            it = ds.iterator(**self._iter_options(w, workers))
            lengths.append(len(it))
            it.close()
        pos, first = worker_positions(v[2], v[3], lengths, bool(v[5]))
        part = (worker + first) % workers
        return part, pos[part]

    def __iter__(self):
        ds = self._opener.get()
        worker, workers = _worker()
        part, position = self._partition(ds, worker, workers)
        it = ds.iterator(**self._iter_options(part, workers))
        # One warning per training process: the loader's worker 0 checks,
        # and the shared flag keeps the next epochs' workers quiet.
        it.start(self._shared.v[0], position, warn=worker == 0,
                 shared=self._shared.v)
        stats = _StatsWriter(self.stats_dir, self.rank, ds.cache)
        try:
            for sample in it.samples(self.decoders):
                yield sample
                stats.maybe_write()
        finally:
            stats.write()
            it.close()

    # -- cache statistics of every process reading this dataset --

    def cache_stats(self):
        """Cache counters summed over the processes (workers included)
        that read this dataset for this rank."""
        total = {}
        for path in glob.glob(os.path.join(self.stats_dir,
                                           f"stats-{self.rank}-*.json")):
            try:
                with open(path) as f:
                    _add_stats(total, json.load(f))
            except (OSError, ValueError):
                continue
        ds = self._opener._ds
        if ds is not None and self._opener._pid == os.getpid():
            mine = os.path.join(self.stats_dir,
                                f"stats-{self.rank}-{os.getpid()}.json")
            if not os.path.exists(mine):
                _add_stats(total, ds.cache.stats())
        return total


class ShardIndexDataset(_MapBase):
    """Map-style access to a packed dataset: len() samples, [i] is
    sample i as a dict (same options as ShardDataset's reader).  Works
    with any sampler (DistributedSampler, ...); each process opens its
    own reader on first use."""

    def __init__(self, uri, decode=False, decoders=None, cache_dir=None,
                 cache_options=None, store_options=None, verify=True):
        copts = {"mem_cache": "1G", "immutable": 1}
        copts.update(cache_options or {})
        self.decoders = _decoder_table(decode, decoders)
        self._opener = _Opener(uri, {"cache_dir": cache_dir,
                                     "cache_options": copts,
                                     "store_options": store_options,
                                     "verify": verify})

    def __len__(self):
        return len(self._opener.get())

    def __getitem__(self, i):
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self._opener.get().get(i, self.decoders)

    def cache_stats(self):
        ds = self._opener._ds
        return ds.cache.stats() if ds is not None else {}


def _remove_dir(path, pid):
    if os.getpid() == pid:
        shutil.rmtree(path, ignore_errors=True)


def _add_stats(total, stats):
    """Add one process's cache figures into total: the counters, and the
    gauges that add up across processes (bytes and counts held); not the
    latency quantiles, the uptime or the strings.  The types and units
    come from the figures' own "meta" (docs/metrics.md)."""
    meta = stats.get("meta", {})
    for k, v in stats.items():
        kind, unit = meta.get(k, ("gauge", "none"))
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            continue
        if kind == "counter" or (kind == "gauge" and unit in ("bytes",
                                                              "count")):
            total[k] = total.get(k, 0) + v


class _StatsWriter:
    """A worker's cache counters, written where the main process (the
    StallMeter) can sum them: stats_dir/stats-RANK-PID.json."""

    def __init__(self, stats_dir, rank, cache):
        self.path = os.path.join(stats_dir, f"stats-{rank}-{os.getpid()}"
                                 ".json")
        self.cache = cache
        self.next = time.monotonic() + 0.5

    def maybe_write(self):
        if time.monotonic() >= self.next:
            self.write()

    def write(self):
        self.next = time.monotonic() + 0.5
        try:
            tmp = self.path + ".tmp"
            with open(tmp, "w") as f:
                json.dump(self.cache.stats(), f)
            os.replace(tmp, self.path)
        except OSError:
            pass


# ---- the stall meter ----

class StallMeter:
    """Wraps a loader and the training loop around it: per step the time
    the loop waited for data and the time it computed (from handing out
    a batch to asking for the next); per epoch the data-stall share
    (wait / (wait + compute)), the same without the first batch (whose
    wait is mostly the workers starting), samples/s and the cache hit
    rate from the dataset's cache counters.  Warns when the stall share
    passes warn_at (20%).

        meter = StallMeter(loader)
        for epoch in range(3):
            for batch in meter.epoch(epoch):     # calls set_epoch
                step(batch)
        print(meter.report())

    stats: a callable returning cache counters (default: the loader's
    dataset's cache_stats); log: where summaries go (print; None: quiet).
    """

    def __init__(self, loader, warn_at=0.20, stats=None, log=print,
                 batch_len=None):
        self.loader = loader
        self.warn_at = warn_at
        ds = getattr(loader, "dataset", None)
        self.stats = stats or getattr(ds, "cache_stats", None)
        self.log = log
        self.batch_len = batch_len or _batch_len
        self.steps = []                 # (epoch, step, wait_s, compute_s)
        self.epochs = []                # one summary dict per epoch

    def epoch(self, epoch=None):
        """Iterate the loader once, timing every step."""
        ds = getattr(self.loader, "dataset", None)
        if epoch is not None and hasattr(ds, "set_epoch"):
            ds.set_epoch(epoch)
        epoch = len(self.epochs) if epoch is None else epoch
        before = self._stats()
        wait = compute = 0.0
        samples = steps = 0
        t_start = time.perf_counter()
        t_out = None
        it = iter(self.loader)
        while True:
            t0 = time.perf_counter()
            if t_out is not None:
                compute += t0 - t_out
                self.steps[-1][3] = t0 - t_out
            try:
                batch = next(it)
            except StopIteration:
                break
            t1 = time.perf_counter()
            wait += t1 - t0
            self.steps.append([epoch, steps, t1 - t0, 0.0])
            steps += 1
            samples += self.batch_len(batch)
            t_out = time.perf_counter()
            yield batch
        self._summary(epoch, steps, samples, wait, compute,
                      time.perf_counter() - t_start, before)

    def run(self, step_fn, epochs=1):
        """step_fn(batch) for every batch of `epochs` epochs; the
        summaries."""
        for e in range(epochs):
            for batch in self.epoch(e):
                step_fn(batch)
        return self.epochs

    def _stats(self):
        try:
            return self.stats() if self.stats else None
        except Exception:               # counters are best effort
            return None

    def _summary(self, epoch, steps, samples, wait, compute, wall, before):
        after = self._stats()
        hit = None
        if before is not None and after is not None:
            read = after.get("read_bytes", 0) - before.get("read_bytes", 0)
            hits = sum(after.get(k, 0) - before.get(k, 0)
                       for k in ("hit_bytes_ram", "hit_bytes_disk"))
            hit = hits / read if read > 0 else None
        busy = wait + compute
        first = self.steps[-steps][2] if steps else 0.0
        steady = busy - first
        s = {"epoch": epoch, "steps": steps, "samples": samples,
             "wait_s": wait, "first_wait_s": first,
             "compute_s": compute, "wall_s": wall,
             "stall": wait / busy if busy > 0 else 0.0,
             "stall_after_first": (wait - first) / steady if steady > 0
             else 0.0,
             "samples_per_s": samples / wall if wall > 0 else 0.0,
             "hit_rate": hit}
        self.epochs.append(s)
        if self.log:
            self.log(self.format(s))
        if s["stall"] > self.warn_at:
            msg = (f"tierfs: epoch {epoch}: data stall {s['stall']:.0%} of "
                   f"step time (over {self.warn_at:.0%}): the input "
                   "pipeline is the bottleneck (storage, cache or decoding)")
            warnings.warn(msg, RuntimeWarning, stacklevel=3)
            if self.log:
                self.log("WARNING: " + msg)

    @staticmethod
    def format(s):
        hit = "n/a" if s["hit_rate"] is None else f"{s['hit_rate']:.1%}"
        return (f"epoch {s['epoch']}: {s['steps']} steps, {s['samples']} "
                f"samples in {s['wall_s']:.2f} s "
                f"({s['samples_per_s']:.0f}/s); data wait "
                f"{s['wait_s']:.2f} s (first batch "
                f"{s['first_wait_s']:.2f} s), compute "
                f"{s['compute_s']:.2f} s, stall {s['stall']:.1%} "
                f"({s['stall_after_first']:.1%} after the first batch); "
                f"cache hit rate {hit}")

    def report(self, every=1):
        """Per-step data wait vs compute (ms) and the epoch summaries,
        as text; every=N shows every Nth step."""
        lines = ["epoch  step   wait_ms  compute_ms"]
        for e, step, w, c in self.steps:
            if step % every == 0:
                lines.append(f"{e:5d} {step:5d} {w * 1e3:9.2f} "
                             f"{c * 1e3:11.2f}")
        lines += [self.format(s) for s in self.epochs]
        return "\n".join(lines)


def _batch_len(batch):
    """Samples in a batch: a dict of lists/tensors, a list, or 1."""
    if isinstance(batch, dict) and isinstance(batch.get("__key__"), str):
        return 1                        # one sample, not batched
    if isinstance(batch, dict):
        for v in batch.values():
            try:
                return len(v)
            except TypeError:
                continue
        return 1
    if isinstance(batch, (list, tuple)):
        return len(batch)
    try:
        return len(batch)
    except TypeError:
        return 1
