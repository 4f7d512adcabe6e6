#!/usr/bin/env bash
# XID sources on a real NVIDIA GPU: the daemon reads /dev/kmsg and registers an NVML event
# set, runs for RUN_SECONDS without errors, and (with PROVOKE_XID31=1) sees one real XID.
#
#   sudo PROVOKE_XID31=1 scripts/gpu/run.sh gpu-xid-check
#
# PROVOKE_XID31=1 runs a one-thread CUDA kernel (through CuPy) that writes to an unmapped
# address: an application fault that the driver reports as Xid 31 (GPU memory page fault)
# and survives; the GPU stays healthy. Nothing else touches the GPU: no clock, power or MIG
# change, no reset. Exit status 0 when every check passes.
set -euo pipefail
source "$(dirname "$(readlink -f "$0")")/lib.sh"
RUN_SECONDS=${RUN_SECONDS:-60}
echo "== $(date -u +%FT%TZ): $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
gw_config < /dev/null
started=$SECONDS
gw_start
gw_wait_metric 'gpuwarden_xid_source_up\{source="nvml_events"\} 1' 10 || true
gw_metrics > "$GW_OUT/start.txt"
grep -E '^gpuwarden_xid_(source_up|reports_total)' "$GW_OUT/start.txt" || true
grep -q 'gpuwarden_xid_source_up{source="kernel_log"} 1' "$GW_OUT/start.txt" || gw_fail "kernel log not read"
grep -q 'gpuwarden_xid_source_up{source="nvml_events"} 1' "$GW_OUT/start.txt" || gw_fail "NVML event set not registered"

if [ "${PROVOKE_XID31:-0}" = 1 ]; then
  echo "== provoking Xid 31 with an out-of-bounds write"
  python3 "$(dirname "$(readlink -f "$0")")/provoke-xid31.py" || true
  gw_wait_metric '^gpu_xid_errors_total\{.*xid="31".*\} 1(\.0)?$' 15 || true
  gw_metrics > "$GW_OUT/after_xid.txt"
  echo "-- kernel log:"; dmesg | grep -E 'NVRM: Xid' | tail -3
  echo "-- gpuwarden:"; grep -E '^gpu_xid|^gpuwarden_xid_reports' "$GW_OUT/after_xid.txt" || true
  grep -qE '^gpu_xid_errors_total\{.*xid="31".*\} 1(\.0)?$' "$GW_OUT/after_xid.txt" || gw_fail "Xid 31 not counted exactly once"
fi

# The run's length is the point here (no error over RUN_SECONDS): a sleep that means a time.
left=$((RUN_SECONDS - (SECONDS - started))); [ "$left" -gt 0 ] && sleep "$left"
gw_metrics > "$GW_OUT/end.txt"
echo "== after ${RUN_SECONDS}s"
grep -E '^gpu_up|^gpu_health\{.*state="(ok|unhealthy)"|^gpuwarden_collector_errors|^gpuwarden_xid' "$GW_OUT/end.txt" || true
gw_stop
echo "== daemon log"; cat "$GW_OUT/daemon.log"
# An XID we provoked is logged by design; anything else at WARN or ERROR is a failure.
if grep -E ' (WARN|ERROR) ' "$GW_OUT/daemon.log" | grep -vq 'Xid 31 '; then gw_fail "the daemon logged warnings or errors"; fi
echo "== gpu-xid-check: all checks passed"
