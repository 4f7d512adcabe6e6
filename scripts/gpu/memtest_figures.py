#!/usr/bin/env python3
"""The HBM pattern test's figures from `gpuwarden probe --tests memtest --json` reports
(memtest-check.sh): region, passes, GPU and wall time, errors, sustained traffic and the time
per GiB traversal.

    memtest_figures.py REPORT_JSON..."""
import json
import os
import sys

for path in sys.argv[1:]:
    with open(path) as f:
        r = json.load(f)
    t = next(t for t in r["tests"] if t["test"] == "memtest")
    m = t["memtest"]
    gib = m["bytes"] / 2**30
    traversals = sum(6 if p["name"].startswith("moving") else 2 for p in m["passes"])
    print(f"{os.path.basename(path)}: {gib:.1f} GiB region, {len(m['passes'])} passes (complete {m['complete']}), "
          f"{m['seconds']:.2f} s GPU time, wall {r['wall_seconds']:.2f} s, {m['errors']} errors, "
          f"{t['sustained']/1e9:.0f} GB/s sustained pattern traffic, "
          f"{1000 * m['seconds'] / (gib * traversals):.3f} ms per GiB traversal, "
          f"{m['seconds'] / gib:.3f} s per GiB for the passes that ran")
