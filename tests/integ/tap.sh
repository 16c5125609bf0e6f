# shellcheck shell=bash
# SPDX-License-Identifier: MIT
# The shell tests' one harness, sourced by each: "ok - NAME" / "FAIL - NAME"
# lines and the machine-readable "N passed, N failed" line at the end.
#
#   ok NAME, bad NAME [WHY]    count and print one result; bad also shows
#                              the last lines of $tap_detail (a file)
#   skip NAME WHY              a case that cannot run here: "ok - NAME
#                              # SKIP WHY", counted apart
#   check NAME EXPR...         EXPR evaluated (a shell test); also
#                              check_expr (faults_lib.sh's check runs a
#                              command)
#   check_cmd NAME CMD...      CMD run; its exit status decides
#   tap_end [WHAT]             the summary line; non-zero if any failed
#   free_port                  a TCP port for a test's listener (stdout)
pass=0
fail=0
skipped=0
tap_detail=""
ok() { pass=$((pass + 1)); echo "ok - $1"; }
bad() {
    fail=$((fail + 1))
    echo "FAIL - $1${2:+: $2}"
    [ -z "$tap_detail" ] || sed 's/^/    /' "$tap_detail" 2>/dev/null | tail -5
}
skip() { skipped=$((skipped + 1)); echo "ok - $1 # SKIP $2"; }
check_expr() { local n=$1; shift; if eval "$@"; then ok "$n"; else bad "$n" "$*"; fi; }
check() { check_expr "$@"; }
check_cmd() { if "${@:2}"; then ok "$1"; else bad "$1"; fi; }
tap_end() {
    local s=""
    [ "$skipped" = 0 ] || s=", $skipped skipped"
    echo "${1:+$1: }$pass passed, $fail failed$s"
    [ "$fail" = 0 ]
}

# A TCP port no socket on this host uses, below the kernel's ephemeral
# range: a random one in the range could be any client connection's local
# port a moment later (a listener then fails "Address already in use").
free_port() {
    local lo hi base span p
    read -r lo hi </proc/sys/net/ipv4/ip_local_port_range
    if [ "$lo" -gt 12000 ]; then            # below the range
        base=10000 span=$((lo - 10000))
    elif [ "$hi" -lt 63000 ]; then          # above it
        base=$((hi + 1)) span=$((65535 - hi))
    else                                    # it is all: unused, at least
        base=10000 span=55535
    fi
    for _ in $(seq 100); do
        p=$((base + RANDOM % span))
        if [ -z "$(ss -tanH "sport = :$p" 2>/dev/null)" ]; then
            echo "$p"
            return 0
        fi
    done
    return 1
}
