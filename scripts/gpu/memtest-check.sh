#!/usr/bin/env bash
# The HBM pattern test on a real GPU (docs/probe.md, "HBM patterns"): `gpuwarden probe --tests
# memtest` on GPU N with the default share and budget, then over 0.85 of the free memory with
# the whole plan given time to finish; prints GB/s, the time per GiB and how many passes ran.
#   scripts/gpu/run.sh memtest-check [GPU]
set -euo pipefail
source "$(dirname "$(readlink -f "$0")")/lib.sh"
gpu=${1:-0}
"$GW_BIN" probe --gpu "$gpu" --tests memtest --json > "$GW_OUT/memtest-default.json"
# Then most of the memory (0.85 of the free, no 64 GiB cap), with the time to finish every pass.
cat > "$GW_OUT/long.yaml" <<YAML
probe:
  memtest_share: 0.85
  memtest_max_mib: 1048576
  durations: {memtest: 60s}
YAML
# The first run leaves the utilization NVML averages high for a few seconds: a sleep that means
# that time (the probe refuses a busy GPU).
sleep 10
"$GW_BIN" probe --config "$GW_OUT/long.yaml" --gpu "$gpu" --tests memtest --json > "$GW_OUT/memtest-long.json"
python3 "$(dirname "$(readlink -f "$0")")/memtest_figures.py" "$GW_OUT/memtest-default.json" "$GW_OUT/memtest-long.json"
