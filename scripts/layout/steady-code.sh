#!/usr/bin/env bash
# Regenerates scripts/layout/steady-code.ld, the linker script that gathers the functions the
# settled daemon runs into one section (.text.steady) ahead of the rest of its code, so that
# the pages it keeps resident hold little else (docs/performance.md, "The steady state's code
# in one place"). build.rs passes the script to release builds.
#
# How: a release build runs over the simulated NVML library with the demo's eight GPUs and
# every feature on, under valgrind's callgrind with instrumentation off; after SETTLE seconds
# (start-up, every tier's first round and the page-out of start-up code are over) it is
# switched on, and the functions that ran in the next WINDOW seconds (past a topology round,
# every 120 s) are what steady-code.py writes out. Prometheus scrapes it every 15 s all along
# (a node that is never scraped is not one anyone runs): rendering /metrics is steady-state
# code too, and left out it costs a scraped daemon 1.5 MiB of code pages scattered over the
# rest (docs/performance.md, "The layout, made scraped").
#
#   scripts/layout/steady-code.sh [SETTLE [WINDOW]]      (defaults 140 and 300; needs valgrind)
set -euo pipefail
cd "$(dirname "$0")/../.."
settle=${1:-140}
window=${2:-300}
command -v valgrind >/dev/null || { echo "valgrind is needed (apt-get install valgrind)" >&2; exit 1; }
source scripts/gpu/every-feature.sh

# The layout being measured must not depend on the layout in use: build without it.
GPUWARDEN_STEADY_CODE=0 cargo build --release --workspace
work=$(mktemp -d /var/tmp/gpuwarden-layout.XXXXXX)
trap 'kill "$valgrind_pid" "${scraper_pid:-}" 2>/dev/null || true; rm -rf "$work"' EXIT
cp target/release/gpuwarden "$work/gpuwarden"
mkdir -p "$work/jobs"
echo 48217 > "$work/jobs/7"
cp config/demo-kernel-log.txt "$work/kmsg"
# A fixed port, to scrape it (one nothing else here listens on).
port=${PORT:-9467}
cat > "$work/config.yaml" <<YAML
listen: 127.0.0.1:$port
nvml:
  library_path: $PWD/target/release/libgpuwarden_sim_nvml.so
local_api:
  socket: $work/api.sock
state:
  path: $work/state.db
xid:
  kernel_log_path: $work/kmsg
$(every_feature_yaml "$work/jobs")
YAML
# Under valgrind the journal's worker cannot start (it is /proc/self/exe, valgrind's own binary
# there): the list holds the journal's retry every 30 s, not its writes (a settled node
# writes nothing).
GPUWARDEN_SIM_NVML_SCENARIO=$PWD/config/demo-scenario.yaml valgrind --tool=callgrind \
  --instr-atstart=no --demangle=no --dump-instr=no \
  --callgrind-out-file="$work/callgrind.out" "$work/gpuwarden" run --config "$work/config.yaml" \
  > "$work/daemon.log" 2>&1 &
valgrind_pid=$!
# Scraped every 15 s, in the text format, as Prometheus does by default.
( while kill -0 "$valgrind_pid" 2>/dev/null; do
    PYTHONPATH=scripts/gpu python3 -c 'import sys, metrics_text; metrics_text.scrape(sys.argv[1])' "$port" 2>/dev/null || true
    sleep 15
  done ) &
scraper_pid=$!
sleep "$settle"
callgrind_control -i on "$valgrind_pid" > /dev/null
sleep "$window"
callgrind_control -d "$valgrind_pid" > /dev/null
sleep 5
kill "$valgrind_pid"
wait "$valgrind_pid" 2>/dev/null || true
if grep -E 'WARN|ERROR' "$work/daemon.log" | grep -v '^==' | head -5; then
  echo "(the daemon's warnings above: check they are the demo's own)" >&2
fi
python3 scripts/layout/steady-code.py "$work/callgrind.out.1" "$work/gpuwarden" > scripts/layout/steady-code.ld
echo "wrote scripts/layout/steady-code.ld: $(grep -c '^    \*(' scripts/layout/steady-code.ld) patterns"
