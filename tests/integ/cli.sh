#!/usr/bin/env bash
# CLI tests: run the real tierfs binary against a store base URI.
#
#   cli.sh TIERFS BASE_URI      (BASE_URI: a directory or s3://bucket/prefix)
#
# Checks exit codes (0 ok, 1 failure, 2 usage), byte-exact round trips
# through put/get/cat, ranges, listings, rm, one-line errors, and that no
# failing or succeeding run prints the S3 secret key.
set -u
tierfs=$1
base=${2%/}/cli-$$-$RANDOM
work=$(mktemp -d /tmp/tfs-cli-XXXXXX)
trap 'rm -rf "$work"' EXIT
# shellcheck source=tests/integ/tap.sh
. "$(dirname "$0")/tap.sh"
out=$work/out
err=$work/err
tap_detail=$err


# expect NAME RC CMD...: run CMD, want exit status RC.
expect() {
    local name=$1 want=$2
    shift 2
    "$@" >"$out" 2>"$err"
    local rc=$?
    if [ "$rc" = "$want" ]; then ok "$name"; else
        echo "    exit $rc, wanted $want: $*"; bad "$name"; fi
}

# Files to move around.
head -c 5000000 /dev/urandom >"$work/big"
printf 'hello tierfs\n' >"$work/small"
: >"$work/empty"

expect "usage: no command" 2 "$tierfs"
expect "usage: unknown command" 2 "$tierfs" frobnicate
expect "usage: get without URI" 2 "$tierfs" get
expect "usage: bad option" 2 "$tierfs" ls --no-such-flag "$base"
expect "usage: bad range" 2 "$tierfs" cat --range 9-3 "$base/x"
expect "help exits 0" 0 "$tierfs" --help
for c in ls stat cat get put rm tier version; do
    expect "$c --help" 0 "$tierfs" "$c" --help
    grep -q "usage: tierfs $c" "$out" || bad "$c --help text"
done
expect "version" 0 "$tierfs" version
grep -q '^tierfs [0-9]' "$out" && ok "version text" || bad "version text"

expect "put big" 0 "$tierfs" put "$work/big" "$base/dir/big.bin"
expect "put small to prefix" 0 "$tierfs" put "$work/small" "$base/dir/"
expect "put empty" 0 "$tierfs" put "$work/empty" "$base/dir/empty"
expect "put stdin" 0 sh -c "printf 'from stdin' | '$tierfs' put - '$base/dir/stdin.txt'"

expect "get big" 0 "$tierfs" get -q -j 3 --chunk 1M "$base/dir/big.bin" "$work/big.out"
cmp -s "$work/big" "$work/big.out" && ok "get is byte-exact" || bad "get is byte-exact"
ls "$work" | grep -q tierfs-part && bad "get left a part file" || ok "no part file left"
expect "get to dir" 0 "$tierfs" get -q "$base/dir/small" "$work/"
cmp -s "$work/small" "$work/small" && ok "get to dir" || bad "get to dir"
expect "get empty" 0 "$tierfs" get -q "$base/dir/empty" "$work/empty.out"
[ -f "$work/empty.out" ] && [ ! -s "$work/empty.out" ] && ok "empty object" || bad "empty object"

expect "cat" 0 "$tierfs" cat "$base/dir/small" "$base/dir/stdin.txt"
[ "$(cat "$out")" = "$(printf 'hello tierfs\nfrom stdin')" ] && ok "cat content" || bad "cat content"
expect "cat range A-B" 0 "$tierfs" cat --range 1000-1999 "$base/dir/big.bin"
cmp -s "$out" <(dd if="$work/big" bs=1000 skip=1 count=1 2>/dev/null) && ok "range A-B bytes" || bad "range A-B bytes"
expect "cat range A+N past end" 0 "$tierfs" cat --range 4999990+100 "$base/dir/big.bin"
[ "$(stat -c %s "$out")" = 10 ] && ok "range clipped at end" || bad "range clipped at end"
expect "cat range A-" 0 "$tierfs" cat --range 4000000- "$base/dir/big.bin"
[ "$(stat -c %s "$out")" = 1000000 ] && ok "open range" || bad "open range"

