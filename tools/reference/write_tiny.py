#!/usr/bin/env python3
"""Write a tiny clef-flash checkpoint in the release layout (numpy + stdlib only).

    python3 tools/reference/write_tiny.py OUT_DIR [--real-dims | --full-dims]

Writes into OUT_DIR:
  config.json                               Qwen3_5ForConditionalGeneration, model_type qwen3_5
  model-0000N-of-0000M.safetensors          backbone shards (BF16; A_log and linear_attn.norm.weight F32;
                                            untied lm_head; mtp.* tensors present, ignored by transformers)
  model.safetensors.index.json              weight_map + metadata.total_size
  preprocessor_config.json                  image processor (Qwen release form)
  video_preprocessor_config.json            video processor (Qwen release form)
  processor_config.json                     transformers v5 combined processor config (clef-flash form)
  joint_head_config.json, joint_head.safetensors   the JointSchemaHead (all BF16, contract.md §6.2 names)
  manifest.sha256                           sha256 of every other file in OUT_DIR (sha256sum format)

The tokenizer (tokenizer.json, tokenizer_config.json) is written by tools/reference/build_tokenizer.py; run it
into OUT_DIR *before* this script (tools/reference/make_tiny.sh does) so that manifest.sha256 covers it.

Determinism. Every tensor value comes from a counter-based generator: splitmix64 over the element index,
keyed by sha256("clef-tiny:<SEED>:<tensor name>"), mapped to a uniform in [-1, 1) with 53 exact bits, then
`center + halfwidth * u` in float64, rounded to float32, then to bf16 (round to nearest even). Only integer ops
and correctly rounded IEEE +,* are used (no exp/log/sin), so the bytes are the same on every machine and numpy
version. A tensor's values depend only on its name and shape, not on the order in which tensors are written.
SEED = 20261129.

--real-dims writes the same layout with the real Qwen3.5-9B / clef-flash dimensions but only 4 decoder layers
(3 Gated DeltaNet + 1 full attention), a 2-block vision tower of real width, and the real-size head (~6.2 GB of
disk; not used in CI). --full-dims writes every layer at those dimensions: 32 decoder layers (24 Gated DeltaNet +
8 full attention) and the 27-block tower (~19 GB; for time and memory figures of the 9B shape, not parity).
"""

import hashlib
import json
import math
import os
import struct
import sys

import numpy as np

SEED = 20261129
CHUNK = 1 << 21  # elements generated per step (bounded memory for the real-dims variant)

M64 = (1 << 64) - 1


# ----------------------------------------------------------------------------- dims

def dims(real, full=False):
    if real:
        return dict(
            hidden=4096, layers=32 if full else 4, vocab=248320, inter=12288, heads=16, kv_heads=4, head_dim=256,
            partial=0.25, mrope=[11, 11, 10], lk_heads=16, lv_heads=32, lk_dim=128, lv_dim=128, conv=4,
            v_depth=27 if full else 2, v_hidden=1152, v_heads=16, v_inter=4304, v_pos=2304,
            h_width=1024, h_routing=2, h_layers=4, h_heads=16, h_ff=4096,
        )
    return dict(
        hidden=64, layers=8, vocab=248320, inter=96, heads=4, kv_heads=2, head_dim=32,
        partial=0.5, mrope=[3, 3, 2], lk_heads=2, lv_heads=4, lk_dim=16, lv_dim=24, conv=4,
        v_depth=2, v_hidden=48, v_heads=3, v_inter=80, v_pos=16,
        h_width=32, h_routing=2, h_layers=4, h_heads=4, h_ff=96,
    )


def layer_types(n):
    return ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(n)]


# ----------------------------------------------------------------------------- values

def tensor_key(name):
    return int.from_bytes(hashlib.sha256(f"clef-tiny:{SEED}:{name}".encode()).digest()[:8], "little")


