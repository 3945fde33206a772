/* AVX-512 loops for the CPU backend's elementwise ops, norms and conv1d (see cpu_simd.h; their
 * AVX2 + FMA twins, the same bits, are in cpu_simd_avx2.c). */
/* No contraction: a product followed by a sum must round twice, as in the scalar loops; the FMAs
 * below are written out where one rounding is what the scalar code (or glibc's expf) does. */
#pragma GCC optimize("fp-contract=off")
#include "compute/cpu/cpu_simd.h"

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/cpu_features.h"

int clef_simd_ok(void) {
    return clef_cpu_has(CLEF_CPU_AVX512F | CLEF_CPU_AVX512VL | CLEF_CPU_AVX512DQ | CLEF_CPU_AVX2 |
                        CLEF_CPU_FMA);
}

#define T512 __attribute__((target("avx512f,avx512vl,avx512dq,avx2,fma")))

/* ---------------------------------------------------------------- expf
 * glibc's expf (sysdeps/ieee754/flt-32/e_expf.c, since 2.28) as its FMA build runs it:
 *   kd = fma(InvLn2N, x, Shift); ki = bits(kd); kd -= Shift; r = fma(InvLn2N, x, -kd);
 *   s = bits^-1(T[ki % 32] + (ki << 47));
 *   y = fma(fma(C0, r, C1), r*r, fma(C2, r, 1)) * s; return (float)y;
 * with its table and constants (__exp2f_data, N = 32). Inputs with |x| >= 88 or NaN take
 * libm's own expf (its overflow / underflow / errno path). */
static const uint64_t EXP2F_T[32] = {
    0x3ff0000000000000ull, 0x3fefd9b0d3158574ull, 0x3fefb5586cf9890full, 0x3fef9301d0125b51ull,
    0x3fef72b83c7d517bull, 0x3fef54873168b9aaull, 0x3fef387a6e756238ull, 0x3fef1e9df51fdee1ull,
    0x3fef06fe0a31b715ull, 0x3feef1a7373aa9cbull, 0x3feedea64c123422ull, 0x3feece086061892dull,
    0x3feebfdad5362a27ull, 0x3feeb42b569d4f82ull, 0x3feeab07dd485429ull, 0x3feea47eb03a5585ull,
    0x3feea09e667f3bcdull, 0x3fee9f75e8ec5f74ull, 0x3feea11473eb0187ull, 0x3feea589994cce13ull,
    0x3feeace5422aa0dbull, 0x3feeb737b0cdc5e5ull, 0x3feec49182a3f090ull, 0x3feed503b23e255dull,
    0x3feee89f995ad3adull, 0x3feeff76f2fb5e47ull, 0x3fef199bdd85529cull, 0x3fef3720dcef9069ull,
    0x3fef5818dcfba487ull, 0x3fef7c97337b9b5full, 0x3fefa4afa2a490daull, 0x3fefd0765b6e4540ull,
};
#define INVLN2N 0x1.71547652b82fep+5
#define SHIFT 0x1.8p+52
#define C0 0x1.c6af84b912394p-20
#define C1 0x1.ebfce50fac4f3p-13
#define C2 0x1.62e42ff0c52d6p-6

T512 static inline __m256 vexp8(__m256 x) {
    const __m512d inv = _mm512_set1_pd(INVLN2N), sh = _mm512_set1_pd(SHIFT);
    __m512d xd = _mm512_cvtps_pd(x);
    __m512d kd = _mm512_fmadd_pd(inv, xd, sh);
    __m512i ki = _mm512_castpd_si512(kd);
    kd = _mm512_sub_pd(kd, sh);
    __m512d r = _mm512_fmsub_pd(inv, xd, kd);
    __m512i idx = _mm512_and_si512(ki, _mm512_set1_epi64(31));
    __m512i lo = _mm512_permutex2var_epi64(_mm512_loadu_si512(EXP2F_T), idx, _mm512_loadu_si512(EXP2F_T + 8));
    __m512i hi = _mm512_permutex2var_epi64(_mm512_loadu_si512(EXP2F_T + 16), idx, _mm512_loadu_si512(EXP2F_T + 24));
    __m512i t = _mm512_mask_blend_epi64(_mm512_test_epi64_mask(idx, _mm512_set1_epi64(16)), lo, hi);
    __m512d s = _mm512_castsi512_pd(_mm512_add_epi64(t, _mm512_slli_epi64(ki, 47)));
    __m512d z = _mm512_fmadd_pd(r, _mm512_set1_pd(C0), _mm512_set1_pd(C1));
    __m512d r2 = _mm512_mul_pd(r, r);
    __m512d y = _mm512_fmadd_pd(r, _mm512_set1_pd(C2), _mm512_set1_pd(1.0));
    y = _mm512_fmadd_pd(z, r2, y);
    return _mm512_cvtpd_ps(_mm512_mul_pd(y, s));
}

