#!/usr/bin/env bash
# tierfs bench and tierfs profile on tiny configurations: every workload
# runs against a directory, a store URI through a cache, and a tierfs
# mount with a trace; its JSON must have the documented fields with sane
# values (no timing thresholds), the plots must be well-formed SVG, and
# the profile of the recorded trace must describe what was read.
#
#   bench.sh TIERFS
set -u
tierfs=$1
work=$(mktemp -d /tmp/tfs-bench-test-XXXXXX)
mnt=$work/mnt
# shellcheck source=tests/integ/tap.sh
. "$(dirname "$0")/tap.sh"
cleanup() {
    "$tierfs" umount "$mnt" >/dev/null 2>&1
    rm -rf "$work"
}
trap cleanup EXIT


# check NAME JSON PYTHON-EXPR: the expression over j (the parsed JSON)
check() {
    if /usr/bin/python3 -c '
import json, sys
j = json.loads(sys.argv[1])
sys.exit(0 if eval("(" + sys.argv[2] + ")") else 1)' "$2" "$3" 2>/dev/null; then
        ok "$1"
    else
        bad "$1"; echo "    $3"; echo "    $2" | cut -c1-400
    fi
}

common='all(k in j for k in ("workload","target","kind","threads","seconds",
    "ops","bytes","errors","ops_per_s","mb_per_s","lat_p50_us","lat_p95_us",
    "lat_p99_us","lat_p999_us")) and j["errors"] == 0 and j["ops"] > 0 and
    0 <= j["lat_p50_us"] <= j["lat_p99_us"] <= j["lat_p999_us"]'

run_all() {  # label target [extra args]
    local label=$1 target=$2
    shift 2
    local j
    j=$("$tierfs" bench seq -j 4 --json "$@" "$target")
    check "$label seq" "$j" "$common and j['bytes'] == 64 * 65536"
    j=$("$tierfs" bench rand -j 2 --duration 0.5 --json "$@" "$target")
    check "$label rand" "$j" "$common and j['bytes'] == j['ops'] * 4096"
    j=$("$tierfs" bench mix -j 2 --duration 0.5 --rand-ratio 0.5 --json "$@" "$target")
    check "$label mix" "$j" "$common"
    j=$("$tierfs" bench meta -j 2 --json "$@" "$target")
    check "$label meta" "$j" "$common and j['stat_ops_per_s'] > 0 and j['open_ops_per_s'] > 0 and j['readdir_ops_per_s'] > 0 and j['ops'] == 64"
    j=$("$tierfs" bench small -j 2 --json "$@" "$target")
    check "$label small" "$j" "$common and j['ops'] == 64"
    j=$("$tierfs" bench train -j 2 --epochs 2 --batch 8 --compute-ms 2 --accelerators 2 --json "$@" "$target")
    check "$label train" "$j" "$common and len(j['epochs']) == 2 and all(0 <= e['au'] <= 1 and abs(e['au'] + e['stall_share'] - 1) < 1e-6 and e['samples_per_s'] > 0 for e in j['epochs'])"
}

mkdir -p "$work/ds" "$mnt"
j=$("$tierfs" bench prepare --files 64 --size 64K -j 4 --json "$work/ds")
check "prepare" "$j" "$common and j['ops'] == 64 and j['bytes'] == 64 * 65536"
[ "$(find "$work/ds" -type f | wc -l)" = 64 ] && ok "prepare wrote 64 files" || bad "prepare wrote 64 files"
# Each epoch ends when its files are read: the once-a-second sampler held
# epoch e to e seconds (1 + 2 + 3 s here) before it waited for the
# timeline's next point only while the workers had files left.
j=$("$tierfs" bench train -j 2 --epochs 3 --batch 8 --compute-ms 0 --json "$work/ds")
check "train epochs end with their files (3 epochs of 64 local files in < 3 s, not >= 6)" "$j" "len(j['epochs']) == 3 and j['seconds'] < 3"

run_all directory "$work/ds"
run_all "store+cache" "file://$work/ds" --mem-cache 64M

