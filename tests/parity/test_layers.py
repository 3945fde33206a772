#!/usr/bin/env python3
"""The include rules of docs/development.md ("Layers"), checked on every #include "..." in src/ and
include/ (issue #20 item 3). Each folder of src/ may include headers of the folders listed for it
in ALLOWED (its own folder always); "clef.h" is the public API and any layer may include it.
The inspection verbs of the CLI that show what clef.h does not (INSPECTION below: tokenize, respond,
preprocess) may in addition include the one host-side folder each shows (text/, decision/, image/),
never model/, compute/ or engine/; `clef encode` goes through clef.h. Plain text over the sources: no build needed. Exit 0 pass, 1 fail.
An exception of INSPECTION that the code no longer uses fails as well (the list says exactly what is
true). A rule broken prints file:line, the header and the rule.

Within one folder the calls run one way (issue #37): over the .c/.cu files of a folder, with an edge
a -> b when a.c calls (or names) a function that b.c defines, there is no cycle, so no file calls back
into a file that calls it (src/image/ had one: image.c -> decode.c -> the decoders -> image.c's pixel
buffers). Likewise no cycle of own headers: a.c including b.h (b.c's header) while b.c includes a.h.
A header that declares a lower file's functions beside its own (model/text.h, compute/cpu/gemm.h) is
no cycle by itself: the calls decide. A cycle prints its files and, for each edge, the function (or
header) that makes it. ALLOWED_CYCLES may name a cycle the code truly needs, with its reason; an entry
that is no longer a cycle fails too."""
import os
import re
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# folder -> the other folders of src/ it may include (docs/development.md "Layers")
ALLOWED = {
    "base": set(),                                   # the foundation: nothing above it
    "text": {"base"},                                # host side
    "image": {"base"},                               # host side
    "video": {"base", "image"},                      # host side (the image path's resampler)
    "decision": {"base", "text", "image", "video"},  # host side
    "compute": {"base"},                             # backends: never model/ or anything above
    "model": {"base", "compute"},                    # the forward passes, on the op seam
    "engine": {"base", "text", "image", "video", "decision", "compute", "model"},  # assembles the library
    "serve": {"base"},                               # HTTP server and scheduler on clef.h
    "cli": {"base", "serve"},                        # the clef command: a driver, on clef.h
}

# The inspection verbs (docs/development.md "Drivers and the inspection verbs"): developer views of
# the host pipeline's intermediate results; file -> the extra folders it may include.
# `clef encode` is not here: it runs the engine's host pipeline through clef.h (clef_encode_request).
INSPECTION = {
    "src/cli/cmd_tokenize.c": {"text"},        # token ids with the tokenizer's test flags
    "src/cli/cmd_respond.c": {"decision"},     # a response from the caller's logits (the record via clef.h)
    "src/cli/cmd_preprocess.c": {"image"},     # the processor's pixels
}

# folder -> {frozenset of files (names within the folder) that call each other: the reason}. Empty:
# every folder of src/ calls one way. An entry must still be a cycle (else it fails).
ALLOWED_CYCLES = {}

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


# C text without its comments, strings and character literals (newlines kept, so lines still count)
LEXEME = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
# a function definition starts at column 0: its return type and name, then the parameters and a brace
DEF_HEAD = re.compile(r'^([A-Za-z_][\w \t\*"]*?)\b([A-Za-z_]\w*)\s*\(', re.M)  # '"': extern "C"
WORD = re.compile(r'\b[A-Za-z_]\w*\b')


def code_only(text):
    return LEXEME.sub(lambda m: "\n" * m.group(0).count("\n") if m.group(0)[0] == "/" else '""', text)


def definitions(code):
    """{name: is_static} of the functions code defines (at column 0, parameters then '{')."""
    out = {}
    for m in DEF_HEAD.finditer(code):
        head = m.group(1).split()
        if not head or head[0] in ("return", "typedef", "else", "if", "while", "for", "switch", "do"):
            continue
        depth, i = 0, m.end() - 1
        while i < len(code):
            depth += {"(": 1, ")": -1}.get(code[i], 0)
            if depth == 0:
                break
            i += 1
        rest = code[i + 1:i + 200].lstrip()
        if rest.startswith("{"):
            out[m.group(2)] = "static" in head
    return out


