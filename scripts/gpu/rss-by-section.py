#!/usr/bin/env python3
"""Which parts of a running process's own binary are resident, by ELF section: each present
page of the binary's mappings (/proc/PID/pagemap, root needed for the frame bits but not for
the present bit) named by the section that holds it, in KiB.

    scripts/gpu/rss-by-section.py PID

Shows how much of `.text` (the code) and of the data sections stays resident. Used by
cost-vs-loop.sh."""
import collections
import os
import struct
import subprocess
import sys

PAGE = 4096
pid = int(sys.argv[1])
exe = os.readlink(f"/proc/{pid}/exe").removesuffix(" (deleted)")


def readelf(flag):
    return subprocess.run(["readelf", flag, "-W", exe], capture_output=True, text=True, check=True).stdout


sections = []
for line in readelf("-S").splitlines():
    fields = line.replace("[ ", "[").split()
    if len(fields) > 6 and fields[0].startswith("[") and fields[0] != "[Nr]":
        try:
            sections.append((fields[1], int(fields[3], 16), int(fields[5], 16)))
        except ValueError:
            pass
# LOAD segments: (file offset, virtual address, file size), to turn a mapping's page into an
# address that the section table names.
segments = [
    (int(f[1], 16), int(f[2], 16), int(f[4], 16))
    for f in (line.split() for line in readelf("-l").splitlines())
    if f and f[0] == "LOAD"
]


def section_of(file_offset):
    for offset, vaddr, size in segments:
        if offset <= file_offset < offset + size:
            address = vaddr + file_offset - offset
            for name, start, length in sections:
                if start < address + PAGE and address < start + length and name != ".tbss":
                    return name
    return "(between sections)"


resident = collections.Counter()
with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/pagemap", "rb") as pagemap:
    for line in maps:
        fields = line.split()
        if len(fields) < 6 or " ".join(fields[5:]).removesuffix(" (deleted)") != exe:
            continue
        start, end = (int(x, 16) for x in fields[0].split("-"))
        pagemap.seek(start // PAGE * 8)
        entries = pagemap.read((end - start) // PAGE * 8)
        for i in range((end - start) // PAGE):
            (entry,) = struct.unpack_from("<Q", entries, i * 8)
            if entry >> 63 & 1:
                resident[section_of(int(fields[2], 16) + i * PAGE)] += PAGE // 1024
total = sum(resident.values())
print(f"{total} KiB: " + ", ".join(f"{name} {kib}" for name, kib in resident.most_common()))
