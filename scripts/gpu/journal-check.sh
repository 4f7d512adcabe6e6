#!/usr/bin/env bash
# The health journal on a real GPU: a fatal XID line (injected into a kernel-log file, not
# into the GPU) for GPU 0's real PCI address makes it unhealthy; gpuwarden is restarted with
# the line gone from the log and the GPU stays unhealthy; `events` lists the XID once with
# the real serial; `report` names it. Then a "reboot" (another boot id) clears the verdict.
#
#   scripts/gpu/journal-check.sh BINARY      (as root, on the GPU machine)
set -euo pipefail
bin=$1
PORT=9402
work=$(mktemp -d)
trap 'kill $pid 2>/dev/null || true; rm -rf "$work"' EXIT
bus=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader -i 0 | tr 'A-F' 'a-f')  # 00000000:19:00.0
short=${bus:4:10}                                                                     # 0000:19:00
echo "GPU 0: $(nvidia-smi --query-gpu=name,serial,pci.bus_id --format=csv,noheader -i 0)"
echo "3,900001,1000000,-;NVRM: Xid (PCI:$short): 48, pid=1, name=journal-check, DBE (injected by scripts/gpu/journal-check.sh)" > "$work/kmsg"
cp /proc/sys/kernel/random/boot_id "$work/boot_id"
cat > "$work/config.yaml" <<YAML
listen: 127.0.0.1:$PORT
xid:
  kernel_log_path: $work/kmsg
state:
  path: $work/state.db
  boot_id_file: $work/boot_id
YAML
start() { "$bin" run --config "$work/config.yaml" >>"$work/log" 2>&1 & pid=$!; sleep 6; }
show() { curl -s 127.0.0.1:$PORT/metrics | grep -E '^(gpu_health\{gpu="0".*state="unhealthy"|gpu_xid_errors_total\{gpu="0"|gpuwarden_journal_up)'; }
start; echo "== first start, the XID in the kernel log"; show
kill "$pid"; wait "$pid" || true
: > "$work/kmsg"
start; echo "== restarted, the kernel log empty"; show
echo "== gpuwarden events --kind xid"; "$bin" events --state "$work/state.db" --kind xid
echo "== gpuwarden report --gpu 0 (head)"; "$bin" report --state "$work/state.db" --gpu 0 | head -16
kill "$pid"; wait "$pid" || true
echo "00000000-0000-4000-8000-00000000cafe" > "$work/boot_id"
start; echo "== after a reboot (another boot id)"; show
kill "$pid"; wait "$pid" || true
echo "== all rows"; "$bin" events --state "$work/state.db"
