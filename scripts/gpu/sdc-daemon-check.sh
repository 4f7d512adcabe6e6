#!/usr/bin/env bash
# The correctness canary and the pattern test through the daemon on a real GPU: scheduled
# probes of only `sdc` and `memtest`, then what the journal kept (the agreement digest's `sdc`
# row) and what /metrics and `gpuwarden health` say. docs/probe.md cites the run.
#   scripts/gpu/run.sh sdc-daemon-check
set -euo pipefail
source "$(dirname "$(readlink -f "$0")")/lib.sh"
gw_config <<YAML
probe:
  schedule: true
  interval: 15s
  tests: [sdc, memtest]
YAML
gw_start
gw_wait_metric 'gpu_probe_pass\{.*test="memtest"' 120 || gw_fail "no memtest result within 120 s"
gw_metrics '^gpu_probe_(pass|runs_total)|sdc_suspect|hbm_pattern' > "$GW_OUT/metrics.txt"
gw_health > "$GW_OUT/health.txt" || true
gw_wait_row sdc || gw_fail "no sdc row in the journal"
gw_events --kind sdc,memtest,probe --all --json > "$GW_OUT/events.json"
gw_stop
cat "$GW_OUT/metrics.txt"
head -3 "$GW_OUT/health.txt"
python3 "$(dirname "$(readlink -f "$0")")/journal_rows.py" "$GW_OUT/events.json" sdc memtest --count probe
