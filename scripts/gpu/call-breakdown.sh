#!/usr/bin/env bash
# Where the daemon's CPU goes on a real GPU node with every feature on and a compute process
# on GPU 0: its CPU over WINDOW seconds and the driver's share by call
# (gpuwarden_vendor_call_seconds_total), to tell the daemon's own work from NVML's.
#   scripts/gpu/call-breakdown.sh BINARY     (as root, on the GPU machine)
set -euo pipefail
WINDOW=${WINDOW:-60}
bin=$1
PORT=9401
source "$(dirname "$0")/all-features.sh"
"$bin" run --config "$work/config.yaml" >"$work/log" 2>&1 &
pid=$!
sleep 15
calls() { curl -s 127.0.0.1:$PORT/metrics | grep '^gpuwarden_vendor_call_seconds_total' ; }
read -r -a s0 < "/proc/$pid/stat"; calls > "$work/c0"
sleep "$WINDOW"
read -r -a s1 < "/proc/$pid/stat"; calls > "$work/c1"
ticks=$(getconf CLK_TCK)
echo "process CPU: $(( (s1[13]+s1[14]) - (s0[13]+s0[14]) )) ticks of 1/$ticks s in $WINDOW s (utime $(( s1[13]-s0[13] )), stime $(( s1[14]-s0[14] )))"
echo "threads: $(ls /proc/$pid/task | wc -l)"
for t in /proc/$pid/task/*; do read -r -a ts < "$t/stat"; echo "  $(cat $t/comm): $(( ts[13]+ts[14] )) ticks since start"; done
echo "driver time by call over the window (ms per second):"
join <(sed -E 's/ ([0-9.e+-]+)$/\t\1/' "$work/c0" | sort) <(sed -E 's/ ([0-9.e+-]+)$/\t\1/' "$work/c1" | sort) -t $'\t' \
  | awk -F'\t' -v w="$WINDOW" '{ printf "  %8.3f  %s\n", ($3-$2)*1000/w, $1 }' | sort -rn | head -25
kill "$pid"; wait "$pid" || true
