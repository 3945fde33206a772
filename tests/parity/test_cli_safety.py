#!/usr/bin/env python3
"""Regression tests for issue #22 items 8 and 9 on the tiny checkpoint.

Item 8, `clef batch` and its files:
- IN == OUT (same path, a symlink, a hard link; with and without --restart) is refused with exit 2
  and IN keeps every byte (the old binary truncated IN to 0 bytes with --restart, and reported
  skipped:N doing nothing without it);
- an OUT that is not this IN's output (3 {"junk":1} lines for a 6-line IN; no OUT.clef-batch record; a record for
  another IN or other settings) is refused and left as it was, not taken as finished work;
- a request line over --max-line gets a RequestTooLong error line, the others their answers, and a
  20 MB line under the default cap is refused without the memory its parse would take;
- a normal run writes OUT.clef-batch and resumes from it; IN = - reads stdin.
Item 9, local files: `clef encode` and `clef respond --model` read an image path only with
--allow-image-paths.
CLEF_BIN overrides the binary (to see the tests red on an old build)."""
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clef_server  # noqa: E402
from clef_server import BUILD, MODEL, ROOT, TALLY, check  # noqa: E402

CLEF = os.environ.get("CLEF_BIN", os.path.join(BUILD, "clef"))
TMP = tempfile.mkdtemp(prefix="clef-cli-safety-")
IMAGE = os.path.join(ROOT, "tests", "corpus", "images", "gray_200x150.png")


def req(state, q="hot"):
    return json.dumps({"model": "clef-flash", "state": state,
                       "questions": {q: {"type": "noul", "instructions": "Is it hot?"}}}).encode()


