# SPDX-License-Identifier: MIT
"""bench/cold-read: what a cold read through the mount costs, against the
raw store's own clients, side by side in one run (issue 17 item 4).

1. One large object (SIZE_MIB, default 1024), read cold through a fresh
   tierfs mount with `dd bs=1M`, against 8 parallel ranged curl GETs of
   another copy of the same bytes (the ceiling of one object); the two
   alternate round by round, each on a copy nobody read before.  Both
   are timed, and the CPU seconds each spends are counted: the daemon's
   (all its threads, /proc/PID/stat) and the dd's, against the curls';
   and the server's (radosgw and ceph-osd) in each.
2. Small files (N_SMALL x SMALL_KIB), one reader, cold: open + read +
   close of each through a fresh mount (the listing read untimed first),
   against one curl process GETting the same objects in turn over one
   kept-alive connection (a raw single-connection GET loop).  Also
   through a mount with verify=off (no MD5 against the ETag, on a copy
   of its own): what the plumbing costs without the end-to-end check.

3. The FUSE floor beside both: build/nullfs serving the same sizes from
   a static buffer (no store, no cache) read the same way, its daemon's
   and reader's CPU counted.  Every client here is CPU-bound on a small
   machine that also runs the server (each line prints how busy all
   cores were during the timed read), so its speed is the cores over the
   CPU seconds a GiB (or a file) costs all processes together.  The
   *FUSE ceiling* is that speed for a FUSE client that costs no more
   than the raw clients plus the floor: curls' CPU + the server's for
   them + nullfs + its reader.
   For the small files, read one after another by one reader, it is also
   at most the loop's time a file plus the floor's (the reader opens the
   next file only when it has the last).  No FUSE client can pass it on
   this machine; tierfs is reported against it beside the raw clients.
   A client that serves no byte before checking it against the ETag
   spends one MD5 a file more on the reader's path: the *verifying
   ceiling* adds the time this machine's MD5 of SMALL_KIB takes.
4. The machine's bound for the 1 GiB read, measured rather than modelled:
   the floor's dd and the 8 curls run at the same time, each on its own
   copy, timed until both are done.  A FUSE client that fetches an
   object must do at least both of those; this is what the cores give
   both with the kernel's real scheduling (the ceiling above assumes
   every core busy all the time, which the floor alone does not reach).
   tierfs does more than both (it also checksums the bytes and writes
   them to its disk tier), so it cannot pass this bound either.
5. The bound of a client that also keeps what it reads on local disk,
   measured the same way: the floor's dd and the 8 curls, timed until
   both are done, with build/keepw beside them writing the same number
   of bytes into new files beside the cache dirs as the disk tier does:
   one file a 4 MiB block, its 64 KiB chunk sums (XXH3, tierfs's code)
   in a header page, the data with O_DIRECT, renamed into place.  The
   writer is not waited for, as tierfs's read does not wait for its disk
   tier's writes (they are queued).
6. After its timed read, each round's tierfs mount reads a second cold
   object (the curls' copy, never read through tierfs), a few seconds
   later: a daemon that has read before, its block buffers touched once
   already (a fresh mount pays for fresh memory), as a long-running mount
   meets a new file.  Reported beside the first read, not instead of it.
7. Before each small round, what a new file of SMALL_KIB costs on the
   cache dirs' file system right then (300 made as the disk tier makes a
   block's file: create, write, close, rename; CPU ms a file): tierfs's
   disk tier makes one per small file it caches, on the cores the reader
   and the server share.  On ext4 without a journal (these machines) it
   ranges from 0.03 ms to ten times that, by how many files were deleted
   in the minutes before.  Since 2026-12-06 the disk tier appends small
   blocks to pack files instead (docs/cache.md, "Packs"); each small
   round also reads its files through a mount with `disk_packs=0` (a
   file a block, as before), on a copy of its own, side by side.

The 1 GiB copies are put and removed round by round (the local server
keeps objects in memory), and the small files are staged in /dev/shm:
deleting thousands of files on the cache dir's ext4 just before a round
makes that file system skip their inodes for minutes (without a journal,
on these machines), a cost that would land on tierfs's cache files and
not on the curls.

Each timed read (every tool's, and each bound's) starts on a quiet
machine: the bench first waits for a second in which the cores were at
most 15% busy and no task waited for I/O more than 5% of it (at most
30 s; the waits are printed at the end).  Without it, the first small
rounds after the 1 GiB rounds ran 0.41-0.67x the curl loop and the last
two 0.85-0.97x in one run (2026-12-06, fifteenth session): whichever
tool was timed while the machine settled paid for it.

Then, right before the read, the bench touches new memory (2 GiB before
a 1 GiB read, 512 MiB before a small round) and frees it (BACKED=0: not).
These VMs give free memory back to the hypervisor (virtio-balloon free
page reporting, /sys/module/page_reporting): a page the host took back
costs a trip through it on its next first touch, 2.4-2.7 s a GiB of
fresh memory against 0.15-0.2 s for memory the host still backs
(2026-12-06, sixteenth session), and the host takes freed memory back
from 1-3 s after the free (all of it within 10 s).  Each round puts and removes 3-4 GiB of copies on a
server that keeps them in memory, so which state a tool's fresh memory
is in (the reader's page cache, tierfs's block buffers) was a lottery,
and it moved a 1 GiB read through tierfs from 429 to 897 MB/s between
rounds.  The curls to /dev/null take almost no fresh memory; every FUSE
client fills the reader's page cache with it.  Touching first gives
every tool memory the host backs, as on a machine without the balloon;
the cost of each touch is printed (its median and range at the end),
so the state the hypervisor left is on record.

Needs a running S3 server (scripts/s3-server start; its env file in
S3_DIR), build/tierfs, build/nullfs and build/keepw.  Prints one line
per measurement with the load average, and a summary with the ratios;
JSON on the last line.
"""
import hashlib
import json
import mmap
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import tfsbench
from tfsbench import Busy, proc_cpu

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
TIERFS = os.environ.get("TIERFS", os.path.join(TOP, "build", "tierfs"))
MIB = 1 << 20
NULLFS = os.path.join(os.path.dirname(TIERFS), "nullfs")
KEEPW = os.path.join(os.path.dirname(TIERFS), "keepw")
NCPU = os.cpu_count()
GC_WAIT = 25    # s: scripts/s3-server's RGW frees deleted data within 20
SETTLE = 3      # s: a mount's disk tier writes its queued 1 GiB within 2


