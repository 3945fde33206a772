#!/usr/bin/env python3
"""1 thread vs N threads: identical bytes on every corpus request of the tiny checkpoint.

Every answered request of tests/corpus is sent with "raw": true inserted (our extension: the
unrounded fp32 probabilities are printed, so any difference in any bit of a probability shows), once
through `clef batch --threads 1` and once through `clef batch --threads 3` (more threads than this
machine's cores: the static partition still differs), on the default path and on the parity path
(CLEF_LINEAR=double; under ASan the default path only, for time). The outputs must be
byte-identical; the two longest requests are left out (clef_server.MANY_PASS_SKIP: CPU time). The default path also runs
once more (3 threads) with CLEF_AMX_PACKED=0: the Linear weights then stay unpacked (the AMX kernel
packs them per call, as before weights were packed at load), and the bytes must be the same as with
the packed weights (where there is no AMX both runs take the same path, so it is not run). The int8
precision (CLEF_PRECISION=int8 with CLEF_UNGATED=int8: int8 weights and activations, exact integer sums) runs 1 vs 3 threads
too; its lines must also differ from the default path's (else the knob did not reach the backend). Exit 0 pass, 1 fail, 77 skip.
Binary: $CLEF_BUILD/clef (default build/clef); checkpoint $CLEF_TINY (default models/tiny)."""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clef_server  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("CLEF_BUILD", os.path.join(ROOT, "build"))
MODEL = os.environ.get("CLEF_TINY", os.path.join(ROOT, "models", "tiny"))
CORPUS = os.path.join(ROOT, "tests", "corpus")


def has_amx(clef):
    """Whether `clef version` says the AMX GEMM kernel runs here (else CLEF_AMX_PACKED changes nothing)."""
    p = subprocess.run([clef, "version"], capture_output=True, text=True)
    return any(line.startswith("cpu gemm kernel:") and "amx" in line for line in p.stdout.splitlines())


def main():
    clef = os.path.join(BUILD, "clef")
    if not os.path.exists(clef) or not os.path.exists(os.path.join(MODEL, "config.json")):
        print("skip: build/clef or models/tiny missing (make; make tiny)")
        return 77
    corpus = json.load(open(os.path.join(CORPUS, "corpus.json"), encoding="utf-8"))
    entries = corpus["requests"] if isinstance(corpus, dict) else corpus
    lines = []
    for e in entries:
        raw = open(os.path.join(CORPUS, e["file"]), "rb").read()
        i = raw.find(b"{")
        if i < 0 or b"\n" in raw.strip():
            continue  # not an object, or not one line of JSONL
        if os.path.basename(e["file"])[:-len(".json")] in clef_server.MANY_PASS_SKIP:
            continue  # the two longest (16k tokens; 4,300 digits): CPU time over six passes; clef_server.py says why
        lines.append(raw[:i + 1] + b'"raw":true,' + raw[i + 1:])
    fails = []
    with tempfile.TemporaryDirectory(prefix="clef_threads_") as tmp:
        inp = os.path.join(tmp, "in.jsonl")
        open(inp, "wb").write(b"\n".join(lines) + b"\n")
        plain = {k: v for k, v in os.environ.items() if k not in ("CLEF_LINEAR", "CLEF_PRECISION")}
        modes = [("default", plain),
                 ("parity", dict(plain, CLEF_LINEAR="double")),
                 ("int8", dict(plain, CLEF_PRECISION="int8", CLEF_UNGATED="int8"))]
        if BUILD.rstrip("/").endswith("asan"):
            modes = modes[:1]
        for mode, env in modes:
            outs = []
            for threads in (1, 3):
                out = os.path.join(tmp, f"out_{mode}_{threads}.jsonl")
                p = subprocess.run([clef, "batch", "--model", MODEL, "--threads", str(threads), "--allow-errors", inp, out],
                                   capture_output=True, env=env)
                if p.returncode != 0:
                    fails.append(f"{mode}: clef batch --threads {threads} exited {p.returncode}: {p.stderr[-300:]!r}")
                    continue
                outs.append(open(out, "rb").read().split(b"\n"))
            if len(outs) == 2 and mode == "int8":
                d = open(os.path.join(tmp, "out_default_1.jsonl"), "rb").read().split(b"\n")
                if sum(1 for x, y in zip(outs[0], d) if x != y and x.startswith(b'{"model"')) == 0:
                    fails.append("int8: every answer equals the default path's: the precision did not run")
            if len(outs) == 2:
                a, b = outs
                n_ok = sum(1 for x, y in zip(a, b) if x == y)
                answered = sum(1 for x in a if x.startswith(b'{"model"'))
                if a != b:
                    fails.append(f"{mode}: {len(a) - n_ok} of {len(a)} lines differ between 1 and 3 threads")
                print(f"{mode}: {len(lines)} requests ({answered} answered with raw probabilities): "
                      f"{n_ok}/{len(a)} lines byte-identical, 1 vs 3 threads")
                if mode == "default" and not has_amx(clef):
                    print("default, CLEF_AMX_PACKED=0: not run (no AMX here: the same path as the run above)")
                elif mode == "default":
                    out = os.path.join(tmp, "out_unpacked_3.jsonl")
                    p = subprocess.run([clef, "batch", "--model", MODEL, "--threads", "3", "--allow-errors", inp, out],
                                       capture_output=True, env=dict(env, CLEF_AMX_PACKED="0"))
                    if p.returncode != 0:
                        fails.append(f"CLEF_AMX_PACKED=0: clef batch exited {p.returncode}: {p.stderr[-300:]!r}")
                    else:
                        c = open(out, "rb").read().split(b"\n")
                        n_ok = sum(1 for x, y in zip(a, c) if x == y)
                        if a != c:
                            fails.append(f"CLEF_AMX_PACKED=0: {len(a) - n_ok} of {len(a)} lines differ from the "
                                         "packed weights")
                        print(f"default, CLEF_AMX_PACKED=0 (weights packed per call): {n_ok}/{len(a)} lines "
                              "byte-identical to the packed weights")
    for f in fails:
        print("FAIL", f)
    print(f"{'PASS' if not fails else 'FAIL'}: 1 vs 3 threads on {len(lines)} corpus requests, default and parity "
          "paths; packed vs unpacked AMX weights")
    return 0 if not fails else 1


if __name__ == "__main__":
    sys.exit(main())
