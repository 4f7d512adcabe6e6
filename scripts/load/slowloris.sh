#!/usr/bin/env bash
# A slowloris attack (slowhttptest, Debian package slowhttptest) on gpuwarden while a normal
# client scrapes every 0.5 s: prints the attack's own view (is the service available?) and
# the normal scrapes' latency and failures. docs/performance.md has a run.
#   scripts/load/slowloris.sh [CONNECTIONS] [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
CONNS=${1:-2000}
SECS=${2:-60}
cargo build --release --workspace >/dev/null 2>&1
WORK=$(mktemp -d)
PID=
trap 'kill $PID 2>/dev/null || true; rm -rf "$WORK"' EXIT
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
: > "$WORK/kmsg"
printf 'listen: 127.0.0.1:%s\nnvml:\n  library_path: %s\nxid:\n  kernel_log_path: %s\n' \
  "$PORT" "$PWD/target/release/libgpuwarden_sim_nvml.so" "$WORK/kmsg" > "$WORK/config.yaml"
GPUWARDEN_SIM_NVML_SCENARIO=config/demo-scenario.yaml RUST_LOG=warn \
  target/release/gpuwarden run --config "$WORK/config.yaml" 2>"$WORK/log" &
PID=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
echo "== $(nproc) cores, $(date -u +%FT%TZ): slowhttptest -H -c $CONNS for $SECS s, a scrape every 0.5 s"
# The normal client, in the background: one line per scrape, "<http code> <seconds>".
( end=$((SECONDS + SECS)); while [ $SECONDS -lt $end ]; do
    curl -s -o /dev/null -w '%{http_code} %{time_total}\n' --max-time 5 "http://127.0.0.1:$PORT/metrics" || echo "000 5"
    sleep 0.5
  done > "$WORK/scrapes" ) &
SCRAPER=$!
slowhttptest -H -c "$CONNS" -r 500 -i 10 -s 8192 -t GET -p 3 -l "$SECS" \
  -u "http://127.0.0.1:$PORT/metrics" -g -o "$WORK/slow" > "$WORK/slow.out" 2>&1 || true
wait $SCRAPER
echo "slowhttptest's view, second by second (its CSV: closed, pending, connected, service available):"
awk -F, 'NR > 1 {n++; if ($5 > 0) ok++; if ($4 > peak) peak = $4; last = $1} END {
  printf "  %d seconds recorded (it stops when the server has closed every connection, at %d s); service available in %d of them; at most %d attack connections open at once\n", n, last, ok, peak}' "$WORK/slow.csv"
echo "normal scrapes during the attack:"
sort -k2 -n "$WORK/scrapes" | awk '{n++; t[n]=$2; if ($1 != "200") bad++} END {printf "  %d scrapes, %d not 200; latency median %.1f ms, max %.1f ms\n", n, bad, t[int((n+1)/2)]*1000, t[n]*1000}'
echo "daemon RSS after: $(awk '/^VmRSS:/ {print $2, $3}' /proc/$PID/status)"
