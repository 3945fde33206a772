#!/usr/bin/env python3
"""clef batch on the tiny checkpoint:

1. batched vs alone: `clef batch` with a large token budget (many requests per forward) and with
   --max-batch 1 (each request alone) write identical bytes for every corpus request, and a sample
   of lines equals `clef decide` on the same body;
2. crash-resume: a run killed with SIGKILL halfway (plus a torn last line) and restarted writes the
   same OUT as the uninterrupted run, nothing lost or duplicated;
3. Ctrl-C: SIGINT stops with exit 130 after whole lines; the rerun completes the same OUT.
CLEF_BUILD ending in build-asan runs fewer lines."""
import glob
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clef_server  # noqa: E402
from clef_server import ASAN, CLEF, MODEL, ROOT, TALLY, check  # noqa: E402

TMP = tempfile.mkdtemp(prefix="clef-batch-test-")


def lines_of(path):
    with open(path, "rb") as f:
        return f.read().split(b"\n")[:-1]


def run_batch(inp, out, *extra, timeout=900):
    p = subprocess.run([CLEF, "batch", "--model", MODEL, "--threads", "2", "--allow-errors"] + list(extra) + [inp, out],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    summary = None
    for line in p.stderr.decode("utf-8", "replace").splitlines():
        if line.startswith('{"event":"batch"'):
            summary = json.loads(line)
    return p.returncode, summary, p.stderr


def wait_lines(path, n, proc, limit=600):
    t_end = time.time() + limit
    while time.time() < t_end and proc.poll() is None:
        try:
            with open(path, "rb") as f:
                if f.read().count(b"\n") >= n:
                    return True
        except FileNotFoundError:
            pass
        time.sleep(0.005)
    return False


def main():
    clef_server.need_clef()
    t0 = time.time()
    files = sorted(glob.glob(os.path.join(ROOT, "tests", "corpus", "requests", "*.json")))
    reqs = []
    for f in files:
        b = open(f, "rb").read()
        if b.endswith(b"\n"):
            b = b[:-1]
        if b"\n" in b:  # a JSONL line cannot hold it (t058: pretty-printed JSON)
            continue
        name = os.path.basename(f)
        if len(b) > 60000:  # the 16k-token truncation request: minutes on a shared box
            continue
        if ASAN and (name.startswith("m") and name > "m004") :
            continue
        reqs.append((name, b))
    if ASAN:
        reqs = reqs[::3]
    inp = os.path.join(TMP, "in.jsonl")
    with open(inp, "wb") as f:
        for _, b in reqs:
            f.write(b + b"\n")
    n = len(reqs)

    # 1. batched vs alone
    big = os.path.join(TMP, "big.jsonl")
    rc, s_big, err = run_batch(inp, big, "--batch-tokens", "1000000", "--max-batch", "64")
    check(rc == 0 and s_big and s_big["written"] == n, "batched run completes (rc %s, %s)" % (rc, err[-300:]))
    alone = os.path.join(TMP, "alone.jsonl")
    rc, s_alone, err = run_batch(inp, alone, "--max-batch", "1")
    check(rc == 0 and s_alone and s_alone["written"] == n, "alone run completes")
    a, b = lines_of(big), lines_of(alone)
    check(len(a) == n and len(b) == n, "one line per request (%d, %d, %d)" % (len(a), len(b), n))
    diff = [reqs[i][0] for i in range(min(len(a), len(b))) if a[i] != b[i]]
    check(not diff, "batched == alone for every request; differ: %s" % diff[:10])
    print("batched vs alone: %d requests, %d differ (%.1fs)" % (n, len(diff), time.time() - t0), flush=True)
    # a sample against clef decide
    step = max(1, n // (4 if ASAN else 12))
    bad = []
    for i in range(0, n, step):
        path = os.path.join(TMP, "one.json")
        with open(path, "wb") as f:
            f.write(reqs[i][1])
        p = subprocess.run([CLEF, "decide", "--model", MODEL, "--threads", "1", "--request", path],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600)
        if p.stdout.rstrip(b"\n") != a[i]:
            bad.append(reqs[i][0])
    check(not bad, "clef batch line == clef decide: differ %s" % bad)

    # 2. SIGKILL halfway + a torn line, then restart
    out = os.path.join(TMP, "killed.jsonl")
    p = subprocess.Popen([CLEF, "batch", "--model", MODEL, "--threads", "2", "--max-batch", "4", inp, out],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    caught = wait_lines(out, max(1, n // 3), p)
    p.send_signal(signal.SIGKILL)
    p.wait()
    have = len(lines_of(out))
    check(caught and 0 < have < n, "killed halfway (%d of %d lines)" % (have, n))
    with open(out, "ab") as f:
        f.write(b'{"model":"clef-fl')  # a torn last line
    rc, s, err = run_batch(inp, out, "--max-batch", "4")
    # the restart keeps the lines OUT.clef-batch vouches for: all but those of the window being written
    # when the kill came (at most 4 x --max-batch lines written before the record was rewritten)
    check(rc == 0 and s and have - 16 <= s["skipped"] <= have and s["written"] == n - s["skipped"],
          "restart skips the complete lines its record vouches for (%d of the %d complete: %s)"
          % (s["skipped"] if s else -1, have, s))
    check(open(out, "rb").read() == open(big, "rb").read(), "restarted OUT == uninterrupted OUT")

    # 3. SIGINT: whole lines, exit 130, rerun completes
    out = os.path.join(TMP, "interrupted.jsonl")
    p = subprocess.Popen([CLEF, "batch", "--model", MODEL, "--threads", "2", "--max-batch", "2", inp, out],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    caught = wait_lines(out, max(1, n // 4), p)
    p.send_signal(signal.SIGINT)
    _, errb = p.communicate(timeout=600)
    data = open(out, "rb").read()
    check(caught and p.returncode == 130, "SIGINT: exit 130 (got %s)" % p.returncode)
    check(data.endswith(b"\n") and 0 < data.count(b"\n") < n, "SIGINT: only whole lines written")
    rc, s, err = run_batch(inp, out)
    check(rc == 0 and open(out, "rb").read() == open(big, "rb").read(), "rerun after SIGINT == uninterrupted OUT")
    # a finished OUT: nothing to do
    rc, s, err = run_batch(inp, out)
    check(rc == 0 and s["written"] == 0 and s["skipped"] == n, "rerun on a complete OUT writes nothing")
    # OUT longer than IN is refused
    with open(out, "ab") as f:
        f.write(b"{}\n")
    rc, s, err = run_batch(inp, out)
    check(rc == 2 and b"--restart" in err, "OUT with more lines than IN refused")

    print("%d requests; %d checks, %d failed (%.1fs)" % (n, TALLY.checks, len(TALLY.failures), time.time() - t0))
    sys.exit(1 if TALLY.failures else 0)


if __name__ == "__main__":
    main()
