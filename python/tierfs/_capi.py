# SPDX-License-Identifier: MIT
"""Every ctypes prototype of libtierfs, declared once.

The library is found through $TIERFS_LIB, then next to this package (an
installed tree or the source tree's build/), then the system's library
path.  Its ABI version is checked at load.
"""
import ctypes
import ctypes.util
import os

ABI_VERSION = 1
VERSION_MAX = 80


class TierfsError(OSError):
    """A libtierfs call failed: .rc is the library's status (negative),
    .errno the matching errno, str() the message and the detail."""

    def __init__(self, rc, message, detail=""):
        self.rc = rc
        self.detail = detail
        text = f"{message} ({detail})" if detail else message
        super().__init__(_lib.tfs_errno(rc) if _lib else 0, text)


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

if tfs_abi_version() != ABI_VERSION:
    raise ImportError(f"tierfs: libtierfs ABI {tfs_abi_version()} is not "
                      f"the {ABI_VERSION} this package was written for")


def check(rc):
    """Raise TierfsError for a failed call; return rc otherwise."""
    if rc < 0:
        detail = tfs_errdetail().decode("utf-8", "replace")
        raise TierfsError(rc, tfs_strerror(rc).decode(), detail)
    return rc
