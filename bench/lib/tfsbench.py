# SPDX-License-Identifier: MIT
"""Shared pieces of the demo and the benchmarks (Debian's /usr/bin/python3).

- make_dataset(): a synthetic, image-like dataset of random files;
- Mount: `tierfs mount` in the background, its stats, and unmounting;
- proc_cpu(), Busy: a process's CPU seconds, how busy all cores were;
- run_epoch(): a training-loop emulation: loader threads read samples in a
  shuffled order into a bounded queue; a trainer takes batches and
  "computes" for a fixed time per batch; the time the trainer waits for
  data is the data stall.
"""
import json
import os
import queue
import random
import subprocess
import threading
import time
import zlib

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
TIERFS = os.environ.get("TIERFS", os.path.join(TOP, "build", "tierfs"))
TICK = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid):
    """utime + stime of a process (all its threads), seconds."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


class Busy:
    """All cores' busy share between start and now (/proc/stat), and the
    share of that time some task waited for I/O (/proc/pressure/io)."""

    @staticmethod
    def _read():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        idle = v[3] + v[4]
        return sum(v) - idle, sum(v)

    @staticmethod
    def _io_us():
        try:
            with open("/proc/pressure/io") as f:
                return int(f.readline().split("total=")[1])
        except (OSError, IndexError, ValueError):
            return 0

    def __init__(self):
        self.b0, self.t0 = self._read()
        self.io0, self.w0 = self._io_us(), time.monotonic()

    def share(self):
        b, t = self._read()
        return (b - self.b0) / max(1, t - self.t0)

    def io_stall(self):
        wall = max(1e-6, time.monotonic() - self.w0)
        return (self._io_us() - self.io0) / 1e6 / wall


def make_dataset(root, n_files, min_size, max_size, seed=1):
    """n_files random files in 10 class directories; returns
    {relative path: (size, crc32)}."""
    rng = random.Random(seed)
    files = {}
    with open("/dev/urandom", "rb") as urandom:
        for i in range(n_files):
            rel = f"train/class{i % 10:02d}/img{i:06d}.jpg"
            size = rng.randint(min_size, max_size)
            data = urandom.read(size)
            path = os.path.join(root, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)
            files[rel] = (size, zlib.crc32(data))
    return files


class Mount:
    """`tierfs mount URI MNT ARGS...`, unmounted on exit."""

    def __init__(self, uri, mnt, *args, env=None):
        self.uri, self.mnt, self.args = uri, mnt, list(args)
        self.env = env

    def __enter__(self):
        os.makedirs(self.mnt, exist_ok=True)
        subprocess.run([TIERFS, "mount", self.uri, self.mnt] + self.args,
                       check=True, env=self.env)
        deadline = time.monotonic() + 30
        while not os.path.exists(os.path.join(self.mnt, ".tierfs-stats")):
            if time.monotonic() > deadline:
                raise RuntimeError(f"mount of {self.mnt} did not appear")
            time.sleep(0.05)
        return self

    def stats(self):
        with open(os.path.join(self.mnt, ".tierfs-stats")) as f:
            return json.load(f)

    def __exit__(self, *exc):
        subprocess.run([TIERFS, "umount", self.mnt], check=False)
        deadline = time.monotonic() + 30
        while is_mounted(self.mnt) and time.monotonic() < deadline:
            time.sleep(0.05)


def is_mounted(path):
    path = os.path.realpath(path)
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == path for line in f)


def read_file(path, drop_page_cache=True):
    """The whole file.  drop_page_cache evicts its pages from the kernel
    page cache afterwards (posix_fadvise DONTNEED), so the next read of it
    reaches tierfs, as with a dataset larger than RAM."""
    with open(path, "rb", buffering=0) as f:
        chunks = []
        while True:
            b = f.read(1 << 20)
            if not b:
                break
            chunks.append(b)
        if drop_page_cache:
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        return b"".join(chunks)


def run_epoch(read, names, expect, threads=8, batch=32, compute_ms=10.0,
              seed=0, hint=None):
    """One epoch in a shuffled order.  read(name) -> bytes.  Every sample
    is checked against expect[name] = (size, crc32).  hint: a tierfs
    mount to tell the order to first (order hints: the names are paths
    in it).  Returns a dict: wall, bytes, samples, stall (trainer seconds
    waiting for data), compute (trainer seconds computing)."""
    order = list(names)
    random.Random(seed).shuffle(order)
    stream = None
    if hint is not None:
        from tierfs.hint import OrderHint
        stream = OrderHint(hint)
        stream.add(order)
    q = queue.Queue(maxsize=threads * 4)
    errors = []
    cursor = iter(order)
    lock = threading.Lock()

    def loader():
        while True:
            with lock:
                name = next(cursor, None)
            if name is None:
                q.put(None)
                return
            try:
                data = read(name)
                size, crc = expect[name]
                if len(data) != size or zlib.crc32(data) != crc:
                    raise RuntimeError(f"wrong bytes for {name}")
                q.put(len(data))
            except Exception as e:              # reported after the epoch
                errors.append(e)
                q.put(0)

    t0 = time.monotonic()
    workers = [threading.Thread(target=loader) for _ in range(threads)]
    for w in workers:
        w.start()
    done = stall = compute = 0.0
    nbytes = samples = 0
    finished = 0
    while finished < threads:
        in_batch = 0
        while in_batch < batch and finished < threads:
            w0 = time.monotonic()
            item = q.get()
            stall += time.monotonic() - w0
            if item is None:
                finished += 1
                continue
            nbytes += item
            samples += 1
            in_batch += 1
        if in_batch:
            c0 = time.monotonic()
            time.sleep(compute_ms / 1000.0)
            compute += time.monotonic() - c0
    for w in workers:
        w.join()
    if stream is not None:
        stream.close()
    if errors:
        raise errors[0]
    done = time.monotonic() - t0
    return {"wall": done, "bytes": nbytes, "samples": samples,
            "stall": stall, "compute": compute}


def delta(after, before, field):
    return after.get(field, 0) - before.get(field, 0)


def hit_rate(after, before):
    read = delta(after, before, "read_bytes")
    hits = (delta(after, before, "hit_bytes_ram") +
            delta(after, before, "hit_bytes_disk"))
    return hits / read if read else 0.0
