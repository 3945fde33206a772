#!/usr/bin/env python3
"""Run the author's reference on the real-dimension 4-layer checkpoint (models/real4); write tests/fixtures/real4/.

    .venv-ref/bin/python tools/reference/make_real4_fixtures.py [--model models/real4] [--out tests/fixtures/real4]
                                                                [--names t002_spec_example ...] [--threads 1]

models/real4 is written by `tools/reference/make_tiny.sh models/real4 --real-dims` (tokenizer, then
write_tiny.py --real-dims: hidden 4096, vocab 248,320, the real head, 4 decoder layers = 3 Gated DeltaNet + 1 full
attention, a 2-block real-width vision tower; ~6.7 GB on disk, ~4 min). It is not in CI.

Same reference and conventions as make_fixtures.py (whose helpers this imports): joint_schema_model.py (sha256
0e304cf7…), load_release_model(models/real4, dtype=torch.float32, device="cpu"), pure torch, a fixed torch thread
count (1 unless --threads). For each request: raw bytes → json.loads → systemone; the response is stored
as json.dumps(resp, ensure_ascii=False, separators=(",", ":")). Hooks capture encode_record's result, each decoder
layer's output, the final norm (last_hidden_state) and the head's logits; probs = logits.float().softmax(-1).

Memory: the fp32 model holds ~12.4 GB (3.10 G parameters; mtp.* is not loaded) and the load peaked at 18.3 GB RSS
here: check `free -g` first. The load check of make_fixtures.py (a second
from_pretrained) is replaced by a key check that costs nothing: the loaded backbone's state_dict keys against the
checkpoint's weight_map (no missing, no unexpected except mtp.*), and the head loads with strict=True.

Rows kept (a real-width row is 16 KB, so far fewer than the tiny fixtures keep; the whole folder stays < 2 MB):
  final norm: make_fixtures.sample_rows — {0, 35, 36, 63, 64, 127, 128, L-1} ∪ {1024k-1, 1024k}
              ∪ {schema_offset-1, schema_offset} ∪ {first question span start} ∪ {last option span end-1};
  each decoder layer: {0, schema_offset, first question span start, L-1} ∪ {each image's first pad token};
  media requests also keep the vision merger's rows {0..3, N-4..N-1} ∪ {each image's first and last} (the tower's
  output at real widths: 2 blocks of 1152, head_dim 72) and the pixel_values' shape and sha256. The media requests
  go to their own folder (the text folder's 2 MB is nearly full):
    .venv-ref/bin/python tools/reference/make_real4_fixtures.py --out tests/fixtures/real4_media \
        --names m001_rgb_640x480_png m013_two_images
  and the video requests (their own corpus: clips as paths relative to the repository root) to a third:
    .venv-ref/bin/python tools/reference/make_real4_fixtures.py --out tests/fixtures/real4_video \
        --corpus tests/fixtures/real4_video/corpus --names v001_one_video v002_two_videos
  (media: video_runs, video_grid_thw, pixel_values_videos' shape and sha256; merger rows over every frame group)
Output: index.json + data.bin (raw little-endian float32), the tiny fixtures' REF convention
({"off", "shape", "rows"}); format "clef-real4-fixtures/1".
"""
import argparse
import json
import os
import platform
import resource
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import make_fixtures as mf  # noqa: E402  (sets torch threads to 1, imports the vendored joint_schema_model)
from make_fixtures import (JSM_SHA256, Bin, Capture, finite_or_none, image_runs_of,  # noqa: E402
                           sample_rows, sha256_bytes, sha256_file, versions)

import numpy as np  # noqa: E402
import torch  # noqa: E402

jsm = mf.jsm
FORMAT = "clef-real4-fixtures/1"
DEFAULT_NAMES = ["t002_spec_example", "t001_basic", "t029_many_questions", "t055_state_600"]
MAX_BYTES = 2 * 1024 * 1024


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def layer_rows(L, rec, schema_offset, runs):
    s = {0, schema_offset, rec.questions[0].question_span[0], L - 1} | {a for a, _ in runs}
    return sorted(x for x in s if 0 <= x < L)


