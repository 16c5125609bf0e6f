# shellcheck shell=bash
# bench/faults' disk rows, sourced by bench/faults (docs/reliability.md):
#
#   power-loss  staging and cache dirs on bench/tools/lazyfs (a FUSE layer
#               that keeps writes in memory until fsync; SIGUSR1 drops the
#               un-fsynced ones, LazyFS's model: data is lost, metadata is
#               not); SIGUSR1, kill -9 of daemon and writer at one instant
#               mid-write (after 8 MiB read through the cache), remount on
#               the same staging dir, sync, ledger check against the store
#               and through the mount, the 8 MiB read again.  With
#               --upload-delay 5 (files are staged when the power goes)
#               and 0.
#   cache-eio   the cache dir on lazyfs -e FLAG: 20 x 1 MiB cached on disk,
#               the RAM tier dropped, FLAG created (every read of a cache
#               file answers EIO; then reads and writes: -E all),
#               everything read again, with and without FLAG.
#
# bench/faults provides: tierfs, bin, work, kills, ledger, result, jget,
# mnt_start/mnt_kill9/mnt_stop, stat_num, is_mounted, now_ms, median_of,
# max_of.  lazyfs is $bin/lazyfs; each row unmounts what it mounted.

lazy_pid=0
lazy_mnt=""

# lazy_trap / lazy_untrap: bench/faults' EXIT trap knows nothing of a
# lazyfs mount; while a row runs, the trap unmounts it (after the daemon
# above it) before doing what it did
lazy_trap() {
    lazy_prev_trap=$(trap -p EXIT)
    eval "set -- $lazy_prev_trap"
    # shellcheck disable=SC2064
    trap "mnt_kill9; lazy_down_now; ${3:-}" EXIT
}
lazy_untrap() { eval "${lazy_prev_trap:-trap - EXIT}"; }
lazy_down_now() {
    [ -z "$lazy_mnt" ] || fusermount3 -u -z "$lazy_mnt" 2>/dev/null
    [ "$lazy_pid" = 0 ] || kill "$lazy_pid" 2>/dev/null
}

# lazy_up UNDER MNT LOG ARGS...: lazyfs ARGS UNDER MNT in the background,
# mounted (5 s at most); sets lazy_pid
lazy_up() {
    local under=$1 mnt=$2 log=$3 i
    shift 3
    mkdir -p "$under" "$mnt"
    "$bin/lazyfs" -t 7200 "$@" "$under" "$mnt" 2>>"$log" &
    lazy_pid=$!
    lazy_mnt=$mnt
    for i in $(seq 100); do
        is_mounted "$mnt" && return 0
        kill -0 "$lazy_pid" 2>/dev/null || break
        sleep 0.05
    done
    echo "    lazyfs did not mount: $(tail -1 "$log")"
    return 1
}

# lazy_down MNT: unmount it and wait for lazyfs (10 s at most)
lazy_down() {
    [ "$lazy_pid" != 0 ] || return 0
    fuse_stop "$lazy_pid" "$1" 100 -TERM
    lazy_pid=0
    lazy_mnt=""
}

