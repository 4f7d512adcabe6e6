#!/usr/bin/env bash
# The correctness canary on a real GPU (docs/probe.md, "Silent data corruption"): two runs of
# `gpuwarden probe --tests sdc` on GPU N must give the same digest, every exact check clean; then
# the default probe with and without the canary, for what it adds to a probe's wall time.
#   scripts/gpu/run.sh sdc-check [GPU]       (its files in the run's results directory)
set -euo pipefail
source "$(dirname "$(readlink -f "$0")")/lib.sh"
bin=$GW_BIN
gpu=${1:-0}
out=$GW_OUT
"$bin" probe --gpu "$gpu" --tests sdc --json > "$out/sdc-1.json"
"$bin" probe --gpu "$gpu" --tests sdc --json > "$out/sdc-2.json"
"$bin" probe --gpu "$gpu" --tests gemm_bf16,fma_fp32,hbm_copy,pcie_h2d,pcie_d2h --json > "$out/probe-without.json"
"$bin" probe --gpu "$gpu" --json > "$out/probe-with.json"
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
def load(name):
    return json.load(open(f"{out}/{name}"))
runs = [load("sdc-1.json"), load("sdc-2.json")]
for i, r in enumerate(runs, 1):
    t = next(t for t in r["tests"] if t["test"] == "sdc")
    s = t["sdc"]
    exact = ", ".join(f"{c['name']} {c['mismatches']}/{c['elements']}" for c in s["exact"])
    print(f"run {i}: wall {r['wall_seconds']:.2f} s, pass {t['pass']}, digest {s['digest']}, "
          f"{s['repeats']} repeats ({s['repeats_differing']} differing), side {s['side']}, "
          f"GEMM {t['sustained']/1e12:.0f} TFLOP/s sustained; exact: {exact}; key {s['key']}")
d1, d2 = (next(t for t in r["tests"] if t["test"] == "sdc")["sdc"] for r in runs)
same = d1["digest"] == d2["digest"] and d1["parts"] == d2["parts"]
print("digests identical across runs:", same)
without, with_ = load("probe-without.json"), load("probe-with.json")
print(f"default probe without sdc: {without['wall_seconds']:.2f} s; with sdc: {with_['wall_seconds']:.2f} s; "
      f"adds {with_['wall_seconds'] - without['wall_seconds']:.2f} s")
# The check fails on what the canary exists to catch: a run that did not pass, or two runs of
# the same GPU that disagree.
passed = all(next(t for t in r["tests"] if t["test"] == "sdc")["pass"] for r in runs)
sys.exit(0 if same and passed else 1)
PY
