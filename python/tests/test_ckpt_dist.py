# SPDX-License-Identifier: MIT
"""Distributed checkpoints (issue 18 items 2, 5, 7).

Replicated state (DDP) saved once by all ranks: 1, 2 and 4 rank
processes save the same state with replicated=True; the store holds one
copy, each rank wrote about 1/N, and load gives it back bit for bit
(also with rank/world_size of another world), mixed with FSDP-style
ShardSlice entries too.  One reader of the control state: with a
torch.distributed (gloo) group of 4, a resume reads `latest`, lists the
root and reads the index once in all (counted with the fault layer's
log=PATH), rank 0's store errors reach every rank; without a group, the
other ranks read `latest` only.  Error classes: each rc maps to its
TierfsError subclass, from real failing calls where cheap.

Run as a script, this file is one rank (see _worker).
"""
import collections
import errno
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import pytest  # noqa: E402
import torch  # noqa: E402

import tierfs  # noqa: E402
import tierfs.torch as tt  # noqa: E402
from tierfs import _capi  # noqa: E402
from tierfs import ckpt as ck  # noqa: E402
from tierfs._ckpt_torch import _plan  # noqa: E402
from ckpt_common import full_state, make_state, same  # noqa: E402

PORTS = iter(range(29631, 29650))      # this suite's gloo ports
# Each rank's share of a replicated save stays within this fraction of
# the mean (the plan cuts units to at most a quarter of a share; greedy
# placement, largest first, ends within one unit of the mean).
BALANCE = 0.3


def _state(kind):
    """The state every rank holds (the same for the same kind)."""
    torch.manual_seed(7)
    if kind == "tiny":                  # fewer tensors than ranks
        return {"a": torch.arange(12, dtype=torch.float32).reshape(3, 4),
                "b": torch.ones(2, dtype=torch.int64), "n": 3}
    model, opt = make_state(small=True)
    st = full_state(model, opt)
    st["big"] = torch.randn(4096, 256)   # 4 MiB: cut into slices
    st["lists"] = [torch.randn(3), [1, (torch.zeros(2, 2), "x")], None]
    return st


def _fsdp(rank, world):
    torch.manual_seed(11)
    full = torch.randn(64, 33)
    return full, tt.shard(full, rank, world)


def _worker(argv):
    mode = argv[0]
    torch.set_num_threads(1)
    if mode == "save":                  # URI STEP RANK WORLD KIND
        uri, step, rank, world, kind = argv[1:6]
        rank, world = int(rank), int(world)
        st = _state(kind.replace("+fsdp", "").replace("+odd", ""))
        if kind.endswith("+fsdp"):
            st["fsdp"] = _fsdp(rank, world)[1]
        odd = kind.endswith("+odd") and rank == world - 1
        if odd:                         # this rank lacks a sliced tensor
            del st["big"]
        h = tt.save(st, uri, rank=rank, world_size=world, step=int(step),
                    run_id="dist", replicated=True,
                    timeout_s=5 if kind.endswith("+odd") else 120)
        try:
            h.wait()
        except tierfs.TierfsError as e:
            print(json.dumps({"rank": rank, "cls": type(e).__name__,
                              "error": str(e)}))
            return
        print(json.dumps({"rank": rank, "blocked_s": h.blocked_s}))
        return
    if mode == "resume":                # URI RANK WORLD [EVERY] (no group)
        uri, rank, world = argv[1], int(argv[2]), int(argv[3])
        every = int(argv[4]) if len(argv) > 4 else 1
        c = tt.Checkpointer(uri, every=every, rank=rank, world_size=world)
        step, state = c.resume()
        same(_state("model"), state)
        print(json.dumps({"rank": rank, "step": step}))
        return
    # dist PORT RANK WORLD ROOT LOG WHAT
    port, rank, world, root, log, what = argv[1:7]
    rank, world = int(rank), int(world)
    torch.distributed.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
        world_size=world)
    try:
        _dist_case(rank, world, root, log, what)
    finally:
        torch.distributed.destroy_process_group()


