/* The release checkpoint as published, bound to structs of tensor views.
 *
 * A model folder holds config.json, joint_head_config.json, joint_head.safetensors and either
 * model.safetensors.index.json (+ the shards it names, plain file names inside the folder) or one
 * model.safetensors. clef_model_open maps every file read-only (no weights are read here: RSS
 * grows with the pages the forward pass, or clef_model_prepare, touches), validates every header,
 * and binds each tensor the engine needs by exact name with exact dtype and shape (from the
 * config). A missing tensor, a wrong dtype or a wrong shape is refused (BadModel) naming the
 * tensor. `mtp.*` and other extra backbone tensors are ignored; joint_head.safetensors must hold
 * exactly the 122 head tensors (the reference loads it with strict=True).
 *
 * Dtypes (model.md §3.1, contract.md §6.2): everything BF16 except linear_attn.A_log and
 * linear_attn.norm.weight (F32). Data pointers are aligned to the element size (checked).
 *
 * Vision is optional: a checkpoint with no `model.visual.*` tensors loads for text-only use
 * (vision.present == 0); a partial vision tower is refused. Set opts.require_vision to refuse a
 * checkpoint without one. */
#ifndef CLEF_MODEL_WEIGHTS_H
#define CLEF_MODEL_WEIGHTS_H

#include <stddef.h>

#include "base/err.h"
#include "model/config.h"
#include "model/safetensors.h"

/* One decoder layer, P = model.language_model.layers.i. Exactly one of gdn / attn is bound
 * (per cfg.text.layer_types[i]); the other is zeroed. Shapes with the release config. */
typedef struct clef_text_layer {
    int type;                 /* CLEF_LAYER_LINEAR or CLEF_LAYER_FULL */
    clef_tensor input_norm;   /* P.input_layernorm.weight [H] BF16, offset from 1 */
    clef_tensor post_norm;    /* P.post_attention_layernorm.weight [H] BF16, offset from 1 */
    clef_tensor mlp_gate;     /* P.mlp.gate_proj.weight [I, H] */
    clef_tensor mlp_up;       /* P.mlp.up_proj.weight [I, H] */
    clef_tensor mlp_down;     /* P.mlp.down_proj.weight [H, I] */
    struct {                  /* Gated DeltaNet: P.linear_attn.* */
        clef_tensor in_proj_qkv; /* [2*Kd + Vd, H] = [8192, 4096] (q, k, v blocks, head-major) */
        clef_tensor in_proj_z;   /* [Vd, H] = [4096, 4096] */
        clef_tensor in_proj_b;   /* [n_v_heads, H] = [32, 4096] */
        clef_tensor in_proj_a;   /* [n_v_heads, H] */
        clef_tensor conv1d;      /* conv1d.weight [conv_dim, 1, K] = [8192, 1, 4] */
        clef_tensor dt_bias;     /* [n_v_heads] BF16 */
        clef_tensor A_log;       /* [n_v_heads] F32 */
        clef_tensor norm;        /* norm.weight [v_head_dim] = [128] F32, a plain multiplier */
        clef_tensor out_proj;    /* [H, Vd] */
    } gdn;
    struct {                  /* gated full attention: P.self_attn.* */
        clef_tensor q_proj;      /* [2 * heads * head_dim, H] = [8192, 4096], query/gate interleaved per head */
        clef_tensor k_proj;      /* [kv_heads * head_dim, H] = [1024, 4096] */
        clef_tensor v_proj;      /* [kv_heads * head_dim, H] */
        clef_tensor o_proj;      /* [H, heads * head_dim] */
        clef_tensor q_norm;      /* [head_dim] offset from 1 */
        clef_tensor k_norm;      /* [head_dim] offset from 1 */
    } attn;
} clef_text_layer;

typedef struct clef_text_weights {
    clef_tensor embed_tokens; /* model.language_model.embed_tokens.weight [V, H] */
    clef_tensor final_norm;   /* model.language_model.norm.weight [H], offset from 1 */
    clef_tensor lm_head;      /* lm_head.weight [V, H] (untied; also the head's lexical table) */
    int n_layers;
    clef_text_layer *layers;  /* n_layers */
} clef_text_weights;

