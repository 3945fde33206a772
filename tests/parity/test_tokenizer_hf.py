#!/usr/bin/env python3
"""Tokenizer parity: `clef tokenize` against HF tokenizers loading the same tokenizer.json.

Run with .venv-test's python (HF tokenizers pinned to the reference's version). Binary:
$CLEF_BUILD/clef (default build/clef). Models: models/tiny/tokenizer.json (Qwen2 split, clef-flash's
file) and models/tokenizer-pm/tokenizer.json (the \\p{M} split), both written by
tools/reference/build_tokenizer.py; without the latter, models/tiny's file with the \\p{M} pattern
put in (nothing else differs) is used. CLEF_TOK_QWEN2_DIR / CLEF_TOK_PM_DIR override the folders.

Checks, each id for id (one clef process per batch, --jsonl):
  1. >= 20,000 generated and edge-case strings (gen_tokenizer_strings.py, fixed seed), both variants,
     against HF `Tokenizer.encode_batch(..., add_special_tokens=False)`; plus `--split qwen35` on the
     Qwen2 file against HF on the \\p{M} file (the override), on a subset.
  2. Error lines: a lone surrogate -> LoneSurrogate, a non-string line -> BadJson, and the lines
     after them still answered.
  3. shared/fixtures/tokenizer/qwen35_pretokenize.json (parity mode: added tokens matched);
     qwen35_ordinary.json WITHOUT added-token matching: clef --no-added-tokens against HF's
     normalizer + pre_tokenizer + model (no AddedVocabulary) and against the fixture;
     qwen4exp_tokenizer_golden.json (a \\p{M} Qwen3.8 file): clef on both variants against HF and
     against the golden ids; which cases match is printed.
  4. shared/fixtures/clef-flash/fixtures-clef-flash.json: prefix, suffix, schema header and field
     example pieces, and every run's state piece (rendered as the reference does) against the
     recorded ids.
Exit 0 pass, 1 fail, 77 skip (models/tiny/tokenizer.json absent).
"""
import json
import os
import subprocess
import sys
import tempfile
import time
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SHARED = os.path.join(os.path.dirname(ROOT), "shared")
if not os.path.isdir(SHARED):
    SHARED = "/work/shared"
BUILD = os.environ.get("CLEF_BUILD", os.path.join(ROOT, "build"))
CLEF = os.path.join(BUILD, "clef")
TINY = os.environ.get("CLEF_TOK_QWEN2_DIR", os.path.join(ROOT, "models", "tiny"))
PM = os.environ.get("CLEF_TOK_PM_DIR", os.path.join(ROOT, "models", "tokenizer-pm"))

sys.path.insert(0, HERE)
import gen_tokenizer_strings  # noqa: E402

os.environ.setdefault("RAYON_NUM_THREADS", "2")
from tokenizers import Tokenizer  # noqa: E402

failures = []
_tmpdir = None
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
PM_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
            r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg)


_results = {}  # (model_dir, extra, string) -> parsed output line, filled by prefetch()


def prefetch(model_dir, strings, extra=()):
    """Runs one clef process over all strings that later run_clef calls with the same model and
    options will ask for (each process loads the 20 MB tokenizer.json: slow under ASan)."""
    uniq = list(dict.fromkeys(strings))
    for st, res in zip(uniq, _run(model_dir, uniq, extra)):
        _results[(model_dir, tuple(extra), st)] = res


def run_clef(model_dir, strings, extra=()):
    """Output lines for strings: from prefetch() when all are there, else one clef process."""
    key = (model_dir, tuple(extra))
    if all((*key, st) in _results for st in strings):
        return [_results[(*key, st)] for st in strings]
    return _run(model_dir, strings, extra)


def _run(model_dir, strings, extra=()):
    """One clef process for all strings; returns a list of parsed output lines."""
    data = "".join(json.dumps(s) + "\n" for s in strings).encode()
    p = subprocess.run([CLEF, "tokenize", "--model", model_dir, "--jsonl", "-", *extra], input=data,
                       capture_output=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"clef tokenize exited {p.returncode}: {p.stderr.decode(errors='replace')[-2000:]}")
    lines = p.stdout.decode().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) != len(strings):
        raise RuntimeError(f"clef tokenize: {len(lines)} output lines for {len(strings)} inputs")
    return [json.loads(x) for x in lines]


def ids_of(res):
    return res.get("ids") if isinstance(res, dict) else None


def hf_ids(tok, strings):
    return [e.ids for e in tok.encode_batch(strings, add_special_tokens=False)]


def hf_ids_no_added(tok, text):
    """Normalizer + pre-tokenizer + BPE model, without the AddedVocabulary (literal added-token text
    stays text): what qwen35_ordinary.json records."""
    n = tok.normalizer.normalize_str(text) if tok.normalizer else text
    out = []
    for piece, _ in tok.pre_tokenizer.pre_tokenize_str(n):
        out += [t.id for t in tok.model.tokenize(piece)]
    return out


