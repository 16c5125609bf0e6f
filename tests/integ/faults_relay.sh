#!/usr/bin/env bash
# The fault matrix's TCP relay (bench/tools/relay.c), tested on its own:
# bytes arrive exact and in order under jitter, the delay is added in
# both directions, a stall holds bytes without closing the connection,
# the relay exits at its time bound and when its parent dies, and -c
# counts the bytes each way.
#
#   faults_relay.sh RELAY
set -u
relay=$1
py=/usr/bin/python3
work=$(mktemp -d /tmp/faults-relay-XXXXXX)
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
# shellcheck source=tests/integ/tap.sh
. "$(dirname "$0")/tap.sh"

# An echo server on a free port; its port goes to $work/echo.port.
cat >"$work/echo.py" <<'EOF'
import socket, sys, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0)); s.listen(16)
open(sys.argv[1], "w").write(str(s.getsockname()[1]))
def serve(c):
    while True:
        b = c.recv(65536)
        if not b:
            c.shutdown(socket.SHUT_WR); return
        c.sendall(b)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
EOF
# client.py PORT MODE...: the checks that need a socket, one line out.
cat >"$work/client.py" <<'EOF'
import hashlib, os, socket, sys, threading, time
port, mode = int(sys.argv[1]), sys.argv[2]
c = socket.create_connection(("127.0.0.1", port), timeout=20)
if mode == "bulk":            # 16 MiB there and back, compared
    data = os.urandom(16 << 20)
    got = bytearray()
    def rd():
        while True:
            b = c.recv(1 << 20)
            if not b: return
            got.extend(b)
    t = threading.Thread(target=rd); t.start()
    c.sendall(data); c.shutdown(socket.SHUT_WR); t.join()
    print("same" if bytes(got) == data else "differ %d/%d" % (len(got), len(data)))
elif mode == "rtt":           # median round trip of 5 small messages, ms
    r = []
    for i in range(5):
        t0 = time.monotonic(); c.sendall(b"x"); c.recv(1)
        r.append((time.monotonic() - t0) * 1e3)
    print("%.0f" % sorted(r)[2])
elif mode == "stall":         # STALL_FILE: no byte while it exists
    stall = sys.argv[3]
    open(stall, "w").close()
    time.sleep(0.05)
    c.sendall(b"hello")
    c.settimeout(0.8)
    try:
        b = c.recv(16); held = "leaked" if b else "closed"
    except socket.timeout:
        held = "held"
    os.unlink(stall)
    c.settimeout(5)
    try:
        b = c.recv(16)
    except socket.timeout:
        b = b"timeout"
    print(held, b.decode())
EOF

$py "$work/echo.py" "$work/echo.port" &
pids+=($!)
for _ in $(seq 50); do [ -s "$work/echo.port" ] && break; sleep 0.1; done
eport=$(cat "$work/echo.port")

# start_relay ARGS...: a relay on a free port ($rport) in front of the
# echo server
start_relay() {
    rport=$(free_port) || return 1
    "$relay" -p "$work/relay.pid" "$@" "127.0.0.1:$rport" "127.0.0.1:$eport" \
        2>>"$work/relay.log" &
    pids+=($!)
    for _ in $(seq 50); do
        $py -c "import socket; socket.create_connection(('127.0.0.1', $rport), 1)" \
            2>/dev/null && return 0
        sleep 0.05
    done
    return 1
}

start_relay -t 60
base=$($py "$work/client.py" "$rport" rtt)
check "no delay: round trip ${base} ms < 50 ms" '[ "$base" -lt 50 ]'
kill "${pids[-1]}"

start_relay -t 60 -j 20
out=$($py "$work/client.py" "$rport" bulk)
check "16 MiB both ways under 0-20 ms jitter: $out" '[ "$out" = same ]'
kill "${pids[-1]}"

start_relay -t 60 -c "$work/count"
out=$($py "$work/client.py" "$rport" bulk)
sleep 0.3
cnt=$(tr '\n' ' ' <"$work/count" 2>/dev/null)
# (conns: the start probe and the client)
check "-c: 16 MiB each way counted at the relay ($out; $cnt)" \
    '[ "$out" = same ] && [ "$cnt" = "conns 2 refused 0 up 16777216 down 16777216 " ]'
kill "${pids[-1]}"

start_relay -t 60 -d 100
rtt=$($py "$work/client.py" "$rport" rtt)
check "-d 100: round trip ${rtt} ms in [200, 400)" '[ "$rtt" -ge 200 ] && [ "$rtt" -lt 400 ]'
kill "${pids[-1]}"

start_relay -t 60 -s "$work/stall"
out=$($py "$work/client.py" "$rport" stall "$work/stall")
check "stall file: bytes held, connection open, then delivered ($out)" \
    '[ "$out" = "held hello" ]'
kill "${pids[-1]}"

t0=$(date +%s%N)
start_relay -t 1
wait "${pids[-1]}"
t1=$(date +%s%N)
ms=$(((t1 - t0) / 1000000))
check "-t 1: exited after ${ms} ms (< 2000)" '[ "$ms" -lt 2000 ]'

# parent death: the relay's parent is a shell that exits after 0.3 s
rport=$(free_port)
sh -c "\"$relay\" -p \"$work/orphan.pid\" 127.0.0.1:$rport 127.0.0.1:$eport 2>/dev/null & sleep 0.3"
sleep 0.5
opid=$(cat "$work/orphan.pid" 2>/dev/null || echo 0)
# (gone or a zombie: this machine's pid 1 may not reap orphans)
state=$(awk '/^State:/ { print $2 }' "/proc/$opid/status" 2>/dev/null)
check "parent died: relay $opid gone (state '${state:-none}')" \
    '[ -z "$state" ] || [ "$state" = Z ]'

tap_end relay
