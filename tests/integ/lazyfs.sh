#!/usr/bin/env bash
# The fault matrix's lossy disk (bench/tools/lazyfs.c), tested on its own:
# what was fsynced survives a power loss (SIGUSR1) and a remount byte for
# byte, what was only written or closed is gone, reads before the loss see
# the dirty bytes, every call after it answers EIO; truncate, O_TRUNC,
# rename and O_SYNC keep the dirty data right; the EIO flag file fails
# reads while it exists; the dirty cap answers ENOSPC; lazyfs exits at its
# time bound and when its parent dies, and never writes dirty data then.
#
#   lazyfs.sh LAZYFS
set -u
lazyfs=$1
py=/usr/bin/python3
work=$(mktemp -d /tmp/lazyfs-test-XXXXXX)
u=$work/under
m=$work/mnt
pid=0
cleanup() {
    grep -q " $m fuse" /proc/mounts && fusermount3 -u -z "$m" 2>/dev/null
    [ "$pid" = 0 ] || kill "$pid" 2>/dev/null
    wait 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
# shellcheck source=tests/integ/tap.sh
. "$(dirname "$0")/tap.sh"
T() { timeout 20 "$@"; }                 # nothing here may hang the test

# up ARGS...: lazyfs ARGS UNDER MNT in the background, mounted (5 s at most)
up() {
    "$lazyfs" "$@" "$u" "$m" 2>>"$work/log" &
    pid=$!
    for _ in $(seq 100); do
        grep -q " $m fuse" /proc/mounts && return 0
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
    done
    echo "    lazyfs did not mount; its log:"; tail -3 "$work/log" | sed 's/^/    /'
    return 1
}
# down: unmount and wait for lazyfs (5 s at most); its exit status in $rc
down() {
    fusermount3 -u "$m" 2>/dev/null || fusermount3 -u -z "$m" 2>/dev/null
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    kill "$pid" 2>/dev/null
    wait "$pid"
    rc=$?
    pid=0
}
size() { stat -c %s "$1" 2>/dev/null || echo none; }
# fsync_ro PATH: fsync through a read-only handle
fsync_ro() { T $py -c 'import os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd); os.close(fd)' "$1"; }
# put SRC DST [DD_ARGS...]: SRC's bytes into DST through dd
put() { T dd if="$1" of="$2" bs=64k status=none "${@:3}"; }

mkdir -p "$u" "$m"
for f in a b c t r o s e; do head -c $((1000000 + RANDOM)) /dev/urandom >"$work/$f.src"; done
cp "$work/e.src" "$u/e"                  # on the disk before the mount

up -t 60 -e "$work/flag" || exit 1

# a: fsynced, then 16 KiB overwritten and not fsynced
put "$work/a.src" "$m/a" conv=fsync
cp "$work/a.src" "$work/a.dirty"
dd if="$work/b.src" of="$work/a.dirty" bs=4k seek=10 count=4 conv=notrunc status=none
put "$work/b.src" "$m/a" bs=4k seek=10 count=4 conv=notrunc
check "reads see the dirty overwrite" 'cmp -s "$m/a" "$work/a.dirty"'
check "UNDER still holds the fsynced bytes" 'cmp -s "$u/a" "$work/a.src"'

# c: written and closed, never fsynced
put "$work/c.src" "$m/c"
check "closed, not fsynced: reads see it ($(size "$m/c") B)" 'cmp -s "$m/c" "$work/c.src"'
check "closed, not fsynced: UNDER has the name, 0 B ($(size "$u/c"))" '[ "$(size "$u/c")" = 0 ]'

# t: 100 KB dirty, truncated to 50000, 10 KiB at 70000, fsynced through a
# read-only handle, then truncated to 60000 (metadata: durable at once)
head -c 100000 "$work/t.src" >"$work/t.w"
put "$work/t.w" "$m/t"
T truncate -s 50000 "$m/t"
head -c 10240 "$work/b.src" | T dd of="$m/t" bs=10240 seek=70000 oflag=seek_bytes conv=notrunc status=none
head -c 50000 "$work/t.src" >"$work/t.want"
head -c 20000 /dev/zero >>"$work/t.want"
head -c 10240 "$work/b.src" >>"$work/t.want"
check "truncate + write: read back as expected ($(size "$m/t") B)" 'cmp -s "$m/t" "$work/t.want"'
fsync_ro "$m/t"
check "truncate + write + fsync: UNDER exact" 'cmp -s "$u/t" "$work/t.want"'
T truncate -s 60000 "$m/t"
head -c 60000 "$work/t.want" >"$work/t.final"

# r: dirty data renamed, fsynced through the new name
put "$work/r.src" "$m/r1"
T mv "$m/r1" "$m/r2"
check "rename keeps the dirty data" 'cmp -s "$m/r2" "$work/r.src"'
fsync_ro "$m/r2"
check "fsync through the new name writes it" 'cmp -s "$u/r2" "$work/r.src"'

# o: 1 MB fsynced, then opened O_TRUNC, 100 KB written, fsynced
put "$work/o.src" "$m/o" conv=fsync
head -c 100000 "$work/b.src" >"$work/o.want"
put "$work/o.want" "$m/o" conv=fsync
check "O_TRUNC + write + fsync: UNDER exact, no old tail ($(size "$u/o") B)" 'cmp -s "$u/o" "$work/o.want"'

# s: O_SYNC writes are durable at once
put "$work/s.src" "$m/s" oflag=sync
check "O_SYNC: written through to UNDER" 'cmp -s "$u/s" "$work/s.src"'

# 3000 random overlapping writes (and a few truncates), against a model
cat >"$work/rand.py" <<'EOF2'
import os, random, sys
path, under = sys.argv[1], sys.argv[2]
rnd = random.Random(7)
model = bytearray()
fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
for i in range(3000):
    if rnd.random() < 0.01:
        n = rnd.randrange(0, len(model) + 1)
        os.ftruncate(fd, n)
        model = model[:n]
        continue
    off = rnd.randrange(0, 1 << 20)
    data = rnd.randbytes(rnd.choice([1, 100, 4096, 70000]))
    os.pwrite(fd, data, off)
    if len(model) < off:
        model.extend(bytes(off - len(model)))
    model[off:off + len(data)] = data
os.close(fd)                    # a new open reads through lazyfs again
fd = os.open(path, os.O_RDONLY)
got = os.pread(fd, len(model) + 10, 0)
os.fsync(fd)
os.close(fd)
print("same" if got == bytes(model) and open(under, "rb").read() == bytes(model)
      else "differ")
EOF2
out=$(T $py "$work/rand.py" "$m/rand" "$u/rand")
check "random writes: reads and UNDER after fsync match the model ($out)" '[ "$out" = same ]'

# the EIO flag (default -E read): reads fail while it exists, writes not
touch "$work/flag"
sleep 0.1
check "EIO flag: a read fails with EIO" \
    '! T cat "$m/e" 2>"$work/e.err" >/dev/null && grep -q "Input/output error" "$work/e.err"'
check "EIO flag, -E read: a write still works" 'echo x | T dd of="$m/w" status=none'
rm -f "$work/flag"
sleep 0.1
check "EIO flag removed: the read succeeds" 'T cmp -s "$m/e" "$work/e.src"'

# the power loss
kill -USR1 "$pid"
sleep 0.3
line=$(grep "power loss" "$work/log" | tail -1)
bytes=$(echo "$line" | sed -n 's/.*dropped \([0-9]*\) bytes.* in \([0-9]*\) files.*/\1/p')
files=$(echo "$line" | sed -n 's/.*dropped \([0-9]*\) bytes.* in \([0-9]*\) files.*/\2/p')
check "SIGUSR1: one line on stderr, $bytes bytes in $files files dropped" \
    '[ "${bytes:-0}" -ge $((16384 + 1000000)) ] && [ "${files:-0}" -ge 2 ]'
check "after it: open answers EIO" '! T cat "$m/s" >/dev/null 2>"$work/p.err" && grep -q "Input/output error" "$work/p.err"'
check "after it: readdir answers EIO" '! T ls "$m" >/dev/null 2>"$work/p.err" && grep -q "Input/output error" "$work/p.err"'
check "after it: create answers EIO" '! T touch "$m/new" 2>/dev/null'
check "nothing dirty was written: UNDER's c still 0 B" '[ "$(size "$u/c")" = 0 ]'
down
check "unmounted: lazyfs exited 0 ($rc)" '[ "$rc" = 0 ]'
check "it printed its EIO count at exit" 'grep -q "exit: .* [1-9][0-9]* EIO injected" "$work/log"'

up -t 60 || exit 1
check "remount: fsynced a back byte for byte, the overwrite gone" 'cmp -s "$m/a" "$work/a.src"'
check "remount: closed-only c is empty ($(size "$m/c") B)" '[ "$(size "$m/c")" = 0 ]'
check "remount: t is the fsynced bytes, cut by the later truncate" 'cmp -s "$m/t" "$work/t.final"'
check "remount: r2 exact, r1 gone" 'cmp -s "$m/r2" "$work/r.src" && [ ! -e "$m/r1" ]'
check "remount: O_TRUNC'd o exact" 'cmp -s "$m/o" "$work/o.want"'
check "remount: O_SYNC s exact" 'cmp -s "$m/s" "$work/s.src"'

# an unmount is a power loss too; hard links share the dirty data
put "$work/b.src" "$m/h1"
T ln "$m/h1" "$m/h2"
check "a hard link reads the dirty data" 'cmp -s "$m/h2" "$work/b.src"'
down
check "unmount: dirty data not written (UNDER's h1 $(size "$u/h1") B)" '[ "$(size "$u/h1")" = 0 ]'
check "unmount: the exit line counts it" 'grep -q "exit: [1-9][0-9]* bytes of un-fsynced data not written" "$work/log"'

# the dirty cap
up -t 60 -m 1 || exit 1
check "-m 1: a 2 MiB write answers ENOSPC" \
    '! head -c 2097152 /dev/zero | T dd of="$m/big" bs=64k status=none 2>"$work/big.err" && grep -q "No space left" "$work/big.err"'
down

# time bound and parent death (gone or a zombie: this machine's pid 1 may
# not reap orphans)
t0=$(date +%s%N)
up -t 1 || exit 1
wait "$pid"
ms=$((($(date +%s%N) - t0) / 1000000))
pid=0
check "-t 1: exited after $ms ms (< 3000) and unmounted" \
    '[ "$ms" -lt 3000 ] && ! grep -q " $m fuse" /proc/mounts'
sh -c "\"$lazyfs\" -t 60 \"$u\" \"$m\" 2>/dev/null & echo \$! >\"$work/orphan.pid\"; sleep 0.5"
sleep 0.5
opid=$(cat "$work/orphan.pid" 2>/dev/null || echo 0)
state=$(awk '/^State:/ { print $2 }' "/proc/$opid/status" 2>/dev/null)
check "parent died: lazyfs $opid gone (state '${state:-none}'), unmounted" \
    '{ [ -z "$state" ] || [ "$state" = Z ]; } && ! grep -q " $m fuse" /proc/mounts'

check "usage errors exit 2" '"$lazyfs" -E bogus "$u" "$m" 2>/dev/null; [ $? = 2 ]'
check "a missing UNDER: one clear line, exit 1" \
    '"$lazyfs" "$work/none" "$m" 2>"$work/u.err"; [ $? = 1 ] && [ "$(wc -l <"$work/u.err")" = 1 ]'

check "no sanitizer report in lazyfs's log" '! grep -q Sanitizer "$work/log"'

tap_end lazyfs
