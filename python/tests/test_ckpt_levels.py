# SPDX-License-Identifier: MIT
"""Durability you can wait for (issue 18 item 6), with real rank
processes on a posix root behind the fault store:

- SaveHandle.level() / wait(level=...): "local" comes before "store"
  (uploads capped at bw=100M, 256 MiB; the times are printed: pytest -s);
  "peer" raises without a cache group (test_ckpt_peer.py has one);
- 2 rank processes save a step whose uploads hang (partition_file), are
  SIGKILLed after wait("local") returned; a new pair runs
  Checkpointer.resume() on the healed store: the step is recovered,
  committed and loaded bit for bit (this rank's files from its staging
  copy);
- the same with rank 1's staging copy gone: nothing is committed, resume
  gives the previous checkpoint, well within commit_timeout.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch")

import tierfs.torch as tt  # noqa: E402
from tierfs import TierfsError, ckpt  # noqa: E402

TIMEOUT = 30.0                          # commit_timeout, s

# argv: mode root rank world step staging out [partition_file]
RANK = r"""
import json, os, sys, time
import torch
import tierfs.torch as tt
mode, root, rank, world, step, staging, out = sys.argv[1:8]
rank, world, step = int(rank), int(world), int(step)
torch.set_num_threads(1)

def state(step):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return {"r%d" % rank: {"w%d" % i: torch.randn(1 << 18, generator=g)
                           for i in range(4)},
            "step": step}

# test_ckpt_peer.py runs this too: a cache group, the level to wait for
group = json.loads(os.environ.get("TFS_TEST_GROUP", "false"))
level = os.environ.get("TFS_TEST_LEVEL", "local")
ck = tt.Checkpointer(root, every=1, keep_last=0, rank=rank,
                     world_size=world, staging_dir=staging,
                     run_id=os.environ["RUN"], commit_timeout=TIMEOUT,
                     shard_size=1 << 20, upload_bw=0, group=group)
res = {"rank": rank}
if mode == "save":
    h = ck.save(step, state(step))
    if len(sys.argv) > 8:               # the uploads hang from now on
        open(sys.argv[8], "w").close()
    t0 = time.monotonic()
    res[level] = h.wait(level=level)
    res[level + "_s"] = time.monotonic() - t0
    res["level"] = h.level()
    if len(sys.argv) <= 8:
        h.wait()
        res["level_end"] = h.level()
else:
    t0 = time.monotonic()
    got, st = ck.resume()
    res["resume_s"] = time.monotonic() - t0
    res["step"] = got
    want = state(got) if got is not None else None
    res["equal"] = got is not None and all(
        torch.equal(st["r%d" % rank][k], want["r%d" % rank][k])
        for k in want["r%d" % rank]) and st["step"] == got
    from tierfs import ckpt
    with ckpt.Reader(root, step=got, staging_dir=staging) as r:
        res["local_files"] = [(f["name"], f["rank"], f["local"])
                              for f in r.files]
with open(out + ".tmp", "w") as f:
    json.dump(res, f)
os.rename(out + ".tmp", out)
if mode == "save" and len(sys.argv) > 8:
    time.sleep(600)                     # killed here, before any commit