def log(msg):
    load = " ".join(open("/proc/loadavg").read().split()[:3])
    print(f"{msg}  [load {load}]", flush=True)


def sh(cmd, **kw):
    return subprocess.run(cmd, shell=True, check=True, text=True,
                          capture_output=True, **kw).stdout


def pids_named(*names):
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/comm") as f:
                if f.read().strip() in names:
                    out.append(int(d))
        except OSError:
            pass
    return out


class ServerCPU:
    def __init__(self):
        self.pids = pids_named("radosgw", "ceph-osd")

    def now(self):
        return sum(proc_cpu(p) for p in self.pids)


QUIET_LIMIT = 30   # s: the longest quiet() waits
QUIET_WAITS = []   # what each quiet() waited, s; None: it gave up
BACKED = os.environ.get("BACKED", "1") != "0"
TOUCH_COSTS = []   # s a GiB each back_memory() touch took


def back_memory(gib):
    """Touch gib GiB of new memory (huge pages where the kernel gives
    them: the order-9 blocks the balloon reports) and free it, so that
    the next read's fresh memory is memory the host backs; returns and
    records the seconds a GiB the touch took.  Never more than leaves
    1 GiB available (/proc/meminfo): the server keeps its objects in
    memory too."""
    with open("/proc/meminfo") as f:
        avail = next(int(line.split()[1]) << 10 for line in f
                     if line.startswith("MemAvailable:"))
    gib = min(gib, (avail - (1 << 30)) / (1 << 30))
    if gib < 0.25:
        return None
    n = int(gib * (1 << 30)) & ~(MIB - 1)
    m = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        m.madvise(mmap.MADV_HUGEPAGE)
    except (AttributeError, OSError):
        pass
    chunk = b"\1" * MIB
    t = time.monotonic()
    for off in range(0, n, MIB):
        m[off:off + MIB] = chunk
    cost = (time.monotonic() - t) / gib
    m.close()
    TOUCH_COSTS.append(cost)
    return cost


