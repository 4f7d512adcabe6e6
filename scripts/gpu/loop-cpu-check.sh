#!/usr/bin/env bash
# Is the driver's CPU for the same NVML calls set by the CPU a process runs on? Copies of
# scripts/gpu/nvml-loop.c side by side: one each pinned to four different CPUs, and four
# pinned together to one CPU; each one's CPU over the window (docs/performance.md,
# "Against a C loop").
#   sudo scripts/gpu/run.sh loop-cpu-check [WINDOW_SECONDS]     (on the GPU machine)
set -euo pipefail
window=${1:-120}
source "$(dirname "$(readlink -f "$0")")/lib.sh"
work=$GW_WORK
gw_build_nvml_loop
cpus=$(nproc)
declare -A pid cpu
names=""
for c in 1 $((cpus / 4 + 1)) $((cpus / 2 + 1)) $((cpus - 1)); do
  n="alone-cpu$c"; cpu[$n]=$c
  taskset -c "$c" "$work/nvml-loop" $((window + 30)) > /dev/null 2>&1 & pid[$n]=$!
  names="$names $n"
done
for i in 1 2 3 4; do
  n="shared$i-cpu3"; cpu[$n]=3
  taskset -c 3 "$work/nvml-loop" $((window + 30)) > /dev/null 2>&1 & pid[$n]=$!
  names="$names $n"
done
gw_cpu_ms_over "$window" $names
echo "window: $window s; $cpus CPUs; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1); GPU's NUMA node: $(cat /sys/bus/pci/devices/*/numa_node 2>/dev/null | sort | uniq -c | tr '\n' ' ')"
for n in $names; do printf '%-14s CPU %s ms\n' "$n" "${ms[$n]}"; done
lscpu | grep -E "^(Model name|Thread|Core|Socket|NUMA node)" || true
