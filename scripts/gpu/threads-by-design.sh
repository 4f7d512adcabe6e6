#!/bin/bash
# scripts/gpu/run.sh threads-by-design WINDOW SETTLE [BIN...]: each thread's CPU (schedstat) and
# task switches over WINDOW seconds, after SETTLE, of three plain C loops, three C loops in
# gpuwarden's old shape (handoff) and two daemons at defaults per BIN (default: the harness's
# binary), all in one window (NVML_INCLUDE: where nvml.h is).
set -e
source "$(dirname "$(readlink -f "$0")")/lib.sh"
window=$1; settle=$2; shift 2
[ $# -gt 0 ] || set -- "$GW_BIN"
gw_build_nvml_loop
set +e
w=$GW_WORK
echo "pci devices: $(ls /sys/bus/pci/devices | wc -l); nproc $(nproc); $(uname -r)"
declare -A pid; names=""
total=$((window + settle + 20))
for i in 1 2 3; do
  $w/nvml-loop $total > /dev/null 2>&1 & pid[plain$i]=$!; names="$names plain$i"
  $w/nvml-loop $total -1 handoff > /dev/null 2>&1 & pid[handoff$i]=$!; names="$names handoff$i"
done
port=9600; b=0
for bin in "$@"; do b=$((b+1)); for i in 1 2; do
  n=d$b-$i; port=$((port+1)); mkdir -p $w/$n; cp $bin $w/$n/gw
  printf 'listen: 127.0.0.1:%d\nlocal_api:\n  socket: %s\nstate:\n  path: %s\n%s\n' $port $w/$n/api.sock $w/$n/state.db "${EXTRA_YAML:-}" > $w/$n/c.yaml
  $w/$n/gw run --config $w/$n/c.yaml > $w/$n.log 2>&1 & pid[$n]=$!; names="$names $n"
done; done
sleep $settle
snap() { for t in /proc/$1/task/*; do echo "$(basename $t):$(tr ' ' _ < $t/comm) $(awk '{print $1, $2, $3}' $t/schedstat)"; done; }
for n in $names; do snap ${pid[$n]} > $w/$n.0; done
sleep $window
for n in $names; do snap ${pid[$n]} > $w/$n.1; done
for n in $names; do
  echo "== $n (ms over ${window}s; per-thread: cpu_ms  switches)"
  join $w/$n.0 $w/$n.1 | awk '{printf "  %-28s %8.2f ms %6d sw\n", $1, ($5-$2)/1e6, $7-$4; s+=($5-$2)} END {printf "  %-28s %8.2f ms\n", "TOTAL", s/1e6}'
done