def touch_note(since):
    """The touches since index since, for a round's line."""
    t = TOUCH_COSTS[since:]
    if not t:
        return ""
    return (f"; new memory touched before each read "
            f"{min(t):.2f}-{max(t):.2f} s a GiB")


def quiet(back_gib=2.0):
    """Wait for a quiet machine before a timed read: a second in which
    the cores were at most 15% busy and no task waited for I/O more than
    5% of it.  What the step before leaves behind (a daemon's exit and
    its disk tier's last writes, the server freeing a deleted 1 GiB copy,
    a cache dir or staged files removed) otherwise lands on whichever
    tool is timed next.  At most QUIET_LIMIT s; the waits are reported.
    Then, unless BACKED=0, back_memory(back_gib) right before the read."""
    t0 = time.monotonic()
    while True:
        b = Busy()
        time.sleep(1.0)
        if b.share() <= 0.15 and b.io_stall() <= 0.05:
            QUIET_WAITS.append(time.monotonic() - t0)
            break
        if time.monotonic() - t0 >= QUIET_LIMIT:
            QUIET_WAITS.append(None)
            break
    if BACKED:
        back_memory(back_gib)


def self_cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class NullFS:
    """build/nullfs: n files of size bytes in p prefixes, answered from a
    static buffer, the kernel readahead raised as tierfs raises it."""

    def __init__(self, mnt, size, n=1, p=1):
        self.mnt, self.args = mnt, ["-s", str(size), "-r", "4096", str(n),
                                    str(p)]

    def __enter__(self):
        os.makedirs(self.mnt, exist_ok=True)
        subprocess.run([NULLFS] + self.args + [self.mnt], check=True)
        self.pid = None
        for pid in pids_named("nullfs"):
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if os.fsencode(self.mnt) in f.read().split(b"\0"):
                    self.pid = pid
        if self.pid is None:
            raise RuntimeError("nullfs: no daemon for " + self.mnt)
        return self

    def __exit__(self, *exc):
        subprocess.run(["fusermount3", "-u", self.mnt], check=False)
        deadline = time.monotonic() + 30
        while tfsbench.is_mounted(self.mnt) and time.monotonic() < deadline:
            time.sleep(0.05)


def read_big(path, pid, size, srv=None):
    """dd bs=1M of path through a mount served by pid: MB/s, the daemon's
    and the dd's CPU seconds a GiB, the server's (with srv), and how busy
    all cores were during the dd."""
    gib = size / (1 << 30)
    os.stat(path)
    quiet()
    d0, c0 = proc_cpu(pid), children_cpu()
    s0 = srv.now() if srv is not None else 0
    busy = Busy()
    t = time.monotonic()
    sh(f"dd if={path} of=/dev/null bs=1M status=none")
    wall = time.monotonic() - t
    out = {"mbps": size / wall / 1e6, "busy": busy.share(),
           "cpu_per_gib": (proc_cpu(pid) - d0) / gib,
           "reader_cpu_per_gib": (children_cpu() - c0) / gib}
    if srv is not None:
        out["server_cpu_per_gib"] = (srv.now() - s0) / gib
    return out


