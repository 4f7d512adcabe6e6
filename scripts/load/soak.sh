#!/usr/bin/env bash
# Soak: the release daemon polls 8 simulated GPUs every 10 ms for DURATION seconds (default
# 600) while being scraped once a second; its RSS must not grow by 1 MiB or more between the
# end of the first minute (warm-up: allocator pools, caches) and the end.
#   scripts/load/soak.sh [DURATION]
set -euo pipefail
cd "$(dirname "$0")/../.."
DURATION=${1:-600}
[ -x target/release/gpuwarden ] || cargo build --release --workspace
WORK=$(mktemp -d)
trap 'kill $PID 2>/dev/null || true; rm -rf "$WORK"' EXIT
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cp config/demo-scenario.yaml "$WORK/scenario.yaml"
cp config/demo-kernel-log.txt "$WORK/kmsg"
cat > "$WORK/config.yaml" <<CONF
listen: 127.0.0.1:$PORT
poll:
  interval: 10ms
  timeout: 10ms
nvml:
  library_path: $PWD/target/release/libgpuwarden_sim_nvml.so
xid:
  kernel_log_path: $WORK/kmsg
CONF
GPUWARDEN_SIM_NVML_SCENARIO="$WORK/scenario.yaml" RUST_LOG=warn target/release/gpuwarden run --config "$WORK/config.yaml" 2>"$WORK/log" &
PID=$!
rss() { awk '/^VmRSS:/ {print $2}' /proc/$PID/status; }
start=$(date +%s)
warm=""
next_mark=0
printf '%8s %10s %10s\n' seconds rss_kib polls
while [ $(( $(date +%s) - start )) -lt "$DURATION" ]; do
  body=$(curl -sf "http://127.0.0.1:$PORT/metrics")
  elapsed=$(( $(date +%s) - start ))
  if [ "$elapsed" -ge "$next_mark" ]; then
    next_mark=$((next_mark + 60))
    polls=$(grep -E '^gpuwarden_poll_round_duration_seconds_count' <<<"$body" | awk '{print $2}')
    printf '%8d %10d %10s\n' "$elapsed" "$(rss)" "$polls"
    [ "$elapsed" -ge 60 ] && [ -z "$warm" ] && warm=$(rss)
  fi
  sleep 1
done
end=$(rss)
growth=$((end - warm))
echo "RSS after warm-up: $warm KiB; at the end: $end KiB; growth: $growth KiB"
# The demo's kernel log holds a critical XID, logged as a warning by design; a 10 ms deadline
# on a busy machine may make GPUs miss rounds (rate-limited warnings). Errors fail the soak.
echo "log lines: $(wc -l < "$WORK/log") ($(grep -c ' WARN ' "$WORK/log" || true) warnings)"
if grep -qE ' ERROR |panicked' "$WORK/log"; then echo "soak: FAILED: the daemon logged errors:"; cat "$WORK/log"; exit 1; fi
[ "$growth" -lt 1024 ] || { echo "soak: FAILED: RSS grew by $growth KiB"; exit 1; }
echo "soak: passed"
