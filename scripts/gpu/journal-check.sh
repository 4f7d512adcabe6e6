#!/usr/bin/env bash
# The health journal on a real GPU: a fatal XID line (injected into a kernel-log file, not
# into the GPU) for GPU 0's real PCI address makes it unhealthy; gpuwarden is restarted with
# the line gone from the log and the GPU stays unhealthy; `events` lists the XID once with
# the real serial; `report` names it. Then a "reboot" (another boot id) clears the verdict.
#
#   scripts/gpu/run.sh journal-check      (as root, on the GPU machine)
set -euo pipefail
source "$(dirname "$(readlink -f "$0")")/lib.sh"
echo "GPU 0: $(nvidia-smi --query-gpu=name,serial,pci.bus_id --format=csv,noheader -i 0)"
echo "3,900001,1000000,-;NVRM: Xid (PCI:$(gw_kmsg_bus 0)): 48, pid=1, name=journal-check, DBE (injected by scripts/gpu/journal-check.sh)" > "$GW_WORK/kmsg"
cp /proc/sys/kernel/random/boot_id "$GW_WORK/boot_id"
GW_BOOT_ID_FILE=$GW_WORK/boot_id gw_config <<YAML
xid:
  kernel_log_path: $GW_WORK/kmsg
YAML
unhealthy='^gpu_health\{gpu="0".*state="unhealthy".*\} 1'
show() { gw_metrics '^(gpu_health\{gpu="0".*state="unhealthy"|gpu_xid_errors_total\{gpu="0"|gpuwarden_journal_up)'; }
gw_start; gw_wait_metric "$unhealthy" 20 || gw_fail "GPU 0 not unhealthy after the XID"
echo "== first start, the XID in the kernel log"; show
gw_wait_row xid || gw_fail "no xid row in the journal"
gw_stop
: > "$GW_WORK/kmsg"
gw_start; gw_wait_metric "$unhealthy" 20 || gw_fail "the restart forgot the XID"
echo "== restarted, the kernel log empty"; show
echo "== gpuwarden events --kind xid"; gw_events --kind xid | tee "$GW_OUT/events-xid.txt"
echo "== gpuwarden report --gpu 0 (head)"; "$GW_BIN" report --state "$GW_STATE" --gpu 0 | sed -n 1,16p
gw_stop
echo "00000000-0000-4000-8000-00000000cafe" > "$GW_WORK/boot_id"
gw_start; echo "== after a reboot (another boot id)"; show
[ -z "$(gw_metrics "$unhealthy")" ] || gw_fail "the verdict did not start fresh after the reboot"
gw_stop
echo "== all rows"; gw_events | tee "$GW_OUT/events.txt"
echo "== journal-check: all checks passed"
