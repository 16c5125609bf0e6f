#!/usr/bin/env bash
# Security checks, one per claim of docs/security.md (the names match).
#
#   security.sh TIERFS LIBTIERFS_SO          private dirs, modes, metrics,
#                                            endpoint redaction (posix)
#   security.sh TIERFS LIBTIERFS_SO s3://B/P credentials of the mount
#                                            daemon (under scripts/with-s3)
#
# Needs root (chown to uid 65534 plays the other local user) and FUSE;
# exits 77 without them.  It runs in a mount namespace of its own with a
# tmpfs on /var/tmp, so the defaults (/var/tmp/tierfs-UID/staging,
# /var/tmp/tierfs-ckpt-UID) are tested for real without touching the
# machine's /var/tmp.
set -u
tierfs=$1
lib=$2
s3=${3:-}
src=$(cd "$(dirname "$0")/../.." && pwd)
if [ "$(id -u)" != 0 ] || [ ! -e /dev/fuse ]; then
    echo "skip: needs root and /dev/fuse"
    exit 77
fi
if [ -z "${TFS_SEC_NS:-}" ]; then
    exec unshare -m --propagation private env TFS_SEC_NS=1 "$0" "$@"
fi
mount -t tmpfs -o mode=1777 tfs-sec /var/tmp || exit 1
W=$(mktemp -d /tmp/tfs-sec-XXXXXX)
chmod 755 "$W"
# shellcheck source=tests/integ/tap.sh
. "$(dirname "$0")/tap.sh"
err=$W/err
tap_detail=$err
OTHER=65534

cleanup() {
    for m in "$W"/mnt*; do
        mountpoint -q "$m" 2>/dev/null && fusermount3 -u "$m"
    done
    rm -rf "$W"
}
trap cleanup EXIT

modes() { stat -c %a "$@" | tr '\n' ' ' | sed 's/ $//'; }
xxh() {
    /usr/bin/python3 -c "import ctypes,sys
x=ctypes.CDLL('libxxhash.so.0');x.XXH3_64bits.restype=ctypes.c_uint64
s=sys.argv[1].encode();print('%016x'%x.XXH3_64bits(s,len(s)))" "$1"
}
# A sanitizer build of the library loads into Debian's python only with
# its runtime preloaded (leak checks off: CPython's own allocations).
preload=$(ldd "$lib" 2>/dev/null | awk '/libasan|libubsan/ {print $3}' |
    tr '\n' ':')
# save URI STEP: one checkpoint of one 4 KiB tensor through the binding.
save() {
    LD_PRELOAD=${preload%:} ASAN_OPTIONS=detect_leaks=0 \
    PYTHONPATH=$src/python TIERFS_LIB=$lib PYTHONDONTWRITEBYTECODE=1 \
        /usr/bin/python3 -c "import ctypes,sys
from tierfs import ckpt
b=ctypes.create_string_buffer(b'A'*4096,4096)
w=ckpt.Writer(sys.argv[1],int(sys.argv[2]))
w.add('t','U8',[4096],ctypes.addressof(b),4096); w.save(); w.wait(); w.close()" \
        "$1" "$2"
}
# mnt ARGS...: tierfs mount, stderr in $err; its exit status.
mnt() { "$tierfs" mount "$@" 2>"$err" >/dev/null; }
umnt() { "$tierfs" umount "$1" >/dev/null 2>&1 || fusermount3 -u "$1"; }
# A mount that should have been refused may have happened (old code).
unmnt() { if mountpoint -q "$1"; then umnt "$1"; fi; }
SHARD=model-rank00000-00001.safetensors

