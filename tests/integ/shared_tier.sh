#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The shared cache tier against a second bucket of the real S3 server
# (issue 16 item 2; src/tier/shared.c, src/tier/gc.c, docs/group.md):
#
#   fill      mount A (--shared-tier s3://SECOND/RUN, its own cache dir)
#             reads the whole dataset from the capacity bucket, every
#             byte checked; at unmount the tier holds one object a block
#   cold      mount B, a fresh cache dir, same tier: every byte right,
#             every block from the tier, 0 GETs of the capacity store
#   corrupt   one tier object replaced (tierfs put) by a copy with one
#             byte flipped; mount C, fresh: every byte right, corrupt 1,
#             that one block read from the store, and the copy healed
#   gc        mount D reads half the files; `tierfs tier gc --max-size`
#             half the tier's bytes removes exactly the blocks D did not
#             read (their last access is older), and the access logs no
#             block left needs; mount E then reads D's half all from the
#             tier and the other half from the store
#
#   shared_tier.sh TIERFS      (under scripts/with-s3; needs FUSE)
# Settings: TIER_FILES (8), TIER_FILE_MIB (4), TIER_BS (1M).
set -u
tierfs=$(realpath "$1")
: "${AWS_ENDPOINT_URL:?run under scripts/with-s3}" "${TFS_TEST_S3_BUCKET:?}"
# shellcheck source=tests/integ/tap.sh
. "$(dirname "$0")/tap.sh"
t_start=$(date +%s.%N)
files=${TIER_FILES:-8}
file_mib=${TIER_FILE_MIB:-4}
bs=${TIER_BS:-1M}
bs_bytes=$(numfmt --from=iec "$bs")
hdr=48                                  # TFS_SHARED_HDR
per_file=$((file_mib * 1048576 / bs_bytes))
nblk=$((files * per_file))
tbucket=${TFS_TEST_S3_BUCKET}-tier      # the second bucket

# What a run killed -9 left: its mounts unmounted, its objects removed.
for d in /tmp/tfs-shtier-??????; do
    [ -f "$d/owner" ] && ! kill -0 "$(cat "$d/owner")" 2>/dev/null || continue
    grep -q " $d/mnt fuse" /proc/mounts && fusermount3 -u -z "$d/mnt" 2>/dev/null
    o=$(cat "$d/owner")
    "$tierfs" rm -r -f "s3://$TFS_TEST_S3_BUCKET/shtier-$o/" >/dev/null 2>&1
    "$tierfs" rm -r -f "s3://$tbucket/shtier-$o/" >/dev/null 2>&1
    rm -rf "$d"
done
work=$(mktemp -d /tmp/tfs-shtier-XXXXXX)
echo $$ >"$work/owner"
run=shtier-$$
uri=s3://$TFS_TEST_S3_BUCKET/$run
tier=s3://$tbucket/$run
mnt=$work/mnt
pid=
tap_detail=$work/log

cleanup() {
    if [ -n "$pid" ]; then
        fusermount3 -u "$mnt" 2>/dev/null || fusermount3 -u -z "$mnt" 2>/dev/null
        kill "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    fi
    "$tierfs" rm -r -f "$uri/" >/dev/null 2>&1
    "$tierfs" rm -r -f "$tier/" >/dev/null 2>&1
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

die() { bad "$1"; tap_end shared_tier; exit 1; }

# The second bucket, made as scripts/s3-server makes the first (200, or
# 409 when it is there already); the keys in a 0600 curl config, never on
# a command line.
make_bucket() {
    local code
    (umask 077; printf 'user = "%s:%s"\n' "$AWS_ACCESS_KEY_ID" \
        "$AWS_SECRET_ACCESS_KEY" >"$work/curl.cfg")
    # A fresh cluster's first bucket after the RGW's own makes pools
    # placement needs: seconds, on one OSD.  So a minute, and again on a
    # time-out or a 5xx.
    local try
    for try in 1 2 3; do
        code=$(curl -s --noproxy '*' -m 60 -K "$work/curl.cfg" \
            -o "$work/bucket.out" -w '%{http_code}' \
            --aws-sigv4 "aws:amz:${AWS_REGION:-us-east-1}:s3" \
            -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" \
            -X PUT "$AWS_ENDPOINT_URL/$tbucket" </dev/null)
        case $code in 200 | 409) break ;; 000 | 5??) sleep 1 ;; *) break ;; esac
    done
    rm -f "$work/curl.cfg"
    [ "$code" = 200 ] || [ "$code" = 409 ] || {
        echo "# creating $tbucket: HTTP ${code:-none} after $try tries"
        cat "$work/bucket.out" 2>/dev/null >"$work/log"
        return 1
    }
}

