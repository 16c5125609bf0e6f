# SPDX-License-Identifier: MIT
"""Every ctypes prototype of libtierfs, declared once.

The library is found through $TIERFS_LIB, then next to this package (an
installed tree or the source tree's build/), then the system's library
path.  Its ABI version is checked at load.
"""
import ctypes
import ctypes.util
import os

ABI_VERSION = 2
VERSION_MAX = 80


class TierfsError(OSError):
    """A libtierfs call failed: .rc is the library's status (negative),
    .errno the matching errno, .detail the library's detail text, str()
    the message and the detail; .retryable whether the same call may
    succeed if repeated (timeouts, resets, throttling, 5xx).  check()
    raises the subclass that matches rc (table in docs/ckpt.md)."""

    def __init__(self, rc, message, detail=""):
        self.rc = rc
        self.detail = detail
        self.message = message
        text = f"{message} ({detail})" if detail else message
        super().__init__(_lib.tfs_errno(rc) if _lib else 0, text)

    @property
    def retryable(self):
        return bool(tfs_err_is_retryable(self.rc)) if _lib else False

    def __reduce__(self):
        return (type(self), (self.rc, self.message, self.detail))


class TierfsTimeoutError(TierfsError, TimeoutError):
    """The store (or a deadline) timed out: -ETIMEDOUT.  Retryable."""


class TierfsNotFoundError(TierfsError, FileNotFoundError):
    """No such object, checkpoint or step: -ENOENT / -ENOTDIR."""


class TierfsPermissionError(TierfsError, PermissionError):
    """The store refused (403: -EACCES, -EPERM), no credentials
    (TFS_ENOCRED), or a path escaping the store root (TFS_EESCAPE)."""


class TierfsCorruptError(TierfsError, ValueError):
    """Stored bytes are not what was written: a checksum mismatch
    (TFS_ECORRUPT) or a damaged file (TFS_EFORMAT: truncated shard, bad
    header or index).  Also a ValueError: the data is bad, retrying the
    same read does not help."""


class TierfsNoSpaceError(TierfsError):
    """No room: -ENOSPC (local staging or cache full) or -EDQUOT."""


def _error_codes():
    import errno as _e
    return {
        -_e.ETIMEDOUT: TierfsTimeoutError,
        -_e.ENOENT: TierfsNotFoundError, -_e.ENOTDIR: TierfsNotFoundError,
        -_e.EACCES: TierfsPermissionError, -_e.EPERM: TierfsPermissionError,
        -20011: TierfsPermissionError,      # TFS_ENOCRED
        -20007: TierfsPermissionError,      # TFS_EESCAPE
        -20002: TierfsCorruptError,         # TFS_ECORRUPT
        -20014: TierfsCorruptError,         # TFS_EFORMAT
        -_e.ENOSPC: TierfsNoSpaceError, -_e.EDQUOT: TierfsNoSpaceError,
    }


_ERROR_CLASSES = _error_codes()


def error_class(rc):
    """The TierfsError subclass check() raises for rc."""
    return _ERROR_CLASSES.get(rc, TierfsError)


class Stat(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_uint64),
        ("mtime_ns", ctypes.c_int64),
        ("version", ctypes.c_char * VERSION_MAX),
    ]


class ListEntry(ctypes.Structure):
    _fields_ = [("key", ctypes.c_char_p), ("st", Stat)]


class ListPage(ctypes.Structure):
    _fields_ = [
        ("entries", ctypes.POINTER(ListEntry)),
        ("n_entries", ctypes.c_size_t),
        ("prefixes", ctypes.POINTER(ctypes.c_char_p)),
        ("n_prefixes", ctypes.c_size_t),
        ("next_token", ctypes.c_char_p),
    ]


def _candidates():
    env = os.environ.get("TIERFS_LIB")
    if env:
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    for rel in ("../../../libtierfs.so.0", "../../../libtierfs.so",
                "../../build/libtierfs.so"):
        yield os.path.normpath(os.path.join(here, rel))
    found = ctypes.util.find_library("tierfs")
    if found:
        yield found


