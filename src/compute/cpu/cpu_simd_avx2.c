/* AVX2 + FMA twins of cpu_simd.c's AVX-512 loops, for CPUs without AVX-512 (see cpu_simd.h).
 *
 * Each computes, per element, the same fp32 / double operations in the same order as the AVX-512
 * loop and the scalar loop it stands in for (8 floats or 4 doubles a register instead of 16 or 8;
 * lane-wise operations round the same per lane), with the same glibc expf algorithm and table
 * (EXP2F_T, cpu_simd.c) and the same double exp for gelu_tanh. So the three give the same bits;
 * tests/unit/test_simd.c checks both vector sets against the scalar expressions. Tails use
 * maskload / maskstore (masked lanes read as 0, as the AVX-512 maskz loads). */
/* No contraction: a product followed by a sum must round twice, as in the scalar loops; the FMAs
 * below are written out where one rounding is what the scalar code (or glibc's expf) does. */
#pragma GCC optimize("fp-contract=off")
#include "compute/cpu/cpu_simd.h"

#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "base/cpu_features.h"

int clef_simd2_ok(void) { return clef_cpu_has(CLEF_CPU_AVX2 | CLEF_CPU_FMA); }

#define T256 __attribute__((target("avx2,fma")))

/* lanes [0, left) of 8 (all when left >= 8) */
T256 static inline __m256i mask8(size_t left) {
    int l = left >= 8 ? 8 : (int)left;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(l), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
/* ---------------------------------------------------------------- expf (cpu_simd.c's vexp8) */

#define INVLN2N 0x1.71547652b82fep+5
#define SHIFT 0x1.8p+52
#define C0 0x1.c6af84b912394p-20
#define C1 0x1.ebfce50fac4f3p-13
#define C2 0x1.62e42ff0c52d6p-6

/* 4 lanes of glibc's expf core, in double (cpu_simd.c: the formula) */
T256 static inline __m128 vexp4(__m128 x) {
    const __m256d inv = _mm256_set1_pd(INVLN2N), sh = _mm256_set1_pd(SHIFT);
    __m256d xd = _mm256_cvtps_pd(x);
    __m256d kd = _mm256_fmadd_pd(inv, xd, sh);
    __m256i ki = _mm256_castpd_si256(kd);
    kd = _mm256_sub_pd(kd, sh);
    __m256d r = _mm256_fmsub_pd(inv, xd, kd);
    __m256i idx = _mm256_and_si256(ki, _mm256_set1_epi64x(31));
    __m256i t = _mm256_i64gather_epi64((const long long *)clef_exp2f_table, idx, 8);
    __m256d s = _mm256_castsi256_pd(_mm256_add_epi64(t, _mm256_slli_epi64(ki, 47)));
    __m256d z = _mm256_fmadd_pd(r, _mm256_set1_pd(C0), _mm256_set1_pd(C1));
    __m256d r2 = _mm256_mul_pd(r, r);
    __m256d y = _mm256_fmadd_pd(r, _mm256_set1_pd(C2), _mm256_set1_pd(1.0));
    y = _mm256_fmadd_pd(z, r2, y);
    return _mm256_cvtpd_ps(_mm256_mul_pd(y, s));
}

T256 static inline __m256 vexp8(__m256 x) {
    __m256 y = _mm256_set_m128(vexp4(_mm256_extractf128_ps(x, 1)), vexp4(_mm256_castps256_ps128(x)));
    /* top12(x) & 0x7ff >= top12(88.0f): glibc's special-case test */
    __m256i top = _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(x), 20), _mm256_set1_epi32(0x7ff));
    int sp = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(top, _mm256_set1_epi32(0x42a))));
    if (sp) {
        float xs[8], ys[8];
        _mm256_storeu_ps(xs, x);
        _mm256_storeu_ps(ys, y);
        for (int j = 0; j < 8; j++)
            if (sp >> j & 1) ys[j] = expf(xs[j]);
        y = _mm256_loadu_ps(ys);
    }
    return y;
}

