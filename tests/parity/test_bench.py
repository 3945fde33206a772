#!/usr/bin/env python3
"""`clef bench` times the forward that serving runs (issue #37), on models/tiny:

- `--tokens 10,64 --records R` for R = 1 and 3 (the two synthetic schemas: one question under 64
  tokens, three from 64): exit 0, per count the warm-up left out, one run line per --repeat then
  one summary line, each with exactly the keys docs/cli.md's "`clef bench`" section shows; tokens,
  records and rep as asked, positive seconds, tokens_per_s = tokens x records / seconds_text and the
  summary's medians those of its run lines;
- `--request F --records R` for R = 1 and 3 on a text request of eight questions and an image
  request of three: the summary's answers_sha256 (the R answers of the timed forward) equals the SHA-256 of
  what `clef batch` writes for R lines of that request, so the forward the bench times is the one
  that answers (a bench that timed another forward, or none, leaves answers that differ);
- neither or both of --tokens and --request: exit 2, before a model is loaded."""
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clef_server import CLEF, MODEL, ROOT, TALLY, check, need_clef  # noqa: E402

REQUESTS = [os.path.join(ROOT, "tests", "corpus", "requests", name)
            for name in ("t029_many_questions.json", "m012_gray_alpha_64.json")]


def documented_keys():
    """{kind: [keys]} from the JSON lines shown in docs/cli.md's `clef bench` section."""
    text = open(os.path.join(ROOT, "docs", "cli.md"), encoding="utf-8").read()
    section = text.split("### `clef bench`", 1)[1].split("\n### ", 1)[0]
    keys = {}
    for line in section.splitlines():
        m = re.match(r'^    \{"kind":"(\w+)"', line)
        if m:
            keys[m.group(1)] = re.findall(r'"(\w+)":', line)
    return keys


def bench(*args):
    p = subprocess.run([CLEF, "bench", "--model", MODEL, "--threads", "1", *args], capture_output=True, text=True,
                       timeout=600)
    lines = [json.loads(x) for x in p.stdout.splitlines() if x.strip()]
    return p, lines


def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def check_synthetic(keys, records):
    counts, repeat = [10, 64], 2
    p, lines = bench("--tokens", ",".join(map(str, counts)), "--records", str(records), "--repeat", str(repeat),
                     "--warmup", "1", "--prime", "3")
    what = "--tokens %s --records %d" % (counts, records)
    if not check(p.returncode == 0, "%s: exit %d (%s)" % (what, p.returncode, p.stderr.strip())):
        return
    if not check(len(lines) == len(counts) * (repeat + 1), "%s: %d lines" % (what, len(lines))):
        return
    for c, n in enumerate(counts):
        runs, summary = lines[c * (repeat + 1):(c + 1) * (repeat + 1) - 1], lines[(c + 1) * (repeat + 1) - 1]
        for i, r in enumerate(runs):
            check(list(r) == keys["run"], "%s: run keys %s, documented %s" % (what, list(r), keys["run"]))
            check(r["kind"] == "run" and r["tokens"] == n and r["records"] == records and r["rep"] == i
                  and r["threads"] == 1, "%s: run line %r" % (what, r))
            check(r["seconds_text"] > 0 and r["seconds_head"] > 0 and r["peak_rss_mb"] > 0,
                  "%s: run figures %r" % (what, r))
            # seconds_text is printed to 0.1 ms (%.4f), so the seconds it was computed from lie within
            # half a unit of it: tokens_per_s (printed to 0.01) must lie in the interval they give
            # (a forward of ~2 ms on tiny is 2.5% off from its printed figure, so no fixed percentage)
            s_lo, s_hi = r["seconds_text"] - 0.5e-4, r["seconds_text"] + 0.5e-4
            lo, hi = n * records / s_hi - 0.005, (n * records / s_lo if s_lo > 0 else float("inf")) + 0.005
            check(lo <= r["tokens_per_s"] <= hi,
                  "%s: tokens_per_s %s, tokens x records / seconds_text in [%.2f, %.2f]"
                  % (what, r["tokens_per_s"], lo, hi))
        check(list(summary) == keys["summary"], "%s: summary keys %s, documented %s"
              % (what, list(summary), keys["summary"]))
        check(summary["tokens"] == n and summary["records"] == records and summary["repeat"] == repeat,
              "%s: summary %r" % (what, summary))
        for field, printed in (("seconds_text", 1e-4), ("seconds_head", 1e-4), ("tokens_per_s", 1e-2)):
            m = median([r[field] for r in runs])  # of printed figures: off by up to one printed unit
            check(abs(summary["median_" + field] - m) <= printed * 1.01,
                  "%s: median_%s %s, the runs' median %s" % (what, field, summary["median_" + field], m))


def check_request(keys, path, records, tmp):
    name = os.path.basename(path)
    p, lines = bench("--request", path, "--records", str(records), "--repeat", "1", "--prime", "0")
    what = "--request %s --records %d" % (name, records)
    if not check(p.returncode == 0 and len(lines) == 2, "%s: exit %d, %d lines (%s)"
                 % (what, p.returncode, len(lines), p.stderr.strip())):
        return
    summary = lines[1]
    check(list(summary) == keys["summary"] + ["answers_sha256"], "%s: summary keys %s" % (what, list(summary)))
    body = open(path, "rb").read().replace(b"\n", b"")
    src, out = os.path.join(tmp, "in-%s-%d.jsonl" % (name, records)), os.path.join(tmp, "out-%s-%d.jsonl" % (name, records))
    with open(src, "wb") as f:
        f.write((body + b"\n") * records)
    q = subprocess.run([CLEF, "batch", "--model", MODEL, "--threads", "1", src, out], capture_output=True, timeout=600)
    if not check(q.returncode == 0, "%s: clef batch exit %d (%s)" % (what, q.returncode, q.stderr[-300:])):
        return
    answers = open(out, "rb").read()
    check(answers.count(b"\n") == records and b'"error"' not in answers, "%s: clef batch answered %r" % (what, answers[:200]))
    check(summary["tokens"] == json.loads(answers.splitlines()[0])["usage"]["input_tokens"],
          "%s: tokens %s, clef batch's input_tokens differ" % (what, summary["tokens"]))
    check(summary["answers_sha256"] == hashlib.sha256(answers).hexdigest(),
          "%s: answers_sha256 %s, clef batch's answers %s" % (what, summary["answers_sha256"],
                                                              hashlib.sha256(answers).hexdigest()))


def main():
    need_clef()
    keys = documented_keys()
    check(set(keys) == {"run", "summary"}, "docs/cli.md shows the run and summary lines (%s)" % sorted(keys))
    if set(keys) != {"run", "summary"}:
        sys.exit(1)
    for records in (1, 3):
        check_synthetic(keys, records)
    with tempfile.TemporaryDirectory(prefix="clef-bench-") as tmp:
        for path in REQUESTS:
            for records in (1, 3):
                check_request(keys, path, records, tmp)
    for args in ([], ["--tokens", "10", "--request", REQUESTS[0]]):
        p = subprocess.run([CLEF, "bench", "--model", "/nonexistent/clef-bench", *args], capture_output=True,
                           text=True, timeout=60)
        check(p.returncode == 2 and "--tokens" in p.stderr and "--request" in p.stderr,
              "bench %s: exit %d (%r)" % (args, p.returncode, p.stderr))
    print("%d checks, %d failed" % (TALLY.checks, len(TALLY.failures)))
    sys.exit(1 if TALLY.failures else 0)


if __name__ == "__main__":
    main()
