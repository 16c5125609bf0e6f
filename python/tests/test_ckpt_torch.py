# SPDX-License-Identifier: MIT
"""tierfs.torch save/load of a real model and optimizer (a ~52 M parameter
transformer built from torch.nn, one AdamW step taken), bit for bit, on a
posix directory or on the local Ceph RGW (TFS_TEST_CKPT_STORE=posix|s3):

- one checkpoint each written by 1, 2 and 4 rank processes (FSDP-style
  slices along dimension 0; scalars by rank 0);
- restores: the whole state, resharded 4 -> 2 and 2 -> 1, lazily, from
  the local staging copy and from the store alone, into a fresh model;
- the shards read by an independent safetensors reader, and the index
  mapping every tensor;
- lazy-dict semantics and the Checkpointer.
"""
import collections
import copy
import json
import mmap
import os
import tempfile
import uuid

import numpy
import pytest
import torch

import st_reader
import tierfs
import tierfs.torch as tt
from ckpt_common import fork_ranks, full_state, make_state, n_params, same
from tierfs import ckpt

STORE = os.environ.get("TFS_TEST_CKPT_STORE", "posix")


def _new_root(tmp):
    if STORE == "posix":
        return os.path.join(tmp, "ckpts")
    base = os.environ.get("TFS_TEST_S3_URI")
    if not base:
        pytest.fail("TFS_TEST_S3_URI is not set: run under scripts/with-s3")
    return f"{base}/ckpt-{uuid.uuid4().hex[:8]}"


def _wipe(root):
    if STORE != "posix":
        with tierfs.Store(root) as st:
            for key, _ in list(st.list("")):
                st.remove(key)


@pytest.fixture(scope="module")
def env():
    """The reference state and three checkpoints of it: step 1 by one
    rank (this process), steps 2 and 4 by 2 and 4 forked ranks."""
    torch.set_num_threads(1)
    tmp = tempfile.mkdtemp(prefix="tfs-ckpt-torch-")
    staging = os.path.join(tmp, "staging")
    old = os.environ.get("TIERFS_CKPT_STAGING")
    os.environ["TIERFS_CKPT_STAGING"] = staging
    model, opt = make_state()
    assert 50e6 <= n_params(model) <= 100e6
    state = full_state(model, opt)
    root = _new_root(tmp)
    fork_ranks(state, root, 2, 2)       # before this process has threads
    fork_ranks(state, root, 4, 4)
    h = tt.save(state, f"{root}/step-000001", shard_size=64 << 20)
    assert h.step == 1 and h.wait(timeout=600) and h.done()
    yield {"root": root, "model": model, "opt": opt, "state": state,
           "tmp": tmp}
    _wipe(root)
    os.system(f"rm -rf {tmp}")
    if old is None:
        os.environ.pop("TIERFS_CKPT_STAGING", None)
    else:
        os.environ["TIERFS_CKPT_STAGING"] = old


def test_one_rank(env):
    root, state = env["root"], env["state"]
    assert ckpt.list_steps(root) == [1, 2, 4]
    assert ckpt.latest(root) == 4
    # lazy (the default), from the local staging copy
    back = tt.load(f"{root}/step-000001")
    assert isinstance(back, tt.LazyStateDict)
    same(state, back)
    del back
    # eager, from the store alone, into a fresh model and optimizer
    back = tt.load(f"{root}/1", lazy=False, use_staging=False)
    assert type(back["model"]) is collections.OrderedDict
    model2 = copy.deepcopy(env["model"])
    for p in model2.parameters():
        p.data.zero_()
    opt2 = torch.optim.AdamW(model2.parameters(), lr=1e-3)
    model2.load_state_dict(back["model"])
    opt2.load_state_dict(back["optim"])
    same(env["model"].state_dict(), model2.state_dict())
    same(env["opt"].state_dict(), opt2.state_dict())


