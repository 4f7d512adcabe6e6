#!/usr/bin/env bash
# gpuwarden's CPU and memory against the floor: scripts/gpu/nvml-loop.c (the same NVML calls
# at the same cadence, nothing else), the daemon at its defaults and the daemon with every
# feature on, all in the same window (docs/performance.md, "Against a C loop").
#   sudo scripts/gpu/run.sh cost-vs-loop [BINARY [WINDOW_SECONDS]]     (on the GPU machine;
#   BINARY defaults to the harness's)
# Two identical processes polling one GPU side by side differ by up to 40 % in the driver's
# CPU (docs/results/two-loops-two-daemons-2026-11-26-h100.txt), so COPIES (2) loops and COPIES
# daemons at defaults run, each its own copy of the binary, and the groups' means are
# compared. The window starts after SETTLE (130) seconds: past the start-up and the first
# rounds of every tier (topology: 120 s). Prints each one's CPU over the window (schedstat, nanoseconds, all threads) as a
# share of a core, by thread, and RSS at the end. NVML_INCLUDE: where nvml.h is, if not under
# /usr/local/cuda/include. BEFORE=path/to/an/older/gpuwarden adds COPIES of that build at its
# defaults to the same window (BEFORE_YAML: added to their config; BEFORE may be the same
# binary, to measure a setting). HANDOFF=1 adds COPIES of the loop in gpuwarden's shape (a
# coordinator thread asks the GPU threads each second: nvml-loop.c's `handoff`), what the
# hand-offs alone cost on this machine. LOOP_ALSO=path/to/another/loop.c adds COPIES of that
# loop (say, an older nvml-loop.c) as group "loopalso", to compare two loops in one window.
set -euo pipefail
source "$(dirname "$(readlink -f "$0")")/lib.sh"
bin=$(readlink -f "${1:-$GW_BIN}")
window=${2:-300}
copies=${COPIES:-2}
settle=${SETTLE:-130}
here=$(cd "$(dirname "$0")" && pwd)
work=$GW_WORK
gw_build_nvml_loop

declare -A pid port_of
procs=""
port=9410
# A daemon at its defaults: its own copy of the binary (two processes mapping one file share
# its pages, and the kernel pages out, MADV_PAGEOUT, only pages no one else maps), its own
# port, local API socket and journal.
start_daemon() { # NAME BINARY [EXTRA_YAML]
  local name=$1 binary=$2 extra=${3:-}
  port=$((port + 1))
  port_of[$name]=$port
  mkdir -p "$work/$name"
  local state
  # An EXTRA_YAML with a state section of its own (the journal off: path "") keeps it.
  state=$(printf 'state:\n  path: %s\n' "$work/$name/state.db")
  if grep -q '^state:' <<< "$extra"; then state=""; fi
  printf 'listen: 127.0.0.1:%d\nlocal_api:\n  socket: %s\n%s\n%s' \
    "$port" "$work/$name/api.sock" "$state" "$extra" > "$work/$name/config.yaml"
  cp "$binary" "$work/$name/gpuwarden"
  "$work/$name/gpuwarden" run --config "$work/$name/config.yaml" > "$work/$name.log" 2>&1 &
  pid[$name]=$!
  procs="$procs $name"
}
for i in $(seq "$copies"); do
  "$work/nvml-loop" $((window + settle + 30)) > "$work/loop$i.log" 2>&1 & pid[loop$i]=$!
  procs="$procs loop$i"
  start_daemon "defaults$i" "$bin"
done
if [ -n "${HANDOFF:-}" ]; then
  for i in $(seq "$copies"); do
    "$work/nvml-loop" $((window + settle + 30)) -1 handoff > "$work/handoff$i.log" 2>&1 & pid[handoff$i]=$!
    procs="$procs handoff$i"
  done
fi
if [ -n "${LOOP_ALSO:-}" ]; then
  gcc -O2 -o "$work/loop-also" "$LOOP_ALSO" -I"${NVML_INCLUDE:-/usr/local/cuda/include}" -l:libnvidia-ml.so.1 -lpthread
  for i in $(seq "$copies"); do
    "$work/loop-also" $((window + settle + 30)) > "$work/loopalso$i.log" 2>&1 & pid[loopalso$i]=$!
    procs="$procs loopalso$i"
  done
fi
start_daemon all "$bin" "$(gw_every_feature_yaml)
"
if [ -n "${BEFORE:-}" ]; then
  for i in $(seq "$copies"); do start_daemon "before$i" "$(readlink -f "$BEFORE")" "${BEFORE_YAML:-}"; done
fi
sleep "$settle"

