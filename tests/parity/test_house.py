#!/usr/bin/env python3
"""The house's size rules (issue #37 "Bar"): no C file in src/ over MAX_FILE lines and no function
over MAX_FUNC lines, outside generated tables (ALLOW, each with its reason). Prints the longest files
and functions, then every rule broken as file:line. Plain text over the sources: no build needed.
Exit 0 pass, 1 fail.

C only: src/**/*.c, *.h and *.inc. The CUDA sources (src/compute/cuda/*.cu, *.cuh) are left out and
said so: they are compiled and run only on a GPU machine, which this check does not need.

Functions are found simply: comments, string and character literals and preprocessor lines are
blanked (newlines kept), then every '{' at file level whose last word before it is ')' opens a
function body (a struct, enum or initializer ends in a name or '='), and the body runs to its
matching '}'. A function's length is counted from the line of its name to the line of its '}'.
A file whose braces do not balance is reported, not guessed at."""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAX_FILE = 800
MAX_FUNC = 120
TOP = 10

# Generated tables only: path (or "path:function") -> why it may be longer (which generator wrote
# it). None today: src/text/tok_unicode.inc, the one generated table, is 240 lines. An entry that is
# no longer over its limit fails, as PENDING's do.
ALLOW = {}

# Files another change in flight owns: reported here, not failed, until that change lands. An entry
# that is no longer over its limit fails, so the list cannot outlive its reason.
PENDING = {}

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def blank(text):
    """text with comments, string/char literals and preprocessor lines turned into spaces (newlines
    kept, so line numbers stay true)."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c in " \t":
            out.append(c)
            i += 1
            continue
        if line_start and c == "#":  # a preprocessor line, with its continuations
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append(" \n")
                    i += 2
                    continue
                if text.startswith("/*", i):  # a comment opened on a directive line runs on
                    j = text.find("*/", i + 2)
                    j = n if j < 0 else j + 2
                    out.append(re.sub(r"[^\n]", " ", text[i:j]))
                    i = j
                    continue
                out.append(" ")
                i += 1
            continue
        line_start = False
        if c == "\n":
            out.append(c)
            line_start = True
            i += 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(text):
    """[(name, first line, last line)] of the function bodies in text, or raises ValueError."""
    s = blank(text)
    found = []
    depth = 0
    open_at = name = name_line = None
    last_top = 0  # where the current file-level declaration began (after the last ';' or '}')
    for i, c in enumerate(s):
        if c == "{":
            if depth == 0:
                head = s[last_top:i].rstrip()
                name = None
                if head.endswith(")"):  # a function definition: find the '(' that closes it
                    k, d = len(head) - 1, 0
                    while k >= 0:
                        d += head[k] == ")"
                        d -= head[k] == "("
                        if d == 0:
                            break
                        k -= 1
                    m = re.search(r"([A-Za-z_][A-Za-z0-9_]*)\s*$", head[:max(k, 0)])
                    if m:
                        name = m.group(1)
                        name_line = s.count("\n", 0, last_top + m.start(1)) + 1
                open_at = i
            depth += 1
        elif c == "}":
            depth -= 1
            if depth < 0:
                raise ValueError(f"line {s.count(chr(10), 0, i) + 1}: '}}' without its '{{'")
            if depth == 0:
                if name:
                    found.append((name, name_line, s.count("\n", 0, i) + 1))
                name = None
                last_top = i + 1
        elif c == ";" and depth == 0:
            last_top = i + 1
    if depth != 0:
        raise ValueError(f"{depth} '{{' never closed (from line {s.count(chr(10), 0, open_at) + 1})")
    return found


def main():
    files, funcs, fails, skipped = [], [], [], []
    for dirpath, dirs, names in os.walk(os.path.join(ROOT, "src")):
        dirs.sort()
        for f in sorted(names):
            rel = os.path.relpath(os.path.join(dirpath, f), ROOT)
            if f.endswith((".cu", ".cuh")):
                skipped.append(rel)
                continue
            if not f.endswith((".c", ".h", ".inc")):
                continue
            text = open(os.path.join(ROOT, rel), encoding="utf-8", errors="replace").read()
            files.append((text.count("\n"), rel))
            try:
                for name, a, b in functions(text):
                    funcs.append((b - a + 1, f"{rel}:{a}", name, rel))
            except ValueError as e:
                fails.append(f"{rel}: cannot find its functions: {e}")
    files.sort(reverse=True)
    funcs.sort(reverse=True)
    print(f"longest files of src/ ({len(files)} C files; limit {MAX_FILE} lines):")
    for n, rel in files[:TOP]:
        print(f"  {n:5d}  {rel}")
    print(f"longest functions ({len(funcs)} functions; limit {MAX_FUNC} lines):")
    for n, where, name, _ in funcs[:TOP]:
        print(f"  {n:5d}  {name}  {where}")
    print(f"not checked: {len(skipped)} CUDA sources (src/compute/cuda/*.cu, *.cuh): built and run only "
          f"on a GPU machine")
    over = [(rel, rel, f"{rel}: {n} lines (over {MAX_FILE})") for n, rel in files if n > MAX_FILE]
    over += [(rel, f"{rel}:{name}", f"{where}: {name} is {n} lines (over {MAX_FUNC})")
             for n, where, name, rel in funcs if n > MAX_FUNC]
    pending_used, allow_used = set(), set()
    for rel, key, msg in over:
        if key in ALLOW or rel in ALLOW:
            allow_used.add(key if key in ALLOW else rel)
            print(f"allowed: {msg}: {ALLOW.get(key) or ALLOW[rel]}")
        elif rel in PENDING:
            pending_used.add(rel)
            print(f"pending: {msg}: {PENDING[rel]}")
        else:
            fails.append(msg)
    for rel in sorted(set(PENDING) - pending_used):
        fails.append(f"{rel} is within the limits now: drop it from PENDING")
    for key in sorted(set(ALLOW) - allow_used):
        fails.append(f"{key} is within the limits now: drop it from ALLOW")
    for f in fails:
        print("FAIL:", f)
    if fails:
        print(f"{len(fails)} broken: the house's limits are {MAX_FILE} lines a file, {MAX_FUNC} a function")
        return 1
    print(f"ok: no C file of src/ over {MAX_FILE} lines, no function over {MAX_FUNC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
