/* The int8 precision's Linear (the CPU backend's `--precision int8`): weights quantized once per
 * output row, activations per token row, integer dot products, one fp32 rescale.
 *
 *   weights   s_w[n] = max_k |W[n, k]| / 127,  q_w[n, k] = rne(W[n, k] * (127 / max_k |W[n, k]|))
 *   rows      s_x[t] = max_k |x[t, k]| / 127,  q_x[t, k] = rne(x[t, k] * (127 / max_k |x[t, k]|))
 *   output    y[t, n] = (float)(sum_k q_x[t, k] q_w[n, k]) * (s_x[t] * s_w[n])  (+ bias[n])
 *
 * (rne: round to nearest, ties to even, in fp32; every q in [-127, 127], symmetric, no zero point;
 * an all-zero row has scale 0 and q 0; a row holding Inf or NaN has scale NaN, so its outputs are
 * NaN.) The sum is an exact int32 (|sum| <= 127^2 K < 2^31 for K <= CLEF_Q8_MAX_K), so its order
 * is free: every kernel, thread count, batch company and row slice gives the same bits, and a
 * weight row quantized at load or on the fly is the same row (the quantization is per row).
 *
 * Kernels: REF (portable C, the reference the tests hold the others to, bit for bit) and AVX2
 * (activations widened to int16 once per call, weights widened from int8 as they are read,
 * vpmaddwd: a pair sum of two int16 products is at most 2 x 127^2 = 32,258, so nothing saturates;
 * a 4 x 3 register tile of int32 accumulators). */
#ifndef CLEF_COMPUTE_CPU_GEMM_INT8_H
#define CLEF_COMPUTE_CPU_GEMM_INT8_H

#include <stddef.h>
#include <stdint.h>

#include "base/threads.h"

#define CLEF_Q8_MAX_K ((size_t)131072) /* 127^2 x 131,072 < 2^31: the int32 sums cannot overflow */
#define CLEF_Q8_PAD 32                 /* rows are stored at a multiple of this, zero-padded */

typedef enum { CLEF_Q8_AUTO = 0, CLEF_Q8_REF, CLEF_Q8_AVX2, CLEF_Q8_NKERNELS } clef_q8_kernel;

/* Weights quantized per output row: N rows of q at stride ldq (K rounded up to CLEF_Q8_PAD, zero
 * past K), one scale per row. */
typedef struct clef_q8_weights {
    int8_t *q;
    float *scale;
    size_t N, K, ldq;
} clef_q8_weights;

/* Quantizes the bf16 matrix W [N x K] (row stride ldw) with the pool's workers (pool may be NULL).
 * NULL when out of memory or K > CLEF_Q8_MAX_K or N or K is 0. Reads every element of W once. */
clef_q8_weights *clef_q8_quantize_bf16(clef_pool *pool, const uint16_t *W, size_t ldw, size_t N, size_t K);
void clef_q8_weights_free(clef_q8_weights *w); /* NULL ok */
size_t clef_q8_weights_bytes(const clef_q8_weights *w);

/* One row: q[0 .. K) and the scale, by the formula above (q past K untouched). src is fp32 or, with
 * bf16 != 0, bf16 (uint16_t). */
float clef_q8_quantize_row(int8_t *q, const void *src, int bf16, size_t K);

/* y = quantized(x) . w[row0 .. row0 + N)^T (+ bias[0 .. N)), x [T x K] at stride ldx (K = w->K),
 * y at stride ldy. Returns 0; -1 when out of memory, the slice is out of range or the kernel does
 * not run here (y then unspecified). */
int clef_gemm_q8(clef_q8_kernel kern, clef_pool *pool, float *y, size_t ldy, const float *x, size_t ldx,
                 size_t T, const clef_q8_weights *w, size_t row0, size_t N, const float *bias);

int clef_q8_available(clef_q8_kernel kern);
const char *clef_q8_name(clef_q8_kernel kern);

/* ---- internal: the per-ISA tile gemm_int8.c dispatches to ----
 * acc[t - t0][n - n0] (row stride lda) = sum_k xq[t, k] wq[n, k] over k < ldq, for rows [t0, t1) of
 * xq (int16, stride ldq) and rows [n0, n1) of wq (int8, stride ldq). */
void clef_q8_avx2_tile(int32_t *acc, size_t lda, const int16_t *xq, const int8_t *wq, size_t ldq, size_t t0,
                       size_t t1, size_t n0, size_t n1);

#endif
