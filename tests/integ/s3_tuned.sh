#!/usr/bin/env bash
# scripts/s3-server with S3_TUNED=1: a second throw-away cluster (memstore,
# its own dir and ports) starts with the tuned settings, serves a
# multipart round trip byte for byte, and stops; a bad S3_TUNED is refused
# with a one-line error before anything starts.
#
#   s3_tuned.sh TIERFS S3_SERVER
set -u
tierfs=$1
server=$2
work=$(mktemp -d /tmp/tfs-s3tuned-XXXXXX)
export S3_DIR=$work/s3 S3_PORT=${TUNED_S3_PORT:-7491} MON_PORT=${TUNED_MON_PORT:-16791}
# shellcheck source=tests/integ/tap.sh
. "$(dirname "$0")/tap.sh"
check() { check_cmd "$@"; }             # this file's checks run commands
cleanup() {
    "$server" stop --owner s3tuned >/dev/null 2>&1
    rm -rf "$work"
}
trap cleanup EXIT

S3_TUNED=yes "$server" start --owner s3tuned >"$work/out" 2>"$work/err"
rc=$?
check "bad S3_TUNED: exit 1" [ "$rc" = 1 ]
check "bad S3_TUNED: one line naming it" \
    grep -q "^s3-server: S3_TUNED must be 0 or 1, not 'yes'$" "$work/err"
check "bad S3_TUNED: nothing else on stderr or stdout" \
    test "$(wc -l <"$work/err")" = 1 -a ! -s "$work/out"
check "bad S3_TUNED: nothing started" [ ! -e "$S3_DIR/pid/rgw" ]

if S3_TUNED=1 "$server" start --owner s3tuned >"$work/env" 2>"$work/err"; then
    ok "tuned start"
else
    bad "tuned start"; sed 's/^/    /' "$work/err" | tail -5
    tap_end; exit 1
fi
check "ceph.conf: no data crc" grep -qx "ms crc data = false" "$S3_DIR/ceph.conf"
rgw=$(cat "$S3_DIR/pid/rgw")
check "rgw runs with the malloc tunables" \
    grep -qa "glibc.malloc.mmap_threshold=33554432" "/proc/$rgw/environ"

# shellcheck disable=SC1091
. "$work/env"
head -c $((20 << 20)) /dev/urandom >"$work/src"
uri="s3://$TFS_TEST_S3_BUCKET/tuned/obj?part_size=5M"
check "multipart put" "$tierfs" put -q "$work/src" "$uri"
check "get" "$tierfs" get -q "$uri" "$work/back"
check "round trip byte-exact" cmp -s "$work/src" "$work/back"
check "ranged cat" bash -c 'set -o pipefail; "$1" cat --range 12345678-12349999 "$2" | cmp -s - \
    <(tail -c +12345679 "$3" | head -c 4322)' _ "$tierfs" "$uri" "$work/src"

check "tuned stop" "$server" stop --owner s3tuned
tap_end