T256 static inline __m256 vneg(__m256 x) { return _mm256_castsi256_ps(_mm256_xor_si256(_mm256_castps_si256(x), _mm256_set1_epi32(INT32_MIN))); }
/* x / (1 + expf(-x)), as siluf_ */
T256 static inline __m256 vsilu(__m256 x) { return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), vexp8(vneg(x)))); }

T256 void clef_simd2_expf(float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i += 8) {
        __m256i m = mask8(n - i);
        _mm256_maskstore_ps(y + i, m, vexp8(_mm256_maskload_ps(x + i, m)));
    }
}

/* ---------------------------------------------------------------- gelu_tanh (cpu_simd.c) */
#define GT_C 0.79788456080286535588
#define GT_MAGIC 6755399441055744.0
#define GT_LOG2E 1.4426950408889634
#define GT_LN2HI 0.693147180559890330187
#define GT_LN2LO 5.4979230187083711552e-14

T256 static inline __m128 gelu4(__m128 xf) {
    const __m256d c = _mm256_set1_pd(GT_C), c3 = _mm256_set1_pd(0.044715), m2 = _mm256_set1_pd(-2.0);
    const __m256d hi = _mm256_set1_pd(709.0), lo = _mm256_set1_pd(-708.0), one = _mm256_set1_pd(1.0);
    const __m256d magic = _mm256_set1_pd(GT_MAGIC), log2e = _mm256_set1_pd(GT_LOG2E);
    const __m256d ln2hi = _mm256_set1_pd(GT_LN2HI), ln2lo = _mm256_set1_pd(GT_LN2LO);
    __m256d x = _mm256_cvtps_pd(xf);
    __m256d x3 = _mm256_mul_pd(_mm256_mul_pd(_mm256_mul_pd(c3, x), x), x);
    __m256d a = _mm256_mul_pd(m2, _mm256_mul_pd(c, _mm256_add_pd(x, x3)));
    __m256d big = _mm256_cmp_pd(a, hi, _CMP_GT_OQ), small = _mm256_cmp_pd(a, lo, _CMP_LT_OQ);
    __m256d nan = _mm256_cmp_pd(a, a, _CMP_UNORD_Q);
    __m256d out = _mm256_or_pd(_mm256_or_pd(big, small), nan);
    __m256d ac = _mm256_blendv_pd(a, _mm256_setzero_pd(), out); /* in range for the bits */
    __m256d t = _mm256_add_pd(_mm256_mul_pd(ac, log2e), magic), k = _mm256_sub_pd(t, magic);
    __m256d r = _mm256_sub_pd(ac, _mm256_mul_pd(k, ln2hi));
    r = _mm256_sub_pd(r, _mm256_mul_pd(k, ln2lo));
    __m256d p = _mm256_set1_pd(clef_gelu_poly[0]);
    for (int j = 1; j < 14; j++) p = _mm256_add_pd(_mm256_mul_pd(p, r), _mm256_set1_pd(clef_gelu_poly[j]));
    __m256i bits = _mm256_slli_epi64(_mm256_add_epi64(_mm256_sub_epi64(_mm256_castpd_si256(t),
                                                                       _mm256_set1_epi64x(0x4338000000000000LL)),
                                                      _mm256_set1_epi64x(1023)), 52);
    __m256d e = _mm256_mul_pd(p, _mm256_castsi256_pd(bits));
    e = _mm256_blendv_pd(e, _mm256_set1_pd(INFINITY), big);
    e = _mm256_blendv_pd(e, _mm256_setzero_pd(), small);
    e = _mm256_blendv_pd(e, a, nan);
    return _mm256_cvtpd_ps(_mm256_div_pd(x, _mm256_add_pd(one, e)));
}

T256 void clef_simd2_gelu_tanh(float *xs, size_t n) {
    for (size_t i = 0; i < n; i += 4) {
        size_t left = n - i;
        __m128i m = _mm256_castsi256_si128(mask8(left < 4 ? left : 4));
        _mm_maskstore_ps(xs + i, m, gelu4(_mm_maskload_ps(xs + i, m)));
    }
}

