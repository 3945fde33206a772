#!/usr/bin/env python3
"""models/tiny (written by `make tiny`) must be, file by file, the checkpoint the reference fixtures were made
with: the sha256 manifest recorded in tests/fixtures/tiny/index.json (checkpoint.manifest).

Exit 0 = every file matches; 1 = a file differs, is missing or is extra (each one is listed); 77 = skipped
because models/tiny is absent (run `make tiny`). Needs only the standard library.
"""
import hashlib
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "models", "tiny")
INDEX = os.path.join(ROOT, "tests", "fixtures", "tiny", "index.json")


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def main():
    if not os.path.isfile(INDEX):
        print(f"FAIL: {INDEX} is missing (tools/reference/regen.sh writes it)")
        return 1
    with open(INDEX, encoding="utf-8") as f:
        expected = json.load(f)["checkpoint"]["manifest"]
    if not os.path.isdir(MODEL):
        print("skip: models/tiny is absent; run `make tiny`")
        return 77
    problems = []
    present = {n for n in os.listdir(MODEL) if os.path.isfile(os.path.join(MODEL, n))}
    for name, want in sorted(expected.items()):
        if name not in present:
            problems.append(f"missing  {name}")
            continue
        got = sha256_file(os.path.join(MODEL, name))
        if got != want:
            problems.append(f"differs  {name}: sha256 {got}, fixtures were made with {want}")
    for name in sorted(present - set(expected) - {"manifest.sha256"}):
        problems.append(f"extra    {name} (not in the fixtures' manifest)")
    # models/tiny/manifest.sha256 (written by write_tiny.py) must say the same.
    own = os.path.join(MODEL, "manifest.sha256")
    if os.path.isfile(own):
        with open(own, encoding="utf-8") as f:
            lines = dict(reversed(line.rstrip("\n").split("  ", 1)) for line in f if line.strip())
        if lines != expected:
            problems.append("differs  manifest.sha256 (models/tiny's own manifest disagrees with the fixtures')")
    else:
        problems.append("missing  manifest.sha256")
    if problems:
        for p in problems:
            print(p)
        print(f"FAIL: models/tiny does not match tests/fixtures/tiny/index.json ({len(problems)} problem(s)); "
              "rerun `make tiny`, or tools/reference/regen.sh if the writer changed on purpose")
        return 1
    print(f"ok: models/tiny matches the fixtures' manifest ({len(expected)} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
