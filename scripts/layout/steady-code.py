#!/usr/bin/env python3
"""Writes the linker script that gathers the functions the settled daemon runs into one
section, from a callgrind dump of a run and the binary that made it (steady-code.sh runs both).

    scripts/layout/steady-code.py CALLGRIND_OUT BINARY > scripts/layout/steady-code.ld

The build mangles with v0 (.cargo/config.toml), which names each instance of a generic by its
types: a pattern leaves out only what changes from build to build, the crates' disambiguators
(`Cs<base 62>_`) and the back-references whose offsets move with them (`B<base 62>_`), so it
keeps matching after a dependency, a feature or the version changes. Where such a pattern
would match more than one function (a legacy-mangled name's hash, `17h<16 hex>E`, is all that
tells its instances apart), the function is named exactly."""
import collections
import re
import subprocess
import sys

callgrind_out, binary = sys.argv[1], sys.argv[2]


def unhashed(symbol):
    if symbol.startswith("_R"):
        pattern = re.sub(r"Cs[0-9A-Za-z]+_", "Cs*_", symbol)
        return re.sub(r"B[0-9A-Za-z]*_", "B*_", pattern)
    return re.sub(r"17h[0-9a-f]{16}E$", "*", symbol)


def functions_that_ran(path, binary):
    """Mangled names (callgrind ran with --demangle=no) of the functions of `binary` with a
    cost in the dump. Callgrind compresses names: `fn=(12) name` defines 12, `fn=(12)` uses it."""
    names = {"ob": {}, "fn": {}}
    current_object, ran = None, set()

    def resolve(kind, text):
        match = re.match(r"\((\d+)\)(?: (.*))?$", text)
        if not match:
            return text
        if match.group(2) is not None:
            names[kind][match.group(1)] = match.group(2)
        return names[kind].get(match.group(1), "")

    with open(path, errors="replace") as dump:
        for line in dump:
            key, _, value = line.rstrip("\n").partition("=")
            if key == "ob":
                current_object = resolve("ob", value)
            elif key == "cob":
                resolve("ob", value)
            elif key == "cfn":
                resolve("fn", value)
            elif key == "fn":
                name = resolve("fn", value)
                if current_object == binary:
                    # A recursive call's cycle is named "name'2".
                    ran.add(re.sub(r"'\d+$", "", name))
    return ran


symbols = [
    fields[3]
    for fields in (line.split() for line in subprocess.run(["nm", "-S", binary], capture_output=True, text=True, check=True).stdout.splitlines())
    if len(fields) == 4 and fields[2] in "tT"
]
instances = collections.Counter(unhashed(symbol) for symbol in symbols)
ran = functions_that_ran(callgrind_out, binary)
patterns = sorted({unhashed(name) if instances[unhashed(name)] == 1 else name for name in ran})
if len(patterns) < 100:
    sys.exit(f"only {len(patterns)} functions ran in {callgrind_out}: was the window inside the steady state?")

print(f"""/* The functions gpuwarden runs once settled ({len(patterns)} patterns), gathered into one section
 * ahead of the rest of the code. Written by scripts/layout/steady-code.sh; build.rs passes it
 * to release builds (docs/performance.md, "The steady state's code in one place"). A name no
 * function has any more matches nothing, and that function stays with the rest: run the
 * script again after large changes. */
SECTIONS
{{
  .text.steady :
  {{""")
for pattern in patterns:
    print(f"    *(.text.{pattern})")
print("""  }
}
INSERT BEFORE .text;""")
