#!/usr/bin/env bash
# Where the daemon's resident memory is, by mapping, with every feature on and a compute
# process on GPU 0, after WARMUP seconds: the binary, each shared library, the heap and thread
# arenas, stacks. Reads /proc/PID/smaps (Rss per mapping) and prints the largest, in KiB.
#
#   scripts/gpu/run.sh rss-breakdown       (as root, on the GPU machine)
set -euo pipefail
source "$(dirname "$(readlink -f "$0")")/lib.sh"
WARMUP=${WARMUP:-40}
gw_every_feature_yaml | gw_config
gw_gpu_load
gw_start
sleep "$WARMUP"
grep -E '^(VmRSS|RssAnon|RssFile|RssShmem|Threads)' "/proc/$GW_PID/status"
python3 "$(dirname "$(readlink -f "$0")")/rss-by-mapping.py" "$GW_PID" 25
gw_stop
