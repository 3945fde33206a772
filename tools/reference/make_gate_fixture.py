#!/usr/bin/env python3
"""Run the author's reference on the tiny checkpoint over requests of the author's fixture; write a fixture in
the author's schema ("coreai-clef-flash-fixtures/1") for `clef gate` (tests/parity/test_gate.py).

    .venv-ref/bin/python tools/reference/make_gate_fixture.py [--model models/tiny]
        [--author ../shared/fixtures/clef-flash/fixtures-clef-flash.json]
        [--images tests/fixtures/images] [--out tests/fixtures/gate_tiny/fixtures-gate-tiny.json]
        [--dtype float32|bfloat16]

--dtype bfloat16 runs the same requests with the model loaded in torch bf16 (what a transformers user
gets with dtype=torch.bfloat16): the anchor the CPU precisions are compared with (docs/precision.md,
tools/reference/gate_anchor.py); its output goes to fixtures-gate-tiny-bf16.json by default.

Reference: joint_schema_model.py (sha256 0e304cf7…, from .venv-ref/clef_vendor),
load_release_model(models/tiny, dtype=torch.float32, device="cpu"), torch.set_num_threads(1); each run is
jsm.systemone(model, processor, request), with the head's logits captured by a forward hook and
probs = logits.float().softmax(-1) (what systemone computes), encode_record's result by wrapping it.

Which runs (a fixed subset, so the committed file stays small and the test quick):
  - every text run of the sources own_text, own_text_long, own_json, heldout_text, heldout_json,
    heldout_text_long (48 runs), and every 8th SemIf run (18 runs);
  - image runs: the author's images are not in the repository, so the records img_01, img_02 and photo_01
    keep their requests but their image is replaced by a PNG of tests/fixtures/images (IMAGE_SUBST below),
    named and hashed in the output's "images" like the author's; arms as the author's: g256 / g448 =
    transformers load_image, PIL BICUBIC resize to 256x256 / 448x448, then the processor; native = the
    file's path as the request entry (the processor's own loader).
The output keeps the author's keys for records and runs (ids, spans, option ids, logits, probs, argmax,
top2_margin, near_tie, gold, systemone_response); run fields the engine gate does not read and this
script cannot reproduce without the author's images (pixel_values_sha256 etc.) are left out. Never edit
the output by hand: rerun this script.
"""
import argparse
import hashlib
import json
import os
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, ".venv-ref", "clef_vendor"))

import torch  # noqa: E402

torch.set_num_threads(1)
torch.set_num_interop_threads(1)
warnings.filterwarnings("ignore")

import joint_schema_model as jsm  # noqa: E402
import transformers  # noqa: E402
from PIL import Image  # noqa: E402
from transformers.image_utils import load_image  # noqa: E402

transformers.logging.set_verbosity_error()

JSM_SHA256 = "0e304cf7c6500e8bb59bef7e2afd2c6373f82596dfb3b57d1aa93c175e2dc3a3"
TEXT_SOURCES = {"own_text", "own_text_long", "own_json", "heldout_text", "heldout_json", "heldout_text_long"}
SEMIF_EVERY = 8
IMAGE_SUBST = {"img_01": "png_rgb_224x224.png", "img_02": "png_rgb_300x200.png", "photo_01": "png_rgb_640x480.png"}
TILE = {"g256": 256, "g448": 448}


