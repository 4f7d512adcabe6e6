#!/bin/bash
# The verdict through a reset's hand-over, and the stop's time, on a real GPU (never reset:
# the reset command is a stand-in that lists who holds /dev/nvidia* and exits 0).
#
#   scripts/gpu/handover-check.sh BINARY OUTDIR
#
# 1. The healing chain with the verdict asked every 0.1 s, as a Slurm check at any moment
#    would: a real Xid 31 from a faulting CuPy kernel (policy {31: fatal}), the report a Slurm
#    check sends (drained by gpuwarden, no job), the stand-in reset, the real CUDA probe, back
#    to ok; then SIGTERM, a restart over the same journal, the verdict asked throughout.
#    handover.txt has the folded exit codes (0 healthy, 1 unhealthy, 2 no daemon) and every
#    answer with its time; the chain must read 0.. 1.. 0 with no 0 between the first 1 and
#    the last, and no 1 after the restart.
# 2. Exit on SIGTERM, three times at defaults and three with every feature on
#    (every-feature.sh): the milliseconds from the signal to the process's end, the daemon's
#    own "stopped in N ms; the last to stop: ..." line, and the exit status.
# PHASES=exit runs only the second part.
set -u
bin=$(readlink -f "$1"); out=$2
mkdir -p "$out"
work=$(mktemp -d /var/tmp/gw-handover.XXXXXX)
summary=$out/handover.txt
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }
say "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
here=$(dirname "$(readlink -f "$0")")
cat >"$work/config.yaml" <<YAML
listen: 127.0.0.1:9431
state:
  path: $work/state.db
local_api:
  socket: $work/gw.sock
health:
  xid_severity: {31: fatal}
probe:
  schedule: false
remediation:
  mode: auto
  reset_command: "$here/nvidia-holders.sh {pci_bus_id}"
  persistence_off_command: "/bin/echo (not run on a lent GPU) nvidia-smi -i {pci_bus_id} -pm 0"
  persistence_on_command: "/bin/echo (not run on a lent GPU) nvidia-smi -i {pci_bus_id} -pm 1"
  reboot_marker: $work/reboot-required
  pause_file: $work/pause
YAML
start_daemon() {
    "$bin" run --config "$work/config.yaml" >>"$out/daemon.log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do curl -sf http://127.0.0.1:9431/healthz >/dev/null 2>&1 && break; sleep 0.1; done
}
stop_daemon() {  # sets $stopped: the milliseconds from SIGTERM to the end, and the exit status
    local t0 t1 status
    t0=$(date +%s%N); kill -TERM "$pid"
    while kill -0 "$pid" 2>/dev/null; do sleep 0.002; done
    t1=$(date +%s%N); wait "$pid"; status=$?
    stopped="$(( (t1 - t0) / 1000000 )) ms, exit $status"
}
poll() {  # the verdict every 0.1 s until $work/stop-polling exists
    while [ ! -e "$work/stop-polling" ]; do
        answer=$("$bin" health --socket "$work/gw.sock" 2>/dev/null); code=$?
        line=${answer%%$'\n'*}
        echo "$(date +%s.%N) $code $line" >>"$work/asks.txt"
        sleep 0.1
    done
}
if [ "${PHASES:-chain,exit}" != exit ]; then
start_daemon
sleep 6
: >"$work/asks.txt"
poll &
poller=$!
python3 "$here/provoke-xid31.py" >>"$summary" 2>&1
t_fault=$(date +%s.%N)
for _ in $(seq 100); do "$bin" health --socket "$work/gw.sock" >/dev/null 2>&1; [ $? = 1 ] && break; sleep 0.1; done
say "unhealthy $(awk -v a="$(date +%s.%N)" -v b="$t_fault" 'BEGIN{printf "%.1f", a-b}') s after the fault"
"$bin" health report --node gpuwarden --jobs 0 --socket "$work/gw.sock" >>"$summary" 2>&1
t_report=$(date +%s.%N)
for _ in $(seq 240); do
    "$bin" health --socket "$work/gw.sock" >/dev/null 2>&1 && grep -q "reset done" "$out/daemon.log" && break
    sleep 0.25
done
say "ok again $(awk -v a="$(date +%s.%N)" -v b="$t_report" 'BEGIN{printf "%.1f", a-b}') s after the report"
sleep 3
stop_daemon; say "stop after the chain: $stopped"
sleep 1
start_daemon
sleep 8
touch "$work/stop-polling"; wait "$poller"
stop_daemon; say "stop after the restart: $stopped"
python3 - "$work/asks.txt" "$t_fault" >>"$summary" <<'PY'
import sys
asks = [l.split(" ", 2) for l in open(sys.argv[1]) if l.strip()]
t0 = float(sys.argv[2])
codes = [int(a[1]) for a in asks]
runs = [c for i, c in enumerate(codes) if i == 0 or codes[i - 1] != c]
print("asks:", len(asks), "folded codes:", runs)
ones = [i for i, c in enumerate(codes) if c == 1]
if ones:
    held = all(c == 1 for c in codes[ones[0]:ones[-1] + 1])
    print("held unhealthy without a break from the first 1 to the last:", held,
          f"({float(asks[ones[0]][0]) - t0:.1f} s to {float(asks[ones[-1]][0]) - t0:.1f} s after the fault)")
for a in asks:
    print(f"{float(a[0]) - t0:8.2f} {a[1]} {a[2].strip() if len(a) > 2 else ''}")
PY
grep -E "remediation|reset|validat|NVML|stopped" "$out/daemon.log" | head -40 >>"$summary"
"$bin" events --state "$work/state.db" --json >"$out/events.json" 2>&1
fi

say "== exit on SIGTERM"
source "$here/every-feature.sh"
mkdir -p "$work/jobs"; echo 48217 >"$work/jobs/0"
for features in defaults all; do
    for i in 1 2 3; do
        rm -f "$work/state2.db"*
        if [ $features = defaults ]; then
            printf 'listen: 127.0.0.1:9432\nstate:\n  path: %s\n' "$work/state2.db" >"$work/config2.yaml"
        else
            { echo "listen: 127.0.0.1:9432"; every_feature_yaml "$work/jobs"; printf 'state:\n  path: %s\n' "$work/state2.db"; } >"$work/config2.yaml"
        fi
        "$bin" run --config "$work/config2.yaml" >"$work/exit.log" 2>&1 &
        pid=$!
        sleep 10
        stop_daemon
        say "$features $i: $stopped; $(grep -o 'stopped in.*' "$work/exit.log")"
    done
done
rm -rf "$work"
