#!/usr/bin/env bash
# gpuwarden's CPU and memory against the floor: scripts/gpu/nvml-loop.c (the same NVML calls
# at the same cadence, nothing else), the daemon at its defaults and the daemon with every
# feature on, all three in the same window (docs/performance.md, "Against a C loop").
#   sudo scripts/gpu/cost-vs-loop.sh BINARY [WINDOW_SECONDS]     (on the GPU machine)
# Prints each one's CPU over the window (schedstat, nanoseconds, all threads) as a share of a
# core, the daemon's CPU by thread, and RSS at the end. NVML_INCLUDE: where nvml.h is, if not
# under /usr/local/cuda/include. BEFORE=path/to/an/older/gpuwarden adds that build at its
# defaults to the same window.
set -euo pipefail
bin=$(readlink -f "$1")
window=${2:-300}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait; rm -rf "$work"' EXIT
gcc -O2 -o "$work/nvml-loop" "$here/nvml-loop.c" -I"${NVML_INCLUDE:-/usr/local/cuda/include}" \
  -l:libnvidia-ml.so.1 -lpthread

mkdir -p /var/lib/gpuwarden /var/lib/gpuwarden-before "$work/jobs"
echo 48217 > "$work/jobs/0"
cat > "$work/defaults.yaml" <<YAML
listen: 127.0.0.1:9411
local_api:
  socket: $work/defaults.sock
YAML
procs="loop defaults all"
sed -e 's/9411/9413/' -e 's/defaults.sock/before.sock/' "$work/defaults.yaml" > "$work/before.yaml"
cat > "$work/all.yaml" <<YAML
listen: 127.0.0.1:9412
local_api:
  socket: $work/all.sock
compat:
  dcgm_exporter: true
nvlink:
  per_link: true
processes:
  per_process: true
hpc_jobs:
  mapping_dir: $work/jobs
state:
  path: $work/all.db
YAML
"$work/nvml-loop" $((window + 60)) > "$work/loop.log" 2>&1 & loop=$!
# A copy each: two processes mapping one file share its pages, and the kernel pages out
# (MADV_PAGEOUT, service::residency) only the pages no one else maps, so one file for both
# would leave each one's start-up code resident.
cp "$bin" "$work/gpuwarden-defaults"
cp "$bin" "$work/gpuwarden-all"
"$work/gpuwarden-defaults" run --config "$work/defaults.yaml" > "$work/defaults.log" 2>&1 & defaults=$!
"$work/gpuwarden-all" run --config "$work/all.yaml" > "$work/all.log" 2>&1 & all=$!
if [ -n "${BEFORE:-}" ]; then
  # Its journal beside the other's: the defaults' file is locked by the daemon above.
  printf 'state:\n  path: /var/lib/gpuwarden-before/state.db\n' >> "$work/before.yaml"
  "$(readlink -f "$BEFORE")" run --config "$work/before.yaml" > "$work/before.log" 2>&1 & before=$!
  procs="$procs before"
fi
# Past start-up, the first slow, costly, GPM and topology reads.
sleep 40

cpu_ns() { cat /proc/"$1"/task/*/schedstat | awk '{ s += $1 } END { print s }'; }
threads() { for t in /proc/"$1"/task/*; do echo "$(cat "$t/comm") $(awk '{print $1}' "$t/schedstat")"; done | sort; }
for p in $procs; do
  eval "pid=\$$p"; cpu_ns "$pid" > "$work/$p.c0"; threads "$pid" > "$work/$p.t0"
done
t0=$(date +%s.%N)
sleep "$window"
t1=$(date +%s.%N)
for p in $procs; do
  eval "pid=\$$p"; cpu_ns "$pid" > "$work/$p.c1"; threads "$pid" > "$work/$p.t1"
done
elapsed=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
echo "window: $elapsed s; GPUs: $(nvidia-smi -L | wc -l) ($(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1))"
for p in $procs; do
  eval "pid=\$$p"
  ns=$(( $(cat "$work/$p.c1") - $(cat "$work/$p.c0") ))
  rss=$(awk '/VmRSS/ {print $2}' /proc/"$pid"/status)
  awk -v p="$p" -v ns="$ns" -v e="$elapsed" -v rss="$rss" \
    'BEGIN { printf "%-9s CPU %.4f %% of a core (%.1f ms in the window), RSS %d KiB\n", p, ns / 1e7 / e, ns / 1e6, rss }'
done
for p in ${procs#loop }; do
  echo "$p by thread (ms over the window; threads of one name summed):"
  join -a 2 -e 0 -o 0,1.2,2.2 <(awk '{a[$1]+=$2} END {for (k in a) print k, a[k]}' "$work/$p.t0" | sort) \
    <(awk '{a[$1]+=$2} END {for (k in a) print k, a[k]}' "$work/$p.t1" | sort) \
    | awk '{ printf "  %-22s %9.1f\n", $1, ($3 - $2) / 1e6 }' | sort -k2 -rn
done
echo "loop by thread (ms over the window):"
join -a 2 -e 0 -o 0,1.2,2.2 <(awk '{a[$1]+=$2} END {for (k in a) print k, a[k]}' "$work/loop.t0" | sort) \
  <(awk '{a[$1]+=$2} END {for (k in a) print k, a[k]}' "$work/loop.t1" | sort) \
  | awk '{ printf "  %-22s %9.1f\n", $1, ($3 - $2) / 1e6 }' | sort -k2 -rn
# Where each one's resident memory is, by mapping (the RSS goal is the loop's + 4.5 MiB).
for p in $procs; do
  eval "pid=\$$p"
  echo "$p resident memory by mapping (KiB, 8 largest):"
  python3 "$here/rss-by-mapping.py" "$pid" 8 | sed 's/^/  /'
done
for p in ${procs#loop }; do
  echo "$p log warnings: $(grep -c -E 'WARN|ERROR' "$work/$p.log" || true)"
  grep -E 'WARN|ERROR' "$work/$p.log" | head -5 || true
done
