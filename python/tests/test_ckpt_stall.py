# SPDX-License-Identifier: MIT
"""A commit that never hangs (issue 18 item 4), with real rank processes
saving one step to a posix root behind the fault store:

- one rank SIGSTOPped while it uploads: every other rank's
  save().wait() raises TierfsError naming that rank within
  commit_timeout + 10 s; after SIGCONT the stopped rank fails too; nothing
  is committed, `latest` still names the previous checkpoint, a retry of
  the step commits and `ckpt gc` leaves nothing behind;
- one rank's store partitioned (partition_file) while it uploads: the
  same, and that rank names the upload that did not finish.

The measured times (commit_timeout against the end of each rank's wait)
are printed (pytest -s shows them).
"""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tierfs import ckpt

TIMEOUT = 5.0                           # commit_timeout of the saves, s
STEP = 10

RANK = r"""
import json, os, sys, time
import torch
import tierfs.torch as tt
from tierfs import TierfsError
uri, rank, world, out, timeout = sys.argv[1:6]
rank, world, timeout = int(rank), int(world), float(timeout)
torch.manual_seed(rank)
state = {"w%d" % i: torch.randn(1 << 18) for i in range(8)}   # 8 MiB
h = tt.save(state, uri, rank=rank, world_size=world, step=STEP,
            run_id="stall", shard_size=1 << 20, upload_threads=2,
            commit_timeout=timeout)
t_saved = time.monotonic()
open(out + ".saved", "w").close()
res = {"rank": rank}
try:
    h.wait()
    res["ok"] = True
except TierfsError as e:
    res.update(ok=False, errno=e.errno, error=str(e))
res["secs"] = time.monotonic() - t_saved
with open(out + ".tmp", "w") as f:
    json.dump(res, f)
os.rename(out + ".tmp", out)
""".replace("STEP", str(STEP))


def _env():
    env = dict(os.environ)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _start(tmp, uris, world):
    procs = []
    for r in range(world):
        out = os.path.join(tmp, "rank%d.json" % r)
        for p in (out, out + ".saved"):
            if os.path.exists(p):
                os.unlink(p)
        procs.append(subprocess.Popen(
            [sys.executable, "-c", RANK, uris[r], str(r), str(world), out,
             str(TIMEOUT)], env=_env()))
    return procs


def _wait_file(path, limit):
    end = time.monotonic() + limit
    while not os.path.exists(path):
        assert time.monotonic() < end, "no %s after %.0f s" % (path, limit)
        time.sleep(0.02)


def _result(tmp, r, limit):
    path = os.path.join(tmp, "rank%d.json" % r)
    _wait_file(path, limit)
    with open(path) as f:
        return json.load(f)


def _setup(tmp):
    root = os.path.join(str(tmp), "ckpts")
    staging = os.path.join(str(tmp), "staging")
    os.environ["TIERFS_CKPT_STAGING"] = staging
    import torch
    import tierfs.torch as tt
    tt.save({"x": torch.zeros(4)}, root + "/step-000001", async_=False)
    return root


def _check_nothing_committed(root):
    assert ckpt.list_steps(root) == [1]
    assert ckpt.latest(root) == 1


def _report(what, results):
    for res in results:
        print("# %s: commit_timeout %.0f s, rank %d ended %.2f s after "
              "save() returned: %s" % (what, TIMEOUT, res["rank"],
                                       res["secs"],
                                       "committed" if res["ok"]
                                       else res["error"]))


def _retry_and_gc(tmp, root, world):
    # gc first removes the aborted step (the newest, but aborted) ...
    out = subprocess.run([os.environ.get("TFS_TEST_BIN", "tierfs"), "ckpt",
                          "gc", root, "--keep", "1"], capture_output=True,
                         text=True, env=_env())
    assert out.returncode == 0, out.stderr
    assert ckpt.list_steps(root, incomplete=True) == []
    # ... and a retry of the step commits.
    procs = _start(str(tmp), [root] * world, world)
    res = [_result(str(tmp), r, 120) for r in range(world)]
    for p in procs:
        assert p.wait(30) == 0
    assert all(x["ok"] for x in res), res
    assert ckpt.list_steps(root) == [1, STEP]


