#!/usr/bin/env bash
# The daemon's CPU and memory on a real GPU node with every feature on (dcgm-exporter compat,
# per-process series, per-link NVLink, a job mapping directory), while a PyTorch matmul keeps
# a compute process on GPU 0 (so the per-process calls run). Each binary given runs in turn,
# twice (A B A B, so drift on the node shows), for WINDOW seconds after WARMUP seconds.
# CPU: utime+stime from /proc/PID/stat over the window, plus cutime+cstime (the children it
# ran and reaped: the journal's worker processes), shown apart; RSS: VmRSS at its end.
#
#   scripts/gpu/footprint.sh BINARY...        (as root, on the GPU machine)
#   WINDOW=90 WARMUP=20 scripts/gpu/footprint.sh before/gpuwarden after/gpuwarden
#   PASSES=1 ... (one pass: for a run that must fit a time limit)
set -euo pipefail
WINDOW=${WINDOW:-90}
WARMUP=${WARMUP:-20}
PORT=9400
source "$(dirname "$0")/all-features.sh"
ticks=$(getconf CLK_TCK)
for pass in $(seq "${PASSES:-2}"); do
  for bin in "$@"; do
    "$bin" run --config "$work/config.yaml" >"$work/log" 2>&1 &
    pid=$!
    sleep "$WARMUP"
    read -r -a s0 < "/proc/$pid/stat"
    sleep "$WINDOW"
    read -r -a s1 < "/proc/$pid/stat"
    rss=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
    scrape=$(curl -s 127.0.0.1:$PORT/metrics | grep -c '^[a-zA-Z]' || true)
    kill "$pid"; wait "$pid" || true
    cpu=$(( (s1[13] + s1[14]) - (s0[13] + s0[14]) ))
    children=$(( (s1[15] + s1[16]) - (s0[15] + s0[16]) ))
    awk -v b="$bin" -v p="$pass" -v c="$cpu" -v k="$children" -v t="$ticks" -v w="$WINDOW" -v r="$rss" -v n="$scrape" \
      'BEGIN { printf "%s pass %s: CPU %.3f %% of a core (%d ticks in %d s; children %d ticks more), RSS %.1f MiB, %d series\n", b, p, 100 * (c + k) / t / w, c, w, k, r / 1024, n }'
  done
done
