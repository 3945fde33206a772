/* The AVX512_BF16 GEMM kernel (gemm_avx512bf16.c), out of the library: for bench_gemm only. */
#ifndef CLEF_BENCH_GEMM_AVX512BF16_H
#define CLEF_BENCH_GEMM_AVX512BF16_H

#include <stddef.h>
#include <stdint.h>

#include "base/threads.h"
#include "compute/cpu/gemm.h"

/* 1 when this CPU (after CLEF_CPU_MASK) has AVX-512 F/BW/VL/DQ, FMA and AVX512_BF16. */
int bench_gemm_avx512bf16_available(void);
/* y = x . W^T (+ bias) as clef_gemm_bf16 (gemm.h) computes it, but with x rounded to bf16 first: not
 * exact. pool may be NULL. 0, or -1 when the CPU lacks the features or scratch memory ran out. */
int bench_gemm_avx512bf16(clef_pool *pool, float *y, size_t ldy, const float *x, size_t ldx, size_t T,
                          size_t K, const uint16_t *W, size_t ldw, size_t N, const float *bias);

#endif
