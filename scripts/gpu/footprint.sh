#!/usr/bin/env bash
# The daemon's CPU and memory on a real GPU node with every feature on (dcgm-exporter compat,
# per-process series, per-link NVLink, a job mapping directory), while a PyTorch matmul keeps
# a compute process on GPU 0 (so the per-process calls run). The harness's binary and each
# other one given run in turn, twice (A B A B, so drift on the node shows), for WINDOW seconds
# after WARMUP seconds. CPU: utime+stime from /proc/PID/stat over the window, plus
# cutime+cstime (the children it ran and reaped: the journal's worker processes), shown
# apart; RSS: VmRSS at its end. FEATURES=defaults: the default config instead (the journal in
# the run's scratch directory).
#
#   scripts/gpu/run.sh footprint [OTHER_BINARY...]        (as root, on the GPU machine)
#   WINDOW=90 WARMUP=20 GW_BIN=after/gpuwarden scripts/gpu/run.sh footprint before/gpuwarden
#   PASSES=1 ... (one pass: for a run that must fit a time limit)
set -euo pipefail
source "$(dirname "$(readlink -f "$0")")/lib.sh"
WINDOW=${WINDOW:-90}
WARMUP=${WARMUP:-20}
if [ "${FEATURES:-all}" = defaults ]; then gw_config < /dev/null; else gw_every_feature_yaml | gw_config; fi
gw_gpu_load
ticks=$(getconf CLK_TCK)
binaries=("$GW_BIN" "$@")
for pass in $(seq "${PASSES:-2}"); do
  for bin in "${binaries[@]}"; do
    rm -f "$GW_STATE"*
    GW_BIN=$bin gw_start
    pid=$GW_PID
    sleep "$WARMUP"
    read -r -a s0 < "/proc/$pid/stat"
    sleep "$WINDOW"
    read -r -a s1 < "/proc/$pid/stat"
    rss=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
    scrape=$(gw_metrics | grep -c '^[a-zA-Z]' || true)
    gw_stop
    cpu=$(( (s1[13] + s1[14]) - (s0[13] + s0[14]) ))
    children=$(( (s1[15] + s1[16]) - (s0[15] + s0[16]) ))
    awk -v b="$bin" -v p="$pass" -v c="$cpu" -v k="$children" -v t="$ticks" -v w="$WINDOW" -v r="$rss" -v n="$scrape" \
      'BEGIN { printf "%s pass %s: CPU %.3f %% of a core (%d ticks in %d s; children %d ticks more), RSS %.1f MiB, %d series\n", b, p, 100 * (c + k) / t / w, c, w, k, r / 1024, n }'
  done
done
