/* torchvision.transforms.v2.functional.resize(uint8 CHW, [oh, ow], BICUBIC, antialias=True) on x86:
 * ATen's uint8 antialiased path (upsample_avx_bilinear_bicubic_uint8). It is Pillow's separable
 * fixed-point resampler with these differences (all reproduced here):
 *   - weight precision: the normalised double weights are quantised to int16 with a precision p
 *     chosen per pass from the largest normalised weight w_max of that pass: p is the first value in
 *     0..21 for which (int)(0.5 + w_max * 2^(p+1)) >= 32768, else 22; each weight becomes
 *     (int)(w * 2^p + 0.5) (or - 0.5 when negative). Pillow always uses 22 bits in int32.
 *     Typical p: 15 when upscaling (w_max ~ 0.9), 16..22 when downscaling.
 *   - rounding: the sum starts at 2^(p-1), is shifted right (arithmetic) by p and saturated to
 *     0..255: Pillow's arithmetic with p in place of 22.
 *   - filter: the outer lobe is evaluated as ((a*x - 5a)*x + 8a)*x - 4a (Pillow: (((x-5)*x+8)*x-4)*a),
 *     in double, a = -0.5; the weights are otherwise computed as Pillow does (support 2*max(scale,1),
 *     centre (i+0.5)*scale, bounds rounded with (int)(x + 0.5), per-output normalisation).
 *   - same as Pillow: horizontal pass first, then vertical, through a uint8 intermediate; a pass whose
 *     size does not change is skipped; same size in both = copy (torchvision returns the input).
 * Measured bit-exact against torch 2.9.0 / torchvision 0.24.0 (AVX512 capability) on random images
 * of 48 size pairs (tools: tests/parity/test_image_processor.py covers the committed fixtures). */
#include <math.h>
#include <stdlib.h>

#include "image/resize_common.h"

static double aa_cubic(double x) {
    const double a = -0.5;
    if (x < 0) x = -x;
    if (x < 1.0) return ((a + 2) * x - (a + 3)) * x * x + 1;
    if (x < 2.0) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
    return 0.0;
}

static int tv_pass(int in_size, int out_size, clef_resample_pass *p, clef_err *err) {
    double scale = (double)in_size / (double)out_size;
    double support = scale >= 1.0 ? 2.0 * scale : 2.0;
    int max_k = (int)ceil(support) * 2 + 1;
    double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
    p->out_size = out_size;
    p->ksize = max_k;
    p->xmin = malloc(sizeof(int) * (size_t)out_size);
    p->xsize = malloc(sizeof(int) * (size_t)out_size);
    p->k = malloc(sizeof(int32_t) * (size_t)out_size * (size_t)max_k);
    double *w = malloc(sizeof(double) * (size_t)out_size * (size_t)max_k);
    if (!p->xmin || !p->xsize || !p->k || !w) {
        free(w);
        clef_resample_pass_free(p);
        return clef_err_set(err, CLEF_E_OOM, "out of memory resizing an image");
    }
    double wt_max = 0.0;
    for (int i = 0; i < out_size; i++) {
        double center = scale * (i + 0.5);
        int64_t xmin = (int64_t)(center - support + 0.5);
        if (xmin < 0) xmin = 0;
        int64_t xmax = (int64_t)(center + support + 0.5);
        if (xmax > in_size) xmax = in_size;
        int64_t xsize = xmax - xmin;
        if (xsize < 0) xsize = 0;
        if (xsize > max_k) xsize = max_k;
        double *wi = w + (size_t)i * max_k, total = 0.0, mi = 0.0;
        int64_t j = 0;
        for (; j < xsize; j++) {
            double v = aa_cubic(((double)(j + xmin) - center + 0.5) * invscale);
            wi[j] = v;
            total += v;
        }
        if (total != 0.0)
            for (j = 0; j < xsize; j++) {
                wi[j] /= total;
                if (wi[j] > mi) mi = wi[j];
            }
        for (j = xsize; j < max_k; j++) wi[j] = 0.0;
        if (mi > wt_max) wt_max = mi;
        p->xmin[i] = (int)xmin;
        p->xsize[i] = (int)xsize;
    }
    int prec;
    for (prec = 0; prec < 22; prec++) {
        int next = (int)(0.5 + wt_max * (double)(1 << (prec + 1)));
        if (next >= (1 << 15)) break;
    }
    p->precision = prec;
    for (size_t t = 0; t < (size_t)out_size * (size_t)max_k; t++) {
        double v = w[t] * (double)(1 << prec);
        p->k[t] = (int16_t)(v < 0 ? (int)(-0.5 + v) : (int)(0.5 + v));
    }
    free(w);
    if (prec < 1) {
        clef_resample_pass_free(p);
        return clef_err_set(err, CLEF_E_INTERNAL, "resize weights out of range");
    }
    return 0;
}

int clef_resize_torchvision(const clef_rgb *in, int ow, int oh, clef_rgb *out, clef_err *err) {
    clef_resample_pass ph = {0}, pv = {0};
    if (ow != in->w && tv_pass(in->w, ow, &ph, err)) return -1;
    if (oh != in->h && tv_pass(in->h, oh, &pv, err)) {
        clef_resample_pass_free(&ph);
        return -1;
    }
    int rc = clef_resample_run(in, ow, oh, &ph, &pv, out, err);
    clef_resample_pass_free(&ph);
    clef_resample_pass_free(&pv);
    return rc;
}
