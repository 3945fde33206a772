/* AVX-512 inner loops of the CPU backend's elementwise ops, norms and conv1d (cpu_simd.c).
 *
 * Each gives the same bits as the scalar loop it stands in for: the same fp32 / double operations
 * in the same order per element, and an expf that is glibc's (the FMA variant that libm picks on
 * every CPU with AVX-512) operation for operation, checked against libm over all 2^32 inputs
 * (tests/unit/test_simd.c checks a stride of them). So switching them on or off changes no bit.
 * Callers use them only when clef_simd_ok(); rows are whole rows, so thread partitioning is not
 * affected. */
#ifndef CLEF_COMPUTE_CPU_SIMD_H
#define CLEF_COMPUTE_CPU_SIMD_H

#include <stddef.h>

/* 1 when AVX-512F/VL/DQ, AVX2 and FMA are usable (after CLEF_CPU_MASK). */
int clef_simd_ok(void);

/* y[i] = expf(x[i]) (glibc's bits). */
void clef_simd_expf(float *y, const float *x, size_t n);
/* y[i] = (g / (1 + expf(-g))) * u: silu(gate) * up; y may alias g or u. */
void clef_simd_silu_mul(float *y, const float *g, const float *u, size_t n);
/* x[i] = x[i] * (1 / (1 + expf(-g[i]))). */
void clef_simd_sigmoid_mul(float *x, const float *g, size_t n);
/* GELU with the tanh approximation, x[i] := gelu_tanh(x[i]), computed in double as
 * x / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3) (= 0.5 x (1 + tanh u)), with this file's own
 * double exp (no FMA, so the scalar form below and this loop give the same bits; within a few ulp
 * of libm's exp, far below the fp32 rounding of the result). clef_gelu_tanh1 is the scalar form,
 * for CPUs without AVX-512. */
void clef_simd_gelu_tanh(float *x, size_t n);
float clef_gelu_tanh1(float x);
/* y = a + b; y may alias a or b. */
void clef_simd_add(float *y, const float *a, const float *b, size_t n);

/* ss[j] = sum over d < D, in d order, of (double)x[j*ld + d]^2, for 8 rows j (each lane one row:
 * the scalar sequential sum, 8 at once). Needs 7 * ld + D < 2^31. */
void clef_simd_sumsq8(double *ss, const float *x, size_t ld, size_t D);
/* rmsnorm's second pass: y[d] = (x[d] * inv) * (offset ? 1 + w[d] : w[d]); y may equal x. */
void clef_simd_rms_scale(float *y, const float *x, float inv, const float *w, int offset, size_t D);
/* l2norm's: t = x[d] * inv; y[d] = scale != 1 ? t * scale : t; y may equal x. */
void clef_simd_l2_scale(float *y, const float *x, float inv, float scale, size_t D);
/* gated rmsnorm's: y[d] = (w[d] * (x[d] * inv)) * silu(z[d]); y may equal x. */
void clef_simd_gated_scale(float *y, const float *x, const float *z, float inv, const float *w,
                           size_t D);

/* layernorm's statistics for 8 rows j (each lane one row, the scalar loop's order and roundings):
 * mean[j] = (sum_d x) / D, var[j] = sum_d (x - mean)^2 (not yet divided by D), sums in double in d
 * order. Needs 7 * ld + D < 2^31. */
void clef_simd_meanvar8(double *mean, double *var, const float *x, size_t ld, size_t D);
/* layernorm's second pass: y[d] = (float)(((x[d] - mean) * rstd) * w[d] + b[d]) in double; y may
 * equal x. */
void clef_simd_ln_scale(float *y, const float *x, double mean, double rstd, const float *w, const float *b,
                        size_t D);

/* One token row of the causal depthwise conv1d + SiLU: for every channel c < C,
 * y[c] = silu((float)sum_{k0 <= k < K} (double)wt[k*C + c] * x[(t + k + 1 - K)*C + c]), the sum in
 * k order in double (wt is the weight transposed to [K, C]); k0 = the first tap inside the
 * sequence (t + k0 + 1 >= K). */
void clef_simd_conv_silu_row(float *y, const float *x, size_t t, size_t C, const float *wt,
                             size_t K, size_t k0);

#endif
