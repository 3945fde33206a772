/* Shared by the two separable resamplers: per-output-index bounds and fixed-point weights, and the
 * two passes. Both resamplers sum pixel*weight in integers starting from half an output unit, shift
 * right arithmetically by the weight precision and clamp to 0..255. */
#ifndef CLEF_IMAGE_RESIZE_COMMON_H
#define CLEF_IMAGE_RESIZE_COMMON_H

#include <stdint.h>

#include "image/image_internal.h"

typedef struct clef_resample_pass {
    int out_size, ksize; /* ksize: weights stored per output index */
    int *xmin, *xsize;   /* [out_size] */
    int32_t *k;          /* [out_size * ksize] fixed-point weights */
    int precision;       /* bits of the fixed point */
} clef_resample_pass;

void clef_resample_pass_free(clef_resample_pass *p);
/* Runs horizontal (when in->w != ow) then vertical (when in->h != oh) as both libraries do; a pass
 * whose size is unchanged is skipped; when neither runs the output is a copy. */
int clef_resample_run(const clef_rgb *in, int ow, int oh, const clef_resample_pass *ph, const clef_resample_pass *pv,
                      clef_rgb *out, clef_err *err);

#endif
