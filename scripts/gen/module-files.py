#!/usr/bin/env python3
"""Writes each src/ folder's table of its files into the folder's mod.rs module doc: one row per
file and subfolder, what it is taken from that file's own first doc sentence (a subfolder's from
its mod.rs). The table sits between the markers `//! <!-- files -->` and `//! <!-- /files -->`
at the end of the module doc; tests/all/architecture.rs fails on a file the table lacks.
   python3 scripts/gen/module-files.py          (rewrites the tables; run it after adding a file)
   python3 scripts/gen/module-files.py --check  (changes nothing; exit 1 naming each stale table)
"""
import pathlib
import re
import sys

SRC = pathlib.Path(__file__).resolve().parents[2] / "src"
OPEN, CLOSE = "//! <!-- files -->", "//! <!-- /files -->"


def first_sentence(path: pathlib.Path) -> str:
    doc = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("//!"):
            break
        text = line[3:].strip()
        if not text or text == OPEN:
            break
        doc.append(text)
    words = " ".join(doc)
    # Intra-doc links read as plain code here: the table sits in another module's doc.
    words = re.sub(r"\[`([^`]+)`\](\([^)]*\))?", r"`\1`", words)
    words = re.sub(r"\[([^\]]+)\]\([^)]*\)", r"\1", words)
    # The first sentence: up to a full stop followed by a space or the end, outside
    # parentheses and `code`.
    depth, code, end = 0, False, len(words)
    for i, c in enumerate(words):
        if c == "`":
            code = not code
        elif not code and c == "(":
            depth += 1
        elif not code and c == ")":
            depth = max(0, depth - 1)
        elif not code and depth == 0 and c == "." and (i + 1 == len(words) or words[i + 1] == " "):
            end = i
            break
    sentence = words[:end].rstrip(":")
    sentence = sentence.replace("|", "\\|")
    return sentence if len(sentence) <= 160 else sentence[:157].rsplit(" ", 1)[0] + "..."


def table(folder: pathlib.Path) -> list[str]:
    rows = [OPEN, "//!", "//! | file | what |", "//! | --- | --- |"]
    entries = sorted(p for p in folder.iterdir() if (p.suffix == ".rs" and p.name != "mod.rs") or (p / "mod.rs").exists())
    for entry in entries:
        if entry.is_dir():
            rows.append(f"//! | `{entry.name}/` | {first_sentence(entry / 'mod.rs')} |")
        else:
            rows.append(f"//! | `{entry.name}` | {first_sentence(entry)} |")
    rows.append(CLOSE)
    return rows


def rewrite(module: pathlib.Path, check: bool = False) -> bool:
    lines = module.read_text(encoding="utf-8").splitlines()
    doc_end = 0
    while doc_end < len(lines) and lines[doc_end].startswith("//!"):
        doc_end += 1
    doc = lines[:doc_end]
    if OPEN in doc:
        start = doc.index(OPEN)
        end = doc.index(CLOSE) + 1
        doc = doc[:start] + doc[end:]
        while doc and doc[-1] == "//!":
            doc.pop()
    new = doc + ["//!"] + table(module.parent) + lines[doc_end:]
    if new != lines:
        if not check:
            module.write_text("\n".join(new) + "\n", encoding="utf-8")
        return True
    return False


if __name__ == "__main__":
    check = sys.argv[1:] == ["--check"]
    changed = [str(m.relative_to(SRC)) for m in sorted(SRC.rglob("mod.rs")) if rewrite(m, check)]
    if check and changed:
        print("stale file tables (run python3 scripts/gen/module-files.py): " + ", ".join(changed))
        sys.exit(1)
    print(("stale: " if check else "rewrote: ") + (", ".join(changed) if changed else "nothing"))
