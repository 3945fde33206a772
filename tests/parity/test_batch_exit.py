#!/usr/bin/env python3
"""clef batch's exit status, counts and stdout (issue #36 item 4), on the tiny checkpoint:

1. a run whose OUT holds error lines exits 1 (with a line saying how many), 0 with --allow-errors;
   a run without error lines exits 0;
2. a resumed run (here: a rerun on a complete OUT) counts the error lines OUT already holds in its
   event line's "errors" and exits 1 again;
3. OUT = - writes the same answer lines to stdout, leaves no record file, and exits as a file OUT does.
CLEF_BUILD overrides the build folder."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("CLEF_BUILD", os.path.join(ROOT, "build")).rstrip("/")
CLEF = os.path.join(BUILD, "clef")
MODEL = os.path.join(ROOT, "models", "tiny")
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)


def batch(cwd, *args):
    p = subprocess.run([CLEF, "batch", "-m", MODEL, "-t", "2"] + list(args), capture_output=True, timeout=600, cwd=cwd)
    summary = None
    for line in p.stderr.decode("utf-8", "replace").splitlines():
        if line.startswith('{"event":"batch"'):
            summary = json.loads(line)
    return p, summary


def main():
    if not os.access(CLEF, os.X_OK) or not os.path.isdir(MODEL):
        print("skip: no %s or no %s (make, make tiny)" % (CLEF, MODEL))
        sys.exit(77)
    tmp = tempfile.mkdtemp(prefix="clef-batch-exit-")
    try:
        good = open(os.path.join(ROOT, "examples", "requests.jsonl"), encoding="utf-8").read().splitlines()[:2]
        inp_ok = os.path.join(tmp, "ok.jsonl")
        inp_err = os.path.join(tmp, "err.jsonl")
        with open(inp_ok, "w") as f:
            f.write("\n".join(good) + "\n")
        with open(inp_err, "w") as f:
            f.write("\n".join([good[0], '{"model": "clef-flash"', good[1]]) + "\n")  # line 2: bad JSON

        p, s = batch(tmp, inp_ok, os.path.join(tmp, "ok.out"))
        check(p.returncode == 0 and s and s["errors"] == 0 and s["written"] == 2,
              "no error lines: exit 0 (rc %d, %s)" % (p.returncode, s))

        out = os.path.join(tmp, "err.out")
        p, s = batch(tmp, inp_err, out)
        lines = open(out, "rb").read().splitlines()
        check(len(lines) == 3 and b'"error"' in lines[1], "OUT holds the error line")
        check(p.returncode == 1 and s and s["errors"] == 1, "an error line: exit 1 (rc %d, %s)" % (p.returncode, s))
        check(b"1 of the 3 answer lines" in p.stderr and b"--allow-errors" in p.stderr,
              "the exit 1 is explained (%r)" % p.stderr[-300:])

        p, s = batch(tmp, inp_err, out)
        check(s and s["skipped"] == 3 and s["written"] == 0 and s["errors"] == 1,
              "a resumed run counts the error lines OUT already holds (%s)" % s)
        check(p.returncode == 1, "a resumed run over an OUT with error lines exits 1 (rc %d)" % p.returncode)

        out2 = os.path.join(tmp, "err2.out")
        p, s = batch(tmp, "--allow-errors", inp_err, out2)
        check(p.returncode == 0 and s and s["errors"] == 1, "--allow-errors: exit 0 (rc %d, %s)" % (p.returncode, s))

        p, s = batch(tmp, inp_err, "-")
        check(p.stdout == open(out, "rb").read(), "OUT = -: the answers on stdout, as in a file (%r)" % p.stdout[:200])
        check(p.returncode == 1 and s and s["errors"] == 1 and s["written"] == 3,
              "OUT = -: exit 1 and the counts (rc %d, %s, %r)" % (p.returncode, s, p.stderr[-300:]))
        check(not os.path.exists(os.path.join(tmp, "-")) and not os.path.exists(os.path.join(tmp, "-.clef-batch")),
              "OUT = -: no file named - and no record")
        p, s = batch(tmp, "--allow-errors", inp_ok, "-")
        check(p.returncode == 0 and p.stdout == open(os.path.join(tmp, "ok.out"), "rb").read(),
              "OUT = - without errors: exit 0, the same answers")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d failed" % len(failures))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
