# shellcheck shell=bash disable=SC2154,SC2086
# bench/lib/faults-rgw.sh: the rows of bench/faults that stop or retune the
# RGW itself, so they run against a cluster of the bench's own
# (scripts/s3-server with S3_DIR=$work/rgw, on free ports, owner
# faults-PID), never the shared one.  Sourced by bench/faults, which gives
# tierfs, work, kills, top, result, ledger, mnt_*, stat_num, now_ms.
#
#   rgw-kill      kill -9 of radosgw while uploads (multipart, capped at
#                 1 MB/s a connection) are in flight, 1-5 s down, then
#                 scripts/s3-server rgw-restart; $kills times, RGW_ROUNDS
#                 (default 10) kills per mount, then sync and the ledger
#   slowdown-rgw  real 503 SlowDown from the RGW: Pacific (16.2) has no
#                 ratelimit, but its request throttler answers 503 SlowDown
#                 past rgw_max_concurrent_requests, set to 2 here
#
# The cluster is stopped at the end of each row and by the EXIT trap.
# (shellcheck: the variables come from bench/faults; rgw_env and ledger
# are split into words on purpose.)

rgw_dir=$work/rgw
rgw_owner=faults-$$
rgw_env=""      # AWS_*=VALUE words of the own cluster (for env)
rgw_url=""
rgw_bucket=""
rgw_saved_wrap=""

rgw_port_free() {   # PORT: no socket of this namespace listens on it
    ! awk -v p=":$(printf '%04X' "$1")" '$4 == "0A" && substr($2, length($2) - 4) == p { f = 1 } END { exit !f }' \
        /proc/net/tcp /proc/net/tcp6 2>/dev/null
}
rgw_free_port() {   # FROM: the first free port from FROM up
    local p=$1
    while ! rgw_port_free "$p"; do p=$((p + 1)); done
    echo "$p"
}

# rgw_up: start the own cluster; the daemon gets its AWS_* via mnt_wrap
rgw_up() {
    local s3p monp
    s3p=$(rgw_free_port $((17400 + $$ % 500)))
    monp=$(rgw_free_port $((26700 + $$ % 500)))
    rgw_saved_wrap=${mnt_wrap:-}
    trap 'rgw_down; cleanup' EXIT
    trap 'exit 130' INT TERM HUP
    S3_DIR=$rgw_dir S3_PORT=$s3p MON_PORT=$monp \
        "$top/scripts/s3-server" start --owner "$rgw_owner" >/dev/null 2>"$work/rgw-start.err" || {
        tail -3 "$work/rgw-start.err" | sed 's/^/    /'
        rgw_down
        return 1
    }
    rgw_env=$(
        # shellcheck disable=SC1091
        . "$rgw_dir/env"
        echo "AWS_ACCESS_KEY_ID=$AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY=$AWS_SECRET_ACCESS_KEY" \
            "AWS_REGION=$AWS_REGION AWS_ENDPOINT_URL=$AWS_ENDPOINT_URL"
    )
    rgw_url=$(sed -n 's/^export AWS_ENDPOINT_URL=//p' "$rgw_dir/env")
    rgw_bucket=$(sed -n 's/^export TFS_TEST_S3_BUCKET=//p' "$rgw_dir/env")
    mnt_wrap="env $rgw_env"
    echo "    own RGW at $rgw_url ($rgw_dir)"
}

rgw_down() {
    [ -d "$rgw_dir" ] && S3_DIR=$rgw_dir "$top/scripts/s3-server" stop --owner "$rgw_owner" >/dev/null 2>&1
    mnt_wrap=$rgw_saved_wrap
    trap cleanup EXIT
    trap - INT TERM HUP
    return 0
}

# rgw_pid: the pid of THIS cluster's radosgw, or nothing
rgw_pid() {
    local pid; pid=$(cat "$rgw_dir/pid/rgw" 2>/dev/null)
    [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = radosgw ] &&
        tr '\0' '\n' <"/proc/$pid/cmdline" | grep -qxF "$rgw_dir/ceph.conf" && echo "$pid"
}