def create_cost(d, size, n=300):
    """CPU ms a new file of size bytes costs in a new dir d on the cache
    dirs' file system, made as the disk tier makes a block's file
    (create, write, close, rename), kept until the bench ends: what this
    file system charges per cached small file right now.  On ext4
    without a journal it depends on how much was deleted in the minutes
    before (docs/performance-cold.md)."""
    os.makedirs(d)
    buf = os.urandom(size)
    c0 = self_cpu()
    for i in range(n):
        tmp, name = os.path.join(d, f".t{i}"), os.path.join(d, f"f{i}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, buf)
        os.close(fd)
        os.rename(tmp, name)
    return (self_cpu() - c0) / n * 1e3


def read_files(names, size):
    """open + read + close of each, as the small-file reader does."""
    buf = bytearray(size | 4096)
    for p in names:
        fd = os.open(p, os.O_RDONLY)
        while os.readv(fd, [buf]) > 0:
            pass
        os.close(fd)


def walk(mnt):
    names = []
    for dp, _, fs in os.walk(mnt):
        names += [os.path.join(dp, f) for f in fs if not f.startswith(".")]
    names.sort()
    for p in names:
        os.stat(p)
    return names


def ceiling(cpu_sum, unit):
    """Units a second at cpu_sum CPU seconds a unit on all cores."""
    return NCPU / cpu_sum * unit if cpu_sum > 0 else float("inf")


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def curl_base():
    return ("curl -sS --fail --aws-sigv4 aws:amz:us-east-1:s3 --user "
            "\"$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY\" "
            "-H 'x-amz-content-sha256: UNSIGNED-PAYLOAD'")


def md5_secs(size, n=500, trials=5):
    """Seconds one MD5 of size bytes takes here (OpenSSL's, as the
    daemon's), the best of a few trials."""
    buf = os.urandom(size)
    best = float("inf")
    for _ in range(trials):
        t = time.perf_counter()
        for _ in range(n):
            hashlib.md5(buf).digest()
        best = min(best, (time.perf_counter() - t) / n)
    return best


def curl_ceiling(ep, bucket, key, size, streams=8):
    part = (size + streams - 1) // streams
    cmds = []
    for i in range(streams):
        lo, hi = i * part, min(size, (i + 1) * part) - 1
        cmds.append(f"exec {curl_base()} -H 'Range: bytes={lo}-{hi}' "
                    f"-o /dev/null {ep}/{bucket}/{key}")
    c0 = children_cpu()
    t = time.monotonic()
    procs = [subprocess.Popen(c, shell=True) for c in cmds]
    for p in procs:
        if p.wait() != 0:
            raise RuntimeError("curl failed")
    wall = time.monotonic() - t
    return wall, children_cpu() - c0


def together(path, ep, bucket, key, size, keep_dir=None):
    """The floor's dd of path and the 8 curls of key at once: seconds
    until both are done.  With keep_dir, build/keepw writes the same
    number of bytes into keep_dir beside them (started first, not timed:
    waited for after)."""
    keep = None
    quiet()
    if keep_dir is not None:
        keep = subprocess.Popen([KEEPW, keep_dir, str(size)])
    t = time.monotonic()
    dd = subprocess.Popen(["dd", f"if={path}", "of=/dev/null", "bs=1M",
                           "status=none"])
    curl_ceiling(ep, bucket, key, size)
    if dd.wait() != 0:
        raise RuntimeError("dd failed")
    wall = time.monotonic() - t
    if keep is not None and keep.wait() != 0:
        raise RuntimeError("the disk writer failed")
    return wall


def curl_loop(ep, bucket, keys, work):
    cfg = os.path.join(work, "curl.cfg")
    with open(cfg, "w") as f:
        for k in keys:
            f.write(f'url = "{ep}/{bucket}/{k}"\noutput = "/dev/null"\n')
    c0 = children_cpu()
    t = time.monotonic()
    subprocess.run(f"exec {curl_base()} -K {cfg}", shell=True, check=True)
    return time.monotonic() - t, children_cpu() - c0


class Mount(tfsbench.Mount):
    """A fresh mount with its own new cache dir (kept until the end: a
    cache deleted seconds before makes ext4 skip its freed inodes)."""

    def __init__(self, uri, mnt, cache, *args):
        super().__init__(uri, mnt, "--cache-dir", cache, *args)

    def __enter__(self):
        super().__enter__()
        self.pid = self.stats()["fuse"]["pid"]
        return self


def main():
    size_mib = int(os.environ.get("SIZE_MIB", "1024"))
    rounds = int(os.environ.get("ROUNDS", "3"))
    n_small = int(os.environ.get("N_SMALL", "2000"))
    small_kib = int(os.environ.get("SMALL_KIB", "48"))
    mount_args = os.environ.get("MOUNT_ARGS",
                                "--mem-cache 1G --immutable").split()
    ep = os.environ["AWS_ENDPOINT_URL"].split(",")[0]
    bucket = os.environ["TFS_TEST_S3_BUCKET"]
    run = f"cold{os.getpid()}"
    base = os.environ.get("BENCH_DIR", "/var/tmp")
    work = tempfile.mkdtemp(prefix="tfs-cold-", dir=base)
    mnt, cache = os.path.join(work, "mnt"), os.path.join(work, "cache")
    stage = tempfile.mkdtemp(prefix="tfs-cold-", dir="/dev/shm"
                             if os.path.isdir("/dev/shm") else work)
    res = {"size_mib": size_mib, "rounds": [], "small": []}
    srv = ServerCPU()
    try:
        src = os.path.join(stage, "big")
        sh(f"head -c {size_mib * MIB} /dev/urandom > {src}")
        small = os.path.join(stage, "small")
        os.makedirs(small)
        rels = [f"d{i % 20:02d}/f{i:05d}" for i in range(n_small)]
        for i in range(n_small):
            with open(os.path.join(small, f"f{i:05d}"), "wb") as f:
                f.write(os.urandom(small_kib << 10))
        cfg = os.path.join(work, "put.cfg")
        with open(cfg, "w") as f:
            for who in ("tierfs", "curl", "noverify", "nopacks"):
                for r in range(rounds):
                    for i, rel in enumerate(rels):
                        f.write(f'upload-file = "{small}/f{i:05d}"\n'
                                f'url = "{ep}/{bucket}/{run}/small-{r}-{who}'
                                f'/{rel}"\noutput = "/dev/null"\n')
        subprocess.run(f"exec {curl_base()} -K {cfg}", shell=True,
                       check=True)
        shutil.rmtree(small)
        size = size_mib * MIB
        gib = size / (1 << 30)
        copies = ("tierfs", "curl", "both")

        for r in range(rounds):
            touched = len(TOUCH_COSTS)
            if r > 0:
                time.sleep(GC_WAIT)     # the last round's copies freed
            for who in copies:
                sh(f"{TIERFS} put {src} s3://{bucket}/{run}/big-{r}-{who}")
            order = ("tierfs", "curl") if r % 2 == 0 else ("curl", "tierfs")
            row = {}
            for who in order + ("floor",):
                key = f"{run}/big-{r}-{who}"
                if who == "floor":
                    with NullFS(mnt, size) as m:
                        path = os.path.join(mnt, "p000", "o0000000")
                        row["floor"] = read_big(path, m.pid, size)
                        wall = together(path, ep, bucket, f"{run}/big-{r}-both",
                                        size)
                        row["bound_mbps"] = size / wall / 1e6
                        # a fourth copy, the third gone: the server's
                        # memory holds about four
                        sh(f"{TIERFS} rm s3://{bucket}/{run}/big-{r}-both")
                        sh(f"{TIERFS} put {src} "
                           f"s3://{bucket}/{run}/big-{r}-keep")
                        wall = together(path, ep, bucket, f"{run}/big-{r}-keep",
                                        size, f"{cache}-keep{r}")
                        row["keep_bound_mbps"] = size / wall / 1e6
                elif who == "curl":
                    quiet()
                    s0, busy = srv.now(), Busy()
                    wall, cpu = curl_ceiling(ep, bucket, key, size)
                    row["curl"] = {"mbps": size / wall / 1e6,
                                   "cpu_per_gib": cpu / gib,
                                   "server_cpu_per_gib":
                                   (srv.now() - s0) / gib,
                                   "busy": busy.share()}
                else:
                    with Mount(f"s3://{bucket}/{run}", mnt,
                               f"{cache}-big{r}", *mount_args) as m:
                        row["tierfs"] = read_big(
                            os.path.join(mnt, f"big-{r}-tierfs"), m.pid, size,
                            srv)
                        # then a second object, cold too, on the same
                        # mount: the pool's buffers touched once already
                        time.sleep(SETTLE)
                        row["tierfs2"] = read_big(
                            os.path.join(mnt, f"big-{r}-curl"), m.pid, size,
                            srv)
            t, c, fl = row["tierfs"], row["curl"], row["floor"]
            t2 = row["tierfs2"]
            row["fuse_ceiling_mbps"] = ceiling(
                c["cpu_per_gib"] + c["server_cpu_per_gib"] +
                fl["cpu_per_gib"] + fl["reader_cpu_per_gib"], (1 << 30) / 1e6)
            log(f"big round {r}: tierfs {t['mbps']:.0f} MB/s "
                f"(daemon {t['cpu_per_gib']:.2f} + dd "
                f"{t['reader_cpu_per_gib']:.2f} CPU s/GiB, server "
                f"{t['server_cpu_per_gib']:.2f}; cores {t['busy']:.0%}), "
                f"8 curls {c['mbps']:.0f} MB/s ({c['cpu_per_gib']:.2f} CPU "
                f"s/GiB, server {c['server_cpu_per_gib']:.2f}; cores "
                f"{c['busy']:.0%}), FUSE floor {fl['mbps']:.0f} MB/s "
                f"(daemon {fl['cpu_per_gib']:.2f} + dd "
                f"{fl['reader_cpu_per_gib']:.2f}; cores {fl['busy']:.0%}): "
                f"{t['mbps'] / c['mbps']:.2f}x the curls; FUSE ceiling "
                f"{row['fuse_ceiling_mbps']:.0f} MB/s "
                f"({row['fuse_ceiling_mbps'] / c['mbps']:.2f}x "
                f"the curls), tierfs {t['mbps'] / row['fuse_ceiling_mbps']:.2f}x"
                f" of it; measured bound (curls and floor at once) "
                f"{row['bound_mbps']:.0f} MB/s, tierfs "
                f"{t['mbps'] / row['bound_mbps']:.2f}x of it; keeping the "
                f"bytes on disk too {row['keep_bound_mbps']:.0f} MB/s, "
                f"tierfs {t['mbps'] / row['keep_bound_mbps']:.2f}x of it; "
                f"a second cold object on the same mount {t2['mbps']:.0f} "
                f"MB/s (daemon {t2['cpu_per_gib']:.2f} CPU s/GiB; cores "
                f"{t2['busy']:.0%}), {t2['mbps'] / row['bound_mbps']:.2f}x "
                f"the measured bound, "
                f"{t2['mbps'] / row['keep_bound_mbps']:.2f}x the keeping "
                f"bound{touch_note(touched)}")
            res["rounds"].append(row)
            for who in ("tierfs", "curl", "keep"):
                sh(f"{TIERFS} rm s3://{bucket}/{run}/big-{r}-{who}")

        md5_s = md5_secs(small_kib << 10)
        res["md5_ms_per_file"] = md5_s * 1e3
        for r in range(rounds):
            order = (("tierfs", "noverify", "nopacks", "curl")
                     if r % 2 == 0 else
                     ("curl", "nopacks", "noverify", "tierfs"))
            touched = len(TOUCH_COSTS)
            row = {"create_ms": create_cost(f"{cache}-probe{r}",
                                            small_kib << 10)}
            for who in order + ("floor",):
                prefix = f"{run}/small-{r}-{who}"
                if who == "floor":
                    with NullFS(mnt, small_kib << 10, n_small, 20) as m:
                        names = walk(mnt)
                        quiet(0.5)
                        d0, r0 = proc_cpu(m.pid), self_cpu()
                        busy = Busy()
                        t = time.monotonic()
                        read_files(names, small_kib << 10)
                        wall = time.monotonic() - t
                        bshare, bio = busy.share(), busy.io_stall()
                        row["floor"] = {
                            "files_s": len(names) / wall,
                            "cpu_ms_per_file":
                            (proc_cpu(m.pid) - d0) / len(names) * 1e3,
                            "reader_cpu_ms_per_file":
                            (self_cpu() - r0) / len(names) * 1e3}
                elif who == "curl":
                    keys = [f"{prefix}/{rel}" for rel in rels]
                    quiet(0.5)
                    s0, busy = srv.now(), Busy()
                    wall, cpu = curl_loop(ep, bucket, keys, work)
                    bshare, bio = busy.share(), busy.io_stall()
                    row["curl"] = {"files_s": len(keys) / wall,
                                   "cpu_ms_per_file": cpu / len(keys) * 1e3,
                                   "server_cpu_ms_per_file":
                                   (srv.now() - s0) / len(keys) * 1e3}
                else:
                    q = "?verify=off" if who == "noverify" else ""
                    extra = (["--set", "disk_packs=0"] if who == "nopacks"
                             else [])
                    with Mount(f"s3://{bucket}/{prefix}{q}", mnt,
                               f"{cache}-small{r}{who}", *mount_args,
                               *extra) as m:
                        names = walk(mnt)
                        quiet(0.5)
                        d0, s0, r0 = proc_cpu(m.pid), srv.now(), self_cpu()
                        busy = Busy()
                        t = time.monotonic()
                        read_files(names, small_kib << 10)
                        wall = time.monotonic() - t
                        bshare, bio = busy.share(), busy.io_stall()
                        row[who] = {
                            "files_s": len(names) / wall,
                            "cpu_ms_per_file":
                            (proc_cpu(m.pid) - d0) / len(names) * 1e3,
                            "reader_cpu_ms_per_file":
                            (self_cpu() - r0) / len(names) * 1e3,
                            "server_cpu_ms_per_file":
                            (srv.now() - s0) / len(names) * 1e3}
                row[who]["busy"] = bshare     # the timed part's
                row[who]["io_stall"] = bio
            t, c, fl = row["tierfs"], row["curl"], row["floor"]
            # one reader, one file after another: a client that cannot
            # know the next file spends the GET's time and the FUSE
            # path's in turn, whatever the cores allow
            row["fuse_ceiling_files_s"] = min(ceiling(
                (c["cpu_ms_per_file"] + c["server_cpu_ms_per_file"] +
                 fl["cpu_ms_per_file"] + fl["reader_cpu_ms_per_file"]) / 1e3,
                1), 1 / (1 / c["files_s"] + 1 / fl["files_s"]))
            # a client that serves no byte before its MD5 matches the
            # ETag also spends that MD5 on the reader's path
            row["verify_ceiling_files_s"] = 1 / (
                1 / row["fuse_ceiling_files_s"] + md5_s)
            nv, npk = row["noverify"], row["nopacks"]
            log(f"small round {r}: tierfs {t['files_s']:.0f} files/s "
                f"(daemon {t['cpu_ms_per_file']:.2f} + reader "
                f"{t['reader_cpu_ms_per_file']:.2f} ms CPU/file, server "
                f"{t['server_cpu_ms_per_file']:.2f}; cores {t['busy']:.0%}),"
                f" curl loop {c['files_s']:.0f} files/s "
                f"({c['cpu_ms_per_file']:.2f} ms CPU/file, server "
                f"{c['server_cpu_ms_per_file']:.2f}; cores {c['busy']:.0%}),"
                f" FUSE floor {fl['files_s']:.0f} files/s (daemon "
                f"{fl['cpu_ms_per_file']:.2f} + reader "
                f"{fl['reader_cpu_ms_per_file']:.2f}): "
                f"{t['files_s'] / c['files_s']:.2f}x the curl loop; FUSE "
                f"ceiling {row['fuse_ceiling_files_s']:.0f} files/s "
                f"({row['fuse_ceiling_files_s'] / c['files_s']:.2f}x the "
                f"loop), tierfs "
                f"{t['files_s'] / row['fuse_ceiling_files_s']:.2f}x of it; "
                f"with the MD5 against the ETag ({md5_s * 1e3:.3f} ms) "
                f"{row['verify_ceiling_files_s']:.0f} files/s, tierfs "
                f"{t['files_s'] / row['verify_ceiling_files_s']:.2f}x of it;"
                f" tierfs verify=off {nv['files_s']:.0f} files/s (daemon "
                f"{nv['cpu_ms_per_file']:.2f} ms CPU/file), "
                f"{nv['files_s'] / c['files_s']:.2f}x the loop, "
                f"{nv['files_s'] / row['fuse_ceiling_files_s']:.2f}x the "
                f"FUSE ceiling; a new {small_kib} KiB file on the cache "
                f"dirs' file system {row['create_ms']:.2f} ms CPU; tierfs "
                f"with disk_packs=0 (a file a block) {npk['files_s']:.0f} "
                f"files/s (daemon {npk['cpu_ms_per_file']:.2f} ms CPU/file),"
                f" tierfs {t['files_s'] / npk['files_s']:.2f}x of it; some "
                f"task waiting for I/O during tierfs / verify=off / "
                f"disk_packs=0 / curl: {t['io_stall']:.0%} / "
                f"{nv['io_stall']:.0%} / {npk['io_stall']:.0%} / "
                f"{c['io_stall']:.0%}{touch_note(touched)}")
            res["small"].append(row)

        big = statistics.median(r["tierfs"]["mbps"] / r["curl"]["mbps"]
                                for r in res["rounds"])
        sm = statistics.median(s["tierfs"]["files_s"] / s["curl"]["files_s"]
                               for s in res["small"])
        bigc = statistics.median(r["tierfs"]["mbps"] / r["fuse_ceiling_mbps"]
                                 for r in res["rounds"])
        smc = statistics.median(s["tierfs"]["files_s"] /
                                s["fuse_ceiling_files_s"] for s in res["small"])
        cb = statistics.median(r["fuse_ceiling_mbps"] / r["curl"]["mbps"]
                               for r in res["rounds"])
        cs = statistics.median(s["fuse_ceiling_files_s"] / s["curl"]["files_s"]
                               for s in res["small"])
        vs = statistics.median(s["verify_ceiling_files_s"] /
                               s["curl"]["files_s"] for s in res["small"])
        smv = statistics.median(s["tierfs"]["files_s"] /
                                s["verify_ceiling_files_s"]
                                for s in res["small"])
        nvc = statistics.median(s["noverify"]["files_s"] /
                                s["fuse_ceiling_files_s"] for s in res["small"])
        pk = statistics.median(s["tierfs"]["files_s"] /
                               s["nopacks"]["files_s"] for s in res["small"])
        res["small_of_verify_ceiling"] = smv
        res["small_packs_gain"] = pk
        res["small_noverify_of_ceiling"] = nvc
        bb = statistics.median(r["bound_mbps"] / r["curl"]["mbps"]
                               for r in res["rounds"])
        bigb = statistics.median(r["tierfs"]["mbps"] / r["bound_mbps"]
                                 for r in res["rounds"])
        kb = statistics.median(r["keep_bound_mbps"] / r["curl"]["mbps"]
                               for r in res["rounds"])
        bigk = statistics.median(r["tierfs"]["mbps"] / r["keep_bound_mbps"]
                                 for r in res["rounds"])
        res["big_of_keep_bound"] = bigk
        big2b = statistics.median(r["tierfs2"]["mbps"] / r["bound_mbps"]
                                  for r in res["rounds"])
        big2k = statistics.median(r["tierfs2"]["mbps"] / r["keep_bound_mbps"]
                                  for r in res["rounds"])
        res["big2_of_bound"], res["big2_of_keep_bound"] = big2b, big2k
        res["big_ratio"], res["small_ratio"] = big, sm
        res["big_of_ceiling"], res["small_of_ceiling"] = bigc, smc
        res["big_of_bound"] = bigb
        log(f"cold 1 GiB: tierfs/8-curl median {big:.2f}x (target 0.85; the "
            f"FUSE ceiling is {cb:.2f}x, tierfs {bigc:.2f}x of it; the "
            f"measured bound is {bb:.2f}x, tierfs {bigb:.2f}x of it; keeping "
            f"the bytes on disk too it is {kb:.2f}x, tierfs {bigk:.2f}x of "
            f"it; a second cold object on the same mount {big2b:.2f}x and "
            f"{big2k:.2f}x of the two); small "
            f"files: tierfs/curl loop median {sm:.2f}x (target 0.90; the "
            f"FUSE ceiling is {cs:.2f}x, tierfs {smc:.2f}x of it; with the "
            f"MD5 that verifying costs it is {vs:.2f}x, tierfs {smv:.2f}x of "
            f"it; tierfs with verify=off {nvc:.2f}x of the FUSE ceiling; "
            f"tierfs {pk:.2f}x itself with disk_packs=0)")
        waits = [w for w in QUIET_WAITS if w is not None]
        res["quiet_waits"] = QUIET_WAITS
        log(f"before each of {len(QUIET_WAITS)} timed reads the bench "
            f"waited for a quiet machine: median "
            f"{statistics.median(waits) if waits else 0:.1f} s, longest "
            f"{max(waits) if waits else 0:.1f} s, "
            f"{len(QUIET_WAITS) - len(waits)} not quiet after "
            f"{QUIET_LIMIT} s")
        res["backed"] = BACKED
        res["touch_s_per_gib"] = TOUCH_COSTS
        if TOUCH_COSTS:
            log(f"before each timed read the bench touched new memory and "
                f"freed it (BACKED=1): median "
                f"{statistics.median(TOUCH_COSTS):.2f} s a GiB, "
                f"{min(TOUCH_COSTS):.2f}-{max(TOUCH_COSTS):.2f} (0.15-0.2 "
                f"where the host backs it, 2.4-2.7 where it took it back)")
        print(json.dumps(res))
    finally:
        subprocess.run(f"{TIERFS} rm -r s3://{bucket}/{run}/", shell=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(stage, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
