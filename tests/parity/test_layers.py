#!/usr/bin/env python3
"""The include rules of docs/development.md ("Layers"), checked on every #include "..." in src/ and
include/ (issue #20 item 3). Each folder of src/ may include headers of the folders listed for it
in ALLOWED (its own folder always); "clef.h" is the public API and any layer may include it.
The inspection verbs of the CLI that show what clef.h does not (INSPECTION below: tokenize, respond,
preprocess) may in addition include the one host-side folder each shows (text/, decision/, image/),
never model/, compute/ or engine/; `clef encode` goes through clef.h. Plain text over the sources: no build needed. Exit 0 pass, 1 fail.
An exception of INSPECTION that the code no longer uses fails as well (the list says exactly what is
true). A rule broken prints file:line, the header and the rule."""
import os
import re
import sys

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

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


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
    for f in fails:
        print("FAIL:", f)
    if fails:
        return 1
    print(f"ok: {n_inc} includes in {n_files} files follow the layer rules")
    return 0


if __name__ == "__main__":
    sys.exit(main())