def folder_cycles(dirpath, files, rel):
    """The cycles of one folder's call graph and of its include graph over its .c/.cu files (rel: the
    folder as its headers are named, "image" for src/image): a list of (what, set of files,
    [(a, b, why)]) for each strongly connected set of two or more files."""
    sources = [f for f in files if f.endswith((".c", ".cu"))]
    stem_of = {os.path.splitext(f)[0]: f for f in sources}
    code, defs = {}, {}
    for f in sources:
        text = open(os.path.join(dirpath, f), encoding="utf-8", errors="replace").read()
        code[f] = (text, code_only(text))
        defs[f] = definitions(code[f][1])
    exported = {}
    for f in sources:
        for name, static in defs[f].items():
            if not static:
                exported.setdefault(name, []).append(f)
    calls = {f: {} for f in sources}     # a -> {b: why}
    includes = {f: {} for f in sources}  # a -> {b: why}: a.c includes b.h
    for a in sources:
        text, c = code[a]
        for name in set(WORD.findall(c)) - set(defs[a]):
            for b in exported.get(name, ()):
                calls[a].setdefault(b, f"calls {name}()")
        for m in INCLUDE.finditer(text):
            stem = os.path.splitext(os.path.basename(m.group(1)))[0]
            b = stem_of.get(stem)
            if m.group(1).endswith(".h") and b and b != a and "/".join(m.group(1).split("/")[:-1]) in ("", rel):
                includes[a].setdefault(b, f'includes "{m.group(1)}"')
    return [("call each other", c, w) for c, w in cycles(calls)] + \
        [("include each other's headers", c, w) for c, w in cycles(includes)]


def cycles(edges):
    """Tarjan's strongly connected components of two or more nodes: [(set, [(a, b, why)])]."""
    index, low, stack, on, sccs = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append((comp, [(a, b, edges[a][b]) for a in sorted(comp) for b in sorted(edges[a]) if b in comp]))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sccs


def self_check(fails):
    """The cycle finder on two made-up folders: a circle over three files (through a static helper, a
    multi-line parameter list, an extern "C" definition and a call inside a comment that must not
    count) is found with its edges; the same files calling one way are not. Guards the rule against a
    parser that silently finds nothing."""
    files = {
        "a.c": '#include "x/c.h"\nstatic int helper(void) { return clef_b(1,\n 2); }\nint clef_a(void) { return helper(); }\n',
        "b.c": 'extern "C" int clef_b(int x,\n                      int y) {\n    return clef_c() + x + y;\n}\n',
        "c.c": '/* clef_b() in a comment is no call */\nint clef_c(void) { return clef_a(); }\n',
    }
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in files.items():
            open(os.path.join(tmp, name), "w").write(text)
        found = folder_cycles(tmp, sorted(files), "x")
        if [(w, sorted(c)) for w, c, _ in found] != [("call each other", ["a.c", "b.c", "c.c"])] or \
                sorted((a, b) for a, b, _ in found[0][2]) != [("a.c", "b.c"), ("b.c", "c.c"), ("c.c", "a.c")]:
            fails.append(f"self-check: a circle a.c -> b.c -> c.c -> a.c was read as {found}")
        open(os.path.join(tmp, "c.c"), "w").write("/* clef_b() in a comment is no call */\nint clef_c(void) { return 0; }\n")
        found = folder_cycles(tmp, sorted(files), "x")
        if found:
            fails.append(f"self-check: one-way calls a.c -> b.c -> c.c were read as a cycle: {found}")
        open(os.path.join(tmp, "c.c"), "w").write('#include "x/a.h"\nint clef_c(void) { return 0; }\n')
        found = folder_cycles(tmp, sorted(files), "x")
        if [(w, sorted(c)) for w, c, _ in found] != [("include each other's headers", ["a.c", "c.c"])]:
            fails.append(f"self-check: a.c and c.c including each other's headers were read as {found}")