rgw_kill9() {
    local pid; pid=$(rgw_pid)
    [ -n "$pid" ] || { echo "    rgw-kill: no radosgw of $rgw_dir to kill"; return 1; }
    kill -9 "$pid"
    while [ -e "/proc/$pid" ] && [ "$(awk '{ print $3 }' "/proc/$pid/stat" 2>/dev/null)" != Z ]; do sleep 0.01; done
}

# rgw_restart: rgw-restart of the own cluster; sets rgw_restart_ms
rgw_restart() {
    local t0; t0=$(now_ms)
    S3_DIR=$rgw_dir "$top/scripts/s3-server" rgw-restart --owner "$rgw_owner" 2>>"$work/rgw-restart.err"
    local rc=$?
    rgw_restart_ms=$(($(now_ms) - t0))
    return $rc
}

rgw_stat() { local v; v=$(stat_num "$1"); echo "${v:-0}"; }   # NAME: 0 if none

rgw_s3() {   # curl ARGS...: a request signed with the own cluster's keys
    local kid ksec
    kid=$(sed -n 's/^export AWS_ACCESS_KEY_ID=//p' "$rgw_dir/env")
    ksec=$(sed -n 's/^export AWS_SECRET_ACCESS_KEY=//p' "$rgw_dir/env")
    curl -sS --noproxy '*' -m 30 --aws-sigv4 "aws:amz:us-east-1:s3" --user "$kid:$ksec" \
        -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "$@"
}

