#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Mounting from a listing manifest (docs/fuse.md "Manifests"), with the
# real binary:
#
#   made      `tierfs manifest URI` lists every object: header, one line
#             each, end line with the count
#   read      a mount with --manifest shows the same tree (find), sizes,
#             and every file reads back byte for byte
#   no-list   the daemon's store counters: no LIST, no HEAD; over S3 also
#             the RGW's own access log: no LIST request for the prefix
#             from mount to unmount
#   refused   bad manifests (a negative size, a duplicate key, a key
#             outside the URI, another URI's manifest, one cut short):
#             the mount exits 1 with one line naming the file and line,
#             and nothing is mounted
#
# usage: manifest.sh TIERFS_BINARY URI
#   URI: a directory (made here, removed after) or s3://bucket/prefix
#   (filled with `tierfs put`, removed after; needs scripts/with-s3)
set -u
T=$1
URI=$2
W=$(mktemp -d /tmp/tierfs-manifest-XXXXXX)
# shellcheck source=tap.sh
. "$(dirname "$0")/tap.sh"
pid=
N=300

cleanup() {
    if [ -n "$pid" ]; then
        fusermount3 -u "$W/mnt" 2>/dev/null || true
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    case $URI in s3://*) "$T" rm -r "$URI/" >/dev/null 2>&1 || true ;; esac
    rm -rf "$W"
}
trap cleanup EXIT

# The tree: N files in 12 directories two deep, sizes 0..~70 KiB.
mkdir -p "$W/src" "$W/mnt" "$W/cache"
for i in $(seq 0 $((N - 1))); do
    d="$W/src/d$((i % 4))/e$((i % 3))"
    mkdir -p "$d"
    head -c $(((i * 7919) % 70000)) /dev/urandom >"$d/f$i.bin"
done
case $URI in
s3://*)
    URI=$URI/$$
    (cd "$W/src" && find . -type f | sed 's|^\./||') | while read -r k; do
        "$T" put "$W/src/$k" "$URI/$k" >/dev/null 2>&1 || exit 1
    done || { echo "FAIL: tierfs put"; exit 1; }
    ;;
*)
    URI=$W/src
    ;;
esac

# mount MANIFEST [LOG]: in the foreground, in the background; 0 once up
mount_it() {
    "$T" mount -f --cache-dir "$W/cache" --manifest "$1" "$URI" "$W/mnt" \
        >"${2:-$W/log}" 2>&1 &
    pid=$!
    for _ in $(seq 100); do
        mountpoint -q "$W/mnt" && return 0
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    wait "$pid" 2>/dev/null
    pid=
    return 1
}

umount_it() {
    "$T" umount "$W/mnt" >/dev/null 2>&1 || fusermount3 -u "$W/mnt"
    wait "$pid" 2>/dev/null
    pid=
}

"$T" manifest "$URI" >"$W/m.jsonl" 2>"$W/err"
tap_detail=$W/err
check made "[ \$(wc -l <'$W/m.jsonl') = $((N + 2)) ] &&
    head -1 '$W/m.jsonl' | grep -q '\"tierfs_manifest\": 1' &&
    tail -1 '$W/m.jsonl' | grep -q '\"objects\": $N}'"

rgwlog=${S3_DIR:-/tmp/tierfs-s3}/log/client.rgw.a.log
prefix=$(printf %s "${URI#s3://*/}/" | sed 's|/|%2F|g')
lists_before=0
[ ! -r "$rgwlog" ] || lists_before=$(grep -c "list-type=2.*prefix=$prefix" "$rgwlog")

tap_detail=$W/log
if mount_it "$W/m.jsonl"; then
    (cd "$W/src" && find . | sort) >"$W/want.find"
    (cd "$W/mnt" && find . | sort) >"$W/got.find"
    check_cmd read-tree cmp -s "$W/want.find" "$W/got.find"
    bad_files=0
    while read -r k; do
        cmp -s "$W/src/$k" "$W/mnt/$k" || bad_files=$((bad_files + 1))
    done < <(cd "$W/src" && find . -type f | sed 's|^\./||')
    check read-bytes "[ $bad_files = 0 ]"
    check read-size "[ \$(stat -c %s '$W/mnt/d1/e1/f1.bin') = 7919 ]"
    "$T" stats --json "$W/mnt" >"$W/stats.json"
    check no-list-daemon "python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))[\"store\"]; sys.exit(0 if s[\"lists\"] == 0 and s[\"stats\"] == 0 and s[\"reads\"] >= $((N - 1)) else 1)' '$W/stats.json'"
    umount_it
else
    bad read "the mount did not come up"
fi
case $URI in
s3://*)
    sleep 1                             # the RGW writes its log lines late
    lists_after=$(grep -c "list-type=2.*prefix=$prefix" "$rgwlog")
    gets=$(grep -c "GET /[^ ?]*/${URI#s3://*/}/d" "$rgwlog")
    check no-list-rgw "[ $lists_after = $lists_before ] && [ $gets -ge $((N - 1)) ]"
    ;;
esac

# refused NAME WANT SED-EXPR [URI]: the manifest edited by SED-EXPR
# refuses the mount with one line naming the file and WANT
refused() {
    local f=$W/bad-$1.jsonl
    sed "$3" "$W/m.jsonl" >"$f"
    tap_detail=$W/log.$1
    if mount_it "$f" "$W/log.$1"; then
        umount_it
        bad "refused-$1" "it mounted"
    elif [ "$(wc -l <"$W/log.$1")" = 1 ] && grep -q "$f line $2" "$W/log.$1" &&
        ! mountpoint -q "$W/mnt"; then
        ok "refused-$1"
    else
        bad "refused-$1"
    fi
}
refused negative "3: size is negative" '3s/"size": [0-9]*/"size": -1/'
refused duplicate "6: duplicate key .* (also on line 5)" '5{p;}'
refused outside "4: key '../x' is outside" '4s/"key": "[^"]*"/"key": "..\/x"/'
refused absolute "4: key '/etc/passwd' is absolute" '4s/"key": "[^"]*"/"key": "\/etc\/passwd"/'
refused other-uri "1: a manifest of" '1s/"identity": "[^"]*"/"identity": "file:\/\/\/elsewhere"/'
refused bad-json "6: JSON" '6s/}$//'
f=$W/cut.jsonl
head -n 20 "$W/m.jsonl" >"$f"
tap_detail=$W/log.cut
if mount_it "$f" "$W/log.cut"; then
    umount_it
    bad refused-cut "it mounted"
else
    check refused-cut "grep -q 'cut short: no end line after 19 objects' '$W/log.cut'"
fi
tap_end manifest
