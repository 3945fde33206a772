#!/usr/bin/env python3
"""Check the rebuilt tokenizer against the author's fixture and the public tokenizer vectors.

    .venv-ref/bin/python tools/reference/check_tokenizer_fixture.py [--tok DIR] [--pm-tok DIR]

Runs in .venv-ref (transformers 5.17.0, tokenizers 0.23.3, the author's joint_schema_model.py
from rapid-mlx 0.16.10, see make_venv.sh). DIR defaults to models/tiny (qwen2 variant, written
by build_tokenizer.py), --pm-tok to models/tokenizer-pm (build_tokenizer.py --variant pm); a
missing one is rebuilt into a temporary folder.

Checks, all counted and printed; exit 0 only if every "must" check passes:

 A. (must) transformers 5.17.0 AutoTokenizer loads DIR as Qwen2Tokenizer and its backend runs
    the file's Qwen2 split (not the \\p{M} one); the 33 added tokens equal the base-model
    Qwen3.5 tokenizer_config.json's (content, id and every flag).
 B. (must) all 254 runs of fixtures-clef-flash.json: the author's encode_record() with that
    tokenizer reproduces `ids`, and per question `question_id`, `question_span`,
    `option_spans`, `option_ids` (and the type code). Image runs (62): the request gets one
    stand-in image and encode_record() a stand-in processor that does what
    Qwen3VLProcessor does to the text: tokenize "<|vision_start|><|image_pad|><|vision_end|>\\n"
    with the same tokenizer and expand the one <|image_pad|> to the run's n_image_tokens.
    So the full ids, image block included, are compared; none is skipped.
    Also: a plain HF `tokenizers.Tokenizer.from_file` gives the same ids as AutoTokenizer
    on every piece of every run.
 C. (must) shared/fixtures/tokenizer/qwen35_pretokenize.json (21 cases): normalized text,
    pretokens (pre-tokenizer output in byte-level form) and ids, qwen2 variant, added tokens
    matched. The \\p{M} variant is run too, for information.
 D. (must) qwen35_ordinary.json (26 cases): ids with NO added-token matching (the same
    tokenizer with its added-token list emptied), qwen2 variant; \\p{M} for information.
 E. (information) qwen4exp_tokenizer_golden.json (Qwen3.8-Flash-Next, \\p{M} regex; 59 text
    cases + 6 decode controls): ids through plain HF tokenizers (which runs the file's split)
    and through AutoTokenizer, normalized text, and decode / skip-special decode through
    transformers, for the pm and the qwen2 tokenizer.json. Reported, not required: it is a
    different model's file and a different transformers (5.16.0.dev0).
    Note (measured, printed under A): transformers 5.17.0's Qwen2Tokenizer rebuilds its
    backend from vocab and merges with its own Qwen2 split, so AutoTokenizer runs the Qwen2
    split even on a tokenizer.json that carries the \\p{M} one.
"""
import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SHARED = os.environ.get("CLEF_SHARED", os.path.join(os.path.dirname(ROOT), "shared"))
FIX = os.path.join(SHARED, "fixtures")
CLEF_FIXTURE = os.path.join(FIX, "clef-flash", "fixtures-clef-flash.json")
TOKDIR = os.path.join(FIX, "tokenizer")

QWEN2_RE = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
PM_RE = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
IMAGE_PAD_ID = 248056

failures = []


def must(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)
    return ok


def ensure_tok(path, variant, tmp):
    if path and os.path.exists(os.path.join(path, "tokenizer.json")):
        return path
    out = os.path.join(tmp, variant)
    print(f"(building the {variant} tokenizer into {out})")
    subprocess.run([sys.executable, os.path.join(HERE, "build_tokenizer.py"), out, "--variant", variant],
                   check=True)
    return out


def backend_split_regex(tok):
    pre = json.loads(tok.backend_tokenizer.to_str())["pre_tokenizer"]
    for p in pre.get("pretokenizers", [pre]):
        if p.get("type") == "Split":
            return p["pattern"].get("Regex")
    return None


class StandInImage:
    """Placeholder for the run's image: encode_record only counts images and hands them on."""


