/* AVX2 + FMA GEMM kernel (fp32 x bf16 -> fp32), compiled for AVX2 per function; gemm.c calls it
 * only when the CPU has AVX2 and FMA. Same scheme and the same bits as the AVX-512 kernel
 * (gemm.h): weights packed per call into fp32 panels [KC][NR = 16] (8 x 8 dword transposes of
 * bf16 pairs, split with a shift and a mask), a 6 x 16 register tile (12 ymm accumulators),
 * x[t, k] broadcast, one FMA per (row, 8 columns) per k in increasing k. */
#include <immintrin.h>
#include <string.h>

#include "compute/cpu/gemm.h"
#include "compute/cpu/gemm_blocked.h"

#define TGT __attribute__((target("avx2,fma")))
#define INL static inline __attribute__((always_inline))

enum { MR = 6, NR = 16 };

static inline float bf16f(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* 8 x 8 transpose of dwords: r[j] lane i = r_in[i] lane j. */
INL TGT void transpose8(__m256 r[8]) {
    __m256 t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int h = 0; h < 2; h++) {
        u[4 * h + 0] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0x44);
        u[4 * h + 1] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0xEE);
        u[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0x44);
        u[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0xEE);
    }
    for (int m = 0; m < 4; m++) {
        r[m] = _mm256_permute2f128_ps(u[m], u[4 + m], 0x20);
        r[4 + m] = _mm256_permute2f128_ps(u[m], u[4 + m], 0x31);
    }
}

/* fp32 panels: dst[p][k][16] for panel p = columns [16p, 16p + 16) of the block, k < kc; columns
 * beyond nc are zero. */
static TGT void pack_f32(float *dst, const uint16_t *w, size_t ldw, size_t nc, size_t kc) {
    const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
    for (size_t j0 = 0; j0 < nc; j0 += 8) {
        float *d = dst + (j0 / NR) * kc * NR + (j0 % NR);
        size_t rows = nc - j0 < 8 ? nc - j0 : 8;
        const uint16_t *wr = w + j0 * ldw;
        size_t k0 = 0;
        if (rows == 8) {
            for (; k0 + 16 <= kc; k0 += 16) {
                __m256 r[8];
                for (int i = 0; i < 8; i++)
                    r[i] = _mm256_castsi256_ps(
                        _mm256_loadu_si256((const __m256i *)(const void *)(wr + (size_t)i * ldw + k0)));
                transpose8(r);
                for (int j = 0; j < 8; j++) {
                    __m256i v = _mm256_castps_si256(r[j]);
                    _mm256_storeu_ps(d + (k0 + 2 * (size_t)j) * NR,
                                     _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
                    _mm256_storeu_ps(d + (k0 + 2 * (size_t)j + 1) * NR,
                                     _mm256_castsi256_ps(_mm256_and_si256(v, hi)));
                }
            }
        }
        for (; k0 < kc; k0++)
            for (size_t i = 0; i < 8; i++) d[k0 * NR + i] = i < rows ? bf16f(wr[i * ldw + k0]) : 0.0f;
        if (rows < 8 && (j0 % NR) == 0)
            for (size_t k = 0; k < kc; k++) _mm256_storeu_ps(d + k * NR + 8, _mm256_setzero_ps());
    }
}

INL TGT void ukr(const int mr, size_t kc, const float *a, size_t lda, const float *b, float *c,
                 size_t ldc, __m256i m0, __m256i m1, int full, int first, const float *bias) {
    __m256 acc0[MR], acc1[MR];
#pragma GCC unroll 6
    for (int r = 0; r < mr; r++) {
        if (first) {
            acc0[r] = _mm256_setzero_ps();
            acc1[r] = _mm256_setzero_ps();
        } else if (full) {
            acc0[r] = _mm256_loadu_ps(c + (size_t)r * ldc);
            acc1[r] = _mm256_loadu_ps(c + (size_t)r * ldc + 8);
        } else {
            acc0[r] = _mm256_maskload_ps(c + (size_t)r * ldc, m0);
            acc1[r] = _mm256_maskload_ps(c + (size_t)r * ldc + 8, m1);
        }
    }
    for (size_t k = 0; k < kc; k++) {
        __m256 b0 = _mm256_loadu_ps(b + k * NR), b1 = _mm256_loadu_ps(b + k * NR + 8);
#pragma GCC unroll 6
        for (int r = 0; r < mr; r++) {
            __m256 av = _mm256_broadcast_ss(a + (size_t)r * lda + k);
            acc0[r] = _mm256_fmadd_ps(av, b0, acc0[r]);
            acc1[r] = _mm256_fmadd_ps(av, b1, acc1[r]);
        }
    }
    if (bias) {
        __m256 bb0 = full ? _mm256_loadu_ps(bias) : _mm256_maskload_ps(bias, m0);
        __m256 bb1 = full ? _mm256_loadu_ps(bias + 8) : _mm256_maskload_ps(bias + 8, m1);
#pragma GCC unroll 6
        for (int r = 0; r < mr; r++) {
            acc0[r] = _mm256_add_ps(acc0[r], bb0);
            acc1[r] = _mm256_add_ps(acc1[r], bb1);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < mr; r++) {
        if (full) {
            _mm256_storeu_ps(c + (size_t)r * ldc, acc0[r]);
            _mm256_storeu_ps(c + (size_t)r * ldc + 8, acc1[r]);
        } else {
            _mm256_maskstore_ps(c + (size_t)r * ldc, m0, acc0[r]);
            _mm256_maskstore_ps(c + (size_t)r * ldc + 8, m1, acc1[r]);
        }
    }
}

#define UKR_CASE(M)                                                                        \
    case M: ukr(M, kc, a, lda, b, c, ldc, m0, m1, full, first, bias); break;

static TGT void ukr_any(int mr, size_t kc, const float *a, size_t lda, const float *b, float *c,
                        size_t ldc, __m256i m0, __m256i m1, int full, int first,
                        const float *bias) {
    switch (mr) {
        UKR_CASE(6) UKR_CASE(5) UKR_CASE(4) UKR_CASE(3) UKR_CASE(2) UKR_CASE(1)
        default: break;
    }
}

/* one micro-tile of the blocked loop nest (gemm_blocked.h) */
static TGT void tile_exact(int mr, size_t kc, const float *a, size_t lda, const float *b, float *c,
                           size_t ldc, size_t ncols, int first, const float *bias) {
    int full = ncols == NR;
    __m256i m0 = _mm256_setzero_si256(), m1 = m0;
    if (!full) {
        int lanes[16];
        for (int i = 0; i < 16; i++) lanes[i] = (size_t)i < ncols ? -1 : 0;
        m0 = _mm256_loadu_si256((const __m256i *)(const void *)lanes);
        m1 = _mm256_loadu_si256((const __m256i *)(const void *)(lanes + 8));
    }
    ukr_any(mr, kc, a, lda, b, c, ldc, m0, m1, full, first, bias);
}

TGT void clef_gemm_avx2_tile(const clef_gemm_args *a, size_t t0, size_t t1, size_t n0, size_t n1,
                             float *scratch) {
    gemm_blocked(a, t0, t1, n0, n1, scratch, MR, NR, pack_f32, tile_exact);
}
