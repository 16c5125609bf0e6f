# SPDX-License-Identifier: MIT
"""Checkpoints of named tensors, over libtierfs (ctypes; no torch needed).

A checkpoint root URI holds one directory per step with each rank's
safetensors shards, per-rank markers and model.safetensors.index.json,
written last (the commit); ROOT/latest names the newest.  tierfs.torch
builds on this module; use it directly for raw buffers:

    w = Writer("s3://b/run", step=100, rank=0, world_size=1)
    w.add("w", "F32", (2, 3), address, nbytes)   # borrowed until save()
    w.save()                                     # snapshot, then upload
    w.wait()                                     # committed

    with Reader("s3://b/run") as r:              # the latest checkpoint
        data = r.read(r.find("w"))

Failures raise TierfsError.  Background work runs on library threads;
Python only polls or blocks (the GIL is released while it blocks).
"""
import ctypes
import errno
import os
import re

from . import _capi
from ._capi import TierfsError, encode as _b

__all__ = ["Writer", "Reader", "TensorInfo", "split_uri", "step_uri",
           "list_steps", "recover", "LEVELS", "latest", "read_latest",
           "summary", "remove", "gc", "group_options", "TierfsError"]

_URI_MAX = 4096

# Durability levels (ckpt.h TFS_CKPT_LEVEL_*); "peer" needs a group.
LEVELS = {"none": 0, "local": 1, "peer": 2, "store": 3}
_LEVEL_NAMES = {v: k for k, v in LEVELS.items()}
_wr_level = _capi._proto("tfs_ckpt_writer_level", _capi._I, _capi._P)
_wr_wait_level = _capi._proto("tfs_ckpt_writer_wait_level", _capi._I,
                              _capi._P, _capi._I, ctypes.c_int64)
_wr_recover = _capi._proto("tfs_ckpt_writer_recover", _capi._I, _capi._P,
                           _capi._S, ctypes.POINTER(ctypes.c_uint64))


def _set_all(setter, h, pairs):
    """setter(h, name, value) (tfs_ckpt_writer_set, tfs_ckpt_reader_set)
    for each (name, value) whose value is not None: bools as 1/0, bytes
    as they are, the rest as str() gives them."""
    for name, value in pairs:
        if value is None:
            continue
        if isinstance(value, bool):
            value = "1" if value else "0"
        elif not isinstance(value, bytes):
            value = str(value)
        _capi.check(setter(h, _b(name), _b(value)))


def group_options(group):
    """The writer options of the peer level from group: a dict with
    "members" (the member list's path, or "dns:NAME:PORT"),
    "secret_file" (mode 0600) and optionally "self" ("HOST:PORT", this
    node's line: its mount serves it; default: every member at an address
    of this machine is this node), "tls_ca", "timeout_s".  None: from
    $TIERFS_GROUP, $TIERFS_GROUP_SECRET_FILE and $TIERFS_GROUP_SELF when
    $TIERFS_GROUP is set, else no peer level.  False: none."""
    if group is False:
        return []
    if group is None:
        if not os.environ.get("TIERFS_GROUP"):
            return []
        group = {"members": os.environ["TIERFS_GROUP"],
                 "secret_file": os.environ.get("TIERFS_GROUP_SECRET_FILE"),
                 "self": os.environ.get("TIERFS_GROUP_SELF") or None}
    if not isinstance(group, dict) or not group.get("members"):
        raise ValueError("group must be a dict with 'members' and "
                         f"'secret_file', not {group!r}")
    unknown = set(group) - {"members", "secret_file", "self", "tls_ca",
                            "timeout_s"}
    if unknown:
        raise ValueError(f"group: unknown keys {sorted(unknown)}")
    t = group.get("timeout_s")
    return [("group", group["members"]),
            ("group_secret_file", group.get("secret_file")),
            ("group_self", group.get("self")),
            ("group_tls_ca", group.get("tls_ca")),
            ("group_timeout_ms", None if t is None else int(t * 1000))]


def _dims(v):
    v = [int(x) for x in v]
    if len(v) > _capi.CKPT_MAX_DIMS:
        raise ValueError(f"more than {_capi.CKPT_MAX_DIMS} dimensions")
    return (ctypes.c_int64 * max(1, len(v)))(*v), len(v)


