#!/usr/bin/env bash
# Where one daemon's poll coordinator (and GPU thread) spend their CPU on this machine: perf
# stat (hardware counters where the machine has them; a KVM guest often has none) and perf
# record of the coordinator, flat and with call graphs, on a daemon at its defaults
# (docs/performance.md, "Fewer instructions a round, the runtime on one beat").
#   sudo scripts/gpu/coordinator-profile.sh BINARY     (on the GPU machine)
# PERF: the perf binary (default: perf on the PATH; one carried over with its libraries works
# with LD_LIBRARY_PATH). OUT: where the reports go (default: a new temporary directory).
# SETTLE (75 s): past the start-up and its page-out.
set -euo pipefail
bin=$(readlink -f "$1")
perf=${PERF:-perf}
out=${OUT:-$(mktemp -d)}
settle=${SETTLE:-75}
work=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
"$perf" --version
cp "$bin" "$work/gpuwarden"
printf 'listen: 127.0.0.1:9555\nlocal_api:\n  socket: %s/api.sock\nstate:\n  path: %s/state.db\n' "$work" "$work" > "$work/config.yaml"
"$work/gpuwarden" run --config "$work/config.yaml" > "$work/log" 2>&1 &
pid=$!
sleep "$settle"
thread() { for t in /proc/"$pid"/task/*; do if [ "$(cat "$t/comm")" = "$1" ]; then basename "$t"; fi; done; }
coordinator=$(thread poll-coordinato)
gpu=$(thread poll-gpu0)
echo "daemon $pid: coordinator thread $coordinator, GPU thread $gpu"
events=task-clock,context-switches,cpu-migrations,cycles,instructions,cache-misses,L1-icache-load-misses,L1-dcache-load-misses,iTLB-load-misses,dTLB-load-misses
"$perf" stat -e "$events" -t "$coordinator" -- sleep 30 2> "$out/stat-coordinator.txt"
"$perf" stat -e "$events" -t "$gpu" -- sleep 30 2> "$out/stat-gpu.txt"
"$perf" record -e cpu-clock -F 20000 -t "$coordinator" -o "$work/flat.data" -- sleep 40 2> "$out/record-flat.txt"
"$perf" report -i "$work/flat.data" --sort sym --stdio 2>/dev/null | grep -v '^#' | grep -v '^$' | head -80 > "$out/coordinator-flat.txt"
"$perf" record -e cpu-clock -F 5000 --call-graph dwarf,8192 -t "$coordinator" -o "$work/dwarf.data" -- sleep 60 2> "$out/record-dwarf.txt"
"$perf" report -i "$work/dwarf.data" --children --sort sym --stdio -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | head -100 > "$out/coordinator-children.txt"
echo "log warnings: $(grep -c WARN "$work/log" || true)"
cat "$out/stat-coordinator.txt" "$out/stat-gpu.txt"
head -30 "$out/coordinator-flat.txt"
echo "reports in $out"
