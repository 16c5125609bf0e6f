# SPDX-License-Identifier: MIT
"""The tierfs demo on the embedded default: a local directory stands in
for the remote store, served through the fault wrapper as an *emulated*
remote (per-request latency, a bandwidth cap, transient errors).

It shows the store layer as it stands: the same reader code over a
directory, over the emulated remote, and over the emulated remote with
10% of requests failing, where the retry wrapper absorbs the failures.
"""
import argparse
import concurrent.futures as cf
import hashlib
import os
import shutil
import sys
import time

import tierfs


def make_dataset(root, n_files, size):
    """n_files image-like files of random bytes, in 10 class folders."""
    os.makedirs(root, exist_ok=True)
    rng = open("/dev/urandom", "rb")
    digests = {}
    for i in range(n_files):
        key = f"train/class{i % 10:02d}/img{i:06d}.jpg"
        path = os.path.join(root, key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        data = rng.read(size)
        with open(path, "wb") as f:
            f.write(data)
        digests[key] = hashlib.sha256(data).hexdigest()
    return digests


def read_all(uri, keys, digests, threads):
    """Read every key once with a thread pool; verify every byte."""
    with tierfs.Store(uri) as st:
        t0 = time.monotonic()

        def one(key):
            data = st.read(key)
            if hashlib.sha256(data).hexdigest() != digests[key]:
                raise RuntimeError(f"wrong bytes for {key}")
            return len(data)

        with cf.ThreadPoolExecutor(threads) as ex:
            nbytes = sum(ex.map(one, keys))
        return nbytes, time.monotonic() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default="/tmp/tierfs-demo")
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--size", type=int, default=128 * 1024)
    ap.add_argument("--threads", type=int, default=16)
    args = ap.parse_args()

    remote = os.path.join(args.dir, "remote")
    shutil.rmtree(args.dir, ignore_errors=True)
    print(f"tierfs {tierfs.version()} demo: {args.files} files of "
          f"{args.size // 1024} KiB in {remote}")
    digests = make_dataset(remote, args.files, args.size)
    with tierfs.Store(remote) as st:
        keys = [k for k, s in st.list("train/") if s is not None]
    assert sorted(keys) == sorted(digests), "listing does not match"

    emulated = "latency_ms=3&jitter_ms=1&bw=200M"
    runs = [
        ("local directory", remote),
        ("emulated remote (3 ms, 200 MB/s)", f"fault+file://{remote}?{emulated}"),
        ("emulated remote, 10% errors, no retry",
         f"fault+file://{remote}?{emulated}&error_rate=0.1"),
        ("emulated remote, 10% errors, retry",
         f"retry+fault+file://{remote}?{emulated}&error_rate=0.1"
         "&retry_base_ms=5"),
    ]
    print(f"\n{'reader (' + str(args.threads) + ' threads)':44} "
          f"{'files/s':>9} {'MB/s':>8}  result")
    for name, uri in runs:
        try:
            nbytes, secs = read_all(uri, keys, digests, args.threads)
            print(f"{name:44} {len(keys) / secs:9.0f} "
                  f"{nbytes / secs / 1e6:8.1f}  all bytes verified")
        except tierfs.TierfsError as e:
            print(f"{name:44} {'-':>9} {'-':>8}  failed: {e}")
    print("\n(emulated = the fault wrapper over a local directory; no "
          "network is involved)")
    shutil.rmtree(args.dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