def sha256_file(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "tiny"))
    ap.add_argument("--author", default=os.path.join(ROOT, "..", "shared", "fixtures", "clef-flash",
                                                     "fixtures-clef-flash.json"))
    ap.add_argument("--images", default=os.path.join(ROOT, "tests", "fixtures", "images"))
    ap.add_argument("--out")
    ap.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    args = ap.parse_args()
    suffix = "" if args.dtype == "float32" else "-bf16"
    args.out = args.out or os.path.join(ROOT, "tests", "fixtures", "gate_tiny", f"fixtures-gate-tiny{suffix}.json")
    dtype = getattr(torch, args.dtype)

    assert sha256_file(jsm.__file__) == JSM_SHA256, f"{jsm.__file__}: not the pinned joint_schema_model.py"
    manifest = {}
    for line in open(os.path.join(args.model, "manifest.sha256")):
        h, name = line.rstrip("\n").split("  ", 1)
        assert sha256_file(os.path.join(args.model, name)) == h, f"{args.model}/{name}: not its manifest hash"
        manifest[name] = h

    with open(args.author, encoding="utf-8") as f:
        author = json.load(f)
    records = {r["id"]: r for r in author["records"]}

    chosen, n_semif = [], 0
    for run in author["runs"]:
        if run["arm"] == "text" and run["source"] in TEXT_SOURCES:
            chosen.append(run)
        elif run["arm"] == "text" and run["source"] == "semif_authored144":
            if n_semif % SEMIF_EVERY == 0:
                chosen.append(run)
            n_semif += 1
        elif run["id"] in IMAGE_SUBST:
            chosen.append(run)

    model, processor = jsm.load_release_model(args.model, dtype=dtype, device="cpu")
    captured = {}
    model.head.register_forward_hook(lambda m, a, o: captured.__setitem__("head", o))
    orig_encode = jsm.encode_record

    def encode(*a, **k):
        rec = orig_encode(*a, **k)
        captured["record"] = rec
        return rec
    jsm.encode_record = encode

    out_records, out_runs, seen = [], [], set()
    images = {}
    for arun in chosen:
        rid, arm = arun["id"], arun["arm"]
        rec = json.loads(json.dumps(records[rid]))  # a copy
        request = rec["request"]
        call = json.loads(json.dumps(request))
        if arm != "text":
            fname = IMAGE_SUBST[rid]
            path = os.path.join(args.images, fname)
            if fname not in images:
                with Image.open(path) as im:
                    size = list(im.size)
                images[fname] = {"set": "tiny", "name": os.path.splitext(fname)[0], "file": fname, "size": size,
                                 "png_sha256": sha256_file(path),
                                 "note": f"tests/fixtures/images/{fname}, standing in for the author's image"}
            rec["image_files"] = [fname]
            call["images"] = [path] if arm == "native" else [load_image(path).resize((TILE[arm], TILE[arm]),
                                                                                      Image.BICUBIC)]
        captured.clear()
        resp = jsm.systemone(model, processor, call)
        enc = captured["record"]
        head = captured["head"][0]
        ids = list(enc.input_ids)
        assert resp["usage"]["input_tokens"] == len(ids)
        qs = []
        for q, logits in zip(enc.questions, head):
            lg = logits.float()
            probs = lg.softmax(-1)
            pl = probs.tolist()
            order = sorted(range(len(pl)), key=lambda i: -pl[i])
            top = order[0]
            margin = pl[order[0]] - pl[order[1]] if len(pl) > 1 else 1.0
            gold = rec.get("gold", {}).get(q.question_id)
            qs.append({"question_id": q.question_id, "type": request["questions"][q.question_id]["type"],
                       "question_span": list(q.question_span), "option_spans": [list(s) for s in q.option_spans],
                       "option_ids": list(q.option_ids), "logits": lg.tolist(), "probs": pl,
                       "argmax_index": top, "argmax_id": q.option_ids[top], "top2_margin": margin,
                       "near_tie": margin < 0.02, "gold": gold,
                       "gold_correct": None if gold is None else q.option_ids[top] == gold})
        n_img = sum(1 for t in ids if t == 248056)
        run = {"id": rid, "arm": arm, "set": arun["set"], "source": arun["source"], "tokens": len(ids),
               "n_image_tokens": n_img}
        if arm != "text":
            run["image_files"] = rec["image_files"]
            run["merged_hw"] = [int(x) // 2 for x in enc.media["image_grid_thw"][0][1:]]
        run.update(ids=ids, in_decoder_gates=True, questions=qs, systemone_response=resp)
        out_runs.append(run)
        if rid not in seen:
            seen.add(rid)
            out_records.append(rec)
        print(f"{rid:12s} {arm:6s} L={len(ids)}", flush=True)

    out = {
        "schema": author["schema"],
        "what": f"The reference (joint_schema_model.py, {'fp32' if args.dtype == 'float32' else 'torch bf16'}) on the tiny random checkpoint (models/tiny), over a "
                "subset of the author's fixture requests; written by tools/reference/make_gate_fixture.py for "
                "tests/parity/test_gate.py. Same schema as the author's fixture; image records use stand-in images.",
        "source": {"hf_id": "models/tiny (random weights, release layout)", "checkpoint_manifest": manifest,
                   "joint_schema_model_sha256": JSM_SHA256,
                   "author_fixture_sha256": sha256_file(args.author),
                   "oracle": f"joint_schema_model.load_release_model(models/tiny, device='cpu', dtype={args.dtype}) + "
                             "systemone(), torch.set_num_threads(1)",
                   "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
                   "device": "cpu", "dtype": args.dtype},
        "contract": author["contract"],
        "arms": author["arms"],
        "images": list(images.values()),
        "records": out_records,
        "runs": out_runs,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {args.out}: {len(out_records)} records, {len(out_runs)} runs, {os.path.getsize(args.out)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
