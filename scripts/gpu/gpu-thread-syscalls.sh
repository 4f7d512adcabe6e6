#!/usr/bin/env bash
# The C loop's GPU thread against the daemon's, one of each side by side: perf stat (software
# events) and a cpu-clock profile of each thread, then every ioctl each makes, with its time
# and the NVML function and caller it came from (strace -T, then strace -k), by second of the
# window (docs/performance.md, "The loop asked for other fields").
#   sudo scripts/gpu/run.sh gpu-thread-syscalls [BINARY]     (on the GPU machine; BINARY
#   defaults to the harness's)
# STRACE / PERF: the programs (a GPU machine without them gets this machine's through
# scripts/gpu/carry-tools.sh); NVML_INCLUDE: where nvml.h is. Without PERF the perf steps are
# left out. The windows, in seconds: SETTLE (45), STAT (perf stat, 60), RECORD (perf
# record, 120), TRACE (strace -T, 40), STACKS (strace -k, 12).
set -euo pipefail
source "$(dirname "$(readlink -f "$0")")/lib.sh"
bin=$(readlink -f "${1:-$GW_BIN}")
here=$(dirname "$(readlink -f "$0")")
strace=${STRACE:-strace}
command -v "$strace" > /dev/null || {
  echo "gpu-thread-syscalls: no strace ($strace): install it, or carry one over (scripts/gpu/carry-tools.sh) and set STRACE" >&2
  exit 2
}
work=$GW_WORK
gw_build_nvml_loop
"$work/nvml-loop" 600 0.25 > "$work/loop.log" 2>&1 &
loop=$!
# Its own copy, at its defaults, as coordinator-profile.sh runs it.
cp "$bin" "$work/gpuwarden"
gw_config < /dev/null
GW_BIN=$work/gpuwarden gw_start
daemon=$GW_PID
sleep "${SETTLE:-45}"
thread_of() { for t in /proc/"$1"/task/*; do [ "$(cat "$t/comm")" = "$2" ] && basename "$t"; done; }
declare -A tid=([loop]=$(thread_of "$loop" loop-gpu0) [daemon]=$(thread_of "$daemon" poll-gpu0))
echo "GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1); loop thread ${tid[loop]}, daemon thread ${tid[daemon]}"
if [ -n "${PERF:-}" ]; then
  steps=()
  for n in loop daemon; do
    "$PERF" stat -e task-clock,context-switches,cpu-migrations,page-faults -t "${tid[$n]}" -- sleep "${STAT:-60}" 2> "$work/stat-$n" &
    steps+=($!)
  done
  wait "${steps[@]}"
  for n in loop daemon; do echo "== perf stat, $n's GPU thread, ${STAT:-60} s"; grep -E 'task-clock|switches|migrations|faults' "$work/stat-$n"; done
  # No hardware counters in a VM: where each thread's time goes, by sampling the CPU clock.
  steps=()
  for n in loop daemon; do
    "$PERF" record -e cpu-clock -F 20000 -t "${tid[$n]}" -o "$work/$n.data" -- sleep "${RECORD:-120}" 2> /dev/null &
    steps+=($!)
  done
  wait "${steps[@]}"
  for n in loop daemon; do
    echo "== perf record, $n's GPU thread, ${RECORD:-120} s: samples by object, then the top symbols"
    "$PERF" report -i "$work/$n.data" --sort dso --stdio 2> /dev/null | grep -v '^#' | grep -v '^$' | sed -n '1,8p'
    "$PERF" report -i "$work/$n.data" --sort dso,sym --stdio 2> /dev/null | grep -v '^#' | grep -v '^$' | sed -n '1,12p'
  done
fi
# strace ends when timeout interrupts it, with a status that is not an error here.
steps=()
for n in loop daemon; do
  timeout -s INT "${TRACE:-40}" "$strace" -T -tt -e trace=ioctl -p "${tid[$n]}" -o "$work/$n.trace" 2> /dev/null &
  steps+=($!)
done
wait "${steps[@]}" || true
for n in loop daemon; do
  echo "== $n: ioctls by second of the minute (count, microseconds in all, those over 150 us)"
  awk '{ t = $NF; gsub(/[<>]/, "", t); us = t * 1e6; s = substr($1, 7, 2); c[s]++; sum[s] += us
         if (us > 150) big[s] = big[s] " " int(us) }
       END { for (s in c) printf "  %s %3d %7d %s\n", s, c[s], sum[s], big[s] }' "$work/$n.trace" | sort
done
steps=()
for n in loop daemon; do
  timeout -s INT "${STACKS:-12}" "$strace" -k -T -tt -e trace=ioctl -p "${tid[$n]}" -o "$work/$n.stacks" 2> /dev/null &
  steps+=($!)
done
wait "${steps[@]}" || true
for n in loop daemon; do
  echo "== $n: each ioctl (time, microseconds), the NVML function it came from (the nearest exported symbol), the caller"
  awk '/ioctl\(/ { t = $NF; gsub(/[<>]/, "", t); head = $1 " " int(t * 1e6); nvml = ""; next }
       /^ > / { if (nvml == "" && /libnvidia-ml/ && !/UnrepairableMemoryFlag|InternalGetExportTable/) { match($0, /\(nvml[A-Za-z_0-9]*/); nvml = substr($0, RSTART + 1, RLENGTH - 1) }
                if (head != "" && nvml != "" && (/\/gpuwarden\(/ || /nvml-loop\(/)) { match($0, /\(.*\+/); print "  " head, nvml, substr($0, RSTART + 1, RLENGTH - 2); head = "" } }' "$work/$n.stacks"
done
