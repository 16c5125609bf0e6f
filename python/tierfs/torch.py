# SPDX-License-Identifier: MIT
"""tierfs for PyTorch (Debian's python3-torch).

Checkpoints (python/tierfs/_ckpt_torch.py):

    import tierfs.torch as tt
    h = tt.save({"model": m.state_dict(), "optim": o.state_dict()},
                "s3://bucket/run/step-000100")   # returns after the snapshot
    h.wait()                                     # committed in the store
    state = tt.load("s3://bucket/run")           # the latest, lazily
    ck = tt.Checkpointer("s3://bucket/run", every=500, keep_last=3)
"""
from ._ckpt_torch import (Checkpointer, LazyStateDict, SaveHandle,  # noqa
                          ShardSlice, load, save, shard)
from .data import ShardDataset, ShardIndexDataset, StallMeter  # noqa: F401,E402