/* V = model.visual.blocks.j */
typedef struct clef_vision_block {
    clef_tensor norm1_w, norm1_b; /* V.norm1.{weight,bias} [Hv] (LayerNorm) */
    clef_tensor norm2_w, norm2_b; /* V.norm2.{weight,bias} [Hv] */
    clef_tensor qkv_w, qkv_b;     /* V.attn.qkv [3*Hv, Hv] / [3*Hv] */
    clef_tensor proj_w, proj_b;   /* V.attn.proj [Hv, Hv] / [Hv] */
    clef_tensor fc1_w, fc1_b;     /* V.mlp.linear_fc1 [Iv, Hv] / [Iv] */
    clef_tensor fc2_w, fc2_b;     /* V.mlp.linear_fc2 [Hv, Iv] / [Hv] */
} clef_vision_block;

typedef struct clef_vision_weights {
    int present;                  /* 0: text-only checkpoint, everything below zeroed */
    clef_tensor patch_w;          /* model.visual.patch_embed.proj.weight [Hv, C, T, p, p] (5-D) */
    clef_tensor patch_b;          /* model.visual.patch_embed.proj.bias [Hv] */
    clef_tensor pos_embed;        /* model.visual.pos_embed.weight [num_position_embeddings, Hv] */
    int depth;
    clef_vision_block *blocks;    /* depth */
    clef_tensor merger_norm_w, merger_norm_b; /* model.visual.merger.norm.{weight,bias} [Hv] */
    clef_tensor merger_fc1_w, merger_fc1_b;   /* merger.linear_fc1 [Hv*m^2, Hv*m^2] / [Hv*m^2] */
    clef_tensor merger_fc2_w, merger_fc2_b;   /* merger.linear_fc2 [out_hidden, Hv*m^2] / [out_hidden] */
} clef_vision_weights;

/* evidence_layers.i (W = width, F = feedforward) */
typedef struct clef_head_evidence_layer {
    clef_tensor query_norm_w, query_norm_b;   /* [W] */
    clef_tensor memory_norm_w, memory_norm_b; /* [W] */
    clef_tensor ff_norm_w, ff_norm_b;         /* feedforward_norm [W] */
    clef_tensor attn_in_w, attn_in_b;         /* attention.in_proj_weight [3W, W] / in_proj_bias [3W] */
    clef_tensor attn_out_w, attn_out_b;       /* attention.out_proj.{weight,bias} [W, W] / [W] */
    clef_tensor ff0_w, ff0_b;                 /* feedforward.0 [F, W] / [F] */
    clef_tensor ff3_w, ff3_b;                 /* feedforward.3 [W, F] / [W] */
} clef_head_evidence_layer;

/* layers.j (a TransformerDecoderLayer) */
typedef struct clef_head_decoder_layer {
    clef_tensor sa_in_w, sa_in_b;   /* self_attn.in_proj_weight [3W, W] / in_proj_bias [3W] */
    clef_tensor sa_out_w, sa_out_b; /* self_attn.out_proj [W, W] / [W] */
    clef_tensor ca_in_w, ca_in_b;   /* multihead_attn.in_proj_weight / in_proj_bias */
    clef_tensor ca_out_w, ca_out_b; /* multihead_attn.out_proj */
    clef_tensor linear1_w, linear1_b; /* [F, W] / [F] */
    clef_tensor linear2_w, linear2_b; /* [W, F] / [W] */
    clef_tensor norm1_w, norm1_b, norm2_w, norm2_b, norm3_w, norm3_b; /* [W] */
} clef_head_decoder_layer;

typedef struct clef_head_weights {
    clef_tensor hidden_norm_w, hidden_norm_b;         /* [Hb] (Hb = backbone hidden) */
    clef_tensor memory_projection;                    /* [W, Hb], no bias */
    clef_tensor question_projection;                  /* [W, Hb] */
    clef_tensor option_question_projection;           /* [W, Hb] */
    clef_tensor global_projection;                    /* [W, Hb] */
    clef_tensor option_context_projection;            /* [W, Hb] */
    clef_tensor option_lexical_projection;            /* [W, Hb] */
    clef_tensor type_embedding;                       /* [3, W] */
    int n_evidence;                                   /* routing_layers */
    clef_head_evidence_layer *evidence;
    clef_tensor option_summary_norm_w, option_summary_norm_b; /* [W] */
    clef_tensor field_norm_w, field_norm_b;           /* [W] */
    clef_tensor option_norm_w, option_norm_b;         /* [W] */
    int n_layers;                                     /* layers */
    clef_head_decoder_layer *layers;
    clef_tensor scorer0_w, scorer0_b;                 /* residual_scorer.0 [W, 4W] / [W] (input [F, o, F*o, abs(F-o)]) */
    clef_tensor scorer3_w, scorer3_b;                 /* residual_scorer.3 [1, W] / [1] */
    clef_tensor prior_logit_scale;                    /* [] 0-d */
    clef_tensor joint_logit_scale;                    /* [] */
    clef_tensor residual_gate;                        /* [] */
} clef_head_weights;

