/* The buffers of decoded pixels (rgb.h). */
#include "image/rgb.h"

#include <stdlib.h>
#include <string.h>

void clef_rgb_free(clef_rgb *im) {
    if (!im) return;
    free(im->px);
    free(im->px16);
    memset(im, 0, sizeof *im);
}

void clef_rgb_free_all(clef_rgb *frames, int n) {
    if (!frames) return;
    for (int i = 0; i < n; i++) clef_rgb_free(&frames[i]);
    free(frames);
}

int clef_rgb_alloc16(clef_rgb *im, int w, int h, clef_err *err) {
    memset(im, 0, sizeof *im);
    if (w <= 0 || h <= 0) return clef_err_set(err, CLEF_E_INTERNAL, "image buffer of size %dx%d", w, h);
    size_t n = (size_t)w * (size_t)h;
    if (n > SIZE_MAX / 3 / sizeof(uint16_t)) return clef_err_set(err, CLEF_E_OOM, "image too large");
    im->px16 = calloc(n * 3, sizeof(uint16_t));
    if (!im->px16) return clef_err_set(err, CLEF_E_OOM, "out of memory for a %dx%d image", w, h);
    im->w = w;
    im->h = h;
    return 0;
}

int clef_rgb_alloc(clef_rgb *im, int w, int h, clef_err *err) {
    memset(im, 0, sizeof *im);
    if (w <= 0 || h <= 0) return clef_err_set(err, CLEF_E_INTERNAL, "image buffer of size %dx%d", w, h);
    size_t n = (size_t)w * (size_t)h;
    if (n > SIZE_MAX / 3) return clef_err_set(err, CLEF_E_OOM, "image too large");
    im->px = calloc(n, 3);
    if (!im->px) return clef_err_set(err, CLEF_E_OOM, "out of memory for a %dx%d image", w, h);
    im->w = w;
    im->h = h;
    return 0;
}
