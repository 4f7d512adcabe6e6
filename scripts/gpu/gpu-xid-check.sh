#!/usr/bin/env bash
# XID sources on a real NVIDIA GPU: the daemon reads /dev/kmsg and registers an NVML event
# set, runs for RUN_SECONDS without errors, and (with PROVOKE_XID31=1) sees one real XID.
#
#   sudo PROVOKE_XID31=1 scripts/gpu/gpu-xid-check.sh [path/to/gpuwarden]
#
# PROVOKE_XID31=1 runs a one-thread CUDA kernel (through CuPy) that writes to an unmapped
# address: an application fault that the driver reports as Xid 31 (GPU memory page fault)
# and survives; the GPU stays healthy. Nothing else touches the GPU: no clock, power or MIG
# change, no reset. Exit status 0 when every check passes.
set -euo pipefail
BIN=${1:-./target/release/gpuwarden}
RUN_SECONDS=${RUN_SECONDS:-60}
PORT=${PORT:-19101}
WORK=$(mktemp -d)
DAEMON=
trap 'kill $DAEMON 2>/dev/null || true; [ -n "${SAVE_DIR:-}" ] && tar czf "$SAVE_DIR/gpu-xid-files.tgz" -C "$WORK" . 2>/dev/null; rm -rf "$WORK"' EXIT
fail() { echo "gpu-xid-check: FAILED: $*"; exit 1; }

echo "== $(date -u +%FT%TZ): $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
printf 'listen: 127.0.0.1:%s\n' "$PORT" > "$WORK/config.yaml"
"$BIN" run --config "$WORK/config.yaml" 2> "$WORK/daemon.log" &
DAEMON=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
sleep 2
curl -sf "http://127.0.0.1:$PORT/metrics" > "$WORK/start.txt"
grep -E '^gpuwarden_xid_(source_up|reports_total)' "$WORK/start.txt" || true
grep -q 'gpuwarden_xid_source_up{source="kernel_log"} 1' "$WORK/start.txt" || fail "kernel log not read"
grep -q 'gpuwarden_xid_source_up{source="nvml_events"} 1' "$WORK/start.txt" || fail "NVML event set not registered"

if [ "${PROVOKE_XID31:-0}" = 1 ]; then
  echo "== provoking Xid 31 with an out-of-bounds write"
  python3 "$(dirname "$(readlink -f "$0")")/provoke-xid31.py" || true
  sleep 5
  curl -sf "http://127.0.0.1:$PORT/metrics" > "$WORK/after_xid.txt"
  echo "-- kernel log:"; dmesg | grep -E 'NVRM: Xid' | tail -3
  echo "-- gpuwarden:"; grep -E '^gpu_xid|^gpuwarden_xid_reports' "$WORK/after_xid.txt" || true
  grep -qE '^gpu_xid_errors_total\{.*xid="31".*\} 1(\.0)?$' "$WORK/after_xid.txt" || fail "Xid 31 not counted exactly once"
fi

left=$((RUN_SECONDS - 7)); [ "$left" -gt 0 ] && sleep "$left"
curl -sf "http://127.0.0.1:$PORT/metrics" > "$WORK/end.txt"
echo "== after ${RUN_SECONDS}s"
grep -E '^gpu_up|^gpu_health\{.*state="(ok|unhealthy)"|^gpuwarden_collector_errors|^gpuwarden_xid' "$WORK/end.txt" || true
echo "== daemon log"; cat "$WORK/daemon.log"
# An XID we provoked is logged by design; anything else at WARN or ERROR is a failure.
if grep -E ' (WARN|ERROR) ' "$WORK/daemon.log" | grep -vq 'Xid 31 '; then fail "the daemon logged warnings or errors"; fi
echo "== gpu-xid-check: all checks passed"
