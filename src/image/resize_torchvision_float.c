/* torchvision resize(uint16 CHW, [oh, ow], BICUBIC, antialias=True) as the reference runs it on a
 * 16-bit PNG at the native grid. torchvision has no uint16 kernel: it casts the image to float32, calls
 * interpolate(mode="bicubic", antialias=True, align_corners=False) and casts the result back with
 * .to(uint16): no rounding and no clamping (its round/clamp list covers uint8 and the signed types,
 * not uint16), so the float is truncated to int32 and wrapped to 16 bits (-3.7 -> 65533,
 * 65536.2 -> 0; measured).
 *
 * Hand-written because no library computes ATen's float resampler to the bit: Pillow and libvips
 * differ in the weights and the sums, and ATen's own result depends on how its CPU kernel was
 * compiled. What the reference runs (torch 2.9.0 wheel, AVX2/AVX512 capability; read from the
 * wheel's machine code and confirmed bit-exact on 417 random size pairs, upscale and downscale, plus
 * every 16-bit fixture):
 *   - scale = (float)in / out; support = 2 * scale when scale >= 1, else 2; taps k = 2*ceil(support)+1;
 *     invscale = 1/scale (float) when scale >= 1, else 1.
 *   - per output i: centre = (float)((i + 0.5) * scale) in double; xmin = max(0, (int64)((double)
 *     (centre - support) + 0.5)); xmax = min(in, (int64)((double)(centre + support) + 0.5)); the
 *     float weight of tap j is filter((float)(((double)((float)(xmin + j) - centre) + 0.5) * invscale)),
 *     summed in float in tap order, each divided by the sum when it is not 0.
 *   - the filter (Keys, a = -0.5) with the FMA contraction the compiler chose: |x| < 1:
 *     fma(x * fma(1.5, x, -2.5), x, 1); |x| < 2: fma(fma(fma(-0.5, x, 2.5), x, -4), x, 2); else 0.
 *   - each output value: out = s[0] * w[0] (rounded); then, when there are more than 4 taps, the
 *     taps 1.. in groups of four as out = out + (s * w rounded) (the compiler's 4-wide product, added
 *     in order), and the remaining taps (or all of 1.. when there are at most 4) as out = fma(s, w, out).
 *   - horizontal pass first, into a float32 intermediate, then vertical; a pass whose size does not
 *     change is skipped; no pass at all returns the input.
 * This file is compiled with -std=c11, which turns floating-point contraction off: every fma here is
 * explicit and every other product is rounded, on any compiler. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "image/image_internal.h"

typedef struct {
    int k;          /* weights stored per output index */
    int *xmin;      /* [out] first input index */
    int *xsize;     /* [out] taps used, 1..k */
    float *w;       /* [out * k] */
} fpass;

static void fpass_free(fpass *p) {
    free(p->xmin);
    free(p->xsize);
    free(p->w);
    memset(p, 0, sizeof *p);
}

static float keys_cubic(float x) {
    x = fabsf(x);
    if (x < 1.0f) {
        float t = fmaf(1.5f, x, -2.5f);
        float u = t * x;
        return fmaf(u, x, 1.0f);
    }
    if (x < 2.0f) {
        float t = fmaf(-0.5f, x, 2.5f);
        t = fmaf(t, x, -4.0f);
        return fmaf(t, x, 2.0f);
    }
    return 0.0f;
}

static int fpass_make(int in, int out, fpass *p, clef_err *err) {
    memset(p, 0, sizeof *p);
    const float scale = (float)in / (float)out;
    const float support = scale >= 1.0f ? 2.0f * scale : 2.0f;
    const float invscale = scale >= 1.0f ? 1.0f / scale : 1.0f;
    const float kf = ceilf(support) * 2.0f + 1.0f;
    if (!(kf >= 1.0f && kf <= (float)in * 4.0f + 8.0f && kf < 1.0e8f))
        return clef_err_set(err, CLEF_E_INTERNAL, "resize: %d -> %d has no usable filter", in, out);
    const int k = (int)kf;
    p->k = k;
    p->xmin = malloc(sizeof(int) * (size_t)out);
    p->xsize = malloc(sizeof(int) * (size_t)out);
    if ((size_t)out > SIZE_MAX / sizeof(float) / (size_t)k) {
        fpass_free(p);
        return clef_err_set(err, CLEF_E_LIMIT, "resize weights too large");
    }
    p->w = calloc((size_t)out * (size_t)k, sizeof(float));
    if (!p->xmin || !p->xsize || !p->w) {
        fpass_free(p);
        return clef_err_set(err, CLEF_E_OOM, "out of memory resizing an image");
    }
    for (int i = 0; i < out; i++) {
        const float centre = (float)(((double)i + 0.5) * (double)scale);
        int64_t xmin = (int64_t)((double)(centre - support) + 0.5);
        if (xmin < 0) xmin = 0;
        int64_t xmax = (int64_t)((double)(centre + support) + 0.5);
        if (xmax > in) xmax = in;
        int64_t xs = xmax - xmin;
        if (xs > k) xs = k;
        if (xs < 1 || xmin + xs > in) { /* cannot happen for in, out >= 1; never read outside */
            fpass_free(p);
            return clef_err_set(err, CLEF_E_INTERNAL, "resize: empty window at %d (%d -> %d)", i, in, out);
        }
        float *w = p->w + (size_t)i * (size_t)k, total = 0.0f;
        for (int64_t j = 0; j < xs; j++) {
            const float d = (float)(xmin + j) - centre;
            w[j] = keys_cubic((float)(((double)d + 0.5) * (double)invscale));
            total = total + w[j];
        }
        if (total != 0.0f)
            for (int64_t j = 0; j < xs; j++) w[j] = w[j] / total;
        p->xmin[i] = (int)xmin;
        p->xsize[i] = (int)xs;
    }
    return 0;
}