# Into a regular file, the chunk threads write in place (pwrite); into an
# O_APPEND file or a pipe, in order from one thread.  All three byte-exact.
printf 'head:' >"$work/app.out"
expect "get - appends" 0 sh -c "'$tierfs' get -q -j 3 --chunk 1M '$base/dir/big.bin' - >>'$work/app.out'"
cmp -s "$work/app.out" <(printf 'head:'; cat "$work/big") && ok "O_APPEND output" || bad "O_APPEND output"
expect "get - to a pipe" 0 sh -c "'$tierfs' get -q -j 3 --chunk 1M '$base/dir/big.bin' - | cmp -s - '$work/big'"
expect "cat two objects" 0 sh -c "'$tierfs' cat '$base/dir/big.bin' '$base/dir/small' >'$work/two.out'"
cmp -s "$work/two.out" <(cat "$work/big" "$work/small") && ok "second object after the first" || bad "second object after the first"
expect "ls" 0 "$tierfs" ls "$base/dir/"
[ "$(tr '\n' ' ' <"$out")" = "big.bin empty small stdin.txt " ] && ok "ls names" || { cat "$out" >"$err"; bad "ls names"; }
expect "ls parent" 0 "$tierfs" ls "$base"
grep -qx 'dir/' "$out" && ok "ls shows prefix" || bad "ls shows prefix"
expect "ls -l" 0 "$tierfs" ls -l "$base/dir"
grep -q '^ *5000000  ' "$out" && ok "ls -l size" || bad "ls -l size"
expect "ls --json -R" 0 "$tierfs" ls --json -R "$base"
[ "$(grep -c '"key"' "$out")" = 4 ] && ok "ls json count" || bad "ls json count"
expect "stat --json" 0 "$tierfs" stat --json "$base/dir/big.bin"
grep -q '"size": 5000000' "$out" && ok "stat size" || bad "stat size"

expect "missing key fails" 1 "$tierfs" cat "$base/dir/nope"
[ "$(wc -l <"$err")" = 1 ] && grep -q 'No such file' "$err" && ok "one-line error" || bad "one-line error"
expect "rm missing fails" 1 "$tierfs" rm "$base/dir/nope"
expect "rm -f missing ok" 0 "$tierfs" rm -f "$base/dir/nope"
expect "rm one" 0 "$tierfs" rm "$base/dir/small"
expect "stat removed" 1 "$tierfs" stat "$base/dir/small"
expect "rm -r" 0 "$tierfs" rm -r "$base"
expect "nothing left" 0 "$tierfs" ls -R "$base/"
[ ! -s "$out" ] && ok "prefix empty" || bad "prefix empty"
expect "bad store option" 1 "$tierfs" --opt no_such=1 ls "$base/"
grep -q "unknown option 'no_such'" "$err" && ok "option named" || bad "option named"

case "$base" in
s3://*)
    secret=$AWS_SECRET_ACCESS_KEY
    AWS_SECRET_ACCESS_KEY=wrong-$secret expect "bad secret fails" 1 \
        "$tierfs" -v ls "$base/"
    grep -q 'Permission denied' "$err" && ok "403 is EACCES" || bad "403 is EACCES"
    grep -qF -- "$secret" "$out" "$err" && bad "secret printed" || ok "no secret in output"
    expect "verbose run" 0 "$tierfs" -v put "$work/small" "$base/v"
    grep -qF -- "$secret" "$out" "$err" && bad "secret in verbose output" || ok "no secret (verbose)"
    "$tierfs" rm -f "$base/v" >/dev/null 2>&1
    expect "missing bucket" 1 "$tierfs" ls s3://tierfs-no-such-bucket-7/
    grep -qi 'NoSuchBucket\|No such file' "$err" && ok "missing bucket named" || bad "missing bucket named"
    ;;
esac

tap_end