def _dist_case(rank, world, root, log, what):
    dist = torch.distributed
    logged = f"fault+file://{root}?log={log}"
    if what == "save-resume":
        c = tt.Checkpointer(f"file://{root}", rank=rank, world_size=world,
                            replicated=True, timeout_s=120)
        c.save(10, _state("model"))
        c.wait()
        dist.barrier()
        if rank == 0:
            open(log, "w").close()
        dist.barrier()
        step, state = tt.Checkpointer(logged, rank=rank,
                                      world_size=world).resume()
        assert step == 10
        same(_state("model"), state)
        print(json.dumps({"rank": rank, "ok": True}))
        return
    if what == "mismatch":
        st = _state("tiny")
        if rank == world - 1:
            st["extra"] = torch.zeros(3)
        try:
            tt.save(st, f"file://{root}", rank=rank, world_size=world,
                    step=20, replicated=True, check_replicas=True)
        except ValueError as e:
            print(json.dumps({"rank": rank, "error": str(e)}))
            return
        raise AssertionError("a mismatched replicated save went through")
    # what == "error-" + fault options: rank 0's store refuses
    opts = what[len("error-"):].replace(",", "&")
    uri = f"fault+file://{root}?{opts}" if rank == 0 else f"file://{root}"
    try:
        tt.Checkpointer(uri, rank=rank, world_size=world).resume()
    except tierfs.TierfsError as e:
        print(json.dumps({"rank": rank, "cls": type(e).__name__,
                          "errno": e.errno, "error": str(e)}))
        return
    raise AssertionError("resume did not raise")


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [p for p in (env.get("PYTHONPATH"), HERE) if p])
    return env


def _ranks(args_of, world, timeout=180):
    """Run world rank processes (args_of(rank)); their JSON lines."""
    procs = [subprocess.Popen([sys.executable, __file__] + args_of(r),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=_env()) for r in range(world)]
    out = []
    for r, p in enumerate(procs):
        so, se = p.communicate(timeout=timeout)
        assert p.returncode == 0, f"rank {r}: {se[-3000:]}"
        out.append(json.loads(so.strip().splitlines()[-1]))
    return out


def _state_bytes(obj):
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, tt.ShardSlice):
        return 0
    if isinstance(obj, dict):
        return sum(_state_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_state_bytes(v) for v in obj)
    return 0


def _per_rank(root, step):
    """(data bytes per rank, header bytes, total_size) from the index."""
    with ck.Reader(root, step=step, use_staging=False) as r:
        ix = json.loads(r.index_text())
    per = collections.Counter()
    headers = 0
    for f in ix["tierfs"]["files"].values():
        per[f["rank"]] += f["size"] - f["header_size"]
        headers += f["header_size"]
    return per, headers, ix["metadata"]["total_size"]


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setenv("TIERFS_CKPT_STAGING", str(tmp_path / "staging"))
    return str(tmp_path / "ck")


@pytest.mark.parametrize("world", [1, 2, 4])
def test_replicated_written_once(root, world):
    _ranks(lambda r: ["save", root, "5", str(r), str(world), "model"], world)
    want = _state("model")
    one = _state_bytes(want)
    per, headers, total = _per_rank(root, 5)
    assert total == one                 # one copy, not world copies
    assert sum(per.values()) == one
    assert headers < 256 << 10
    mean = one / world
    assert sorted(per) == list(range(world))
    for r, n in per.items():            # each rank wrote about 1/world
        assert abs(n - mean) <= BALANCE * mean, (r, n, mean)
    same(want, tt.load(root, lazy=False))
    lazy = tt.load(root)
    same(want, lazy.to_dict())
    for w in (1, 3):                    # replicated: full, whatever world
        same(want, tt.load(root, lazy=False, rank=w - 1, world_size=w))


def test_replicated_few_tensors(root):
    """Two tensors, four ranks: two ranks write no tensor at all."""
    _ranks(lambda r: ["save", root, "1", str(r), "4", "tiny"], 4)
    per, _, total = _per_rank(root, 1)
    assert total == 12 * 4 + 2 * 8 and sum(per.values()) == total
    same(_state("tiny"), tt.load(root, lazy=False))


