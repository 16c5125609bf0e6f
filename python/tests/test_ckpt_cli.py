# SPDX-License-Identifier: MIT
"""`tierfs ckpt ls|show|verify|rm|gc`, run for real on a posix directory
or the local Ceph RGW (TFS_TEST_CKPT_STORE=posix|s3): output, --help, and exit
status 0 (ok), 1 (failure), 2 (usage)."""
import json
import os
import subprocess
import uuid

import pytest
import torch

import tierfs
import tierfs.torch as tt
from ckpt_common import TIERFS
from tierfs import ckpt

STORE = os.environ.get("TFS_TEST_CKPT_STORE", "posix")


def run(*args):
    return subprocess.run([TIERFS, "ckpt", *args], capture_output=True,
                          text=True, timeout=120)


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setenv("TIERFS_CKPT_STAGING", str(tmp_path / "staging"))
    if STORE == "posix":
        yield str(tmp_path / "ck")
        return
    uri = f"{os.environ['TFS_TEST_S3_URI']}/cli-{uuid.uuid4().hex[:8]}"
    yield uri
    with tierfs.Store(uri) as st:
        for key, _ in list(st.list("")):
            st.remove(key)


def test_help_and_usage():
    p = run("--help")
    assert p.returncode == 0 and "ckpt ls" not in p.stderr
    assert "verify URI/STEP" in p.stdout
    for sub in ("ls", "show", "verify", "rm", "gc"):
        p = run(sub, "--help")
        assert p.returncode == 0, sub
        assert p.stdout.startswith(f"usage: tierfs ckpt {sub}"), p.stdout
    for args in ([], ["bogus"], ["ls"], ["ls", "a", "b"], ["show"],
                 ["verify"], ["rm"], ["gc", "/tmp/x"], ["gc", "--keep", "0",
                                                      "/tmp/x"],
                 ["ls", "--nope", "/tmp/x"]):
        p = run(*args)
        assert p.returncode == 2, (args, p.stdout, p.stderr)


def test_commands(root):
    for step in (1, 2, 3):
        tt.save({"w": torch.full((10, 10), float(step)),
                 "n": {"k": torch.arange(step + 1)}},
                f"{root}/step-{step:06d}", async_=False)
    # an abandoned save: one rank of two, which gives up
    with pytest.raises(tierfs.TierfsError):
        tt.save({"w": torch.ones(1)}, root, rank=1, world_size=2, step=0,
                timeout_s=0.3, async_=False)
    p = run("ls", root)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert [next(t for t in line.split() if t.startswith("step-"))
            for line in lines] == ["step-000001", "step-000002",
                                   "step-000003"]
    assert lines[-1].startswith("* step-000003")
    p = run("ls", "--json", root)
    rows = [json.loads(line) for line in p.stdout.splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert rows[2]["latest"] and rows[0]["world_size"] == 1
    assert rows[0]["tensors"] == 2 and rows[0]["total_size"] == 400 + 16
    p = run("ls", "--all", root)
    assert "step-000000  (incomplete: no index)" in p.stdout
    p = run("show", f"{root}/2")
    assert p.returncode == 0, p.stderr
    assert "step 2: world size 1, 2 tensors" in p.stdout
    assert "F32    [10, 10]  w" in p.stdout and "I64    [3]  n.k" in p.stdout
    p = run("show", root)                      # no step: the latest
    assert p.stdout.startswith("step 3:")
    p = run("verify", f"{root}/step-000002")
    assert p.returncode == 0 and p.stdout.startswith("ok: step 2: 1 files, "
                                                      "2 tensors")
    p = run("verify", f"{root}/step-000009")
    assert p.returncode == 1 and "not a committed checkpoint" in p.stderr
    p = run("rm", f"{root}/step-000003")
    assert p.returncode == 0 and p.stdout == "removed step-000003\n"
    assert ckpt.list_steps(root) == [1, 2] and ckpt.latest(root) == 2
    p = run("rm", f"{root}/step-000003")
    assert p.returncode == 1 and "no step 3" in p.stderr
    p = run("rm", f"{root}/latest")
    assert p.returncode == 2
    p = run("gc", "--keep", "1", "--dry-run", root)
    assert p.returncode == 0 and p.stdout == "would remove 2 steps\n"  # 1 + step 0
    assert ckpt.list_steps(root) == [1, 2]
    p = run("gc", "--keep", "1", root)
    assert p.returncode == 0 and p.stdout == "removed 2 steps\n"
    assert ckpt.list_steps(root) == [2]
    assert ckpt.list_steps(root, incomplete=True) == []
    p = run("ls", root)
    assert p.stdout.startswith("* step-000002")


def test_missing_root(tmp_path):
    p = run("ls", str(tmp_path / "none"))
    assert p.returncode == 1 and str(tmp_path / "none") in p.stderr
    p = run("show", str(tmp_path / "none"))
    assert p.returncode == 1
