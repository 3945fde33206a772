#!/usr/bin/env python3
"""The docs' own rules (issue #37 items 1 and 4), plain text, no build needed. Exit 0 pass, 1 fail.
1. docs/README.md lists every document of docs/ (a link `(name.md)` per file), and every link it
   holds names a file that exists.
2. The docs speak of the code, with dates and commits: the word "session" (a working session's
   number, "this session") appears only in the history files, which keep runs as they were written
   (HISTORY below). A sentence elsewhere that needs the word for something else is rephrased."""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = os.path.join(ROOT, "docs")
# append-only history files: runs, campaigns and experiments as they were written at the time
HISTORY = {"performance-history.md", "rejected-experiments.md", "reliability-history.md",
           "device-runs/README.md"}


def doc_files():
    out = []
    for dirpath, _, names in os.walk(DOCS):
        for n in names:
            if n.endswith(".md"):
                out.append(os.path.relpath(os.path.join(dirpath, n), DOCS))
    return sorted(out)


def main():
    bad = []
    index = open(os.path.join(DOCS, "README.md"), encoding="utf-8").read()
    links = set(re.findall(r"\]\(([^)#]+\.md)\)", index))
    for f in doc_files():
        if f != "README.md" and f not in links:
            bad.append(f"docs/README.md does not list docs/{f}")
    for link in sorted(links):
        if not os.path.isfile(os.path.join(DOCS, link)):
            bad.append(f"docs/README.md links docs/{link}, which does not exist")
    for f in doc_files():
        if f in HISTORY:
            continue
        for n, line in enumerate(open(os.path.join(DOCS, f), encoding="utf-8"), 1):
            if re.search(r"\bsessions?\b", line, re.IGNORECASE):  # not sessionStorage (a browser API)
                bad.append(f"docs/{f}:{n}: 'session' outside the history files: {line.strip()[:100]}")
    for b in bad:
        print(b)
    if bad:
        print(f"FAIL: {len(bad)} problem(s)")
        return 1
    print(f"ok: {len(doc_files())} docs listed; no 'session' outside {len(HISTORY)} history files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
