# SPDX-License-Identifier: MIT
"""tierfs: remote shared storage that feels local to training jobs.

A thin layer over libtierfs (ctypes).  The store layer:

    import tierfs
    with tierfs.Store("s3://bucket/prefix") as st:
        st.put("a/b.bin", b"bytes")
        data = st.read("a/b.bin", offset=0, length=4)
        for key, stat in st.list("a/"):
            ...

Failures raise TierfsError (an OSError with .errno, .rc, .detail and
.retryable), as the subclass for the cause: TierfsTimeoutError (also a
TimeoutError), TierfsNotFoundError (FileNotFoundError),
TierfsPermissionError (PermissionError), TierfsCorruptError (ValueError),
TierfsNoSpaceError; docs/ckpt.md has the table.
"""
import ctypes
from collections import namedtuple

from . import _capi
from ._capi import (TierfsCorruptError, TierfsError,  # noqa: F401
                    TierfsNoSpaceError, TierfsNotFoundError,
                    TierfsPermissionError, TierfsTimeoutError,
                    encode as _b)

__all__ = ["Store", "StatResult", "TierfsError", "TierfsTimeoutError",
           "TierfsNotFoundError", "TierfsPermissionError",
           "TierfsCorruptError", "TierfsNoSpaceError", "version"]

StatResult = namedtuple("StatResult", "size mtime_ns version")


def version():
    return _capi.tfs_version().decode()


def _stat(st):
    return StatResult(st.size, st.mtime_ns, st.version.decode())


class Store(_capi.Handle):
    """An open store (s3://, file://, a path, or a wrapper chain).
    Thread-safe, like the C handle it wraps."""

    def __init__(self, uri, options=None):
        self._h = None
        h = ctypes.c_void_p()
        _capi.check(_capi.tfs_store_open(ctypes.byref(h), _b(uri),
                                         _b(options) if options else None))
        self._h = h

    def close(self):
        if self._h:
            _capi.tfs_store_close(self._h)
            self._h = None

    def stat(self, key):
        st = _capi.Stat()
        _capi.check(_capi.tfs_store_stat(self._h, _b(key), ctypes.byref(st)))
        return _stat(st)

    def read(self, key, offset=0, length=None, if_version=None):
        """Bytes [offset, offset+length) of key (to the end by default)."""
        if length is None:
            length = max(0, self.stat(key).size - offset)
        buf = ctypes.create_string_buffer(length)
        n = ctypes.c_size_t()
        _capi.check(_capi.tfs_store_read(self._h, _b(key), buf, length,
                                         offset, _b(if_version),
                                         ctypes.byref(n)))
        return buf.raw[:n.value]

    def put(self, key, data):
        data = bytes(data)
        st = _capi.Stat()
        _capi.check(_capi.tfs_store_put(self._h, _b(key), data, len(data),
                                        ctypes.byref(st)))
        return _stat(st)

    def put_file(self, key, path):
        st = _capi.Stat()
        _capi.check(_capi.tfs_store_put_file(self._h, _b(key), _b(path),
                                             ctypes.byref(st)))
        return _stat(st)

    def remove(self, key):
        _capi.check(_capi.tfs_store_remove(self._h, _b(key)))

    def list(self, prefix="", delimiter=None):
        """Yield (key, StatResult) for objects and (prefix, None) for
        common prefixes, page by page, in key order within a page."""
        token = None
        while True:
            page = _capi.ListPage()
            _capi.check(_capi.tfs_store_list(self._h, _b(prefix),
                                             _b(delimiter), token, 1000,
                                             ctypes.byref(page)))
            try:
                items = [(page.entries[i].key.decode(),
                          _stat(page.entries[i].st))
                         for i in range(page.n_entries)]
                items += [(page.prefixes[i].decode(), None)
                          for i in range(page.n_prefixes)]
                token = page.next_token
            finally:
                _capi.tfs_list_page_cleanup(ctypes.byref(page))
            yield from sorted(items, key=lambda kv: kv[0])
            if token is None:
                return