def _load():
    tried = []
    for path in _candidates():
        if os.path.sep in path and not os.path.exists(path):
            tried.append(path)
            continue
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{path} ({e})")
    raise ImportError("tierfs: cannot find libtierfs.so; set TIERFS_LIB "
                      "(tried: " + ", ".join(tried) + ")")


_lib = None
_lib = _load()

_P = ctypes.c_void_p
_S = ctypes.c_char_p
_I = ctypes.c_int
_SZ = ctypes.c_size_t
_U64 = ctypes.c_uint64


def _proto(name, restype, *argtypes):
    fn = getattr(_lib, name)
    fn.restype = restype
    fn.argtypes = list(argtypes)
    return fn


tfs_abi_version = _proto("tfs_abi_version", _I)
tfs_version = _proto("tfs_version", _S)
tfs_strerror = _proto("tfs_strerror", _S, _I)
tfs_errname = _proto("tfs_errname", _S, _I)
tfs_errdetail = _proto("tfs_errdetail", _S)
tfs_errno = _proto("tfs_errno", _I, _I)
tfs_err_is_retryable = _proto("tfs_err_is_retryable", _I, _I)

tfs_store_open = _proto("tfs_store_open", _I, ctypes.POINTER(_P), _S, _S)
tfs_store_close = _proto("tfs_store_close", None, _P)
tfs_store_stat = _proto("tfs_store_stat", _I, _P, _S, ctypes.POINTER(Stat))
tfs_store_read = _proto("tfs_store_read", _I, _P, _S, _P, _SZ, _U64, _S,
                        ctypes.POINTER(_SZ))
tfs_store_put = _proto("tfs_store_put", _I, _P, _S, _P, _SZ,
                       ctypes.POINTER(Stat))
tfs_store_put_file = _proto("tfs_store_put_file", _I, _P, _S, _S,
                            ctypes.POINTER(Stat))
tfs_store_remove = _proto("tfs_store_remove", _I, _P, _S)
tfs_store_list = _proto("tfs_store_list", _I, _P, _S, _S, _S, _SZ,
                        ctypes.POINTER(ListPage))
tfs_list_page_cleanup = _proto("tfs_list_page_cleanup", None,
                               ctypes.POINTER(ListPage))

# The cache and packed datasets (cache.h, pack.h): python/tierfs/data.py.
tfs_cache_create = _proto("tfs_cache_create", _I, ctypes.POINTER(_P))
tfs_cache_set = _proto("tfs_cache_set", _I, _P, _S, _S)
tfs_cache_open = _proto("tfs_cache_open", _I, _P, _P)
tfs_cache_close = _proto("tfs_cache_close", None, _P)
tfs_cache_stats_json = _proto("tfs_cache_stats_json", _I, _P, _P, _SZ,
                              ctypes.POINTER(_SZ))
tfs_cache_mem_limit = _proto("tfs_cache_mem_limit", _U64, _P)
tfs_pack_create = _proto("tfs_pack_create", _I, ctypes.POINTER(_P))
tfs_pack_set = _proto("tfs_pack_set", _I, _P, _S, _S)
tfs_pack_open = _proto("tfs_pack_open", _I, _P, _P, _S)
tfs_pack_close = _proto("tfs_pack_close", None, _P)
tfs_pack_samples = _proto("tfs_pack_samples", _U64, _P)
tfs_pack_shards = _proto("tfs_pack_shards", _SZ, _P)
tfs_pack_shard_name = _proto("tfs_pack_shard_name", _S, _P, _SZ)
tfs_pack_sample_create = _proto("tfs_pack_sample_create", _I,
                                ctypes.POINTER(_P))
tfs_pack_sample_close = _proto("tfs_pack_sample_close", None, _P)
tfs_pack_get = _proto("tfs_pack_get", _I, _P, _U64, _P)
tfs_pack_sample_index = _proto("tfs_pack_sample_index", _U64, _P)
tfs_pack_sample_shard = _proto("tfs_pack_sample_shard", _SZ, _P)
tfs_pack_sample_info = _proto("tfs_pack_sample_info", _I, _P, _P, _SZ,
                              ctypes.POINTER(_SZ),
                              ctypes.POINTER(_U64), _SZ,
                              ctypes.POINTER(_SZ))
