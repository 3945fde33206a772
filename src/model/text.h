/* The Qwen3.5 text decoder in fp32 (model.md §4–§5): ids (+ optional replacement rows and M-RoPE
 * planes) in, final-norm hidden rows of every position out. No vocabulary matmul. Every dimension
 * comes from the config; every op goes through a clef_ops backend. */
#ifndef CLEF_MODEL_TEXT_H
#define CLEF_MODEL_TEXT_H

#include <stddef.h>

#include "base/err.h"
#include "compute/ops.h"
#include "model/config.h"
#include "model/forward.h"
#include "model/weights.h"

/* Runs the decoder. hidden_out is a device buffer of ops with room for [in->n, hidden_size]
 * floats (with the CPU backend any host buffer). Returns 0, or -1 with err set (BadModel for a
 * config this code cannot run, RequestTooLong / InternalError for bad inputs, OutOfMemory). */
int clef_text_forward(clef_ops *ops, const clef_config *cfg, const clef_text_weights *w,
                      const clef_forward_in *in, float *hidden_out, clef_err *err);

/* The rotary inverse frequencies [rotary_dim / 2] as transformers computes them in fp32:
 * 1 / (theta ** (float(2i) / rotary_dim)). */
void clef_text_inv_freq(const clef_text_config *tc, float *out);

/* The M-RoPE plane (0 = T, 1 = H, 2 = W) of each of the rotary_dim / 2 frequencies, as
 * transformers' interleaved recomposition assigns them from mrope_section. */
void clef_text_mrope_planes(const clef_text_config *tc, int *plane);

/* A ready-made clef_layer_fn writing DIR/layer_NN.f32 (layers) and DIR/final_norm.f32 (the
 * final-norm rows), raw little-endian fp32 [T, D]. Set .dir; a write failure sets .failed. */
typedef struct clef_layer_dump {
    const char *dir;
    int failed;
} clef_layer_dump;
void clef_layer_dump_fn(void *user, int layer, const float *rows, size_t T, size_t D);

/* ---- internal: one mixer each (gdn.c, attention.c); u [T, H] normed input, out [T, H] ---- */
typedef struct clef_rope_tab {
    const float *cos, *sin; /* device [T, rotary_dim / 2] */
} clef_rope_tab;

/* The records of the forward as the mixers see them: rows and, per record, the state to resume
 * from / to fill (clef_forward_seg), for layer `layer`. */
typedef struct clef_mix_segs {
    const clef_seg *rows;           /* [n] */
    const clef_forward_seg *rec;    /* [n] */
    size_t n;
    int layer;
} clef_mix_segs;

int clef_gdn_forward(clef_ops *ops, const clef_text_config *tc, const clef_text_layer *L,
                     const float *u, size_t T, const clef_mix_segs *sg, float *out, clef_err *err);
int clef_attention_forward(clef_ops *ops, const clef_text_config *tc, const clef_text_layer *L,
                           const float *u, size_t T, const clef_mix_segs *sg, const clef_rope_tab *rope,
                           float *out, clef_err *err);

#endif
