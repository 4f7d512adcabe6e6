#!/usr/bin/env python3
"""The journal rows a GPU check saved (`gpuwarden events --json`), one line each: kind, GPU,
summary. Used by sdc-daemon-check.sh and node-sweep-check.sh (through scripts/gpu/run.sh).

    journal_rows.py EVENTS_JSON [KIND...] [--count KIND]

KINDs: the rows printed (all when none); --count KIND: only how many rows of KIND there are."""
import json
import sys


def main(argv):
    path, kinds, counted = argv[0], [], []
    rest = iter(argv[1:])
    for arg in rest:
        if arg == "--count":
            counted.append(next(rest))
        else:
            kinds.append(arg)
    with open(path) as f:
        rows = json.load(f)
    for r in rows:
        if r["kind"] in counted or (kinds and r["kind"] not in kinds):
            continue
        gpu = (r.get("gpu") or {}).get("index")
        print(r["kind"], f"GPU {gpu}" if gpu is not None else "node", "-", r["summary"])
    for kind in counted:
        print(sum(r["kind"] == kind for r in rows), f"{kind} row(s)")


if __name__ == "__main__":
    main(sys.argv[1:])
