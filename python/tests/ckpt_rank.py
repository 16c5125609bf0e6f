# SPDX-License-Identifier: MIT
"""One rank of a multi-process save: ckpt_rank.py URI STEP RANK WORLD
full|small.  Every rank builds the same model and optimizer state; it
saves, FSDP style, its chunk (dimension 0) of every tensor of two or more
dimensions and of every vector, and rank 0 alone the scalars.  Ranks share
nothing but the store (and the staging directory)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import tierfs.torch as tt  # noqa: E402
from ckpt_common import full_state, make_state, part  # noqa: E402


def main():
    uri, step, rank, world, size = sys.argv[1:6]
    step, rank, world = int(step), int(rank), int(world)
    torch.set_num_threads(1)
    model, opt = make_state(small=size == "small")
    state = part(full_state(model, opt), rank, world)
    h = tt.save(state, uri, rank=rank, world_size=world, step=step,
                run_id=os.environ.get("CKPT_RUN_ID", "test"),
                shard_size=64 << 20, timeout_s=300)
    h.wait()
    print(f"rank {rank}: committed step {step}, blocked {h.blocked_s:.2f} s")


if __name__ == "__main__":
    main()
