# SPDX-License-Identifier: MIT
"""bench/compare: tierfs vs the raw store, s3fs and rclone, one run.

Every figure in docs/performance.md (docs/performance-tuned.md with
S3_TUNED=1) is measured here, side by side, on the
same objects in the same Ceph RGW (bluestore on a sparse file, started on
127.0.0.1 for the run):

- cold sequential read of a 1 GiB object (dd bs=1M): the tierfs mount,
  s3fs with use_cache, rclone --vfs-cache-mode full, each on its own copy
  of the object, each right after the server's own ceiling on that copy:
  8 parallel ranged GETs with curl; four rounds (two with --quick), the
  tools' order reversed every round (the server's speed drifts over a
  run), the mean of the rounds;
- warm sequential read of the same object, kernel page cache dropped
  before the read (so each tool's own cache is measured);
- small files: N x 64 KiB, warm, open+read+close latency (1 thread) and
  files/s (8 threads), page cache dropped per file;
- metadata: stat of every small file, warm, ops/s;
- training emulation (`tierfs bench train`): accelerator utilisation per
  epoch through each mount and straight on the store.
"""
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

TOP = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
TIERFS = os.environ.get("TIERFS", os.path.join(TOP, "build", "tierfs"))
READBENCH = os.path.join(TOP, "build", "readbench")
TOOLS = ("tierfs", "s3fs", "rclone")
S3SERVER = os.path.join(TOP, "scripts", "s3-server")
QUICK = "--quick" in sys.argv
# S3_TUNED=1 (scripts/s3-server) runs the server without its own
# bottleneck; that run goes to docs/performance-tuned.md and
# docs/perf-tuned/, beside the recipe server's docs/performance.md.
TUNED = os.environ.get("S3_TUNED", "0") == "1"
REPORT = "performance-tuned.md" if TUNED else "performance.md"
PLOTS = "perf-tuned" if TUNED else "perf"
BIG_MIB = 256 if QUICK else 1024
N_SMALL = 2000 if QUICK else 10000
# One round's figures for one tool have ranged from 99 to 184 MB/s in one
# run (the server, not the tool): four rounds average more of that out.
COLD_ROUNDS = 2 if QUICK else 4
MIB = 1 << 20


def sh(cmd, **kw):
    return subprocess.run(cmd, shell=True, check=True, text=True,
                          capture_output=True, **kw).stdout


def log(msg):
    print(msg, file=sys.stderr, flush=True)


class Server:
    """The local RGW for this run (own dir and ports)."""

    def __init__(self, work):
        self.env = dict(os.environ, S3_DIR=os.path.join(work, "s3"),
                        S3_PORT="7498", MON_PORT="16798",
                        OSD_STORE="bluestore", OSD_BYTES=str(16 << 30))

    def __enter__(self):
        subprocess.run([S3SERVER, "start"], env=self.env, check=True,
                       stdout=subprocess.DEVNULL)
        for line in open(os.path.join(self.env["S3_DIR"], "env")):
            k, v = line.replace("export ", "").strip().split("=", 1)
            os.environ[k] = v.strip("'\"")
        self.ep = os.environ["AWS_ENDPOINT_URL"]
        self.bucket = os.environ["TFS_TEST_S3_BUCKET"]
        return self

    def __exit__(self, *exc):
        subprocess.run([S3SERVER, "stop"], env=self.env, check=False,
                       stdout=subprocess.DEVNULL)


def umount(path):
    subprocess.run(["fusermount3", "-u", path], check=False,
                   capture_output=True)
    subprocess.run(["fusermount", "-u", path], check=False,
                   capture_output=True)


def mounted(path):
    path = os.path.realpath(path)
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == path for line in f)


def wait_mounted(path, timeout=30):
    t = time.monotonic() + timeout
    while not mounted(path):
        if time.monotonic() > t:
            raise RuntimeError(f"{path} did not mount")
        time.sleep(0.1)


