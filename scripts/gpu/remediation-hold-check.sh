#!/usr/bin/env bash
# Automatic remediation on a real GPU, without resetting it (never reset a lent GPU): the
# daemon (remediation.mode auto) is given a contained Xid 94 through a kernel-log file and a
# Slurm-like report that the node is drained with no job; its "reset" command is a stand-in
# that lists every process holding an NVIDIA device file at that moment and exits 0. What it
# shows: the daemon let go of NVML before the step ran (it holds none of /dev/nvidia*), what
# else holds them (nvidia-persistenced would block a real reset), NVML initialised again
# after, the clear, and the real CUDA probe validating the GPU before it returns to service.
# Persistence commands are echoes: the GPU's persistence mode is not touched.
#   scripts/gpu/run.sh remediation-hold-check
set -uo pipefail
source "$(dirname "$(readlink -f "$0")")/lib.sh"
holders=$(dirname "$(readlink -f "$0")")/nvidia-holders.sh
summary=$GW_OUT/summary.txt
: > "$GW_WORK/kmsg"
gw_config <<YAML
xid:
  kernel_log_path: $GW_WORK/kmsg
health:
  xid_severity: {94: fatal}
probe:
  schedule: false
remediation:
  mode: auto
  reset_command: "$holders {pci_bus_id}"
  persistence_off_command: "/bin/echo (not run on a lent GPU) nvidia-smi -i {pci_bus_id} -pm 0"
  persistence_on_command: "/bin/echo (not run on a lent GPU) nvidia-smi -i {pci_bus_id} -pm 1"
  reboot_marker: $GW_WORK/reboot-required
  pause_file: $GW_WORK/pause
YAML
nvidia_files() { ls -l "/proc/$GW_PID/fd" | grep nvidia | awk '{print $NF}' | sort | uniq -c; }
gw_start
echo "before: the daemon's NVIDIA files:" > "$summary"
nvidia_files >> "$summary"
# As dmesg prints it: a bare driver line is not read (docs/health.md, "Where XIDs are read").
echo "[  512.000001] NVRM: Xid (PCI:$(gw_kmsg_bus 0)): 94, pid=1, name=x, Contained: SM (0x1)" >> "$GW_WORK/kmsg"
gw_wait_metric '^gpu_health\{gpu="0".*state="unhealthy".*\} 1' 20 || gw_fail "GPU 0 not unhealthy after Xid 94"
gw_health >> "$summary" 2>&1
# The Slurm check's report: drained by gpuwarden, no job (after the verdict turned unhealthy).
"$GW_BIN" health report --node gpuwarden --jobs 0 --socket "$GW_SOCKET" >> "$summary" 2>&1
t0=$SECONDS
gw_wait_log "validated|failed its validation|needs a reboot" 60 || gw_fail "no outcome of the remediation within 60 s"
echo "ended after $((SECONDS - t0)) s" >> "$summary"
gw_wait_metric '^gpu_health\{gpu="0".*state="ok".*\} 1' 10 || true
gw_health >> "$summary" 2>&1; echo "health exit $?" >> "$summary"
gw_metrics "^gpu_up|^gpu_remediation|^gpuwarden_remediation|^gpuwarden_reboot|^gpu_probe_runs_total|^gpu_health\{.*unhealthy" >> "$summary"
echo "after: the daemon's NVIDIA files:" >> "$summary"
nvidia_files >> "$summary"
gw_stop
gw_events --json > "$GW_OUT/events.json" 2>&1
"$GW_BIN" report --state "$GW_STATE" --gpu 0 > "$GW_OUT/report.txt" 2>&1
cat "$summary"