/* One output value over n taps (see the header for the order). T is the sample type. */
#define DEFINE_DOT(name, T)                                                                   \
    static float name(const T *s, size_t stride, const float *w, int n) {                    \
        float out = (float)s[0] * w[0];                                                       \
        int j = 1;                                                                            \
        if (n > 4)                                                                            \
            for (int blocks = (n - 1) / 4; blocks > 0; blocks--)                              \
                for (int q = 0; q < 4; q++, j++) {                                            \
                    const float prod = (float)s[(size_t)j * stride] * w[j];                   \
                    out = out + prod;                                                         \
                }                                                                             \
        for (; j < n; j++) out = fmaf((float)s[(size_t)j * stride], w[j], out);               \
        return out;                                                                           \
    }
DEFINE_DOT(dot_u16, uint16_t)
DEFINE_DOT(dot_f32, float)

/* .to(uint16) of a float: truncation to int32 (the x86 conversion, which gives INT32_MIN out of range),
 * then the low 16 bits. */
static uint16_t to_u16(float x) {
    int32_t v = (x > -2147483648.0f && x < 2147483648.0f) ? (int32_t)x : INT32_MIN;
    return (uint16_t)(uint32_t)v;
}

/* Horizontal pass of one interleaved RGB row into ow float pixels. */
static void row_h_u16(const uint16_t *src, const fpass *p, int ow, float *dst) {
    for (int x = 0; x < ow; x++) {
        const float *w = p->w + (size_t)x * (size_t)p->k;
        const uint16_t *s = src + (size_t)p->xmin[x] * 3;
        for (int c = 0; c < 3; c++) dst[(size_t)x * 3 + (size_t)c] = dot_u16(s + c, 3, w, p->xsize[x]);
    }
}

int clef_resize_torchvision_u16(const clef_rgb *in, int ow, int oh, clef_rgb *out, clef_err *err) {
    memset(out, 0, sizeof *out);
    if (!in->px16 || ow <= 0 || oh <= 0)
        return clef_err_set(err, CLEF_E_INTERNAL, "resize: not a 16-bit image or empty size");
    const int need_h = ow != in->w, need_v = oh != in->h;
    if (clef_rgb_alloc16(out, ow, oh, err)) return -1;
    const size_t in_row = (size_t)in->w * 3, out_row = (size_t)ow * 3;
    if (!need_h && !need_v) { /* torchvision returns the image unchanged */
        memcpy(out->px16, in->px16, sizeof(uint16_t) * in_row * (size_t)in->h);
        return 0;
    }
    fpass ph = {0}, pv = {0};
    float *ring = NULL, *col = NULL;
    int rc = -1;
    if (need_h && fpass_make(in->w, ow, &ph, err)) goto done;
    if (need_v && fpass_make(in->h, oh, &pv, err)) goto done;
    if (!need_v) { /* horizontal only: cast each row as it comes */
        ring = malloc(sizeof(float) * out_row);
        if (!ring) goto oom;
        for (int y = 0; y < in->h; y++) {
            row_h_u16(in->px16 + (size_t)y * in_row, &ph, ow, ring);
            uint16_t *d = out->px16 + (size_t)y * out_row;
            for (size_t i = 0; i < out_row; i++) d[i] = to_u16(ring[i]);
        }
        rc = 0;
        goto done;
    }
    if (!need_h) { /* vertical only, straight from the uint16 rows */
        for (int y = 0; y < oh; y++) {
            const float *w = pv.w + (size_t)y * (size_t)pv.k;
            const uint16_t *base = in->px16 + (size_t)pv.xmin[y] * in_row;
            uint16_t *d = out->px16 + (size_t)y * out_row;
            for (size_t i = 0; i < out_row; i++) d[i] = to_u16(dot_u16(base + i, in_row, w, pv.xsize[y]));
        }
        rc = 0;
        goto done;
    }
    /* Both passes. The intermediate rows an output row needs form a window [xmin, xmin + xsize) that
     * only moves down, at most pv.k rows long: keep those rows in a ring of pv.k rows instead of the
     * whole ow x in->h float image. */
    if ((size_t)pv.k > SIZE_MAX / sizeof(float) / out_row) goto oom;
    ring = malloc(sizeof(float) * out_row * (size_t)pv.k);
    col = malloc(sizeof(float) * (size_t)pv.k);
    if (!ring || !col) goto oom;
    int next = 0; /* first intermediate row not yet computed */
    for (int y = 0; y < oh; y++) {
        const int lo = pv.xmin[y], n = pv.xsize[y];
        for (; next < lo + n; next++)
            if (next >= lo) row_h_u16(in->px16 + (size_t)next * in_row, &ph, ow, ring + (size_t)(next % pv.k) * out_row);
        const float *w = pv.w + (size_t)y * (size_t)pv.k;
        uint16_t *d = out->px16 + (size_t)y * out_row;
        for (size_t i = 0; i < out_row; i++) {
            for (int j = 0; j < n; j++) col[j] = ring[(size_t)((lo + j) % pv.k) * out_row + i];
            d[i] = to_u16(dot_f32(col, 1, w, n));
        }
    }
    rc = 0;
    goto done;
oom:
    clef_err_set(err, CLEF_E_OOM, "out of memory resizing an image");
done:
    free(ring);
    free(col);
    fpass_free(&ph);
    fpass_free(&pv);
    if (rc) clef_rgb_free(out);
    return rc;
}
