# SPDX-License-Identifier: MIT
"""Shared pieces of the checkpoint tests: a small transformer language
model (~52 M parameters, from torch.nn) with one AdamW step taken, so the
optimizer state is real; bitwise comparison of nested state dicts; where
the tests put things."""
import os
import subprocess
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
TIERFS = os.environ.get("TFS_TEST_BIN", os.path.join(TOP, "build", "tierfs"))


class TinyLM(torch.nn.Module):
    def __init__(self, vocab=32000, d=512, layers=6, heads=8, ff=2048):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d)
        layer = torch.nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0,
                                                 batch_first=True)
        self.body = torch.nn.TransformerEncoder(layer, layers)
        self.norm = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, vocab, bias=False)

    def forward(self, x):
        return self.head(self.norm(self.body(self.embed(x))))


def make_state(seed=0, small=False):
    """(model, optimizer) after one training step, the same in every
    process for the same seed."""
    torch.manual_seed(seed)
    kw = dict(vocab=1000, d=64, layers=2, heads=4, ff=128) if small else {}
    model = TinyLM(**kw)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, 1000 if small else 32000, (2, 16))
    model(x).logsumexp(-1).mean().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return model, opt


def n_params(model):
    return sum(p.numel() for p in model.parameters())


def full_state(model, opt):
    return {"model": model.state_dict(), "optim": opt.state_dict(),
            "meta": {"step": 1, "lr": 1e-3, "tags": ("a", None, 2.5)}}


def same(a, b, where="state"):
    """Assert a and b are equal, tensors bit for bit."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor), where
        assert a.dtype == b.dtype and a.shape == b.shape, where
        assert torch.equal(a.contiguous().view(torch.uint8)
                           if a.dim() else a.reshape(1).view(torch.uint8),
                           b.contiguous().view(torch.uint8)
                           if b.dim() else b.reshape(1).view(torch.uint8)), \
            where
    elif isinstance(a, dict):
        assert isinstance(b, dict), where
        assert list(a.keys()) == list(b.keys()), (where, list(a.keys())[:5],
                                                  list(b.keys())[:5])
        for k in a:
            same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{where}[{i}]")
    else:
        assert a == b, (where, a, b)


def part(obj, rank, world):
    """What rank saves of a state, FSDP style: its chunk (dimension 0) of
    every tensor with dimensions, and, on rank 0 only, the scalars."""
    if isinstance(obj, torch.Tensor):
        if obj.dim() == 0:
            return obj if rank == 0 else _SKIP
        import tierfs.torch as tt
        return tt.shard(obj, rank, world)
    if isinstance(obj, dict):
        out = type(obj)()
        for k, v in obj.items():
            p = part(v, rank, world)
            if p is not _SKIP:
                out[k] = p
        return out
    if isinstance(obj, (list, tuple)):
        return type(obj)(part(v, rank, world) for v in obj)
    return obj


_SKIP = object()


def _rank_main(state, uri, world, rank, step):
    import tierfs.torch as tt
    try:
        h = tt.save(part(state, rank, world), uri, rank=rank,
                    world_size=world, step=step, run_id=f"fork-{step}",
                    shard_size=64 << 20, timeout_s=300)
        h.wait()
    except BaseException:
        import traceback
        traceback.print_exc()
        os._exit(1)
    os._exit(0)


def fork_ranks(state, uri, world, step):
    """Save state as one checkpoint written by world rank processes.  They
    are forked from this one, so each starts with the same state in memory
    (copy-on-write, as if each had built the model); from then on they
    share nothing but the store and the staging directory."""
    import multiprocessing
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_rank_main, args=(state, uri, world, r, step))
             for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(600)
    codes = [p.exitcode for p in procs]
    assert codes == [0] * world, f"rank exit codes {codes}"


def run_ranks(uri, world_size, step, staging, extra_env=None, small=False):
    """Save one checkpoint with world_size rank processes (ckpt_rank.py)."""
    env = dict(os.environ, TIERFS_CKPT_STAGING=staging, **(extra_env or {}))
    procs = [subprocess.Popen([sys.executable, os.path.join(HERE,
                                                            "ckpt_rank.py"),
                               uri, str(step), str(r), str(world_size),
                               "small" if small else "full"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for r in range(world_size)]
    outs = [p.communicate(timeout=600)[0].decode() for p in procs]
    for r, p in enumerate(procs):
        assert p.returncode == 0, f"rank {r}: {outs[r]}"
    return outs
