# SPDX-License-Identifier: MIT
"""bench/order-hint: issue 17's order-hint targets, side by side in one run.

A PyTorch job (DataLoader, WORKERS worker processes, batches of BATCH,
COMPUTE_MS of emulated compute a batch) reads FILES raw files of KIB KiB,
shuffled, through a tierfs mount of a directory store behind the fault
wrapper at LATENCY_MS a request and BW bytes/s (the demo's cap): the
remote is EMULATED (no network).  Three epochs:

  cold            a fresh cache, the plain RandomSampler
  cold + hint     a fresh cache, OrderedPrefetch(RandomSampler)
  warm + hint     the same mount again: every block in the cache

Every sample is checked (size + CRC32).  The kernel page cache is dropped
after each file (fadvise), so warm reads are tierfs's own cache.  Prints
each epoch's wall time, samples/s and data stall, the mount's counters,
and the targets: cold+hint >= 8x faster than cold; cold+hint <= 1.3x the
warm epoch.  Exit 1 when a target fails (or a sample is wrong).
"""
import argparse
import os
import shutil
import sys
import time
import zlib

import torch
from torch.utils.data import DataLoader, Dataset, RandomSampler

import tfsbench
from tierfs.torch import OrderedPrefetch


class Files(Dataset):
    def __init__(self, mnt, names, expect):
        self.mnt, self.names, self.expect = mnt, names, expect

    def __len__(self):
        return len(self.names)

    def __getitem__(self, i):
        b = tfsbench.read_file(os.path.join(self.mnt, self.names[i]))
        size, crc = self.expect[self.names[i]]
        if len(b) != size or zlib.crc32(b) != crc:
            raise RuntimeError(f"wrong bytes for {self.names[i]}")
        return len(b)


