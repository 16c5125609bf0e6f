# shellcheck shell=bash
# SPDX-License-Identifier: MIT
# The cache group's test bed (tests/integ/group.sh, bench/group;
# docs/group-test.md): N nodes, each a network namespace with its own
# tierfs mount, cache dir and log, joined by veth pairs to a bridge in
# this (the root) namespace; every node link capped by htb both ways;
# the store (the shared local RGW on 127.0.0.1, reachable only from this
# namespace) served to the nodes through bench/tools/relay on the
# bridge's address, which counts the store's egress at the store side,
# with the RGW's own access log as the second count.
#
# The caller sets tierfs (the binary), relay (bench/tools/relay), work
# (a scratch dir), sources this file, and calls group_cleanup from its
# EXIT trap (it stops every process and mount started here and removes
# the network, also after a failure or ^C).
#
#   net_up N [RATE]     N node namespaces (1..N) + bridge + htb RATE
#                       (default $GROUP_RATE or 1gbit) on every link;
#                       sets gnet_sub (the /24), gnet_rate
#   net_down            remove them (group_cleanup does it)
#   node_ip I           node I's address;  store_ip: the bridge's
#   node_exec I CMD...  CMD in node I's network namespace
#   node_mount I URI ARGS...
#                       tierfs mount -f of URI at $work/nI/mnt in node I
#                       (cache $work/nI/cache, log $work/nI/mnt.log), the
#                       store reached through the relay
#   node_kill9 I, node_umount I
#   node_wipe I         node I's cache dir emptied (node unmounted)
#   relay_up            the store relay (store_url: what the nodes use)
#   store_mark          remember the store's counters now; then
#   store_since PATH    "relay_down gets get_bytes" since the mark: the
#                       bytes the relay carried from the RGW to the nodes,
#                       and the GETs under PATH the RGW logged (gets and
#                       get_bytes are "-" when its log is not readable)
#   link_rate I J SECS  bytes/s of one TCP stream from node I to node J
: "${tierfs:?}" "${relay:?}" "${work:?}"
group_top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=tests/integ/faults_lib.sh
. "$group_top/tests/integ/faults_lib.sh"
gtool="/usr/bin/python3 $group_top/tests/integ/group_tool.py"

gnet_id=$$                      # in every name: one run's, and whose
gnet_n=0
gnet_sub=""
gnet_br=tg${gnet_id}b
relay_pid=0
relay_port=0
declare -a node_pid node_mnt
gnet_rgw_log=${S3_DIR:-/tmp/tierfs-s3}/log/client.rgw.a.log

gnet_ns() { echo "tfsg${gnet_id}n$1"; }
node_ip() { echo "$gnet_sub.$(($1 + 1))"; }
store_ip() { echo "$gnet_sub.1"; }
node_exec() { local i=$1; shift; nsenter --net="/run/netns/$(gnet_ns "$i")" "$@"; }