const uint64_t *const clef_exp2f_table = EXP2F_T;

T512 static inline __m512 vexp16(__m512 x) {
    __m256 lo = vexp8(_mm512_castps512_ps256(x)), hi = vexp8(_mm512_extractf32x8_ps(x, 1));
    __m512 y = _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
    /* top12(x) & 0x7ff >= top12(88.0f): glibc's special-case test */
    __m512i top = _mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(x), 20), _mm512_set1_epi32(0x7ff));
    __mmask16 sp = _mm512_cmpgt_epi32_mask(top, _mm512_set1_epi32(0x42a));
    if (sp) {
        float xs[16], ys[16];
        _mm512_storeu_ps(xs, x);
        _mm512_storeu_ps(ys, y);
        for (int j = 0; j < 16; j++)
            if (sp >> j & 1) ys[j] = expf(xs[j]);
        y = _mm512_loadu_ps(ys);
    }
    return y;
}

static inline __mmask16 tailmask(size_t left) { return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1); }

T512 static inline __m512 vneg(__m512 x) { return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN))); }
/* x / (1 + expf(-x)), as siluf_ */
T512 static inline __m512 vsilu(__m512 x) { return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), vexp16(vneg(x)))); }

T512 void clef_simd_expf(float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 m = tailmask(n - i);
        _mm512_mask_storeu_ps(y + i, m, vexp16(_mm512_maskz_loadu_ps(m, x + i)));
    }
}

/* ---------------------------------------------------------------- gelu_tanh
 * Why our own exp rather than libm's tanh: the vision tower applies it to every MLP activation
 * (4,304 x patches per block, 27 blocks: ~1e9 calls for a 1080p image), where the libm calls were
 * ~6% of such a request on real4 (2 blocks; more on the 27-block tower). The scalar and vector forms run the same operations in the same order
 * (products and sums rounded separately, this file compiles without contraction). exp(a) for
 * a in [-708, 709]: k = round(a / ln 2), r = a - k ln 2 (two-part ln 2: k ln2_hi is exact),
 * Taylor to degree 13 on |r| <= 0.35 (truncation < 1e-17), times 2^k. Outside: 0 or +inf. */
#define GT_C 0.79788456080286535588 /* sqrt(2 / pi) */
#define GT_MAGIC 6755399441055744.0 /* 1.5 * 2^52: adding it rounds to an integer */
#define GT_LOG2E 1.4426950408889634
#define GT_LN2HI 0.693147180559890330187
#define GT_LN2LO 5.4979230187083711552e-14
static const double GT_P[14] = {1.0 / 6227020800.0, 1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0,
                                1.0 / 362880.0, 1.0 / 40320.0, 1.0 / 5040.0, 1.0 / 720.0, 1.0 / 120.0,
                                1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0};

const double *const clef_gelu_poly = GT_P;

float clef_gelu_tanh1(float xf) {
    double x = xf;
    double a = -2.0 * (GT_C * (x + 0.044715 * x * x * x));
    double e;
    if (a > 709.0) e = INFINITY;
    else if (a < -708.0) e = 0.0;
    else if (a != a) e = a;
    else {
        double t = a * GT_LOG2E + GT_MAGIC, k = t - GT_MAGIC;
        double r = a - k * GT_LN2HI;
        r = r - k * GT_LN2LO;
        double p = GT_P[0];
        for (int i = 1; i < 14; i++) p = p * r + GT_P[i];
        int64_t ki;
        memcpy(&ki, &t, sizeof ki);
        uint64_t bits = (uint64_t)(ki - 0x4338000000000000LL + 1023) << 52;
        double sc;
        memcpy(&sc, &bits, sizeof sc);
        e = p * sc;
    }
    return (float)(x / (1.0 + e));
}

