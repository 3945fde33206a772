#!/usr/bin/env python3
"""Error bodies byte for byte: every corpus request the reference fails (tests/fixtures/tiny/index.json,
the reference's own run: its exception's class and str()) is answered, through `clef batch` (all of
them, one line each), `clef decide` (one request per engine name) and `clef serve` (all of them,
POSTed), with exactly the bytes of the body docs/errors.md states,
`{"error":{"type":"<Name>","message":"<text>"}}`, where <Name> is the engine name the reference's
failure maps to (docs/errors.md; where two names fit, ours must be one of them) and <text> is the
reference's message (every one of these is a message we copy: docs/errors.md "Message rule").
So a change to the body's keys, their order, the string escaping or a message fails here.

The reference writes no error bodies (its errors are exceptions, contract.md §3 and §8), so the
expected bytes are the documented shape filled with the fixture's names and messages, never typed.
Needs models/tiny and the fixture (make tiny; tools/reference/regen.sh writes the fixture)."""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clef_server import CLEF, MODEL, TALLY, Server, check, need_clef, post, skip  # noqa: E402
from reference_errors import body_template, compare_message, error_body, ref_name, reference_errors  # noqa: E402


def expected(template, err, got):
    """The bytes we must answer for the reference's failure err; got (our bytes) only picks between
    two engine names that both fit the reference's exception."""
    names = ref_name(err)
    name = next(iter(names))
    if len(names) > 1:
        try:
            ours = json.loads(got)["error"]["type"]
        except (ValueError, KeyError, TypeError):
            ours = None
        name = ours if ours in names else sorted(names)[0]
    return error_body(template, name, err["message"])


def compare(path, template, cases, answers):
    for (name, _body, err), got in zip(cases, answers):
        want = expected(template, err, got)
        check(got == want, "%s %s:\n   got  %r\n   want %r" % (path, name, got, want))


def via_batch(cases, tmp):
    src, out = os.path.join(tmp, "in.jsonl"), os.path.join(tmp, "out.jsonl")
    with open(src, "wb") as f:
        f.write(b"".join(body + b"\n" for _name, body, _err in cases))
    p = subprocess.run([CLEF, "batch", "--model", MODEL, "--threads", "1", src, out], capture_output=True,
                       timeout=600)
    check(p.returncode == 1, "clef batch over the errors: exit %d (1: error lines)" % p.returncode)
    lines = open(out, "rb").read().split(b"\n")
    check(len(lines) == len(cases) + 1 and lines[-1] == b"", "clef batch: %d lines for %d requests"
          % (len(lines) - 1, len(cases)))
    return lines[:-1]


def via_decide(cases, tmp):
    answers = []
    for i, (_name, body, _err) in enumerate(cases):
        path = os.path.join(tmp, "req-%d.json" % i)
        with open(path, "wb") as f:
            f.write(body)
        p = subprocess.run([CLEF, "decide", "--model", MODEL, "--threads", "1", "--request", path],
                           capture_output=True, timeout=300)
        check(p.returncode == 1 and p.stdout.endswith(b"\n"), "clef decide %s: exit %d" % (_name, p.returncode))
        answers.append(p.stdout[:-1])
    return answers


def via_serve(cases):
    server = Server(threads=1)
    try:
        answers = []
        for name, body, _err in cases:
            status, _headers, data = post(server.port, body)
            check(400 <= status < 600, "serve %s: status %d" % (name, status))
            answers.append(data)
        return answers
    finally:
        check(server.stop() == 0, "clef serve exits 0 on SIGTERM")
        report = server.sanitizer_report()
        check(not report, "clef serve: no sanitizer report (%s)" % report)


def main():
    need_clef()
    cases = reference_errors()
    if cases is None:
        skip("skip: no tests/fixtures/tiny/index.json (tools/reference/regen.sh)")
    template = body_template()
    check(all(compare_message(err) for _n, _b, err in cases), "every reference failure of the corpus has a "
          "message we copy (else this test needs the engine's own message for it)")
    one_per_name = {}
    for case in cases:
        one_per_name.setdefault(frozenset(ref_name(case[2])), case)
    with tempfile.TemporaryDirectory(prefix="clef-error-bodies-") as tmp:
        compare("batch", template, cases, via_batch(cases, tmp))
        decided = list(one_per_name.values())
        compare("decide", template, decided, via_decide(decided, tmp))
    compare("serve", template, cases, via_serve(cases))
    print("%d reference failures (%d through decide): %d checks, %d failed"
          % (len(cases), len(one_per_name), TALLY.checks, len(TALLY.failures)))
    sys.exit(1 if TALLY.failures else 0)


if __name__ == "__main__":
    main()
