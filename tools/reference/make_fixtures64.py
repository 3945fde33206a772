#!/usr/bin/env python3
"""A float64 oracle of the reference on the tiny checkpoint: tests/fixtures/tiny64/.

    .venv-ref/bin/python tools/reference/make_fixtures64.py [--model models/tiny] [--corpus tests/corpus]
                          [--ref tests/fixtures/tiny] [--out tests/fixtures/tiny64] [--only NAME ...]
    .venv-ref/bin/python tools/reference/make_fixtures64.py --audit [--no-patch] [--only NAME ...]
    .venv-ref/bin/python tools/reference/make_fixtures64.py --compare      (ref32 vs ref64 table, no torch run)

The SAME reference code as make_fixtures.py (the author's joint_schema_model.py, load_release_model +
systemone, transformers 5.17.0, pure torch, torch.set_num_threads(1)) on the same corpus, loaded with
load_release_model(models/tiny, dtype=torch.float64, device="cpu"). Loading in float64 alone is not enough:
transformers' Qwen3.5 code and the author's code force float32 in several places. Those are switched to
float64 by the monkeypatches below (nothing installed is edited). Each patch, what it reaches and why:

  P1  transformers.models.qwen3_5.modeling_qwen3_5.torch -> Torch64 (a stand-in for the torch module whose
      `float32` and `float` attributes are torch.float64; every other attribute is torch's own). Installed
      after the model is loaded (so construction, incl. the rotary inv_freq tables, is untouched). Reaches:
        Qwen3_5RMSNormGated.forward      hidden_states.to(torch.float32), gate.to(torch.float32)
        torch_chunk_gated_delta_rule     q, k, v, beta, g  .to(torch.float32)  (the whole DeltaNet scan,
                                         the qk l2norm, the UT solve, exp of the decays)
        torch_recurrent_gated_delta_rule the same casts (not used by a prefill; patched for completeness)
        eager_attention_forward          softmax(dtype=torch.float32) (not used: attn_implementation sdpa)
      Why: these casts would run the DeltaNet mixer and the gated norm in float32 whatever the load dtype.
  P2  transformers.vision_utils.torch -> Torch64 (same stand-in). Reaches:
        _interpolation_axis_taps_weights index.to(torch.float32): the bilinear weights of the vision
                                         position-embedding grid
      Why: the interpolation weights would be float32-rounded.
  P3  torch.Tensor.float -> .to(torch.float64) while systemone runs, EXCEPT inside encode_record (the
      processor: tokenizer and image preprocessing keep their own dtypes, so pixel_values are the processor's
      float32 values). Reaches:
        Qwen3_5RMSNorm.forward           x.float(), self.weight.float()     (every decoder norm, q/k norm,
                                         the final norm)
        Qwen3_5TextRotaryEmbedding.forward   inv_freq.float(), position_ids.float(): angles and cos/sin
        Qwen3_5VisionRotaryEmbedding.forward the same for the vision rotary
        apply_rotary_pos_emb_vision      q.float(), k.float(), cos/sin.float()
        Qwen3_5GatedDeltaNet.forward     self.A_log.float().exp(), a.float()  (the decay g)
        joint_schema_model.systemone     question_logits.float().softmax(-1)  (the probabilities)
      Why: each would round to float32 (the last one the final probabilities themselves).
  P4  the rotary inv_freq buffers (text inv_freq + original_inv_freq, vision inv_freq): transformers computes
      them in float32 (arange(dtype=torch.float)) also in a float64 load, and keeps them float32. Their bits
      are asserted equal to the fp32 fixture's rope bits, then each buffer is replaced by its exact float64
      widening (the same values), so the oracle differs from the fp32 run in arithmetic precision only, not
      in its inputs. (P3 would widen them at use anyway; P4 also removes the float32 view
      self.inv_freq[None, None, :, None] the audit sees.)
  Not patched, already float64 or exact:
        pixel_values: the processor's float32 output; Qwen3_5Model.get_image_features does
        pixel_values.type(self.visual.dtype), an exact widening to float64 (their sha256 is asserted equal
        to the fp32 fixture's);
        weights: bf16/f32 checkpoint values widened exactly to float64 by from_pretrained / .to(dtype).
  Completeness check: --audit runs the requests under a TorchFunctionMode that records every torch op whose
  result is a floating tensor other than float64, from the start of ClefModel.forward to the end of the
  systemone softmax. With the patches it must find none (the script exits 1 otherwise); --no-patch shows
  what the patches remove. (P1-P4 are also installed for the fixture run, which asserts float64 logits.)

Recorded, for every request the reference answered (cross-checked against the fp32 fixture: same input ids,
same 3-D positions and pixel_values sha256 for images, same rope bits):
  questions: logits and probabilities (float64), per question in head order;
  final_norm: the final-norm rows (float64) at the rows the fp32 fixture stores for its decoder layers
    (its row sample, or all rows for dump "full") -- a subset of the fp32 fixture's final-norm rows. (All of
    the fp32 fixture's final-norm rows in float64 would be 4.0 MB; this keeps data.bin under 2 MB.)
  media.merger (image requests): the vision merger rows (float64; one per image token) at the rows the fp32
    fixture stores (all when N <= 256), so a test that feeds an engine's text forward with recorded vision
    rows can compare against this oracle with the oracle's own vision rows as input.
  response: systemone's response serialized as make_fixtures.py does.
Output: tests/fixtures/tiny64/index.json + data.bin (raw little-endian float64). Schema in
tools/reference/README.md ("The float64 oracle").
"""
import argparse
import collections
import hashlib
import json
import math
import os
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import make_fixtures as mf  # noqa: E402  (sets 1 thread, imports joint_schema_model from .venv-ref/clef_vendor)
import numpy as np  # noqa: E402
import torch  # noqa: E402