def test_replicated_with_shard_slices(root):
    world = 2
    _ranks(lambda r: ["save", root, "3", str(r), str(world), "model+fsdp"],
           world)
    want = _state("model")
    full, _ = _fsdp(0, world)
    got = tt.load(root, lazy=False)
    same(full, got.pop("fsdp"))
    same(want, got)
    _, _, total = _per_rank(root, 3)
    assert total == _state_bytes(want) + full.numel() * 4
    for r in range(3):                  # resharded 2 -> 3
        got = tt.load(root, lazy=False, rank=r, world_size=3)
        sl = got.pop("fsdp")
        assert isinstance(sl, tt.ShardSlice)
        want_sl = tt.shard(full, r, 3)
        same(want_sl.tensor.contiguous(), sl.tensor)
        assert sl.offsets == want_sl.offsets
        same(want, got)


def test_replicated_mismatch_without_group_is_refused_at_commit(root):
    """No process group: the commit's tiling check refuses the tensor a
    rank did not save its part of, naming it; nothing is committed.  The
    other rank ends at once on rank 0's abort note, with its reason."""
    out = _ranks(lambda r: ["save", root, "2", str(r), "2", "model+odd"], 2)
    for o in out:
        assert o["cls"] == "TierfsCorruptError", out
        assert "tensor 'big'" in o["error"], out
        assert "do all ranks hold the same state?" in o["error"], out
    assert ck.latest(root) is None


def test_plan_is_deterministic_and_balanced():
    items = [(f"w{i}", "F32", (1000 + i, 64), 4) for i in range(50)]
    items += [("emb", "F32", (50000, 64), 4), ("s", "F32", (), 4)]
    a, da = _plan(items, 4)
    b, db = _plan(list(items), 4)
    assert a == b and da == db
    size = {n: sh for n, _, sh, _ in items}
    loads = [0] * 4
    rows = collections.defaultdict(list)
    for r, units in enumerate(a):
        for name, lo, hi in units:
            sh = size[name]
            n = 4 * (hi - lo if lo is not None else (sh[0] if sh else 1))
            loads[r] += n * (sh[1] if len(sh) > 1 else 1)
            rows[name].append((lo, hi))
    assert sorted(rows) == sorted(size)
    assert sorted(rows["emb"])[0][0] == 0 and len(rows["emb"]) > 1
    mean = sum(loads) / 4
    assert max(loads) - mean <= BALANCE * mean, loads
    _, other = _plan(items[:-1], 4)
    assert other != da


def _log_counts(log):
    c = collections.Counter()
    for line in open(log):
        op, _, key = line.rstrip("\n").partition(" ")
        if key == "latest" or op == "list":
            c[f"{op} {key or '/'}"] += 1
        elif key.endswith("model.safetensors.index.json") and op == "read":
            c["read index"] += 1
    return c


def test_group_resume_reads_control_state_once(tmp_path, monkeypatch):
    monkeypatch.setenv("TIERFS_CKPT_STAGING", str(tmp_path / "staging"))
    root, log = str(tmp_path / "ck"), str(tmp_path / "calls.log")
    port = next(PORTS)
    out = _ranks(lambda r: ["dist", str(port), str(r), "4", root, log,
                            "save-resume"], 4)
    assert all(o["ok"] for o in out)
    c = _log_counts(log)
    # 4 ranks, one reader: O(1), not O(ranks)
    assert c["read latest"] == 1, c
    assert c["list /"] == 1, c
    assert c["read index"] == 1, c
    per, _, total = _per_rank(root, 10)
    assert total == _state_bytes(_state("model")) and len(per) == 4


def test_resume_without_group_lists_once(tmp_path, monkeypatch):
    root, log = str(tmp_path / "ck"), str(tmp_path / "calls.log")
    monkeypatch.setenv("TIERFS_CKPT_STAGING", str(tmp_path / "staging"))
    _ranks(lambda r: ["save", root, "4", str(r), "4", "model"], 4)
    uri = f"fault+file://{root}?log={log}"
    out = _ranks(lambda r: ["resume", uri, str(r), "4"], 4)
    assert [o["step"] for o in out] == [4] * 4
    c = _log_counts(log)
    assert c["read latest"] == 4, c     # one each
    assert c["list /"] == 1, c          # rank 0 only