def epoch(ds, sampler, a):
    """One epoch: wall, samples, bytes, stall (trainer waiting)."""
    loader = DataLoader(ds, sampler=sampler, batch_size=a.batch,
                        num_workers=a.workers, prefetch_factor=4)
    t0 = time.monotonic()
    stall = 0.0
    n = nbytes = 0
    it = iter(loader)
    while True:
        w0 = time.monotonic()
        try:
            batch = next(it)
        except StopIteration:
            break
        stall += time.monotonic() - w0
        n += len(batch)
        nbytes += int(batch.sum())
        time.sleep(a.compute_ms / 1000.0)
    return {"wall": time.monotonic() - t0, "samples": n, "bytes": nbytes,
            "stall": stall}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default="/var/tmp/tfs-order-hint")
    ap.add_argument("--files", type=int, default=6000)
    ap.add_argument("--kib", type=int, default=48)
    ap.add_argument("--dirs", type=int, default=50)
    ap.add_argument("--latency-ms", type=float, default=20)
    ap.add_argument("--bw", default="120M")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--compute-ms", type=float, default=10)
    ap.add_argument("--max-inflight", type=int, default=256)
    ap.add_argument("--mem-cache", default="512M")
    ap.add_argument("--list-first", action="store_true",
                    help="list the mount's directories before each mount's "
                    "first epoch (untimed), as a Dataset that walks its "
                    "root does")
    ap.add_argument("--mount-args", default="",
                    help="more tierfs mount options, e.g. "
                    "'--set hint_window_files=512'")
    ap.add_argument("--ram-only", action="store_true",
                    help="no disk tier (what filling it costs)")
    ap.add_argument("--quick", action="store_true",
                    help="1,000 files: a check that it runs, no targets")
    a = ap.parse_args()
    if a.quick:
        a.files = 1000
    shutil.rmtree(a.dir, ignore_errors=True)
    remote = os.path.join(a.dir, "remote")
    mnt = os.path.join(a.dir, "mnt")
    expect = tfsbench.make_dataset(remote, a.files, a.kib << 10,
                                   a.kib << 10, seed=17)
    names = sorted(expect)
    total = sum(s for s, _ in expect.values())
    uri = (f"fault+file://{remote}?latency_ms={a.latency_ms:g}"
           f"&jitter_ms=1&bw={a.bw}")
    load = " ".join(open("/proc/loadavg").read().split()[:3])
    print(f"order-hint: {a.files} files of {a.kib} KiB ({total >> 20} MiB) "
          f"in {remote}; remote EMULATED: {a.latency_ms:g} ms a request, "
          f"{a.bw}B/s; job: DataLoader, {a.workers} workers, batches of "
          f"{a.batch}, {a.compute_ms:g} ms compute a batch; "
          f"--immutable --max-inflight {a.max_inflight} --mem-cache "
          f"{a.mem_cache}{' ' + a.mount_args if a.mount_args else ''}; "
          f"load {load} on {os.cpu_count()} CPUs")
    rows = []

    def run(tag, cache, hinted, fresh=True):
        if fresh:
            shutil.rmtree(cache, ignore_errors=True)
        args = ["--read-only", "--immutable"] + \
            ([] if a.ram_only else ["--cache-dir", cache]) + ["--mem-cache",
                a.mem_cache, "--max-inflight", str(a.max_inflight),
                "--block-size", "1M"] + a.mount_args.split()
        with tfsbench.Mount(uri, mnt, *args) as m:
            ds = Files(m.mnt, names, expect)
            if a.list_first:
                for d in sorted({os.path.dirname(n) for n in names}):
                    os.listdir(os.path.join(m.mnt, d))
            out = []
            for t, h in ((tag, hinted),) if not isinstance(tag, tuple) \
                    else zip(tag, hinted):
                g = torch.Generator()
                g.manual_seed(len(out) + 1)
                s = RandomSampler(ds, generator=g)
                if h:
                    s = OrderedPrefetch(s, names, mount=m.mnt)
                before = m.stats()
                pid = before["fuse"]["pid"]
                d0, busy = tfsbench.proc_cpu(pid), tfsbench.Busy()
                r = epoch(ds, s, a)
                r["busy"] = busy.share()
                r["daemon_cpu"] = tfsbench.proc_cpu(pid) - d0
                after = m.stats()
                if h:
                    s.close()
                r["hit"] = tfsbench.hit_rate(after, before)
                r["store_ops"] = {k: after["store"][k] - before["store"][k]
                                  for k in ("stats", "lists", "reads")}
                r["waited"] = (after["fuse"]["async_reads"] -
                               before["fuse"]["async_reads"])
                r["hints"] = {k: after["hints"][k] - before["hints"].get(k, 0)
                              for k in ("files_issued", "files_passed",
                                        "bytes_queued", "bytes_used",
                                        "bytes_abandoned")}
                if r["samples"] != a.files:
                    raise SystemExit(f"order-hint: {t}: {r['samples']} "
                                     f"samples, not {a.files}")
                rows.append((t, r))
                out.append(r)
            return out

    run("cold", os.path.join(a.dir, "cache-a"), False)
    run(("cold + hint", "warm + hint"), os.path.join(a.dir, "cache-b"),
        (True, True))
    print(f"\n{'epoch':14} {'wall s':>7} {'samples/s':>10} {'MiB/s':>7} "
          f"{'hit':>5} {'stall':>6} {'waited':>7} {'cores':>6} "
          f"{'daemon':>7}  hints")
    for t, r in rows:
        print(f"{t:14} {r['wall']:7.2f} {r['samples'] / r['wall']:10.0f} "
              f"{r['bytes'] / r['wall'] / 2**20:7.1f} {r['hit']:5.0%} "
              f"{r['stall'] / r['wall']:6.0%} {r['waited']:7d} "
              f"{r['busy']:6.0%} {r['daemon_cpu']:6.2f}s  "
              f"{r['hints'] if t != 'cold' else '-'}")
    print("store requests in each epoch (stat / list / read): " +
          ", ".join(f"{t} {r['store_ops']['stats']} / "
                    f"{r['store_ops']['lists']} / {r['store_ops']['reads']}"
                    for t, r in rows))
    cold, hint, warm = (r for _, r in rows)
    speedup = cold["wall"] / hint["wall"]
    vs_warm = hint["wall"] / warm["wall"]
    floor = total / tfsbench_bw(a.bw)
    print(f"\n(every sample verified: size + CRC32; 'waited': reads that "
          f"waited for the store; 'cores': how busy all "
          f"{os.cpu_count()} cores were, 'daemon': its CPU seconds; the "
          f"bandwidth cap alone needs "
          f"{floor:.2f} s for the dataset, the compute "
          f"{a.files / a.batch * a.compute_ms / 1000:.2f} s)")
    ok1 = speedup >= 8
    ok2 = vs_warm <= 1.3
    print(f"cold epoch with the hint: {speedup:.1f}x faster than without "
          f"(target >= 8): {'PASS' if ok1 else 'FAIL'}")
    print(f"cold epoch with the hint: {vs_warm:.2f}x the warm epoch "
          f"(target <= 1.3): {'PASS' if ok2 else 'FAIL'}")
    shutil.rmtree(a.dir, ignore_errors=True)
    if a.quick:
        return 0
    return 0 if ok1 and ok2 else 1


def tfsbench_bw(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return float(s[:-1]) * mult[s[-1]] if s[-1] in mult else float(s)


if __name__ == "__main__":
    sys.exit(main())
