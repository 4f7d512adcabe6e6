#!/usr/bin/env bash
# The idle node's validation through the daemon on a real node of two or more GPUs
# (docs/probe.md, "The GPUs together"): `probe.mode: node` validates every GPU with the
# correctness canary and the pattern test, then the all-reduce across them through NCCL; what
# the journal kept (each GPU's `sdc` digest, the `collective` row, the validations) and what
# /metrics and `gpuwarden health` say. NVLink multicast stays off (NCCL_NVLS_ENABLE=0) where the
# caller set it so; this script never sets it on.
#   scripts/gpu/run.sh node-sweep-check NCCL_LIBRARY
set -euo pipefail
source "$(dirname "$(readlink -f "$0")")/lib.sh"
nccl=${1:?usage: scripts/gpu/run.sh node-sweep-check NCCL_LIBRARY}
gw_config <<YAML
probe:
  schedule: true
  mode: node
  interval: 15s
  tests: [sdc, memtest]
  nccl_library: "$nccl"
YAML
gw_start
# The sweep starts 15 s after the start; each GPU's canary and pattern test take about 10 s,
# one GPU after the other, then the all-reduce.
gw_wait_metric '^gpuwarden_collective_runs_total\{.*result="(passed|slow|failed)".*\} [1-9]' 240 \
  || gw_fail "no all-reduce within 240 s"
gw_metrics > "$GW_OUT/metrics-full.txt"
grep -E '^(gpu_probe_pass|gpuwarden_collective|gpu_nvlink_speed|gpu_node_health_reason)' "$GW_OUT/metrics-full.txt" > "$GW_OUT/metrics.txt" || true
gw_health > "$GW_OUT/health.txt" || true
gw_wait_row collective || gw_fail "no collective row in the journal"
gw_events --kind sdc,memtest,collective,validation --all --json > "$GW_OUT/events.json"
gw_stop
cat "$GW_OUT/metrics.txt"
head -3 "$GW_OUT/health.txt"
python3 "$(dirname "$(readlink -f "$0")")/journal_rows.py" "$GW_OUT/events.json"