/* ---------------------------------------------------------------- elementwise */

T256 void clef_simd2_silu_mul(float *y, const float *g, const float *u, size_t n) {
    for (size_t i = 0; i < n; i += 8) {
        __m256i m = mask8(n - i);
        __m256 gv = _mm256_maskload_ps(g + i, m), uv = _mm256_maskload_ps(u + i, m);
        _mm256_maskstore_ps(y + i, m, _mm256_mul_ps(vsilu(gv), uv));
    }
}

T256 void clef_simd2_sigmoid_mul(float *x, const float *g, size_t n) {
    const __m256 one = _mm256_set1_ps(1.0f);
    for (size_t i = 0; i < n; i += 8) {
        __m256i m = mask8(n - i);
        __m256 gv = _mm256_maskload_ps(g + i, m), xv = _mm256_maskload_ps(x + i, m);
        __m256 sg = _mm256_div_ps(one, _mm256_add_ps(one, vexp8(vneg(gv))));
        _mm256_maskstore_ps(x + i, m, _mm256_mul_ps(xv, sg));
    }
}

T256 void clef_simd2_add(float *y, const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i += 8) {
        __m256i m = mask8(n - i);
        _mm256_maskstore_ps(y + i, m, _mm256_add_ps(_mm256_maskload_ps(a + i, m), _mm256_maskload_ps(b + i, m)));
    }
}

/* ---------------------------------------------------------------- norms */

T256 void clef_simd2_sumsq8(double *ss, const float *x, size_t ld, size_t D) {
    const __m256i idx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32((int)ld));
    __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
    /* (double)x * x is exact, so the FMA rounds once, as `ss += (double)x * x` does */
    for (size_t d = 0; d < D; d++) {
        __m256 g = _mm256_i32gather_ps(x + d, idx, 4);
        __m256d v0 = _mm256_cvtps_pd(_mm256_castps256_ps128(g)), v1 = _mm256_cvtps_pd(_mm256_extractf128_ps(g, 1));
        a0 = _mm256_fmadd_pd(v0, v0, a0);
        a1 = _mm256_fmadd_pd(v1, v1, a1);
    }
    _mm256_storeu_pd(ss, a0);
    _mm256_storeu_pd(ss + 4, a1);
}

T256 void clef_simd2_rms_scale(float *y, const float *x, float inv, const float *w, int offset, size_t D) {
    const __m256 iv = _mm256_set1_ps(inv), one = _mm256_set1_ps(1.0f);
    for (size_t d = 0; d < D; d += 8) {
        __m256i m = mask8(D - d);
        __m256 wv = _mm256_maskload_ps(w + d, m);
        if (offset) wv = _mm256_add_ps(one, wv);
        _mm256_maskstore_ps(y + d, m, _mm256_mul_ps(_mm256_mul_ps(_mm256_maskload_ps(x + d, m), iv), wv));
    }
}

T256 void clef_simd2_l2_scale(float *y, const float *x, float inv, float scale, size_t D) {
    const __m256 iv = _mm256_set1_ps(inv), sv = _mm256_set1_ps(scale);
    for (size_t d = 0; d < D; d += 8) {
        __m256i m = mask8(D - d);
        __m256 t = _mm256_mul_ps(_mm256_maskload_ps(x + d, m), iv);
        if (scale != 1.0f) t = _mm256_mul_ps(t, sv);
        _mm256_maskstore_ps(y + d, m, t);
    }
}

T256 void clef_simd2_gated_scale(float *y, const float *x, const float *z, float inv, const float *w, size_t D) {
    const __m256 iv = _mm256_set1_ps(inv);
    for (size_t d = 0; d < D; d += 8) {
        __m256i m = mask8(D - d);
        __m256 nv = _mm256_mul_ps(_mm256_maskload_ps(w + d, m), _mm256_mul_ps(_mm256_maskload_ps(x + d, m), iv));
        _mm256_maskstore_ps(y + d, m, _mm256_mul_ps(nv, vsilu(_mm256_maskload_ps(z + d, m))));
    }
}

