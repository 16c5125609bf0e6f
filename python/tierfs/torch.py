# SPDX-License-Identifier: MIT
"""tierfs for PyTorch (Debian's python3-torch).

Checkpoints (python/tierfs/_ckpt_torch.py):

    import tierfs.torch as tt
    h = tt.save({"model": m.state_dict(), "optim": o.state_dict()},
                "s3://bucket/run/step-000100")   # returns after the snapshot
    h.wait()                                     # committed in the store
    state = tt.load("s3://bucket/run")           # the latest, lazily
    ck = tt.Checkpointer("s3://bucket/run", every=500, keep_last=3)

Raw files in a mount, read in a sampler's order: OrderedPrefetch (below)
tells the mount that order, so it fetches ahead across files.
"""
import os

import torch.utils.data as _tud

from ._ckpt_torch import (Checkpointer, LazyStateDict, SaveHandle,  # noqa
                          ShardSlice, load, save, shard)
from ._capi import (TierfsCorruptError, TierfsError,  # noqa: F401
                    TierfsNoSpaceError, TierfsNotFoundError,
                    TierfsPermissionError, TierfsTimeoutError)
from .data import ShardDataset, ShardIndexDataset, StallMeter  # noqa: F401
from .hint import OrderHint, find_mount  # noqa: F401
from .sampler import DistributedSampler  # noqa: F401


class OrderedPrefetch(_tud.Sampler):
    """A Sampler that tells a tierfs mount the order it yields.

        sampler = OrderedPrefetch(RandomSampler(ds, generator=g), paths)
        DataLoader(ds, sampler=sampler, num_workers=4, ...)

    wraps any Sampler over indices into `paths` (files in one tierfs
    mount; `mount` found from the first path unless given).  Each
    iteration (epoch) takes the wrapped sampler's whole order, hints the
    paths in that order to the mount (one stream, ended by the next
    epoch's or by close()), then yields the same indices.  The DataLoader
    iterates its sampler in the main process, so the hint is written
    there; workers read in the sampler's order, interleaved, and the
    mount follows their opens.  set_epoch is passed on (DistributedSampler).
    """

    def __init__(self, sampler, paths, mount=None):
        self.sampler = sampler
        self.paths = paths
        self.mount = mount if mount is not None else find_mount(
            os.fspath(paths[0]) if len(paths) else ".")
        self._hint = None

    def __len__(self):
        return len(self.sampler)

    def set_epoch(self, epoch):
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)

    def __iter__(self):
        order = list(iter(self.sampler))
        self.close()
        self._hint = OrderHint(self.mount)
        self._hint.add(self.paths[i] for i in order)
        return iter(order)

    def state(self):
        """The current stream's state (OrderHint.state), or None."""
        return self._hint.state() if self._hint is not None else None

    def close(self):
        if self._hint is not None:
            self._hint.close()
            self._hint = None
