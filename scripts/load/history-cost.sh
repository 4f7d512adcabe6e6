#!/usr/bin/env bash
# What the status page's history costs: two gpuwarden builds side by side on the same GPUs
# (a build without the history, and one with it), each polling at defaults for WINDOW seconds
# after SETTLE; prints RSS (VmRSS), CPU (% of a core from utime+stime) and the status page's
# render time (median of 20 requests of `/`, the journal's timeline included).
#   scripts/load/history-cost.sh BEFORE_BINARY AFTER_BINARY [SETTLE] [WINDOW]
# The rings are allocated whole at a GPU's first sample (every 10 s), so "full" is reached at
# once; SETTLE (default 30 s) covers start-up and a few samples. DEMO=1: over the demo's eight
# simulated GPUs (for the page's render time with 8 GPUs on a machine without them).
set -euo pipefail
before=$1 after=$2 settle=${3:-30} window=${4:-60}
work=$(mktemp -d)
pids=()
# The daemons are started in command substitutions (subshells): stop them by pid, with
# SIGTERM so that a demo removes its files.
stop_all() { kill -TERM "${pids[@]}" 2>/dev/null || true; sleep 2; rm -rf "$work"; }
trap stop_all EXIT
start() { # name binary port
  mkdir -p "$work/$1"
  printf 'listen: 127.0.0.1:%s\nstate:\n  path: %s/state.db\nlocal_api:\n  socket: %s/g.sock\n' \
    "$3" "$work/$1" "$work/$1" > "$work/$1/config.yaml"
  "$2" run --config "$work/$1/config.yaml" ${DEMO:+--demo} > "$work/$1/log" 2>&1 < /dev/null &
  echo $!
}
cpu_ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
rss_kib() { awk '/^VmRSS/{print $2}' "/proc/$1/status"; }
pid_before=$(start before "$before" 9311)
pid_after=$(start after "$after" 9312)
pids=("$pid_before" "$pid_after")
sleep "$settle"
t0_before=$(cpu_ticks "$pid_before"); t0_after=$(cpu_ticks "$pid_after")
sleep "$window"
t1_before=$(cpu_ticks "$pid_before"); t1_after=$(cpu_ticks "$pid_after")
hz=$(getconf CLK_TCK)
render() { # port
  for _ in $(seq 20); do curl -s -o /dev/null -w '%{time_total}\n' "http://127.0.0.1:$1/"; done | sort -n | sed -n 10p
}
for side in before after; do
  pid_var=pid_$side t0_var=t0_$side t1_var=t1_$side port=$([ $side = before ] && echo 9311 || echo 9312)
  pid=${!pid_var}
  cpu=$(awk -v a="${!t0_var}" -v b="${!t1_var}" -v hz="$hz" -v w="$window" 'BEGIN{printf "%.3f", (b-a)/hz/w*100}')
  printf '%s: RSS %s KiB, CPU %s %% of a core over %ss, page median %s s\n' \
    "$side" "$(rss_kib "$pid")" "$cpu" "$window" "$(render $port)"
done
curl -s "http://127.0.0.1:9312/api/v1/history?gpu=0&metric=gpu_temperature_celsius" | head -c 300; echo