def check_one_way(fails):
    """The within-folder rule over every folder of src/; returns the number of folders checked."""
    folders, seen = 0, set()  # seen: the allowed cycles found
    for dirpath, _, files in os.walk(os.path.join(ROOT, "src")):
        rel = os.path.relpath(dirpath, os.path.join(ROOT, "src"))
        if rel == ".":
            continue
        folders += 1
        for what, comp, why in folder_cycles(dirpath, sorted(files), rel):
            key = frozenset(comp)
            if key in ALLOWED_CYCLES.get(rel, {}):
                seen.add((rel, key))
                continue
            fails.append(f"src/{rel}/: {sorted(comp)} {what} in a circle: " +
                         "; ".join(f"{a} {w} ({b})" for a, b, w in why) +
                         " (within a folder the calls run one way: move what both need into its own file below them)")
    for rel, cycles in ALLOWED_CYCLES.items():
        for key in cycles:
            if (rel, frozenset(key)) not in seen:
                fails.append(f"ALLOWED_CYCLES names src/{rel}/ {sorted(key)}, which is no longer a cycle: drop it")
    return folders, len(seen)


def main():
    fails = []
    used = {f: set() for f in INSPECTION}
    n_files = n_inc = 0
    for top in ("src", "include"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, top)):
            for f in sorted(files):
                if not f.endswith((".c", ".h", ".cu", ".cuh", ".inc")):
                    continue
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, ROOT)
                parts = rel.split(os.sep)
                layer = parts[1] if top == "src" and len(parts) > 2 else None
                if top == "src" and layer not in ALLOWED:
                    fails.append(f"{rel}: src/{parts[1] if len(parts) > 2 else ''} is not a layer of "
                                 f"docs/development.md (add it there and to ALLOWED)")
                    continue
                n_files += 1
                text = open(path, encoding="utf-8", errors="replace").read()
                for m in INCLUDE.finditer(text):
                    n_inc += 1
                    hdr = m.group(1)
                    line = text.count("\n", 0, m.start()) + 1
                    if hdr == "clef.h":
                        continue
                    if "/" not in hdr:
                        # same-folder includes ("tok_unicode.inc", "cuda_internal.cuh")
                        if not os.path.exists(os.path.join(dirpath, hdr)):
                            fails.append(f"{rel}:{line}: \"{hdr}\": name headers by their folder (\"base/err.h\")")
                        continue
                    to = hdr.split("/")[0]
                    if top == "include":
                        fails.append(f"{rel}:{line}: the public header includes \"{hdr}\" (it must stand alone)")
                        continue
                    if to not in ALLOWED:
                        fails.append(f"{rel}:{line}: \"{hdr}\": no such layer")
                        continue
                    if to == layer or to in ALLOWED[layer]:
                        continue
                    if rel in INSPECTION and to in INSPECTION[rel]:
                        used[rel].add(to)
                        continue
                    extra = f" (inspection verb: also {sorted(INSPECTION[rel])})" if rel in INSPECTION else ""
                    fails.append(f"{rel}:{line}: {layer}/ includes \"{hdr}\"; {layer}/ may include "
                                 f"{sorted(ALLOWED[layer] | {layer})}{extra} (docs/development.md)")
    # the exceptions stay exactly what the code needs: one that is no longer used fails too
    for f, allowed in INSPECTION.items():
        if not os.path.exists(os.path.join(ROOT, f)):
            fails.append(f"{f} (an inspection verb) no longer exists: drop it from INSPECTION and the docs")
        elif allowed - used[f]:
            fails.append(f"{f} no longer includes {sorted(allowed - used[f])}: drop that from INSPECTION and "
                         f"docs/development.md")
    self_check(fails)
    n_folders, n_allowed = check_one_way(fails)
    for f in fails:
        print("FAIL:", f)
    if fails:
        return 1
    print(f"ok: {n_inc} includes in {n_files} files follow the layer rules; the calls within each of "
          f"{n_folders} folders of src/ run one way ({n_allowed} cycle(s) kept by ALLOWED_CYCLES)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