jsm = mf.jsm
FORMAT = "clef-tiny64-fixtures/1"


class Torch64:
    """The torch module as seen by a patched module: float32 / float mean float64, the rest is torch."""

    float32 = torch.float64
    float = torch.float64

    def __getattr__(self, name):
        return getattr(torch, name)


_ORIG_FLOAT = torch.Tensor.float
_WIDEN = [False]  # P3 is active while True
_PATCHED = [False]


def _float_widened(self, *args, **kwargs):
    if _WIDEN[0]:
        return self.to(torch.float64, *args, **kwargs)
    return _ORIG_FLOAT(self, *args, **kwargs)


PATCHES = [
    {"id": "P1", "target": "transformers.models.qwen3_5.modeling_qwen3_5.torch",
     "change": "module global torch -> stand-in with float32 = float = torch.float64 (installed after loading)",
     "sites": ["Qwen3_5RMSNormGated.forward: hidden_states.to(torch.float32), gate.to(torch.float32)",
               "torch_chunk_gated_delta_rule: q, k, v, beta, g .to(torch.float32)",
               "torch_recurrent_gated_delta_rule: the same (unused in prefill)",
               "eager_attention_forward: softmax dtype=torch.float32 (unused: sdpa)"]},
    {"id": "P2", "target": "transformers.vision_utils.torch",
     "change": "module global torch -> the same stand-in",
     "sites": ["_interpolation_axis_taps_weights: index.to(torch.float32) (vision pos-embed bilinear weights)"]},
    {"id": "P3", "target": "torch.Tensor.float",
     "change": "returns .to(torch.float64) while systemone runs, except inside encode_record (processor)",
     "sites": ["Qwen3_5RMSNorm.forward: x.float(), self.weight.float()",
               "Qwen3_5TextRotaryEmbedding.forward: inv_freq.float(), position_ids.float()",
               "Qwen3_5VisionRotaryEmbedding.forward: inv_freq.float(), position_ids.float()",
               "apply_rotary_pos_emb_vision: q.float(), k.float(), cos.float(), sin.float()",
               "Qwen3_5GatedDeltaNet.forward: A_log.float().exp(), a.float()",
               "joint_schema_model.systemone: question_logits.float().softmax(-1)"]},
    {"id": "P4", "target": "rotary_emb.inv_freq / original_inv_freq (text) and visual.rotary_pos_emb.inv_freq",
     "change": "the float32 buffers (bits asserted equal to the fp32 fixture's) replaced by their exact float64 "
               "widening after loading",
     "sites": ["Qwen3_5TextRotaryEmbedding.forward: self.inv_freq[None, None, :, None] (a float32 view "
               "before P3's .float())"]},
]
UNPATCHED = [
    "pixel_values: the processor's float32 output (sha256 asserted equal to the fp32 fixture's), widened "
    "exactly by get_image_features' pixel_values.type(visual.dtype)",
]


def install_patches():
    import transformers.models.qwen3_5.modeling_qwen3_5 as mq
    import transformers.vision_utils as vu
    assert mq.torch is torch and vu.torch is torch
    mq.torch = Torch64()  # P1
    vu.torch = Torch64()  # P2
    torch.Tensor.float = _float_widened  # P3 (inactive until _WIDEN[0] is set)
    _PATCHED[0] = True


