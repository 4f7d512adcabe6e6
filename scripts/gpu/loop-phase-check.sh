#!/usr/bin/env bash
# Does polling at the same instant as another process make NVML calls cost more CPU? Four
# copies of scripts/gpu/nvml-loop.c side by side, two of them on the same phase of the second
# and two alone, each one's CPU over the window (docs/performance.md, "Against a C loop").
#   sudo scripts/gpu/run.sh loop-phase-check [WINDOW_SECONDS]     (on the GPU machine)
set -euo pipefail
window=${1:-150}
source "$(dirname "$(readlink -f "$0")")/lib.sh"
work=$GW_WORK
gw_build_nvml_loop
declare -A phase=([same1]=0.10 [same2]=0.10 [alone1]=0.60 [alone2]=0.35)
names="same1 same2 alone1 alone2"
declare -A pid
for n in $names; do
  "$work/nvml-loop" $((window + 30)) "${phase[$n]}" > "$work/$n.log" 2>&1 & pid[$n]=$!
done
gw_cpu_ms_over "$window" $names
echo "window: $window s; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
for n in $names; do printf '%-7s phase %.2f s  CPU %s ms\n' "$n" "${phase[$n]}" "${ms[$n]}"; done
