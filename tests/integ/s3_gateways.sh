#!/usr/bin/env bash
# Two gateways of one store: a second radosgw of the running test cluster
# (scripts/s3-server rgw2-start, on the first free port from 17480), then
# tests/store/test_s3_gateways.c over both, which kills it with SIGKILL
# mid-run and starts it again.  The second gateway is ours: stopped at the
# end by its owner name (never the cluster, never another's gateway).
#
#   s3_gateways.sh TEST_S3_GATEWAYS S3_SERVER      (under scripts/with-s3)
set -u
test_bin=$1
server=$2
owner=s3-gateways-$$
: "${AWS_ENDPOINT_URL:?run under scripts/with-s3}"

cleanup() { "$server" rgw2-stop --owner "$owner" >/dev/null 2>&1; }
trap cleanup EXIT

env_out=
for port in $(seq 17480 17499); do
    if env_out=$("$server" rgw2-start "$port" --owner "$owner" 2>/tmp/s3-gw-$$.err); then
        break
    fi
    env_out=
    grep -q "already in use\|already runs" /tmp/s3-gw-$$.err || break
done
if [ -z "$env_out" ]; then
    echo "s3_gateways: cannot start a second gateway:" >&2
    cat /tmp/s3-gw-$$.err >&2
    rm -f /tmp/s3-gw-$$.err
    exit 1
fi
rm -f /tmp/s3-gw-$$.err
eval "$env_out"
export TFS_TEST_RGW2_RESTART="$server rgw2-start $port --owner $owner >/dev/null"
AWS_ENDPOINT_URL="$AWS_ENDPOINT_URL,$TFS_TEST_RGW2_URL" "$test_bin"
