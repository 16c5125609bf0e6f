# SPDX-License-Identifier: MIT
"""kill -9 of the saving process at random points, 20 runs.

A checkpoint root on a posix directory, reached through the fault store
(20 ms per store call) so that a save takes long enough for kills to land
in every phase: staging, upload, markers, index, `latest`, retention.
Each run forks one saver (or, every third run, two ranks of one
checkpoint, one of which is killed) and kills it with SIGKILL after a
random delay.  After every run:

- `tierfs ckpt ls` lists only committed checkpoints, each of which
  `tierfs ckpt verify` accepts (every checksum) and loads bit for bit;
- `latest` names one of them, loads, and never goes backwards;
- a save that was not killed is committed and is the latest.
"""
import json
import os
import random
import signal
import subprocess
import time

import torch

import tierfs.torch as tt
from ckpt_common import TIERFS, same
from tierfs import ckpt

RUNS = 20
KEEP = 3


def state_for(step):
    """The state saved as step: ~3 MB in 24 tensors, contents set by step."""
    g = torch.Generator().manual_seed(step)
    return {"model": {f"layer{i}.weight": torch.randn(64, 256, generator=g)
                      for i in range(12)},
            "optim": {f"m{i}": torch.randn(300, generator=g)
                      for i in range(12)},
            "step": step}


def slice_of(state, rank, world):
    return {"model": {k: tt.shard(v, rank, world)
                      for k, v in state["model"].items()},
            "optim": {k: v for k, v in state["optim"].items()
                      if rank == 0},
            "step": state["step"]}


def fork_saver(uri, step, rank, world, staging):
    pid = os.fork()
    if pid:
        return pid
    try:
        os.environ["TIERFS_CKPT_STAGING"] = staging
        state = state_for(step)
        if world > 1:
            state = slice_of(state, rank, world)
        tt.save(state, uri, rank=rank, world_size=world, step=step,
                keep_last=KEEP, shard_size=1 << 20, run_id=f"run-{step}",
                timeout_s=1.5, async_=False)
        os._exit(0)
    except BaseException:
        os._exit(3)


def cli(*args):
    return subprocess.run([TIERFS, "ckpt", *args], capture_output=True,
                          text=True, timeout=120)


def check_store(root, floor):
    """Everything listed verifies and loads bit for bit; `latest` names
    one of them and never goes back.  Returns it.  (A save killed after
    its index but before `latest` moved leaves a complete checkpoint newer
    than `latest`: listed, and not the latest.)"""
    ls = cli("ls", "--json", root)
    assert ls.returncode == 0, ls.stderr
    listed = [json.loads(line) for line in ls.stdout.splitlines()]
    steps = [e["step"] for e in listed]
    assert steps == ckpt.list_steps(root)
    for s in steps:
        v = cli("verify", f"{root}/step-{s:06d}")
        assert v.returncode == 0, f"step {s}: {v.stderr}"
        same(state_for(s), tt.load(f"{root}/step-{s:06d}", lazy=False))
    latest = ckpt.latest(root)
    assert latest in steps and latest >= floor
    assert [e["step"] for e in listed if e["latest"]] == [latest]
    same(state_for(latest), tt.load(root, lazy=False))
    return latest


def test_kill_saver_at_random_points(tmp_path):
    torch.set_num_threads(1)
    rng = random.Random(int(os.environ.get("TFS_TEST_CRASH_SEED", "4")))
    root = str(tmp_path / "ckpts")
    staging = str(tmp_path / "staging")
    os.environ["TIERFS_CKPT_STAGING"] = staging
    uri = f"fault+file://{root}?latency_ms=20"
    # a committed baseline, and how long an uninterrupted save takes
    t0 = time.monotonic()
    pid = fork_saver(uri, 1, 0, 1, staging)
    assert os.waitpid(pid, 0)[1] == 0
    span = time.monotonic() - t0
    latest = check_store(root, 1)
    outcomes = {"killed": 0, "finished": 0, "committed": 0}
    for run in range(RUNS):
        step = run + 2
        world = 2 if run % 3 == 2 else 1
        pids = [fork_saver(uri, step, r, world, staging)
                for r in range(world)]
        victim = rng.randrange(world)
        time.sleep(rng.uniform(0, span * 1.4))
        try:
            os.kill(pids[victim], signal.SIGKILL)
        except ProcessLookupError:
            pass
        codes = [os.waitpid(p, 0)[1] for p in pids]
        killed = os.WIFSIGNALED(codes[victim])
        outcomes["killed" if killed else "finished"] += 1
        committed = step in ckpt.list_steps(root)
        outcomes["committed"] += committed
        if not killed and world == 1:
            assert committed, f"run {run}: finished but not committed"
        if all(os.WIFEXITED(c) and os.WEXITSTATUS(c) == 0 for c in codes):
            assert committed
        if not killed and world == 1:
            assert ckpt.latest(root) == step
        latest = check_store(root, latest)
        print(f"run {run}: world {world}, victim {'killed' if killed else 'done'}"
              f", committed={committed}, latest={latest}")
    print("outcomes:", outcomes)
    assert outcomes["killed"] >= RUNS // 2      # the kills did land
    # abandoned saves are listed only with --all, and gc removes them; it
    # keeps the newest checkpoint and the one `latest` names
    assert cli("ls", "--all", root).stdout.count("incomplete") == \
        len(ckpt.list_steps(root, incomplete=True))
    gc = cli("gc", "--keep", "1", root)
    assert gc.returncode == 0, gc.stderr
    assert ckpt.list_steps(root, incomplete=True) == []
    done = ckpt.list_steps(root)
    assert done == sorted({max(done), latest})
    check_store(root, latest)
