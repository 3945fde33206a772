/* torchvision.transforms.v2.functional.resize(uint8 CHW, [oh, ow], BICUBIC, antialias=True) on x86:
 * ATen's uint8 antialiased path (upsample_avx_bilinear_bicubic_uint8). It is Pillow's separable
 * fixed-point resampler with these differences (all reproduced here, see docs/image.md):
 *   - the filter's outer lobe is evaluated as ((a*x - 5a)*x + 8a)*x - 4a (Pillow: (((x-5)*x+8)*x-4)*a),
 *     both in double, a = -0.5;
 *   - the normalised double weights are quantised to int16 with a precision chosen per pass: the
 *     largest p < 22 such that round(w_max * 2^(p+1)) < 2^15 fails first, i.e. the loop stops at the
 *     first p where (int)(0.5 + w_max*2^(p+1)) >= 32768 (w_max = the largest normalised weight of the
 *     pass); weights = (int)(w*2^p ± 0.5) (Pillow: always 22 bits, int32 weights);
 *   - the sum starts at 2^(p-1), is shifted right by p and saturated to 0..255 (as Pillow with p = 22).
 * Pass order (horizontal then vertical) and skipping a pass whose size is unchanged are the same. */
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
