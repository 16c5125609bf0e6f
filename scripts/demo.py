# SPDX-License-Identifier: MIT
"""make demo: a training job reading a remote dataset through tierfs.

The "remote" is the embedded default: a local directory served through
the fault wrapper as an EMULATED remote store (per-request latency and a
bandwidth cap; no network is involved).  The demo

1. generates a synthetic image-like dataset (random bytes, 10 classes);
2. runs the training-loop emulation (loader threads + a trainer that
   computes for a fixed time per batch) directly on the emulated remote;
3. mounts the same remote with `tierfs mount`, with a cache smaller than
   the dataset, and runs 3 epochs through the mount, then 2 more in which
   the loader first tells the mount its order (order hints: the mount
   fetches the files the cache lacks ahead of the loader);
4. unmounts, mounts again over the same cache dir and runs one more
   epoch, with the hint (the disk tier survives restarts);

and prints, per epoch, throughput, cache hit rate and the data-stall
share (time the trainer waited for data / wall time).  Every sample is
checked against its CRC32.
"""
import argparse
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "bench", "lib"))
import tfsbench  # noqa: E402

import tierfs  # noqa: E402


def mib(n):
    return n / (1 << 20)


def size_bytes(text):
    """ "120M" -> bytes, binary multipliers as tierfs parses sizes."""
    t = text.strip().upper().rstrip("B").rstrip("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    return float(t[:-1] if mult > 1 else t) * mult


def stall_floor(missed_bytes, bw, compute_s):
    """The least stall an epoch can have when missed_bytes must cross a
    link of bw bytes/s while the trainer computes for compute_s: the
    link alone takes missed_bytes / bw."""
    link = missed_bytes / bw
    return max(0.0, 1.0 - compute_s / link) if link > 0 else 0.0


def main():
    ap = argparse.ArgumentParser(description="tierfs demo")
    ap.add_argument("--dir", default="/tmp/tierfs-demo")
    ap.add_argument("--files", type=int, default=4000)
    ap.add_argument("--min-kib", type=int, default=64)
    ap.add_argument("--max-kib", type=int, default=256)
    ap.add_argument("--latency-ms", type=float, default=3)
    ap.add_argument("--bw", default="120M", help="emulated bandwidth, B/s")
    ap.add_argument("--cache-fraction", type=float, default=0.6)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--compute-ms", type=float, default=15)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--hinted", type=int, default=2,
                    help="epochs after those with the order hint")
    args = ap.parse_args()

    remote = os.path.join(args.dir, "remote")
    cache = os.path.join(args.dir, "cache")
    mnt = os.path.join(args.dir, "mnt")
    if tfsbench.is_mounted(mnt):
        tfsbench.Mount(None, mnt).__exit__()
    shutil.rmtree(args.dir, ignore_errors=True)
    expect = tfsbench.make_dataset(remote, args.files, args.min_kib << 10,
                                   args.max_kib << 10)
    total = sum(s for s, _ in expect.values())
    cache_bytes = int(total * args.cache_fraction)
    fault = (f"latency_ms={args.latency_ms}&jitter_ms=1&bw={args.bw}")
    uri = f"fault+file://{remote}?{fault}"
    print(f"tierfs {tierfs.version()} demo")
    print(f"dataset: {args.files} files, {mib(total):.0f} MiB in {remote}")
    print(f"remote:  EMULATED ({args.latency_ms:g} ms per request, "
          f"{args.bw}B/s cap) by the fault store over that directory")
    print(f"cache:   {mib(cache_bytes):.0f} MiB on disk "
          f"({args.cache_fraction:.0%} of the dataset), 64 MiB RAM; "
          f"job: {args.threads} loader threads, batches of {args.batch}, "
          f"{args.compute_ms:g} ms compute per batch\n")

    names = sorted(expect)
    rows = []
    with tierfs.Store(uri) as st:
        r = tfsbench.run_epoch(lambda n: st.read(n), names, expect,
                               args.threads, args.batch, args.compute_ms)
    rows.append(("direct on the remote", 1, r, None))

    mount_args = ["--cache-dir", cache, "--cache-size", str(cache_bytes),
                  "--mem-cache", "64M", "--block-size", "1M"]
    with tfsbench.Mount(uri, mnt, *mount_args) as m:
        for e in range(args.epochs + args.hinted):
            hinted = e >= args.epochs
            before = m.stats()
            r = tfsbench.run_epoch(
                lambda n: tfsbench.read_file(os.path.join(mnt, n)), names,
                expect, args.threads, args.batch, args.compute_ms, seed=e + 1,
                hint=mnt if hinted else None)
            rows.append(("through tierfs + hint" if hinted
                         else "through tierfs", e + 1, r,
                         tfsbench.hit_rate(m.stats(), before)))
    # A restart: the disk tier survives, and serves from the first epoch.
    with tfsbench.Mount(uri, mnt, *mount_args) as m:
        r = tfsbench.run_epoch(
            lambda n: tfsbench.read_file(os.path.join(mnt, n)), names,
            expect, args.threads, args.batch, args.compute_ms, seed=99,
            hint=mnt)
        rows.append(("remount + hint", args.epochs + args.hinted + 1, r,
                     tfsbench.hit_rate(m.stats(), {})))

    bw = size_bytes(args.bw)
    print(f"{'reader':24} {'epoch':>5} {'MB/s':>8} {'samples/s':>10} "
          f"{'hit rate':>9} {'data stall':>11} {'link floor':>11}")
    for name, epoch, r, hit in rows:
        floor = stall_floor((1.0 - (hit or 0.0)) * total, bw, r["compute"])
        print(f"{name:24} {epoch:5d} {r['bytes'] / r['wall'] / 1e6:8.1f} "
              f"{r['samples'] / r['wall']:10.0f} "
              f"{'-' if hit is None else f'{hit:.0%}':>9} "
              f"{r['stall'] / r['wall']:11.0%} {floor:11.0%}")
    print("\nall samples verified (size + CRC32); remote = emulated, see "
          "above.\nThe kernel page cache is dropped after each file "
          "(fadvise), as for a dataset\nlarger than RAM, so the figures "
          "are tierfs's own cache.  Pure compute would take\n"
          f"{rows[0][2]['compute']:.1f} s per epoch.  'link floor' is the "
          "least stall the emulated link\nallows: the bytes the cache "
          "missed take (1 - hit rate) x dataset / cap to cross it.")
    shutil.rmtree(args.dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