def test_resume_without_group_past_a_stale_latest(tmp_path, monkeypatch):
    """A save killed between its index and `latest` (F7) with ranks that
    share no process group: rank 0 lists and takes the newer step; the
    others read `latest` only, so they stat the next step's index and
    take it too, whether or not rank 0 repointed `latest` first."""
    root = str(tmp_path / "ck")
    monkeypatch.setenv("TIERFS_CKPT_STAGING", str(tmp_path / "staging"))
    for step in ("4", "8"):
        _ranks(lambda r: ["save", root, step, str(r), "2", "model"], 2)
    with open(os.path.join(root, "latest"), "w") as f:
        f.write("step-000004\n")               # the kill's window
    # rank 1 before rank 0 repointed `latest` (here: without rank 0)
    out = _ranks(lambda r: ["resume", f"file://{root}", "1", "2", "4"], 1)
    assert out[0]["step"] == 8, out
    out = _ranks(lambda r: ["resume", f"file://{root}", str(r), "2",
                            "4"], 2)
    assert [o["step"] for o in out] == [8, 8], out


def test_group_resume_mismatch_refused_on_every_rank(tmp_path, monkeypatch):
    monkeypatch.setenv("TIERFS_CKPT_STAGING", str(tmp_path / "staging"))
    root = str(tmp_path / "ck")
    port = next(PORTS)
    out = _ranks(lambda r: ["dist", str(port), str(r), "3", root, "-",
                            "mismatch"], 3)
    for o in out:
        assert "tensor 'extra' differs between ranks" in o["error"], o


@pytest.mark.parametrize("fault,cls,err", [
    ("error=EACCES,error_rate=1,error_ops=list", "TierfsPermissionError",
     errno.EACCES),
    ("error=server,error_rate=1,error_ops=read,error_prefix=latest",
     "TierfsError", errno.EIO),
    ("error=ETIMEDOUT,error_rate=1,error_ops=stat", "TierfsTimeoutError",
     errno.ETIMEDOUT),
])
def test_group_resume_rank0_error_reaches_every_rank(tmp_path, monkeypatch,
                                                     fault, cls, err):
    root = str(tmp_path / "ck")
    monkeypatch.setenv("TIERFS_CKPT_STAGING", str(tmp_path / "staging"))
    _ranks(lambda r: ["save", root, "2", "0", "1", "tiny"], 1)
    port = next(PORTS)
    out = _ranks(lambda r: ["dist", str(port), str(r), "2", root, "-",
                            "error-" + fault], 2)
    for o in out:
        assert o["cls"] == cls and o["errno"] == err, o
        assert "fault: injected" in o["error"], o


# ---- error classes (item 7) ----

@pytest.mark.parametrize("rc,cls,base", [
    (-errno.ETIMEDOUT, tierfs.TierfsTimeoutError, TimeoutError),
    (-errno.ENOENT, tierfs.TierfsNotFoundError, FileNotFoundError),
    (-errno.EACCES, tierfs.TierfsPermissionError, PermissionError),
    (-errno.EPERM, tierfs.TierfsPermissionError, PermissionError),
    (-20011, tierfs.TierfsPermissionError, PermissionError),   # ENOCRED
    (-20002, tierfs.TierfsCorruptError, ValueError),           # ECORRUPT
    (-20014, tierfs.TierfsCorruptError, ValueError),           # EFORMAT
    (-errno.ENOSPC, tierfs.TierfsNoSpaceError, OSError),
    (-errno.EDQUOT, tierfs.TierfsNoSpaceError, OSError),
    (-errno.EIO, tierfs.TierfsError, OSError),
    (-20010, tierfs.TierfsError, OSError),                      # ESERVER
])
def test_error_classes(rc, cls, base):
    with pytest.raises(cls) as ei:
        _capi.check(rc)
    e = ei.value
    assert type(e) is cls and isinstance(e, base)
    assert isinstance(e, tierfs.TierfsError) and isinstance(e, OSError)
    assert e.rc == rc and e.errno == _capi.tfs_errno(rc)
    assert isinstance(e.detail, str)
    assert e.retryable == (rc in (-errno.ETIMEDOUT, -20010))
    assert tt.TierfsError is tierfs.TierfsError
    assert getattr(tt, cls.__name__) is cls
    import pickle                       # an exception crossing processes
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is cls and back.rc == rc and str(back) == str(e)


