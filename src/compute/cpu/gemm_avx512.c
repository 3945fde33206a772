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
 *
 * BF16 kernel (clef_gemm_avx512bf16_tile; for measuring only): bf16-pair panels [KC/2][32 dwords]
 * and a bf16 copy of x, vdpbf16ps (two products per lane per instruction), column blocks
 * outermost. */
#include <immintrin.h>
#include <string.h>

#include "compute/cpu/gemm.h"
#include "compute/cpu/gemm_blocked.h"
#include "compute/cpu/gemm_x86.h"

#define TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))
#define TGTBF __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma")))
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

/* ---------------------------------------------------------------- bf16 dot-product kernel */

enum { KCB = 2 * CLEF_GEMM_KC }; /* k per block (KCB / 2 pairs per column): KCB * NC / 2 dwords and MC rows
                      * of KCB bf16 fit the scratch */
_Static_assert(KCB / 2 * CLEF_GEMM_NC <= CLEF_GEMM_KC * CLEF_GEMM_NC, "bf16 panel fits");
_Static_assert(KCB <= 2 * CLEF_GEMM_LDA, "bf16 rows fit");

/* bf16-pair panels: dst[p][k/2][32] dwords for k < kc (kc rounded up to even, zero padded). */
static TGTBF void pack_pairs(uint32_t *dst, const uint16_t *w, size_t ldw, size_t nc, size_t kc) {
    size_t kp = (kc + 1) / 2;
    for (size_t j0 = 0; j0 < nc; j0 += 16) {
        uint32_t *d = dst + (j0 / NR) * kp * NR + (j0 % NR);
        int rows = nc - j0 < 16 ? (int)(nc - j0) : 16;
        const uint16_t *wr = w + j0 * ldw;
        for (size_t k0 = 0; k0 < kc; k0 += 32) {
            size_t nk = kc - k0 < 32 ? kc - k0 : 32;
            __m512i r[16];
            load_pairs16(r, wr, ldw, rows, k0, nk);
            for (size_t j = 0; 2 * j < nk; j++) _mm512_storeu_si512(d + (k0 / 2 + j) * NR, r[j]);
        }
        if (rows < 16 && (j0 % NR) == 0)
            for (size_t k = 0; k < kp; k++) _mm512_storeu_si512(d + k * NR + 16, _mm512_setzero_si512());
    }
}

INL TGTBF void ukr_bf(const int mr, size_t kp, const uint16_t *a, size_t lda, const uint32_t *b,
                      float *c, size_t ldc, __mmask16 m0, __mmask16 m1, int first,
                      const float *bias) {
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
    for (size_t k = 0; k < kp; k++) {
        __m512bh b0 = (__m512bh)_mm512_loadu_si512(b + k * NR);
        __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + k * NR + 16);
#pragma GCC unroll 12
        for (int r = 0; r < mr; r++) {
            uint32_t pr;
            memcpy(&pr, a + (size_t)r * lda + 2 * k, sizeof pr);
            __m512bh av = (__m512bh)_mm512_set1_epi32((int)pr);
            acc0[r] = _mm512_dpbf16_ps(acc0[r], av, b0);
            acc1[r] = _mm512_dpbf16_ps(acc1[r], av, b1);
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

#define UKRB_CASE(M)                                                                       \
    case M: ukr_bf(M, kp, a, lda, b, c, ldc, m0, m1, first, bias); break;

static TGTBF void ukr_bf_any(int mr, size_t kp, const uint16_t *a, size_t lda, const uint32_t *b,
                             float *c, size_t ldc, __mmask16 m0, __mmask16 m1, int first,
                             const float *bias) {
    switch (mr) {
        UKRB_CASE(12) UKRB_CASE(11) UKRB_CASE(10) UKRB_CASE(9) UKRB_CASE(8) UKRB_CASE(7)
        UKRB_CASE(6) UKRB_CASE(5) UKRB_CASE(4) UKRB_CASE(3) UKRB_CASE(2) UKRB_CASE(1)
        default: break;
    }
}

TGTBF void clef_gemm_avx512bf16_tile(const clef_gemm_args *a, size_t t0, size_t t1, size_t n0,
                                     size_t n1, float *scratch) {
    const size_t K = a->K;
    if (K == 0) { gemm_k_zero(a, t0, t1, n0, n1); return; }
    uint32_t *pk = (uint32_t *)(void *)scratch;
    /* the block of x in bf16 at a padded stride (as the exact kernel's copy) */
    uint16_t *abuf = (uint16_t *)(void *)(scratch + (size_t)CLEF_GEMM_KC * CLEF_GEMM_NC);
    const size_t ldab = 2 * CLEF_GEMM_LDA;
    for (size_t jc = n0; jc < n1; jc += CLEF_GEMM_NC) {
        size_t nc = n1 - jc < CLEF_GEMM_NC ? n1 - jc : CLEF_GEMM_NC;
        for (size_t pc = 0; pc < K; pc += KCB) {
            size_t kc = K - pc < KCB ? K - pc : KCB;
            pack_pairs(pk, a->W + jc * a->ldw + pc, a->ldw, nc, kc);
            size_t kp = (kc + 1) / 2;
            int first = pc == 0;
            int last = pc + kc >= K;
            size_t pn = pc + kc, jn = jc, nn = nc;
            if (pn >= K) { pn = 0; jn = jc + nc; nn = n1 - jn < CLEF_GEMM_NC ? n1 - jn : CLEF_GEMM_NC; }
            if (jn >= n1) nn = 0;
            size_t kn = K - pn < KCB ? K - pn : KCB;
            size_t pf_row = 0;
            for (size_t ic = t0; ic < t1; ic += MC) {
                size_t ie = t1 - ic < MC ? t1 : ic + MC;
                for (size_t t = ic; t < ie; t++)
                    memcpy(abuf + (t - ic) * ldab, a->xb + t * a->ldxb + pc, 2 * kp * sizeof(uint16_t));
                for (size_t t = ic; t < ie; t += MR) {
                    int mr = ie - t < MR ? (int)(ie - t) : MR;
                    gemm_prefetch_w(a, jn, nn, pn, kn, &pf_row,
                               ic == t0 ? (nn * (t + MR - ic) + (ie - ic) - 1) / (ie - ic) : nn);
                    for (size_t jr = 0; jr < nc; jr += NR) {
                        __mmask16 m0, m1;
                        col_masks(nc - jr, &m0, &m1);
                        const uint32_t *b = pk + (jr / NR) * kp * NR;
                        const float *bias = last && a->bias ? a->bias + jc + jr : NULL;
                        ukr_bf_any(mr, kp, abuf + (t - ic) * ldab, ldab, b,
                                   a->y + t * a->ldy + jc + jr, a->ldy, m0, m1, first, bias);
                    }
                }
            }
        }
    }
}

TGTBF void clef_gemm_avx512bf16_round(uint16_t *dst, const float *src, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(src + i));
        _mm256_storeu_si256((__m256i *)(void *)(dst + i), (__m256i)h);
    }
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        __m256bh h = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, src + i));
        _mm256_mask_storeu_epi16(dst + i, m, (__m256i)h);
    }
}