# Namespaces, bridges and veths of earlier runs whose shell is gone (a
# kill -9 of the test leaves them): removed before a new run starts.
gnet_reap() {
    local n pid
    for n in $(ip netns list 2>/dev/null | awk '{ print $1 }' | grep -E '^tfsg[0-9]+n[0-9]+$'); do
        pid=${n#tfsg}
        pid=${pid%%n*}
        kill -0 "$pid" 2>/dev/null || ip netns del "$n" 2>/dev/null
    done
    for n in $(ip -o link show 2>/dev/null | awk -F': ' '{ print $2 }' | sed 's/@.*//' |
        grep -E '^tg[0-9]+[bh][0-9]*$'); do
        pid=${n#tg}
        pid=${pid%%[bh]*}
        kill -0 "$pid" 2>/dev/null || ip link del "$n" 2>/dev/null
    done
}

# A /24 under 10.77 that no interface here uses.
gnet_pick_sub() {
    local k s
    for k in $(seq 0 249); do
        s=10.77.$(((gnet_id + k) % 250))
        ip -4 -o addr show 2>/dev/null | grep -q " $s\." || { echo "$s"; return 0; }
    done
    return 1
}

# htb_cap DEV RATE [NS]: egress of DEV capped at RATE
htb_cap() {
    local tcx=(tc)
    [ -z "${3:-}" ] || tcx=(tc -n "$3")
    "${tcx[@]}" qdisc add dev "$1" root handle 1: htb default 10 r2q 1000 &&
        "${tcx[@]}" class add dev "$1" parent 1: classid 1:10 htb rate "$2" ceil "$2"
}

net_up() {
    local n=$1 rate=${2:-${GROUP_RATE:-1gbit}} i ns h v
    gnet_reap
    gnet_sub=$(gnet_pick_sub) || { echo "    net_up: no free 10.77.x.0/24"; return 1; }
    # shellcheck disable=SC2034  # (the callers' figure: the cap in force)
    gnet_rate=$rate
    ip link add "$gnet_br" type bridge || return 1
    ip addr add "$(store_ip)/24" dev "$gnet_br" && ip link set "$gnet_br" up || return 1
    for i in $(seq "$n"); do
        ns=$(gnet_ns "$i") h=tg${gnet_id}h$i v=tg${gnet_id}v$i
        ip netns add "$ns" || return 1
        gnet_n=$i
        ip link add "$h" type veth peer name "$v" || return 1
        ip link set "$v" netns "$ns" &&
            ip link set "$h" master "$gnet_br" && ip link set "$h" up &&
            ip -n "$ns" addr add "$(node_ip "$i")/24" dev "$v" &&
            ip -n "$ns" link set "$v" up && ip -n "$ns" link set lo up || return 1
        # both ways: to the node (the bridge port's egress) and from it
        htb_cap "$h" "$rate" 2>/dev/null && htb_cap "$v" "$rate" "$ns" 2>/dev/null ||
            { echo "    net_up: htb on node $i's link refused"; return 1; }
        mkdir -p "$work/n$i"
    done
    for i in $(seq "$n"); do  # every node reaches the store's address
        node_exec "$i" /usr/bin/python3 -c 'import socket, sys
s = socket.socket(); s.settimeout(0.5)
sys.exit(s.connect_ex((sys.argv[1], 9)) not in (0, 111))' "$(store_ip)" ||
            { echo "    net_up: node $i does not reach $(store_ip)"; return 1; }
    done
}

net_down() {
    local i
    for i in $(seq "$gnet_n"); do ip netns del "$(gnet_ns "$i")" 2>/dev/null; done
    gnet_n=0
    ip link del "$gnet_br" 2>/dev/null
    for i in $(ip -o link show 2>/dev/null | awk -F': ' '{ print $2 }' | sed 's/@.*//' |
        grep -E "^tg${gnet_id}[bhv][0-9]*\$"); do
        ip link del "$i" 2>/dev/null
    done
    return 0
}

# ---- the store, through the relay ----
relay_up() {
    local rgw=${AWS_ENDPOINT_URL:?} i
    rgw=${rgw#http://}
    rgw=${rgw%%/*}
    relay_port=${rgw##*:}
    # -t: the relay outlives no run (and dies with this shell anyway)
    "$relay" -t 3600 -c "$work/relay.count" -p "$work/relay.pid" \
        "$(store_ip):$relay_port" "$rgw" 2>>"$work/relay.log" &
    relay_pid=$!
    for i in $(seq 100); do
        [ -s "$work/relay.pid" ] && node_exec 1 curl -s -o /dev/null -m 2 \
            "http://$(store_ip):$relay_port/" && return 0
        sleep 0.05
    done
    echo "    relay_up: no answer through the relay"
    return 1
}
store_url() { echo "http://$(store_ip):$relay_port"; }

relay_down_bytes() { awk '$1 == "down" { print $2 }' "$work/relay.count" 2>/dev/null || echo 0; }
rgw_log_size() { stat -c %s "$gnet_rgw_log" 2>/dev/null || echo -1; }

store_mark() {
    sleep 0.3                   # the relay's count file: 100 ms behind
    store_mark_relay=$(relay_down_bytes)
    store_mark_log=$(rgw_log_size)
}

# The RGW writes its log from a thread of its own: read it until two
# reads 0.3 s apart agree (3 s at most).
store_since() {
    local path=$1 r a b k
    sleep 0.3
    r=$(($(relay_down_bytes) - store_mark_relay))
    if [ "$store_mark_log" -lt 0 ] || [ ! -r "$gnet_rgw_log" ]; then
        echo "$r - -"
        return
    fi
    a=$($gtool rgwlog "$gnet_rgw_log" "$store_mark_log" "$path")
    for k in $(seq 10); do
        sleep 0.3
        b=$($gtool rgwlog "$gnet_rgw_log" "$store_mark_log" "$path")
        [ "$a" = "$b" ] && break
        a=$b
    done
    echo "$r $b"
}

# ---- mounts in the nodes ----
node_mount() {
    local i=$1 uri=$2
    shift 2
    mkdir -p "$work/n$i/cache"
    mnt_wrap="env AWS_ENDPOINT_URL=${store_endpoints:-$(store_url)} nsenter --net=/run/netns/$(gnet_ns "$i")"
    mnt_start "$uri" "$work/n$i/mnt" --cache-dir "$work/n$i/cache" "$@" || return 1
    node_pid[i]=$mnt_pid
    node_mnt[i]=$mnt_dir
    mnt_pid=0
}

node_kill9() {
    local i=$1
    [ "${node_pid[i]:-0}" != 0 ] || return 0
    kill -9 "${node_pid[i]}" 2>/dev/null
    wait "${node_pid[i]}" 2>/dev/null
    node_pid[i]=0
    fusermount3 -u -z "${node_mnt[i]}" 2>/dev/null
    return 0
}

node_umount() {
    local i=$1
    [ "${node_pid[i]:-0}" != 0 ] || return 0
    fuse_stop "${node_pid[i]}" "${node_mnt[i]}" 200 -9
    node_pid[i]=0
}

node_wipe() { rm -rf "$work/n$1/cache"; mkdir -p "$work/n$1/cache"; }

# ---- the link ----
# link_rate I J SECS: one TCP stream from node I to node J, what arrived
# per second (bytes/s), timed at the receiver from its first byte
link_rate() {
    local i=$1 j=$2 secs=$3 port=5201 srv out b s
    node_exec "$j" $gtool stream-serve "$(node_ip "$j")" "$port" >"$work/link.out" 2>&1 &
    srv=$!
    node_exec "$i" $gtool stream-send "$(node_ip "$j")" "$port" "$secs" 2>>"$work/link.out"
    wait "$srv"
    out=$(head -1 "$work/link.out")
    read -r b s <<<"$out"
    [ -n "${s:-}" ] || { echo 0; return 1; }
    awk -v b="$b" -v s="$s" 'BEGIN { printf "%d\n", (s > 0 ? b / s : 0) }'
}

# ---- the end ----
group_cleanup() {
    local i p
    for p in ${group_pids:-}; do kill "$p" 2>/dev/null; done
    for i in "${!node_pid[@]}"; do node_kill9 "$i"; done
    for i in "${!node_mnt[@]}"; do
        is_mounted "${node_mnt[i]}" && fusermount3 -u -z "${node_mnt[i]}" 2>/dev/null
    done
    [ "$relay_pid" = 0 ] || { kill "$relay_pid" 2>/dev/null; wait "$relay_pid" 2>/dev/null; }
    relay_pid=0
    net_down
}