class StandInProcessor:
    """The text side of Qwen3VLProcessor for one image: tokenize the media text with the same
    tokenizer (added tokens matched) and expand each <|image_pad|> to n pad tokens."""

    def __init__(self, tokenizer, n_image_tokens):
        self.tokenizer = tokenizer
        self.n = n_image_tokens

    def __call__(self, text, images=None, videos=None, return_tensors=None, **kwargs):
        import torch
        assert len(text) == 1 and images and len(images) == 1 and not videos and not kwargs
        ids = []
        for i in self.tokenizer(text[0], add_special_tokens=False).input_ids:
            ids.extend([i] * self.n if i == IMAGE_PAD_ID else [i])
        return {"input_ids": torch.tensor([ids])}


def check_release_files(tok_dir):
    from transformers import AutoTokenizer
    import transformers
    import tokenizers
    print(f"transformers {transformers.__version__}, tokenizers {tokenizers.__version__}")
    must(transformers.__version__ == "5.17.0", "transformers is 5.17.0")
    tok = AutoTokenizer.from_pretrained(tok_dir)
    cls = type(tok).__name__
    rx = backend_split_regex(tok)
    print(f"A. AutoTokenizer({tok_dir}) -> {cls}; backend split = "
          f"{'qwen2' if rx == QWEN2_RE else 'pm' if rx == PM_RE else repr(rx)}; "
          f"pad {tok.pad_token!r}={tok.pad_token_id}, eos {tok.eos_token!r}={tok.eos_token_id}, "
          f"len {len(tok)}")
    must(cls == "Qwen2Tokenizer", f"AutoTokenizer class is Qwen2Tokenizer (got {cls})")
    must(rx == QWEN2_RE, "loaded backend runs the Qwen2 split")
    must(tok.pad_token_id == 248044, "pad_token_id 248044")
    must(tok.eos_token_id == 248046, "eos_token_id 248046 (<|im_end|>)")
    # Added tokens against the base-model config.
    base = json.load(open(os.path.join(TOKDIR, "qwen35_tokenizer_config.json"), encoding="utf-8"))
    want = {int(k): v for k, v in base["added_tokens_decoder"].items()}
    got = {i: {"content": t.content, "lstrip": t.lstrip, "normalized": t.normalized,
               "rstrip": t.rstrip, "single_word": t.single_word, "special": t.special}
           for i, t in tok.added_tokens_decoder.items()}
    same = got == want
    print(f"A. added tokens: {len(got)} in the loaded tokenizer, {len(want)} in qwen35_tokenizer_config.json, "
          f"identical (content, id, flags): {same}")
    must(same, "added tokens equal the base-model config's")
    raw = json.load(open(os.path.join(tok_dir, "tokenizer.json"), encoding="utf-8"))["added_tokens"]
    raw_tab = {a["id"]: {k: a[k] for k in ("content", "lstrip", "normalized", "rstrip", "single_word", "special")}
               for a in raw}
    must(raw_tab == want, "tokenizer.json added_tokens equal the base-model config's")
    return tok


def check_pm_override(pm_dir):
    """Information: what transformers 5.17.0 does with a tokenizer.json carrying the \\p{M} split."""
    from transformers import AutoTokenizer
    auto = AutoTokenizer.from_pretrained(pm_dir)
    rx = backend_split_regex(auto)
    plain = load_plain(pm_dir)
    file_rx = json.loads(plain.to_str())["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"]
    ka = auto("\u0915\u094d", add_special_tokens=False).input_ids
    kp = plain.encode("\u0915\u094d", add_special_tokens=False).ids
    print(f"A. (info) pm tokenizer.json (file split {'pm' if file_rx == PM_RE else '?'}) via AutoTokenizer -> "
          f"{type(auto).__name__}, backend split {'qwen2' if rx == QWEN2_RE else 'pm' if rx == PM_RE else '?'}; "
          f"'\u0915\u094d' -> AutoTokenizer {ka}, HF tokenizers {kp}")


