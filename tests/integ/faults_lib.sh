# shellcheck shell=bash
# Shared by tests/integ/faults.sh (the CI form), bench/faults (the full
# matrix) and bench/soak: mounting, killing, the ledger, pass/fail counts.
# The caller sets: tierfs (the binary), work (a scratch dir), and sources
# this file.  Nothing here starts or stops the shared S3 server.

: "${tierfs:?}" "${work:?}"
faults_top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
ledger="/usr/bin/python3 $faults_top/bench/tools/ledger.py"
export TIERFS_LIB=${TIERFS_LIB:-$(dirname "$tierfs")/libtierfs.so}
# shellcheck source=tests/integ/tap.sh
. "$faults_top/tests/integ/tap.sh"
mnt_pid=0
mnt_dir=""
mnt_log=""

# check NAME CMD...: CMD's exit status decides (the matrix's checks run
# commands)
check() { check_cmd "$@"; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }

is_mounted() { grep -q " $1 fuse" /proc/mounts; }

# wait_told PID WHAT SECONDS: wait for PID (a child); if it is still
# there after SECONDS, print where each of its threads sleeps in the
# kernel (state, wchan, stack: a hang then says where it is before the
# test's timeout ends it), and go on waiting.
running() {           # PID exists and is not a zombie waiting for us
    local st
    st=$(awk '/^State:/ {print $2}' "/proc/$1/status" 2>/dev/null)
    [ -n "$st" ] && [ "$st" != Z ]
}
wait_told() {
    local pid=$1 what=$2 i t
    for i in $(seq $(($3 * 10))); do
        running "$pid" || break
        sleep 0.1
    done
    if running "$pid"; then
        echo "# $what: pid $pid still there after $3 s; its threads:"
        for t in /proc/"$pid"/task/*; do
            echo "#   $(cat "$t/comm" 2>/dev/null) $(awk '/^State:/ {print $2}' \
                "$t/status" 2>/dev/null) wchan=$(cat "$t/wchan" 2>/dev/null)"
            sed 's/^/#     /' "$t/stack" 2>/dev/null | head -12
        done
        grep " fuse" /proc/mounts | sed 's/^/#   mount: /'
    fi
    wait "$pid" 2>/dev/null
}

# mnt_start URI DIR ARGS...: tierfs mount -f in the background; waits
# (30 s at most) until DIR/.tierfs-stats answers.  Sets mnt_pid, and
# mnt_up_ms: the time from the start to the first answer.
mnt_start() {
    local uri=$1 dir=$2 t0 i
    shift 2
    mkdir -p "$dir"
    mnt_dir=$dir
    mnt_log=$dir.log
    t0=$(now_ms)
    # mnt_wrap: e.g. nsenter --net=... to run the daemon in a netns
    ${mnt_wrap:-} "$tierfs" mount -f "$@" "$uri" "$dir" >>"$mnt_log" 2>&1 &
    mnt_pid=$!
    for i in $(seq 3000); do
        if is_mounted "$dir" && [ -e "$dir/.tierfs-stats" ]; then
            mnt_up_ms=$(($(now_ms) - t0))
            return 0
        fi
        kill -0 "$mnt_pid" 2>/dev/null || break
        sleep 0.01
    done
    echo "    mount of $uri did not come up; its log:"
    tail -5 "$mnt_log" | sed 's/^/    /'
    mnt_pid=0
    return 1
}

# mnt_kill9: SIGKILL the daemon and clear the dead mount
mnt_kill9() {
    [ "$mnt_pid" != 0 ] || return 0
    kill -9 "$mnt_pid" 2>/dev/null
    wait_told "$mnt_pid" "the killed daemon" 15
    mnt_pid=0
    fusermount3 -u -z "$mnt_dir" 2>/dev/null
    return 0
}

# fuse_stop PID DIR TENTHS SIG: unmount DIR (lazily if it is busy), give
# the FUSE daemon PID TENTHS tenths of a second to exit, then send SIG
fuse_stop() {
    local pid=$1 dir=$2 tenths=$3 sig=$4 i
    fusermount3 -u "$dir" 2>/dev/null || fusermount3 -u -z "$dir" 2>/dev/null
    for i in $(seq "$tenths"); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -0 "$pid" 2>/dev/null && kill "$sig" "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    return 0
}

# mnt_stop: a clean unmount (SIGKILL after 20 s of trying)
mnt_stop() {
    [ "$mnt_pid" != 0 ] || return 0
    fuse_stop "$mnt_pid" "$mnt_dir" 200 -9
    mnt_pid=0
}

# stat_num NAME: one figure of the running mount's .tierfs-stats (a JSON
# object; NAME is a dotted path: writeback.staging_bytes)
stat_num() {
    /usr/bin/python3 -c 'import json, sys
v = json.load(open(sys.argv[1]))
for k in sys.argv[2].split("."): v = v.get(k, {}) if isinstance(v, dict) else {}
print(v if not isinstance(v, dict) else "")' "$mnt_dir/.tierfs-stats" "$1" 2>/dev/null
}

# fd_count PID, thread_count PID, rss_kb PID
fd_count() { ls "/proc/$1/fd" 2>/dev/null | wc -l; }
thread_count() { awk '/^Threads:/ { print $2 }' "/proc/$1/status" 2>/dev/null; }
rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null; }

# small_fs DIR SIZE: a tmpfs of SIZE at DIR (a full disk on demand)
small_fs() {
    mkdir -p "$1" && mount -t tmpfs -o "size=$2,mode=0700" tmpfs "$1"
}

faults_summary() { tap_end "$1"; }

# train_kill_run DIR KILLS MIN_S MAX_S: bench/tools/train_resume.py's job
# (20 ms of "compute" a step) run once uninterrupted, then jobs of the
# same killed (kill -9 of the process group) at a uniform draw in
# [MIN_S, MAX_S] seconds after each resume begins ("start" logged), each
# resumed from its latest checkpoint until it finishes, until KILLS kills
# in all; every job is checked against the uninterrupted one.  Prints
# the totals and the last check's JSON; status 1 on any difference.
train_kill_run() {
    local d=$1 kills=$2 lo=$3 hi=$4 tr pid t n=0 jobs=0 badj=0 i r
    local args=(--step-ms 20 --epochs 2)
    tr="env PYTHONPATH=$faults_top/python /usr/bin/python3 $faults_top/bench/tools/train_resume.py"
    rm -rf "$d"
    mkdir -p "$d"
    $tr make "$d/src" >/dev/null || return 1
    "$tierfs" pack -q --shard-size 16K --shuffle-seed 3 "$d/src" "$d/data" >/dev/null 2>"$d/pack.err" || { cat "$d/pack.err"; return 1; }
    $tr run "${args[@]}" --data "$d/data" --ckpt "fault+file://$d/ref-ck?latency_ms=20" \
        --log "$d/ref.log" >"$d/ref.out" 2>&1 || { tail -3 "$d/ref.out"; return 1; }
    while [ "$n" -lt "$kills" ]; do
        jobs=$((jobs + 1))
        local log=$d/run$jobs.log ck="fault+file://$d/ck$jobs?latency_ms=20"
        : >"$log"
        while [ "$n" -lt "$kills" ] && ! grep -q '^done ' "$log"; do
            local starts; starts=$(grep -c '^start ' "$log")
            setsid $tr run "${args[@]}" --data "$d/data" --ckpt "$ck" --log "$log" >>"$d/run.out" 2>&1 &
            pid=$!
            for i in $(seq 600); do
                [ "$(grep -c '^start ' "$log")" -gt "$starts" ] && break
                kill -0 "$pid" 2>/dev/null || break
                sleep 0.05
            done
            t=$(awk -v lo="$lo" -v hi="$hi" -v s="$RANDOM" 'BEGIN { srand(s); printf "%.2f", lo + rand() * (hi - lo) }')
            sleep "$t"
            if kill -9 -- "-$pid" 2>/dev/null; then n=$((n + 1)); fi
            wait "$pid" 2>/dev/null
        done
        grep -q '^done ' "$log" ||
            $tr run "${args[@]}" --data "$d/data" --ckpt "$ck" --log "$log" >>"$d/run.out" 2>&1 ||
            { tail -3 "$d/run.out"; return 1; }
        r=$($tr check "$log" "$d/ref.log") || badj=$((badj + 1))
        echo "$r" >>"$d/checks"
    done
    /usr/bin/python3 - "$d/checks" "$n" "$jobs" "$badj" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"{sys.argv[2]} kills over {sys.argv[3]} jobs, {sys.argv[4]} jobs differing "
      f"from the uninterrupted one; restarts {sum(r['restarts'] for r in rows)}, "
      f"resumed at steps {sorted(s for r in rows for s in r['resumed_at'])}; "
      f"steps with another batch than the uninterrupted job's "
      f"{sum(r['wrong_steps'] for r in rows)}, resumes not after a checkpoint "
      f"{sum(r['bad_resumes'] for r in rows)}, final model equal "
      f"{sum(r['model_equal'] for r in rows)} of {len(rows)}")
PY
    [ "$badj" = 0 ]
}
