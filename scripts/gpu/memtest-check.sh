#!/usr/bin/env bash
# The HBM pattern test on a real GPU (docs/probe.md, "HBM patterns"): `gpuwarden probe --tests
# memtest` on GPU N with the default share and budget, then over 0.85 of the free memory with
# the whole plan given time to finish; prints GB/s, the time per GiB and how many passes ran.
#   scripts/gpu/memtest-check.sh ./gpuwarden [GPU] [OUT_DIR]
set -euo pipefail
bin=${1:?usage: memtest-check.sh GPUWARDEN [GPU] [OUT_DIR]}
gpu=${2:-0}
out=${3:-.}
mkdir -p "$out"
"$bin" probe --gpu "$gpu" --tests memtest --json > "$out/memtest-default.json"
# Then most of the memory (0.85 of the free, no 64 GiB cap), with the time to finish every pass.
cat > "$out/long.yaml" <<YAML
probe:
  memtest_share: 0.85
  memtest_max_mib: 1048576
  durations: {memtest: 60s}
YAML
# The first run leaves the utilization NVML averages high for a few seconds: wait it out.
sleep 10
"$bin" probe --config "$out/long.yaml" --gpu "$gpu" --tests memtest --json > "$out/memtest-long.json"
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
for name in ["memtest-default.json", "memtest-long.json"]:
    r = json.load(open(f"{out}/{name}"))
    t = next(t for t in r["tests"] if t["test"] == "memtest")
    m = t["memtest"]
    gib = m["bytes"] / 2**30
    traversals = sum(6 if p["name"].startswith("moving") else 2 for p in m["passes"])
    print(f"{name}: {gib:.1f} GiB region, {len(m['passes'])} passes (complete {m['complete']}), "
          f"{m['seconds']:.2f} s GPU time, wall {r['wall_seconds']:.2f} s, {m['errors']} errors, "
          f"{t['sustained']/1e9:.0f} GB/s sustained pattern traffic, "
          f"{1000 * m['seconds'] / (gib * traversals):.3f} ms per GiB traversal, "
          f"{m['seconds'] / gib:.3f} s per GiB for the passes that ran")
PY
