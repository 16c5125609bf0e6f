#!/usr/bin/env bash
# Banned calls, the way curl's checksrc.pl does it: functions that are
# unsafe or have a safer sibling are refused anywhere in the C sources.
#   strcpy strcat sprintf vsprintf gets strtok atoi atol atof  -> use the
#   bounded or checked versions (snprintf, tfs_buf, tfs_parse_*)
set -eu
cd "$(dirname "$0")/.."
pattern='\b(strcpy|strcat|sprintf|vsprintf|gets|strtok|atoi|atol|atoll|atof|strncpy|tmpnam|mktemp)[[:space:]]*\('
if grep -rnE "$pattern" --include='*.c' --include='*.h' src include tests \
        | grep -vE '^[^:]+:[0-9]+:\s*(\*|/\*)'; then
    echo "checksrc: banned calls above (see scripts/checksrc.sh)"
    exit 1
fi
echo "checksrc: clean"