# ---- the dataset: FILES files of FILE_MIB MiB, whole blocks ----
make_data() {
    local i p=()
    mkdir -p "$work/data"
    for i in $(seq "$files"); do
        head -c $((file_mib * 1048576)) /dev/urandom >"$work/data/f$i.bin"
    done
    (cd "$work/data" && sha256sum -- *.bin >"$work/manifest")
    for i in $(seq "$files"); do
        "$tierfs" put -q "$work/data/f$i.bin" "$uri/f$i.bin" 2>>"$work/log" &
        p+=($!)
    done
    wait "${p[@]}"
    [ "$("$tierfs" ls "$uri/" 2>/dev/null | grep -c '\.bin$')" = "$files" ]
}

# ---- one mount at a time, each with a fresh cache dir ----
mount_tier() {  # mount_tier NAME
    local i=0
    mkdir -p "$mnt" "$work/cache-$1"
    "$tierfs" mount -f --read-only --cache-dir "$work/cache-$1" \
        --block-size "$bs" --meta-ttl 600 --shared-tier "$tier" \
        "$uri" "$mnt" >"$work/log" 2>&1 &
    pid=$!
    while ! mountpoint -q "$mnt"; do
        i=$((i + 1))
        { [ $i -lt 200 ] && kill -0 "$pid" 2>/dev/null; } || return 1
        sleep 0.05
    done
}
umount_tier() {  # the daemon writes the tier's queue and log, then exits
    "$tierfs" umount "$mnt" >>"$work/log" 2>&1 || return 1
    wait "$pid"
    local rc=$?
    pid=
    return $rc
}
read_check() {  # read_check [FILE...]: those (default all) byte for byte
    if [ $# -eq 0 ]; then
        (cd "$mnt" && sha256sum --quiet -c "$work/manifest") >>"$work/log" 2>&1
    else
        (cd "$mnt" && awk -v l="$*" 'BEGIN { n = split(l, a, " ")
                for (i = 1; i <= n; i++) w[a[i]] = 1 } ($2 in w)' \
            "$work/manifest" | sha256sum --quiet -c -) >>"$work/log" 2>&1
    fi
}
stats() { "$tierfs" stats --json "$mnt" >"$work/stats.json"; }
st() {  # st KEY or st shared.KEY, from the last stats
    /usr/bin/python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
for k in sys.argv[2].split("."):
    d = d[k]
print(d)' "$work/stats.json" "$1"
}
tier_ls() { "$tierfs" tier ls --json "$tier" >"$work/tier.json" 2>>"$work/log"; }
tj() { /usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }

echo "# dataset: $files files of $file_mib MiB, $nblk blocks of $bs; tier $tier"
check_cmd "second bucket $tbucket" make_bucket || die "no second bucket"
check_cmd "dataset in $uri" make_data || die "no dataset"

# ---- fill ----
mount_tier A || die "mount A"
check_cmd "A: every byte right" read_check
stats
check "A: every block missed the tier and was read from the store" \
    "[ $(st shared.misses) = $nblk ] && [ $(st backend_get_count) = $nblk ]"
check_cmd "A: unmounted (the tier's queue written)" umount_tier
tier_ls
n_obj=$(tj "$work/tier.json" objects)
n_bytes=$(tj "$work/tier.json" bytes)
echo "# tier after A: $n_obj objects, $n_bytes bytes"
check "tier: one object a block ($nblk), header + block each" \
    "[ $n_obj = $nblk ] && [ $n_bytes = $((nblk * (bs_bytes + hdr))) ]"
check "tierfs ls: $nblk objects under v1/" \
    "[ \$(\"$tierfs\" ls -R \"$tier/v1/\" | grep -c .) = $nblk ]"

# ---- cold ----
mount_tier B || die "mount B"
check_cmd "B: every byte right" read_check
stats
b_hits=$(st shared.hits)
b_gets=$(st backend_get_count)
echo "# cold node B: $b_hits of $nblk blocks from the tier, $b_gets GETs of the store, shared_blocks $(st shared_blocks)"
check "B: every block from the tier, 0 GETs of the capacity store" \
    "[ $b_hits = $nblk ] && [ $(st shared.misses) = 0 ] && [ $b_gets = 0 ]"
check_cmd "B: unmounted" umount_tier
tier_ls
check "B's access log written (1 log)" "[ $(tj "$work/tier.json" logs) = 1 ]"

# ---- corrupt ----
victim=$("$tierfs" ls -R "$tier/v1/" | head -1)
victim=${victim##*/}
vkey=v1/${victim:0:2}/$victim
corrupt_one() {
    "$tierfs" get -q "$tier/$vkey" "$work/orig.obj" &&
        cp "$work/orig.obj" "$work/bad.obj" &&
        printf '\x5a' | dd of="$work/bad.obj" bs=1 seek=$((hdr + 1000)) \
            conv=notrunc status=none &&
        ! cmp -s "$work/orig.obj" "$work/bad.obj" &&
        "$tierfs" put -q "$work/bad.obj" "$tier/$vkey"
}
check_cmd "one tier object replaced by a corrupted copy ($vkey)" corrupt_one
mount_tier C || die "mount C"
check_cmd "C: every byte right" read_check
stats
echo "# node C: corrupt $(st shared.corrupt), hits $(st shared.hits), GETs of the store $(st backend_get_count)"
check "C: shared.corrupt == 1, that block read from the store once" \
    "[ $(st shared.corrupt) = 1 ] && [ $(st backend_get_count) = 1 ] && [ $(st shared.hits) = $((nblk - 1)) ]"
check_cmd "C: unmounted" umount_tier
healed() {
    "$tierfs" get -q "$tier/$vkey" "$work/healed.obj" &&
        cmp -s "$work/orig.obj" "$work/healed.obj"
}
check_cmd "the corrupted copy healed (written again, as it was)" healed

# ---- gc ----
half=()
for i in $(seq $((files / 2))); do half+=("f$i.bin"); done
sleep 1.2                               # LastModified has whole seconds
mount_tier D || die "mount D"
check_cmd "D: the first half of the files right" read_check "${half[@]}"
check_cmd "D: unmounted" umount_tier
tier_ls
logs_before=$(tj "$work/tier.json" logs)
max=$((n_bytes / 2))
"$tierfs" tier gc --max-size "$max" --dry-run "$tier" >"$work/dry.out" 2>>"$work/log"
check "gc --dry-run: names $((nblk / 2)) blocks, removes none" \
    "[ \$(grep -c '^would remove v1/' \"$work/dry.out\") = $((nblk / 2)) ] && tier_ls && [ \$(tj \"$work/tier.json\" objects) = $nblk ]"
"$tierfs" tier gc --max-size "$max" --json "$tier" >"$work/gc.json" 2>>"$work/log"
gc_rc=$?
tier_ls
left=$(tj "$work/tier.json" objects)
left_bytes=$(tj "$work/tier.json" bytes)
echo "# gc --max-size $max: removed $(tj "$work/gc.json" removed) objects ($(tj "$work/gc.json" removed_bytes) bytes) and $(tj "$work/gc.json" logs_removed) of $logs_before access logs; left $left objects, $left_bytes bytes, $(tj "$work/tier.json" logs) logs"
check "gc: exit 0, half the blocks left ($((nblk / 2))), at most $max bytes" \
    "[ $gc_rc = 0 ] && [ $left = $((nblk / 2)) ] && [ $left_bytes -le $max ]"
check "gc: the access logs older than the oldest block left removed (D's kept)" \
    "[ $(tj "$work/gc.json" logs_removed) = $((logs_before - 1)) ] && [ $(tj "$work/tier.json" logs) = 1 ]"
mount_tier E || die "mount E"
check_cmd "E: D's half right" read_check "${half[@]}"
stats
e_hits=$(st shared.hits)
e_gets=$(st backend_get_count)
check "E: D's half all from the tier (what gc kept was what D read)" \
    "[ $e_hits = $((nblk / 2)) ] && [ $e_gets = 0 ]"
check_cmd "E: every byte right" read_check
stats
check "E: the other half from the store (gc removed it)" \
    "[ $(st shared.hits) = $((nblk / 2)) ] && [ $(st backend_get_count) = $((nblk / 2)) ]"
check_cmd "E: unmounted" umount_tier
missing_bucket() {
    local rc
    "$tierfs" tier gc --max-size 0 "s3://${tbucket}-missing/x" 2>"$work/err"
    rc=$?
    cat "$work/err" >"$work/log"
    [ $rc = 1 ] && [ "$(wc -l <"$work/err")" = 1 ] &&
        grep -q "s3://${tbucket}-missing/x" "$work/err"
}
check_cmd "tier gc on a missing bucket: one line naming the URI, exit 1" \
    missing_bucket
echo "# run time: $(awk -v a="$t_start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"
tap_end shared_tier