def batch(*args, stdin=None):
    return subprocess.run([CLEF, "batch", "--model", MODEL, "--threads", "1", "--allow-errors"] + list(args),
                          input=stdin, capture_output=True, timeout=300)


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def main():
    clef_server.need_clef(CLEF)
    lines = [req("line %d is warm" % i) for i in range(6)]
    data = b"\n".join(lines) + b"\n"
    inp = os.path.join(TMP, "in.jsonl")

    # ---- item 8: IN == OUT under every name, with and without --restart
    link = os.path.join(TMP, "link.jsonl")
    hard = os.path.join(TMP, "hard.jsonl")
    for name, out in [("same path", inp), ("symlink", link), ("hard link", hard)]:
        for extra in ([], ["--restart"]):
            write(inp, data)
            for p in (link, hard):
                if os.path.lexists(p):
                    os.unlink(p)
            os.symlink(inp, link)
            os.link(inp, hard)
            p = batch(*extra, inp, out)
            check(p.returncode == 2 and b"same file" in p.stderr,
                  "IN == OUT (%s %s) refused with exit 2: rc %d %r" % (name, extra, p.returncode, p.stderr[-200:]))
            check(read(inp) == data, "IN == OUT (%s %s): IN keeps its %d bytes (has %d)"
                  % (name, extra, len(data), len(read(inp))))
    write(inp, data)

    # ---- a normal run: the record is written, a rerun resumes (nothing to do), IN untouched
    out = os.path.join(TMP, "out.jsonl")
    p = batch(inp, out)
    got = read(out).split(b"\n")[:-1] if os.path.exists(out) else []
    check(p.returncode == 0 and len(got) == len(lines), "normal run: one line per request (rc %d)" % p.returncode)
    check(os.path.exists(out + ".clef-batch"), "normal run writes OUT.clef-batch")
    p = batch(inp, out)
    check(p.returncode == 0 and b'"skipped":6' in p.stderr and b'"written":0' in p.stderr,
          "rerun on a complete OUT: skipped 6, written 0 (%r)" % p.stderr[-300:])
    answers = read(out)
    # torn tail and resume still work: a run killed after its record vouched for 3 lines (the record's
    # form: docs/cli.md) and while writing the 4th
    kept = b"\n".join(answers.split(b"\n")[:3]) + b"\n"
    identity = read(out + ".clef-batch").split(b"\n")[0]
    state = {"out_lines": 3, "out_bytes": len(kept), "out_sha256": hashlib.sha256(kept).hexdigest()}
    write(out + ".clef-batch", identity + b"\n" + json.dumps(state, separators=(",", ":")).encode() + b"\n")
    write(out, kept + b'{"model":"clef-fl')
    p = batch(inp, out)
    check(p.returncode == 0 and read(out) == answers, "resume after a torn line completes OUT exactly")

    # ---- an OUT that is not this IN's output is refused and left alone
    junk = b'{"junk":1}\n' * 3  # fewer lines than IN, so the old line-count check passes it
    jout = os.path.join(TMP, "junk.jsonl")
    write(jout, junk)
    p = batch(inp, jout)
    check(p.returncode == 2 and read(jout) == junk and b"--restart" in p.stderr,
          "3 junk lines, no record: refused, unchanged (rc %d %r)" % (p.returncode, p.stderr[-300:]))
    write(jout, junk)
    if os.path.exists(out + ".clef-batch"):
        write(jout + ".clef-batch", read(out + ".clef-batch"))  # a record copied from elsewhere
    p = batch(inp, jout)
    check(p.returncode == 2 and read(jout) == junk, "junk lines under a matching record: refused, unchanged")
    if os.path.exists(jout + ".clef-batch"):
        os.unlink(jout + ".clef-batch")
    other = os.path.join(TMP, "other.jsonl")
    write(other, b"\n".join(lines[:3]) + b"\n")
    p = batch(other, out)
    check(p.returncode == 2 and read(out) == answers, "OUT of another IN: refused, unchanged")
    p = batch("--max-length", "9000", inp, out)
    check(p.returncode == 2 and read(out) == answers, "OUT made with other settings: refused, unchanged")
    p = batch("--restart", other, out)
    check(p.returncode == 0 and len(read(out).split(b"\n")) == 4, "--restart overwrites OUT (never IN)")

    # ---- line cap
    long_state = "x" * 3000
    capped = os.path.join(TMP, "capped.jsonl")
    write(capped, lines[0] + b"\n" + req(long_state) + b"\n" + lines[1] + b"\n")
    cout = os.path.join(TMP, "capped.out.jsonl")
    p = batch("--max-line", "2K", capped, cout)
    res = [json.loads(x) for x in read(cout).split(b"\n")[:-1]] if os.path.exists(cout) else []
    check(p.returncode == 0 and len(res) == 3 and "answers" in res[0] and "answers" in res[2]
          and res[1].get("error", {}).get("type") == "RequestTooLong" and "--max-line" in res[1]["error"]["message"],
          "a line over --max-line gets a RequestTooLong line, the others answers: %r" % (res,))
    # a 20 MB line under the default cap (16M): refused without holding it
    big = os.path.join(TMP, "big.jsonl")
    with open(big, "wb") as f:
        f.write(lines[0] + b"\n")
        f.write(b'{"model":"clef-flash","state":"' + b"a" * (20 << 20) + b'","questions":{"q":{"type":"noul"}}}\n')
    bout = os.path.join(TMP, "big.out.jsonl")
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    p = batch(big, bout)
    rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0
    res = [json.loads(x) for x in read(bout).split(b"\n")[:-1]] if os.path.exists(bout) else []
    check(p.returncode == 0 and len(res) == 2 and res[1].get("error", {}).get("type") == "RequestTooLong",
          "a 20 MB line over the default cap: RequestTooLong (%r)" % ([list(r) for r in res],))
    print("20 MB line: peak child RSS %.0f MB (before: %.0f MB)" % (rss_mb, before / 1024.0), flush=True)
    if not BUILD.endswith("build-asan"):  # ASan's shadow memory makes any RSS figure meaningless
        check(rss_mb < 250, "a 20 MB line is not held and parsed: peak RSS %.0f MB" % rss_mb)

    # ---- IN = - (stdin)
    sout = os.path.join(TMP, "stdin.out.jsonl")
    p = batch("-", sout, stdin=data)
    check(p.returncode == 0 and read(sout) == answers, "IN = - reads stdin: same answers (rc %d %r)"
          % (p.returncode, p.stderr[-200:]))

    # ---- - for stdin wherever a file is read (issue #19)
    a = subprocess.run([CLEF, "preprocess", "--model", MODEL, "--image", IMAGE], capture_output=True, timeout=120)
    with open(IMAGE, "rb") as f:
        b = subprocess.run([CLEF, "preprocess", "--model", MODEL, "--image", "-"], stdin=f, capture_output=True,
                           timeout=120)
    check(a.returncode == 0 and a.stdout == b.stdout, "preprocess --image - == --image F (%r %r)" % (a.stdout, b.stdout))
    a = subprocess.run([CLEF, "tokenize", "--model", MODEL, "--text", "Hello, world"], capture_output=True, timeout=120)
    b = subprocess.run([CLEF, "tokenize", "--model", MODEL, "--file", "-"], input=b"Hello, world", capture_output=True,
                       timeout=120)
    check(a.returncode == 0 and a.stdout == b.stdout, "tokenize --file - == --text (%r %r)" % (a.stdout, b.stdout))

    # ---- item 9: image paths only with --allow-image-paths
    r = json.dumps({"model": "clef-flash", "state": "look", "images": [IMAGE],
                    "questions": {"q": {"type": "noul", "instructions": "Gray?"}}})
    rpath = os.path.join(TMP, "img.json")
    write(rpath, r.encode())
    lpath = os.path.join(TMP, "logits.json")
    write(lpath, b"[[0.5, -0.5]]")
    for verb, args in [("encode", ["--model", MODEL, "--request", rpath]),
                       ("respond", ["--model", MODEL, "--request", rpath, "--logits", lpath])]:
        p = subprocess.run([CLEF, verb] + args, capture_output=True, timeout=120)
        try:
            body = json.loads(p.stdout)
        except ValueError:
            body = {}
        check(p.returncode != 0 and "error" in body, "%s: an image path without --allow-image-paths is refused "
              "(rc %d, %r)" % (verb, p.returncode, p.stdout[:200]))
        msg = body.get("error", {}).get("message", "") if isinstance(body, dict) else ""
        check("looks like a file path" in msg and "--allow-image-paths" in msg,
              "%s: the refusal says the entry looks like a path and names the flag (not 'invalid base64'): %r" % (verb, msg))
        p = subprocess.run([CLEF, verb] + args + ["--allow-image-paths"], capture_output=True, timeout=120)
        check(p.returncode == 0 and b'"error"' not in p.stdout,
              "%s --allow-image-paths reads the file (rc %d %r %r)" % (verb, p.returncode, p.stdout[:200], p.stderr[-200:]))

    print("%d checks, %d failed" % (TALLY.checks, len(TALLY.failures)))
    sys.exit(1 if TALLY.failures else 0)


if __name__ == "__main__":
    main()