""".replace("TIMEOUT", repr(TIMEOUT))


def _env(run, extra=None):
    env = dict(os.environ)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["RUN"] = run
    env.update(extra or {})
    return env


def _start(tmp, mode, root, rank, step, run, pf=None, staging="staging",
           extra=None):
    out = str(tmp / f"{mode}-{step}-{rank}-{staging}.json")
    args = [sys.executable, "-c", RANK, mode, root, str(rank), "2",
            str(step), str(tmp / f"{staging}{rank}"), out]
    if pf:
        args.append(pf)
    return subprocess.Popen(args, env=_env(run, extra)), out


def _result(out, deadline):
    while not os.path.exists(out):
        if time.monotonic() > deadline:
            raise AssertionError(f"no result {out}")
        time.sleep(0.05)
    with open(out) as f:
        return json.load(f)


def _pair(tmp, mode, root, step, run, hang=False, staging="staging",
          extra=None):
    """Run both ranks (their staging dirs STAGING0 and STAGING1, extra
    in their environment); with hang, SIGKILL them once both
    reported."""
    procs = []
    for r in range(2):
        uri, pf = root, None
        if hang:
            pf = str(tmp / f"partition{r}")
            uri = f"fault+file://{root}?bw=2M&partition_file={pf}"
        procs.append(_start(tmp, mode, uri, r, step, run, pf, staging,
                            extra))
    deadline = time.monotonic() + 90
    res = [_result(out, deadline) for _, out in procs]
    for p, _ in procs:
        if hang:
            p.send_signal(signal.SIGKILL)
        assert p.wait(timeout=60) in (0, -signal.SIGKILL)
    for r in range(2):
        pf = tmp / f"partition{r}"
        if pf.exists():
            pf.unlink()
    return res


def test_levels_and_timing(tmp_path):
    """256 MiB at bw=100M: local long before store; peer refused."""
    root = str(tmp_path / "root")
    uri = f"fault+file://{root}?bw=100M"
    g = torch.Generator().manual_seed(7)
    state = {"w%d" % i: torch.randn(1 << 22, generator=g) for i in range(16)}
    h = tt.save(state, uri, step=1, staging_dir=str(tmp_path / "staging"),
                commit_timeout=120)
    t0 = time.monotonic()
    assert h.level() in ("none", "local")
    assert h.wait(level="local") is True
    t_local = time.monotonic() - t0
    lv = h.level()
    with pytest.raises(TierfsError, match="no cache group configured: the "
                       "peer level needs one"):
        h.wait(level="peer")
    with pytest.raises(ValueError):
        h.wait(level="disk")
    assert h.wait(level="store") is True
    t_store = time.monotonic() - t0
    assert h.level() == "store"
    assert h.wait(level="local") is True
    print(f"\n256 MiB, bw=100M: save() blocked {h.blocked_s:.2f} s; from its "
          f"return: local {t_local:.2f} s, store {t_store:.2f} s")
    assert lv == "local" and t_local < t_store


def test_refused_upload_local_ok_store_raises(tmp_path):
    root = str(tmp_path / "root")
    uri = (f"fault+file://{root}?error_rate=1&error=EACCES&error_ops=put&"
           "error_prefix=step-000003/model")
    w = torch.arange(1 << 16, dtype=torch.float32)
    h = tt.save({"w": w}, uri, step=3, staging_dir=str(tmp_path / "staging"),
                commit_timeout=20)
    assert h.wait(level="local") is True
    with pytest.raises(TierfsError, match="upload"):
        h.wait(level="store")
    assert h.level() == "local"
    assert h.wait(level="local") is True
    # The local copy survives: a resume commits it and loads it.
    ck = tt.Checkpointer(root, staging_dir=str(tmp_path / "staging"))
    step, st = ck.resume()
    assert step == 3 and torch.equal(st["w"], w)
    assert ckpt.latest(root) == 3


def test_killed_after_local_recovered(tmp_path):
    root = str(tmp_path / "root")
    os.makedirs(root)
    base = _pair(tmp_path, "save", root, 10, "job1")
    assert all(r["level_end"] == "store" for r in base)
    res = _pair(tmp_path, "save", root, 20, "job2", hang=True)
    for r in res:
        assert r["local"] is True and r["level"] == "local", r
    assert ckpt.list_steps(root) == [10]
    assert ckpt.latest(root) == 10
    t0 = time.monotonic()
    res = _pair(tmp_path, "resume", root, 0, "job3")
    print(f"\nrecovered step 20 in {time.monotonic() - t0:.2f} s (both "
          f"processes); resume(): {[round(r['resume_s'], 2) for r in res]}")
    for r in res:
        assert r["step"] == 20 and r["equal"], r
        own = [f for f in r["local_files"] if f[1] == r["rank"]]
        assert own and all(f[2] for f in own), r["local_files"]
    assert ckpt.list_steps(root) == [10, 20]
    assert ckpt.latest(root) == 20
    with ckpt.Reader(root, step=20) as rd:
        rd.verify()
    # Rank 1's staging copy of step 30 is gone: nobody commits it.
    res = _pair(tmp_path, "save", root, 30, "job4", hang=True)
    assert all(r["local"] for r in res)
    ns = os.listdir(tmp_path / "staging1")
    shutil.rmtree(tmp_path / "staging1" / ns[0] / "step-000030")
    t0 = time.monotonic()
    res = _pair(tmp_path, "resume", root, 0, "job5")
    took = time.monotonic() - t0
    print(f"rank 1 without step 30: resume gave {[r['step'] for r in res]} "
          f"in {took:.2f} s")
    for r in res:
        assert r["step"] == 20 and r["equal"], r
    assert took < TIMEOUT
    assert ckpt.list_steps(root) == [10, 20]
    assert ckpt.latest(root) == 20