def split_uri(uri):
    """"ROOT/step-N" (or ROOT/N, ROOT/latest) -> (ROOT, N or None)."""
    buf = ctypes.create_string_buffer(_URI_MAX)
    step = ctypes.c_int64()
    _capi.check(_capi.tfs_ckpt_split_uri(_b(uri), buf, _URI_MAX,
                                         ctypes.byref(step)))
    return buf.value.decode(), (step.value if step.value >= 0 else None)


def step_uri(root, step):
    """ROOT/step-N, keeping a query ("?latency_ms=2") at the end."""
    base, sep, query = root.partition("?")
    return f"{base.rstrip('/')}/step-{int(step):06d}{sep}{query}"


def list_steps(uri, options=None, incomplete=False):
    """Committed steps under uri, ascending (or, with incomplete, the step
    directories without an index)."""
    flags = _capi.CKPT_LIST_INCOMPLETE if incomplete else 0
    n = ctypes.c_size_t(1008)           # one listing unless there are more
    while True:
        room = n.value + 16
        v = (ctypes.c_uint64 * room)()
        _capi.check(_capi.tfs_ckpt_list(_b(uri), _b(options), flags, v, room,
                                        ctypes.byref(n)))
        if n.value <= room:
            return list(v[:n.value])


def latest(uri, options=None):
    """The step `latest` names (or the newest committed), or None when
    there is none.  Store errors raise, a missing bucket too."""
    step = ctypes.c_uint64()
    rc = _capi.tfs_ckpt_latest(_b(uri), _b(options), ctypes.byref(step))
    if rc == -errno.ENOENT and not _no_bucket():    # no checkpoint yet
        return None
    _capi.check(rc)
    return step.value


def _no_bucket(detail=None):
    """Whether the last -ENOENT came from a bucket that does not exist: a
    wrong URI, an error, never "no checkpoint yet" (the S3 store gives
    -ENOENT for both; its detail names the S3 code)."""
    if detail is None:
        detail = _capi.tfs_errdetail().decode("utf-8", "replace")
    return "NoSuchBucket" in detail


def read_latest(uri, options=None):
    """The step the `latest` object under root uri names, or None when
    there is none: one read, no listing, no check that it is committed
    (the reader's index read is that check).  Store errors raise."""
    from . import Store                 # tierfs/__init__.py imports us not
    root, _ = split_uri(uri)
    try:
        with Store(root, options) as st:
            text = st.read("latest", 0, 4096)
    except _capi.TierfsNotFoundError as e:
        if _no_bucket(e.detail):
            raise
        return None
    name = text.decode("utf-8", "replace").strip()
    m = re.fullmatch(r"step-([0-9]{6,19})", name)
    if m is None:
        raise _capi.TierfsCorruptError(-20014, "invalid file format",
                                       f"'latest' does not name a step: "
                                       f"{name[:64]!r}")
    return int(m.group(1))


def summary(uri, step, options=None):
    """A dict of what step's index says (sizes, ranks, files, time)."""
    s = _capi.CkptSummary()
    _capi.check(_capi.tfs_ckpt_summary(_b(uri), _b(options), step,
                                       ctypes.byref(s)))
    return {k: getattr(s, k) for k, _ in s._fields_}


def remove(uri, step, options=None):
    _capi.check(_capi.tfs_ckpt_remove(_b(uri), _b(options), step))


def gc(uri, keep, dry_run=False, options=None):
    """Keep the newest `keep` checkpoints; returns how many steps went."""
    n = ctypes.c_size_t()
    _capi.check(_capi.tfs_ckpt_gc(_b(uri), _b(options), keep, dry_run,
                                  ctypes.byref(n)))
    return n.value


