#!/usr/bin/env bash
# Benchmarks for docs/performance.md: scrape latency (p50, p99) at 8 and 64 simulated GPUs
# under 1 and 64 concurrent scrapers, 1000 concurrent scrapers for 30 s, RSS at rest, CPU per
# poll per GPU, and render time per series (cargo bench --bench render).
#   scripts/load/bench.sh                  (needs: wrk; the release build)
#   BENCH_ONLY=scrapes scripts/load/bench.sh   only the scrape-latency table
# On a machine without Rust (the GPU machines) carry target/release/gpuwarden and
# target/release/libgpuwarden_sim_nvml.so: without cargo the build and the render benchmark
# are skipped.
# Run it on a quiet machine: it measures time.
set -euo pipefail
cd "$(dirname "$0")/../.."
if command -v cargo >/dev/null 2>&1; then
  cargo build --release --workspace >/dev/null 2>&1
fi
WORK=$(mktemp -d)
PID=
trap 'kill $PID 2>/dev/null || true; rm -rf "$WORK"' EXIT
LIB=$PWD/target/release/libgpuwarden_sim_nvml.so

# A scenario of G GPUs: the demo's eight, repeated with ids of their own.
scenario() {
  python3 - "$1" <<'PY'
import sys
g = int(sys.argv[1])
demo = open("config/demo-scenario.yaml").read()
head, devices = demo.split("devices:\n", 1)
blocks = ["  - name:" + b for b in devices.split("  - name:")[1:]]
out = []
for i in range(g):
    b = blocks[i % 8].replace("-00000000000%d\n" % (i % 8), "-%012d\n" % i)
    b = b.replace('pci_bus_id: "00000000:', 'pci_bus_id: "0000%04X:' % i)
    out.append(b)
print(head + "devices:\n" + "".join(out), end="")
PY
}

start_daemon() {  # GPUs, poll interval
  scenario "$1" > "$WORK/scenario.yaml"
  : > "$WORK/kmsg"
  PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  printf 'listen: 127.0.0.1:%s\npoll:\n  interval: %s\n  timeout: 500ms\nnvml:\n  library_path: %s\nxid:\n  kernel_log_path: %s\n' \
    "$PORT" "$2" "$LIB" "$WORK/kmsg" > "$WORK/config.yaml"
  GPUWARDEN_SIM_NVML_SCENARIO="$WORK/scenario.yaml" RUST_LOG=warn target/release/gpuwarden run --config "$WORK/config.yaml" 2>"$WORK/log" &
  PID=$!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && return; sleep 0.1; done
  echo "daemon did not start"; cat "$WORK/log"; exit 1
}
stop_daemon() { kill "$PID"; wait "$PID" 2>/dev/null || true; PID=; }
rss_kib() { awk '/^VmRSS:/ {print $2}' /proc/$PID/status; }
cpu_ticks() { awk '{print $14 + $15}' /proc/$PID/stat; }

echo "== machine: $(nproc) cores, $(uname -r), $(date -u +%FT%TZ)"
echo "== scrape latency (wrk, 15 s each, text format, GPUs polled every 1 s)"
printf '%5s %11s %9s %9s %12s %7s\n' GPUs scrapers p50 p99 requests/s errors
for gpus in 8 64; do
  start_daemon "$gpus" 1s
  sleep 2
  for conns in 1 64; do
    threads=$(( conns < 2 ? 1 : 2 ))
    out=$(wrk -t"$threads" -c"$conns" -d15s --latency "http://127.0.0.1:$PORT/metrics" 2>&1)
    p50=$(awk '/^ +50%/ {print $2}' <<<"$out")
    p99=$(awk '/^ +99%/ {print $2}' <<<"$out")
    rps=$(awk '/^Requests\/sec/ {print $2}' <<<"$out")
    errors=$(grep -E 'Non-2xx|Socket errors' <<<"$out" | tr '\n' ' ' || true)
    printf '%5s %11s %9s %9s %12s %7s\n' "$gpus" "$conns" "$p50" "$p99" "$rps" "${errors:-0}"
  done
  stop_daemon
done

if [ "${BENCH_ONLY:-}" = scrapes ]; then exit 0; fi

echo "== 1000 concurrent scrapers for 30 s (8 GPUs)"
start_daemon 8 1s
sleep 2
before=$(rss_kib)
out=$(wrk -t2 -c1000 -d30s --latency "http://127.0.0.1:$PORT/metrics" 2>&1)
after=$(rss_kib)
echo "$out" | grep -E 'Latency|50%|99%|requests in|Requests/sec|Socket errors|Non-2xx' || true
echo "RSS before $before KiB, after $after KiB"
stop_daemon

echo "== at rest: 8 GPUs polled every 1 s, nobody scraping, 60 s"
start_daemon 8 1s
sleep 5
t0=$(cpu_ticks); s0=$(date +%s.%N)
sleep 60
t1=$(cpu_ticks); s1=$(date +%s.%N)
hz=$(getconf CLK_TCK)
python3 - "$t0" "$t1" "$s0" "$s1" "$hz" "$(rss_kib)" <<'PY'
import sys
t0, t1, s0, s1, hz, rss = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
cpu = (t1 - t0) / hz
wall = s1 - s0
polls = wall * 8
print(f"RSS at rest: {rss / 1024:.1f} MiB")
print(f"CPU: {100 * cpu / wall:.2f}% of one core; {1e6 * cpu / polls:.0f} us per poll per GPU "
      f"(simulated NVML: the daemon's own cost, not the driver's)")
PY
stop_daemon

if command -v cargo >/dev/null 2>&1; then
  echo "== render time per series"
  cargo bench --bench render 2>/dev/null | tail -3
fi
