# SPDX-License-Identifier: MIT
"""The cache-group test's helpers (tests/integ/group.sh, group_lib.sh).

  gen DIR MIB SEED              a dataset of files of 0.5-6 MiB (sizes not
                                block-aligned) until MIB MiB; DIR/manifest
                                holds "name size sha256" lines
  read MNT MANIFEST SEED THREADS JSON [PROGRESS]
                                one epoch: every file of MANIFEST read once
                                from MNT, in an order shuffled by SEED, by
                                THREADS threads, each checked against its
                                sha256; JSON gets files, bytes, ok, wrong,
                                errors (the first few), seconds, mib_s;
                                PROGRESS (if given) the bytes read so far
  rgwlog LOG OFFSET PATH        GETs in the RGW's log (its beast access
                                lines) from byte OFFSET whose path starts
                                with PATH: "gets bytes"
  stream-serve IP PORT          accept one TCP stream, count what arrives
                                until EOF, print "bytes seconds"
  stream-send IP PORT SECONDS   send zeros to IP:PORT for SECONDS
  sign SECRET_FILE METHOD BLOCK TIME NONCE
                                the group's request signature (hex):
                                HMAC-SHA256 over METHOD\\nBLOCK\\nTIME\\nNONCE
                                with the file's contents (one trailing
                                newline dropped), as src/group/auth.c
  json FILE PATH                one member of a JSON file (dotted path),
                                compact; "" when absent
"""
import hashlib
import hmac
import json
import os
import random
import re
import socket
import sys
import threading
import time

CHUNK = 1 << 20


def gen(d, mib, seed):
    rng = random.Random(int(seed))
    os.makedirs(d, exist_ok=True)
    total, i, rows = 0, 0, []
    while total < int(mib) << 20:
        size = rng.randint(1 << 19, 6 << 20)
        name = "f%04d.bin" % i
        data = rng.randbytes(size)
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
        rows.append("%s %d %s" % (name, size, hashlib.sha256(data).hexdigest()))
        total += size
        i += 1
    with open(os.path.join(d, "manifest"), "w") as f:
        f.write("\n".join(rows) + "\n")
    print(total)


def read_epoch(mnt, manifest, seed, threads, out, progress=None):
    rows = [l.split() for l in open(manifest) if l.strip()]
    random.Random(int(seed)).shuffle(rows)
    lock = threading.Lock()
    st = {"files": 0, "bytes": 0, "ok": 0, "wrong": 0, "errors": []}
    todo = list(rows)

    def one(name, size, digest):
        h = hashlib.sha256()
        n = 0
        with open(os.path.join(mnt, name), "rb", buffering=0) as f:
            while True:
                b = f.read(CHUNK)
                if not b:
                    break
                h.update(b)
                n += len(b)
                with lock:
                    st["bytes"] += len(b)
        return n == int(size) and h.hexdigest() == digest

    def worker():
        while True:
            with lock:
                if not todo:
                    return
                name, size, digest = todo.pop(0)
            try:
                good = one(name, size, digest)
                with lock:
                    st["files"] += 1
                    st["ok" if good else "wrong"] += 1
            except OSError as e:
                with lock:
                    st["files"] += 1
                    if len(st["errors"]) < 5:
                        st["errors"].append("%s: %s" % (name, e))
                    st["n_errors"] = st.get("n_errors", 0) + 1

    t0 = time.monotonic()
    ts = [threading.Thread(target=worker) for _ in range(int(threads))]
    for t in ts:
        t.start()
    while any(t.is_alive() for t in ts):
        if progress:
            with open(progress + ".tmp", "w") as f:
                f.write(str(st["bytes"]))
            os.replace(progress + ".tmp", progress)
        time.sleep(0.05)
    for t in ts:
        t.join()
    st["seconds"] = round(time.monotonic() - t0, 3)
    st["mib_s"] = round(st["bytes"] / (1 << 20) / max(st["seconds"], 1e-9), 1)
    st.setdefault("n_errors", 0)
    with open(out, "w") as f:
        json.dump(st, f)
    if progress:
        with open(progress, "w") as f:
            f.write(str(st["bytes"]))
    return 0 if st["wrong"] == 0 and st["n_errors"] == 0 else 1


# 2026-...  1 beast: 0x..: 127.0.0.1 - user [date] "GET /b/k HTTP/1.1" 206 1048576 ...
ACCESS = re.compile(r' beast: \S+ \S+ - \S+ \[[^]]*\] "GET (\S+) HTTP/[0-9.]+" '
                    r'(\d+) (\d+) ')


def rgwlog(log, offset, path):
    gets = nbytes = 0
    with open(log, "rb") as f:
        f.seek(int(offset))
        for line in f:
            m = ACCESS.search(line.decode("utf-8", "replace"))
            if m and m.group(1).startswith(path) and m.group(2)[0] == "2":
                gets += 1
                nbytes += int(m.group(3))
    print(gets, nbytes)


def stream_serve(ip, port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((ip, int(port)))
    s.listen(1)
    s.settimeout(20)
    c, _ = s.accept()
    c.settimeout(20)
    n, t0 = 0, None
    while True:
        b = c.recv(1 << 20)
        if not b:
            break
        if t0 is None:
            t0 = time.monotonic()
        n += len(b)
    print(n, round(time.monotonic() - (t0 or time.monotonic()), 3))


def stream_send(ip, port, seconds):
    for _ in range(100):
        try:
            c = socket.create_connection((ip, int(port)), timeout=5)
            break
        except OSError:
            time.sleep(0.05)
    else:
        sys.exit("stream-send: no listener at %s:%s" % (ip, port))
    buf = bytes(1 << 20)
    end = time.monotonic() + float(seconds)
    while time.monotonic() < end:
        c.sendall(buf)
    c.shutdown(socket.SHUT_WR)
    c.recv(1)
    c.close()


def sign(secret_file, method, block, t, nonce):
    key = open(secret_file, "rb").read()
    if key.endswith(b"\n"):
        key = key[:-1]
    msg = "%s\n%s\n%s\n%s" % (method, block, t, nonce)
    print(hmac.new(key, msg.encode(), hashlib.sha256).hexdigest())


def json_get(path, dotted):
    try:
        v = json.load(open(path))
    except (OSError, ValueError):
        print("")
        return
    for k in dotted.split("."):
        v = v.get(k) if isinstance(v, dict) else None
    print("" if v is None else json.dumps(v, separators=(",", ":")))


def main(a):
    cmd = a[0] if a else ""
    if cmd == "gen":
        gen(*a[1:4])
    elif cmd == "read":
        return read_epoch(*a[1:])
    elif cmd == "rgwlog":
        rgwlog(*a[1:4])
    elif cmd == "stream-serve":
        stream_serve(*a[1:3])
    elif cmd == "stream-send":
        stream_send(*a[1:4])
    elif cmd == "sign":
        sign(*a[1:6])
    elif cmd == "json":
        json_get(*a[1:3])
    else:
        sys.exit(__doc__)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