tfs_pack_sample_read = _proto("tfs_pack_sample_read", _I, _P, _SZ, _P, _SZ)
tfs_pack_iter_create = _proto("tfs_pack_iter_create", _I, _P,
                              ctypes.POINTER(_P))
tfs_pack_iter_close = _proto("tfs_pack_iter_close", None, _P)
tfs_pack_iter_set = _proto("tfs_pack_iter_set", _I, _P, _S, _S)
tfs_pack_iter_start = _proto("tfs_pack_iter_start", _I, _P, _U64, _U64)
tfs_pack_iter_length = _proto("tfs_pack_iter_length", _I, _P,
                              ctypes.POINTER(_U64))
tfs_pack_iter_position = _proto("tfs_pack_iter_position", _U64, _P)
tfs_pack_iter_ram_need = _proto("tfs_pack_iter_ram_need", _U64, _P)
tfs_pack_iter_next = _proto("tfs_pack_iter_next", _I, _P, _P,
                            ctypes.POINTER(ctypes.c_bool))


class PackDesc(ctypes.Structure):
    _fields_ = [("index", _U64), ("shard", _U64), ("names_len", _U64),
                ("n_fields", _U64), ("described", _U64)]


tfs_pack_iter_next_info = _proto("tfs_pack_iter_next_info", _I, _P, _P, _P,
                                 _SZ, _P, _SZ, ctypes.POINTER(PackDesc),
                                 ctypes.POINTER(ctypes.c_bool))

# Checkpoints (ckpt.h): python/tierfs/ckpt.py, tierfs.torch.
_UI = ctypes.c_uint
_B = ctypes.c_bool
_I64 = ctypes.c_int64
_PI64 = ctypes.POINTER(ctypes.c_int64)
_PU64 = ctypes.POINTER(_U64)
_PSZ = ctypes.POINTER(_SZ)
_PS = ctypes.POINTER(_S)


class CkptSummary(ctypes.Structure):
    _fields_ = [
        ("step", _U64),
        ("world_size", _UI),
        ("total_size", _U64),
        ("file_bytes", _U64),
        ("n_files", _SZ),
        ("n_tensors", _SZ),
        ("created_ns", _I64),
    ]


CKPT_MAX_DIMS = 16
CKPT_STEP_LATEST = -1
CKPT_LIST_INCOMPLETE = 0x1

tfs_ckpt_writer_create = _proto("tfs_ckpt_writer_create", _I,
                                ctypes.POINTER(_P))
tfs_ckpt_writer_set = _proto("tfs_ckpt_writer_set", _I, _P, _S, _S)
tfs_ckpt_writer_open = _proto("tfs_ckpt_writer_open", _I, _P, _S, _U64)
tfs_ckpt_writer_add = _proto("tfs_ckpt_writer_add", _I, _P, _S, _S, _I,
                             _PI64, _P, _SZ)
tfs_ckpt_writer_add_slice = _proto("tfs_ckpt_writer_add_slice", _I, _P, _S,
                                   _S, _I, _PI64, _PI64, _PI64, _P, _SZ)
tfs_ckpt_writer_save = _proto("tfs_ckpt_writer_save", _I, _P)
tfs_ckpt_writer_wait = _proto("tfs_ckpt_writer_wait", _I, _P, _I64)
tfs_ckpt_writer_is_done = _proto("tfs_ckpt_writer_is_done", _B, _P)
tfs_ckpt_writer_progress = _proto("tfs_ckpt_writer_progress", None, _P,
                                  _PU64, _PU64)
tfs_ckpt_writer_close = _proto("tfs_ckpt_writer_close", None, _P)

tfs_ckpt_reader_create = _proto("tfs_ckpt_reader_create", _I,
                                ctypes.POINTER(_P))
