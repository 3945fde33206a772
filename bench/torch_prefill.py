#!/usr/bin/env python3
"""Prefill timing of the reference stack (transformers 5.17.0 + torch 2.9.0, fp32, CPU) on a release-layout
checkpoint: the text model forward only (Qwen3_5TextModel: embeddings, the decoder layers, the final norm), the
same synthetic ids as `clef bench` (the 38-id sentence cycled), use_cache off, sdpa attention, pure torch
(no flash-linear-attention / causal-conv1d, as the reference runs).

    .venv-ref/bin/python bench/torch_prefill.py --model models/real4 --tokens 512,2048 --threads 2 --repeat 3

Prints JSON lines shaped like clef bench's ({"kind":"run",...} per run, {"kind":"summary",...} per count).
Only the text model's tensors are loaded (model.language_model.*, BF16 → fp32): the lm_head and the vision
tower are not part of this forward, which keeps the fp32 weights at 7.5 GB for models/real4 (embeddings 4.1 GB + 4 layers 3.5 GB) instead of ~12.5 GB.
"""
import argparse
import json
import os
import resource
import statistics
import sys
import time

import torch

COMMON_IDS = [760, 5813, 4439, 3315, 279, 1906, 995, 26380, 11, 321, 279, 8057, 19386, 421, 424, 1000, 16821, 383,
              6796, 13, 2091, 279, 4087, 10631, 321, 46193, 30, 5044, 4238, 279, 9559, 494, 220, 15, 310, 220, 19,
              13]
PREFIX = "model.language_model."


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def load_text_model(path):
    import transformers
    from safetensors import safe_open
    transformers.logging.set_verbosity_error()
    cfg = transformers.AutoConfig.from_pretrained(path)
    tc = cfg.text_config
    tc._attn_implementation = "sdpa"
    tc.use_cache = False
    with torch.device("meta"):
        model = transformers.models.qwen3_5.modeling_qwen3_5.Qwen3_5TextModel(tc)
    wm = json.load(open(os.path.join(path, "model.safetensors.index.json")))["weight_map"]
    shards = sorted({f for k, f in wm.items() if k.startswith(PREFIX)})
    sd = {}
    for shard in shards:
        with safe_open(os.path.join(path, shard), framework="pt") as f:
            for k in f.keys():
                if k.startswith(PREFIX):
                    sd[k[len(PREFIX):]] = f.get_tensor(k).to(torch.float32)
    missing, unexpected = model.load_state_dict(sd, strict=False, assign=True)
    del sd
    if missing or unexpected:
        raise SystemExit(f"load: missing {missing[:5]} unexpected {unexpected[:5]}")
    # the rotary inv_freq buffers are not in the checkpoint: build that module again on the CPU
    model.rotary_emb = type(model.rotary_emb)(tc)
    for name, buf in list(model.named_parameters()) + list(model.named_buffers()):
        if buf.is_meta:
            raise SystemExit(f"{name} still on the meta device")
    return model.eval()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", required=True, help="comma-separated counts")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=0, help="untimed runs per count first")
    ap.add_argument("--prime", type=int, default=32, help="one untimed forward of this many tokens after loading")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    counts = [int(x) for x in args.tokens.split(",")]
    t0 = time.perf_counter()
    model = load_text_model(args.model)
    open_s = time.perf_counter() - t0
    if args.prime:
        with torch.inference_mode():
            model(input_ids=torch.tensor([[COMMON_IDS[i % len(COMMON_IDS)] for i in range(args.prime)]]),
                  use_cache=False)
    for n in counts:
        ids = torch.tensor([[COMMON_IDS[i % len(COMMON_IDS)] for i in range(n)]], dtype=torch.long)
        secs = []
        for r in range(-args.warmup, args.repeat):
            with torch.inference_mode():
                t = time.perf_counter()
                out = model(input_ids=ids, use_cache=False)
                s = time.perf_counter() - t
            assert out.last_hidden_state.shape == (1, n, model.config.hidden_size)
            del out
            if r < 0:
                continue
            secs.append(s)
            print(json.dumps({"kind": "run", "engine": "torch", "tokens": n, "threads": args.threads, "rep": r,
                              "seconds_text": round(s, 4), "tokens_per_s": round(n / s, 2),
                              "peak_rss_mb": round(peak_rss_mb())}, separators=(",", ":")), flush=True)
        med = statistics.median(secs)
        print(json.dumps({"kind": "summary", "engine": "torch", "tokens": n, "threads": args.threads,
                          "repeat": args.repeat, "median_seconds_text": round(med, 4),
                          "median_tokens_per_s": round(statistics.median(n / s for s in secs), 2),
                          "open_seconds": round(open_s, 3), "peak_rss_mb": round(peak_rss_mb()),
                          "torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability()}, separators=(",", ":")),
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