posix_cases() {
    mkdir -p "$W"/mnt "$W"/store
    echo "hello" >"$W/store/f1"
    head -c 3000000 /dev/urandom >"$W/store/f2"

    # ---- checkpoint staging (D4) ----
    # ckpt-no-symlink (E16): a planted symlink at the tmp name of a shard
    # is removed, never written through.
    mkdir -p "$W/staging" && chmod 755 "$W/staging"
    h=$(xxh "file://$W/store")
    mkdir -p "$W/staging/$h/step-000001"
    chmod 700 "$W/staging/$h" "$W/staging/$h/step-000001"
    echo "precious config" >"$W/victim"
    ln -s "$W/victim" "$W/staging/$h/step-000001/$SHARD.tmp"
    TIERFS_CKPT_STAGING=$W/staging save "file://$W/store" 1 2>"$err"
    rc=$?
    check ckpt-no-symlink '[ "$(cat "$W/victim")" = "precious config" ] &&
        [ -f "$W/staging/$h/step-000001/$SHARD" ] &&
        [ ! -L "$W/staging/$h/step-000001/$SHARD" ]'

    # ckpt-private (E15): the default staging dir is per user, 0700 dirs,
    # the kept shard 0600.
    d=/var/tmp/tierfs-ckpt-0
    save "file://$W/store" 2 2>"$err"
    rc=$?
    check ckpt-private '[ "$(modes $d $d/$h $d/$h/step-000002 \
        $d/$h/step-000002/$SHARD)" = "700 700 700 600" ]'

    # ckpt-foreign-owner: another user's (or a symlinked) staging dir is
    # refused with a one-line error naming it; nothing is written there.
    rm -rf $d && mkdir -m 700 $d && chown $OTHER $d
    save "file://$W/store" 3 2>"$err"
    rc=$?
    check ckpt-foreign-owner '[ $rc != 0 ] &&
        grep -q "$d: owned by uid $OTHER, not 0" "$err" &&
        [ -z "$(ls -A $d)" ]'
    rm -rf $d && mkdir -m 700 "$W/elsewhere" && ln -s "$W/elsewhere" $d
    save "file://$W/store" 4 2>"$err"
    rc=$?
    check ckpt-symlinked-dir '[ $rc != 0 ] &&
        grep -q "$d: a symbolic link: refusing" "$err" &&
        [ -z "$(ls -A "$W/elsewhere")" ]'
    rm -f $d
    # ckpt-explicit-root: TIERFS_CKPT_STAGING may be a sticky shared dir
    # (like /tmp), everything below it is private; another user's is not.
    mkdir -m 1777 "$W/sticky" && chmod 1777 "$W/sticky"
    TIERFS_CKPT_STAGING=$W/sticky save "file://$W/store" 5 2>"$err"
    rc=$?
    check ckpt-explicit-root '[ $rc = 0 ] &&
        [ "$(modes "$W/sticky/$h" "$W/sticky/$h/step-000005")" = "700 700" ]'
    mkdir -m 755 "$W/theirs" && chown $OTHER "$W/theirs"
    TIERFS_CKPT_STAGING=$W/theirs save "file://$W/store" 6 2>"$err"
    rc=$?
    check ckpt-explicit-foreign '[ $rc != 0 ] &&
        grep -q "$W/theirs: owned by uid $OTHER, not 0 or root" "$err"'

    # ---- write-back staging (D5) ----
    st=/var/tmp/tierfs-0/staging
    # staging-no-symlink (E10): a symlinked staging/ID refuses the mount.
    mkdir -p $st && chmod 700 /var/tmp/tierfs-0 $st
    mkdir -m 777 "$W/attacker" && chmod 777 "$W/attacker"
    ln -s "$W/attacker" "$st/$h"
    mnt --upload-delay 600 "$W/store" "$W/mnt"
    rc=$?
    check staging-no-symlink '[ $rc = 1 ] && [ "$(wc -l <"$err")" = 1 ] &&
        grep -q "$st/$h: a symbolic link: refusing to use it" "$err" &&
        [ -z "$(ls -A "$W/attacker")" ] && ! mountpoint -q "$W/mnt"'
    unmnt "$W/mnt"
    # staging-foreign-owner: a tierfs-UID made by another user.
    rm -rf /var/tmp/tierfs-0 && mkdir -m 777 /var/tmp/tierfs-0 &&
        chown $OTHER /var/tmp/tierfs-0
    mnt --upload-delay 600 "$W/store" "$W/mnt"
    rc=$?
    check staging-foreign-owner '[ $rc = 1 ] &&
        grep -q "/var/tmp/tierfs-0: owned by uid $OTHER, not 0" "$err" &&
        ! mountpoint -q "$W/mnt"'
    unmnt "$W/mnt"
    # staging-private: otherwise the default is made 0700 and works.
    rm -rf /var/tmp/tierfs-0
    mnt "$W/store" "$W/mnt"
    rc=$?
    check staging-private '[ $rc = 0 ] && echo s >"$W/mnt/s" &&
        [ "$(modes /var/tmp/tierfs-0 $st $st/$h)" = "700 700 700" ]'
    umnt "$W/mnt"

    # ---- the cache dir (D6) ----
    # cache-private (E4): after reads, every dir 0700, every file 0600.
    mnt --immutable --cache-dir "$W/cache" "$W/store" "$W/mnt" &&
        cat "$W/mnt/f1" "$W/mnt/f2" >/dev/null && ls "$W/mnt" >/dev/null
    umnt "$W/mnt"
    c=$W/cache
    check cache-private '[ "$(modes $c $c/blocks $c/blocks/00 $c/index \
        $c/index.lock $c/settings $c/meta)" = "700 700 700 600 600 600 700" ] &&
        [ -n "$(find $c/blocks -type f)" ] && [ -n "$(find $c/meta -type f)" ] &&
        [ -z "$(find $c -type f ! -perm 600)" ] &&
        [ -z "$(find $c -type d ! -perm 700)" ]'
    # cache-tighten: a cache dir of an older version (0755) is made 0700.
    c=$W/cache-old
    mkdir -p $c/blocks/00 && chmod -R 755 $c
    "$tierfs" -v mount --read-only --log "$W/log-old" --cache-dir $c \
        "$W/store" "$W/mnt" 2>"$err" >/dev/null &&
        cat "$W/mnt/f1" >/dev/null
    umnt "$W/mnt"
    check cache-tighten '[ "$(modes $c $c/blocks $c/blocks/00)" = \
        "700 700 700" ] && grep -q "$c: mode 0755 set to 0700" "$err"'
    # cache-group: --cache-mode group gives the group access, never others.
    c=$W/cache-group
    mnt --read-only --cache-mode group --cache-dir $c "$W/store" "$W/mnt" &&
        cat "$W/mnt/f1" "$W/mnt/f2" >/dev/null
    umnt "$W/mnt"
    check cache-group '[ "$(modes $c $c/blocks $c/blocks/00 $c/index)" = \
        "2770 2770 2770 660" ] && [ -n "$(find $c/blocks -type f)" ] &&
        [ -z "$(find $c -type f ! -perm 660)" ] &&
        [ -z "$(find $c -perm /007)" ]'
    # cache-group-no-staging: a rw mount over a group cache keeps its
    # staging out of it, in /var/tmp/tierfs-EUID.
    rm -rf /var/tmp/tierfs-0
    mnt --cache-mode group --cache-dir $c "$W/store" "$W/mnt"
    rc=$?
    check cache-group-no-staging '[ $rc = 0 ] && [ ! -e $c/staging ] &&
        [ -d "$st/$h/data" ]'
    unmnt "$W/mnt"
    # cache-group-kept: a private mount never takes a group cache private.
    mnt --read-only --cache-dir $c "$W/store" "$W/mnt"
    rc=$?
    check cache-group-kept '[ $rc = 1 ] && grep -q "group-shared" "$err" &&
        [ "$(modes $c)" = 2770 ]'
    unmnt "$W/mnt"
    # cache-foreign-owner: another user's cache dir is refused.
    c=$W/cache-theirs
    mkdir -m 700 $c && chown $OTHER $c
    mnt --read-only --cache-dir $c "$W/store" "$W/mnt"
    rc=$?
    check cache-foreign-owner '[ $rc = 1 ] &&
        grep -q "$c: owned by uid $OTHER, not 0" "$err" &&
        ! mountpoint -q "$W/mnt"'
    unmnt "$W/mnt"

    # ---- metrics (R12's endpoint) ----
    # metrics-loopback: --metrics PORT listens on 127.0.0.1 only.
    port=$(free_port)
    mnt --read-only --metrics $port "$W/store" "$W/mnt"
    rc=$?
    ss -ltnpH "sport = :$port" >"$W/ss" 2>&1
    check metrics-loopback '[ "$(awk "{print \$4}" "$W/ss")" = \
        "127.0.0.1:$port" ] && grep -q "\"tierfs\"" "$W/ss"'
    umnt "$W/mnt"

    # ---- credentials (R11) ----
    # endpoint-redacted: an endpoint with user:password@ is refused
    # without repeating the password.
    for ep in "http://AKIDX:Sup3rSecretPw@127.0.0.1:1/" \
              "http://AKIDX:Sup3r/SecretPw@127.0.0.1:1" \
              "AKIDX:Sup3rSecretPw@127.0.0.1:1"; do
        AWS_ACCESS_KEY_ID=AKIDX AWS_SECRET_ACCESS_KEY=x AWS_REGION=us-east-1 \
            "$tierfs" ls "s3://bkt/?endpoint=$ep" >"$err" 2>&1
            rc=$?
        check "endpoint-redacted $ep" '[ $rc = 1 ] &&
            ! grep -q "Secret" "$err" && grep -q "\*\*\*" "$err"'
    done
}