def wrap_scopes():
    """P3's scope: on for systemone, off inside encode_record. Called after Capture wrapped encode_record."""
    inner_encode, inner_systemone = jsm.encode_record, jsm.systemone

    def encode(*args, **kwargs):
        saved, _WIDEN[0] = _WIDEN[0], False
        try:
            return inner_encode(*args, **kwargs)
        finally:
            _WIDEN[0] = saved

    def systemone(*args, **kwargs):
        _WIDEN[0] = True
        try:
            return inner_systemone(*args, **kwargs)
        finally:
            _WIDEN[0] = False
    jsm.encode_record = encode
    return systemone


class Audit(torch.overrides.TorchFunctionMode):
    """Counts torch ops whose result is a floating tensor other than float64, by source line."""

    def __init__(self):
        super().__init__()
        self.on, self.hits = False, collections.Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self.on:
            for o in (out if isinstance(out, (tuple, list)) else (out,)):
                if isinstance(o, torch.Tensor) and o.is_floating_point() and o.dtype != torch.float64:
                    fr = [f for f in traceback.extract_stack(limit=8)
                          if f.filename != __file__ and "/torch/" not in f.filename]
                    f = fr[-1] if fr else traceback.extract_stack(limit=2)[0]
                    self.hits[(os.path.basename(f.filename), f.lineno, (f.line or "").strip(), str(o.dtype))] += 1
        return out


class Bin64:
    def __init__(self):
        self.parts, self.size = [], 0

    def add(self, arr, rows=None):
        a = np.ascontiguousarray(np.asarray(arr, dtype=np.float64))
        ref = {"off": self.size, "shape": list(a.shape)}
        if rows is not None:
            ref["rows"] = rows
        b = a.astype("<f8").tobytes()
        self.parts.append(b)
        self.size += len(b)
        return ref

    def bytes(self):
        return b"".join(self.parts)


def finite_or_none(xs):
    return [x if math.isfinite(x) else None for x in xs]


def run_one(entry, ref, corpus_dir, model, processor, cap, systemone, store, audit):
    raw = open(os.path.join(corpus_dir, entry["file"]), "rb").read()
    out = {"name": entry["name"], "file": entry["file"], "sha256": mf.sha256_bytes(raw)}
    assert ref["name"] == entry["name"] and ref["sha256"] == out["sha256"], entry["name"]
    try:
        request = json.loads(raw.decode("utf-8"))
    except Exception as e:  # noqa: BLE001
        out.update(ok=False, error={"stage": "parse", "class": type(e).__name__, "message": str(e)})
        return out
    cap.reset()
    try:
        if audit is not None:
            try:
                with audit:
                    resp = systemone(model, processor, request)
            finally:
                audit.on = False
        else:
            resp = systemone(model, processor, request)
    except Exception as e:  # noqa: BLE001
        out.update(ok=False, error={"stage": "systemone", "class": type(e).__name__, "message": str(e)})
        return out
    text = json.dumps(resp, ensure_ascii=False, separators=(",", ":"))
    rec = cap.record
    ids = list(rec.input_ids)
    assert ref["ok"] and ids == ref["input_ids"], f"{entry['name']}: input ids differ from the fp32 fixture"
    out.update(ok=True, response=text, n_tokens=len(ids))
    if rec.media:
        m, rm = rec.media, ref["media"]
        if "pixel_values" in m:
            pv = m["pixel_values"]
            assert pv.dtype == torch.float32, pv.dtype
            sha = mf.sha256_bytes(np.ascontiguousarray(pv.numpy()).astype("<f4").tobytes())
            assert sha == rm["pixel_values"]["sha256"], f"{entry['name']}: pixel_values differ from the fp32 run"
        assert cap.positions[:, 0, :].tolist() == rm["positions"], f"{entry['name']}: positions differ"
        merged = torch.cat(cap.merger, dim=0)
        assert merged.dtype == torch.float64 and list(merged.shape) == rm["merger"]["full_shape"]
        rows = rm["merger"].get("rows", "all")
        ref_m = store.add(merged.numpy() if rows == "all" else merged.numpy()[rows], rows)
        ref_m["full_shape"] = list(merged.shape)
        out["media"] = {"merger": ref_m}
    qs = []
    _WIDEN[0] = True  # P3 as in systemone: logits.float().softmax(-1) in float64
    try:
        for q, logits, rq in zip(rec.questions, cap.head[0], ref["questions"]):
            assert list(q.option_ids) == rq["option_ids"]
            probs = logits.float().softmax(-1)
            assert (logits.dtype, probs.dtype) == (torch.float64, torch.float64) or not _PATCHED[0]
            qs.append({"question_id": q.question_id, "option_ids": list(q.option_ids),
                       "logits": store.add(logits.numpy()), "probs": store.add(probs.numpy()),
                       "probs_values": finite_or_none(probs.tolist())})
    finally:
        _WIDEN[0] = False
    out["questions"] = qs
    lr = ref["layers"][0].get("rows", "all")
    fin = cap.final[0]
    assert fin.shape[0] == len(ids)
    out["final_norm"] = store.add(fin.numpy() if lr == "all" else fin.numpy()[lr], lr)
    return out


