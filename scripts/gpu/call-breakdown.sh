#!/usr/bin/env bash
# Where the daemon's CPU goes on a real GPU node with every feature on and a compute process
# on GPU 0: its CPU over WINDOW seconds and the driver's share by call
# (gpuwarden_vendor_call_seconds_total), to tell the daemon's own work from NVML's.
#   scripts/gpu/run.sh call-breakdown     (as root, on the GPU machine)
set -euo pipefail
source "$(dirname "$(readlink -f "$0")")/lib.sh"
WINDOW=${WINDOW:-60}
gw_every_feature_yaml | gw_config
gw_gpu_load
gw_start
pid=$GW_PID
sleep 15
calls() { gw_metrics '^gpuwarden_vendor_call_seconds_total'; }
read -r -a s0 < "/proc/$pid/stat"; calls > "$GW_OUT/calls-before.txt"
sleep "$WINDOW"
read -r -a s1 < "/proc/$pid/stat"; calls > "$GW_OUT/calls-after.txt"
ticks=$(getconf CLK_TCK)
echo "process CPU: $(( (s1[13]+s1[14]) - (s0[13]+s0[14]) )) ticks of 1/$ticks s in $WINDOW s (utime $(( s1[13]-s0[13] )), stime $(( s1[14]-s0[14] )))"
echo "threads: $(ls /proc/$pid/task | wc -l)"
for t in /proc/$pid/task/*; do read -r -a ts < "$t/stat"; echo "  $(cat $t/comm): $(( ts[13]+ts[14] )) ticks since start"; done
echo "driver time by call over the window (ms per second):"
join <(sed -E 's/ ([0-9.e+-]+)$/\t\1/' "$GW_OUT/calls-before.txt" | sort) <(sed -E 's/ ([0-9.e+-]+)$/\t\1/' "$GW_OUT/calls-after.txt" | sort) -t $'\t' \
  | awk -F'\t' -v w="$WINDOW" '{ printf "  %8.3f  %s\n", ($3-$2)*1000/w, $1 }' | sort -rn | sed -n "1,25p"
gw_stop