def uniform(key, start, n):
    """n values in [-1, 1) for element indices start .. start+n-1 of the stream `key` (float64, exact)."""
    idx = np.arange(start + 1, start + n + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = np.uint64(key) + idx * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    u = (z >> np.uint64(11)).astype(np.float64) * (2.0 ** -53)
    return u * 2.0 - 1.0


def f32_to_bf16_bits(x32):
    """Round float32 to bfloat16, nearest even (no NaN/Inf occur here). Returns uint16."""
    b = x32.view(np.uint32)
    r = (b + np.uint32(0x7FFF) + ((b >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    return r.astype(np.uint16)


class T:
    """One tensor: name, shape, dtype ('BF16' or 'F32'), value rule center + halfwidth * u (or a constant)."""

    def __init__(self, name, shape, center=0.0, halfwidth=0.0, dtype="BF16"):
        self.name, self.shape, self.dtype = name, list(shape), dtype
        self.center, self.halfwidth = float(center), float(halfwidth)

    @property
    def numel(self):
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def nbytes(self):
        return self.numel * (2 if self.dtype == "BF16" else 4)

    def chunks(self):
        key = tensor_key(self.name)
        n = self.numel
        for start in range(0, max(n, 1), CHUNK):
            m = min(CHUNK, n - start) if n else 1
            if self.halfwidth == 0.0:
                x = np.full(m, self.center, dtype=np.float64)
            else:
                x = self.center + self.halfwidth * uniform(key, start, m)
            x32 = x.astype(np.float32)
            if self.dtype == "BF16":
                yield f32_to_bf16_bits(x32).astype("<u2").tobytes()
            else:
                yield x32.astype("<f4").tobytes()


def std(s):
    """halfwidth of a uniform distribution with standard deviation s."""
    return s * math.sqrt(3.0)


def lin(name, out, inp, gain=1.0):
    return T(name, [out, inp], 0.0, std(gain / math.sqrt(inp)))


def offset_norm(name, n):  # RMSNorm weight stored as an offset from 1 (multiplier 0.8 .. 1.2)
    return T(name, [n], 0.0, 0.2)


def ln(prefix, n):  # LayerNorm weight and bias
    return [T(prefix + ".weight", [n], 1.0, 0.2), T(prefix + ".bias", [n], 0.0, 0.1)]


def bias(name, n):
    return T(name, [n], 0.0, 0.1)


# ----------------------------------------------------------------------------- tensors

def backbone_tensors(d):
    H, I = d["hidden"], d["inter"]
    nh, nkv, hd = d["heads"], d["kv_heads"], d["head_dim"]
    key_dim, value_dim = d["lk_heads"] * d["lk_dim"], d["lv_heads"] * d["lv_dim"]
    conv_dim = 2 * key_dim + value_dim
    P = "model.language_model."
    ts = [
        T(P + "embed_tokens.weight", [d["vocab"], H], 0.0, std(0.5)),
        offset_norm(P + "norm.weight", H),
        T("lm_head.weight", [d["vocab"], H], 0.0, std(0.5)),
    ]

    def attn(p):
        return [
            lin(p + "self_attn.q_proj.weight", 2 * nh * hd, H),
            lin(p + "self_attn.k_proj.weight", nkv * hd, H),
            lin(p + "self_attn.v_proj.weight", nkv * hd, H),
            lin(p + "self_attn.o_proj.weight", H, nh * hd),
            offset_norm(p + "self_attn.q_norm.weight", hd),
            offset_norm(p + "self_attn.k_norm.weight", hd),
        ]

    def mlp_norms(p):
        return [
            offset_norm(p + "input_layernorm.weight", H),
            offset_norm(p + "post_attention_layernorm.weight", H),
            lin(p + "mlp.gate_proj.weight", I, H),
            lin(p + "mlp.up_proj.weight", I, H),
            lin(p + "mlp.down_proj.weight", H, I),
        ]

    for i, kind in enumerate(layer_types(d["layers"])):
        p = f"{P}layers.{i}."
        ts += mlp_norms(p)
        if kind == "full_attention":
            ts += attn(p)
        else:
            a = p + "linear_attn."
            ts += [
                lin(a + "in_proj_qkv.weight", conv_dim, H),
                lin(a + "in_proj_z.weight", value_dim, H),
                lin(a + "in_proj_b.weight", d["lv_heads"], H),
                lin(a + "in_proj_a.weight", d["lv_heads"], H),
                T(a + "conv1d.weight", [conv_dim, 1, d["conv"]], 0.0, std(0.5)),
                T(a + "dt_bias", [d["lv_heads"]], 0.0, 1.0),
                T(a + "A_log", [d["lv_heads"]], -2.0, 1.0, dtype="F32"),  # exp(A_log) in [0.05, 0.37]
                T(a + "norm.weight", [d["lv_dim"]], 1.0, 0.2, dtype="F32"),  # plain multiplier
                lin(a + "out_proj.weight", H, value_dim),
            ]

    V = "model.visual."
    vh, vi = d["v_hidden"], d["v_inter"]
    ts += [
        T(V + "patch_embed.proj.weight", [vh, 3, 2, 16, 16], 0.0, std(1.0 / math.sqrt(3 * 2 * 16 * 16))),
        bias(V + "patch_embed.proj.bias", vh),
        T(V + "pos_embed.weight", [d["v_pos"], vh], 0.0, std(0.5)),
    ]
    for j in range(d["v_depth"]):
        b = f"{V}blocks.{j}."
        ts += ln(b + "norm1", vh) + ln(b + "norm2", vh)
        ts += [
            lin(b + "attn.qkv.weight", 3 * vh, vh), bias(b + "attn.qkv.bias", 3 * vh),
            lin(b + "attn.proj.weight", vh, vh), bias(b + "attn.proj.bias", vh),
            lin(b + "mlp.linear_fc1.weight", vi, vh), bias(b + "mlp.linear_fc1.bias", vi),
            lin(b + "mlp.linear_fc2.weight", vh, vi), bias(b + "mlp.linear_fc2.bias", vh),
        ]
    mh = 4 * vh
    ts += ln(V + "merger.norm", vh)
    ts += [
        lin(V + "merger.linear_fc1.weight", mh, mh), bias(V + "merger.linear_fc1.bias", mh),
        lin(V + "merger.linear_fc2.weight", H, mh), bias(V + "merger.linear_fc2.bias", H),
    ]

    # Multi-token-prediction weights: present in Qwen3.5 checkpoints, ignored by transformers (^mtp.*).
    ts += [
        lin("mtp.fc.weight", H, 2 * H, gain=0.1),
        offset_norm("mtp.pre_fc_norm_embedding.weight", H),
        offset_norm("mtp.pre_fc_norm_hidden.weight", H),
        offset_norm("mtp.norm.weight", H),
    ]
    ts += mlp_norms("mtp.layers.0.") + attn("mtp.layers.0.")
    return ts


def head_tensors(d):
    Hh, W, F = d["hidden"], d["h_width"], d["h_ff"]
    ts = ln("hidden_norm", Hh)
    for p in ("memory_projection", "question_projection", "option_question_projection", "global_projection",
              "option_context_projection", "option_lexical_projection"):
        ts.append(lin(p + ".weight", W, Hh))
    ts.append(T("type_embedding.weight", [3, W], 0.0, std(0.5)))

    def mha(p):
        return [lin(p + ".in_proj_weight", 3 * W, W), bias(p + ".in_proj_bias", 3 * W),
                lin(p + ".out_proj.weight", W, W), bias(p + ".out_proj.bias", W)]

    for i in range(d["h_routing"]):
        p = f"evidence_layers.{i}."
        ts += ln(p + "query_norm", W) + ln(p + "memory_norm", W) + ln(p + "feedforward_norm", W)
        ts += mha(p + "attention")
        ts += [lin(p + "feedforward.0.weight", F, W), bias(p + "feedforward.0.bias", F),
               lin(p + "feedforward.3.weight", W, F), bias(p + "feedforward.3.bias", W)]
    ts += ln("option_summary_norm", W) + ln("field_norm", W) + ln("option_norm", W)
    for j in range(d["h_layers"]):
        p = f"layers.{j}."
        ts += mha(p + "self_attn") + mha(p + "multihead_attn")
        ts += [lin(p + "linear1.weight", F, W), bias(p + "linear1.bias", F),
               lin(p + "linear2.weight", W, F), bias(p + "linear2.bias", W)]
        ts += ln(p + "norm1", W) + ln(p + "norm2", W) + ln(p + "norm3", W)
    ts += [lin("residual_scorer.0.weight", W, 4 * W), bias("residual_scorer.0.bias", W),
           lin("residual_scorer.3.weight", 1, W, gain=4.0), bias("residual_scorer.3.bias", 1)]
    # 0-d scalars: exact in bf16.
    ts += [T("prior_logit_scale", [], 0.5), T("joint_logit_scale", [], 1.0), T("residual_gate", [], -0.5)]
    return ts


# ----------------------------------------------------------------------------- files

def write_safetensors(path, tensors):
    tensors = sorted(tensors, key=lambda t: t.name)
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for t in tensors:
        header[t.name] = {"dtype": t.dtype, "shape": t.shape, "data_offsets": [off, off + t.nbytes]}
        off += t.nbytes
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * ((-len(hb)) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for t in tensors:
            for c in t.chunks():
                f.write(c)
    os.replace(path + ".tmp", path)  # readers of an existing checkpoint never see a partial file
    return off


def shard_of(name, n_layers):
    """Shard number (1-based) of a backbone tensor: layers are split across shards, one layer across two."""
    if name == "lm_head.weight":
        return 1
    P = "model.language_model.layers."
    if name.startswith(P):
        i = int(name[len(P):].split(".")[0])
        if i < n_layers // 2:
            return 1
        if i == n_layers // 2 + 1 and ".mlp." in name:
            return 3  # this layer straddles shards 2 and 3
        return 2
    if name.startswith("model.language_model."):
        return 2
    return 3  # model.visual.*, mtp.*


def write_json(path, obj):
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")
    os.replace(path + ".tmp", path)


def config_json(d):
    rope = {"mrope_interleaved": True, "mrope_section": d["mrope"], "partial_rotary_factor": d["partial"],
            "rope_theta": 10000000, "rope_type": "default"}
    text = {
        "attention_bias": False, "attention_dropout": 0.0, "attn_output_gate": True, "bos_token_id": None,
        "dtype": "bfloat16", "eos_token_id": 248044, "full_attention_interval": 4, "head_dim": d["head_dim"],
        "hidden_act": "silu", "hidden_size": d["hidden"], "initializer_range": 0.02,
        "intermediate_size": d["inter"], "layer_types": layer_types(d["layers"]),
        "linear_conv_kernel_dim": d["conv"], "linear_key_head_dim": d["lk_dim"],
        "linear_num_key_heads": d["lk_heads"], "linear_num_value_heads": d["lv_heads"],
        "linear_value_head_dim": d["lv_dim"], "mamba_ssm_dtype": "float32", "max_position_embeddings": 262144,
        "mlp_only_layers": [], "model_type": "qwen3_5_text", "mtp_num_hidden_layers": 1,
        "mtp_use_dedicated_embeddings": False, "num_attention_heads": d["heads"],
        "num_hidden_layers": d["layers"], "num_key_value_heads": d["kv_heads"], "pad_token_id": None,
        "partial_rotary_factor": d["partial"], "rms_norm_eps": 1e-06, "rope_parameters": rope,
        "tie_word_embeddings": False, "use_cache": True, "vocab_size": d["vocab"],
    }
    vision = {
        "deepstack_visual_indexes": [], "depth": d["v_depth"], "dtype": "bfloat16",
        "hidden_act": "gelu_pytorch_tanh", "hidden_size": d["v_hidden"], "in_channels": 3,
        "initializer_range": 0.02, "intermediate_size": d["v_inter"], "model_type": "qwen3_5_vision",
        "num_heads": d["v_heads"], "num_position_embeddings": d["v_pos"], "out_hidden_size": d["hidden"],
        "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2,
    }
    return {
        "architectures": ["Qwen3_5ForConditionalGeneration"], "dtype": "bfloat16", "image_token_id": 248056,
        "model_type": "qwen3_5", "text_config": text, "tie_word_embeddings": False,
        "transformers_version": "5.10.2", "video_token_id": 248057, "vision_config": vision,
        "vision_end_token_id": 248054, "vision_start_token_id": 248053,
    }


IMAGE_PROCESSOR = {
    "do_convert_rgb": True, "do_normalize": True, "do_rescale": True, "do_resize": True,
    "image_mean": [0.5, 0.5, 0.5], "image_processor_type": "Qwen2VLImageProcessorFast",
    "image_std": [0.5, 0.5, 0.5], "merge_size": 2, "patch_size": 16, "resample": 3,
    "rescale_factor": 0.00392156862745098, "size": {"longest_edge": 16777216, "shortest_edge": 65536},
    "temporal_patch_size": 2,
}
VIDEO_PROCESSOR = {
    "do_convert_rgb": True, "do_normalize": True, "do_rescale": True, "do_resize": True, "do_sample_frames": True,
    "fps": 2, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "max_frames": 768, "merge_size": 2,
    "min_frames": 4, "patch_size": 16, "resample": 3, "rescale_factor": 0.00392156862745098,
    "size": {"longest_edge": 25165824, "shortest_edge": 4096}, "temporal_patch_size": 2,
    "video_processor_type": "Qwen3VLVideoProcessor",
}


def write_processor_configs(out):
    write_json(os.path.join(out, "preprocessor_config.json"), dict(IMAGE_PROCESSOR, processor_class="Qwen3VLProcessor"))
    write_json(os.path.join(out, "video_preprocessor_config.json"),
               dict(VIDEO_PROCESSOR, processor_class="Qwen3VLProcessor"))
    write_json(os.path.join(out, "processor_config.json"),
               {"image_processor": IMAGE_PROCESSOR, "processor_class": "Qwen3VLProcessor",
                "video_processor": VIDEO_PROCESSOR})


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_manifest(out):
    names = sorted(n for n in os.listdir(out) if n != "manifest.sha256" and not n.endswith(".tmp")
                   and os.path.isfile(os.path.join(out, n)))
    path = os.path.join(out, "manifest.sha256")
    with open(path + ".tmp", "w") as f:
        for n in names:
            f.write(f"{sha256_file(os.path.join(out, n))}  {n}\n")
    os.replace(path + ".tmp", path)
    return names


def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    flags = [a for a in argv if a.startswith("--")]
    if len(args) != 1 or any(f not in ("--real-dims", "--full-dims") for f in flags):
        print(__doc__.split("\n\n")[0], file=sys.stderr)
        return 2
    out, full = args[0], "--full-dims" in flags
    real = full or "--real-dims" in flags
    d = dims(real, full)
    os.makedirs(out, exist_ok=True)

    write_json(os.path.join(out, "config.json"), config_json(d))
    write_processor_configs(out)

    ts = backbone_tensors(d)
    names = [t.name for t in ts]
    assert len(set(names)) == len(names)
    nshards = 3
    weight_map, total = {}, 0
    for s in range(1, nshards + 1):
        fname = f"model-{s:05d}-of-{nshards:05d}.safetensors"
        part = [t for t in ts if shard_of(t.name, d["layers"]) == s]
        total += write_safetensors(os.path.join(out, fname), part)
        for t in part:
            weight_map[t.name] = fname
    write_json(os.path.join(out, "model.safetensors.index.json"),
               {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))})
    for n in os.listdir(out):  # stale shards of another layout
        if n.startswith("model-") and n.endswith(".safetensors") and n not in set(weight_map.values()):
            os.remove(os.path.join(out, n))

    head_cfg = {"hidden_size": d["hidden"], "width": d["h_width"], "routing_layers": d["h_routing"],
                "layers": d["h_layers"], "heads": d["h_heads"], "feedforward": d["h_ff"]}
    write_json(os.path.join(out, "joint_head_config.json"), head_cfg)
    hts = head_tensors(d)
    write_safetensors(os.path.join(out, "joint_head.safetensors"), hts)

    files = write_manifest(out)
    nparams = sum(t.numel for t in ts)
    print(f"wrote {out}: {len(ts)} backbone tensors ({nparams} params, {total} bytes) in {nshards} shards, "
          f"{len(hts)} head tensors ({sum(t.numel for t in hts)} params); manifest of {len(files)} files")
    if not os.path.exists(os.path.join(out, "tokenizer.json")):
        print("note: no tokenizer.json in OUT_DIR (run build_tokenizer.py first; make_tiny.sh does)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
