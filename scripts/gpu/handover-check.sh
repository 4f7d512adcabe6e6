#!/usr/bin/env bash
# The verdict through a reset's hand-over, and the stop's time, on a real GPU (never reset:
# the reset command is a stand-in that lists who holds /dev/nvidia* and exits 0).
#
#   scripts/gpu/run.sh handover-check
#
# 1. The healing chain with the verdict asked every 0.1 s, as a Slurm check at any moment
#    would: a real Xid 31 from a faulting CuPy kernel (policy {31: fatal}), the report a Slurm
#    check sends (drained by gpuwarden, no job), the stand-in reset, the real CUDA probe, back
#    to ok; then SIGTERM, a restart over the same journal, the verdict asked throughout.
#    handover.txt has the folded exit codes (0 healthy, 1 unhealthy, 2 no daemon) and every
#    answer with its time; the chain must read 0.. 1.. 0 with no 0 between the first 1 and
#    the last, and no 1 after the restart.
# 2. Exit on SIGTERM, three times at defaults and three with every feature on
#    (lib.sh's gw_every_feature_yaml): the milliseconds from the signal to the process's end, the daemon's
#    own "stopped in N ms; the last to stop: ..." line, and the exit status.
# PHASES=exit runs only the second part.
set -u
source "$(dirname "$(readlink -f "$0")")/lib.sh"
here=$(dirname "$(readlink -f "$0")")
summary=$GW_OUT/handover.txt
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }
say "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
gw_config <<YAML
health:
  xid_severity: {31: fatal}
probe:
  schedule: false
remediation:
  mode: auto
  reset_command: "$here/nvidia-holders.sh {pci_bus_id}"
  persistence_off_command: "/bin/echo (not run on a lent GPU) nvidia-smi -i {pci_bus_id} -pm 0"
  persistence_on_command: "/bin/echo (not run on a lent GPU) nvidia-smi -i {pci_bus_id} -pm 1"
  reboot_marker: $GW_WORK/reboot-required
  pause_file: $GW_WORK/pause
YAML
timed_stop() {  # sets $stopped: the milliseconds from SIGTERM to the end, and the exit status
    local t0 t1 status
    t0=$(date +%s%N); kill -TERM "$GW_PID"
    while kill -0 "$GW_PID" 2>/dev/null; do sleep 0.002; done
    t1=$(date +%s%N); wait "$GW_PID"; status=$?
    GW_PID=
    stopped="$(( (t1 - t0) / 1000000 )) ms, exit $status"
}
poll() {  # the verdict every 0.1 s (the Slurm check's view) until $GW_WORK/stop-polling exists
    while [ ! -e "$GW_WORK/stop-polling" ]; do
        answer=$(gw_health 2>/dev/null); code=$?
        echo "$(date +%s.%N) $code ${answer%%$'\n'*}" >> "$GW_WORK/asks.txt"
        sleep 0.1
    done
}
health_exits() { gw_health > /dev/null 2>&1; [ $? = "$1" ]; }
verdict_is() { gw_until "$2" health_exits "$1"; }  # `gpuwarden health` exits $1, within $2 s
if [ "${PHASES:-chain,exit}" != exit ]; then
gw_start
: > "$GW_WORK/asks.txt"
poll &
poller=$!
python3 "$here/provoke-xid31.py" >> "$summary" 2>&1
t_fault=$(date +%s.%N)
verdict_is 1 10 || gw_fail "not unhealthy 10 s after the Xid 31"
say "unhealthy $(awk -v a="$(date +%s.%N)" -v b="$t_fault" 'BEGIN{printf "%.1f", a-b}') s after the fault"
"$GW_BIN" health report --node gpuwarden --jobs 0 --socket "$GW_SOCKET" >> "$summary" 2>&1
t_report=$(date +%s.%N)
gw_wait_log "reset done" 60 && verdict_is 0 60 || gw_fail "not back to ok within 60 s of the report"
say "ok again $(awk -v a="$(date +%s.%N)" -v b="$t_report" 'BEGIN{printf "%.1f", a-b}') s after the report"
# A few seconds of the verdict settled before the stop: a duration the poll above should cover.
sleep 3
timed_stop; say "stop after the chain: $stopped"
gw_start
# The verdict asked through the restart's first seconds (its seed, its first rounds).
sleep 5
touch "$GW_WORK/stop-polling"; wait "$poller"
timed_stop; say "stop after the restart: $stopped"
python3 "$here/verdict_asks.py" "$GW_WORK/asks.txt" "$t_fault" >> "$summary"
grep -E "remediation|reset|validat|NVML|stopped" "$GW_OUT/daemon.log" | head -40 >> "$summary"
gw_events --json > "$GW_OUT/events.json" 2>&1
fi

say "== exit on SIGTERM"
for features in defaults all; do
    for i in 1 2 3; do
        rm -f "$GW_STATE"*
        if [ $features = defaults ]; then
            gw_config < /dev/null
        else
            gw_every_feature_yaml | gw_config
        fi
        gw_start
        # Ten seconds of running (every feature's sources started and settled) before the stop.
        sleep 10
        log_lines=$(wc -l < "$GW_OUT/daemon.log")
        timed_stop
        say "$features $i: $stopped; $(tail -n +"$((log_lines + 1))" "$GW_OUT/daemon.log" | grep -o 'stopped in.*')"
    done
done
