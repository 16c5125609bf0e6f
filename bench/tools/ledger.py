#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The fault matrix's writer, checker and reader (bench/faults,
tests/integ/faults.sh, bench/soak; docs/reliability.md).

Every file's bytes are a function of its name (random.Random(name)), so
any object found anywhere can be checked without keeping a copy.

  ledger.py write DIR LEDGER TAG [--count N] [--max-size B] [--seconds S]
      Write DIR/TAG-00000, -00001, ... one after the other.  Only after
      close() returned is "NAME SIZE" appended to LEDGER (and the ledger
      fsynced).  Stops at the first error (the daemon died), after N files
      or S seconds.
  ledger.py check ROOT LEDGER [--prefix P] [--all]
      ROOT: a directory, or a store URI (read through the binding, not a
      mount).  Every ledger entry must be there with exactly its bytes;
      with --all every other object named like the writer's (P*) must be
      exact too (nothing partial visible).  One summary line; exit 1 on
      any loss or wrong byte.
  ledger.py gen ROOT N SIZE [--tag T]
      N source files of SIZE bytes (a dataset to read), in a directory
      or a store URI.
  ledger.py read DIR N [--tag T] [--start I] [--seconds S] [--threads K]
                 [--json F] [--lat-log F]
      Read DIR/T-I..I+N-1 (again and again for S seconds, or once), compare
      every byte, record each file's latency.  Summary: reads, errors by
      errno, wrong bytes, p50/p99/max ms.