# ---- power loss of the staging and cache disks ----
# One row line per upload delay; $kills runs each.
power_loss_run() {   # UPLOAD_DELAY
    local delay=$1 d=$work/pl$1 i ms r
    local closed=0 lost=0 wrong=0 partial=0 others=0 mwrong=0 bad_mount=0
    local bad_sync=0 restart="" dbytes=0 dfiles=0 staged=0 line rok=0 rbad=0 corrupt=0
    rm -rf "$d"
    mkdir -p "$d/store"
    $ledger gen "$d/store" 8 1048576   # read through the cache each run
    local args=(--staging-dir "$d/disk/stg" --cache-dir "$d/disk/cache"
                --cache-size 256M --mem-cache 16M --upload-delay "$delay")
    for i in $(seq "$kills"); do
        : >"$d/ledger"
        lazy_up "$d/under" "$d/disk" "$d/lazy.log" || { bad_mount=$((bad_mount + 1)); continue; }
        mnt_start "file://$d/store" "$d/mnt" "${args[@]}" ||
            { bad_mount=$((bad_mount + 1)); lazy_down "$d/disk"; continue; }
        $ledger write "$d/mnt" "$d/ledger" "p$i" --max-size 600000 2>/dev/null &
        local w=$!
        # cache blocks written (not fsynced: a cache needs not) by then
        $ledger read "$d/mnt" 8 --threads 2 >/dev/null 2>&1
        ms=$((200 + RANDOM % 2000))   # from the end of the read
        sleep "$(awk -v m="$ms" 'BEGIN { print m / 1000 }')"
        staged=$((staged + $(stat_num writeback.staged_files || echo 0)))
        # the power goes: the disk, the daemon and the writer at the same
        # instant (a writer left alive would go on into the plain dir that
        # the cleared mount leaves; the ledger, on another disk, keeps
        # what its close()s returned)
        kill -USR1 "$lazy_pid"
        kill -9 "$mnt_pid" "$w" 2>/dev/null
        wait "$w" 2>/dev/null
        mnt_kill9
        lazy_down "$d/disk"
        line=$(grep "power loss" "$d/lazy.log" | tail -1)
        dbytes=$((dbytes + $(echo "$line" | sed -n 's/.*dropped \([0-9]*\) bytes.*/\1/p')))
        dfiles=$((dfiles + $(echo "$line" | sed -n 's/.* in \([0-9]*\) files.*/\1/p')))
        # the power comes back
        lazy_up "$d/under" "$d/disk" "$d/lazy.log" || { bad_mount=$((bad_mount + 1)); continue; }
        if ! mnt_start "file://$d/store" "$d/mnt" "${args[@]}"; then
            bad_mount=$((bad_mount + 1))
            echo "    power-loss run $i (delay $delay): remount failed"
            lazy_down "$d/disk"
            continue
        fi
        restart="$restart $mnt_up_ms"
        timeout 150 "$tierfs" sync -q --timeout 120 "$d/mnt" || bad_sync=$((bad_sync + 1))
        r=$($ledger check "$d/store" "$d/ledger" --all --prefix "p$i-" --max-size 600000 2>>"$d/check.err")
        set -- $r   # ledger: N closed, L lost, W wrong, O unledgered objects, P partial
        closed=$((closed + $2)) lost=$((lost + $4)) wrong=$((wrong + $6))
        others=$((others + $8)) partial=$((partial + ${11}))
        [ "$4$6${11}" = 000 ] || echo "    power-loss run $i (delay $delay, ${ms} ms): $r"
        # and through the mount (cache dir and staging as the loss left them)
        r=$(timeout 120 $ledger check "$d/mnt" "$d/ledger" 2>/dev/null)
        set -- $r
        mwrong=$((mwrong + ${4:-1} + ${6:-0}))
        timeout 120 $ledger read "$d/mnt" 8 --threads 2 --json "$d/r.json" >/dev/null 2>&1
        rok=$((rok + $(jget "$d/r.json" ok || echo 0)))
        rbad=$((rbad + $(jget "$d/r.json" wrong || echo 8)))
        corrupt=$((corrupt + $(stat_num corrupt_blocks || echo 0)))
        mnt_stop
        lazy_down "$d/disk"
    done
    result power-loss "$kills runs, --upload-delay $delay, staging+cache dirs on lazyfs (un-fsynced writes dropped), posix store; SIGUSR1 to lazyfs + kill -9 of the daemon and the writer 0.2-2.2 s into it (a writer of 1 B-600 KB files): $closed files closed, $lost lost, $wrong wrong, $partial partial ($others unledgered objects); $mwrong lost or wrong read back through the remount; 8 x 1 MiB store files read through the cache dir before each loss, again after each remount: $rok ok, $rbad wrong (corrupt_blocks $corrupt); remount failures $bad_mount, sync failures $bad_sync; restart ms median $(echo "$restart" | median_of), max $(echo "$restart" | max_of); staged files at the loss (sum) $staged; lazyfs dropped $dbytes un-fsynced bytes in $dfiles files (sum)"
}
row_power-loss() {
    lazy_trap
    power_loss_run 5
    power_loss_run 0
    lazy_untrap
}