# rgw_uploads PREFIX: "KEY UPLOADID" of each unfinished multipart upload
# (ListMultipartUploads, first 1000); fails on an answer that is not a
# listing.  curl's sigv4 signs the query as given: it must be encoded
# ("rk%2F"), sorted, and "uploads=", not "uploads".
rgw_uploads() {
    local q; q=$(/usr/bin/python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$1")
    rgw_s3 "$rgw_url/$rgw_bucket?prefix=$q&uploads=" |
        /usr/bin/python3 -c 'import re, sys
x = sys.stdin.read()
if "<ListMultipartUploadsResult" not in x:
    sys.exit("ListMultipartUploads failed: " + (re.findall(r"<Code>(.*?)</Code>", x) or [x[:200]])[0])
for u in re.findall(r"<Upload>(.*?)</Upload>", x):
    print(re.search(r"<Key>(.*?)</Key>", u).group(1), re.search(r"<UploadId>(.*?)</UploadId>", u).group(1))'
}

# ---- kill -9 of the RGW mid-upload, restarted ----
row_rgw-kill() {
    local d=$work/rk rounds=${RGW_ROUNDS:-10} i=0 m=0 r w ms sync_rc sync_ms since
    local closed=0 lost=0 wrong=0 others=0 partial=0 inflight_kills=0 bad_sync=0 dead=0 bad_check=0
    local retries=0 giveups=0 uperr=0 upretry=0 restart="" syncs="" sinces="" left=0 uri
    mkdir -p "$d"
    since=$(now_ms)
    rgw_up || { result rgw-kill "not run: the bench's own RGW cluster did not start"; return; }
    while [ "$i" -lt "$kills" ]; do
        m=$((m + 1))
        : >"$d/ledger$m"
        uri="retry+s3://$rgw_bucket/rk/m$m?timeout_ms=5000&deadline_ms=30000&multipart_threshold=512K&part_size=256K&conn_bw=1M"
        mnt_start "$uri" "$d/mnt" --staging-dir "$d/stg$m" --staging-max 32M --upload-delay 0 \
            --upload-bw 8M || { result rgw-kill "mount $m failed"; break; }
        w=0
        for r in $(seq "$rounds"); do
            [ "$i" -lt "$kills" ] || break
            i=$((i + 1))
            # a writer always running: 1 B-4 MB files, 6 s each
            if [ "$w" = 0 ] || ! kill -0 "$w" 2>/dev/null; then
                [ "$w" = 0 ] || wait "$w"
                $ledger write "$d/mnt" "$d/ledger$m" "m$m-$r" --max-size 4000000 --seconds 6 2>>"$d/w.err" &
                w=$!
            fi
            ms=$((500 + RANDOM % 2000))
            sleep "$(awk -v m="$ms" 'BEGIN { print m / 1000 }')"
            for _ in $(seq 50); do      # up to 5 s more for an upload in flight
                [ "$(stat_num writeback.inflight)" -gt 0 ] 2>/dev/null && break
                sleep 0.1
            done
            [ "$(stat_num writeback.inflight)" -gt 0 ] 2>/dev/null && inflight_kills=$((inflight_kills + 1))
            rgw_kill9 || break 2
            ms=$((1000 + RANDOM % 4000))
            sleep "$(awk -v m="$ms" 'BEGIN { print m / 1000 }')"
            rgw_restart || { echo "    rgw-kill: rgw restart $i failed: $(tail -1 "$work/rgw-restart.err")"; break 2; }
            restart="$restart $rgw_restart_ms"
            since=$(now_ms)
        done
        [ "$w" = 0 ] || wait "$w"
        kill -0 "$mnt_pid" 2>/dev/null || dead=$((dead + 1))
        ms=$(now_ms)
        "$tierfs" sync -q --timeout 300 "$d/mnt"
        sync_rc=$?
        sync_ms=$(($(now_ms) - ms))
        [ "$sync_rc" = 0 ] || { bad_sync=$((bad_sync + 1)); echo "    rgw-kill: mount $m: sync exit $sync_rc after $sync_ms ms"; }
        syncs="$syncs $sync_ms" sinces="$sinces $(($(now_ms) - since))"
        retries=$((retries + $(rgw_stat retry.retries))) giveups=$((giveups + $(rgw_stat retry.giveups)))
        uperr=$((uperr + $(rgw_stat writeback.upload_errors))) upretry=$((upretry + $(rgw_stat writeback.upload_retries)))
        r=$(env $rgw_env $ledger check "s3://$rgw_bucket/rk/m$m" "$d/ledger$m" --all --prefix "m$m-" \
            --max-size 4000000 2>>"$d/check.err")
        echo "    mount $m: $r; sync $sync_ms ms"
        case $r in
        ledger:*) ;;
        *) bad_check=$((bad_check + 1)); r="ledger: 0 closed, 0 lost, 0 wrong, 0 unledgered objects, 0 partial" ;;
        esac
        set -- $r   # ledger: N closed, L lost, W wrong, O unledgered objects, P partial
        closed=$((closed + $2)) lost=$((lost + $4)) wrong=$((wrong + $6)) others=$((others + $8)) partial=$((partial + ${11}))
        mnt_stop
        # the objects go (memstore keeps them in RAM); unfinished uploads stay
        env $rgw_env "$tierfs" rm -r -f "s3://$rgw_bucket/rk/m$m/" >/dev/null 2>&1
    done
    if rgw_uploads "rk/" >"$d/uploads" 2>"$d/uploads.err"; then
        left=$(grep -c . "$d/uploads")
    else
        left="unknown ($(cat "$d/uploads.err"))"
    fi
    head -10 "$d/uploads" | sed 's/^/    unfinished multipart upload: /'
    grep -E "^(lost|wrong|partial):" "$d/check.err" | head -10 | sed 's/^/    /'
    rgw_down
    result rgw-kill "$i kill -9 of the bench's own radosgw ($m mounts, up to $rounds kills each; retry+s3, timeout_ms=5000, deadline_ms=30000, multipart over 512K in 256K parts, conn_bw=1M, --upload-bw 8M, --staging-max 32M; writer of 1 B-4 MB files; kill 0.5-2.5 s in, with an upload in flight at $inflight_kills of $i kills; 1-5 s down; scripts/s3-server rgw-restart): $closed files closed, $lost lost, $wrong wrong, $others unledgered objects, $partial partial; syncs failed $bad_sync of $m, checks that did not run $bad_check, daemons dead $dead; retries (retry.retries) $retries, giveups $giveups, upload_errors $uperr, upload_retries $upretry; sync ms median $(echo "$syncs" | median_of), max $(echo "$syncs" | max_of); last restart to sync done ms median $(echo "$sinces" | median_of), max $(echo "$sinces" | max_of); rgw restart ms median $(echo "$restart" | median_of), max $(echo "$restart" | max_of); unfinished multipart uploads left on the server: $left"
}