T512 void clef_simd_gelu_tanh(float *xs, size_t n) {
    const __m512d c = _mm512_set1_pd(GT_C), c3 = _mm512_set1_pd(0.044715), m2 = _mm512_set1_pd(-2.0);
    const __m512d hi = _mm512_set1_pd(709.0), lo = _mm512_set1_pd(-708.0), one = _mm512_set1_pd(1.0);
    const __m512d magic = _mm512_set1_pd(GT_MAGIC), log2e = _mm512_set1_pd(GT_LOG2E);
    const __m512d ln2hi = _mm512_set1_pd(GT_LN2HI), ln2lo = _mm512_set1_pd(GT_LN2LO);
    size_t i = 0;
    for (; i < n; i += 8) {
        __mmask8 m = n - i >= 8 ? (__mmask8)0xff : (__mmask8)((1u << (n - i)) - 1u);
        __m512d x = _mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, xs + i));
        __m512d x3 = _mm512_mul_pd(_mm512_mul_pd(_mm512_mul_pd(c3, x), x), x);
        __m512d a = _mm512_mul_pd(m2, _mm512_mul_pd(c, _mm512_add_pd(x, x3)));
        __mmask8 big = _mm512_cmp_pd_mask(a, hi, _CMP_GT_OQ), small = _mm512_cmp_pd_mask(a, lo, _CMP_LT_OQ);
        __mmask8 nan = _mm512_cmp_pd_mask(a, a, _CMP_UNORD_Q);
        __m512d ac = _mm512_mask_blend_pd(big | small | nan, a, _mm512_setzero_pd()); /* in range for the bits */
        __m512d t = _mm512_add_pd(_mm512_mul_pd(ac, log2e), magic), k = _mm512_sub_pd(t, magic);
        __m512d r = _mm512_sub_pd(ac, _mm512_mul_pd(k, ln2hi));
        r = _mm512_sub_pd(r, _mm512_mul_pd(k, ln2lo));
        __m512d p = _mm512_set1_pd(GT_P[0]);
        for (int j = 1; j < 14; j++) p = _mm512_add_pd(_mm512_mul_pd(p, r), _mm512_set1_pd(GT_P[j]));
        __m512i bits = _mm512_slli_epi64(_mm512_add_epi64(_mm512_sub_epi64(_mm512_castpd_si512(t),
                                                                           _mm512_set1_epi64(0x4338000000000000LL)),
                                                          _mm512_set1_epi64(1023)), 52);
        __m512d e = _mm512_mul_pd(p, _mm512_castsi512_pd(bits));
        e = _mm512_mask_blend_pd(big, e, _mm512_set1_pd(INFINITY));
        e = _mm512_mask_blend_pd(small, e, _mm512_setzero_pd());
        e = _mm512_mask_blend_pd(nan, e, a);
        __m256 y = _mm512_cvtpd_ps(_mm512_div_pd(x, _mm512_add_pd(one, e)));
        _mm256_mask_storeu_ps(xs + i, m, y);
    }
}

T512 void clef_simd_silu_mul(float *y, const float *g, const float *u, size_t n) {
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 m = tailmask(n - i);
        __m512 gv = _mm512_maskz_loadu_ps(m, g + i), uv = _mm512_maskz_loadu_ps(m, u + i);
        _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(vsilu(gv), uv));
    }
}

T512 void clef_simd_sigmoid_mul(float *x, const float *g, size_t n) {
    const __m512 one = _mm512_set1_ps(1.0f);
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 m = tailmask(n - i);
        __m512 gv = _mm512_maskz_loadu_ps(m, g + i), xv = _mm512_maskz_loadu_ps(m, x + i);
        __m512 sg = _mm512_div_ps(one, _mm512_add_ps(one, vexp16(vneg(gv))));
        _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(xv, sg));
    }
}

T512 void clef_simd_add(float *y, const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 m = tailmask(n - i);
        _mm512_mask_storeu_ps(y + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i)));
    }
}

/* ---------------------------------------------------------------- norms */

T512 void clef_simd_sumsq8(double *ss, const float *x, size_t ld, size_t D) {
    const __m256i idx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32((int)ld));
    __m512d acc = _mm512_setzero_pd();
    /* (double)x * x is exact, so the FMA rounds once, as `ss += (double)x * x` does */
    for (size_t d = 0; d < D; d++) {
        __m512d v = _mm512_cvtps_pd(_mm256_i32gather_ps(x + d, idx, 4));
        acc = _mm512_fmadd_pd(v, v, acc);
    }
    _mm512_storeu_pd(ss, acc);
}

T512 void clef_simd_rms_scale(float *y, const float *x, float inv, const float *w, int offset, size_t D) {
    const __m512 iv = _mm512_set1_ps(inv), one = _mm512_set1_ps(1.0f);
    for (size_t d = 0; d < D; d += 16) {
        __mmask16 m = tailmask(D - d);
        __m512 wv = _mm512_maskz_loadu_ps(m, w + d);
        if (offset) wv = _mm512_add_ps(one, wv);
        _mm512_mask_storeu_ps(y + d, m, _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + d), iv), wv));
    }
}

