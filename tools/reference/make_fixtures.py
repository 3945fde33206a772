#!/usr/bin/env python3
"""Run the author's reference on the tiny checkpoint for every corpus request; write tests/fixtures/tiny/.

    .venv-ref/bin/python tools/reference/make_fixtures.py [--model models/tiny] [--corpus tests/corpus]
                                                          [--out tests/fixtures/tiny] [--only NAME ...]

(tools/reference/regen.sh = make_tiny.sh models/tiny + this script.)

Reference: joint_schema_model.py (rapid-mlx 0.16.10 vendored copy, sha256 0e304cf7…, from .venv-ref/clef_vendor),
load_release_model(models/tiny, dtype=torch.float32, device="cpu"), pure torch (no fla / causal_conv1d),
torch.set_num_threads(1). For each request of tests/corpus/corpus.json, in order:

  1. raw = the request file's bytes; request = json.loads(raw.decode("utf-8"))     (stage "parse")
  2. response = systemone(model, processor, request)                                (stage "systemone")
  3. the response is serialized as json.dumps(response, ensure_ascii=False, separators=(",", ":"))
     (no sort_keys: the insertion order of every dict is kept; NaN prints as NaN)
  A failure records the stage, the exception class name and str(exception).

While systemone runs, these are captured (the function itself is not changed):
  encode_record's result (input ids, spans, option ids, media tensors), by wrapping jsm.encode_record;
  every decoder layer's output and the final norm's output (last_hidden_state), by forward hooks;
  the vision merger output (one row per image token), by a forward hook;
  get_rope_index's 3-D positions (media requests only; text-only requests use 0..L-1);
  the head's logits (per question), by a forward hook; probabilities = logits.float().softmax(-1), as systemone.

Rows kept for [L, hidden] arrays (decoder layers, final norm):
  dump "full" (corpus.json): all rows of every layer and of the final norm;
  otherwise: the final norm keeps all rows when L <= 200, and the decoder layers (and the final norm when L > 200)
  keep the sampled rows  {0, 35, 36, 63, 64, 127, 128, L-1} ∪ {1024k-1, 1024k : k >= 1}
  ∪ {schema_offset-1, schema_offset} ∪ {start of the first question span} ∪ {end-1 of the last option span}
  ∪ {first and last image-pad token of each image}, restricted to [0, L), sorted
  (schema_offset = len(prefix) + len(media) + len(kept state), recorded per request).
  The row list is stored with each array ("rows": "all" or a list of row indices).
Vision merger rows: all when N <= 256, else {0..3} ∪ {64k} ∪ {N-4..N-1}. pixel_values: shape, sha256 of the
whole float32 little-endian array, and rows {0, 3, Np-1}.

Output (tests/fixtures/tiny/): index.json + data.bin (raw little-endian float32; every array is referenced from
index.json by its byte offset "off" and its stored "shape"). The schema is in tools/reference/README.md.
"""
import argparse
import hashlib
import json
import os
import platform
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, ".venv-ref", "clef_vendor"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)
torch.set_num_interop_threads(1)
warnings.filterwarnings("ignore")

import joint_schema_model as jsm  # noqa: E402
import transformers  # noqa: E402

transformers.logging.set_verbosity_error()

FORMAT = "clef-tiny-fixtures/1"
PREFIX_LEN = 36
JSM_SHA256 = "0e304cf7c6500e8bb59bef7e2afd2c6373f82596dfb3b57d1aa93c175e2dc3a3"


def sha256_bytes(b):
    return hashlib.sha256(b).hexdigest()


def sha256_file(path):
    with open(path, "rb") as f:
        return sha256_bytes(f.read())


class Bin:
    """Appends float32 arrays to data.bin and returns their references."""

    def __init__(self):
        self.parts, self.size = [], 0

    def add(self, arr, rows=None):
        a = np.ascontiguousarray(np.asarray(arr, dtype=np.float32))
        b = a.astype("<f4").tobytes()
        ref = {"off": self.size, "shape": list(a.shape)}
        if rows is not None:
            ref["rows"] = rows
        self.parts.append(b)
        self.size += len(b)
        return ref

    def bytes(self):
        return b"".join(self.parts)


