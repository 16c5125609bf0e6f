#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Write-back transfers through a real mount (docs/writeback.md, D2 of
# the reliability review):
#
#   slow   E3: a mount on retry+fault+file://S?bw=1M&timeout_ms=5000&
#          deadline_ms=30000; an 8 MB file takes 7.6 s on that link, more
#          than one attempt's timeout_ms: `tierfs sync --timeout 60`
#          succeeds and the bytes are in the store
#   late   writes through a handle after a flush of it was uploaded
#          reach the view and the store (a lost write before)
#   parked puts under refused/ fail with EACCES (fault error_prefix):
#          the change is parked, `tierfs sync` exits 1 naming the key and
#          the cause, files written after it are uploaded, `tierfs stats
#          --json` lists it, its data stays in staging; after a remount
#          without the fault the parked file is uploaded
#
# usage: wb_xfer.sh TIERFS_BINARY
set -eu
T=$1
W=$(mktemp -d /tmp/tierfs-wbxfer-XXXXXX)
pid=

fail() {
    echo "FAIL: $*" >&2
    [ -r "$W/log" ] && sed 's/^/    log: /' "$W/log" | tail -20 >&2
    exit 1
}

cleanup() {
    if [ -n "$pid" ]; then
        fusermount3 -u "$W/mnt" 2>/dev/null || true
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    rm -rf "$W"
}
trap cleanup EXIT

# mount URI: in the foreground, in the background; wait until it is up
mount_at() {
    "$T" mount -f --cache-dir "$W/cache" --staging-dir "$W/staging" \
        --upload-delay 0 "$1" "$W/mnt" >"$W/log" 2>&1 &
    pid=$!
    i=0
    while ! mountpoint -q "$W/mnt"; do
        i=$((i + 1))
        [ $i -lt 100 ] || fail "mount $1 did not come up"
        kill -0 "$pid" 2>/dev/null || fail "mount $1 exited"
        sleep 0.1
    done
}

umount_it() {
    "$T" umount "$W/mnt" || fail "umount"
    wait "$pid" || fail "the daemon exited non-zero"
    pid=
}

mkdir -p "$W/store" "$W/cache" "$W/mnt"

# ---- late write: a write through a handle after a flush of it was
# uploaded (the shell's `echo x > f` flushes the empty file when it
# closes the fd it dup2'ed): before this test the upload
# detached the node from the view, and the write and the close's seal
# went nowhere: view and store empty, sync 0 ----
mount_at "file://$W/store"
/usr/bin/python3 -c "
import os, sys, time
fd0 = os.open(sys.argv[1], os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
fd = os.dup(fd0)
os.close(fd0)                   # flush: the empty file is sealed
time.sleep(1)                   # ... and uploaded (upload delay 0)
os.write(fd, b'late bytes\\n')
os.fsync(fd)                    # sealed again while the handle is open
time.sleep(1)                   # uploaded with the handle still open
os.close(fd)
fd = os.open(sys.argv[2], os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
fd2 = os.dup(fd)
os.close(fd)
time.sleep(1)
os.write(fd2, b'second\\n')
os.close(fd2)" "$W/mnt/late" "$W/mnt/late2" || fail "late: the writer failed"
"$T" sync -q --timeout 30 "$W/mnt" || fail "late: sync did not finish"
[ "$(cat "$W/mnt/late")" = "late bytes" ] || fail "late: view of late"
[ "$(cat "$W/store/late")" = "late bytes" ] || fail "late: store/late"
[ "$(cat "$W/store/late2")" = second ] || fail "late: store/late2"
umount_it
[ "$(cat "$W/store/late2")" = second ] || fail "late: store/late2 after umount"
echo "ok - late: writes after an uploaded flush reach the view and the store"

# ---- slow: an upload longer than one attempt ----
mount_at "retry+fault+file://$W/store?bw=1M&timeout_ms=5000&deadline_ms=30000"
head -c 8000000 /dev/urandom >"$W/big"
cp "$W/big" "$W/mnt/big"
t0=$(date +%s)
"$T" sync -q --timeout 60 "$W/mnt" || fail "slow: sync did not finish"
t1=$(date +%s)
cmp -s "$W/big" "$W/store/big" || fail "slow: store/big differs"
echo "ok - slow: 8 MB through bw=1M with timeout_ms=5000 in $((t1 - t0)) s"
umount_it

# ---- parked: a permanent refusal does not hold up the queue ----
mount_at "retry+fault+file://$W/store?error=EACCES&error_rate=1&error_ops=put&error_prefix=refused/&retries=2&retry_base_ms=1"
mkdir "$W/mnt/refused" "$W/mnt/ok"
echo secret >"$W/mnt/refused/x"
"$T" sync -q --timeout 30 "$W/mnt" 2>"$W/sync1" && fail "parked: sync exited 0"
grep -q "1 changes parked" "$W/sync1" || fail "parked: $(cat "$W/sync1")"
grep -q "upload of 'refused/x': Permission denied" "$W/sync1" ||
    fail "parked: the key and cause not named: $(cat "$W/sync1")"
# files after it move on
for i in 1 2 3; do echo "$i" >"$W/mnt/ok/f$i"; done
"$T" sync -q --timeout 30 "$W/mnt" "ok" || fail "parked: ok/ did not upload"
for i in 1 2 3; do
    [ "$(cat "$W/store/ok/f$i")" = "$i" ] || fail "parked: store/ok/f$i"
done
[ ! -e "$W/store/refused/x" ] || fail "parked: refused/x reached the store"
[ "$(cat "$W/mnt/refused/x")" = secret ] || fail "parked: not in the view"
"$T" stats --json "$W/mnt" >"$W/stats"
grep -q '"parked": 1' "$W/stats" || fail "parked: stats: $(cat "$W/stats")"
grep -q '"key": "refused/x"' "$W/stats" || fail "parked: stats lack the key"
"$T" sync -q --timeout 30 "$W/mnt" 2>"$W/sync2" && fail "parked: 2nd sync 0"
grep -q "refused/x" "$W/sync2" || fail "parked: 2nd sync: $(cat "$W/sync2")"
echo "ok - parked: refused/x named by sync and stats, ok/ uploaded"
# a later write to it tries it again (and parks it again here)
n1=$(grep -c "upload of 'refused/x' failed for good" "$W/log")
echo secret2 >"$W/mnt/refused/x"
"$T" sync -q --timeout 30 "$W/mnt" 2>/dev/null && fail "rewrite: sync 0"
n2=$(grep -c "upload of 'refused/x' failed for good" "$W/log")
[ "$n2" -gt "$n1" ] || fail "rewrite: not tried again ($n1, $n2)"
echo "ok - rewrite: a later write tried it again"
umount_it

# a remount (here without the fault) tries it again
mount_at "file://$W/store"
"$T" sync -q --timeout 30 "$W/mnt" || fail "remount: sync failed"
[ "$(cat "$W/store/refused/x")" = secret2 ] || fail "remount: not uploaded"
echo "ok - remount: the parked change uploaded"
umount_it