class Writer:
    """One rank's part of the checkpoint at (uri, step).  add() borrows the
    memory at each address until save() returns; save() copies it into
    local staging and starts the background upload and commit."""

    def __init__(self, uri, step, rank=0, world_size=1, shard_size=None,
                 staging_dir=None, staging_keep=None, keep_last=0,
                 upload_threads=None, upload_bw=0, timeout_s=None,
                 options=None, sync=False, run_id=None, overwrite=False,
                 extra=None, group=None):
        h = ctypes.c_void_p()
        _capi.check(_capi.tfs_ckpt_writer_create(ctypes.byref(h)))
        self._h = h
        try:
            self._setup(rank, world_size, shard_size, staging_dir,
                        staging_keep, keep_last, upload_threads, upload_bw,
                        timeout_s, options, sync, run_id, overwrite, extra)
            _set_all(_capi.tfs_ckpt_writer_set, h, group_options(group))
            _capi.check(_capi.tfs_ckpt_writer_open(h, _b(uri), step))
        except BaseException:
            self.close()
            raise
        self.uri, self.step, self.rank = uri, step, rank

    def _setup(self, rank, world_size, shard_size, staging_dir, staging_keep,
               keep_last, upload_threads, upload_bw, timeout_s, options, sync,
               run_id, overwrite, extra):
        _set_all(_capi.tfs_ckpt_writer_set, self._h, [
            ("rank", rank), ("world_size", world_size),
            ("shard_size", int(shard_size) if shard_size else None),
            ("staging_dir", staging_dir or None),
            ("staging_keep", staging_keep), ("keep_last", keep_last or 0),
            ("upload_threads", upload_threads or None),
            ("upload_bw", int(upload_bw) if upload_bw else None),
            ("timeout_ms", None if timeout_s is None
             else int(timeout_s * 1000)),
            ("options", options or None), ("sync", bool(sync)),
            ("run_id", run_id or None), ("overwrite", bool(overwrite)),
            ("extra", extra)])

    def add(self, name, dtype, shape, address, nbytes):
        dims, n = _dims(shape)
        _capi.check(_capi.tfs_ckpt_writer_add(self._h, _b(name), _b(dtype),
                                              n, dims, address, nbytes))

    def add_slice(self, name, dtype, shape, offsets, full_shape, address,
                  nbytes):
        dims, n = _dims(shape)
        offs, _ = _dims(offsets)
        full, _ = _dims(full_shape)
        _capi.check(_capi.tfs_ckpt_writer_add_slice(
            self._h, _b(name), _b(dtype), n, dims, offs, full, address,
            nbytes))

    def save(self):
        _capi.check(_capi.tfs_ckpt_writer_save(self._h))

    def level(self):
        """The durability reached so far: "none", "local" (this rank's
        staging copy finished, survives the trainer's crash), "peer" (a
        copy on another node of the cache group, survives this node's
        loss; only with group) or "store" (committed)."""
        return _LEVEL_NAMES[_wr_level(self._h)]

    def wait(self, timeout=None, level="store"):
        """Block until level is reached (True), the timeout in seconds
        passes (False), or the save fails before reaching it
        (TierfsError: a save whose local copy completed and whose upload
        failed returns True for "local" and raises for "store").
        "peer" raises TierfsError without a group (ENOTSUP), or when the
        copy to the peer failed (the store upload goes on).
        Interruptible."""
        if level not in LEVELS or level == "none":
            raise ValueError("level must be 'local', 'peer' or 'store', not "
                             f"{level!r}")
        lv = LEVELS[level]
        limit = None if timeout is None else max(0.0, float(timeout))
        while True:
            step = 0.2 if limit is None else min(0.2, limit)
            rc = _wr_wait_level(self._h, lv, int(step * 1000))
            if rc != -errno.EINPROGRESS:  # not yet
                _capi.check(rc)
                return True
            if limit is not None:
                limit -= step
                if limit <= 0:
                    return False

    def done(self):
        return bool(_capi.tfs_ckpt_writer_is_done(self._h))

    def progress(self):
        """(bytes uploaded, bytes to upload)."""
        up, total = ctypes.c_uint64(), ctypes.c_uint64()
        _capi.tfs_ckpt_writer_progress(self._h, ctypes.byref(up),
                                       ctypes.byref(total))
        return up.value, total.value

    def close(self):
        """Wait for the background commit, then free the writer."""
        if getattr(self, "_h", None):
            _capi.tfs_ckpt_writer_close(self._h)
            self._h = None

    def __del__(self):
        self.close()


