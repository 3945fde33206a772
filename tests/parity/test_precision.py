#!/usr/bin/env python3
"""The CPU precisions (issue #34) and their fidelity gate, on the tiny checkpoint.

 1. `clef gate --precision int8 --arm text` (CLEF_UNGATED=int8, so it runs although not offered) on
    tests/fixtures/gate_tiny: the backend is cpu-int8; every run compared; the verdict printed is the
    one the printed numbers give under the int8 bar (argmax on >= 98% of questions, max |dp| <= 5e-2);
    p99 <= max; the answers moved (max |dp| > 1e-4: the int8 arithmetic ran).
 2. int8 is offered (clef decide --precision int8 answers without CLEF_UNGATED) exactly when that gate
    passes; when it is refused, the error says why (exit 3, "not offered", the bar).
 3. `clef gate --precision fast --arm text`: no CPU kernel for it here, so it prints a note saying it
    runs fp32, reports backend cpu and passes the fp32 thresholds; `clef decide --precision bf16`
    prints the same kind of note on stderr and answers byte-equal to fp32; `--gpu 1` on the CPU is
    named in a note too (an option with no effect is never dropped silently), and a plain run has none.
 4. CLEF_PRECISION=bogus: clef_open fails naming int8 among the expected values.
The gate numbers are printed (docs/precision.md publishes them). Runs with .venv-test's python; the
binary from $CLEF_BUILD (default build/)."""
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("CLEF_BUILD", os.path.join(ROOT, "build")).rstrip("/")
CLEF = os.path.join(BUILD, "clef")
MODEL = os.path.join(ROOT, "models", "tiny")
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "gate_tiny", "fixtures-gate-tiny.json")
REQ = os.path.join(ROOT, "tests", "corpus", "requests", "t001_basic.json")
failures = []


def check(cond, what, detail=""):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)
        if detail:
            print("     " + detail.replace("\n", "\n     "))


def run(args, **env_extra):
    env = {k: v for k, v in os.environ.items() if k not in ("CLEF_PRECISION", "CLEF_UNGATED", "CLEF_LINEAR")}
    env.setdefault("CLEF_THREADS", "2")
    env.update(env_extra)
    p = subprocess.run([CLEF, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=1800, env=env)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def text_line(out):
    """(runs_run, runs_total, max_dp, p99_dp, argmax_same, q_total, passed) of the text arm's line."""
    line = next((l for l in out.splitlines() if l.startswith("text ")), "")
    m = re.match(r"text\s+(\d+)/(\d+)\s+\d+/\d+\s+(\S+)\s+(\S+)\s+(\d+)/(\d+)\s+(pass|FAIL)", line)
    if not m:
        return None
    g = m.groups()
    return int(g[0]), int(g[1]), float(g[2]), float(g[3]), int(g[4]), int(g[5]), g[6] == "pass"


def main():
    if not os.access(CLEF, os.X_OK):
        print(f"skip: no {CLEF} (build first)")
        return 77
    if not os.path.isfile(os.path.join(MODEL, "config.json")):
        print(f"skip: no {MODEL} (make tiny)")
        return 77
    n_text = sum(1 for r in json.load(open(FIXTURE, encoding="utf-8"))["runs"] if r["arm"] == "text")

    # 1. the int8 gate
    rc, out, err = run(["gate", "--model", MODEL, "--fixture", FIXTURE, "--arm", "text", "--precision", "int8"],
                       CLEF_UNGATED="int8")
    t = text_line(out)
    check(t is not None and "backend: cpu-int8" in out, "1: int8 gate ran on the cpu-int8 backend", out + err[-1500:])
    int8_pass = False
    if t:
        runs, total, mx, p99, same, qs, passed = t
        print(f"     int8 gate (tiny, text arm): {runs}/{total} runs, max |dp| {mx:.3g}, p99 |dp| {p99:.3g}, "
              f"argmax {same}/{qs} = {100.0 * same / qs:.1f}%, {'pass' if passed else 'FAIL'}")
        want = mx <= 5e-2 and same >= 0.98 * qs
        check(runs == total == n_text, f"1: all {n_text} text runs compared", out)
        check(passed == want and (rc == 0) == want, "1: the verdict and exit status follow the int8 bar", out)
        check(p99 <= mx, "1: p99 <= max", out)
        check(mx > 1e-4, "1: the int8 arithmetic ran (answers moved beyond the fp32 gate's 1e-4)", out)
        int8_pass = passed

    # 2. offered exactly when it passes
    rc, out, err = run(["decide", "--model", MODEL, "--request", REQ, "--precision", "int8"])
    if int8_pass:
        check(rc == 0 and out.startswith('{"model"'), "2: int8 passes its gate, so clef decide offers it", out + err)
    else:
        check(rc == 3 and "not offered" in err and "98%" in err and "5e-2" in err,
              "2: int8 failed its gate, so clef decide refuses it, saying why", f"rc {rc}\n{out}{err}")
    rc, out, err = run(["decide", "--model", MODEL, "--request", REQ, "--precision", "int8"], CLEF_UNGATED="int8")
    check(rc == 0 and out.startswith('{"model"'), "2: CLEF_UNGATED=int8 runs it", out + err)

    # 3. fast and bf16 have no CPU kernel here: a note, and the exact path
    rc, out, err = run(["gate", "--model", MODEL, "--fixture", FIXTURE, "--arm", "text", "--precision", "fast"])
    t = text_line(out)
    check(rc == 0 and t is not None and t[6] and t[2] <= 1e-4 and "backend: cpu\n" in out and
          re.search(r"^note: --precision fast .*running fp32", out, re.M) is not None,
          "3: gate --precision fast: a note, backend cpu, the fp32 thresholds pass", out + err[-1500:])
    rc32, out32, _ = run(["decide", "--model", MODEL, "--request", REQ])
    rc, out, err = run(["decide", "--model", MODEL, "--request", REQ, "--precision", "bf16"])
    check(rc == 0 and rc32 == 0 and out == out32 and "clef decide: note: --precision bf16" in err,
          "3: decide --precision bf16: the note on stderr, the fp32 bytes", err)

    # 3b. an option with no effect on the backend that runs is named, never silently dropped (#36)
    rc, out, err = run(["decide", "--model", MODEL, "--request", REQ, "--gpu", "1"])
    check(rc == 0 and out == out32 and "clef decide: note: --gpu 1 has no effect on the CPU backend" in err,
          "3b: decide --gpu 1 on the CPU: a note naming --gpu, the fp32 bytes", err)
    rc, out, err = run(["decide", "--model", MODEL, "--request", REQ])
    check(rc == 0 and "note:" not in err, "3b: decide with nothing ineffective asked: no note", err)

    # 4. the knob's values
    rc, out, err = run(["decide", "--model", MODEL, "--request", REQ, "--device", "auto"], CLEF_PRECISION="bogus")
    check(rc != 0 and "int8" in err, "4: CLEF_PRECISION=bogus is refused, naming int8 among the values", err)

    if failures:
        print(f"{len(failures)} failed")
        return 1
    print("all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
