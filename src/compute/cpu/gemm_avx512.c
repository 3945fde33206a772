/* AVX-512 GEMM kernels (fp32 x bf16 -> fp32), compiled for AVX-512 per function so the rest of the
 * build stays portable; gemm.c calls them only when the CPU has the features.
 *
 * Exact kernel (clef_gemm_avx512_tile): BLIS-style (the loop nest: gemm_blocked.h). Per K block of KC
 * and column block of NC, the bf16 weights are packed per call into fp32 panels [KC][NR = 32] (widening is exact; the
 * packing transposes 16 x 16 dword blocks, each dword a (k, k+1) bf16 pair, then splits each pair
 * with a shift and a mask). The micro-kernel keeps a 12 x 32 tile of y in 24 zmm accumulators,
 * broadcasts x[t, k] from the activation rows and issues one FMA per (row, 16 columns) per k: k
 * runs 0..K-1 in order for every element (gemm.h), the partial sum is stored to y between K
 * blocks and reloaded. Tails: fewer rows use the same kernel with mr < 12; fewer columns are
 * zero-padded in the panel and stored with masks.
 * (The AVX512_BF16 kernel once measured against it, not exact and never chosen, is now
 * bench/gemm_avx512bf16.c.) */
#include <immintrin.h>
#include <string.h>

#include "compute/cpu/gemm.h"
#include "compute/cpu/gemm_blocked.h"
#include "compute/cpu/gemm_x86.h"

#define TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))
#define INL static inline __attribute__((always_inline))

enum { MR = 12, NR = 32, MC = CLEF_GEMM_MC };



/* ---------------------------------------------------------------- packing */

/* fp32 panels: dst[p][k][32] for panel p = columns [32p, 32p + 32) of the block, k < kc. */
static TGT void pack_f32(float *dst, const uint16_t *w, size_t ldw, size_t nc, size_t kc) {
    const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
    for (size_t j0 = 0; j0 < nc; j0 += 16) {
        float *d = dst + (j0 / NR) * kc * NR + (j0 % NR);
        int rows = nc - j0 < 16 ? (int)(nc - j0) : 16;
        const uint16_t *wr = w + j0 * ldw;
        for (size_t k0 = 0; k0 < kc; k0 += 32) {
            size_t nk = kc - k0 < 32 ? kc - k0 : 32;
            __m512i r[16];
            load_pairs16(r, wr, ldw, rows, k0, nk);
            for (size_t j = 0; 2 * j < nk; j++) {
                size_t k = k0 + 2 * j;
                _mm512_storeu_ps(d + k * NR, _mm512_castsi512_ps(_mm512_slli_epi32(r[j], 16)));
                if (k + 1 < kc)
                    _mm512_storeu_ps(d + (k + 1) * NR,
                                     _mm512_castsi512_ps(_mm512_and_si512(r[j], hi)));
            }
        }
        if (rows < 16 && (j0 % NR) == 0) /* the panel's second half has no rows: zero it */
            for (size_t k = 0; k < kc; k++) _mm512_storeu_ps(d + k * NR + 16, _mm512_setzero_ps());
    }
}

/* ---------------------------------------------------------------- micro-kernel (exact) */

INL TGT void ukr(const int mr, size_t kc, const float *a, size_t lda, const float *b, float *c,
                 size_t ldc, __mmask16 m0, __mmask16 m1, int first, const float *bias) {
    __m512 acc0[MR], acc1[MR];
#pragma GCC unroll 12
    for (int r = 0; r < mr; r++) {
        if (first) {
            acc0[r] = _mm512_setzero_ps();
            acc1[r] = _mm512_setzero_ps();
        } else {
            acc0[r] = _mm512_maskz_loadu_ps(m0, c + (size_t)r * ldc);
            acc1[r] = _mm512_maskz_loadu_ps(m1, c + (size_t)r * ldc + 16);
        }
    }
    for (size_t k = 0; k < kc; k++) {
        __m512 b0 = _mm512_loadu_ps(b + k * NR), b1 = _mm512_loadu_ps(b + k * NR + 16);
#pragma GCC unroll 12
        for (int r = 0; r < mr; r++) {
            __m512 av = _mm512_set1_ps(a[(size_t)r * lda + k]);
            acc0[r] = _mm512_fmadd_ps(av, b0, acc0[r]);
            acc1[r] = _mm512_fmadd_ps(av, b1, acc1[r]);
        }
    }
    if (bias) {
        __m512 bb0 = _mm512_maskz_loadu_ps(m0, bias), bb1 = _mm512_maskz_loadu_ps(m1, bias + 16);
#pragma GCC unroll 12
        for (int r = 0; r < mr; r++) {
            acc0[r] = _mm512_add_ps(acc0[r], bb0);
            acc1[r] = _mm512_add_ps(acc1[r], bb1);
        }
    }
#pragma GCC unroll 12
    for (int r = 0; r < mr; r++) {
        _mm512_mask_storeu_ps(c + (size_t)r * ldc, m0, acc0[r]);
        _mm512_mask_storeu_ps(c + (size_t)r * ldc + 16, m1, acc1[r]);
    }
}

#define UKR_CASE(M)                                                                        \
    case M: ukr(M, kc, a, lda, b, c, ldc, m0, m1, first, bias); break;

static TGT void ukr_any(int mr, size_t kc, const float *a, size_t lda, const float *b, float *c,
                        size_t ldc, __mmask16 m0, __mmask16 m1, int first, const float *bias) {
    switch (mr) {
        UKR_CASE(12) UKR_CASE(11) UKR_CASE(10) UKR_CASE(9) UKR_CASE(8) UKR_CASE(7)
        UKR_CASE(6) UKR_CASE(5) UKR_CASE(4) UKR_CASE(3) UKR_CASE(2) UKR_CASE(1)
        default: break;
    }
}

static void col_masks(size_t ncols, __mmask16 *m0, __mmask16 *m1) {
    *m0 = ncols >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << ncols) - 1u);
    *m1 = ncols >= 32 ? (__mmask16)0xffff : ncols <= 16 ? 0 : (__mmask16)((1u << (ncols - 16)) - 1u);
}

/* one micro-tile of the blocked loop nest (gemm_blocked.h) */
static TGT void tile_exact(int mr, size_t kc, const float *a, size_t lda, const float *b, float *c,
                           size_t ldc, size_t ncols, int first, const float *bias) {
    __mmask16 m0, m1;
    col_masks(ncols, &m0, &m1);
    ukr_any(mr, kc, a, lda, b, c, ldc, m0, m1, first, bias);
}

TGT void clef_gemm_avx512_tile(const clef_gemm_args *a, size_t t0, size_t t1, size_t n0, size_t n1,
                               float *scratch) {
    gemm_blocked(a, t0, t1, n0, n1, scratch, MR, NR, pack_f32, tile_exact);
}
