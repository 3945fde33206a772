/* A decoded video frame to RGB24 as the reference computes it: PyAV 18.1.0's frame.to_rgb() on its
 * bundled FFmpeg 8.1.2 (libswscale 9.5), reproduced with Debian's FFmpeg 5.1 libswscale 6.7 plus steps
 * of our own (4:2:0 on libswscale's scaled path: the vertical chroma step for even widths, the whole
 * conversion for odd ones). Where the two libswscale versions part, and why this is what we do, is in
 * rgb24.c and docs/spec-corrections.md "Video". */
#ifndef CLEF_VIDEO_RGB24_H
#define CLEF_VIDEO_RGB24_H

#include <libavutil/frame.h>

#include "base/err.h"
#include "image/image_internal.h"

typedef struct clef_rgb24_conv {
    struct SwsContext *sws; /* cached between frames of one clip */
    AVFrame *mid;           /* the 4:2:2 intermediate of the vertical chroma step (rgb24.c) */
    int w, h, fmt, hpos, vpos, colour; /* what sws was made for (colour: 0 none, else 1 + 2 * space + full) */
} clef_rgb24_conv;

/* Converts f into out (allocated here, w*h*3). The converter's caches live until clef_rgb24_conv_free. */
int clef_rgb24_convert(clef_rgb24_conv *c, const AVFrame *f, clef_rgb *out, clef_err *err);
void clef_rgb24_conv_free(clef_rgb24_conv *c);

/* The filter libswscale's bilinear initFilter builds (both versions build the same one) to take src
 * samples to dst, chroma positions src_pos/dst_pos in 1/256 of a sample (local to the plane), taps
 * normalised to `one` (1 << 12 vertical, 1 << 14 horizontal), size aligned as on x86 (vertical: 2, or 1
 * for one tap; horizontal: 4). Output sample i reads pos[i] .. pos[i] + *size - 1 with weights
 * coef[i * *size + j]. pos and coef are allocated here (free both); -1 with OutOfMemory or a bad size. */
int clef_rgb24_filter(int src_n, int dst_n, int src_pos, int dst_pos, int one, int vertical, int **pos, int **coef,
                      int *size, clef_err *err);

#endif
