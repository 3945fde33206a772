/* The Qwen3.5 vision tower (Qwen3_5VisionModel) in fp32, model.md §6: patch embedding as one GEMM
 * over the flattened kernel, the learned position grid resampled bilinearly (align_corners=True)
 * in transformers' fp32 evaluation order, 2-D rotary over the whole head, `depth` pre-norm blocks
 * (LayerNorm, non-causal attention per image frame, tanh-GELU MLP) and the 2x2 merger (LayerNorm,
 * 4 consecutive rows, fc1, erf-GELU, fc2). Every dimension comes from the config; every op goes
 * through a clef_ops backend. Independent of image/ and decision/: callers pass pixel rows. */
#ifndef CLEF_MODEL_VISION_H
#define CLEF_MODEL_VISION_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "compute/ops.h"
#include "model/config.h"
#include "model/weights.h"

/* One image: pixel rows in the processor's block order (model.md §7.4). */
typedef struct clef_vision_image {
    const float *pixel_values;  /* host [grid_t * grid_h * grid_w, patch_dim] */
    int grid_t, grid_h, grid_w; /* image_grid_thw, in patches */
} clef_vision_image;

/* Output rows (image tokens) of one image: grid_t * (grid_h / merge) * (grid_w / merge); 0 when
 * the grid is not valid for this config (non-positive, or h / w not multiples of merge). */
size_t clef_vision_tokens(const clef_vision_config *vc, const clef_vision_image *im);

/* Runs the tower on images[0 .. n_images) (each image independently; transformers' packed batch
 * gives the same numbers, attention being per frame) and writes the merger rows of all images,
 * in order, to `out`: a device buffer of ops with room for [sum of tokens, out_hidden_size].
 * inv_freq: optional [head_dim / 4] rotary inverse frequencies as the reference computed them
 * (NULL: computed as torch does in fp32). Returns 0, or -1 with err set (BadModel: no vision
 * weights or a config this code cannot run; InternalError: a bad grid; OutOfMemory). */
int clef_vision_forward(clef_ops *ops, const clef_vision_config *vc, const clef_vision_weights *w,
                        const clef_vision_image *images, size_t n_images, const float *inv_freq, float *out,
                        clef_err *err);

/* The rotary inverse frequencies [head_dim / 4]: 1 / (theta ** (float(2i) / (head_dim / 2))) in
 * fp32, as Qwen3_5VisionRotaryEmbedding computes them. */
void clef_vision_inv_freq(const clef_vision_config *vc, float *out);

/* (row, col) of row n (< grid_h * grid_w) of one frame in the processor's block order. */
void clef_vision_patch_rc(size_t n, int grid_w, int merge, int *row, int *col);

/* Bilinear (align_corners=True) taps and weights of the side x side learned grid for patch
 * (row, col) of a grid_h x grid_w image, in transformers' fp32 evaluation order: idx[k] indexes
 * the flattened table, taps ordered (r0,c0), (r0,c1), (r1,c0), (r1,c1); wt[k] = w_row * w_col. */
void clef_vision_bilinear(int side, int row, int col, int grid_h, int grid_w, int32_t idx[4], float wt[4]);

#endif
