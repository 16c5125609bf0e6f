#!/usr/bin/python3
"""dist_train: a DDP job under torchrun (gloo, CPU) reading raw files from
a tierfs mount or a packed dataset, checkpointing from every rank, killed
and resumed; for python/tests/test_torchrun.py and bench/dist-kill
(docs/dist.md).

    dist_train.py make DIR [--samples N]      raw files (DIR/sNN/IIIII.bin, .cls)
    dist_train.py run --mode files|shards --data PATH|URI --ckpt URI
                  --log DIR [--epochs E] [--batch B] [--every K]
                  [--keep-last N] [--seed S] [--step-ms MS] [--workers W]
                  [--segment N] [--exit-after STEP] [--replicated]
        one rank's program (started by torchrun)
    dist_train.py launch --nproc W [--kills K] [--kill-min S --kill-max S]
                  [--kill-steps LO HI --last-step S] [--kill-group]
                  [--port P] [--max-restarts R] RUN-ARGS...
        one torchrun job of W ranks; kills K times a random rank by pid
        (kill -9) at a uniform draw in [min, max] s after the group's start
        or restart, or (--kill-steps LO HI) once it logged a uniform draw
        of LO-HI steps past it; --kill-group: the whole job, once; prints
        one JSON line
    dist_train.py check LOGDIR --samples N [--ref REFDIR] [--every K]
        the checks below; one JSON line, status 1 on any failure

`run`: a small MLP (64-32-4, SGD with momentum) in DistributedDataParallel
over gloo, one thread a rank, fixed seeds.  --mode files: a map-style
dataset over the *.bin files under --data (a directory in a tierfs
mount), ordered by tierfs.torch.DistributedSampler; --mode shards:
tierfs.torch.ShardDataset(uri, rank, world_size).  Every rank appends to
LOGDIR/rank-R.log and fsyncs:

    start STEP WORLD SEGMENT RESTART HASH   resumed after STEP (0: fresh);
                                            HASH: the loaded model+optim
    STEP EPOCH HASH KEY,KEY,...             a step: its batch, then the
                                            model+optim after it
    commit STEP                             (rank 0) that save is committed
    done HASH                               the end

and writes its pid to LOGDIR/pid-R before "start".  It saves
{model, optim, epoch, seen, position, step, world} with
`Checkpointer(ckpt, every=K, rank=rank, world_size=world)` (async) and on
start resumes from Checkpointer.resume: the step, the epoch, and the
loader position: files: the sampler's global position
(DistributedSampler.resume(epoch, position=...), exact under another
world size too); shards: ShardDataset.resume(epoch, seen, batch) when
the world size is the saved one, else the next epoch (docs/dist.md).

`check`: the steps of a job's logs, a restart's steps replacing those
the killed group logged after its resume point; per epoch, every sample
seen (missing 0) and repeats equal to the sampler's padding (that of
the segment that ends the epoch: ceil(R / W) * W - R for the R samples
left at its start with W ranks; a segment cut by a world-size change
ends before its padding; shards: ceil(N / W) * W - N); every resume at a
step a commit was taken at (a multiple of K), not before the newest
"commit" rank 0 logged before it (lost steps beyond the last commit: 0),
with the loaded HASH equal to that step's logged HASH (the resumed model
equals the saved one); with --ref, every step's batches on every rank
and the final HASH equal to the reference's.
"""
import argparse
import hashlib
import json
import math
import os
import random
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


# the dataset and the fsynced log lines of the single-process job
from train_resume import cmd_make, log_line  # noqa: E402,F401