def test_errors_from_real_calls(tmp_path, monkeypatch):
    monkeypatch.setenv("TIERFS_CKPT_STAGING", str(tmp_path / "staging"))
    root = str(tmp_path / "ck")
    with pytest.raises(tierfs.TierfsNotFoundError):
        tt.load(root + "/step-000009")
    tt.save({"w": torch.arange(1000.)}, root + "/step-000001",
            async_=False)
    refused = f"fault+file://{root}?error=EACCES&error_rate=1"
    with pytest.raises(tierfs.TierfsPermissionError) as ei:
        tt.load(refused)
    assert "injected EACCES" in ei.value.detail
    with pytest.raises(tierfs.TierfsTimeoutError):
        ck.latest(f"fault+file://{root}?error=ETIMEDOUT&error_rate=1")
    shard = [os.path.join(dp, f) for dp, _, fs in os.walk(root) for f in fs
             if f.endswith(".safetensors")][0]
    with open(shard, "r+b") as f:       # one byte of data flipped
        f.seek(-3, os.SEEK_END)
        b = f.read(1)
        f.seek(-3, os.SEEK_END)
        f.write(bytes([b[0] ^ 0xFF]))
    with pytest.raises(tierfs.TierfsCorruptError) as ei:
        tt.load(root, lazy=False, use_staging=False)
    assert "checksum" in str(ei.value)


@pytest.mark.skipif(not os.environ.get("AWS_ENDPOINT_URL"),
                    reason="needs the S3 server (scripts/s3-server env)")
def test_missing_bucket_is_an_error_not_a_fresh_run():
    """S3 answers -ENOENT (404 NoSuchBucket) for a bucket that does not
    exist: a wrong URI, never "no checkpoint yet"."""
    for f in (ck.latest, ck.read_latest):
        with pytest.raises(tierfs.TierfsNotFoundError, match="NoSuchBucket"):
            f("s3://tierfs-no-such-bucket-dist/run")
    with pytest.raises(tierfs.TierfsNotFoundError, match="NoSuchBucket"):
        tt.Checkpointer("s3://tierfs-no-such-bucket-dist/run").resume()


def test_reader_from_given_index(tmp_path, monkeypatch):
    """Reader(index=text) reads no `latest`, lists nothing, GETs no index,
    and checks the text as a fetched index."""
    monkeypatch.setenv("TIERFS_CKPT_STAGING", str(tmp_path / "staging"))
    root, log = str(tmp_path / "ck"), str(tmp_path / "calls.log")
    tt.save({"w": torch.arange(64.)}, root + "/step-000007", async_=False)
    with ck.Reader(root) as r:
        text = r.index_text()
    with ck.Reader(f"fault+file://{root}?log={log}", index=text,
                   use_staging=False) as r:
        assert r.step == 7 and r.read("w") == torch.arange(64.).numpy() \
            .tobytes()
    calls = open(log).read().splitlines()
    assert not [c for c in calls if c.endswith(" latest") or
                c.startswith("list") or c.endswith("index.json")], calls
    with pytest.raises(tierfs.TierfsCorruptError, match="given index"):
        ck.Reader(root, index=text[:-2])
    with pytest.raises(tierfs.TierfsCorruptError, match="names step 7, "
                                                        "not 8"):
        ck.Reader(root, step=8, index=text)
    bad = json.loads(text)
    f = next(iter(bad["tierfs"]["files"].values()))
    f["header_xxh3"] = "0" * 16
    with pytest.raises(tierfs.TierfsCorruptError, match="header checksum"):
        ck.Reader(root, index=json.dumps(bad), use_staging=False)


def test_fault_log_lines(tmp_path):
    log = str(tmp_path / "calls.log")
    with tierfs.Store(f"fault+file://{tmp_path}?log={log}") as st:
        st.put("a/b", b"xy")
        st.read("a/b", 0, 2)
        list(st.list("a/"))
    assert open(log).read().splitlines() == ["put a/b", "read a/b",
                                             "list a/"]


if __name__ == "__main__":
    _worker(sys.argv[1:])
