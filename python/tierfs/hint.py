# SPDX-License-Identifier: MIT
"""Order hints for a tierfs mount (docs/fuse.md, "Order hints").

A process that knows the order in which files of a mount will be read
tells the mount, and the mount fetches ahead across files:

    from tierfs.hint import OrderHint
    with OrderHint("/mnt/data") as h:
        h.add(["train/0001.jpg", "train/0417.jpg", ...])   # in read order
        ... read them (any process, any thread) ...

Each OrderHint is one stream (one open of MOUNT/.tierfs-prefetch); it
ends at close().  tierfs.torch.OrderedPrefetch wraps a Sampler with one.
No torch and no libtierfs needed here: this is file I/O on the mount.
"""
import json
import os

HINT_NAME = ".tierfs-prefetch"
_CHUNK = 1 << 20                        # bytes a write, whole lines


def find_mount(path):
    """The tierfs mount that holds path (a directory with the hint file)."""
    p = os.path.realpath(path)
    while True:
        if os.path.exists(os.path.join(p, HINT_NAME)):
            return p
        up = os.path.dirname(p)
        if up == p:
            raise ValueError(f"{path}: not inside a tierfs mount (no "
                             f"{HINT_NAME} above it)")
        p = up


class OrderHint:
    """One stream of order hints to the mount at `mount`."""

    def __init__(self, mount):
        self.mount = os.path.realpath(mount)
        path = os.path.join(self.mount, HINT_NAME)
        if not os.path.exists(path):
            raise ValueError(f"{mount}: not a tierfs mount (no {HINT_NAME}; "
                             f"a tierfs older than order hints?)")
        self._fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)

    def _rel(self, p):
        p = os.fspath(p)
        if os.path.isabs(p):
            rp = os.path.normpath(p)
            if not rp.startswith(self.mount + os.sep):
                raise ValueError(f"{p}: not under the mount {self.mount}")
            return rp[len(self.mount) + 1:]
        return p

    def add(self, paths):
        """Hint paths (relative to the mount, or absolute under it), in
        the order they will be opened.  May be called again: appended."""
        buf, n = [], 0
        for p in paths:
            line = self._rel(p).encode() + b"\n"
            buf.append(line)
            n += len(line)
            if n >= _CHUNK:
                self._write(b"".join(buf))
                buf, n = [], 0
        if buf:
            self._write(b"".join(buf))

    def _write(self, data):
        view = memoryview(data)
        while view:
            k = os.write(self._fd, view)
            view = view[k:]

    def state(self):
        """The stream's state: paths, consumed, issued, ahead_bytes,
        window_files, window_bytes, dropped."""
        return json.loads(os.read(self._fd, 4096))

    def close(self):
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
