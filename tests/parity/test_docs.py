#!/usr/bin/env python3
"""The docs' own rules (issue #37 items 1 and 4), plain text, no build needed. Exit 0 pass, 1 fail.
1. docs/README.md lists every document of docs/ (a link `(name.md)` per file), and every link it
   holds names a file that exists.
2. The docs speak of the code, with dates and commits: the word "session" (a working session's
   number, "this session") appears only in the history files, which keep runs as they were written
   (HISTORY below). A sentence elsewhere that needs the word for something else is rephrased.
3. The walk-throughs of docs/development.md (WALKTHROUGHS) stay true: every path they name exists
   (a bare file name in a folder the section names), every `name()` is called or defined in the
   code, and every other code name in backticks (`clef_knob_table`, `CLEF_OPS_OOM`, `enum OpId`)
   appears in it. Placeholders (`cpu_<op>`, `CLI_OPT_*`) are skipped. ("Adding a question type" has
   its own, stricter test: test_question_types.py.)"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = os.path.join(ROOT, "docs")
# append-only history files: runs, campaigns and experiments as they were written at the time
HISTORY = {"performance-history.md", "rejected-experiments.md", "reliability-history.md",
           "device-runs/README.md"}


WALKTHROUGHS = ("Adding a knob", "Adding an op")
TOPS = ("src", "include", "tests", "docs", "python", "web", "tools", "bench", "fuzz", "examples", "deploy")
CODE = ("src", "include", "tests", "python/src")


def code_text():
    parts = []
    for top in CODE:
        for dirpath, _, names in os.walk(os.path.join(ROOT, top)):
            for n in names:
                if n.endswith((".c", ".h", ".cu", ".cuh", ".inc", ".py", ".sh")):
                    parts.append(open(os.path.join(dirpath, n), encoding="utf-8", errors="replace").read())
    return "\n".join(parts)


def walkthrough_problems(doc, code):
    """What a walk-through of docs/development.md names that does not exist."""
    bad = []
    for title in WALKTHROUGHS:
        m = re.search(r"^## %s\n(.*?)(?=^## |\Z)" % re.escape(title), doc, re.S | re.M)
        if not m:
            bad.append(f'docs/development.md has no "## {title}" section')
            continue
        sec, where = m.group(1), f'docs/development.md "{title}"'
        paths = set(re.findall(r"(?<![\w/.-])((?:%s)/[\w./-]*)" % "|".join(TOPS), sec))
        dirs = {p if p.endswith("/") else os.path.dirname(p) + "/" for p in paths}
        for p in sorted(paths):
            if not os.path.exists(os.path.join(ROOT, p.rstrip("."))):
                bad.append(f"{where} names {p}, which does not exist")
        n_names = 0
        for tok in re.findall(r"`([^`\n]+)`", sec):
            if "<" in tok or "*" in tok or tok.startswith(("-", ".")) or tok.split("/")[0] in TOPS:
                continue
            if re.fullmatch(r"[\w.-]+\.(c|h|cu|cuh|py|sh|md)", tok):  # a bare file name
                if not any(os.path.isfile(os.path.join(ROOT, d, tok)) for d in dirs):
                    bad.append(f"{where} names {tok}, which is in none of its folders ({', '.join(sorted(dirs))})")
                continue
            if tok.endswith("/"):  # a folder of src/
                if not os.path.isdir(os.path.join(ROOT, "src", tok)):
                    bad.append(f"{where} names the folder {tok}, which src/ does not have")
                continue
            fn = re.fullmatch(r"(\w+)\(\)", tok)
            if fn:
                n_names += 1
                if not re.search(r"\b%s\s*\(" % fn.group(1), code):
                    bad.append(f"{where} names {tok}, which no code calls or defines")
                continue
            for word in re.findall(r"[A-Za-z_]\w*", tok):
                if "_" in word or re.search(r"[a-z][A-Z]", word):  # a code name, not an English word
                    n_names += 1
                    if not re.search(r"\b%s\b" % word, code):
                        bad.append(f"{where} names {word} ({tok!r}), which the code does not have")
        if n_names < 10:
            bad.append(f"{where}: only {n_names} code names found (is the section there?)")
    return bad


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
    bad += walkthrough_problems(open(os.path.join(DOCS, "development.md"), encoding="utf-8").read(), code_text())
    for b in bad:
        print(b)
    if bad:
        print(f"FAIL: {len(bad)} problem(s)")
        return 1
    print(f"ok: {len(doc_files())} docs listed; no 'session' outside {len(HISTORY)} history files; "
          f"the walk-throughs {', '.join(WALKTHROUGHS)} name what exists")
    return 0


if __name__ == "__main__":
    sys.exit(main())