typedef struct clef_model_files_priv clef_model_files_priv;

typedef struct clef_model_files {
    clef_config cfg;
    clef_head_config head_cfg;
    clef_text_weights text;
    clef_vision_weights vision;
    clef_head_weights head;
    size_t mapped_bytes;        /* total size of the mapped files */
    int n_prepared;             /* Linear weights a backend prepared (clef_model_prepare) */
    size_t prepared_bytes;      /* the memory those hold */
    size_t released_bytes;      /* mapped bytes whose pages were released after preparing */
    clef_model_files_priv *priv; /* shards, index; do not touch */
} clef_model_files;

/* Progress: stage is a short static string ("open", "prefetch"), done/total in the stage's unit
 * (files for "open", bytes for "prefetch"). Return nonzero to cancel (the call then fails). */
typedef int (*clef_progress_fn)(void *user, const char *stage, size_t done, size_t total);

typedef struct clef_model_open_opts {
    int require_vision;         /* refuse a checkpoint without vision weights */
    clef_progress_fn progress;  /* optional */
    void *progress_user;
} clef_model_open_opts;

/* Opens a model folder. NULL with err set (IoError / BadModel / OutOfMemory) on failure. */
clef_model_files *clef_model_open(const char *dir, clef_err *err);
clef_model_files *clef_model_open_ex(const char *dir, const clef_model_open_opts *opts, clef_err *err);
void clef_model_close(clef_model_files *m);

/* Optional: reads every mapped file once through the page cache (read(2) into a small buffer, so
 * the process RSS does not grow) so that the first forward pass does not wait on the disk;
 * reports progress as stage "prefetch". Returns -1 on a read error or cancel. */
int clef_model_prefetch(clef_model_files *m, clef_progress_fn progress, void *user, clef_err *err);

/* Hands every Linear weight of the chosen parts to ops->prepare_weight (when the backend has
 * that hook) and keeps what it returns in the tensor's `prep` (freed by clef_model_close, which
 * needs no ops). A tensor already prepared is skipped, so calling again is cheap. After each
 * matrix is prepared, its pages of the file mapping are released (clef_st_release: madvise
 * MADV_DONTNEED on the whole pages inside it): the prepared copy replaces them in the process's
 * RSS instead of sitting beside them, and whatever still reads the original (the parity path, a
 * row slice a backend cannot take from its copy, another backend) faults it back in from the
 * page cache. The engine prepares the text model and the head at load (the vision tower gained
 * nothing measurable, so it is left to callers who ask). Returns how many weights this
 * call prepared; one the backend cannot prepare (e.g. out of memory) stays as it was and linear
 * reads the mapping. Not thread-safe against a forward running on the same model. */
enum { CLEF_PREP_TEXT = 1, CLEF_PREP_HEAD = 2, CLEF_PREP_VISION = 4 };
struct clef_ops;
int clef_model_prepare(clef_model_files *m, struct clef_ops *ops, unsigned parts);

/* Looks up any backbone tensor by exact name across the shards (NULL when absent). */
const clef_tensor *clef_model_find(const clef_model_files *m, const char *name);

/* Every tensor the binder expects for these configs, in binding order, without any file: calls
 * fn(user, file, name, dtype, ndim, shape) where file is 0 for the backbone and 1 for the head.
 * `with_vision` selects the vision tensors. Tests and tools use it to write synthetic
 * checkpoints. Returns -1 if fn returns nonzero or out of memory. */
typedef int (*clef_expect_fn)(void *user, int file, const char *name, int dtype, int ndim,
                              const int64_t *shape);
int clef_weights_expected(const clef_config *cfg, const clef_head_config *hcfg, int with_vision,
                          clef_expect_fn fn, void *user);

#endif