def _unslice(obj):
    if isinstance(obj, tt.ShardSlice):
        assert obj.offsets == (0,) * len(obj.offsets)
        assert tuple(obj.tensor.shape) == obj.full_shape
        return obj.tensor
    if isinstance(obj, dict):
        return type(obj)((k, _unslice(v)) for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        return type(obj)(_unslice(v) for v in obj)
    return obj


def test_two_ranks_reshard_to_one(env):
    root = env["root"]
    with ckpt.Reader(f"{root}/step-000002") as r:
        assert r.world_size == 2
        assert {f["rank"] for f in r.files} == {0, 1}
        assert r.info("model.embed.weight").n_slices == 2
    # world size 1: rank 0 needs everything, bit for bit
    back = tt.load(f"{root}/step-000002", lazy=False, rank=0, world_size=1)
    same(env["state"], _unslice(back))


def _halves(ref, parts, where="state"):
    """parts[r] is rank r's view under 2 ranks of ref."""
    if isinstance(ref, torch.Tensor):
        if ref.dim() == 0:
            for p in parts:
                same(ref, p, where)
            return
        chunks = ref.chunk(2)
        for r, p in enumerate(parts):
            assert isinstance(p, tt.ShardSlice), where
            assert p.full_shape == tuple(ref.shape), where
            want = chunks[r] if r < len(chunks) else ref[0:0]
            same(want.contiguous(), p.tensor, f"{where}[rank {r}]")
        return
    if isinstance(ref, dict):
        for k in ref:
            _halves(ref[k], [p[k] for p in parts], f"{where}.{k}")
    elif isinstance(ref, (list, tuple)):
        for i, v in enumerate(ref):
            _halves(v, [p[i] for p in parts], f"{where}[{i}]")
    else:
        for p in parts:
            assert p == ref, where


def test_four_ranks_reshard_to_two(env):
    root = env["root"]
    with ckpt.Reader(f"{root}/step-000004") as r:
        assert r.world_size == 4
        assert {f["rank"] for f in r.files} == {0, 1, 2, 3}
    parts = [tt.load(f"{root}/step-000004", rank=r, world_size=2)
             for r in range(2)]
    _halves(env["state"], parts)


def _local_copy(env, step):
    d = os.path.join(env["tmp"], f"copy-{step}")
    os.makedirs(d, exist_ok=True)
    prefix = f"step-{step:06d}/"
    if STORE == "posix":
        return os.path.join(env["root"], prefix)
    with tierfs.Store(env["root"]) as st:
        for key, _ in st.list(prefix):
            with open(os.path.join(d, os.path.basename(key)), "wb") as f:
                f.write(st.read(key))
    return d


def test_format_and_index(env):
    """An independent safetensors reader opens every shard of the 2-rank
    checkpoint; the index maps every tensor to a file holding it."""
    d = _local_copy(env, 2)
    with open(os.path.join(d, "model.safetensors.index.json")) as f:
        index = json.load(f)
    shards = sorted(p for p in os.listdir(d) if p.endswith(".safetensors"))
    assert shards == sorted(index["tierfs"]["files"])
    assert len(shards) > 2                        # size-capped shards
    flat = {}

    def walk(obj, name):
        if isinstance(obj, torch.Tensor):
            flat[name] = obj
        elif isinstance(obj, dict):
            for k, v in obj.items():
                walk(v, f"{name}.{k}" if name else str(k))
    walk(env["state"], "")
    seen = collections.defaultdict(list)
    total = 0
    for name in shards:
        with open(os.path.join(d, name), "rb") as f, \
                mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            meta, tensors = st_reader.parse(m)
            assert meta["format"] == "pt"
            assert set(json.loads(meta["TIERFS_CHECKSUMS"])) == set(tensors)
            sharding = json.loads(meta.get("DCP_SHARDING_INFO", "{}"))
            for t, (dtype, shape, data) in tensors.items():
                offs = sharding.get(t, {}).get("saved_offsets")
                seen[t].append(name)
                total += len(data)
                ref = flat[t].contiguous()
                if offs:
                    ref = ref[offs[0]:offs[0] + shape[0]]
                got = numpy.frombuffer(data, dtype=numpy.uint8)
                want = ref.reshape(-1).view(torch.uint8).numpy() \
                    if ref.dim() else ref.reshape(1).view(torch.uint8).numpy()
                assert numpy.array_equal(got, want), t
                del got
            del tensors
    wm = index["weight_map"]
    assert set(wm) == set(seen) == set(flat)      # every tensor is mapped
    for t, files in seen.items():
        assert wm[t] in files
    assert index["metadata"]["total_size"] == total
    assert index["tierfs"]["world_size"] == 2
    assert index["tierfs"]["step"] == 2


def test_lazy_semantics(tmp_path, monkeypatch):
    monkeypatch.setenv("TIERFS_CKPT_STAGING", str(tmp_path / "staging"))
    root = _new_root(str(tmp_path))
    torch.manual_seed(1)
    state = {"a": torch.randn(1000, 100), "b": [torch.ones(3), 5],
             "c": collections.OrderedDict(x=torch.zeros(2, dtype=torch.bool)),
             "d": {"e": torch.arange(7), "f": float("inf")}}
    tt.save(state, root, async_=False)        # step 0: the first one
    back = tt.load(root)
    assert back.get("missing") is None
    same(state["a"], back["a"])
    same(state, copy.deepcopy(back))          # optimizer.load_state_dict
    same(state["c"], collections.OrderedDict(back["c"]))  # load_state_dict
    same(state, back.to_dict())
    assert back.pop("a") is not None and "a" not in back
    with pytest.raises(TypeError):
        tt.save({"x": object()}, root)
    with pytest.raises(TypeError):
        tt.save({(1, 2): torch.ones(1)}, root)
    h = tt.save({"n": torch.ones(1)}, root)   # the step after the latest
    assert h.wait() and h.step == 1
    _wipe(root)


def test_checkpointer_resumes_past_a_stale_latest(tmp_path, monkeypatch):
    """A saver killed after its index and before `latest`: the pointer
    names the checkpoint before.  Checkpointer.resume must take the
    newest committed step, or the resumed job saves that step again and
    fails "already committed" after every restart (bench/faults
    train-kill, F7)."""
    monkeypatch.setenv("TIERFS_CKPT_STAGING", str(tmp_path / "staging"))
    root = _new_root(str(tmp_path))
    ck = tt.Checkpointer(root, every=5, keep_last=3, async_=False)
    for step in (5, 10):
        ck.step(step, {"w": torch.full((4,), float(step)), "step": step})
    with tierfs.Store(root) as st:
        st.put("latest", b"step-000005\n")
    assert ckpt.latest(root) == 5 and ck.latest_step() == 10
    step, state = ck.resume()
    assert step == 10 and state["step"] == 10
    ck.step(15, {"w": torch.full((4,), 15.0), "step": 15})
    ck.close()
    assert ckpt.list_steps(root) == [5, 10, 15] and ckpt.latest(root) == 15
    _wipe(root)


def test_checkpointer(tmp_path, monkeypatch):
    monkeypatch.setenv("TIERFS_CKPT_STAGING", str(tmp_path / "staging"))
    root = _new_root(str(tmp_path))
    torch.manual_seed(2)
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ck = tt.Checkpointer(root, every=2, keep_last=2)
    assert ck.resume() == (None, None)
    saved = {}
    for step in range(1, 8):
        model(torch.randn(2, 16)).sum().backward()
        opt.step()
        h = ck.step(step, lambda: {"model": model.state_dict(),
                                   "optim": opt.state_dict(), "step": step})
        assert (h is None) == (step % 2 == 1)
        if h is not None:
            saved[step] = copy.deepcopy({"model": model.state_dict(),
                                         "optim": opt.state_dict()})
    ck.close()
    assert ckpt.list_steps(root) == [4, 6]     # keep_last=2
    step, state = ck.resume()
    assert step == 6 and state["step"] == 6
    m2 = torch.nn.Linear(16, 4)
    o2 = torch.optim.SGD(m2.parameters(), lr=0.1, momentum=0.9)
    m2.load_state_dict(state["model"])
    o2.load_state_dict(state["optim"])
    same(saved[6]["model"], m2.state_dict())
    same(saved[6]["optim"], o2.state_dict())
    _wipe(root)