def merger_rows(N, runs):
    """The tower's output rows kept: the first and last four, and each image's first and last."""
    s = {0, 1, 2, 3, N - 4, N - 3, N - 2, N - 1}
    k = 0
    for a, b in runs:
        s |= {k, k + (b - a) - 1}
        k += b - a
    return sorted(x for x in s if 0 <= x < N)


def run_one(entry, corpus_dir, model, processor, cap, store, schema_piece, pad_id, video_pad_id):
    raw = open(os.path.join(corpus_dir, entry["file"]), "rb").read()
    out = {"name": entry["name"], "file": entry["file"], "sha256": sha256_bytes(raw), "tags": entry["tags"]}
    request = json.loads(raw.decode("utf-8"))
    if isinstance(request.get("videos"), list):  # clips named relative to the repository root (real4_video)
        request["videos"] = [os.path.join(ROOT, v) if isinstance(v, str) and not os.path.isabs(v) else v
                             for v in request["videos"]]
    cap.reset()
    t0 = time.perf_counter()
    resp = jsm.systemone(model, processor, request)
    out["reference_seconds"] = round(time.perf_counter() - t0, 3)
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
    q0 = rec.questions[0].question_span[0]
    n = len(schema_piece)
    schema_offset = max(i for i in range(q0 - n + 1) if ids[i:i + n] == schema_piece)
    out["schema_offset"] = schema_offset
    img_runs = image_runs_of(ids, pad_id) if rec.media else []
    vid_runs = image_runs_of(ids, video_pad_id) if rec.media else []  # one run per frame group
    runs = sorted(img_runs + vid_runs)  # images before videos in the prompt, as in the tower's output
    frows = sample_rows(L, rec, runs, schema_offset)
    lrows = layer_rows(L, rec, schema_offset, runs)

    def take(t, rows):
        t = t[0].float().numpy()
        assert t.shape[0] == L
        return t[rows]
    out["layers"] = [store.add(take(cap.layers[i], lrows), lrows) for i in range(len(cap.layers))]
    out["final_norm"] = store.add(take(cap.final, frows), frows)
    if rec.media:
        m = rec.media
        media = {"token_offset": m["token_offset"], "image_runs": [list(r) for r in img_runs]}
        if "image_grid_thw" in m:
            media["image_grid_thw"] = m["image_grid_thw"].tolist()
            pv = m["pixel_values"].float().numpy()
            media["pixel_values"] = {"full_shape": list(pv.shape),
                                     "sha256": sha256_bytes(np.ascontiguousarray(pv).astype("<f4").tobytes())}
        if "video_grid_thw" in m:
            media["video_runs"] = [list(r) for r in vid_runs]
            media["video_grid_thw"] = m["video_grid_thw"].tolist()
            pv = m["pixel_values_videos"].float().numpy()
            media["pixel_values_videos"] = {"full_shape": list(pv.shape),
                                            "sha256": sha256_bytes(np.ascontiguousarray(pv).astype("<f4").tobytes())}
        merged = torch.cat(cap.merger, dim=0).float().numpy()
        mrows = merger_rows(merged.shape[0], runs)
        ref = store.add(merged[mrows], mrows)
        ref["full_shape"] = list(merged.shape)
        media["merger"] = ref
        out["media"] = media
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "real4"))
    ap.add_argument("--corpus", default=os.path.join(ROOT, "tests", "corpus"))
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "real4"))
    ap.add_argument("--names", nargs="*", default=DEFAULT_NAMES)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    assert sha256_file(jsm.__file__) == JSM_SHA256, f"{jsm.__file__}: not the pinned joint_schema_model.py"
    manifest = {}
    for line in open(os.path.join(args.model, "manifest.sha256")):
        h, name = line.rstrip("\n").split("  ", 1)
        manifest[name] = h
    t0 = time.perf_counter()
    for name, h in manifest.items():
        got = sha256_file(os.path.join(args.model, name))
        assert got == h, f"{args.model}/{name}: sha256 {got} does not match manifest.sha256"
    print(f"manifest verified ({len(manifest)} files, {time.perf_counter() - t0:.1f}s)", flush=True)

    t0 = time.perf_counter()
    model, processor = jsm.load_release_model(args.model, dtype=torch.float32, device="cpu")
    load_s = time.perf_counter() - t0
    print(f"loaded in {load_s:.1f}s, peak RSS {peak_rss_mb():.0f} MB", flush=True)

    # Key check (instead of a second fp32 from_pretrained): every checkpoint tensor is a model parameter and back.
    wm = json.load(open(os.path.join(args.model, "model.safetensors.index.json")))["weight_map"]
    ckpt = {k for k in wm if not k.startswith("mtp.")}
    have = set(model.language_model.state_dict().keys())
    load_info = {"missing_keys": sorted(have - ckpt), "unexpected_keys": sorted(ckpt - have),
                 "ignored": sorted({k.split(".")[0] for k in wm if k.startswith("mtp.")})}
    assert not load_info["missing_keys"] and not load_info["unexpected_keys"], load_info
    for p in model.parameters():
        assert p.dtype == torch.float32

    cap = Capture(model)
    pad_id = model.language_model.config.image_token_id
    video_pad_id = model.language_model.config.video_token_id
    schema_piece = processor.tokenizer("\n\nSCHEMA FIELDS:\n", add_special_tokens=False).input_ids
    store = Bin()
    corpus = {e["name"]: e for e in json.load(open(os.path.join(args.corpus, "corpus.json"), encoding="utf-8"))["requests"]}
    results = []
    for name in args.names:
        r = run_one(corpus[name], args.corpus, model, processor, cap, store, schema_piece, pad_id, video_pad_id)
        results.append(r)
        print(f"{name:30s} L={r['n_tokens']:5d}  {r['reference_seconds']:.1f}s  {r['response'][:120]}", flush=True)

    data = store.bytes()
    cfg = model.language_model.config.text_config
    index = {
        "format": FORMAT,
        "generated_by": "tools/reference/make_real4_fixtures.py",
        "settings": {
            "reference": "joint_schema_model.py sha256 " + JSM_SHA256 + " (rapid-mlx 0.16.10 vendored copy)",
            "load": "load_release_model(models/real4, dtype=torch.float32, device='cpu')",
            "torch_threads": args.threads,
            "max_length": 16384,
            "request_parser": "json.loads(raw.decode('utf-8'))",
            "response_serializer": "json.dumps(resp, ensure_ascii=False, separators=(',', ':'))  # no sort_keys",
            "attn_implementation": model.language_model.config._attn_implementation,
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "machine": platform.machine(),
            "text_config": {"hidden_size": cfg.hidden_size, "num_hidden_layers": cfg.num_hidden_layers,
                            "layer_types": list(cfg.layer_types)},
            "rows": "final_norm: make_fixtures.sample_rows; layers: {0, schema_offset, first question span start, "
                    "L-1}",
            "load_seconds": round(load_s, 1),
            "peak_rss_mb": round(peak_rss_mb()),
        },
        "versions": versions(),
        "checkpoint": {"path": "models/real4", "manifest": manifest, "load_info": load_info},
        "bin": {"file": "data.bin", "bytes": len(data), "sha256": sha256_bytes(data), "dtype": "float32",
                "byte_order": "little"},
        "requests": results,
    }
    blob = json.dumps(index, ensure_ascii=True, allow_nan=False, indent=1) + "\n"
    total = len(data) + len(blob)
    assert total <= MAX_BYTES, f"fixtures would be {total} bytes (> {MAX_BYTES})"
    os.makedirs(args.out, exist_ok=True)
    for fname, content, mode in (("data.bin", data, "wb"), ("index.json", blob, "w")):
        tmp = os.path.join(args.out, fname + ".tmp")
        with open(tmp, mode, **({} if mode == "wb" else {"encoding": "ascii"})) as f:
            f.write(content)
        os.replace(tmp, os.path.join(args.out, fname))
    print(f"wrote {args.out}: {len(results)} requests, data.bin {len(data)} bytes, index.json {len(blob)} bytes; "
          f"peak RSS {peak_rss_mb():.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
