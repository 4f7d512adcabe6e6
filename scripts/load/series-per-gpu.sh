#!/usr/bin/env bash
# Series per GPU for each option, measured: the daemon over the demo's eight simulated H200s
# (one in MIG mode with three instances, one with a compute process), scraped once 5 s after
# start for each config, series counted by their `gpu` label (dcgm-exporter's too) and the
# rest as the node's own.
#
#   scripts/load/series-per-gpu.sh [BINARY]     (default target/release/gpuwarden)
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${1:-target/release/gpuwarden}
LIB=$(dirname "$BIN")/libgpuwarden_sim_nvml.so
[ -f "$LIB" ] || LIB=$(dirname "$BIN")/deps/libgpuwarden_sim_nvml.so
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
port=19477
measure() {
  local name=$1 extra=$2
  cat > "$work/config.yaml" <<YAML
listen: 127.0.0.1:$port
poll: {interval: 1s, gpm_interval: 2s}
nvml: {library_path: $LIB}
state: {path: ""}
local_api: {socket: ""}
pci_census: false
$extra
YAML
  GPUWARDEN_SIM_NVML_SCENARIO=config/demo-scenario.yaml "$BIN" run --config "$work/config.yaml" >"$work/log" 2>&1 &
  local pid=$!
  sleep 5
  curl -s -H 'Accept: text/plain' "127.0.0.1:$port/metrics" > "$work/scrape.txt"
  kill "$pid"; wait "$pid" 2>/dev/null || true
  python3 - "$name" "$work/scrape.txt" <<'PY'
import re, sys, collections
name, path = sys.argv[1], sys.argv[2]
per_gpu, node = collections.Counter(), 0
for line in open(path):
    if line.startswith("#") or not line.strip():
        continue
    m = re.search(r'[{,]gpu="(\d+)"', line)
    if m:
        per_gpu[m.group(1)] += 1
    else:
        node += 1
plain = [per_gpu[g] for g in per_gpu if g != "3"]
print(f"| {name} | {sum(per_gpu.values()) / max(len(per_gpu), 1):.0f} | {min(plain)}-{max(plain)} | {per_gpu['3']} | {node} | {sum(per_gpu.values()) + node} |")
PY
}
echo "| config | series per GPU (mean of 8) | a whole GPU | the MIG GPU (3 instances) | node's own | whole scrape |"
echo "| --- | --- | --- | --- | --- | --- |"
measure "defaults" ""
measure "compat.dcgm_exporter" "compat: {dcgm_exporter: true}"
measure "nvlink.per_link" "nvlink: {per_link: true}"
measure "processes.per_process" "processes: {per_process: true}"
measure "metrics.poll_timing: false" "metrics: {poll_timing: false}"
measure "all four" "compat: {dcgm_exporter: true}
nvlink: {per_link: true}
processes: {per_process: true}"
