#include "image/resize_common.h"

#include <stdlib.h>
#include <string.h>

void clef_resample_pass_free(clef_resample_pass *p) {
    free(p->xmin);
    free(p->xsize);
    free(p->k);
    memset(p, 0, sizeof *p);
}

static inline uint8_t clamp_shift(int64_t ss, int prec) {
    int64_t v = ss >> prec; /* arithmetic shift = floor, as both libraries do */
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

static void horizontal(const clef_rgb *in, clef_rgb *out, const clef_resample_pass *p) {
    const int64_t half = (int64_t)1 << (p->precision - 1);
    for (int y = 0; y < in->h; y++) {
        const uint8_t *src = in->px + (size_t)y * in->w * 3;
        uint8_t *dst = out->px + (size_t)y * out->w * 3;
        for (int x = 0; x < out->w; x++) {
            const int32_t *k = p->k + (size_t)x * p->ksize;
            const uint8_t *s = src + (size_t)p->xmin[x] * 3;
            int64_t s0 = half, s1 = half, s2 = half;
            for (int j = 0; j < p->xsize[x]; j++) {
                s0 += (int64_t)s[3 * j + 0] * k[j];
                s1 += (int64_t)s[3 * j + 1] * k[j];
                s2 += (int64_t)s[3 * j + 2] * k[j];
            }
            dst[3 * x + 0] = clamp_shift(s0, p->precision);
            dst[3 * x + 1] = clamp_shift(s1, p->precision);
            dst[3 * x + 2] = clamp_shift(s2, p->precision);
        }
    }
}

static int vertical(const clef_rgb *in, clef_rgb *out, const clef_resample_pass *p, clef_err *err) {
    const int64_t half = (int64_t)1 << (p->precision - 1);
    const size_t row = (size_t)in->w * 3;
    int64_t *acc = malloc(sizeof(int64_t) * row);
    if (!acc) return clef_err_set(err, CLEF_E_OOM, "out of memory resizing an image");
    for (int y = 0; y < out->h; y++) {
        const int32_t *k = p->k + (size_t)y * p->ksize;
        const uint8_t *base = in->px + (size_t)p->xmin[y] * row;
        uint8_t *dst = out->px + (size_t)y * row;
        for (size_t i = 0; i < row; i++) acc[i] = half;
        for (int j = 0; j < p->xsize[y]; j++) {
            const uint8_t *src = base + (size_t)j * row;
            const int64_t kj = k[j];
            for (size_t i = 0; i < row; i++) acc[i] += (int64_t)src[i] * kj;
        }
        for (size_t i = 0; i < row; i++) dst[i] = clamp_shift(acc[i], p->precision);
    }
    free(acc);
    return 0;
}

int clef_resample_run(const clef_rgb *in, int ow, int oh, const clef_resample_pass *ph, const clef_resample_pass *pv,
                      clef_rgb *out, clef_err *err) {
    memset(out, 0, sizeof *out);
    int need_h = ow != in->w, need_v = oh != in->h;
    if (!need_h && !need_v) {
        if (clef_rgb_alloc(out, in->w, in->h, err)) return -1;
        memcpy(out->px, in->px, (size_t)in->w * in->h * 3);
        return 0;
    }
    clef_rgb tmp = {0};
    const clef_rgb *src = in;
    if (need_h) {
        clef_rgb *dst = need_v ? &tmp : out;
        if (clef_rgb_alloc(dst, ow, in->h, err)) return -1;
        horizontal(in, dst, ph);
        src = dst;
    }
    if (need_v) {
        if (clef_rgb_alloc(out, ow, oh, err)) {
            clef_rgb_free(&tmp);
            return -1;
        }
        if (vertical(src, out, pv, err)) {
            clef_rgb_free(&tmp);
            clef_rgb_free(out);
            return -1;
        }
    }
    clef_rgb_free(&tmp);
    return 0;
}
