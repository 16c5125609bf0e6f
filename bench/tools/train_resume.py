#!/usr/bin/python3
"""train_resume: a training job killed and resumed, for bench/faults
(row train-kill) and tests/integ/faults.sh: is the step count and the
loader position continued exactly after a kill -9?

    train_resume.py make DIR [--samples N]     a small dataset to pack
    train_resume.py run --data URI --ckpt URI --log FILE [--epochs E]
                    [--batch B] [--workers W] [--every K] [--seed S]
                    [--step-ms MS]
    train_resume.py check LOG REFLOG

`run` trains a small model (a linear layer, SGD with momentum: its
optimizer state matters) on a packed dataset read by
tierfs.torch's ShardDataset through a DataLoader with W workers, saves
{model, optim, epoch, seen, step} with tierfs.torch.Checkpointer every K
steps (asynchronously: the next steps run while it uploads), and on start
resumes from the latest checkpoint if there is one: the step count, the
epoch and the samples seen in it (ShardDataset.resume).  Every step
appends "step epoch key,key,..." to LOG and fsyncs it; a start appends
"start STEP" (the step it resumes after, 0 when fresh); the end appends
"done SHA256" of the final parameters.  Deterministic: one thread, fixed
seeds, so a run killed any number of times and resumed must log, for
every step, the batch an uninterrupted run logged, and end with the same
parameters bit for bit.

`check` compares a killed-and-resumed LOG with an uninterrupted REFLOG:
the last line logged for each step (a step redone after a resume
overwrites the one logged before the kill) must equal the reference's;
every resume must start right after a checkpoint's step; the final hash
must be the reference's.  It prints one JSON line and exits 1 on any
difference.
"""
import argparse
import hashlib
import json
import os
import sys
import time


def cmd_make(a):
    import random
    rng = random.Random(7)
    for i in range(a.samples):
        d = os.path.join(a.dir, f"s{i // 100:02d}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"{i:05d}.bin"), "wb") as f:
            f.write(bytes(rng.randrange(256) for _ in range(64)))
        with open(os.path.join(d, f"{i:05d}.cls"), "w") as f:
            f.write(str(i % 4))
    return 0


def log_line(f, text):
    f.write(text + "\n")
    f.flush()
    os.fsync(f.fileno())


def params_hash(model):
    h = hashlib.sha256()
    for _, p in sorted(model.state_dict().items()):
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def cmd_run(a):
    import torch
    from torch.utils.data import DataLoader
    from tierfs.torch import Checkpointer, ShardDataset

    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    model = torch.nn.Linear(64, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    ck = Checkpointer(a.ckpt, every=a.every, keep_last=3)
    step, state = ck.resume()
    epoch, seen = 0, 0
    if step is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optim"])
        epoch, seen = int(state["epoch"]), int(state["seen"])
        if int(state["step"]) != step:
            print(f"train_resume: checkpoint {step} holds step "
                  f"{int(state['step'])}", file=sys.stderr)
            return 1
    step = step or 0
    # the workers' cache figures beside the log, in the caller's scratch
    # dir: a job killed -9 runs no atexit to remove a temporary one
    stats = a.log + ".stats"
    os.makedirs(stats, exist_ok=True)
    ds = ShardDataset(a.data, seed=a.seed, shuffle_buffer=32,
                      stats_dir=stats)
    log = open(a.log, "a")
    log_line(log, f"start {step}")

    def collate(batch):
        x = torch.stack([torch.frombuffer(bytearray(s["bin"]),
                                          dtype=torch.uint8).float() / 255
                         for s in batch])
        y = torch.tensor([int(s["cls"]) for s in batch])
        return x, y, [s["__key__"] for s in batch]

    while epoch < a.epochs:
        if seen:
            ds.resume(epoch, seen, batch_size=a.batch)
        else:
            ds.set_epoch(epoch)
        dl = DataLoader(ds, batch_size=a.batch, num_workers=a.workers,
                        collate_fn=collate)
        for x, y, keys in dl:
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            if a.step_ms:
                time.sleep(a.step_ms / 1000)
            step += 1
            seen += len(keys)
            log_line(log, f"{step} {epoch} {','.join(keys)}")
            st = {"model": model.state_dict(), "optim": opt.state_dict(),
                  "epoch": torch.tensor(epoch), "seen": torch.tensor(seen),
                  "step": torch.tensor(step)}
            ck.step(step, st)
        epoch, seen = epoch + 1, 0
    ck.close()
    log_line(log, f"done {params_hash(model)}")
    return 0


def parse_log(path):
    steps, starts, done = {}, [], None
    with open(path) as f:
        for line in f:
            parts = line.split()
            if not parts:
                continue
            if parts[0] == "start":
                starts.append(int(parts[1]))
            elif parts[0] == "done":
                done = parts[1]
            elif len(parts) == 3:
                steps[int(parts[0])] = (int(parts[1]), parts[2])
    return steps, starts, done


def cmd_check(a):
    steps, starts, done = parse_log(a.log)
    ref, _, ref_done = parse_log(a.ref)
    every = a.every
    wrong = [s for s in ref if steps.get(s) != ref[s]]
    extra = [s for s in steps if s not in ref]
    # a resume after step S: S is 0 or a step a checkpoint was taken at
    bad_starts = [s for s in starts[1:] if s % every != 0]
    r = {"steps": len(ref), "restarts": len(starts) - 1,
         "resumed_at": starts[1:], "wrong_steps": len(wrong),
         "first_wrong": wrong[:3], "extra_steps": len(extra),
         "bad_resumes": len(bad_starts), "model_equal": done == ref_done,
         "finished": done is not None}
    print(json.dumps(r))
    ok = not wrong and not extra and not bad_starts and done == ref_done
    return 0 if ok else 1


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("dir")
    m.add_argument("--samples", type=int, default=600)
    r = sub.add_parser("run")
    r.add_argument("--data", required=True)
    r.add_argument("--ckpt", required=True)
    r.add_argument("--log", required=True)
    r.add_argument("--epochs", type=int, default=2)
    r.add_argument("--batch", type=int, default=8)
    r.add_argument("--workers", type=int, default=2)
    r.add_argument("--every", type=int, default=5)
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--step-ms", type=float, default=0,
                   help="sleep this long a step (compute)")
    c = sub.add_parser("check")
    c.add_argument("log")
    c.add_argument("ref")
    c.add_argument("--every", type=int, default=5)
    a = p.parse_args()
    return {"make": cmd_make, "run": cmd_run, "check": cmd_check}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
