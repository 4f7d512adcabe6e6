#!/usr/bin/env python3
"""Checks that a release build laid out the steady state's code: the binary has a
`.text.steady` section, and most of scripts/layout/steady-code.ld's patterns still name a
function in it (a pattern that names none leaves its function with the rest of the code).

    scripts/layout/check.py target/release/gpuwarden      (scripts/ci/package.sh runs it)

Fails below MIN_MATCHED: then run scripts/layout/steady-code.sh again."""
import fnmatch
import pathlib
import re
import subprocess
import sys

MIN_MATCHED = 0.6
binary = sys.argv[1]
script = pathlib.Path(__file__).with_name("steady-code.ld")
patterns = re.findall(r"^\s*\*\(\.text\.(\S+)\)$", script.read_text(), re.M)
sections = subprocess.run(["readelf", "-SW", binary], capture_output=True, text=True, check=True).stdout
steady = re.search(r"\.text\.steady\s+PROGBITS\s+\S+\s+\S+\s+([0-9a-f]+)", sections)
if not steady:
    sys.exit(f"{binary} has no .text.steady section: build.rs did not pass {script} to the linker")
symbols = {
    fields[3]
    for fields in (line.split() for line in subprocess.run(["nm", "-S", binary], capture_output=True, text=True, check=True).stdout.splitlines())
    if len(fields) == 4 and fields[2] in "tT"
}
# Each pattern as a regex, tried against the symbols until one matches.
compiled = [re.compile(fnmatch.translate(pattern)) for pattern in patterns]
unmatched = [pattern for pattern, regex in zip(patterns, compiled) if not any(regex.match(s) for s in symbols)]
matched = len(patterns) - len(unmatched)
print(f"steady-state code: {matched} of {len(patterns)} patterns name a function; .text.steady {int(steady.group(1), 16) // 1024} KiB")
if matched < MIN_MATCHED * len(patterns):
    print("\n".join(unmatched[:20]))
    sys.exit(f"fewer than {MIN_MATCHED:.0%} of the patterns match: run scripts/layout/steady-code.sh again")
