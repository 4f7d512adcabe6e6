#!/usr/bin/env python3
"""The verdict asked every 0.1 s through a hand-over (handover-check.sh): the folded exit codes
(0 healthy, 1 unhealthy, 2 no daemon), whether it held unhealthy without a break from the
first 1 to the last, and every answer with its time after the fault.

    verdict_asks.py ASKS_TXT FAULT_UNIX_TIME"""
import sys

with open(sys.argv[1]) as f:
    asks = [line.split(" ", 2) for line in f if line.strip()]
t0 = float(sys.argv[2])
codes = [int(a[1]) for a in asks]
runs = [c for i, c in enumerate(codes) if i == 0 or codes[i - 1] != c]
print("asks:", len(asks), "folded codes:", runs)
ones = [i for i, c in enumerate(codes) if c == 1]
if ones:
    held = all(c == 1 for c in codes[ones[0]:ones[-1] + 1])
    print("held unhealthy without a break from the first 1 to the last:", held,
          f"({float(asks[ones[0]][0]) - t0:.1f} s to {float(asks[ones[-1]][0]) - t0:.1f} s after the fault)")
for a in asks:
    print(f"{float(a[0]) - t0:8.2f} {a[1]} {a[2].strip() if len(a) > 2 else ''}")