# Beside gw_cpu_ns (lib.sh), the CPU from /proc/PID/stat (utime + stime, clock ticks):
# coarser, but it keeps the time of threads that ended in the window (the runtime's blocking threads for the periodic reads
# live 10 s), which the per-thread sum loses.
cpu_ticks() { awk '{ print $14 + $15 }' /proc/"$1"/stat; }
threads() { for t in /proc/"$1"/task/*; do echo "$(tr ' ' _ < "$t/comm") $(awk '{print $1}' "$t/schedstat")"; done | sort; }
# A daemon's own time on its GPU threads: its polls' wall time less the time inside NVML calls,
# from its own metrics (poll count, poll seconds, call seconds), at both ends of the window.
own_poll() { PYTHONPATH="$here" python3 -c 'import sys, metrics_text; print(metrics_text.scrape(sys.argv[1]))' "$1" 2>/dev/null | awk '
  /^gpuwarden_poll_duration_seconds_count\{backend="nvml"/ { n = $NF }
  /^gpuwarden_poll_duration_seconds_sum\{backend="nvml"/ { s = $NF }
  /^gpuwarden_vendor_call_seconds_total\{backend="nvml"/ { c += $NF }
  END { print n + 0, s + 0, c + 0 }'; }
for p in $procs; do gw_cpu_ns "${pid[$p]}" > "$work/$p.c0"; cpu_ticks "${pid[$p]}" > "$work/$p.k0"; threads "${pid[$p]}" > "$work/$p.t0"; done
for p in $procs; do [ -n "${port_of[$p]:-}" ] && own_poll "${port_of[$p]}" > "$work/$p.o0"; done
t0=$(date +%s.%N)
sleep "$window"
t1=$(date +%s.%N)
for p in $procs; do gw_cpu_ns "${pid[$p]}" > "$work/$p.c1"; cpu_ticks "${pid[$p]}" > "$work/$p.k1"; threads "${pid[$p]}" > "$work/$p.t1"; done
for p in $procs; do [ -n "${port_of[$p]:-}" ] && own_poll "${port_of[$p]}" > "$work/$p.o1"; done
elapsed=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
echo "window: $elapsed s after a settle of $settle s; $copies copies; GPUs: $(nvidia-smi -L | wc -l) ($(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1))"
for p in $procs; do
  ns=$(( $(cat "$work/$p.c1") - $(cat "$work/$p.c0") ))
  ticks=$(( $(cat "$work/$p.k1") - $(cat "$work/$p.k0") ))
  rss=$(awk '/VmRSS/ {print $2}' /proc/"${pid[$p]}"/status)
  echo "$p $ns $rss" >> "$work/summary"
  awk -v p="$p" -v ns="$ns" -v e="$elapsed" -v rss="$rss" -v ticks="$ticks" -v hz="$(getconf CLK_TCK)" \
    'BEGIN { printf "%-10s CPU %.4f %% of a core (%.1f ms in the window; %d ms by /proc/PID/stat), RSS %d KiB\n", p, ns / 1e7 / e, ns / 1e6, ticks * 1000 / hz, rss }'
done
echo "means by group (CPU ms in the window, share of a core, x the loops' mean; RSS KiB, over the loops' mean):"
awk -v e="$elapsed" '
  { g = $1; sub(/[0-9]+$/, "", g); n[g]++; cpu[g] += $2; rss[g] += $3; if (!(g in seen)) { seen[g] = 1; order[++k] = g } }
  END {
    lc = cpu["loop"] / n["loop"]; lr = rss["loop"] / n["loop"]
    for (i = 1; i <= k; i++) { g = order[i]; c = cpu[g] / n[g]; r = rss[g] / n[g]
      printf "  %-9s %8.1f ms  %.4f %%  %.2fx  RSS %8.0f KiB (%+.2f MiB)\n", g, c / 1e6, c / 1e7 / e, c / lc, r, (r - lr) / 1024 }
  }' "$work/summary"
for p in $procs; do
  echo "$p by thread (ms over the window; threads of one name summed):"
  join -a 2 -e 0 -o 0,1.2,2.2 <(awk '{a[$1]+=$2} END {for (k in a) print k, a[k]}' "$work/$p.t0" | sort) \
    <(awk '{a[$1]+=$2} END {for (k in a) print k, a[k]}' "$work/$p.t1" | sort) \
    | awk '{ printf "  %-22s %9.1f\n", $1, ($3 - $2) / 1e6 }' | sort -k2 -rn
done
echo "the daemons' own time a poll on their GPU threads (wall: poll time less NVML call time, over the window's polls):"
for p in $procs; do
  [ -s "$work/$p.o1" ] || continue
  read -r n0 s0 c0 < "$work/$p.o0"
  read -r n1 s1 c1 < "$work/$p.o1"
  awk -v p="$p" -v n="$((n1 - n0))" -v c0="$c0" -v c1="$c1" -v s0="$s0" -v s1="$s1" \
    'BEGIN { if (n > 0) printf "  %-10s %6d polls, %7.1f us a poll in the poll, %7.1f us in NVML calls, %6.1f us its own\n", p, n, (s1 - s0) / n * 1e6, (c1 - c0) / n * 1e6, ((s1 - s0) - (c1 - c0)) / n * 1e6 }'
done
# Where each one's resident memory is, by mapping (the RSS goal is the loop's + 4.5 MiB).
for p in loop1 defaults1 all; do
  echo "$p resident memory by mapping (KiB, 8 largest):"
  python3 "$here/rss-by-mapping.py" "${pid[$p]}" 8 | sed 's/^/  /'
done
# Of the binary's own mapping, which sections are resident.
for p in defaults1 all ${BEFORE:+before1}; do
  echo "$p's binary resident by section (KiB): $(python3 "$here/rss-by-section.py" "${pid[$p]}")"
done
for p in $procs; do
  case $p in loop* | handoff*) continue ;; esac
  echo "$p log warnings: $(grep -c -E 'WARN|ERROR' "$work/$p.log" || true)"
  grep -E 'WARN|ERROR' "$work/$p.log" | sed -n 1,5p || true
done
