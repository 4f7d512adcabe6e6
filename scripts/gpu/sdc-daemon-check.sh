#!/usr/bin/env bash
# The correctness canary and the pattern test through the daemon on a real GPU: scheduled
# probes of only `sdc` and `memtest`, then what the journal kept (the agreement digest's `sdc`
# row) and what /metrics and `gpuwarden health` say. docs/probe.md cites the run.
#   scripts/gpu/sdc-daemon-check.sh ./gpuwarden OUT_DIR
set -euo pipefail
bin=$(readlink -f "${1:?usage: sdc-daemon-check.sh GPUWARDEN OUT_DIR}")
out=$(readlink -f "${2:?usage: sdc-daemon-check.sh GPUWARDEN OUT_DIR}")
mkdir -p "$out"
cat > "$out/config.yaml" <<YAML
listen: 127.0.0.1:19100
state: {path: $out/state.db}
local_api: {socket: $out/gpuwarden.sock}
probe:
  schedule: true
  interval: 15s
  tests: [sdc, memtest]
YAML
"$bin" run --config "$out/config.yaml" > "$out/daemon.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 120); do
  if curl -sf 127.0.0.1:19100/metrics | grep -q 'gpu_probe_pass{.*test="memtest"'; then break; fi
  sleep 1
done
curl -sf 127.0.0.1:19100/metrics | grep -E '^gpu_probe_(pass|runs_total)|sdc_suspect|hbm_pattern' > "$out/metrics.txt" || true
"$bin" health --socket "$out/gpuwarden.sock" > "$out/health.txt" || true
sleep 2
"$bin" events --state "$out/state.db" --kind sdc,memtest,probe --all --json > "$out/events.json"
kill $pid; wait $pid || true
trap - EXIT
cat "$out/metrics.txt"
head -3 "$out/health.txt"
python3 - "$out" <<'PY'
import json, sys
rows = json.load(open(f"{sys.argv[1]}/events.json"))
for r in rows:
    if r["kind"] in ("sdc", "memtest"):
        print(r["kind"], r["summary"])
print(sum(r["kind"] == "probe" for r in rows), "probe row(s)")
PY
