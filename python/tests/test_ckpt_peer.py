# SPDX-License-Identifier: MIT
"""The peer durability level (issue 18 item 6) with real processes: a
`tierfs serve` member on 127.0.0.1 keeps the checkpoint copies, and two
rank processes of "node A" save through Checkpointer(group=...):

- save, wait(level="peer") returns while the uploads hang
  (partition_file); the member holds every file of both ranks;
- both ranks are SIGKILLed and node A's staging is removed (the node is
  lost before the commit); a new pair on a fresh staging runs
  Checkpointer.resume(): each rank fetches its copy back from the member,
  the step is recovered, committed and loaded bit for bit, this rank's
  files read from the fetched copy;
- without the group the same loss gives the previous checkpoint.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import time

import pytest

torch = pytest.importorskip("torch")

from test_ckpt_levels import _pair  # noqa: E402  (the rank processes)


def _port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def member(tmp_path):
    """A `tierfs serve` member B keeping copies; yields (group, copies)."""
    a, b = _port(), _port()
    secret = tmp_path / "secret"
    secret.write_text("0123456789abcdef-group-secret")
    secret.chmod(0o600)
    lst = tmp_path / "group"
    lst.write_text(f"127.0.0.1:{a}\n127.0.0.1:{b}\n")
    copies = tmp_path / "copies"
    (tmp_path / "b-store").mkdir()
    log = open(tmp_path / "serve.log", "w")
    p = subprocess.Popen(
        [os.environ["TFS_TEST_BIN"], "serve",
         f"file://{tmp_path / 'b-store'}", "--cache-dir",
         str(tmp_path / "b-cache"), "--group", str(lst), "--group-listen",
         f"127.0.0.1:{b}", "--group-secret-file", str(secret),
         "--group-ckpt-dir", str(copies)], stdout=log, stderr=log)
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", b), 0.2).close()
            break
        except OSError:
            assert p.poll() is None, (tmp_path / "serve.log").read_text()
            assert time.monotonic() < deadline, "tierfs serve did not start"
            time.sleep(0.05)
    group = {"members": str(lst), "secret_file": str(secret),
             "self": f"127.0.0.1:{a}", "timeout_s": 2}
    yield group, copies
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    log.close()


def _ranks(tmp, mode, root, step, run, group, staging, hang=False):
    """test_ckpt_levels' two rank processes, with the group, waiting for
    the peer level."""
    return _pair(tmp, mode, root, step, run, hang, staging,
                 {"TFS_TEST_GROUP": json.dumps(group),
                  "TFS_TEST_LEVEL": "peer"})


def test_node_lost_before_commit(tmp_path, member):
    group, copies = member
    root = str(tmp_path / "root")
    os.makedirs(root)
    # Step 1 commits normally (and reaches the peer level too).
    res = _ranks(tmp_path, "save", root, 1, "job-1", group, "stA")
    assert all(r["peer"] and r["level_end"] == "store" for r in res)
    # Step 2: the peer level, then the node is lost before the commit.
    res = _ranks(tmp_path, "save", root, 2, "job-1", group, "stA", hang=True)
    for r in res:
        assert r["peer"] is True and r["level"] == "peer", r
        print(f"# rank {r['rank']}: peer level {r['peer_s']:.2f} s after "
              "save() returned, the store upload hanging")
    kept = sorted(p.name for p in copies.glob("*/step-000002/*"))
    assert "rank-00000.local" in kept and "rank-00001.local" in kept
    assert sum(n.endswith(".safetensors") for n in kept) == 8  # 4 a rank
    for r in range(2):
        shutil.rmtree(tmp_path / f"stA{r}")  # node A's disk is gone
    # A replacement node (fresh staging) resumes: step 2 comes back.
    res = _ranks(tmp_path, "resume", root, 0, "job-2", group, "stB")
    for r in res:
        assert r["step"] == 2 and r["equal"], r
        mine = [f for f in r["local_files"] if f[1] == r["rank"]]
        assert mine and all(f[2] for f in mine), r["local_files"]
        print(f"# rank {r['rank']}: resumed step 2 from the peer's copy in "
              f"{r['resume_s']:.2f} s")
    # Without the group, the same loss falls back to the newest commit.
    res = _ranks(tmp_path, "save", root, 3, "job-2", group, "stC", hang=True)
    assert all(r["level"] == "peer" for r in res)
    for r in range(2):
        shutil.rmtree(tmp_path / f"stC{r}")
    nogroup = dict(group, members=str(tmp_path / "alone"))
    (tmp_path / "alone").write_text(group["self"] + "\n")
    res = _ranks(tmp_path, "resume", root, 0, "job-3", nogroup, "stD")
    assert all(r["step"] == 2 and r["equal"] for r in res), res
