#!/usr/bin/env python3
"""Every environment knob is read in one place: the registry src/base/knobs.c (issue #20 item 2).

Fails when
- a file under src/ other than src/base/knobs.c calls getenv / secure_getenv, unless the registry's
  table (clef_knob_table in knobs.c) names that file as the reader of that very knob (the drivers'
  own documented knobs, e.g. src/cli/cmd_serve.c for CLEF_SERVE_TEST_LOAD_DELAY_MS);
- a knob read in src/ is missing from the registry's table, or the table and docs/knobs.md's table
  do not list the same names.
Plain text over the sources: no build needed. Exit 0 pass, 1 fail."""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REGISTRY = "src/base/knobs.c"
GETENV = re.compile(r'\b(?:secure_)?getenv\s*\(\s*("?)([A-Za-z0-9_]*)"?')


def strip_comments(text):
    return re.sub(r"/\*.*?\*/|//[^\n]*", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.S)


def registry_table():
    text = open(os.path.join(ROOT, REGISTRY), encoding="utf-8").read()
    body = text.split("clef_knob_table[] = {", 1)[1].split("};", 1)[0]
    rows = {}
    for m in re.finditer(r'\{\s*"(CLEF_[A-Z0-9_]+)"(.*?)"([^"]*)"\s*\}\s*,', body, flags=re.S):
        rows[m.group(1)] = m.group(3)  # name -> read_by (the row's last string)
    return rows


def doc_table():
    path = os.path.join(ROOT, "docs", "knobs.md")
    if not os.path.exists(path):
        return None
    names = set()
    for line in open(path, encoding="utf-8"):
        m = re.match(r"\|\s*`(CLEF_[A-Z0-9_]+)`", line)
        if m:
            names.add(m.group(1))
    return names


def main():
    fails = []
    table = registry_table()
    if len(table) < 12:
        fails.append(f"{REGISTRY}: parsed only {len(table)} rows of clef_knob_table")
    seen = set()
    for dirpath, _, files in os.walk(os.path.join(ROOT, "src")):
        for f in sorted(files):
            if not f.endswith((".c", ".h", ".cu", ".cuh", ".inc")):
                continue
            path = os.path.join(dirpath, f)
            rel = os.path.relpath(path, ROOT)
            text = strip_comments(open(path, encoding="utf-8", errors="replace").read())
            for m in GETENV.finditer(text):
                line = text.count("\n", 0, m.start()) + 1
                name = m.group(2) if m.group(1) else ""
                if rel == REGISTRY:
                    continue
                if not name:
                    fails.append(f"{rel}:{line}: getenv with a computed name (read knobs through src/base/knobs.h)")
                elif name not in table:
                    fails.append(f"{rel}:{line}: {name} is read here and is not in the registry "
                                 f"({REGISTRY} clef_knob_table, docs/knobs.md)")
                elif table[name] != rel:
                    fails.append(f"{rel}:{line}: {name} is read here; the registry says it is read by "
                                 f"{table[name]} (read it through clef_knobs_env())")
                else:
                    seen.add(name)
    for name, reader in table.items():
        if reader not in ("clef_knobs", REGISTRY) and name not in seen:
            fails.append(f"{REGISTRY}: {name} is listed as read by {reader}, which does not read it")
    docs = doc_table()
    if docs is None:
        fails.append("docs/knobs.md is missing")
    else:
        for n in sorted(set(table) - docs):
            fails.append(f"docs/knobs.md: {n} (in the registry) has no row")
        for n in sorted(docs - set(table)):
            fails.append(f"docs/knobs.md: {n} has a row but is not in the registry")
    for f in fails:
        print("FAIL:", f)
    if fails:
        return 1
    print(f"ok: {len(table)} knobs, all read through {REGISTRY} or by the driver the registry names; "
          f"docs/knobs.md lists the same")
    return 0


if __name__ == "__main__":
    sys.exit(main())
