#!/usr/bin/env python3
"""Where a process's resident memory is, by mapping: /proc/PID/smaps' Rss summed per mapped
file ("[anonymous]" for the rest), the largest first, in KiB.

    scripts/gpu/rss-by-mapping.py PID [COUNT]     (COUNT largest, 25 by default)

Used by rss-breakdown.sh and cost-vs-loop.sh."""
import collections
import re
import sys

rss = collections.Counter()
name = None
with open(f"/proc/{sys.argv[1]}/smaps") as smaps:
    for line in smaps:
        head = re.match(r"^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ \S+\s*(.*)$", line)
        if head:
            name = head.group(1) or "[anonymous]"
        elif line.startswith("Rss:"):
            rss[name] += int(line.split()[1])
for name, kib in rss.most_common(int(sys.argv[2]) if len(sys.argv) > 2 else 25):
    print(f"{kib:8d} KiB  {name}")