T256 void clef_simd2_meanvar8(double *mean, double *var, const float *x, size_t ld, size_t D) {
    const __m256i idx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32((int)ld));
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    for (size_t d = 0; d < D; d++) {
        __m256 g = _mm256_i32gather_ps(x + d, idx, 4);
        s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(g)));
        s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(g, 1)));
    }
    const __m256d dd = _mm256_set1_pd((double)D);
    const __m256d m0 = _mm256_div_pd(s0, dd), m1 = _mm256_div_pd(s1, dd);
    __m256d v0 = _mm256_setzero_pd(), v1 = _mm256_setzero_pd();
    for (size_t d = 0; d < D; d++) {
        __m256 g = _mm256_i32gather_ps(x + d, idx, 4);
        __m256d t0 = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(g)), m0);
        __m256d t1 = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(g, 1)), m1);
        v0 = _mm256_add_pd(v0, _mm256_mul_pd(t0, t0));
        v1 = _mm256_add_pd(v1, _mm256_mul_pd(t1, t1));
    }
    _mm256_storeu_pd(mean, m0);
    _mm256_storeu_pd(mean + 4, m1);
    _mm256_storeu_pd(var, v0);
    _mm256_storeu_pd(var + 4, v1);
}

T256 void clef_simd2_ln_scale(float *y, const float *x, double mean, double rstd, const float *w, const float *b, size_t D) {
    const __m256d mv = _mm256_set1_pd(mean), rv = _mm256_set1_pd(rstd);
    for (size_t d = 0; d < D; d += 4) {
        size_t left = D - d;
        __m128i m = _mm256_castsi256_si128(mask8(left < 4 ? left : 4));
        __m256d xv = _mm256_cvtps_pd(_mm_maskload_ps(x + d, m));
        __m256d wv = _mm256_cvtps_pd(_mm_maskload_ps(w + d, m)), bv = _mm256_cvtps_pd(_mm_maskload_ps(b + d, m));
        __m256d t = _mm256_add_pd(_mm256_mul_pd(_mm256_mul_pd(_mm256_sub_pd(xv, mv), rv), wv), bv);
        _mm_maskstore_ps(y + d, m, _mm256_cvtpd_ps(t));
    }
}

/* ---------------------------------------------------------------- conv1d + SiLU */

T256 void clef_simd2_conv_silu_row(float *y, const float *x, size_t t, size_t C, const float *wt, size_t K, size_t k0) {
    for (size_t c = 0; c < C; c += 8) {
        __m256i m = mask8(C - c);
        __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
        for (size_t k = k0; k < K; k++) {
            __m256 xv = _mm256_maskload_ps(x + (t + k + 1 - K) * C + c, m);
            __m256 wv = _mm256_maskload_ps(wt + k * C + c, m);
            /* exact products, one rounding per tap: `s += (double)w * x` */
            a0 = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(wv)), _mm256_cvtps_pd(_mm256_castps256_ps128(xv)), a0);
            a1 = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(wv, 1)), _mm256_cvtps_pd(_mm256_extractf128_ps(xv, 1)), a1);
        }
        __m256 s = _mm256_set_m128(_mm256_cvtpd_ps(a1), _mm256_cvtpd_ps(a0));
        _mm256_maskstore_ps(y + c, m, vsilu(s));
    }
}

const clef_simd_loops clef_simd_loops_avx2 = {
    clef_simd2_expf, clef_simd2_silu_mul, clef_simd2_sigmoid_mul, clef_simd2_gelu_tanh, clef_simd2_add,
    clef_simd2_sumsq8, clef_simd2_rms_scale, clef_simd2_l2_scale, clef_simd2_gated_scale,
    clef_simd2_meanvar8, clef_simd2_ln_scale, clef_simd2_conv_silu_row,
};