tfs_ckpt_reader_set = _proto("tfs_ckpt_reader_set", _I, _P, _S, _S)
tfs_ckpt_reader_open = _proto("tfs_ckpt_reader_open", _I, _P, _S, _I64)
tfs_ckpt_reader_index = _proto("tfs_ckpt_reader_index", _I, _P, _PS, _PSZ)
tfs_ckpt_reader_info = _proto("tfs_ckpt_reader_info", None, _P, _PU64,
                              ctypes.POINTER(_UI), _PU64, _PSZ, _PSZ)
tfs_ckpt_reader_tensor = _proto("tfs_ckpt_reader_tensor", _I, _P, _SZ, _PS,
                                _PS, ctypes.POINTER(_I), _PI64, _PU64)
tfs_ckpt_reader_find = _proto("tfs_ckpt_reader_find", _I, _P, _S, _PSZ)
tfs_ckpt_reader_slices = _proto("tfs_ckpt_reader_slices", _I, _P, _SZ, _PSZ)
tfs_ckpt_reader_slice = _proto("tfs_ckpt_reader_slice", _I, _P, _SZ, _SZ,
                               _PI64, _PI64)
tfs_ckpt_reader_file = _proto("tfs_ckpt_reader_file", _I, _P, _SZ, _PS,
                              ctypes.POINTER(_UI), _PU64,
                              ctypes.POINTER(_B))
tfs_ckpt_reader_extra = _proto("tfs_ckpt_reader_extra", _I, _P, _UI, _PS)
tfs_ckpt_reader_read = _proto("tfs_ckpt_reader_read", _I, _P, _SZ, _P, _SZ)
tfs_ckpt_reader_read_box = _proto("tfs_ckpt_reader_read_box", _I, _P, _SZ,
                                  _I, _PI64, _PI64, _P, _SZ)
tfs_ckpt_reader_submit = _proto("tfs_ckpt_reader_submit", _I, _P, _SZ, _I,
                                _PI64, _PI64, _P, _SZ, _PU64)
tfs_ckpt_reader_start = _proto("tfs_ckpt_reader_start", _I, _P)
tfs_ckpt_reader_wait = _proto("tfs_ckpt_reader_wait", _I, _P, _U64, _I64)
tfs_ckpt_reader_is_ready = _proto("tfs_ckpt_reader_is_ready", _B, _P, _U64)
tfs_ckpt_reader_verify = _proto("tfs_ckpt_reader_verify", _I, _P, _PU64)
tfs_ckpt_reader_close = _proto("tfs_ckpt_reader_close", None, _P)

tfs_ckpt_list = _proto("tfs_ckpt_list", _I, _S, _S, _UI, _PU64, _SZ, _PSZ)
tfs_ckpt_latest = _proto("tfs_ckpt_latest", _I, _S, _S, _PU64)
tfs_ckpt_summary = _proto("tfs_ckpt_summary", _I, _S, _S, _U64,
                          ctypes.POINTER(CkptSummary))
tfs_ckpt_remove = _proto("tfs_ckpt_remove", _I, _S, _S, _U64)
tfs_ckpt_gc = _proto("tfs_ckpt_gc", _I, _S, _S, _UI, _B, _PSZ)
tfs_ckpt_split_uri = _proto("tfs_ckpt_split_uri", _I, _S, _P, _SZ,
                            ctypes.POINTER(_I64))

if tfs_abi_version() != ABI_VERSION:
    raise ImportError(f"tierfs: libtierfs ABI {tfs_abi_version()} is not "
                      f"the {ABI_VERSION} this package was written for")


def encode(s):
    """s as a char * argument: a str in UTF-8; bytes (and None, for
    NULL) as they are."""
    return s.encode("utf-8") if isinstance(s, str) else s


def check(rc):
    """Raise TierfsError for a failed call; return rc otherwise."""
    if rc < 0:
        detail = tfs_errdetail().decode("utf-8", "replace")
        raise error_class(rc)(rc, tfs_strerror(rc).decode(), detail)
    return rc


class Handle:
    """A Python object owning C handles, released by its close(): usable
    in a with statement, and closed when collected."""

    def close(self):
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()