def state_hash(model, opt):
    """16 hex digits of the sha256 of the parameters and the optimizer's
    buffers (momentum), in name order."""
    h = hashlib.sha256()
    for _, p in sorted(model.state_dict().items()):
        h.update(p.detach().contiguous().numpy().tobytes())
    for k in sorted(opt.state_dict()["state"]):
        for n, v in sorted(opt.state_dict()["state"][k].items()):
            if hasattr(v, "numpy"):
                h.update(v.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


class Files:
    """The raw files: sample i = (bin as 64 floats, cls, key)."""

    def __init__(self, root):
        self.root = root
        keys = []
        for d, _, names in os.walk(root):
            for n in names:
                if n.endswith(".bin"):
                    keys.append(os.path.relpath(os.path.join(d, n[:-4]),
                                                root))
        self.keys = sorted(keys)
        if not self.keys:
            raise SystemExit(f"dist_train: no .bin files under {root}")

    def __len__(self):
        return len(self.keys)

    def __getitem__(self, i):
        k = self.keys[i]
        with open(os.path.join(self.root, k + ".bin"), "rb") as f:
            b = f.read()
        with open(os.path.join(self.root, k + ".cls")) as f:
            c = int(f.read())
        return {"bin": b, "cls": c, "__key__": k}


def cmd_run(a):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader
    from tierfs.torch import Checkpointer, DistributedSampler, ShardDataset
    import tierfs.torch as tt

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))
    torch.manual_seed(a.seed)
    net = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(),
                              torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    ck = Checkpointer(a.ckpt, every=a.every, keep_last=a.keep_last,
                      rank=rank, world_size=world, replicated=a.replicated)
    step, state = ck.resume()
    epoch, seen, position, saved_world = 0, 0, 0, world
    if step is not None:
        net.load_state_dict(state["model"])
        opt.load_state_dict(state["optim"])
        epoch, seen = int(state["epoch"]), int(state["seen"])
        position, saved_world = int(state["position"]), int(state["world"])
        if int(state["step"]) != step:
            print(f"dist_train: checkpoint {step} holds step "
                  f"{int(state['step'])}", file=sys.stderr)
            return 1
    step = step or 0
    model = DDP(net)
    # DDP allreduces its first backward in the default bucket order and
    # then rebuilds the buckets in the order the gradients came; gloo's
    # sums of a bucket depend on its layout, so a resumed group's first
    # step would not add up as the uninterrupted one's did.  A zero-loss
    # pass first (zero gradients, no optimizer step) makes every step,
    # fresh or resumed, run on the rebuilt buckets.
    (model(torch.zeros(1, 64)).sum() * 0).backward()
    opt.zero_grad()
    os.makedirs(a.log, exist_ok=True)
    with open(os.path.join(a.log, f"pid-{rank}.tmp"), "w") as f:
        f.write(f"{os.getpid()}\n")
    os.replace(os.path.join(a.log, f"pid-{rank}.tmp"),
               os.path.join(a.log, f"pid-{rank}"))
    log = open(os.path.join(a.log, f"rank-{rank}.log"), "a")
    log_line(log, f"start {step} {world} {a.segment} {restart} "
                  f"{state_hash(net, opt)}")

    def collate(batch):
        x = torch.stack([torch.frombuffer(bytearray(s["bin"]),
                                          dtype=torch.uint8).float() / 255
                         for s in batch])
        y = torch.tensor([int(s["cls"]) for s in batch])
        return x, y, [s["__key__"] for s in batch]

    if a.mode == "files":
        ds = Files(a.data)
        sampler = DistributedSampler(ds, num_replicas=world, rank=rank,
                                     seed=a.seed)
        if position:
            sampler.resume(epoch, position=position)
    else:
        stats = os.path.join(a.log, "stats")
        os.makedirs(stats, exist_ok=True)
        ds = ShardDataset(a.data, rank=rank, world_size=world, seed=a.seed,
                          shuffle_buffer=32, stats_dir=stats)
        if seen and saved_world != world:
            # a packed dataset's partitions are per rank: another world
            # size continues at the next epoch (docs/dist.md)
            epoch, seen = epoch + 1, 0
        if seen:
            ds.resume(epoch, seen, batch_size=a.batch)
        sampler = None
    pending = None                      # (step, handle) of rank 0's save

    def note_commit(block=False):
        nonlocal pending
        if pending is not None and rank == 0 and \
                (block or pending[1].done()):
            pending[1].wait()
            log_line(log, f"commit {pending[0]}")
            pending = None

    while epoch < a.epochs:
        if a.mode == "files":
            if not position:
                sampler.set_epoch(epoch)
            dl = DataLoader(ds, batch_size=a.batch, sampler=sampler,
                            num_workers=a.workers, collate_fn=collate)
        else:
            if not seen:
                ds.set_epoch(epoch)
            dl = DataLoader(ds, batch_size=a.batch, num_workers=a.workers,
                            collate_fn=collate)
        seg_seen = 0                    # this rank's, since the iteration began
        for x, y, keys in dl:
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            if a.step_ms:
                time.sleep(a.step_ms / 1000)
            step += 1
            seg_seen += len(keys)
            seen += len(keys)
            if a.mode == "files":
                position = sampler.position(seg_seen)
            log_line(log, f"{step} {epoch} {state_hash(net, opt)} "
                          f"{','.join(keys)}")
            st = {"model": net.state_dict(), "optim": opt.state_dict(),
                  "epoch": torch.tensor(epoch), "seen": torch.tensor(seen),
                  "position": torch.tensor(position),
                  "step": torch.tensor(step), "world": torch.tensor(world)}
            note_commit()
            if pending is not None and step % a.every == 0:
                note_commit(block=True)     # Checkpointer waits for it too
            h = ck.step(step, st)
            if h is not None:
                pending = (step, h)
            if a.exit_after and step >= a.exit_after:
                ck.close()
                note_commit(block=True)
                log.close()
                dist.destroy_process_group()
                return 0
        epoch, seen, position = epoch + 1, 0, 0
    ck.close()
    note_commit(block=True)
    log_line(log, f"done {state_hash(net, opt)}")
    dist.destroy_process_group()
    return 0