def recover(uri, rank=0, world_size=1, staging_dir=None, staging_keep=None,
            keep_last=0, timeout_s=None, options=None, run_id=None,
            group=None):
    """Commit this rank's locally complete, uncommitted save under uri (a
    job killed after its staging copy was finished, before the commit),
    if rank 0's staging holds one newer than the newest checkpoint and
    every rank holds it too: every rank of the new job calls this (with
    several ranks, the same run_id, which must be given; without one
    nothing is recovered).  Returns the step committed, or None (nothing
    to recover, or the recovery did not commit: logged).  Bounded by
    timeout_s (commit_timeout, default 300 s).  Store errors raise.
    With group (group_options), a copy this node's staging lacks (a
    replaced node) is first fetched back from the members that keep this
    rank's copies: an uncommitted one is then recovered, a committed one
    read locally by the loader."""
    h = ctypes.c_void_p()
    _capi.check(_capi.tfs_ckpt_writer_create(ctypes.byref(h)))
    try:
        _set_all(_capi.tfs_ckpt_writer_set, h, [
            ("rank", rank), ("world_size", world_size),
            ("staging_dir", staging_dir or None),
            ("staging_keep", staging_keep), ("keep_last", keep_last or 0),
            ("timeout_ms", None if timeout_s is None
             else int(timeout_s * 1000)),
            ("options", options or None), ("run_id", run_id or None)]
            + group_options(group))
        step = ctypes.c_uint64()
        rc = _capi.check(_wr_recover(h, _b(uri), ctypes.byref(step)))
        return step.value if rc == 1 else None
    finally:
        _capi.tfs_ckpt_writer_close(h)


class TensorInfo:
    __slots__ = ("index", "name", "dtype", "shape", "nbytes", "n_slices")

    def __init__(self, index, name, dtype, shape, nbytes, n_slices):
        self.index, self.name, self.dtype = index, name, dtype
        self.shape, self.nbytes, self.n_slices = shape, nbytes, n_slices

    def __repr__(self):
        return (f"TensorInfo({self.name!r}, {self.dtype}, {self.shape}, "
                f"slices={self.n_slices})")


