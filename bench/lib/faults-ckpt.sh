# shellcheck shell=bash
# bench/faults row ckpt-partition: a partition during a checkpoint's
# upload.  Sourced by bench/faults (its net_up, partition, heal, s3uri,
# result, now_ms).  The saver (tierfs.torch.save, async, 16 MiB in 1 MiB
# shards, uploads capped at 4 MB/s so that the cut lands mid-upload) runs
# in the bench's network namespace against the RGW through the relay;
# the cut is an nftables drop.  Promise: the checkpoint commits after the
# heal, or the save fails with a clear error; nothing partial is ever
# listed, and what is listed verifies byte for byte.

ckpt_part_saver() {   # URI STEP OUT: save, print timings as JSON to OUT
    $mnt_wrap env TIERFS_LIB="$TIERFS_LIB" PYTHONPATH="$top/python" \
        TIERFS_CKPT_STAGING="$work/ckstg" /usr/bin/python3 -c '
import json, sys, time
import torch
import tierfs.torch as tt
uri, step, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
g = torch.Generator().manual_seed(step)
state = {f"t{i}": torch.randn(1 << 20, generator=g) for i in range(4)}
t0 = time.time()
r = {"start": t0}
try:
    h = tt.save(state, uri, step=step, shard_size=1 << 20, upload_bw=4 << 20,
                timeout_s=600)
    r["staged_s"] = time.time() - t0
    open(out + ".staged", "w").close()
    h.wait()
    r["ok"] = True
except Exception as e:
    r["ok"] = False
    r["error"] = str(e).splitlines()[0][:300]
r["end"] = time.time()
json.dump(r, open(out, "w"))
' "$1" "$2" "$3"
}

# ckpt_part_run SECONDS DEADLINE_MS STEP: one save with a cut of SECONDS
# begun 1 s into its upload (after the local staging); prints a summary.
ckpt_part_run() {
    local secs=$1 dl=$2 step=$3 d=$work/ckp root uri pid t_heal r
    mkdir -p "$d"
    root="s3://$bucket/$run/ckp"
    uri="retry+$root?timeout_ms=5000&deadline_ms=$dl"
    ckpt_part_saver "$uri" "$step" "$d/r$step.json" &
    pid=$!
    for _ in $(seq 300); do [ -e "$d/r$step.json.staged" ] && break; sleep 0.1; done
    sleep 1     # a quarter of the upload
    partition
    sleep "$secs"
    heal
    t_heal=$(now_ms)
    wait "$pid"
    local ls verify listed
    ls=$("$tierfs" ckpt ls "$root" 2>&1)
    listed=$(echo "$ls" | grep -c "step-0*$step\b")
    verify="not listed"
    [ "$listed" = 0 ] || verify=$("$tierfs" ckpt verify "$root/step-$(printf %06d "$step")" >/dev/null 2>&1 && echo "verifies" || echo "DOES NOT VERIFY")
    r=$(/usr/bin/python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
heal = int(sys.argv[2]) / 1000
end, start = r["end"], r["start"]
if r["ok"]:
    print("committed %.1f s after the heal (save %.1f s, staged in %.1f s)"
          % (end - heal, end - start, r["staged_s"]))
else:
    print("failed %+.1f s from the heal (save %.1f s): %s"
          % (end - heal, end - start, r["error"]))
' "$d/r$step.json" "$t_heal" 2>&1)
    echo "cut ${secs} s, deadline_ms=$dl: $r; in ckpt ls: $listed ($verify); incomplete listed without -a: $("$tierfs" ckpt ls "$root" 2>/dev/null | grep -c incomplete)"
}

row_ckpt-partition() {
    net_up
    result ckpt-partition "$(ckpt_part_run 15 30000 1)"
    result ckpt-partition "$(ckpt_part_run 60 20000 2)"
}