# ---- launching and killing ----

def rank_starts(logdir, world):
    """Start lines logged so far by each rank."""
    n = []
    for r in range(world):
        try:
            with open(os.path.join(logdir, f"rank-{r}.log")) as f:
                n.append(sum(1 for line in f if line.startswith("start ")))
        except OSError:
            n.append(0)
    return n


def last_step(logdir, rank):
    s = 0
    try:
        with open(os.path.join(logdir, f"rank-{rank}.log")) as f:
            for line in f:
                p = line.split()
                if p and p[0].isdigit():
                    s = int(p[0])
    except OSError:
        pass
    return s


def start_step(logdir, rank):
    s = 0
    with open(os.path.join(logdir, f"rank-{rank}.log")) as f:
        for line in f:
            if line.startswith("start "):
                s = int(line.split()[1])
    return s


def cmd_launch(a):
    logdir = a.run_args[a.run_args.index("--log") + 1]
    os.makedirs(logdir, exist_ok=True)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--redirects", "1",
           "--tee", "1", "--nnodes", "1", "--nproc_per_node", str(a.nproc),
           "--max_restarts", str(a.max_restarts), "--monitor_interval", "0.5",
           "--master_port", str(a.port), "--log_dir",
           os.path.join(logdir, "torchrun"),
           os.path.abspath(__file__), "run"] + a.run_args
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(
                   [os.path.join(os.path.dirname(os.path.dirname(HERE)),
                                 "python")] +
                   [p for p in [os.environ.get("PYTHONPATH")] if p]))
    rng = random.Random(a.seed)
    t0 = time.monotonic()
    out = open(os.path.join(logdir, "torchrun.out"), "ab")
    p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                         start_new_session=True)
    kills = []
    base = rank_starts(logdir, a.nproc)
    try:
        while len(kills) < a.kills and p.poll() is None:
            want = [b + 1 for b in base]
            while p.poll() is None and any(
                    s < w for s, w in zip(rank_starts(logdir, a.nproc), want)):
                time.sleep(0.05)
            if p.poll() is not None:
                break
            base = want
            victim = rng.randrange(a.nproc)
            if a.kill_steps:
                # a random step of the rest of the job, then a random
                # point within that step (in its compute, its save, ...)
                s0 = start_step(logdir, victim)
                lo, hi = a.kill_steps
                target = min(s0 + rng.randint(lo, hi), a.last_step - 1)
                while p.poll() is None and \
                        last_step(logdir, victim) < target:
                    time.sleep(0.005)
                time.sleep(rng.uniform(0, a.kill_max))
            else:
                time.sleep(rng.uniform(a.kill_min, a.kill_max))
            with open(os.path.join(logdir, f"pid-{victim}")) as f:
                pid = int(f.read())
            at = last_step(logdir, victim)
            try:
                if a.kill_group:        # the whole job: no restart
                    os.killpg(p.pid, signal.SIGKILL)
                else:
                    os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                break                   # the job ended meanwhile
            kills.append({"rank": victim, "pid": pid, "after_step": at,
                          "t": round(time.monotonic() - t0, 2)})
        rc = p.wait(timeout=a.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        rc = p.wait()
        print(f"dist_train: the job ran past {a.timeout} s", file=sys.stderr)
    print(json.dumps({"rc": rc, "nproc": a.nproc, "kills": kills,
                      "wall_s": round(time.monotonic() - t0, 2)}))
    return 0 if rc == 0 or (a.kill_group and kills) else 1


# ---- checking ----

def parse_logs(logdir):
    """[(gen, rank, kind, fields)] in each rank's order; gen = (segment,
    restart) of the start line before."""
    rows = []
    for name in sorted(os.listdir(logdir)):
        if not (name.startswith("rank-") and name.endswith(".log")):
            continue
        rank = int(name[5:-4])
        gen = None
        with open(os.path.join(logdir, name)) as f:
            for line in f:
                p = line.split()
                if not p or not line.endswith("\n"):
                    continue            # a line cut by the kill
                if p[0] == "start":
                    gen = (int(p[3]), int(p[4]))
                    rows.append((gen, rank, "start",
                                 {"step": int(p[1]), "world": int(p[2]),
                                  "hash": p[5]}))
                elif p[0] == "commit":
                    rows.append((gen, rank, "commit", int(p[1])))
                elif p[0] == "done":
                    rows.append((gen, rank, "done", p[1]))
                elif len(p) == 4 and p[0].isdigit():
                    rows.append((gen, rank, "step",
                                 (int(p[0]), int(p[1]), p[2],
                                  tuple(p[3].split(",")))))
    return rows


def timeline(logdir):
    """The job's history: steps {step: {"epoch", "world", "hash",
    "ranks": {rank: keys}}} as the final model saw them, the resumes and
    the final hashes."""
    rows = parse_logs(logdir)
    gens = sorted({g for g, *_ in rows if g is not None})
    steps, resumes, done, commits = {}, [], {}, []
    for g in gens:
        starts = [f for gg, _, k, f in rows if gg == g and k == "start"]
        s0 = starts[0]["step"]
        world = starts[0]["world"]
        logged = max(steps) if steps else 0
        resumes.append({"gen": list(g), "step": s0, "world": world,
                        "prev_world": resumes[-1]["world"] if resumes
                        else world,
                        "ranks": len(starts),
                        "same_step": all(f["step"] == s0 for f in starts),
                        "hash": starts[0]["hash"],
                        "hash_same": all(f["hash"] == starts[0]["hash"]
                                         for f in starts),
                        "saved_hash": steps.get(s0, {}).get("hash"),
                        "last_commit": max(commits) if commits else 0,
                        "redone": max(0, logged - s0)})
        for s in [s for s in steps if s > s0]:
            del steps[s]
        # the step resumed from is committed (it was loaded from its
        # index) even when rank 0 died before logging it
        commits = [c for c in commits if c < s0] + ([s0] if s0 else [])
        for gg, rank, kind, f in rows:
            if gg != g:
                continue
            if kind == "step":
                st, ep, h, keys = f
                e = steps.setdefault(st, {"epoch": ep, "world": world,
                                          "hash": h, "ranks": {}})
                e["ranks"][rank] = keys
                e["hash_ok"] = e.get("hash_ok", True) and e["hash"] == h
            elif kind == "commit":
                commits.append(f)
            elif kind == "done":
                done[rank] = f
    return steps, resumes, done, commits


def cmd_check(a):
    steps, resumes, done, commits = timeline(a.logdir)
    n = a.samples
    bad = []
    order = sorted(steps)
    if order != list(range(1, len(order) + 1)):
        bad.append("steps missing")
    epochs = {}
    for s in order:
        e = steps[s]
        if len(e["ranks"]) != e["world"]:
            bad.append(f"step {s}: {len(e['ranks'])} ranks of {e['world']}")
        if not e.get("hash_ok"):
            bad.append(f"step {s}: ranks disagree on the model")
        ep = epochs.setdefault(e["epoch"], {"keys": [], "segments": []})
        if not ep["segments"] or ep["segments"][-1][0] != e["world"]:
            ep["segments"].append([e["world"], len(ep["keys"])])
        for k in e["ranks"].values():
            ep["keys"].extend(k)
    # shards: a resume under another world size mid-epoch goes on at the
    # next epoch; the epoch it left is cut short (docs/dist.md)
    cut = {steps[r["step"]]["epoch"] for r in resumes[1:]
           if a.mode == "shards" and r["world"] != r["prev_world"] and
           r["step"] in steps}
    cover = {}
    for ep, v in sorted(epochs.items()):
        distinct = len(set(v["keys"]))
        if a.mode == "files":
            # only the segment that ends the epoch pads: the ones cut
            # by a world-size change stopped before their padding
            w, g = v["segments"][-1]
            rest = n - min(g, n)
            pad = math.ceil(rest / w) * w - rest
        else:
            w = v["segments"][0][0]
            pad = math.ceil(n / w) * w - n
        cover[ep] = {"samples": len(v["keys"]), "missing": n - distinct,
                     "repeats": len(v["keys"]) - distinct, "padding": pad,
                     "worlds": [w for w, _ in v["segments"]]}
        if ep in cut and distinct != n:
            # what was read of it, once
            cover[ep]["cut"] = True
            if len(v["keys"]) - distinct > pad:
                bad.append(f"epoch {ep}: {len(v['keys']) - distinct} "
                           f"repeats, padding {pad}")
            continue
        if distinct != n or len(v["keys"]) - distinct != pad:
            bad.append(f"epoch {ep}: {n - distinct} missing, "
                       f"{len(v['keys']) - distinct} repeats, padding {pad}")
    for r in resumes[1:]:
        if r["step"] % a.every or r["step"] < r["last_commit"] or \
                not r["same_step"] or not r["hash_same"] or \
                (r["step"] and r["hash"] != r["saved_hash"]):
            bad.append(f"resume {r}")
    want_commits = [s for s in order if s % a.every == 0]
    if sorted(set(commits)) != want_commits:
        bad.append(f"commits {sorted(set(commits))[:5]}... want "
                   f"{want_commits[:5]}...")
    hashes = set(done.values())
    res = {"steps": len(order), "epochs": cover, "resumes": len(resumes) - 1,
           "resumed_at": [r["step"] for r in resumes[1:]],
           "redone": [r["redone"] for r in resumes[1:]],
           "lost_beyond_commit": sum(1 for r in resumes[1:]
                                     if r["step"] < r["last_commit"]),
           "commits": len(set(commits)), "finished": bool(done),
           "final": sorted(hashes)}
    if len(hashes) > 1:
        bad.append("ranks end with different models")
    if a.ref:
        ref, _, ref_done, _ = timeline(a.ref)
        wrong = [s for s in ref if s not in steps or
                 steps[s]["ranks"] != ref[s]["ranks"] or
                 steps[s]["hash"] != ref[s]["hash"]]
        extra = [s for s in steps if s not in ref]
        res["wrong_steps"] = len(wrong)
        res["first_wrong"] = wrong[:3]
        res["extra_steps"] = len(extra)
        res["model_equal"] = hashes == set(ref_done.values())
        if wrong or extra or not res["model_equal"]:
            bad.append(f"differs from {a.ref}")
    if a.expect_done and not done:
        bad.append("not finished")
    res["ok"] = not bad
    res["errors"] = bad[:5]
    print(json.dumps(res))
    return 0 if not bad else 1


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("dir")
    m.add_argument("--samples", type=int, default=250)
    r = sub.add_parser("run")
    r.add_argument("--mode", choices=["files", "shards"], required=True)
    r.add_argument("--data", required=True)
    r.add_argument("--ckpt", required=True)
    r.add_argument("--log", required=True)
    r.add_argument("--epochs", type=int, default=2)
    r.add_argument("--batch", type=int, default=4)
    r.add_argument("--workers", type=int, default=0)
    r.add_argument("--every", type=int, default=4)
    r.add_argument("--keep-last", type=int, default=0)
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--step-ms", type=float, default=0)
    r.add_argument("--segment", type=int, default=0)
    r.add_argument("--exit-after", type=int, default=0,
                   help="stop after this step's checkpoint is committed")
    r.add_argument("--replicated", action="store_true",
                   help="Checkpointer(..., replicated=True)")
    la = sub.add_parser("launch")
    la.add_argument("--nproc", type=int, default=4)
    la.add_argument("--kills", type=int, default=0)
    la.add_argument("--kill-min", type=float, default=1)
    la.add_argument("--kill-max", type=float, default=3)
    la.add_argument("--kill-group", action="store_true",
                    help="kill -9 the whole job (torchrun and every rank) "
                    "once, instead of one rank")
    la.add_argument("--kill-steps", type=int, nargs=2, metavar=("LO", "HI"),
                    help="kill when the victim is a uniform draw of LO-HI "
                    "steps past the (re)start (then up to --kill-max s "
                    "more), before --last-step")
    la.add_argument("--last-step", type=int, default=1 << 30)
    la.add_argument("--port", type=int, default=29611)
    la.add_argument("--max-restarts", type=int, default=3)
    la.add_argument("--seed", type=int, default=None)
    la.add_argument("--timeout", type=float, default=600)
    la.add_argument("run_args", nargs=argparse.REMAINDER)
    c = sub.add_parser("check")
    c.add_argument("logdir")
    c.add_argument("--mode", choices=["files", "shards"], default="files")
    c.add_argument("--samples", type=int, required=True)
    c.add_argument("--every", type=int, default=4)
    c.add_argument("--ref")
    c.add_argument("--expect-done", action="store_true")
    a = p.parse_args()
    if a.cmd == "launch" and a.run_args[:1] == ["--"]:
        a.run_args = a.run_args[1:]
    return {"make": cmd_make, "run": cmd_run, "launch": cmd_launch,
            "check": cmd_check}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