class Mounts:
    """tierfs, s3fs (use_cache) and rclone (vfs full) over one prefix."""

    def __init__(self, work, srv, prefix):
        self.work, self.srv, self.prefix = work, srv, prefix
        self.dirs = {k: os.path.join(work, "mnt-" + k)
                     for k in ("tierfs", "s3fs", "rclone")}
        self.procs = []

    def __enter__(self):
        try:
            return self._mount_all()
        except BaseException:
            self.__exit__(None, None, None)     # what did mount goes
            raise

    def _mount_all(self):
        w, srv = self.work, self.srv
        for d in self.dirs.values():
            os.makedirs(d, exist_ok=True)
        sh(f"{TIERFS} mount s3://{srv.bucket}/{self.prefix} "
           f"{self.dirs['tierfs']} --cache-dir {w}/cache-tierfs "
           f"--cache-size 8G --mem-cache 1G --immutable")
        pw = os.path.join(w, "passwd-s3fs")
        with open(pw, "w") as f:
            f.write(f"{os.environ['AWS_ACCESS_KEY_ID']}:"
                    f"{os.environ['AWS_SECRET_ACCESS_KEY']}")
        os.chmod(pw, 0o600)
        os.makedirs(f"{w}/cache-s3fs", exist_ok=True)
        sh(f"s3fs {srv.bucket}:/{self.prefix} {self.dirs['s3fs']} -o "
           f"url={srv.ep},use_path_request_style,passwd_file={pw},"
           f"endpoint=us-east-1,use_cache={w}/cache-s3fs")
        conf = os.path.join(w, "rclone.conf")
        with open(conf, "w") as f:
            f.write("[ceph]\ntype = s3\nprovider = Ceph\n"
                    f"access_key_id = {os.environ['AWS_ACCESS_KEY_ID']}\n"
                    "secret_access_key = "
                    f"{os.environ['AWS_SECRET_ACCESS_KEY']}\n"
                    f"endpoint = {srv.ep}\nregion = us-east-1\n"
                    "force_path_style = true\n")
        env = dict(os.environ)
        env.pop("AWS_CA_BUNDLE", None)
        self.procs.append(subprocess.Popen(
            ["rclone", "mount", "--config", conf,
             f"ceph:{srv.bucket}/{self.prefix}", self.dirs["rclone"],
             "--vfs-cache-mode", "full", "--cache-dir", f"{w}/cache-rclone"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for d in self.dirs.values():
            wait_mounted(d)
        return self

    def __exit__(self, *exc):
        for d in self.dirs.values():
            umount(d)
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()


def dd_mbps(path, drop=False):
    if drop:
        sh(f"dd if={path} iflag=nocache count=0 status=none")
    t = time.monotonic()
    sh(f"dd if={path} of=/dev/null bs=1M status=none")
    return os.path.getsize(path) / (time.monotonic() - t) / 1e6


def curl_ceiling(srv, key, size, streams=8):
    """8 parallel ranged GETs of the object with curl: the server's
    ceiling for one object."""
    part = (size + streams - 1) // streams
    cmds = []
    for i in range(streams):
        lo, hi = i * part, min(size, (i + 1) * part) - 1
        cmds.append(
            "curl -sS --fail --aws-sigv4 aws:amz:us-east-1:s3 --user "
            f"\"$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY\" -H "
            f"'x-amz-content-sha256: UNSIGNED-PAYLOAD' -H 'Range: "
            f"bytes={lo}-{hi}' -o /dev/null {srv.ep}/{srv.bucket}/{key}")
    t = time.monotonic()
    procs = [subprocess.Popen(c, shell=True) for c in cmds]
    for p in procs:
        if p.wait() != 0:
            raise RuntimeError("curl failed")
    return size / (time.monotonic() - t) / 1e6


def readbench(listfile, threads, drop=True):
    out = sh(f"{READBENCH} -t {threads} --shuffle 3 "
             f"{'--drop' if drop else ''} {listfile}")
    return json.loads(out)[-1]


def stat_rate(paths):
    t = time.monotonic()
    for p in paths:
        os.stat(p)
    return len(paths) / (time.monotonic() - t)


def bench_train(target, epochs, extra=""):
    out = sh(f"{TIERFS} bench train -j 8 --epochs {epochs} --batch 32 "
             f"--compute-ms 20 --drop --json {extra} {target}")
    return json.loads(out)


# ---- plots (SVG, no dependencies) ----

def svg_bars(path, title, unit, groups, series, values):
    """values[s][g]: grouped bars, one color per series."""
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd"]
    w, h, left, bottom, top = 760, 380, 70, 60, 40
    vmax = max(max(v) for v in values) or 1
    gw = (w - left - 20) / len(groups)
    bw = gw * 0.8 / len(series)
    out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{w}' "
           f"height='{h}' font-family='sans-serif'><rect width='100%' "
           f"height='100%' fill='white'/><text x='{w / 2}' y='24' "
           f"font-size='15' text-anchor='middle'>{title}</text>"]
    for i in range(6):
        y = h - bottom - (h - top - bottom) * i / 5
        out.append(f"<line x1='{left}' y1='{y}' x2='{w - 20}' y2='{y}' "
                   f"stroke='#eee'/><text x='{left - 6}' y='{y + 4}' "
                   f"font-size='11' text-anchor='end'>"
                   f"{vmax * i / 5:.3g}</text>")
    for g, name in enumerate(groups):
        x0 = left + g * gw + gw * 0.1
        out.append(f"<text x='{left + g * gw + gw / 2}' y='{h - bottom + 18}'"
                   f" font-size='12' text-anchor='middle'>{name}</text>")
        for s in range(len(series)):
            v = values[s][g]
            bh = (h - top - bottom) * v / vmax
            out.append(f"<rect x='{x0 + s * bw}' y='{h - bottom - bh}' "
                       f"width='{bw * 0.9}' height='{bh}' "
                       f"fill='{colors[s % 5]}'/>")
    for s, name in enumerate(series):
        out.append(f"<rect x='{w - 190}' y='{top + 6 + 16 * s}' width='10' "
                   f"height='10' fill='{colors[s % 5]}'/><text "
                   f"x='{w - 175}' y='{top + 15 + 16 * s}' font-size='12'>"
                   f"{name}</text>")
    out.append(f"<text x='16' y='{(top + h - bottom) / 2}' font-size='12' "
               f"transform='rotate(-90 16 {(top + h - bottom) / 2})' "
               f"text-anchor='middle'>{unit}</text></svg>")
    with open(path, "w") as f:
        f.write("\n".join(out))


# ---- the run ----

def main():
    work = tempfile.mkdtemp(prefix="tfs-compare-",
                            dir=os.environ.get("BENCH_DIR", "/var/tmp"))
    docs = os.path.join(TOP, "docs")
    plots = os.path.join(docs, PLOTS)
    os.makedirs(plots, exist_ok=True)
    res = {}
    try:
        with Server(work) as srv:
            log("uploading the data")
            big = os.path.join(work, "big.bin")
            sh(f"head -c {BIG_MIB * MIB} /dev/urandom > {big}")
            for r in range(COLD_ROUNDS):    # one object per tool and round
                for k in TOOLS:
                    sh(f"{TIERFS} put -q {big} "
                       f"s3://{srv.bucket}/cmp/{big_name(k, r)}")
            os.unlink(big)
            sh(f"{TIERFS} bench prepare --files {N_SMALL} --size 64K -j 8 "
               f"s3://{srv.bucket}/cmp")
            with Mounts(work, srv, "cmp") as m:
                run_mounts(m, res, work, srv)
            log("training emulation straight on the store")
            res["train_raw"] = bench_train(f"s3://{srv.bucket}/cmp/bench",
                                           2)
        write_report(res, plots, docs)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def big_name(tool, rnd):
    return f"big-{tool}-{rnd}.bin"


def run_mounts(m, res, work, srv):
    """Cold reads: each tool reads its own copy of the big object, so no
    tool finds another's reads in the server's caches; right before it,
    the server's ceiling is measured on that same object (which also
    leaves the server in the same state for every tool).  COLD_ROUNDS
    rounds on fresh copies, the order reversed each round: the server's
    speed drifts during a run (on this VM 129 to 154 MB/s in one run), and
    whoever goes first would otherwise always meet it slowest."""
    log("cold and warm sequential reads")
    time.sleep(10)                      # let the server settle after uploads
    res["ceiling_rounds"] = {k: [] for k in TOOLS}
    res["cold_rounds"] = {k: [] for k in TOOLS}
    for r in range(COLD_ROUNDS):
        for k in (TOOLS if r % 2 == 0 else TOOLS[::-1]):
            p = os.path.join(m.dirs[k], big_name(k, r))
            # Metadata first, untimed, for every tool alike: the mount's
            # first lookup (for tierfs --immutable, the listing of the
            # whole prefix: 10,000+ objects) is not part of reading the
            # object's bytes.
            os.listdir(m.dirs[k])
            os.stat(p)
            res["ceiling_rounds"][k].append(
                curl_ceiling(srv, f"cmp/{big_name(k, r)}", BIG_MIB * MIB))
            res["cold_rounds"][k].append(dd_mbps(p, drop=True))
    res["ceiling_each"] = {k: statistics.mean(v)
                           for k, v in res["ceiling_rounds"].items()}
    res["cold"] = {k: statistics.mean(v)
                   for k, v in res["cold_rounds"].items()}
    res["ceiling"] = statistics.median(res["ceiling_each"].values())
    # Warm: the copy each tool read last (the last round's), as in a run
    # with one copy per tool, three times; the first round's copy is also
    # read once, reported beside it.  tierfs serves a large object read
    # once from its disk tier (its RAM tier keeps only a window of such
    # blocks: docs/cache.md), and from RAM once it was read again.
    last = COLD_ROUNDS - 1
    res["warm_each"] = {k: [dd_mbps(os.path.join(d, big_name(k, last)),
                                    drop=True) for _ in range(3)]
                        for k, d in m.dirs.items()}
    res["warm"] = {k: statistics.median(v)
                   for k, v in res["warm_each"].items()}
    res["warm_first"] = {k: dd_mbps(os.path.join(d, big_name(k, 0)),
                                    drop=True)
                         for k, d in m.dirs.items()}
    names = sorted(os.path.relpath(os.path.join(r, f), m.dirs["tierfs"])
                   for r, _, fs in os.walk(m.dirs["tierfs"]) for f in fs
                   if f.startswith("f"))
    res["small"], res["meta"] = {}, {}
    for k, d in m.dirs.items():
        lst = os.path.join(work, f"list-{k}")
        with open(lst, "w") as f:
            f.write("\n".join(os.path.join(d, n) for n in names) + "\n")
        log(f"small files through {k}")
        readbench(lst, 8)                      # cold pass fills the cache
        one = readbench(lst, 1)
        many = readbench(lst, 8)
        res["small"][k] = {"p50_us": one["p50_us"], "p99_us": one["p99_us"],
                           "files_per_s": many["files_per_s"]}
        paths = [os.path.join(d, n) for n in names]
        stat_rate(paths)                       # warm the metadata
        res["meta"][k] = statistics.median(stat_rate(paths)
                                           for _ in range(3))
    res["train"] = {}
    for k, d in m.dirs.items():
        log(f"training emulation through {k}")
        res["train"][k] = bench_train(os.path.join(d, "bench"), 2)
    # the daemon's memory over everything above (issue 17 item 3)
    with open(os.path.join(m.dirs["tierfs"], ".tierfs-stats")) as f:
        st = json.load(f)
    res["tierfs_mem"] = {"rss_peak": st["fuse"]["rss_peak"],
                         "rss": st["fuse"]["rss"],
                         "ram_tier": st["cache_capacity_ram"],
                         "ram_bytes": st["cache_bytes_ram"]}
    log(f"tierfs daemon RSS peak {st['fuse']['rss_peak'] >> 20} MiB, RAM "
        f"tier {st['cache_capacity_ram'] >> 20} MiB")
    # the same job telling the mount its order (order hints, docs/fuse.md):
    # a second tierfs mount of the prefix, its cache empty, as the first's
    # was before its first epoch
    log("training emulation through tierfs with the order hint")
    hmnt = os.path.join(work, "mnt-tierfs-hint")
    os.makedirs(hmnt, exist_ok=True)
    sh(f"{TIERFS} mount s3://{srv.bucket}/{m.prefix} {hmnt} --cache-dir "
       f"{work}/cache-tierfs-hint --cache-size 8G --mem-cache 1G --immutable")
    try:
        wait_mounted(hmnt)
        res["train"]["tierfs + hint"] = bench_train(
            os.path.join(hmnt, "bench"), 2, "--hint")
    finally:
        umount(hmnt)


def ratio(a, b):
    return f"{a / b:.2f}x" if b else "-"


def per_round(rounds):
    """'tierfs 90 / 90, s3fs ...': each tool's figures, round by round."""
    return ", ".join(f"{k} " + " / ".join(f"{v:.0f}" for v in rounds[k])
                     for k in TOOLS)


def write_report(res, plots, docs):
    tools = list(TOOLS)
    t = res
    lines = [
        "# Performance: tierfs vs the raw store, s3fs and rclone",
        "",
        f"Generated by `bench/compare{' --quick' if QUICK else ''}` on "
        f"{datetime.date.today()} on {platform.node()} "
        f"({os.cpu_count()} CPUs, {platform.machine()}, "
        f"{platform.release()}): every figure below was measured in that "
        "one run, on the same data, in a Ceph RGW (Debian 16.2, "
        "bluestore on a sparse file"
        + (", `S3_TUNED=1`: no data crc, malloc keeps freed memory; "
           "the same run against the recipe's server is in "
           "[performance.md](performance.md)"
           if TUNED else
           ", the recipe's settings: its receive thread is the bottleneck"
           " on these VMs, see docs/s3-server.md; the same run against "
           "a server without that limit (`S3_TUNED=1`) is in "
           "[performance-tuned.md](performance-tuned.md)") +
        ") on 127.0.0.1.  Peers: s3fs 1.90 with "
        "`use_cache`, rclone 1.60 with `--vfs-cache-mode full`; tierfs with "
        "`--cache-dir` (8G), `--mem-cache 1G`, `--immutable`.  The machine "
        "is a shared 2-core VM: expect noise of 10-20%.",
        "",
        f"## Sequential read of a {BIG_MIB} MiB object (dd bs=1M, MB/s)",
        "",
        "| | tierfs | s3fs | rclone | tierfs/s3fs | tierfs/rclone |",
        "|---|---|---|---|---|---|",
        f"| cold (first read) | {t['cold']['tierfs']:.0f} | "
        f"{t['cold']['s3fs']:.0f} | {t['cold']['rclone']:.0f} | "
        f"{ratio(t['cold']['tierfs'], t['cold']['s3fs'])} | "
        f"{ratio(t['cold']['tierfs'], t['cold']['rclone'])} |",
        f"| warm (page cache dropped) | {t['warm']['tierfs']:.0f} | "
        f"{t['warm']['s3fs']:.0f} | {t['warm']['rclone']:.0f} | "
        f"{ratio(t['warm']['tierfs'], t['warm']['s3fs'])} | "
        f"{ratio(t['warm']['tierfs'], t['warm']['rclone'])} |",
        "",
        "Each tool cold-reads its own copy of the object; just before, "
        "the server's ceiling is measured on that copy with 8 parallel "
        "ranged curl GETs (so every tool meets the server in the same "
        "state), after the mount's metadata was read (a listing of the "
        f"mount and a stat of the file, untimed).  {COLD_ROUNDS} rounds on "
        "fresh copies, the tools' order reversed every round (the "
        "server's speed drifts during a run); the table has the mean of "
        "the rounds.  Cold MB/s per round: "
        + per_round(t["cold_rounds"])
        + "; ceiling before each: "
        + per_round(t["ceiling_rounds"])
        + ".  Warm: the copy each tool read last (as with one copy per "
        "tool), median of 3 reads ("
        + per_round(t["warm_each"])
        + " MB/s; tierfs reads a large object read only once from its "
        "disk tier, and from RAM once read again: docs/cache.md); the "
        "first round's copy, read once: "
        + ", ".join(f"{k} {t['warm_first'][k]:.0f}" for k in TOOLS)
        + " MB/s (tierfs from its disk tier)"
        + f".  tierfs cold is "
        f"{ratio(t['cold']['tierfs'], t['ceiling_each']['tierfs'])} of "
        "its ceiling (s3fs "
        f"{ratio(t['cold']['s3fs'], t['ceiling_each']['s3fs'])}, rclone "
        f"{ratio(t['cold']['rclone'], t['ceiling_each']['rclone'])}).",
        "",
        f"## Small files ({N_SMALL} x 64 KiB, warm, page cache dropped "
        "per file)",
        "",
        "| | p50 us (1 thread) | p99 us (1 thread) | files/s (8 threads) |",
        "|---|---|---|---|",
    ]
    for k in tools:
        s = t["small"][k]
        lines.append(f"| {k} | {s['p50_us']:.0f} | {s['p99_us']:.0f} | "
                     f"{s['files_per_s']:.0f} |")
    lines += [
        "",
        f"tierfs/s3fs files/s: "
        f"{ratio(t['small']['tierfs']['files_per_s'], t['small']['s3fs']['files_per_s'])}"
        f"; tierfs/rclone: "
        f"{ratio(t['small']['tierfs']['files_per_s'], t['small']['rclone']['files_per_s'])}"
        "; p99 s3fs/tierfs: "
        f"{ratio(t['small']['s3fs']['p99_us'], t['small']['tierfs']['p99_us'])}.",
        "",
        f"## Metadata: stat of {N_SMALL} files, warm (ops/s)",
        "",
        "| tierfs | s3fs | rclone | tierfs/s3fs | tierfs/rclone |",
        "|---|---|---|---|---|",
        f"| {t['meta']['tierfs']:.0f} | {t['meta']['s3fs']:.0f} | "
        f"{t['meta']['rclone']:.0f} | "
        f"{ratio(t['meta']['tierfs'], t['meta']['s3fs'])} | "
        f"{ratio(t['meta']['tierfs'], t['meta']['rclone'])} |",
        "",
        "## Training emulation (`tierfs bench train`: 8 read threads, 1 "
        "accelerator, batches of 32 samples of 64 KiB, 20 ms compute per "
        "step, page cache dropped per sample)",
        "",
        "| | AU epoch 1 | AU epoch 2 | stall epoch 2 | samples/s epoch 2 |",
        "|---|---|---|---|---|",
    ]
    rows = [("raw store (no cache)", t["train_raw"])] + \
        [(k, t["train"][k]) for k in tools] + \
        [(k, t["train"][k]) for k in t["train"] if k not in tools]
    for name, j in rows:
        e = j["epochs"]
        lines.append(f"| {name} | {e[0]['au']:.0%} | {e[1]['au']:.0%} | "
                     f"{e[1]['stall_share']:.0%} | "
                     f"{e[1]['samples_per_s']:.0f} |")
    if "tierfs_mem" in t:
        mem = t["tierfs_mem"]
        lines += ["", "## Memory", "",
                  "The tierfs daemon's peak RSS over all of the above (one "
                  f"mount): {mem['rss_peak'] >> 20} MiB with a "
                  f"{mem['ram_tier'] >> 20} MiB RAM tier: the tier plus "
                  f"{(mem['rss_peak'] - mem['ram_tier']) / (1 << 20):.0f} "
                  f"MiB (at the end: {mem['rss'] >> 20} MiB, "
                  f"{mem['ram_bytes'] >> 20} MiB in the tier)."]
    svg_bars(os.path.join(plots, "seq-read.svg"),
             "sequential read, MB/s", "MB/s", ["cold", "warm"], tools,
             [[t["cold"][k], t["warm"][k]] for k in tools])
    svg_bars(os.path.join(plots, "small-files.svg"),
             "small files, files/s (8 threads, warm)", "files/s",
             ["files/s"], tools,
             [[t["small"][k]["files_per_s"]] for k in tools])
    svg_bars(os.path.join(plots, "train-au.svg"),
             "accelerator utilisation per epoch, %", "%",
             ["epoch 1", "epoch 2"], ["raw store"] + tools,
             [[100 * j["epochs"][0]["au"], 100 * j["epochs"][1]["au"]]
              for _, j in rows])
    lines += ["", f"![sequential reads]({PLOTS}/seq-read.svg)",
              f"![small files]({PLOTS}/small-files.svg)",
              f"![training AU]({PLOTS}/train-au.svg)", "",
              f"Raw figures: `docs/{PLOTS}/compare.json`.", ""]
    with open(os.path.join(plots, "compare.json"), "w") as f:
        json.dump(res, f, indent=1)
    with open(os.path.join(docs, REPORT), "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