"""
import argparse
import errno
import json
import os
import random
import sys
import threading
import time


def content(name, size):
    return random.Random(name).randbytes(size)


def size_of(name, max_size):
    return random.Random("size:" + name).randrange(1, max_size + 1)


def cmd_write(a):
    t_end = time.monotonic() + a.seconds if a.seconds else None
    n = 0
    led = open(a.ledger, "a")
    t0 = time.monotonic()
    while a.count == 0 or n < a.count:
        if a.rate:                      # n files by t0 + n / rate
            time.sleep(max(0.0, t0 + n / a.rate - time.monotonic()))
        if t_end and time.monotonic() > t_end:
            break
        name = "%s-%05d" % (a.tag, n)
        size = size_of(name, a.max_size)
        try:
            data = content(name, size)
            with open(os.path.join(a.dir, name), "wb") as f:
                for off in range(0, size, 256 << 10):
                    f.write(data[off:off + (256 << 10)])
                if a.fsync:
                    os.fsync(f.fileno())
        except OSError as e:
            print("writer: stopped after %d files: %s" % (n, e.strerror),
                  file=sys.stderr)
            try:                        # what an application does with
                os.unlink(os.path.join(a.dir, name))   # a failed file
            except OSError:
                pass
            break
        led.write("%s %d\n" % (name, size))
        led.flush()
        os.fsync(led.fileno())
        n += 1
    led.close()
    print("writer: %d files closed" % n, file=sys.stderr)


class Root:
    """A directory or a store, read the same way."""

    def __init__(self, root):
        self.store = None
        if "://" in root or "+" in root.split("/")[0]:
            sys.path.insert(0, os.path.join(os.path.dirname(
                os.path.abspath(__file__)), "..", "..", "python"))
            import tierfs
            self.store = tierfs.Store(root)
        self.root = root

    def read(self, name):
        if self.store:
            try:
                return self.store.read(name)
            except OSError:
                return None
        try:
            with open(os.path.join(self.root, name), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def names(self, prefix):
        if self.store:
            return [k for k, st in self.store.list(prefix) if st is not None]
        return [n for n in os.listdir(self.root) if n.startswith(prefix)]


def cmd_check(a):
    root = Root(a.root)
    closed = lost = wrong = 0
    seen = set()
    with open(a.ledger) as f:
        for line in f:
            name, size = line.split()
            closed += 1
            seen.add(name)
            got = root.read(name)
            if got is None:
                lost += 1
                print("lost: %s" % name, file=sys.stderr)
            elif got != content(name, int(size)):
                wrong += 1
                print("wrong: %s (%d bytes of %s)" % (name, len(got), size),
                      file=sys.stderr)
    others = partial = 0
    if a.all:
        for name in root.names(a.prefix):
            if name in seen or name.endswith(".tmp"):
                continue
            others += 1
            got = root.read(name)
            want = content(name, size_of(name, a.max_size))
            if got is not None and got != want:
                partial += 1
                print("partial: %s (%d bytes)" % (name, len(got)),
                      file=sys.stderr)
    print("ledger: %d closed, %d lost, %d wrong, %d unledgered objects, "
          "%d partial" % (closed, lost, wrong, others, partial))
    sys.exit(1 if lost or wrong or partial else 0)


def cmd_gen(a):
    root = Root(a.dir)
    if not root.store:
        os.makedirs(a.dir, exist_ok=True)
    for i in range(a.n):
        name = "%s-%05d" % (a.tag, i)
        if root.store:
            root.store.put(name, content(name, a.size))
            continue
        with open(os.path.join(a.dir, name), "wb") as f:
            f.write(content(name, a.size))


def pct(v, p):
    if not v:
        return 0.0
    v = sorted(v)
    return v[min(len(v) - 1, int(len(v) * p))]


def cmd_read(a):
    sizes = {}
    lat, errs, lock = [], {}, threading.Lock()
    state = {"wrong": 0, "bytes": 0, "reads": 0}
    t0 = time.monotonic()
    t_end = t0 + a.seconds if a.seconds else None
    order = list(range(a.start, a.start + a.n))
    lat_log = open(a.lat_log, "w") if a.lat_log else None

    def one(i):
        name = "%s-%05d" % (a.tag, i)
        s = time.monotonic()
        try:
            with open(os.path.join(a.dir, name), "rb") as f:
                got = f.read()
            err = None
        except OSError as e:
            got, err = None, e.errno
        dt = (time.monotonic() - s) * 1e3
        if got is not None and name not in sizes:
            sizes[name] = content(name, a.size)
        with lock:
            if lat_log:
                lat_log.write("%.3f %.3f %d\n" % (s - t0, dt, err or 0))
            state["reads"] += 1
            if err is not None:
                errs[err] = errs.get(err, 0) + 1
                if err == errno.ENOTCONN:   # the daemon is gone: stop
                    state["gone"] = True
            else:
                lat.append(dt)
                state["bytes"] += len(got)
                if got != sizes[name]:
                    state["wrong"] += 1

    def worker(k):
        rnd = random.Random(k)
        while True:
            idx = order[:]
            rnd.shuffle(idx)
            for i in (idx if t_end else order[k::a.threads]):
                if state.get("gone") or (t_end and time.monotonic() > t_end):
                    return
                one(i)
            if not t_end:
                return

    th = [threading.Thread(target=worker, args=(k,)) for k in range(a.threads)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    wall = time.monotonic() - t0
    if lat_log:
        lat_log.close()
    out = {"reads": state["reads"], "ok": len(lat), "wrong": state["wrong"],
           "errors": {os.strerror(k): v for k, v in errs.items()},
           "p50_ms": round(pct(lat, 0.5), 2), "p99_ms": round(pct(lat, 0.99), 2),
           "max_ms": round(max(lat) if lat else 0, 2),
           "mb_s": round(state["bytes"] / wall / 1e6, 1), "wall_s": round(wall, 1)}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f)
    print("read: %(reads)d reads, %(ok)d ok, %(wrong)d wrong, errors %(errors)s,"
          " p50 %(p50_ms)s ms, p99 %(p99_ms)s ms, max %(max_ms)s ms,"
          " %(mb_s)s MB/s" % out)
    sys.exit(1 if state["wrong"] else 0)


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("dir"); w.add_argument("ledger"); w.add_argument("tag")
    w.add_argument("--count", type=int, default=0)
    w.add_argument("--max-size", type=int, default=1 << 20)
    w.add_argument("--seconds", type=float, default=0)
    w.add_argument("--fsync", action="store_true")
    w.add_argument("--rate", type=float, default=0,
                   help="files per second at most (default: no pause)")
    c = sub.add_parser("check")
    c.add_argument("root"); c.add_argument("ledger")
    c.add_argument("--prefix", default="")
    c.add_argument("--all", action="store_true")
    c.add_argument("--max-size", type=int, default=1 << 20)
    g = sub.add_parser("gen")
    g.add_argument("dir"); g.add_argument("n", type=int)
    g.add_argument("size", type=int); g.add_argument("--tag", default="src")
    r = sub.add_parser("read")
    r.add_argument("dir"); r.add_argument("n", type=int)
    r.add_argument("--size", type=int, default=1 << 20)
    r.add_argument("--tag", default="src")
    r.add_argument("--start", type=int, default=0)
    r.add_argument("--seconds", type=float, default=0)
    r.add_argument("--threads", type=int, default=1)
    r.add_argument("--json")
    r.add_argument("--lat-log", help="one line a read: start s, ms, errno")
    a = p.parse_args()
    {"write": cmd_write, "check": cmd_check, "gen": cmd_gen,
     "read": cmd_read}[a.cmd](a)


if __name__ == "__main__":
    main()