"$tierfs" mount "$work/ds" "$mnt" --trace "$work/trace" --mem-cache 64M
run_all mount "$mnt"
"$tierfs" umount "$mnt"                 # a fresh mount: no page cache
sleep 0.5
"$tierfs" mount "$work/ds" "$mnt" --mem-cache 64M
j=$("$tierfs" bench train -j 2 --epochs 2 --batch 8 --compute-ms 1 --drop --json --plot "$work" "$mnt")
check "train on a mount reports hit rates" "$j" "all(0 <= e['hit_rate'] <= 1 for e in j['epochs']) and j['epochs'][1]['hit_rate'] > 0.5"
j=$("$tierfs" bench train -j 2 --epochs 2 --batch 8 --compute-ms 1 --drop --hint --json "$mnt")
h=$(cat "$mnt/.tierfs-stats")
check "train --hint tells the mount each epoch's order" "$h" "j['hints']['streams_opened'] == 2 and j['hints']['paths'] == 128 and j['hints']['opens_hinted'] == 128 and j['hints']['streams'] == 0"
"$tierfs" umount "$mnt"
sleep 0.5
for f in train-epochs train-latency-cdf; do
    if /usr/bin/python3 -c 'import sys, xml.dom.minidom as m; d = m.parse(sys.argv[1]); sys.exit(0 if d.getElementsByTagName("polyline") else 1)' "$work/$f.svg"; then
        ok "plot $f.svg"
    else
        bad "plot $f.svg"
    fi
done

j=$("$tierfs" profile --json "$work/trace")
check "profile of the mount's trace" "$j" "j['files'] == 64 and j['size_median'] == 65536 and j['reads'] > 0 and 0 <= j['sequential_ratio'] <= 1 and 0 <= j['reread_ratio'] <= 1 and j['read_bytes'] >= 64 * 65536 and j['working_set_bytes'] == 64 * 65536 and len(j['mrc']) > 1 and all(0 <= p['hit_lru'] <= 1 and 0 <= p['hit_tinylfu'] <= 1 for p in j['mrc'])"
"$tierfs" profile "$work/trace" | grep -q "miss-ratio curve" && ok "profile text report" || bad "profile text report"
j=$("$tierfs" profile --json "$work/ds")
check "profile of a directory" "$j" "j['files'] == 64 and j['bytes'] == 64 * 65536"
# ckpt: a checkpoint root's own steps are never touched (the bench
# writes under TARGET/tierfs-bench-ckpt and removes its step).
mkdir -p "$work/ck/step-000001"
echo keep >"$work/ck/step-000001/mine"
ckpt_ok='j["workload"] == "ckpt" and j["errors"] == 0 and j["ops"] == 16 and
    j["bytes"] == 4 << 20 and j["files"] >= 2 and
    0 < j["save_blocked_s"] <= j["save_durable_s"] and
    0 < j["restore_first_s"] <= j["restore_s"] and j["restore_mb_per_s"] > 0'
j=$("$tierfs" bench ckpt --size 4M --shards 2 -j 2 --json "$work/ck")
check "ckpt on a directory" "$j" "$ckpt_ok"
j=$("$tierfs" bench ckpt --size 4M --shards 2 -j 2 --json "file://$work/ck")
check "ckpt on a store URI (a second run replaces the first)" "$j" "$ckpt_ok"
[ "$(cat "$work/ck/step-000001/mine")" = keep ] && [ -z "$(ls -A "$work/ck/tierfs-bench-ckpt")" ] &&
    ok "ckpt leaves the root's own steps and removes its own" ||
    bad "ckpt leaves the root's own steps and removes its own"
"$tierfs" bench ckpt --size 4M "$work/ck" | grep -q "restore: all (verified)" &&
    ok "ckpt table" || bad "ckpt table"
"$tierfs" bench ckpt --size 8 "$work/ck" >/dev/null 2>&1
[ $? = 2 ] && ok "ckpt --size below 16 bytes is a usage error" || bad "ckpt --size below 16 bytes is a usage error"
"$tierfs" bench nonsense "$work/ds" >/dev/null 2>&1
[ $? = 2 ] && ok "unknown workload is a usage error" || bad "unknown workload is a usage error"
msg=$("$tierfs" bench train --epochs 1 --hint "$work/ds" 2>&1)
[ $? = 1 ] && case $msg in *"in no tierfs mount"*) true ;; *) false ;; esac &&
    ok "train --hint outside a mount fails, saying so" ||
    bad "train --hint outside a mount fails, saying so ($msg)"
"$tierfs" bench seq /nonexistent/dir >/dev/null 2>&1
[ $? = 1 ] && ok "missing target fails" || bad "missing target fails"

tap_end
