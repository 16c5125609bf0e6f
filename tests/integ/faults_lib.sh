# shellcheck shell=bash
# Shared by tests/integ/faults.sh (the CI form), bench/faults (the full
# matrix) and bench/soak: mounting, killing, the ledger, pass/fail counts.
# The caller sets: tierfs (the binary), work (a scratch dir), and sources
# this file.  Nothing here starts or stops the shared S3 server.

: "${tierfs:?}" "${work:?}"
faults_top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
ledger="/usr/bin/python3 $faults_top/bench/tools/ledger.py"
export TIERFS_LIB=${TIERFS_LIB:-$(dirname "$tierfs")/libtierfs.so}
pass=0
fail=0
mnt_pid=0
mnt_dir=""
mnt_log=""

ok() { pass=$((pass + 1)); echo "ok - $1"; }
bad() { fail=$((fail + 1)); echo "FAIL - $1"; }
# check NAME CMD...: CMD's exit status decides
check() { if "${@:2}"; then ok "$1"; else bad "$1"; fi; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }

is_mounted() { grep -q " $1 fuse" /proc/mounts; }

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
    wait "$mnt_pid" 2>/dev/null
    mnt_pid=0
    fusermount3 -u -z "$mnt_dir" 2>/dev/null
    return 0
}

# mnt_stop: a clean unmount (SIGTERM after 20 s of trying)
mnt_stop() {
    local i
    [ "$mnt_pid" != 0 ] || return 0
    fusermount3 -u "$mnt_dir" 2>/dev/null || fusermount3 -u -z "$mnt_dir" 2>/dev/null
    for i in $(seq 200); do
        kill -0 "$mnt_pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -0 "$mnt_pid" 2>/dev/null && kill -9 "$mnt_pid" 2>/dev/null
    wait "$mnt_pid" 2>/dev/null
    mnt_pid=0
    return 0
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

faults_summary() {
    echo "$1: $pass passed, $fail failed"
    [ "$fail" = 0 ]
}
