# Sourced by cost-vs-loop.sh, loop-phase-check.sh and loop-cpu-check.sh: a work directory that
# goes, with every process the caller started, when the caller exits; scripts/gpu/nvml-loop.c
# built into $work/nvml-loop (NVML_INCLUDE: where nvml.h is, if not under
# /usr/local/cuda/include); cpu_ns PID, a process's CPU in nanoseconds summed over its live
# threads (schedstat); and cpu_ms_over, that over a window for several processes.
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait; rm -rf "$work"' EXIT
gcc -O2 -o "$work/nvml-loop" "$(dirname "${BASH_SOURCE[0]}")/nvml-loop.c" \
  -I"${NVML_INCLUDE:-/usr/local/cuda/include}" -l:libnvidia-ml.so.1 -lpthread
# printf, not print: awk may print a sum past 2^31 as 2.4e+09.
cpu_ns() { cat /proc/"$1"/task/*/schedstat | awk '{ s += $1 } END { printf "%d\n", s }'; }
# cpu_ms_over WINDOW NAME...: after 15 s of settling, each named process's CPU (ms, from the
# caller's pid[NAME]) over the next WINDOW seconds, into ms[NAME] (loop-phase-check.sh and
# loop-cpu-check.sh).
cpu_ms_over() {
  local window=$1 n
  shift
  declare -gA ms
  declare -A before
  sleep 15
  for n in "$@"; do before[$n]=$(cpu_ns "${pid[$n]}"); done
  sleep "$window"
  for n in "$@"; do
    ms[$n]=$(awk -v ns=$(( $(cpu_ns "${pid[$n]}") - ${before[$n]} )) 'BEGIN { printf "%.1f", ns / 1e6 }')
  done
}
