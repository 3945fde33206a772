/* A decoded video frame to RGB24 as the reference computes it: PyAV 18.1.0's frame.to_rgb() on its
 * bundled FFmpeg 8.1.2 (libswscale 9.5), reproduced with Debian's FFmpeg 5.1 libswscale 6.7 plus one
 * step of our own. Where the two libswscale versions part, and why this is what we do, is in rgb24.c
 * and docs/spec-corrections.md "Video". */
#ifndef CLEF_VIDEO_RGB24_H
#define CLEF_VIDEO_RGB24_H

#include <libavutil/frame.h>

#include "base/err.h"
#include "image/image_internal.h"

typedef struct clef_rgb24_conv {
    struct SwsContext *sws; /* cached between frames of one clip */
    AVFrame *mid;           /* the 4:2:2 intermediate of the vertical chroma step (rgb24.c) */
    int colour;             /* the colorspace details sws was given: 0 none, else 1 + 2 * space + full */
} clef_rgb24_conv;

/* Converts f into out (allocated here, w*h*3). The converter's caches live until clef_rgb24_conv_free. */
int clef_rgb24_convert(clef_rgb24_conv *c, const AVFrame *f, clef_rgb *out, clef_err *err);
void clef_rgb24_conv_free(clef_rgb24_conv *c);

/* The vertical chroma filter libswscale's bilinear initFilter builds for a 4:2:0 source of chroma
 * height src_h shown at dst_h rows (both versions build the same one; exposed for the unit test):
 * row y reads chroma rows pos[y] .. pos[y] + *size - 1 with 12-bit weights coef[y * *size + j].
 * pos and coef are allocated here (free both); -1 with OutOfMemory or a bad size. */
int clef_rgb24_vfilter(int src_h, int dst_h, int **pos, int **coef, int *size, clef_err *err);

#endif
