#!/usr/bin/env bash
# The idle node's validation through the daemon on a real node of two or more GPUs
# (docs/probe.md, "The GPUs together"): `probe.mode: node` validates every GPU with the
# correctness canary and the pattern test, then the all-reduce across them through NCCL; what
# the journal kept (each GPU's `sdc` digest, the `collective` row, the validations) and what
# /metrics and `gpuwarden health` say. NVLink multicast stays off (NCCL_NVLS_ENABLE=0) where the
# caller set it so; this script never sets it on.
#   scripts/gpu/node-sweep-check.sh ./gpuwarden NCCL_LIBRARY OUT_DIR
set -euo pipefail
bin=$(readlink -f "${1:?usage: node-sweep-check.sh GPUWARDEN NCCL_LIBRARY OUT_DIR}")
nccl=${2:?usage: node-sweep-check.sh GPUWARDEN NCCL_LIBRARY OUT_DIR}
out=$(readlink -f "${3:?usage: node-sweep-check.sh GPUWARDEN NCCL_LIBRARY OUT_DIR}")
mkdir -p "$out"
cat > "$out/config.yaml" <<YAML
listen: 127.0.0.1:19101
state: {path: $out/state.db}
local_api: {socket: $out/gpuwarden.sock}
probe:
  schedule: true
  mode: node
  interval: 15s
  tests: [sdc, memtest]
  nccl_library: "$nccl"
YAML
"$bin" run --config "$out/config.yaml" > "$out/daemon.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
# The sweep starts 15 s after the start; each GPU's canary and pattern test take about 10 s,
# one GPU after the other, then the all-reduce.
for _ in $(seq 240); do
  if curl -sf 127.0.0.1:19101/metrics | grep -qE '^gpuwarden_collective_runs_total\{.*result="(passed|slow|failed)".*\} [1-9]'; then break; fi
  sleep 1
done
curl -sf 127.0.0.1:19101/metrics > "$out/metrics-full.txt" || true
grep -E '^(gpu_probe_pass|gpuwarden_collective|gpu_nvlink_speed|gpu_node_health_reason)' "$out/metrics-full.txt" > "$out/metrics.txt" || true
"$bin" health --socket "$out/gpuwarden.sock" > "$out/health.txt" || true
sleep 2
"$bin" events --state "$out/state.db" --kind sdc,memtest,collective,validation --all --json > "$out/events.json"
kill $pid; wait $pid || true
trap - EXIT
cat "$out/metrics.txt"
head -3 "$out/health.txt"
python3 - "$out" <<'PY'
import json, sys
rows = json.load(open(f"{sys.argv[1]}/events.json"))
for r in rows:
    gpu = (r.get("gpu") or {}).get("index")
    print(r["kind"], f"GPU {gpu}" if gpu is not None else "node", "-", r["summary"])
PY