def compare(args):
    """ref32 (tests/fixtures/tiny) vs ref64 (tests/fixtures/tiny64): per request max |dp| and final-norm rel L2."""
    i32 = json.load(open(os.path.join(args.ref, "index.json")))
    i64 = json.load(open(os.path.join(args.out, "index.json")))
    b32 = np.fromfile(os.path.join(args.ref, "data.bin"), dtype="<f4")
    b64 = np.fromfile(os.path.join(args.out, "data.bin"), dtype="<f8")

    def get(b, r, width):
        n = int(np.prod(r["shape"]))
        return b[r["off"] // width: r["off"] // width + n].reshape(r["shape"]).astype(np.float64)
    worst_dp, worst_l2 = (0, ""), (0, "")
    print(f"{'request':40s} {'L':>6s} {'max|p32-p64|':>13s} {'final relL2':>12s}")
    for r32, r64 in zip(i32["requests"], i64["requests"]):
        assert r32["name"] == r64["name"] and r32["ok"] == r64["ok"]
        if not r32["ok"]:
            continue
        dp = 0.0
        for q32, q64 in zip(r32["questions"], r64["questions"]):
            p32, p64 = get(b32, q32["probs"], 4), get(b64, q64["probs"], 8)
            d = np.abs(p32 - p64)
            d = d[np.isfinite(d)]
            dp = max(dp, float(d.max()) if d.size else 0.0)
        f32, f64 = get(b32, r32["final_norm"], 4), get(b64, r64["final_norm"], 8)
        rows32 = r32["final_norm"].get("rows", "all")
        rows64 = r64["final_norm"].get("rows", "all")
        if rows64 != "all" and rows32 == "all":
            f32 = f32[rows64]
        elif rows64 != "all":
            f32 = f32[[rows32.index(x) for x in rows64]]
        l2 = float(np.sqrt(((f32 - f64) ** 2).sum() / (f64 ** 2).sum()))
        print(f"{r32['name']:40s} {r32['n_tokens']:6d} {dp:13.3e} {l2:12.3e}")
        worst_dp = max(worst_dp, (dp, r32["name"]))
        worst_l2 = max(worst_l2, (l2, r32["name"]))
    print(f"worst max|p32-p64| {worst_dp[0]:.3e} ({worst_dp[1]}); worst final-norm rel L2 {worst_l2[0]:.3e} "
          f"({worst_l2[1]})")
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "tiny"))
    ap.add_argument("--corpus", default=os.path.join(ROOT, "tests", "corpus"))
    ap.add_argument("--ref", default=os.path.join(ROOT, "tests", "fixtures", "tiny"), help="the fp32 fixture")
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "tiny64"))
    ap.add_argument("--only", nargs="*", help="run only these request names (no files written)")
    ap.add_argument("--audit", action="store_true", help="report non-float64 ops (no files written)")
    ap.add_argument("--no-patch", action="store_true", help="with --audit: without P1-P4")
    ap.add_argument("--compare", action="store_true", help="print ref32 vs ref64 from the written fixtures")
    args = ap.parse_args()
    if args.compare:
        return compare(args)

    assert mf.sha256_file(jsm.__file__) == mf.JSM_SHA256, "not the pinned joint_schema_model.py"
    ref_index_path = os.path.join(args.ref, "index.json")
    ref_index = json.load(open(ref_index_path, encoding="ascii"))
    manifest = {}
    for line in open(os.path.join(args.model, "manifest.sha256")):
        h, name = line.rstrip("\n").split("  ", 1)
        manifest[name] = h
        got = mf.sha256_file(os.path.join(args.model, name))
        assert got == h, f"{args.model}/{name}: sha256 {got} does not match manifest.sha256"
    assert manifest == ref_index["checkpoint"]["manifest"], "models/tiny is not the fp32 fixture's checkpoint"

    model, processor = jsm.load_release_model(args.model, dtype=torch.float64, device="cpu")
    assert {p.dtype for p in model.parameters()} == {torch.float64}
    cap = mf.Capture(model)  # hooks: final norm, head logits, positions, encode_record's result
    text_inv = cap.text.rotary_emb.inv_freq
    vis_inv = cap.mm.visual.rotary_pos_emb.inv_freq
    rope = {"text_inv_freq_bits": mf.f32_bits(text_inv), "vision_inv_freq_bits": mf.f32_bits(vis_inv)}
    assert text_inv.dtype == torch.float32 and vis_inv.dtype == torch.float32
    assert rope["text_inv_freq_bits"] == ref_index["rope"]["text_inv_freq"]["bits"]
    assert rope["vision_inv_freq_bits"] == ref_index["rope"]["vision_inv_freq"]["bits"]

    if not args.no_patch:
        install_patches()
        # P4: the rotary tables, float32 values asserted above, widened exactly to float64 buffers
        for m in (cap.text.rotary_emb, cap.mm.visual.rotary_pos_emb):
            for name in ("inv_freq", "original_inv_freq"):
                if getattr(m, name, None) is not None:
                    setattr(m, name, getattr(m, name).to(torch.float64))
        assert mf.f32_bits(cap.text.rotary_emb.inv_freq) == rope["text_inv_freq_bits"]
        assert mf.f32_bits(cap.mm.visual.rotary_pos_emb.inv_freq) == rope["vision_inv_freq_bits"]
    systemone = wrap_scopes()
    audit = None
    if args.audit:
        audit = Audit()
        inner_forward = jsm.ClefModel.forward

        def forward(self, batch):  # the audit covers ClefModel.forward ...
            audit.on = True
            return inner_forward(self, batch)
        jsm.ClefModel.forward = forward
        inner_answer = jsm.systemone_answer

        def answer(*a, **k):  # ... through the softmax (its argument is evaluated before this call)
            audit.on = False
            return inner_answer(*a, **k)
        jsm.systemone_answer = answer

    corpus = json.load(open(os.path.join(args.corpus, "corpus.json"), encoding="utf-8"))["requests"]
    refs = {r["name"]: r for r in ref_index["requests"]}
    assert [e["name"] for e in corpus] == [r["name"] for r in ref_index["requests"]]
    if args.only:
        corpus = [e for e in corpus if e["name"] in set(args.only)]
    store = Bin64()
    results = []
    for e in corpus:
        ref = refs[e["name"]]
        r = run_one(e, ref, args.corpus, model, processor, cap, systemone, store, audit)
        assert r["ok"] == ref["ok"], f"{e['name']}: ok {r['ok']} in float64, {ref['ok']} in float32"
        if not r["ok"]:
            assert (r["error"]["stage"], r["error"]["class"]) == (ref["error"]["stage"], ref["error"]["class"])
        results.append(r)
        print(f"{e['name']:45s} {'ok  L=%d' % r['n_tokens'] if r['ok'] else 'ERR ' + r['error']['class']}",
              flush=True)
    if args.audit:
        n = sum(audit.hits.values())
        for k, v in sorted(audit.hits.items()):
            print(f"{v:6d}  {k[0]}:{k[1]}  {k[3]}  {k[2]}")
        print(f"audit ({'no patches' if args.no_patch else 'P1-P4'}): {n} non-float64 floating results "
              f"at {len(audit.hits)} sites")
        return 0 if (n == 0 or args.no_patch) else 1
    if args.only:
        return 0

    data = store.bytes()
    index = {
        "format": FORMAT,
        "generated_by": "tools/reference/make_fixtures64.py",
        "settings": {
            "reference": "joint_schema_model.py sha256 " + mf.JSM_SHA256 + " (rapid-mlx 0.16.10 vendored copy)",
            "load": "load_release_model(models/tiny, dtype=torch.float64, device='cpu')",
            "torch_threads": 1,
            "attn_implementation": model.language_model.config._attn_implementation,
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "machine": mf.platform.machine(),
            "patches": PATCHES,
            "unpatched_inputs": UNPATCHED,
        },
        "versions": mf.versions(),
        "checkpoint": {"path": "models/tiny", "manifest": manifest},
        "reference_fixture": {"path": "tests/fixtures/tiny", "index_sha256": mf.sha256_file(ref_index_path),
                              "bin_sha256": ref_index["bin"]["sha256"]},
        "corpus": {"path": "tests/corpus", "corpus_json_sha256": mf.sha256_file(os.path.join(args.corpus,
                                                                                              "corpus.json"))},
        "bin": {"file": "data.bin", "bytes": len(data), "sha256": mf.sha256_bytes(data), "dtype": "float64",
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
    print(f"wrote {args.out}: {len(results)} requests ({n_ok} ok), data.bin {len(data)} bytes, index.json "
          f"{os.path.getsize(os.path.join(args.out, 'index.json'))} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
