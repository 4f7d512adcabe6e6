#!/usr/bin/env bash
# Where one daemon's poll coordinator (and GPU thread) spend their CPU on this machine: perf
# stat (hardware counters where the machine has them; a KVM guest often has none) and perf
# record of the coordinator, flat and with call graphs, on a daemon at its defaults
# (docs/performance.md, "Fewer instructions a round, the runtime on one beat").
#   sudo scripts/gpu/run.sh coordinator-profile [BINARY]     (on the GPU machine; BINARY
#   defaults to the harness's)
# PERF: the perf binary (default: perf on the PATH; a GPU machine without one gets this
# machine's through scripts/gpu/carry-tools.sh). The reports go to the run's results directory.
# SETTLE (75 s): past the start-up and its page-out. The windows, in seconds: STAT (each perf
# stat, 30), RECORD (the flat profile, 40), DWARF (the one with call graphs, 60).
set -euo pipefail
source "$(dirname "$(readlink -f "$0")")/lib.sh"
bin=$(readlink -f "${1:-$GW_BIN}")
perf=${PERF:-perf}
command -v "$perf" > /dev/null || {
  echo "coordinator-profile: no perf ($perf): install it, or carry one over (scripts/gpu/carry-tools.sh) and set PERF" >&2
  exit 2
}
out=$GW_OUT
settle=${SETTLE:-75}
work=$GW_WORK
"$perf" --version
# Its own copy: the kernel pages out (MADV_PAGEOUT) only pages no other process maps.
cp "$bin" "$work/gpuwarden"
gw_config < /dev/null
GW_BIN=$work/gpuwarden gw_start
pid=$GW_PID
sleep "$settle"
thread() { for t in /proc/"$pid"/task/*; do if [ "$(cat "$t/comm")" = "$1" ]; then basename "$t"; fi; done; }
coordinator=$(thread poll-coordinato)
gpu=$(thread poll-gpu0)
echo "daemon $pid: coordinator thread $coordinator, GPU thread $gpu"
events=task-clock,context-switches,cpu-migrations,cycles,instructions,cache-misses,L1-icache-load-misses,L1-dcache-load-misses,iTLB-load-misses,dTLB-load-misses
"$perf" stat -e "$events" -t "$coordinator" -- sleep "${STAT:-30}" 2> "$out/stat-coordinator.txt"
"$perf" stat -e "$events" -t "$gpu" -- sleep "${STAT:-30}" 2> "$out/stat-gpu.txt"
"$perf" record -e cpu-clock -F 20000 -t "$coordinator" -o "$work/flat.data" -- sleep "${RECORD:-40}" 2> "$out/record-flat.txt"
"$perf" report -i "$work/flat.data" --sort sym --stdio 2>/dev/null | grep -v '^#' | grep -v '^$' | sed -n '1,80p' > "$out/coordinator-flat.txt"
"$perf" record -e cpu-clock -F 5000 --call-graph dwarf,8192 -t "$coordinator" -o "$work/dwarf.data" -- sleep "${DWARF:-60}" 2> "$out/record-dwarf.txt"
"$perf" report -i "$work/dwarf.data" --children --sort sym --stdio -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | sed -n '1,100p' > "$out/coordinator-children.txt"
echo "log warnings: $(grep -c WARN "$GW_OUT/daemon.log" || true)"
cat "$out/stat-coordinator.txt" "$out/stat-gpu.txt"
head -30 "$out/coordinator-flat.txt"
echo "reports in $out"
