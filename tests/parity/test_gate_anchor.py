#!/usr/bin/env python3
"""The gate's anchor (issue #34): the reference in torch bf16 against its fp32 run on the gate's requests.

tests/fixtures/gate_tiny/fixtures-gate-tiny-bf16.json is tools/reference/make_gate_fixture.py --dtype
bfloat16 on models/tiny; tools/reference/gate_anchor.py compares it with the fp32 fixture the way `clef
gate` compares a precision. Checks:
 1. the two files hold the same runs (token ids, question and option ids) and say their dtypes;
 2. the bf16 run really is another arithmetic (max |dp| over 1e-4 on every arm);
 3. docs/precision.md's anchor row states exactly the figures computed here (max and p99 |dp| per arm,
    the text arm's argmax count), so the published table cannot drift from the committed fixtures.
Needs no build: runs with .venv-test's python."""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools", "reference"))
import gate_anchor  # noqa: E402

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def sci(x):
    """2.99e-2, as the gate table writes numbers."""
    return re.sub(r"e([+-])0(\d)", r"e\1\2", "%.2e" % x)


def main():
    fp32 = gate_anchor.load(os.path.join(gate_anchor.GATE, "fixtures-gate-tiny.json"))
    bf16 = gate_anchor.load(os.path.join(gate_anchor.GATE, "fixtures-gate-tiny-bf16.json"))
    check(fp32["source"]["dtype"] == "float32" and bf16["source"]["dtype"] == "bfloat16",
          "the fixtures say their dtypes (float32, bfloat16)")
    check(len(bf16["runs"]) == len(fp32["runs"]), "the same number of runs (%d, %d)" % (len(fp32["runs"]),
                                                                                         len(bf16["runs"])))
    try:
        res = gate_anchor.compare(fp32, bf16)
    except ValueError as e:
        check(False, "the runs line up: %s" % e)
        return 1
    check(sorted(res) == sorted(gate_anchor.ARMS), "every arm compared: %s" % sorted(res))
    for arm, r in sorted(res.items()):
        check(r["max_dp"] > 1e-4, "%s: torch bf16 moved the answers (max |dp| %.2e)" % (arm, r["max_dp"]))
        check(r["p99_dp"] <= r["max_dp"], "%s: p99 <= max" % arm)

    doc = open(os.path.join(ROOT, "docs", "precision.md"), encoding="utf-8").read()
    row = next((ln for ln in doc.splitlines() if ln.startswith("| torch bf16 (anchor")), "")
    check(bool(row), "docs/precision.md has the anchor row ('| torch bf16 (anchor ...')")
    cells = [c.strip() for c in row.split("|")[1:-1]]
    if len(cells) >= 6:
        want_max = " / ".join(sci(res[a]["max_dp"]) for a in gate_anchor.ARMS)
        want_p99 = " / ".join(sci(res[a]["p99_dp"]) for a in gate_anchor.ARMS)
        t = res["text"]
        want_argmax = "%d/%d" % (t["argmax_same"], t["questions"])
        check(cells[3] == want_max, "the row's max |dp| is %r (docs: %r)" % (want_max, cells[3]))
        check(cells[4] == want_p99, "the row's p99 |dp| is %r (docs: %r)" % (want_p99, cells[4]))
        check(re.match(re.escape(want_argmax) + r"\b", cells[5]) is not None,
              "the row's text argmax starts %r (docs: %r)" % (want_argmax, cells[5]))
    else:
        check(False, "the anchor row has the gate table's columns: %r" % row)
    print("%d checks failed" % len(failures) if failures else "anchor: the fixtures and docs/precision.md agree")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
