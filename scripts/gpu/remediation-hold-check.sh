#!/bin/bash
# Automatic remediation on a real GPU, without resetting it (never reset a lent GPU): the
# daemon (remediation.mode auto) is given a contained Xid 94 through a kernel-log file and a
# Slurm-like report that the node is drained with no job; its "reset" command is a stand-in
# that lists every process holding an NVIDIA device file at that moment and exits 0. What it
# shows: the daemon let go of NVML before the step ran (it holds none of /dev/nvidia*), what
# else holds them (nvidia-persistenced would block a real reset), NVML initialised again
# after, the clear, and the real CUDA probe validating the GPU before it returns to service.
# Persistence commands are echoes: the GPU's persistence mode is not touched.
# Usage: scripts/gpu/remediation-hold-check.sh BINARY OUTDIR
set -u
bin=$(readlink -f "$1"); out=$2
work=$(mktemp -d /var/tmp/gw-remediation.XXXXXX)
mkdir -p "$out"
bus=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader -i 0 | head -1)
short=$(echo "$bus" | sed -E 's/^0*([0-9a-fA-F]{4}):/\1:/' | tr 'A-F' 'a-f')   # 0000:19:00.0
kmsg_bus=$(echo "$short" | cut -d. -f1)                                     # 0000:19:00
holders=$(dirname "$(readlink -f "$0")")/nvidia-holders.sh
: >"$work/kmsg"
cat >"$work/config.yaml" <<YAML
listen: 127.0.0.1:9419
xid:
  kernel_log_path: $work/kmsg
state:
  path: $work/state.db
local_api:
  socket: $work/gw.sock
health:
  xid_severity: {94: fatal}
probe:
  schedule: false
remediation:
  mode: auto
  reset_command: "$holders {pci_bus_id}"
  persistence_off_command: "/bin/echo (not run on a lent GPU) nvidia-smi -i {pci_bus_id} -pm 0"
  persistence_on_command: "/bin/echo (not run on a lent GPU) nvidia-smi -i {pci_bus_id} -pm 1"
  reboot_marker: $work/reboot-required
  pause_file: $work/pause
YAML
"$bin" run --config "$work/config.yaml" >"$out/daemon.log" 2>&1 &
pid=$!
sleep 4
echo "before: the daemon's NVIDIA files:" >"$out/summary.txt"
ls -l /proc/$pid/fd | grep nvidia | awk '{print $NF}' | sort | uniq -c >>"$out/summary.txt"
# As dmesg prints it: a bare driver line is not read (docs/health.md, "Where XIDs are read").
echo "[  512.000001] NVRM: Xid (PCI:$kmsg_bus): 94, pid=1, name=x, Contained: SM (0x1)" >>"$work/kmsg"
sleep 2
"$bin" health --socket "$work/gw.sock" >>"$out/summary.txt" 2>&1
# The Slurm check's report: drained by gpuwarden, no job (after the verdict turned unhealthy).
"$bin" health report --node gpuwarden --jobs 0 --socket "$work/gw.sock" >>"$out/summary.txt" 2>&1
t0=$(date +%s.%N)
for i in $(seq 1 120); do
    if grep -q "validated\|failed its validation\|needs a reboot" "$out/daemon.log"; then break; fi
    sleep 0.5
done
echo "ended after $(awk -v a="$(date +%s.%N)" -v b="$t0" "BEGIN{print a-b}") s" >>"$out/summary.txt"
sleep 2
"$bin" health --socket "$work/gw.sock" >>"$out/summary.txt" 2>&1; echo "health exit $?" >>"$out/summary.txt"
curl -s 127.0.0.1:9419/metrics | grep -E "^gpu_up|^gpu_remediation|^gpuwarden_remediation|^gpuwarden_reboot|^gpu_probe_runs_total|^gpu_health\{.*unhealthy" >>"$out/summary.txt"
echo "after: the daemon's NVIDIA files:" >>"$out/summary.txt"
ls -l /proc/$pid/fd | grep nvidia | awk '{print $NF}' | sort | uniq -c >>"$out/summary.txt"
kill $pid; wait $pid
"$bin" events --state "$work/state.db" --json >"$out/events.json" 2>&1
"$bin" report --state "$work/state.db" --gpu 0 >"$out/report.txt" 2>&1
rm -rf "$work"