def check_clef_fixture(tok, tok_dir):
    import joint_schema_model as jsm
    from tokenizers import Tokenizer
    print(f"B. joint_schema_model from {jsm.__file__}")
    plain = Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))

    d = json.load(open(CLEF_FIXTURE, encoding="utf-8"))
    records = {r["id"]: r for r in d["records"]}
    ok_runs = {"text": 0, "image": 0}
    n_runs = {"text": 0, "image": 0}
    pieces_checked = piece_mismatch = 0
    qtype = {"noul": 0, "choice": 1, "score": 2}

    # Record every piece passed to the tokenizer, to compare AutoTokenizer with plain tokenizers.
    class Spy:
        def __init__(self, inner):
            self.inner = inner
            self.texts = []

        def __call__(self, text, **kw):
            self.texts.append(text)
            return self.inner(text, **kw)

        def __getattr__(self, name):
            return getattr(self.inner, name)

    for run in d["runs"]:
        kind = "text" if run["arm"] == "text" else "image"
        n_runs[kind] += 1
        request = copy.deepcopy(records[run["id"]]["request"])
        spy = Spy(tok)
        proc = None
        if kind == "image":
            assert run["n_image_tokens"] > 0 and "images" not in request
            request["images"] = [StandInImage()]
            proc = StandInProcessor(spy, run["n_image_tokens"])
        enc = jsm.encode_record(spy, request, processor=proc)
        problems = []
        if list(enc.input_ids) != run["ids"]:
            first = next((i for i, (a, b) in enumerate(zip(enc.input_ids, run["ids"])) if a != b),
                         min(len(enc.input_ids), len(run["ids"])))
            problems.append(f"ids differ at {first} (len {len(enc.input_ids)} vs {len(run['ids'])})")
        if len(enc.questions) != len(run["questions"]):
            problems.append("question count")
        for q, rq in zip(enc.questions, run["questions"]):
            if q.question_id != rq["question_id"]:
                problems.append(f"question_id {q.question_id} vs {rq['question_id']}")
            if list(q.question_span) != rq["question_span"]:
                problems.append(f"{rq['question_id']}: question_span")
            if [list(s) for s in q.option_spans] != rq["option_spans"]:
                problems.append(f"{rq['question_id']}: option_spans")
            if list(q.option_ids) != rq["option_ids"]:
                problems.append(f"{rq['question_id']}: option_ids")
            if q.question_type != qtype[rq["type"]]:
                problems.append(f"{rq['question_id']}: type")
        if len(run["ids"]) != run["tokens"]:
            problems.append("fixture ids length != tokens")
        for text in spy.texts:
            pieces_checked += 1
            if plain.encode(text, add_special_tokens=False).ids != tok(text, add_special_tokens=False).input_ids:
                piece_mismatch += 1
        if problems:
            print(f"   run {run['id']}/{run['arm']}: " + "; ".join(problems[:5]))
        else:
            ok_runs[kind] += 1
    total_ok = ok_runs["text"] + ok_runs["image"]
    total = n_runs["text"] + n_runs["image"]
    print(f"B. fixtures-clef-flash.json: {total_ok}/{total} runs reproduce ids, question spans, option spans "
          f"and option ids (text {ok_runs['text']}/{n_runs['text']}, image {ok_runs['image']}/{n_runs['image']}, "
          f"0 skipped)")
    print(f"B. plain tokenizers.Tokenizer vs AutoTokenizer on the {pieces_checked} pieces tokenized: "
          f"{pieces_checked - piece_mismatch} equal")
    must(total == 254 and total_ok == 254, "all 254 fixture runs reproduce")
    must(piece_mismatch == 0, "plain tokenizers == AutoTokenizer on every piece")


def load_plain(tok_dir, added=True):
    from tokenizers import Tokenizer
    if added:
        return Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))
    j = json.load(open(os.path.join(tok_dir, "tokenizer.json"), encoding="utf-8"))
    j["added_tokens"] = []
    return Tokenizer.from_str(json.dumps(j))


