#!/usr/bin/env python3
"""Turns the series validate-check.py scraped from a real two-GPU job (straggler-scrapes.json)
into a promtool rules test over the shipped rules, and runs it: at each evaluation the
GpuJobStraggler expression (its `for` aside: 90 s of data cannot hold 10 minutes) must select
exactly the GPUs given by --expect, and the recorded job median must exist.

    python3 scripts/gpu/straggler-promtool.py --scrapes DIR/straggler-scrapes.json --expect 0

The series are the scraped ones, as they came, with instance and job labels added.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import yaml

ap = argparse.ArgumentParser()
ap.add_argument("--scrapes", required=True)
ap.add_argument("--expect", default="0", help="comma-separated GPU indexes the alert must select")
ap.add_argument("--rules", default="deploy/prometheus/gpuwarden.rules.yml")
args = ap.parse_args()

scrapes = json.load(open(args.scrapes))
# The scrapes were 5 s apart (and a little more): promtool wants a fixed interval.
INTERVAL = 5
series = {}
for i, scrape in enumerate(scrapes):
    for line in scrape["lines"]:
        m = re.match(r'([a-z_:]+)\{(.*)\} (\S+)$', line)
        if not m:
            continue
        name, labels, value = m.groups()
        key = f'{name}{{instance="gpu-node:9100",job="gpuwarden",{labels}}}'
        series.setdefault(key, {})[i] = value
n = len(scrapes)
inputs = [{"series": key, "values": " ".join(values.get(i, "_") for i in range(n))} for key, values in sorted(series.items())]

rules = yaml.safe_load(open(args.rules))
alert = next(r for g in rules["groups"] for r in g["rules"] if r.get("alert") == "GpuJobStraggler")
expected = sorted(args.expect.split(","))
tests = []
for i in range(2, n):
    at = f"{i * INTERVAL}s"
    tests.append({
        "expr": f"sum by (gpu) (0 * ({alert['expr']}))",
        "eval_time": at,
        "exp_samples": [{"labels": f'{{gpu="{g}"}}', "value": 0} for g in expected],
    })
tests.append({"expr": "count(hpc_job:gpu_sm_clock_hertz:median)", "eval_time": f"{(n - 1) * INTERVAL}s",
              "exp_samples": [{"labels": "{}", "value": 1}]})
doc = {
    "rule_files": [os.path.abspath(args.rules)],
    "evaluation_interval": f"{INTERVAL}s",
    "tests": [{"interval": f"{INTERVAL}s", "input_series": inputs, "promql_expr_test": tests}],
}
with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
    yaml.safe_dump(doc, f, sort_keys=False, width=10_000)
    path = f.name
result = subprocess.run(["promtool", "test", "rules", path], capture_output=True, text=True)
print(f"{len(inputs)} series, {n} scrapes, {len(tests) - 1} evaluations of GpuJobStraggler's expression; expecting GPU(s) {expected}")
print(result.stdout + result.stderr)
sys.exit(result.returncode)