# The mount daemon with real credentials (AWS_* from scripts/with-s3).
s3_cases() {
    mkdir -p "$W/mnt"
    secret=$AWS_SECRET_ACCESS_KEY
    port=$(free_port)
    mnt --read-only --log "$W/log" --metrics $port "$s3" "$W/mnt"
    rc=$?
    ls "$W/mnt" >/dev/null 2>&1
    pid=$(ss -ltnpH "sport = :$port" | sed -n 's/.*pid=\([0-9]*\).*/\1/p')
    check cred-not-in-cmdline '[ -n "$pid" ] &&
        tr "\0" " " </proc/$pid/cmdline | grep -q "$W/mnt" &&
        ! grep -qaF "$secret" /proc/$pid/cmdline'
    umnt "$W/mnt"
    # cred-not-in-logs: an auth failure (a wrong secret) is reported
    # without the secret, on stderr and in the daemon's log.
    wrong=WrongSecret$RANDOM$RANDOM
    AWS_SECRET_ACCESS_KEY=$wrong "$tierfs" mount --read-only \
        --log "$W/log-bad" "$s3" "$W/mnt" >"$W/out-bad" 2>&1
    mountpoint -q "$W/mnt" && { ls "$W/mnt" >>"$W/out-bad" 2>&1; umnt "$W/mnt"; }
    AWS_SECRET_ACCESS_KEY=$wrong "$tierfs" ls "$s3/" >>"$W/out-bad" 2>&1
    cat "$W/log" "$W/log-bad" "$W/out-bad" >"$err" 2>/dev/null
    check cred-not-in-logs 'grep -qi "denied\|forbidden\|signature\|403" "$err" &&
        ! grep -qaF "$wrong" "$err" && ! grep -qaF "$secret" "$err"'
}

if [ -n "$s3" ]; then s3_cases; else posix_cases; fi
tap_end