def check_webtyp(tok_dirs):
    for fname, added in (("qwen35_pretokenize.json", True), ("qwen35_ordinary.json", False)):
        cases = json.load(open(os.path.join(TOKDIR, fname), encoding="utf-8"))
        for variant, tdir in tok_dirs.items():
            t = load_plain(tdir, added=added)
            n_ids = n_norm = n_pre = 0
            bad = []
            for c in cases:
                ids = t.encode(c["text"], add_special_tokens=False).ids
                norm = t.normalizer.normalize_str(c["text"])
                pre = [p for p, _ in t.pre_tokenizer.pre_tokenize_str(norm)]
                n_ids += ids == c["ids"]
                n_norm += norm == c["normalized"]
                n_pre += pre == c["pretokens"]
                if ids != c["ids"] or norm != c["normalized"] or pre != c["pretokens"]:
                    bad.append(c["text"][:40])
            label = "C" if added else "D"
            mode = "added tokens matched" if added else "no added-token matching"
            print(f"{label}. {fname} ({mode}), {variant}: ids {n_ids}/{len(cases)}, normalized "
                  f"{n_norm}/{len(cases)}, pretokens {n_pre}/{len(cases)}"
                  + (f"; differing: {bad}" if bad else ""))
            if variant == "qwen2":
                must(n_ids == n_norm == n_pre == len(cases), f"{fname}: all cases (qwen2 variant)")


def check_golden(tok_dirs):
    from transformers import AutoTokenizer
    g = json.load(open(os.path.join(TOKDIR, "qwen4exp_tokenizer_golden.json"), encoding="utf-8"))
    cases = g["textCases"]
    must(g["tokenizerContract"]["pretokenizeRegex"] == PM_RE, "golden's regex is the \\p{M} one")
    dc = g["decodeControls"]

    def text_of(c):
        if "inputBytesHex" in c:
            return bytes.fromhex(c["inputBytesHex"]).decode("utf-8", errors="replace")
        return c["inputText"]

    for variant, tdir in tok_dirs.items():
        plain = load_plain(tdir)
        auto = AutoTokenizer.from_pretrained(tdir)
        rx = backend_split_regex(auto)
        runners = (("HF tokenizers (the file's split)", lambda t: plain.encode(t, add_special_tokens=False).ids),
                   (f"transformers AutoTokenizer ({type(auto).__name__}, runs the "
                    f"{'qwen2' if rx == QWEN2_RE else 'pm' if rx == PM_RE else '?'} split)",
                    lambda t: auto(t, add_special_tokens=False).input_ids))
        for label, enc in runners:
            n_ids = sum(enc(text_of(c)) == c["ids"] for c in cases)
            bad = [c["name"] for c in cases if enc(text_of(c)) != c["ids"]]
            print(f"E. qwen4exp golden, {variant} tokenizer.json via {label}: ids {n_ids}/{len(cases)}"
                  + (f"; differing: {bad}" if bad else ""))
        res = {"normalizedText": 0, "decoded": 0, "skipSpecialDecoded": 0}
        bad = []
        for c in cases:
            ok = {"normalizedText": plain.normalizer.normalize_str(text_of(c)) == c["normalizedText"],
                  "decoded": auto.decode(c["ids"]) == c["decoded"],
                  "skipSpecialDecoded": auto.decode(c["ids"], skip_special_tokens=True) == c["skipSpecialDecoded"]}
            for k, v in ok.items():
                res[k] += v
            if not all(ok.values()):
                bad.append(c["name"])
        dc_bad = [c["name"] for c in dc if not (auto.decode(c["ids"]) == c["decoded"] and
                  auto.decode(c["ids"], skip_special_tokens=True) == c["skipSpecialDecoded"])]
        print(f"E. qwen4exp golden, {variant}: " + ", ".join(f"{k} {v}/{len(cases)}" for k, v in res.items())
              + f", decode controls {len(dc) - len(dc_bad)}/{len(dc)} (transformers decode)"
              + (f"; differing: {bad}" if bad else "") + (f"; controls differing: {dc_bad}" if dc_bad else ""))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tok", default=os.path.join(ROOT, "models", "tiny"))
    ap.add_argument("--pm-tok", default=os.path.join(ROOT, "models", "tokenizer-pm"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tok_dir = ensure_tok(args.tok, "qwen2", tmp)
        pm_dir = ensure_tok(args.pm_tok, "pm", tmp)
        tok = check_release_files(tok_dir)
        check_pm_override(pm_dir)
        check_clef_fixture(tok, tok_dir)
        check_webtyp({"qwen2": tok_dir, "pm": pm_dir})
        check_golden({"pm": pm_dir, "qwen2": tok_dir})
    print("RESULT:", "PASS" if not failures else f"FAIL ({len(failures)}): {failures}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
