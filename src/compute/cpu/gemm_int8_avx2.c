/* The int8 Linear's AVX2 tile (gemm_int8.h), compiled for AVX2 per function; gemm_int8.c calls it
 * only when the CPU has AVX2. Activations arrive as int16 (widened once per call), weights are read
 * as int8 and widened 16 at a time (vpmovsxbw); vpmaddwd multiplies 16 int16 pairs and adds
 * neighbours into 8 int32 (at most 2 x 127^2 = 32,258 each: no saturation, unlike vpmaddubsw's
 * int16 sums, which need |a| < 128 and |b| <= 127 and leave no room for a third term), then vpaddd.
 * A 4-row x 3-column register tile (12 accumulators, 3 widened weight vectors; x read as a memory
 * operand). Integer sums: the same bits as the reference tile whatever the order. */
#include <immintrin.h>

#include "compute/cpu/gemm_int8.h"

#define TGT __attribute__((target("avx2")))
#define INL static inline __attribute__((always_inline))

INL TGT int32_t hsum(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* R rows x C columns (R <= 4, C <= 3, constants after inlining) over all ldq (a multiple of 16). */
INL TGT void micro(int R, int C, int32_t *acc, size_t lda, const int16_t *x, const int8_t *w, size_t ldq) {
    __m256i a[4][3];
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 3; c++) a[r][c] = _mm256_setzero_si256();
    for (size_t k = 0; k < ldq; k += 16) {
        __m256i wv[3];
        for (int c = 0; c < C; c++)
            wv[c] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(w + (size_t)c * ldq + k)));
        for (int r = 0; r < R; r++) {
            __m256i xv = _mm256_loadu_si256((const __m256i *)(const void *)(x + (size_t)r * ldq + k));
            for (int c = 0; c < C; c++) a[r][c] = _mm256_add_epi32(a[r][c], _mm256_madd_epi16(xv, wv[c]));
        }
    }
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) acc[(size_t)r * lda + (size_t)c] = hsum(a[r][c]);
}

static TGT void micro_any(int R, int C, int32_t *acc, size_t lda, const int16_t *x, const int8_t *w, size_t ldq) {
    /* one specialised body per (R, C): the loops above unroll on constants */
#define M(r, c) if (R == r && C == c) { micro(r, c, acc, lda, x, w, ldq); return; }
    M(4, 3) M(4, 2) M(4, 1) M(3, 3) M(3, 2) M(3, 1) M(2, 3) M(2, 2) M(2, 1) M(1, 3) M(1, 2) M(1, 1)
#undef M
}

TGT void clef_q8_avx2_tile(int32_t *acc, size_t lda, const int16_t *xq, const int8_t *wq, size_t ldq, size_t t0,
                           size_t t1, size_t n0, size_t n1) {
    for (size_t t = t0; t < t1; t += 4) {
        int R = t1 - t < 4 ? (int)(t1 - t) : 4;
        for (size_t n = n0; n < n1; n += 3) {
            int C = n1 - n < 3 ? (int)(n1 - n) : 3;
            micro_any(R, C, acc + (t - t0) * lda + (n - n0), lda, xq + t * ldq, wq + n * ldq, ldq);
        }
    }
}
