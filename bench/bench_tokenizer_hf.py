#!/usr/bin/env python3
"""HF tokenizers side of bench/bench_tokenizer.sh (run with .venv-test's python, single-threaded:
RAYON_NUM_THREADS=1, TOKENIZERS_PARALLELISM=false, encode() without batching).

    bench_tokenizer_hf.py TOKENIZER_JSON DIR REPEAT

For each DIR/<name>.txt: writes DIR/<name>_state.txt, the shortest prefix (whole characters) that
encodes to at least 16,384 tokens, then times encode(text, add_special_tokens=False) on the whole
text (best of 2) and on the state (best of REPEAT), each on a freshly loaded Tokenizer so that the
first run has a cold BPE cache. Prints one line per measurement:
    hf <name> <bytes> <tokens> <best wall s> <best cpu s> <first run cpu s>
plus "hf load <wall s> <cpu s>" and writes the ids to DIR/<name>[_state].hf.json for the
comparison with clef.
"""
import json
import os
import sys
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
from tokenizers import Tokenizer  # noqa: E402


def timed(fn, repeat):
    """Result, best wall, best CPU time, and the first run's CPU time (cold BPE cache)."""
    best_w = best_c = float("inf")
    out = first_c = None
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        out = fn()
        best_w = min(best_w, time.perf_counter() - w)
        dc = time.process_time() - c
        best_c = min(best_c, dc)
        if first_c is None:
            first_c = dc
    return out, best_w, best_c, first_c


def main():
    path, d, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3])
    tok, w, c, _ = timed(lambda: Tokenizer.from_file(path), 1)
    print(f"hf load {w:.4f} {c:.4f}")
    enc = lambda s: tok.encode(s, add_special_tokens=False).ids  # noqa: E731
    for name in ("english", "cjk", "json", "states"):
        if not os.path.exists(os.path.join(d, name + ".txt")):
            continue
        text = open(os.path.join(d, name + ".txt"), encoding="utf-8").read()
        lo, hi = 1, len(text)
        while lo < hi:  # shortest prefix with >= 16384 tokens
            mid = (lo + hi) // 2
            if len(enc(text[:mid])) >= 16384:
                hi = mid
            else:
                lo = mid + 1
        state = text[:lo]
        with open(os.path.join(d, name + "_state.txt"), "w", encoding="utf-8") as f:
            f.write(state)
        for label, s, rep in ((name, text, 2), (name + "_state", state, repeat)):
            fresh = Tokenizer.from_file(path)  # a cold BPE cache for the first run
            ids, w, c, first = timed(lambda: fresh.encode(s, add_special_tokens=False).ids, rep)
            with open(os.path.join(d, label + ".hf.json"), "w") as f:
                json.dump(ids, f)
            print(f"hf {label} {len(s.encode())} {len(ids)} {w:.5f} {c:.5f} {first:.5f}")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
