# SPDX-License-Identifier: MIT
"""A resumable DistributedSampler (docs/dist.md).

    from tierfs.torch import DistributedSampler
    sampler = DistributedSampler(ds, num_replicas=W, rank=r, seed=0)
    if resuming:
        sampler.resume(epoch, position=state["position"])
    else:
        sampler.set_epoch(epoch)
    for i, batch in enumerate(DataLoader(ds, sampler=sampler, ...)):
        seen += len(batch)
        ... save {"epoch": epoch, "position": sampler.position(seen)}

A drop-in for torch.utils.data.distributed.DistributedSampler: for the
same dataset length, seed, epoch, num_replicas, rank, shuffle and
drop_last it yields the same indices in the same order.

The epoch's order is a permutation P of the N indices (torch.randperm
seeded with seed + epoch, or 0..N-1 without shuffle).  Rank r of W takes
positions r, r + W, r + 2W, ... of P padded (drop_last=False: P
extended to a multiple of W with its own first elements, as torch pads)
or truncated (drop_last=True: to a multiple of W).  In DDP every rank
takes the same number of samples per step, so after each rank consumed k
samples the epoch's first k * W positions are consumed, whatever the
ranks: that global position is what a checkpoint keeps
(`position(k)`), and it is valid for another world size.

`resume(epoch, samples_seen)` continues this epoch on this world size
after this rank consumed samples_seen (its list minus that prefix).
`resume(epoch, position=g)` continues after the first g positions of P
were consumed, under any world size W': the rest R = P[g:N] is padded
(or truncated) to a multiple of W' exactly as a fresh epoch is, the
padding taken from P's first elements, and rank r' takes R[r'::W'].
With W' = W and g = k * W that is the same list as resume(epoch, k).
A sample is thus seen once per epoch across ranks and world-size
changes, plus the padding of the segment that reaches the epoch's end
(from the epoch's start or the last resume): ceil(len(R) / W') * W' -
len(R) repeats of P's first elements for the R left at its start (a
segment cut by a change stops before its padding, which comes last in
every rank's list); with drop_last instead the last len(R) mod W' of R
are left out.
"""
import math

import torch
import torch.utils.data.distributed as _tdd

__all__ = ["DistributedSampler"]


class DistributedSampler(_tdd.DistributedSampler):
    """torch's DistributedSampler plus resume(epoch, samples_seen) and a
    global position that carries an epoch across a world-size change.
    Arguments as torch's."""

    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True,
                 seed=0, drop_last=False):
        super().__init__(dataset, num_replicas=num_replicas, rank=rank,
                         shuffle=shuffle, seed=seed, drop_last=drop_last)
        self.start = 0                  # positions of P consumed before
        self._resume_epoch = None
        self._sizes(0)

    # -- the order --

    def _n(self):
        return len(self.dataset)

    def _perm(self):
        n = self._n()
        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(self.seed + self.epoch)
            return torch.randperm(n, generator=g).tolist()
        return list(range(n))

    def _sizes(self, start):
        """num_samples and total_size of the segment starting at start."""
        rest = max(0, self._n() - start)
        w = self.num_replicas
        if self.drop_last:
            self.num_samples = rest // w
        else:
            self.num_samples = math.ceil(rest / w)
        self.total_size = self.num_samples * w

    def segment(self):
        """The indices of the current segment of the epoch, every rank's:
        P[start:N] padded or truncated to a multiple of num_replicas."""
        perm = self._perm()
        rest = perm[self.start:]
        if self.drop_last:
            return rest[:self.total_size]
        pad = self.total_size - len(rest)
        if pad <= len(perm):
            rest += perm[:pad]
        else:
            rest += (perm * math.ceil(pad / len(perm)))[:pad]
        return rest

    def __iter__(self):
        seg = self.segment()
        assert len(seg) == self.total_size
        return iter(seg[self.rank:self.total_size:self.num_replicas])

    def __len__(self):
        return self.num_samples

    # -- epochs and resumption --

    def set_epoch(self, epoch):
        """The epoch the next iteration reads; clears a resume point set
        for another epoch."""
        self.epoch = epoch
        if self._resume_epoch != epoch:
            self._resume_epoch = None
            self.start = 0
            self._sizes(0)

    def position(self, samples_seen):
        """The epoch's global position after this rank consumed
        samples_seen samples of the current iteration (every rank the
        same number, as in DDP): positions of P consumed, capped at N."""
        if samples_seen < 0 or samples_seen > self.num_samples:
            raise ValueError(f"samples_seen {samples_seen} is outside this "
                             f"rank's {self.num_samples} samples")
        return min(self._n(), self.start + samples_seen * self.num_replicas)

    def resume(self, epoch, samples_seen=0, position=None):
        """Continue epoch `epoch`: after this rank consumed samples_seen
        samples of it on this world size (the epoch started at 0 with
        this num_replicas), or, with position, after the epoch's first
        `position` positions were consumed by any world size (what
        position() returned when the checkpoint was taken).  No data is
        read to skip."""
        if position is None:
            position = min(self._n(), samples_seen * self.num_replicas)
        elif samples_seen:
            raise ValueError("give samples_seen or position, not both")
        if position < 0 or position > self._n():
            raise ValueError(f"position {position} is outside the epoch's "
                             f"{self._n()} samples")
        self.epoch = epoch
        self._resume_epoch = epoch
        self.start = position
        self._sizes(position)