# ---- 503 SlowDown from the real server ----
row_slowdown-rgw() {
    local d=$work/sr t0 rc ms probe r left i pids=()
    mkdir -p "$d"
    rgw_up || { result slowdown-rgw "not run: the bench's own RGW cluster did not start"; return; }
    ceph -c "$rgw_dir/ceph.conf" config set client.rgw.a rgw_max_concurrent_requests 2 2>>"$d/ceph.err"
    rgw_restart
    # the server's side: 8 PUTs at once (1 MB/s each, so they overlap)
    head -c 1000000 /dev/urandom >"$d/blob"
    for i in $(seq 8); do
        rgw_s3 --limit-rate 1M -T "$d/blob" -o "$d/p$i" -w "%{http_code}\n" "$rgw_url/$rgw_bucket/probe/$i" >"$d/c$i" &
        pids+=($!)
    done
    # these eight only: a bare wait also waits for the relay an earlier
    # row left running (its -t 7200), which held this row for 7 minutes
    wait "${pids[@]}"
    probe=$(cat "$d"/c* | grep -c '^503')
    probe="$probe of 8 concurrent PUTs got 503 ($(grep -ho '<Code>[A-Za-z]*' "$d"/p* | sort -u | sed 's/<Code>//' | tr '\n' ' ')codes)"
    : >"$d/ledger"
    mnt_start "retry+s3://$rgw_bucket/sr?timeout_ms=5000&deadline_ms=60000&retries=12&multipart_threshold=256K&part_size=128K" \
        "$d/mnt" --staging-dir "$d/stg" --upload-delay 0 || { rgw_down; result slowdown-rgw "mount failed"; return; }
    $ledger write "$d/mnt" "$d/ledger" sr --count 40 --max-size 1000000 2>/dev/null
    t0=$(now_ms)
    "$tierfs" sync -q --timeout 300 "$d/mnt"
    rc=$? ms=$(($(now_ms) - t0))
    local retries uperr giveups
    retries=$(rgw_stat retry.retries) giveups=$(rgw_stat retry.giveups) uperr=$(rgw_stat writeback.upload_errors)
    mnt_stop
    # the check reads without the limit
    ceph -c "$rgw_dir/ceph.conf" config rm client.rgw.a rgw_max_concurrent_requests 2>>"$d/ceph.err"
    rgw_restart
    r=$(env $rgw_env $ledger check "s3://$rgw_bucket/sr" "$d/ledger" --all --prefix sr- --max-size 1000000 2>/dev/null)
    if left=$(rgw_uploads "sr/" 2>"$d/uploads.err"); then
        left=$(printf '%s' "$left" | grep -c .)
    else
        left="unknown ($(cat "$d/uploads.err"))"
    fi
    rgw_down
    result slowdown-rgw "the bench's own RGW (16.2) with rgw_max_concurrent_requests=2: $probe; 40 files (1 B-1 MB, multipart over 256K in 128K parts, 4 upload jobs x 4 part threads) through retry+s3 (retries=12, deadline_ms=60000): sync exit $rc after $ms ms, retries $retries, giveups $giveups, upload_errors $uperr; $r; unfinished multipart uploads left: $left"
}
