/* AVX-512 inner loops of the CPU backend's elementwise ops, norms and conv1d (cpu_simd.c), and
 * their AVX2 + FMA twins (cpu_simd_avx2.c, clef_simd2_*) for CPUs without AVX-512.
 *
 * Each gives the same bits as the scalar loop it stands in for: the same fp32 / double operations
 * in the same order per element, and an expf that is glibc's (the FMA variant that libm picks on
 * every CPU with AVX-512) operation for operation, checked against libm over all 2^32 inputs
 * (tests/unit/test_simd.c checks a stride of them). So switching them on or off changes no bit.
 * The AVX2 twins run the same operations per element in the same order (8 lanes instead of 16),
 * so an AVX2-only CPU computes the same bits as an AVX-512 one. Callers take the set this CPU runs
 * from clef_simd_loops_here() (the AVX-512 set where clef_simd_ok(), else the AVX2 one where
 * clef_simd2_ok(), else none: the scalar loops); rows are whole rows, so thread partitioning is
 * not affected. */
#ifndef CLEF_COMPUTE_CPU_SIMD_H
#define CLEF_COMPUTE_CPU_SIMD_H

#include <stddef.h>
#include <stdint.h>

/* 1 when AVX-512F/VL/DQ, AVX2 and FMA are usable (after CLEF_CPU_MASK). */
int clef_simd_ok(void);
/* 1 when AVX2 and FMA are usable (after CLEF_CPU_MASK): the AVX2 twins can run. */
int clef_simd2_ok(void);

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
 * for CPUs without AVX2 + FMA. */
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

/* The loops as a set, so a caller picks AVX-512 or AVX2 once. */
typedef struct {
    void (*expf_)(float *y, const float *x, size_t n);
    void (*silu_mul)(float *y, const float *g, const float *u, size_t n);
    void (*sigmoid_mul)(float *x, const float *g, size_t n);
    void (*gelu_tanh)(float *x, size_t n);
    void (*add)(float *y, const float *a, const float *b, size_t n);
    void (*sumsq8)(double *ss, const float *x, size_t ld, size_t D);
    void (*rms_scale)(float *y, const float *x, float inv, const float *w, int offset, size_t D);
    void (*l2_scale)(float *y, const float *x, float inv, float scale, size_t D);
    void (*gated_scale)(float *y, const float *x, const float *z, float inv, const float *w, size_t D);
    void (*meanvar8)(double *mean, double *var, const float *x, size_t ld, size_t D);
    void (*ln_scale)(float *y, const float *x, double mean, double rstd, const float *w, const float *b,
                     size_t D);
    void (*conv_silu_row)(float *y, const float *x, size_t t, size_t C, const float *wt, size_t K, size_t k0);
} clef_simd_loops;
extern const clef_simd_loops clef_simd_loops_avx512; /* the functions above */
extern const clef_simd_loops clef_simd_loops_avx2;   /* their twins, clef_simd2_* */
/* The set this CPU runs: AVX-512 where clef_simd_ok(), else AVX2 where clef_simd2_ok(), else NULL. */
const clef_simd_loops *clef_simd_loops_here(void);

/* The AVX2 + FMA twins (cpu_simd_avx2.c): the same contracts and bits as the functions above. */
void clef_simd2_expf(float *y, const float *x, size_t n);
void clef_simd2_silu_mul(float *y, const float *g, const float *u, size_t n);
void clef_simd2_sigmoid_mul(float *x, const float *g, size_t n);
void clef_simd2_gelu_tanh(float *x, size_t n);
void clef_simd2_add(float *y, const float *a, const float *b, size_t n);
void clef_simd2_sumsq8(double *ss, const float *x, size_t ld, size_t D);
void clef_simd2_rms_scale(float *y, const float *x, float inv, const float *w, int offset, size_t D);
void clef_simd2_l2_scale(float *y, const float *x, float inv, float scale, size_t D);
void clef_simd2_gated_scale(float *y, const float *x, const float *z, float inv, const float *w,
                            size_t D);
void clef_simd2_meanvar8(double *mean, double *var, const float *x, size_t ld, size_t D);
void clef_simd2_ln_scale(float *y, const float *x, double mean, double rstd, const float *w, const float *b,
                         size_t D);
void clef_simd2_conv_silu_row(float *y, const float *x, size_t t, size_t C, const float *wt,
                              size_t K, size_t k0);
/* cpu_simd.c's tables, shared with the twins: glibc's __exp2f_data (32 entries) and gelu_tanh's
 * exp polynomial (14 coefficients, highest degree first). */
extern const uint64_t *const clef_exp2f_table;
extern const double *const clef_gelu_poly;

#endif
