#!/usr/bin/env python3
"""The anchor row of the gate table: how far the reference's own lower precision (torch bf16) is from
its fp32 run on the same requests, measured as `clef gate` measures a precision (src/cli/cmd_gate.c):
per arm, every option's |dp| (max, and the 99th percentile by nearest rank) and the questions whose
argmax (the first maximal option) agrees.

    python3 tools/reference/gate_anchor.py [--fp32 tests/fixtures/gate_tiny/fixtures-gate-tiny.json]
        [--other tests/fixtures/gate_tiny/fixtures-gate-tiny-bf16.json] [--json]

Both files are written by tools/reference/make_gate_fixture.py (--dtype float32 / bfloat16), never by
hand. Prints one line per arm (text, g256, g448, native), or with --json one object per arm.
"""
import argparse
import json
import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GATE = os.path.join(ROOT, "tests", "fixtures", "gate_tiny")
ARMS = ("text", "g256", "g448", "native")


def first_max(values):
    best, top = -1.0, 0
    for i, v in enumerate(values):
        if v > best:
            best, top = v, i
    return top


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def compare(fp32, other):
    """arm -> {runs, questions, argmax_same, max_dp, p99_dp}; raises on requests that do not line up."""
    theirs = {(r["id"], r["arm"]): r for r in other["runs"]}
    stats = {}
    for run in fp32["runs"]:
        key = (run["id"], run["arm"])
        o = theirs.get(key)
        if o is None or o["ids"] != run["ids"]:
            raise ValueError("run %s/%s: missing or other token ids in the second file" % key)
        st = stats.setdefault(run["arm"], {"runs": 0, "questions": 0, "argmax_same": 0, "dps": []})
        st["runs"] += 1
        oq = {q["question_id"]: q for q in o["questions"]}
        for q in run["questions"]:
            q2 = oq.get(q["question_id"])
            if q2 is None or q2["option_ids"] != q["option_ids"]:
                raise ValueError("run %s/%s question %s: options differ" % (key + (q["question_id"],)))
            st["questions"] += 1
            st["dps"].extend(abs(a - b) for a, b in zip(q2["probs"], q["probs"]))
            st["argmax_same"] += first_max(q2["probs"]) == first_max(q["probs"])
    out = {}
    for arm, st in stats.items():
        dps = sorted(st["dps"])
        rank = max(1, math.ceil(0.99 * len(dps)))
        out[arm] = {"runs": st["runs"], "questions": st["questions"], "argmax_same": st["argmax_same"],
                    "max_dp": dps[-1], "p99_dp": dps[rank - 1]}
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fp32", default=os.path.join(GATE, "fixtures-gate-tiny.json"))
    ap.add_argument("--other", default=os.path.join(GATE, "fixtures-gate-tiny-bf16.json"))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    fp32, other = load(args.fp32), load(args.other)
    res = compare(fp32, other)
    if args.json:
        print(json.dumps(res, sort_keys=True))
        return 0
    print("%s (%s) against %s (%s)" % (os.path.basename(args.other), other["source"].get("dtype"),
                                       os.path.basename(args.fp32), fp32["source"].get("dtype")))
    for arm in ARMS:
        if arm in res:
            r = res[arm]
            print("%-7s runs %3d  max|dp| %.2e  p99|dp| %.2e  argmax %d/%d = %.1f%%" % (
                arm, r["runs"], r["max_dp"], r["p99_dp"], r["argmax_same"], r["questions"],
                100.0 * r["argmax_same"] / r["questions"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