class Reader(_capi.Handle):
    """A committed checkpoint: uri is ROOT, ROOT/step-N or ROOT/latest
    (step overrides).  Reads are checked against their checksums.  index:
    the text of the index (Reader.index_text() of another process), used
    instead of reading it, checked the same way."""

    def __init__(self, uri, step=None, staging_dir=None, threads=None,
                 options=None, use_staging=True, index=None):
        root, in_uri = split_uri(uri)
        if step is None:
            step = in_uri
        h = ctypes.c_void_p()
        _capi.check(_capi.tfs_ckpt_reader_create(ctypes.byref(h)))
        self._h = h
        try:
            _set_all(_capi.tfs_ckpt_reader_set, h, [
                ("staging_dir", staging_dir or None),
                ("threads", threads or None), ("options", options or None),
                ("use_staging", bool(use_staging)), ("index", index)])
            _capi.check(_capi.tfs_ckpt_reader_open(
                h, _b(root), _capi.CKPT_STEP_LATEST if step is None
                else int(step)))
        except BaseException:
            self.close()
            raise
        self._info()

    def _info(self):
        step, ws = ctypes.c_uint64(), ctypes.c_uint()
        total, nt, nf = ctypes.c_uint64(), ctypes.c_size_t(), ctypes.c_size_t()
        _capi.tfs_ckpt_reader_info(self._h, ctypes.byref(step),
                                   ctypes.byref(ws), ctypes.byref(total),
                                   ctypes.byref(nt), ctypes.byref(nf))
        self.step, self.world_size = step.value, ws.value
        self.total_size = total.value
        self.tensors = [self._tensor(i) for i in range(nt.value)]
        self.files = [self._file(i) for i in range(nf.value)]
        self._by_name = {t.name: t for t in self.tensors}

    def _tensor(self, i):
        name, dtype = ctypes.c_char_p(), ctypes.c_char_p()
        ndim = ctypes.c_int()
        shape = (ctypes.c_int64 * _capi.CKPT_MAX_DIMS)()
        nbytes, ns = ctypes.c_uint64(), ctypes.c_size_t()
        _capi.check(_capi.tfs_ckpt_reader_tensor(
            self._h, i, ctypes.byref(name), ctypes.byref(dtype),
            ctypes.byref(ndim), shape, ctypes.byref(nbytes)))
        _capi.check(_capi.tfs_ckpt_reader_slices(self._h, i, ctypes.byref(ns)))
        return TensorInfo(i, name.value.decode(), dtype.value.decode(),
                          tuple(shape[:ndim.value]), nbytes.value, ns.value)

    def _file(self, i):
        name, rank = ctypes.c_char_p(), ctypes.c_uint()
        size, local = ctypes.c_uint64(), ctypes.c_bool()
        _capi.check(_capi.tfs_ckpt_reader_file(
            self._h, i, ctypes.byref(name), ctypes.byref(rank),
            ctypes.byref(size), ctypes.byref(local)))
        return {"name": name.value.decode(), "rank": rank.value,
                "size": size.value, "local": local.value}

    def index_text(self):
        """The index this reader opened, as text: what another rank passes
        as Reader(..., index=text) to open the same checkpoint without
        reading `latest`, listing or fetching the index."""
        s, n = ctypes.c_char_p(), ctypes.c_size_t()
        _capi.check(_capi.tfs_ckpt_reader_index(self._h, ctypes.byref(s),
                                                ctypes.byref(n)))
        return ctypes.string_at(s, n.value).decode("utf-8")

    def info(self, name):
        """The TensorInfo of name (KeyError if absent)."""
        return self._by_name[name]

    def slices(self, name):
        """[(offsets, shape)] of each saved slice of name."""
        t = self.info(name)
        offs = (ctypes.c_int64 * _capi.CKPT_MAX_DIMS)()
        shp = (ctypes.c_int64 * _capi.CKPT_MAX_DIMS)()
        out = []
        for j in range(t.n_slices):
            _capi.check(_capi.tfs_ckpt_reader_slice(self._h, t.index, j, offs,
                                                    shp))
            n = len(t.shape)
            out.append((tuple(offs[:n]), tuple(shp[:n])))
        return out

    def extra(self, rank=0):
        """The JSON text rank stored with its part (or "null")."""
        s = ctypes.c_char_p()
        _capi.check(_capi.tfs_ckpt_reader_extra(self._h, rank,
                                                ctypes.byref(s)))
        return s.value.decode()

    @staticmethod
    def _box(t, offsets, sizes):
        if offsets is None:
            return 0, None, None
        o, n = _dims(offsets)
        s, _ = _dims(sizes)
        return n, o, s

    def read_into(self, name, address, nbytes, offsets=None, sizes=None):
        """Read name (or the box offsets+sizes of it) into nbytes at
        address, on this thread."""
        t = self.info(name)
        n, o, s = self._box(t, offsets, sizes)
        _capi.check(_capi.tfs_ckpt_reader_read_box(self._h, t.index, n, o, s,
                                                   address, nbytes))

    def read(self, name, offsets=None, sizes=None):
        """The bytes of name (or of a box of it)."""
        t = self.info(name)
        nbytes = t.nbytes
        if offsets is not None:
            elem = t.nbytes // max(1, _prod(t.shape))
            nbytes = elem * _prod(sizes)
        buf = ctypes.create_string_buffer(max(1, nbytes))
        self.read_into(name, buf, nbytes, offsets, sizes)
        return buf.raw[:nbytes]

    def submit(self, name, address, nbytes, offsets=None, sizes=None):
        """Queue a background read into address; returns its id.  The
        memory must stay alive until wait() returns for it."""
        t = self.info(name)
        n, o, s = self._box(t, offsets, sizes)
        rid = ctypes.c_uint64()
        _capi.check(_capi.tfs_ckpt_reader_submit(self._h, t.index, n, o, s,
                                                 address, nbytes,
                                                 ctypes.byref(rid)))
        return rid.value

    def start(self):
        """Start reading the queued items, in file order."""
        _capi.check(_capi.tfs_ckpt_reader_start(self._h))

    def wait(self, rid, timeout=None):
        """Block until read rid is done (reading it here if no thread has
        begun it); raise its error.  False if timeout seconds pass."""
        limit = None if timeout is None else max(0.0, float(timeout))
        while True:
            step = 0.2 if limit is None else min(0.2, limit)
            rc = _capi.tfs_ckpt_reader_wait(self._h, rid, int(step * 1000))
            if rc != -errno.EINPROGRESS:
                _capi.check(rc)
                return True
            if limit is not None:
                limit -= step
                if limit <= 0:
                    return False

    def ready(self, rid):
        return bool(_capi.tfs_ckpt_reader_is_ready(self._h, rid))

    def verify(self):
        """Read every shard from the store and check every checksum;
        returns the bytes read."""
        n = ctypes.c_uint64()
        _capi.check(_capi.tfs_ckpt_reader_verify(self._h, ctypes.byref(n)))
        return n.value

    def close(self):
        if getattr(self, "_h", None):
            _capi.tfs_ckpt_reader_close(self._h)
            self._h = None


def _prod(v):
    n = 1
    for x in v:
        n *= int(x)
    return n
