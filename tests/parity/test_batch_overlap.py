#!/usr/bin/env python3
"""Regression test for issue #35 item 1: `clef batch` runs that share an OUT, and an OUT that is not
what its record OUT.clef-batch vouches for, on the tiny checkpoint.

- Overlap (a cron job started again before the last one ended): two runs with different inputs and
  the same OUT, started at once, 20 times. Every time one refuses with exit 2 (the other holds OUT's
  lock) and the other exits 0 with OUT byte-equal to a solo run of its input; no temporary record file
  is left; the record vouches for the winner's OUT (a rerun of its input skips every line, the
  loser's input is refused). The old binary let both run: both exited 0 with OUT holding one run's
  answers, a mix, or lines that were not JSON.
- Record vs OUT: a complete OUT whose lines are then replaced by other valid answer lines (another
  input's answers copied over it, one line swapped) is refused on resume (exit 2, OUT unchanged),
  never "skipped" over; an OUT cut shorter than its record vouches for is refused; an OUT with lines
  after what the record vouches for (a run killed between syncing OUT and rewriting the record) is
  resumed from the record's point and ends byte-equal to a solo run.
CLEF_BIN overrides the binary (to see the tests red on an old build)."""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("CLEF_BUILD", os.path.join(ROOT, "build")).rstrip("/")
CLEF = os.environ.get("CLEF_BIN", os.path.join(BUILD, "clef"))
MODEL = os.path.join(ROOT, "models", "tiny")
TRIES = int(os.environ.get("CLEF_OVERLAP_TRIES", "20"))  # fewer only to look at the record checks alone
LINES = 20
failures = []
checks = 0


def check(cond, what):
    global checks
    checks += 1
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def cmd(inp, out, *extra):
    return [CLEF, "batch", "--model", MODEL, "--threads", "1", "--allow-errors", *extra, inp, out]


def batch(inp, out, *extra):
    return subprocess.run(cmd(inp, out, *extra), capture_output=True, timeout=300)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def fresh(out):
    for p in (out, out + ".clef-batch"):
        if os.path.exists(p):
            os.unlink(p)


def overlap(tmp, ins, solo):
    out = os.path.join(tmp, "shared.jsonl")
    for t in range(TRIES):
        fresh(out)
        order = (0, 1) if t % 2 == 0 else (1, 0)  # each input started first half the time
        procs = {k: subprocess.Popen(cmd(ins[k], out), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                 for k in order}
        res = {k: (p.wait(timeout=300), p.stderr.read()) for k, p in procs.items()}
        for p in procs.values():
            p.stdout.close()
            p.stderr.close()
        rcs = sorted(r[0] for r in res.values())
        winner = [k for k in res if res[k][0] == 0]
        loser = [k for k in res if res[k][0] != 0]
        ok = rcs == [0, 2] and read(out) == solo[winner[0]]
        detail = ", ".join("%s: rc %d %r" % ("AB"[k], res[k][0], res[k][1][-160:]) for k in order)
        check(ok, "try %d: one run refuses with exit 2, the other's OUT is byte-equal to its solo run (%s)"
              % (t + 1, detail))
        if ok:
            check(b"in use by another clef batch run" in res[loser[0]][1] or b"record differs" in res[loser[0]][1],
                  "try %d: the refusal says why: %r" % (t + 1, res[loser[0]][1][-200:]))
        left = [n for n in os.listdir(tmp) if ".tmp" in n]
        check(not left, "try %d: no temporary record file left (%r)" % (t + 1, left))
        if t == TRIES - 1 and ok:
            p = batch(ins[winner[0]], out)
            check(p.returncode == 0 and b'"written":0' in p.stderr and b'"skipped":%d' % LINES in p.stderr
                  and read(out) == solo[winner[0]], "the record vouches for the winner's OUT: a rerun skips all")
            p = batch(ins[loser[0]], out)
            check(p.returncode == 2 and read(out) == solo[winner[0]],
                  "the loser's input on that OUT is refused, OUT unchanged (rc %d)" % p.returncode)


def record_vs_out(tmp, ins, solo):
    out = os.path.join(tmp, "rec.jsonl")
    rec = out + ".clef-batch"
    fresh(out)
    p = batch(ins[0], out)
    check(p.returncode == 0 and read(out) == solo[0], "a run on its own writes the solo OUT")
    # another input's answers (valid answer lines, as many) copied over OUT under A's record
    write(out, solo[1])
    p = batch(ins[0], out)
    check(p.returncode == 2 and read(out) == solo[1] and b"skipped" not in p.stderr,
          "B's answers under A's record: refused, not skipped (rc %d %r)" % (p.returncode, p.stderr[-300:]))
    # one line swapped for another valid answer line
    lines_a, lines_b = solo[0].split(b"\n"), solo[1].split(b"\n")
    tampered = b"\n".join(lines_a[:5] + [lines_b[5]] + lines_a[6:])
    write(out, tampered)
    p = batch(ins[0], out)
    check(p.returncode == 2 and read(out) == tampered and b"skipped" not in p.stderr,
          "one answer line swapped: refused, not skipped (rc %d %r)" % (p.returncode, p.stderr[-300:]))
    # cut shorter than the record vouches for
    cut = b"\n".join(lines_a[:7]) + b"\n"
    write(out, cut)
    p = batch(ins[0], out)
    check(p.returncode == 2 and read(out) == cut, "OUT cut below what its record vouches for: refused (rc %d %r)"
          % (p.returncode, p.stderr[-300:]))
    # killed after syncing lines 8-12 but before the record said so: the record vouches for 7 lines,
    # OUT has 12 and a torn 13th; resumed from line 8, OUT ends as the solo run's
    identity = read(rec).split(b"\n")[0]
    state = {"out_lines": 7, "out_bytes": len(cut), "out_sha256": hashlib.sha256(cut).hexdigest()}
    write(rec, identity + b"\n" + json.dumps(state, separators=(",", ":")).encode() + b"\n")
    write(out, b"\n".join(lines_a[:12]) + b"\n" + lines_a[12][:20])
    p = batch(ins[0], out)
    check(p.returncode == 0 and read(out) == solo[0] and b'"skipped":7' in p.stderr,
          "lines after what the record vouches for are answered again: OUT == solo (rc %d %r)"
          % (p.returncode, p.stderr[-300:]))


def main():
    if not os.access(CLEF, os.X_OK):
        print("skip: no %s (build first)" % CLEF)
        sys.exit(77)
    if not os.path.exists(os.path.join(MODEL, "config.json")):
        print("skip: no models/tiny (make tiny)")
        sys.exit(77)
    tmp = tempfile.mkdtemp(prefix="clef-batch-overlap-")
    try:
        ins = []
        for tag in "ab":
            path = os.path.join(tmp, "in_%s.jsonl" % tag)
            write(path, b"".join(json.dumps({"model": "clef-flash", "state": "%s%d" % (tag, i),
                                             "questions": {"q": {"type": "noul"}}}).encode() + b"\n"
                                 for i in range(LINES)))
            ins.append(path)
        solo = []
        for k, path in enumerate(ins):
            out = os.path.join(tmp, "solo_%d.jsonl" % k)
            p = batch(path, out)
            if p.returncode != 0:
                print("FAIL solo run: rc %d %r" % (p.returncode, p.stderr[-400:]))
                sys.exit(1)
            solo.append(read(out))
        check(solo[0] != solo[1] and solo[0].count(b"\n") == LINES, "the two inputs have different answers")
        record_vs_out(tmp, ins, solo)
        overlap(tmp, ins, solo)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d checks, %d failed" % (checks, len(failures)))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
