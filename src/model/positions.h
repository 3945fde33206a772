/* M-RoPE position planes for a record with images (model.md §5.3, transformers' get_rope_index).
 *
 * The sequence splits into runs: text (every id that is not an image pad, including
 * <|vision_start|> and <|vision_end|>) and image runs (the pads of one image). Keep cur = 0:
 *  - a text run of length L gets cur .. cur+L-1 on all three planes, then cur += L;
 *  - an image run with merged grid mh x mw (mh = grid_h / merge, mw = grid_w / merge, grid_t = 1)
 *    has mh*mw tokens; token n = r*mw + c gets T = cur, H = cur + r, W = cur + c; then
 *    cur += max(mh, mw).
 * Images are given in sequence order. A pure function: no model, no backend. */
#ifndef CLEF_MODEL_POSITIONS_H
#define CLEF_MODEL_POSITIONS_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

typedef struct clef_pos_image {
    size_t pad_start;           /* index of the image's first pad token */
    size_t n_pad;               /* pads: grid_t * (grid_h / merge) * (grid_w / merge) */
    int grid_t, grid_h, grid_w; /* image_grid_thw in patches */
} clef_pos_image;

/* Fills pos_t, pos_h, pos_w (each [n_ids]). Images must be in order, non-overlapping, inside
 * [0, n_ids), with grid_t == 1, grid_h and grid_w positive multiples of merge and
 * n_pad == (grid_h / merge) * (grid_w / merge); otherwise -1 with InternalError. */
int clef_mrope_positions(size_t n_ids, const clef_pos_image *images, size_t n_images, int merge,
                         int32_t *pos_t, int32_t *pos_h, int32_t *pos_w, clef_err *err);

#endif