# ---- EIO from the cache disk ----
cache_eio_run() {   # KIND: lazyfs -E read|all
    local kind=$1 d=$work/ce$1 eio logged disk
    rm -rf "$d"
    mkdir -p "$d/store"
    $ledger gen "$d/store" 30 1048576
    lazy_up "$d/under" "$d/disk" "$d/lazy.log" -e "$d/flag" -E "$kind" ||
        { result cache-eio "lazyfs did not mount"; return; }
    local args=(--cache-dir "$d/disk/cache" --mem-cache 4M --staging-dir "$d/stg")
    mnt_start "file://$d/store" "$d/mnt" "${args[@]}" ||
        { result cache-eio "mount failed"; lazy_down "$d/disk"; return; }
    $ledger read "$d/mnt" 20 >/dev/null 2>&1
    sleep 1                             # the disk writer drains
    mnt_stop                            # the RAM tier goes
    mnt_start "file://$d/store" "$d/mnt" "${args[@]}" ||
        { result cache-eio "remount failed"; lazy_down "$d/disk"; return; }
    disk=$(stat_num cache_bytes_disk)
    touch "$d/flag"
    sleep 0.1
    timeout 300 $ledger read "$d/mnt" 30 --json "$d/b.json" >/dev/null 2>&1
    sleep 1                             # the disk writer tries
    local hits; hits=$(stat_num hit_bytes_disk)
    local gets; gets=$(stat_num backend_get_count)
    local ferr; ferr=$(stat_num fuse.errors)
    local dropped; dropped=$(stat_num disk_write_dropped)
    rm -f "$d/flag"
    sleep 0.1
    timeout 300 $ledger read "$d/mnt" 30 --json "$d/c.json" >/dev/null 2>&1
    logged=$(grep -c "disk tier read of .* failed" "$d/mnt.log")
    local wlogged; wlogged=$(grep -c "cannot write a block of" "$d/mnt.log")
    mnt_stop
    lazy_down "$d/disk"
    eio=$(sed -n 's/.*; \([0-9]*\) EIO injected.*/\1/p' "$d/lazy.log" | tail -1)
    result cache-eio "cache dir on lazyfs -E $kind, 20 of 30 x 1 MiB on the disk tier (cache_bytes_disk $disk), RAM tier dropped (remount, --mem-cache 4M), every cache-file ${kind/all/read and write} answering EIO, all 30 read: $(jget "$d/b.json" ok)/30 ok, $(jget "$d/b.json" wrong) wrong, errors $(jget "$d/b.json" errors); lazyfs injected ${eio:-0} EIO; hit_bytes_disk $hits, backend_get_count $gets, fuse errors $ferr, disk_write_dropped $dropped; daemon log: $logged 'disk tier read ... failed ...; reading from the store' lines (e.g. \"$(grep -m1 "disk tier read of" "$d/mnt.log" | cut -c1-160)\"), $wlogged 'cannot write a block of ...' lines; flag removed, read again: $(jget "$d/c.json" ok)/30 ok, $(jget "$d/c.json" wrong) wrong"
}
# The cache disk already failing (-E all) when the mount starts: the
# mount runs without its disk tier (F10), reads come from the store.
cache_eio_at_mount() {
    local d=$work/cem
    rm -rf "$d"
    mkdir -p "$d/store"
    $ledger gen "$d/store" 10 1048576
    lazy_up "$d/under" "$d/disk" "$d/lazy.log" -e "$d/flag" -E all ||
        { result cache-eio "lazyfs did not mount"; return; }
    mkdir -p "$d/disk/cache"
    touch "$d/flag"
    if mnt_start "file://$d/store" "$d/mnt" --cache-dir "$d/disk/cache" --staging-dir "$d/stg"; then
        timeout 120 $ledger read "$d/mnt" 10 --json "$d/a.json" >/dev/null 2>&1
        result cache-eio "cache disk answering EIO to everything when the mount starts: the mount started, disk_tier \"$(stat_num disk_tier)\"; 10 x 1 MiB read: $(jget "$d/a.json" ok)/10 ok, $(jget "$d/a.json" wrong) wrong; log: \"$(grep -m1 'running without the disk tier' "$d/mnt.log" | cut -c1-200)\""
        mnt_stop
    else
        result cache-eio "cache disk answering EIO when the mount starts: the mount refused to start: $(tail -1 "$d/mnt.log")"
    fi
    rm -f "$d/flag"
    lazy_down "$d/disk"
}

row_cache-eio() {
    lazy_trap
    cache_eio_run read
    cache_eio_run all
    cache_eio_at_mount
    lazy_untrap
}
