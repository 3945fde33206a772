/* PIL Image.resize((ow, oh), Image.BICUBIC) on an RGB image (Pillow's libImaging Resample.c
 * arithmetic): separable, horizontal then vertical, a = -0.5 cubic in double, weights normalised per
 * output index and rounded half away from zero to 22-bit fixed point (int32), sums started at 2^21,
 * shifted right by 22 and clamped. A pass whose size is unchanged is skipped. Pass order is
 * horizontal then vertical, except Pillow 12's Image.resize special case for very tall images (see
 * clef_resize_pillow). */
#include <math.h>
#include <stdlib.h>

#include "image/resize_common.h"

#define PIL_PRECISION_BITS 22

static double pil_bicubic(double x) {
    const double a = -0.5;
    if (x < 0.0) x = -x;
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
    if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
    return 0.0;
}

static int pil_pass(int in_size, int out_size, clef_resample_pass *p, clef_err *err) {
    double scale = (double)(float)in_size / out_size; /* Pillow: (double)(in1 - in0) / outSize, floats */
    double filterscale = scale < 1.0 ? 1.0 : scale;
    double support = 2.0 * filterscale;
    int ksize = (int)ceil(support) * 2 + 1;
    p->out_size = out_size;
    p->ksize = ksize;
    p->precision = PIL_PRECISION_BITS;
    p->xmin = malloc(sizeof(int) * (size_t)out_size);
    p->xsize = malloc(sizeof(int) * (size_t)out_size);
    p->k = malloc(sizeof(int32_t) * (size_t)out_size * (size_t)ksize);
    double *w = malloc(sizeof(double) * (size_t)ksize);
    if (!p->xmin || !p->xsize || !p->k || !w) {
        free(w);
        clef_resample_pass_free(p);
        return clef_err_set(err, CLEF_E_OOM, "out of memory resizing an image");
    }
    double ss = 1.0 / filterscale;
    for (int xx = 0; xx < out_size; xx++) {
        double center = (xx + 0.5) * scale;
        double ww = 0.0;
        int xmin = (int)(center - support + 0.5);
        if (xmin < 0) xmin = 0;
        int xmax = (int)(center + support + 0.5);
        if (xmax > in_size) xmax = in_size;
        xmax -= xmin;
        if (xmax > ksize) xmax = ksize; /* cannot happen; keeps the buffer safe */
        if (xmax < 0) xmax = 0;
        int x;
        for (x = 0; x < xmax; x++) {
            double v = pil_bicubic((x + xmin - center + 0.5) * ss);
            w[x] = v;
            ww += v;
        }
        for (x = 0; x < xmax; x++)
            if (ww != 0.0) w[x] /= ww;
        for (; x < ksize; x++) w[x] = 0;
        int32_t *k = p->k + (size_t)xx * ksize;
        for (x = 0; x < ksize; x++)
            k[x] = w[x] < 0 ? (int32_t)(-0.5 + w[x] * (1 << PIL_PRECISION_BITS))
                            : (int32_t)(0.5 + w[x] * (1 << PIL_PRECISION_BITS));
        p->xmin[xx] = xmin;
        p->xsize[xx] = xmax;
    }
    free(w);
    return 0;
}

static int pil_resize_once(const clef_rgb *in, int ow, int oh, clef_rgb *out, clef_err *err) {
    clef_resample_pass ph = {0}, pv = {0};
    if (ow != in->w && pil_pass(in->w, ow, &ph, err)) return -1;
    if (oh != in->h && pil_pass(in->h, oh, &pv, err)) {
        clef_resample_pass_free(&ph);
        return -1;
    }
    int rc = clef_resample_run(in, ow, oh, &ph, &pv, out, err);
    clef_resample_pass_free(&ph);
    clef_resample_pass_free(&pv);
    return rc;
}

int clef_resize_pillow(const clef_rgb *in, int ow, int oh, clef_rgb *out, clef_err *err) {
    /* Pillow 12's Image.resize: an image taller than 100x its width that shrinks vertically is
     * resized in two calls, vertical first (to (w, oh)), then horizontal. */
    if ((int64_t)in->h > (int64_t)in->w * 100 && oh < in->h) {
        clef_rgb tmp;
        if (pil_resize_once(in, in->w, oh, &tmp, err)) return -1;
        int rc = pil_resize_once(&tmp, ow, oh, out, err);
        clef_rgb_free(&tmp);
        return rc;
    }
    return pil_resize_once(in, ow, oh, out, err);
}