def test_stopped_rank(tmp_path):
    """Rank 1 of 3 SIGSTOPped while its shards go up."""
    root = _setup(tmp_path)
    slow = "fault+file://%s?bw=4M" % root      # 8 MiB: about 2 s
    procs = _start(str(tmp_path), [slow] * 3, 3)
    try:
        _wait_file(os.path.join(str(tmp_path), "rank1.json.saved"), 120)
        time.sleep(0.3)
        procs[1].send_signal(signal.SIGSTOP)
        others = [_result(str(tmp_path), r, 120) for r in (0, 2)]
    finally:
        procs[1].send_signal(signal.SIGCONT)
    stopped = _result(str(tmp_path), 1, 60)
    for p in procs:
        assert p.wait(30) == 0
    _report("SIGSTOP", others + [stopped])
    for res in others:
        assert not res["ok"]
        assert res["secs"] < TIMEOUT + 10, res
        assert "step %d: rank 1 put no marker in 5 s" % STEP in res["error"]
    assert not stopped["ok"]
    assert "step %d: rank 1: " % STEP in stopped["error"]
    _check_nothing_committed(root)
    _retry_and_gc(tmp_path, root, 3)


def test_partitioned_upload(tmp_path):
    """Rank 1 of 2 loses its store (calls hang) while its shards go up."""
    root = _setup(tmp_path)
    part = os.path.join(str(tmp_path), "partition")
    uris = ["fault+file://%s?bw=4M" % root,
            "fault+file://%s?bw=4M&partition_file=%s" % (root, part)]
    procs = _start(str(tmp_path), uris, 2)
    _wait_file(os.path.join(str(tmp_path), "rank1.json.saved"), 120)
    time.sleep(0.3)
    open(part, "w").close()
    res = [_result(str(tmp_path), r, 120) for r in range(2)]
    for p in procs:
        assert p.wait(30) == 0
    os.unlink(part)
    _report("partition", res)
    for x in res:
        assert not x["ok"]
        assert x["secs"] < TIMEOUT + 10, x
        assert x["errno"] == 110, x
    assert "step %d: rank 1 put no marker in 5 s" % STEP in res[0]["error"]
    assert ("step %d: rank 1: upload of model-rank00001-" % STEP
            in res[1]["error"]), res[1]
    assert "did not finish in 5 s" in res[1]["error"]
    _check_nothing_committed(root)
    _retry_and_gc(tmp_path, root, 2)


TORCHRUN_RANK = r"""
import json, os, signal, sys, time
import torch
import torch.distributed as dist
import tierfs.torch as tt
from tierfs import TierfsError
root, tmp, timeout = sys.argv[1], sys.argv[2], float(sys.argv[3])
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
if rank == 1:                           # stopped before it saves
    with open(os.path.join(tmp, "pid1"), "w") as f:
        f.write(str(os.getpid()))
    os.kill(os.getpid(), signal.SIGSTOP)
t0 = time.monotonic()
h = tt.save({"w": torch.randn(1 << 16)}, root, rank=rank, world_size=world,
            step=STEP, commit_timeout=timeout)   # no run_id: no collective
res = {"rank": rank, "save_s": time.monotonic() - t0}
t_saved = time.monotonic()
try:
    h.wait()
    res["ok"] = True
except TierfsError as e:
    res.update(ok=False, errno=e.errno, error=str(e))
res["secs"] = time.monotonic() - t_saved
if rank == 0:
    with open(os.path.join(tmp, "pid1")) as f:
        os.kill(int(f.read()), signal.SIGCONT)
with open(os.path.join(tmp, "rank%d.json" % rank), "w") as f:
    json.dump(res, f)
""".replace("STEP", str(STEP))


def test_torchrun_rank_stopped_before_save(tmp_path):
    """torchrun, 2 ranks (gloo): rank 1 is stopped before it calls save().
    Rank 0's save() returns at once (no broadcast of a run id) and its
    wait() raises within commit_timeout + 10 s naming rank 1; resumed,
    rank 1 fails too (the note rank 0 left predates its open, so it ends
    at its own deadline), nothing is committed."""
    root = _setup(tmp_path)
    script = os.path.join(str(tmp_path), "rank.py")
    with open(script, "w") as f:
        f.write(TORCHRUN_RANK)
    env = _env()
    env.pop("TIERFS_RUN_ID", None)
    env["OMP_NUM_THREADS"] = "1"
    t0 = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--redirects", "1",
         "--tee", "1", "--nproc_per_node", "2", "--master_port", "29651",
         script, root, str(tmp_path), str(TIMEOUT)],
        capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    res = [_result(str(tmp_path), r, 1) for r in range(2)]
    _report("torchrun, rank 1 stopped before save", res)
    print("# torchrun job: %.1f s in all" % (time.monotonic() - t0))
    assert res[0]["save_s"] < 5, res[0]
    assert not res[0]["ok"] and res[0]["secs"] < TIMEOUT + 10, res[0]
    assert "step %d: rank 1 put no marker in 5 s" % STEP in res[0]["error"]
    assert not res[1]["ok"] and res[1]["secs"] < TIMEOUT + 10, res[1]
    assert "step %d: rank 1: " % STEP in res[1]["error"]
    _check_nothing_committed(root)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-s"]))