def show(s, n=80):
    r = repr(s)
    return r if len(r) <= n else r[:n] + f"...({len(s)} chars)"


def compare(label, strings, got, want, max_show=15):
    equal = 0
    bad = []
    for s, g, w in zip(strings, got, want):
        if ids_of(g) == w:
            equal += 1
        else:
            bad.append((s, g, w))
    print(f"{label}: {len(strings)} strings: {equal} equal")
    for s, g, w in bad[:max_show]:
        print(f"  mismatch {show(s)}\n    clef {str(g)[:200]}\n    hf   {str(w)[:200]}")
    if bad:
        fail(f"{label}: {len(bad)} of {len(strings)} differ")
    return equal


def has_mark(s):
    return any(unicodedata.category(c).startswith("M") for c in unicodedata.normalize("NFC", s))


def main():
    if not os.path.isfile(os.path.join(TINY, "tokenizer.json")):
        print(f"skipped: {TINY}/tokenizer.json is absent (make tiny / tools/reference/build_tokenizer.py)")
        return 77
    if not os.access(CLEF, os.X_OK):
        print(f"FAIL: no binary {CLEF} (build first)")
        return 1
    t_start = time.time()
    models = [("qwen2", TINY), ("pm", PM)]
    if not os.path.isfile(os.path.join(PM, "tokenizer.json")):
        # derive it: models/tiny's file with the \p{M} Split pattern (what build_tokenizer.py
        # --variant pm writes; only the regex differs)
        global _tmpdir
        _tmpdir = tempfile.TemporaryDirectory()
        pm_dir = _tmpdir.name
        with open(os.path.join(TINY, "tokenizer.json"), encoding="utf-8") as f:
            doc = json.load(f)
        split = doc["pre_tokenizer"]["pretokenizers"][0]
        assert split["pattern"]["Regex"] == QWEN2_SPLIT, "models/tiny/tokenizer.json has an unexpected split"
        split["pattern"]["Regex"] = PM_SPLIT
        with open(os.path.join(pm_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(doc, f, ensure_ascii=False)
        models[1] = ("pm", pm_dir)
        print(f"note: {PM}/tokenizer.json absent; using models/tiny's file with the \\p{{M}} split ({pm_dir})")
    pm_path = models[1][1]
    toks = {name: Tokenizer.from_file(os.path.join(d, "tokenizer.json")) for name, d in models}

    strings = gen_tokenizer_strings.generate()
    fx = os.path.join(SHARED, "fixtures", "tokenizer")
    pre = json.load(open(os.path.join(fx, "qwen35_pretokenize.json"), encoding="utf-8"))
    ordn = json.load(open(os.path.join(fx, "qwen35_ordinary.json"), encoding="utf-8"))
    gold = json.load(open(os.path.join(fx, "qwen4exp_tokenizer_golden.json"), encoding="utf-8"))["textCases"]
    ff = json.load(open(os.path.join(SHARED, "fixtures", "clef-flash", "fixtures-clef-flash.json"), encoding="utf-8"))
    con = ff["contract"]
    pieces = [con["prefix"], con["suffix"], con["schema_header"], con["field_example"]]
    recs = {r["id"]: r for r in ff["records"]}
    states, state_wants = [], []
    for run in ff["runs"]:
        st = recs[run["id"]]["request"]["state"]
        text = st if isinstance(st, str) else json.dumps(st, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        at = 36 + (run["n_image_tokens"] + 3 if run["n_image_tokens"] else 0)
        states.append(text)
        state_wants.append(run["ids"][at:at + run["state_tokens"]])
    t0 = time.time()
    for name, d in models:
        prefetch(d, strings + [c["text"] for c in pre] + [c["inputText"] for c in gold]
                 + ([p["text"] for p in pieces] + states if name == "qwen2" else []))
        prefetch(d, [c["text"] for c in ordn], ["--no-added-tokens"])
    print(f"(clef runs: {time.time() - t0:.1f}s)")

    # 1. generated strings
    total_equal = 0
    for name, d in models:
        t0 = time.time()
        want = hf_ids(toks[name], strings)
        t1 = time.time()
        total_equal += compare(f"generated [{name}]", strings, run_clef(d, strings), want)
        print(f"  (HF {t1 - t0:.1f}s)")
    # the same strings through Oniguruma alone (no ASCII fast path)
    compare("generated [qwen2] --regex-only", strings, run_clef(TINY, strings, ["--regex-only"]), hf_ids(toks["qwen2"], strings))
    if "pm" in toks:
        sub = strings[:3000]
        compare("override --split qwen35 on the Qwen2 file vs HF pm", sub, run_clef(TINY, sub, ["--split", "qwen35"]),
                hf_ids(toks["pm"], sub))
        compare("override --split qwen2 on the pm file vs HF qwen2", sub, run_clef(pm_path, sub, ["--split", "qwen2"]),
                hf_ids(toks["qwen2"], sub))

    # 2. error lines
    raw = b'"a\\ud800b"\n42\n"ok"\n"\\udfff"\n"\\ud83d\\ude00"\n'
    p = subprocess.run([CLEF, "tokenize", "--model", TINY, "--jsonl", "-"], input=raw, capture_output=True, timeout=60)
    outs = [json.loads(x) for x in p.stdout.decode().splitlines()]
    want_types = ["LoneSurrogate", "BadJson", None, "LoneSurrogate", None]
    got_types = [o.get("error", {}).get("type") if "error" in o else None for o in outs]
    if p.returncode != 0 or got_types != want_types or outs[2].get("ids") != toks["qwen2"].encode("ok", add_special_tokens=False).ids \
            or outs[4].get("ids") != toks["qwen2"].encode("\U0001F600", add_special_tokens=False).ids:
        fail(f"error lines: got {outs} (rc {p.returncode})")
    else:
        print("error lines: LoneSurrogate, BadJson reported, following lines answered: ok")

    # 3. shared tokenizer fixtures
    texts = [c["text"] for c in pre]
    for name, d in models:
        got = run_clef(d, texts)
        want = hf_ids(toks[name], texts)
        compare(f"qwen35_pretokenize [{name}] clef vs HF", texts, got, want)
        fixture_eq = [ids_of(g) == c["ids"] for g, c in zip(got, pre)]
        marks = [has_mark(t) for t in texts]
        print(f"  vs fixture ids: {sum(fixture_eq)}/{len(pre)} equal "
              f"({sum(1 for e, m in zip(fixture_eq, marks) if e and not m)}/{marks.count(False)} without marks)")
        for e, m, t in zip(fixture_eq, marks, texts):
            if not e:
                print(f"    differs from fixture: {show(t)}{' (has marks: variant-dependent)' if m else ''}")
                if not m:
                    fail(f"qwen35_pretokenize [{name}]: mark-free case {show(t)} differs from the fixture")

    texts = [c["text"] for c in ordn]
    for name, d in models:
        got = run_clef(d, texts, ["--no-added-tokens"])
        want = [hf_ids_no_added(toks[name], t) for t in texts]
        compare(f"qwen35_ordinary [{name}] clef --no-added-tokens vs HF without added vocabulary", texts, got, want)
        eq = sum(ids_of(g) == c["ids"] for g, c in zip(got, ordn))
        print(f"  vs fixture ids: {eq}/{len(ordn)} equal")
        for g, c in zip(got, ordn):
            if ids_of(g) != c["ids"]:
                print(f"    differs from fixture: {show(c['text'])}{' (has marks)' if has_mark(c['text']) else ''}")
                if not has_mark(c["text"]):
                    fail(f"qwen35_ordinary [{name}]: mark-free case {show(c['text'])} differs from the fixture")

    texts = [c["inputText"] for c in gold]
    for name, d in models:
        got = run_clef(d, texts)
        compare(f"qwen4exp golden [{name}] clef vs HF", texts, got, hf_ids(toks[name], texts))
        eq = [ids_of(g) == c["ids"] for g, c in zip(got, gold)]
        print(f"  vs golden ids (a \\p{{M}} Qwen3.8 file): {sum(eq)}/{len(gold)} equal")
        for e, c in zip(eq, gold):
            if not e:
                print(f"    differs from golden: {c['name']} {show(c['inputText'], 50)}"
                      f"{' (has marks)' if has_mark(c['inputText']) else ''}")
                if name == "pm" or not has_mark(c["inputText"]):
                    fail(f"qwen4exp golden [{name}]: {c['name']} differs from the golden ids")

    # 4. the author's fixture: prompt pieces and every run's state piece
    got = run_clef(TINY, [p["text"] for p in pieces])
    ok = [ids_of(g) == p["ids"] for g, p in zip(got, pieces)]
    print(f"clef-flash contract pieces (prefix 36, suffix 18, schema header, field example): {sum(ok)}/4 equal")
    if not all(ok):
        fail(f"clef-flash contract pieces: {ok}")
    got = run_clef(TINY, states)
    compare("clef-flash fixture: state piece of every run", states, got, state_wants, max_show=5)

    print(f"({time.time() - t_start:.1f}s)")
    n_gen = len(strings) * len(models)
    if failures:
        print(f"{len(failures)} failed checks; generated: {n_gen} strings: {total_equal} equal")
        return 1
    print(f"{n_gen} strings: {total_equal} equal (generated, {len(models)} variants); fixtures and error lines ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