T512 void clef_simd_l2_scale(float *y, const float *x, float inv, float scale, size_t D) {
    const __m512 iv = _mm512_set1_ps(inv), sv = _mm512_set1_ps(scale);
    for (size_t d = 0; d < D; d += 16) {
        __mmask16 m = tailmask(D - d);
        __m512 t = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + d), iv);
        if (scale != 1.0f) t = _mm512_mul_ps(t, sv);
        _mm512_mask_storeu_ps(y + d, m, t);
    }
}

T512 void clef_simd_gated_scale(float *y, const float *x, const float *z, float inv, const float *w, size_t D) {
    const __m512 iv = _mm512_set1_ps(inv);
    for (size_t d = 0; d < D; d += 16) {
        __mmask16 m = tailmask(D - d);
        __m512 nv = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, w + d), _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + d), iv));
        _mm512_mask_storeu_ps(y + d, m, _mm512_mul_ps(nv, vsilu(_mm512_maskz_loadu_ps(m, z + d))));
    }
}

T512 void clef_simd_meanvar8(double *mean, double *var, const float *x, size_t ld, size_t D) {
    const __m256i idx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32((int)ld));
    __m512d s = _mm512_setzero_pd();
    for (size_t d = 0; d < D; d++) s = _mm512_add_pd(s, _mm512_cvtps_pd(_mm256_i32gather_ps(x + d, idx, 4)));
    const __m512d m = _mm512_div_pd(s, _mm512_set1_pd((double)D));
    __m512d v = _mm512_setzero_pd();
    for (size_t d = 0; d < D; d++) {
        __m512d t = _mm512_sub_pd(_mm512_cvtps_pd(_mm256_i32gather_ps(x + d, idx, 4)), m);
        v = _mm512_add_pd(v, _mm512_mul_pd(t, t));
    }
    _mm512_storeu_pd(mean, m);
    _mm512_storeu_pd(var, v);
}

T512 void clef_simd_ln_scale(float *y, const float *x, double mean, double rstd, const float *w, const float *b, size_t D) {
    const __m512d mv = _mm512_set1_pd(mean), rv = _mm512_set1_pd(rstd);
    for (size_t d = 0; d < D; d += 8) {
        __mmask8 m = D - d >= 8 ? (__mmask8)0xff : (__mmask8)((1u << (D - d)) - 1);
        __m512d xv = _mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, x + d));
        __m512d wv = _mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, w + d)), bv = _mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, b + d));
        __m512d t = _mm512_add_pd(_mm512_mul_pd(_mm512_mul_pd(_mm512_sub_pd(xv, mv), rv), wv), bv);
        _mm256_mask_storeu_ps(y + d, m, _mm512_cvtpd_ps(t));
    }
}

/* ---------------------------------------------------------------- conv1d + SiLU */

T512 void clef_simd_conv_silu_row(float *y, const float *x, size_t t, size_t C, const float *wt, size_t K, size_t k0) {
    for (size_t c = 0; c < C; c += 16) {
        __mmask16 m = tailmask(C - c);
        __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
        for (size_t k = k0; k < K; k++) {
            __m512 xv = _mm512_maskz_loadu_ps(m, x + (t + k + 1 - K) * C + c);
            __m512 wv = _mm512_maskz_loadu_ps(m, wt + k * C + c);
            /* exact products, one rounding per tap: `s += (double)w * x` */
            a0 = _mm512_fmadd_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(wv)), _mm512_cvtps_pd(_mm512_castps512_ps256(xv)), a0);
            a1 = _mm512_fmadd_pd(_mm512_cvtps_pd(_mm512_extractf32x8_ps(wv, 1)), _mm512_cvtps_pd(_mm512_extractf32x8_ps(xv, 1)), a1);
        }
        __m512 s = _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(a0)), _mm512_cvtpd_ps(a1), 1);
        _mm512_mask_storeu_ps(y + c, m, vsilu(s));
    }
}

const clef_simd_loops clef_simd_loops_avx512 = {
    clef_simd_expf, clef_simd_silu_mul, clef_simd_sigmoid_mul, clef_simd_gelu_tanh, clef_simd_add,
    clef_simd_sumsq8, clef_simd_rms_scale, clef_simd_l2_scale, clef_simd_gated_scale,
    clef_simd_meanvar8, clef_simd_ln_scale, clef_simd_conv_silu_row,
};

const clef_simd_loops *clef_simd_loops_here(void) {
    return clef_simd_ok() ? &clef_simd_loops_avx512 : clef_simd2_ok() ? &clef_simd_loops_avx2 : NULL;
}