def f32_bits(t):
    return [int(x) for x in t.detach().to(torch.float32).contiguous().numpy().view(np.uint32)]


def finite_or_none(xs):
    return [x if np.isfinite(x) else None for x in xs]


def sample_rows(L, rec, image_runs, schema_offset):
    s = {0, PREFIX_LEN - 1, PREFIX_LEN, 63, 64, 127, 128, L - 1, schema_offset - 1, schema_offset}
    for k in range(1, L // 1024 + 1):
        s |= {1024 * k - 1, 1024 * k}
    s.add(rec.questions[0].question_span[0])
    s.add(rec.questions[-1].option_spans[-1][1] - 1)
    for a, b in image_runs:
        s |= {a, b - 1}
    return sorted(x for x in s if 0 <= x < L)


def image_runs_of(ids, pad_id):
    runs, i = [], 0
    while i < len(ids):
        if ids[i] == pad_id:
            j = i
            while j < len(ids) and ids[j] == pad_id:
                j += 1
            runs.append((i, j))
            i = j
        else:
            i += 1
    return runs


class Capture:
    def __init__(self, model):
        self.model = model
        backbone = model.language_model  # Qwen3_5ForConditionalGeneration
        self.mm = backbone.model  # Qwen3_5Model
        self.text = self.mm.language_model  # Qwen3_5TextModel
        self.reset()
        for i, layer in enumerate(self.text.layers):
            layer.register_forward_hook(self._layer_hook(i))
        self.text.norm.register_forward_hook(lambda m, a, o: self._set("final", o))
        self.mm.visual.merger.register_forward_hook(lambda m, a, o: self.merger.append(o.detach().clone()))
        model.head.register_forward_hook(lambda m, a, o: self._set("head", o))
        orig_rope = self.mm.get_rope_index

        def rope(*args, **kwargs):
            out = orig_rope(*args, **kwargs)
            self.positions = out[0].detach().clone()
            return out
        self.mm.get_rope_index = rope
        orig_encode = jsm.encode_record

        def encode(*args, **kwargs):
            rec = orig_encode(*args, **kwargs)
            self.record = rec
            return rec
        jsm.encode_record = encode

    def reset(self):
        self.layers, self.final, self.head, self.record, self.positions = {}, None, None, None, None
        self.merger = []

    def _set(self, key, value):
        if key == "final":
            self.final = value.detach().clone()
        else:
            self.head = [[t.detach().clone() for t in rec] for rec in value]

    def _layer_hook(self, i):
        def hook(m, a, o):
            t = o[0] if isinstance(o, tuple) else o
            self.layers[i] = t.detach().clone()
        return hook


def run_one(entry, corpus_dir, model, processor, cap, store, pad_id, schema_piece):
    raw = open(os.path.join(corpus_dir, entry["file"]), "rb").read()
    out = {"name": entry["name"], "file": entry["file"], "sha256": sha256_bytes(raw), "tags": entry["tags"],
           "dump": entry["dump"]}
    try:
        request = json.loads(raw.decode("utf-8"))
    except Exception as e:  # noqa: BLE001
        out.update(ok=False, error={"stage": "parse", "class": type(e).__name__, "message": str(e)})
        return out
    cap.reset()
    try:
        resp = jsm.systemone(model, processor, request)
    except Exception as e:  # noqa: BLE001
        out.update(ok=False, error={"stage": "systemone", "class": type(e).__name__, "message": str(e)})
        return out
    text = json.dumps(resp, ensure_ascii=False, separators=(",", ":"))
    rec = cap.record
    ids = list(rec.input_ids)
    L = len(ids)
    assert resp["usage"]["input_tokens"] == L
    out.update(ok=True, response=text, response_sha256=sha256_bytes(text.encode("utf-8", "surrogatepass")),
               n_tokens=L, record_id=rec.record_id, input_ids=ids)

    qs = []
    for q, logits in zip(rec.questions, cap.head[0]):
        probs = logits.float().softmax(-1)
        qs.append({
            "question_id": q.question_id, "question_type": q.question_type,
            "question_span": list(q.question_span), "option_spans": [list(s) for s in q.option_spans],
            "option_ids": list(q.option_ids),
            "logits": store.add(logits.float().numpy()), "probs": store.add(probs.numpy()),
            "logits_values": finite_or_none(logits.float().tolist()),
            "probs_values": finite_or_none(probs.tolist()),
        })
    out["questions"] = qs

    runs = image_runs_of(ids, pad_id) if rec.media else []
    # schema_offset = len(prefix) + len(media) + len(kept state): where the "\n\nSCHEMA FIELDS:\n" piece starts
    # (its last occurrence before the first question span, since the state may contain the same text).
    q0 = rec.questions[0].question_span[0]
    n = len(schema_piece)
    schema_offset = max(i for i in range(q0 - n + 1) if ids[i:i + n] == schema_piece)
    out["schema_offset"] = schema_offset
    sampled = sample_rows(L, rec, runs, schema_offset)
    full = entry["dump"] == "full"
    layer_rows = "all" if full else sampled
    final_rows = "all" if (full or L <= 200) else sampled

    def take(t, rows):
        t = t[0].float().numpy()
        assert t.shape[0] == L
        return t if rows == "all" else t[rows]
    n_layers = len(cap.layers)
    out["layers"] = [store.add(take(cap.layers[i], layer_rows), layer_rows) for i in range(n_layers)]
    out["final_norm"] = store.add(take(cap.final, final_rows), final_rows)

    if rec.media:
        m = rec.media
        media = {"token_offset": m["token_offset"], "image_runs": [list(r) for r in runs]}
        if "image_grid_thw" in m:
            media["image_grid_thw"] = m["image_grid_thw"].tolist()
        if "pixel_values" in m:
            pv = m["pixel_values"].float().numpy()
            Np = pv.shape[0]
            rows = sorted({0, 3, Np - 1} & set(range(Np)))
            ref = store.add(pv[rows], rows)
            ref["full_shape"] = list(pv.shape)
            ref["sha256"] = sha256_bytes(np.ascontiguousarray(pv).astype("<f4").tobytes())
            media["pixel_values"] = ref
        merged = torch.cat(cap.merger, dim=0).float().numpy() if cap.merger else None
        if merged is not None:
            N = merged.shape[0]
            rows = "all" if N <= 256 else sorted({0, 1, 2, 3, N - 4, N - 3, N - 2, N - 1} | set(range(64, N, 64)))
            ref = store.add(merged if rows == "all" else merged[rows], rows)
            ref["full_shape"] = list(merged.shape)
            media["merger"] = ref
        if cap.positions is not None:
            media["positions"] = cap.positions[:, 0, :].tolist()  # [3][L]: T, H, W
        out["media"] = media
    return out


def versions():
    """Versions of the modules actually imported (module.__version__), plus installed-package metadata."""
    import importlib
    import importlib.metadata as md
    v = {"python": platform.python_version()}
    for mod in ("torch", "transformers", "tokenizers", "numpy", "PIL", "torchvision", "safetensors", "accelerate",
                "huggingface_hub"):
        v["pillow" if mod == "PIL" else mod] = importlib.import_module(mod).__version__
    for p in ("flash-linear-attention", "fla-core", "causal-conv1d"):  # must be absent (pure torch paths)
        try:
            v[p] = md.version(p)
        except md.PackageNotFoundError:
            pass
    return v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "tiny"))
    ap.add_argument("--corpus", default=os.path.join(ROOT, "tests", "corpus"))
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "tiny"))
    ap.add_argument("--only", nargs="*", help="run only these request names (no files written)")
    args = ap.parse_args()

    jsm_path = jsm.__file__
    assert sha256_file(jsm_path) == JSM_SHA256, f"{jsm_path}: not the pinned joint_schema_model.py"

    manifest = {}
    for line in open(os.path.join(args.model, "manifest.sha256")):
        h, name = line.rstrip("\n").split("  ", 1)
        manifest[name] = h
    for name, h in manifest.items():
        got = sha256_file(os.path.join(args.model, name))
        assert got == h, f"{args.model}/{name}: sha256 {got} does not match manifest.sha256"

    # Load check with transformers' own class: no missing / unexpected / mismatched keys.
    bb, info = transformers.Qwen3_5ForConditionalGeneration.from_pretrained(
        args.model, dtype=torch.float32, output_loading_info=True)
    load_info = {k: sorted(map(str, v)) for k, v in info.items()}
    assert not any(load_info.values()), load_info
    del bb

    model, processor = jsm.load_release_model(args.model, dtype=torch.float32, device="cpu")
    cap = Capture(model)
    pad_id = model.language_model.config.image_token_id
    schema_piece = processor.tokenizer("\n\nSCHEMA FIELDS:\n", add_special_tokens=False).input_ids
    store = Bin()

    text_inv = cap.text.rotary_emb.inv_freq
    vis_inv = cap.mm.visual.rotary_pos_emb.inv_freq
    rope = {
        "text_inv_freq": dict(store.add(text_inv.float().numpy()), bits=f32_bits(text_inv)),
        "vision_inv_freq": dict(store.add(vis_inv.float().numpy()), bits=f32_bits(vis_inv)),
    }

    corpus = json.load(open(os.path.join(args.corpus, "corpus.json"), encoding="utf-8"))["requests"]
    if args.only:
        corpus = [e for e in corpus if e["name"] in set(args.only)]
    results = []
    for e in corpus:
        r = run_one(e, args.corpus, model, processor, cap, store, pad_id, schema_piece)
        results.append(r)
        status = f"ok  L={r['n_tokens']}" if r["ok"] else f"ERR {r['error']['class']}: {r['error']['message'][:80]}"
        print(f"{e['name']:45s} {status}", flush=True)
    if args.only:
        for r in results:
            if r["ok"]:
                print(r["name"], r["response"])
        return 0

    ip = processor.image_processor
    data = store.bytes()
    index = {
        "format": FORMAT,
        "generated_by": "tools/reference/make_fixtures.py (tools/reference/regen.sh)",
        "settings": {
            "reference": "joint_schema_model.py sha256 " + JSM_SHA256 + " (rapid-mlx 0.16.10 vendored copy)",
            "load": "load_release_model(models/tiny, dtype=torch.float32, device='cpu')",
            "torch_threads": 1,
            "max_length": 16384,
            "request_parser": "json.loads(raw.decode('utf-8'))",
            "response_serializer": "json.dumps(resp, ensure_ascii=False, separators=(',', ':'))  # no sort_keys",
            "processor": f"{type(processor).__name__} / {type(ip).__name__} "
                         f"({', '.join(c.__name__ for c in type(ip).__mro__[1:2])} backend)",
            "attn_implementation": model.language_model.config._attn_implementation,
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "machine": platform.machine(),
        },
        "versions": versions(),
        "checkpoint": {"path": "models/tiny", "manifest": manifest, "load_info": load_info},
        "corpus": {"path": "tests/corpus", "corpus_json_sha256": sha256_file(os.path.join(args.corpus, "corpus.json")),
                   "files": {e["file"]: e["sha256"] for e in results}},
        "bin": {"file": "data.bin", "bytes": len(data), "sha256": sha256_bytes(data), "dtype": "float32",
                "byte_order": "little"},
        "rope": rope,
        "requests": results,
    }
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "data.bin"), "wb") as f:
        f.write(data)
    with open(os.path.join(args.out, "index.json"), "w", encoding="ascii") as f:
        json.dump(index, f, ensure_ascii=True, allow_nan=False, indent=1)
        f.write("\n")
    n_ok = sum(1 for r in results if r["ok"])
    print(f"wrote {args.out}: {len(results)} requests ({n_ok} ok, {len(results) - n_ok} errors), "
          f"data.bin {len(data)} bytes, index.json {os.path.getsize(os.path.join(args.out, 'index.json'))} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
