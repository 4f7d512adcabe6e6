#!/usr/bin/env bash
# Where the daemon's resident memory is, by mapping, with every feature on (all-features.sh)
# after WARMUP seconds: the binary, each shared library, the heap and thread arenas, stacks.
# Reads /proc/PID/smaps (Rss per mapping) and prints the largest, in KiB.
#
#   scripts/gpu/rss-breakdown.sh BINARY       (as root, on the GPU machine)
set -euo pipefail
WARMUP=${WARMUP:-40}
PORT=9401
source "$(dirname "$0")/all-features.sh"
"$1" run --config "$work/config.yaml" >"$work/log" 2>&1 &
pid=$!
sleep "$WARMUP"
grep -E '^(VmRSS|RssAnon|RssFile|RssShmem|Threads)' "/proc/$pid/status"
python3 "$(dirname "$0")/rss-by-mapping.py" "$pid" 25
kill "$pid"; wait "$pid" || true
