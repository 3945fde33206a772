/* The AVX512_BF16 GEMM kernel, for measuring only (bench_gemm's "avx512bf16" row): x rounded to bf16
 * (round-to-nearest-even) and vdpbf16ps, two products per lane per instruction. Not exact and slower
 * than the library's avx512 kernel at every shape measured (docs/performance-history.md "GEMM"), so
 * it left the library (docs/precision.md "Variants kept, and why"). The loop nest is the exact
 * kernels' blocking (compute/cpu/gemm.h, gemm_blocked.h helpers) with bf16-pair panels [KC/2][32
 * dwords] and a bf16 copy of x, column blocks outermost; the driver cuts work as gemm.c does. */
#include "gemm_avx512bf16.h"

#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu_features.h"
#include "compute/cpu/gemm_blocked.h"
#include "compute/cpu/gemm_x86.h"

#define TGTBF __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma")))
#define INL static inline __attribute__((always_inline))

enum { MR = 12, NR = 32, MC = CLEF_GEMM_MC };

/* the library's arguments and the bf16 copy of x (K rounded up to even) */
typedef struct {
    clef_gemm_args g;
    const uint16_t *xb; size_t ldxb;
} bf16_args;

static void col_masks(size_t ncols, __mmask16 *m0, __mmask16 *m1) {
    *m0 = ncols >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << ncols) - 1u);
    *m1 = ncols >= 32 ? (__mmask16)0xffff : ncols <= 16 ? 0 : (__mmask16)((1u << (ncols - 16)) - 1u);
}

/* ---------------------------------------------------------------- the kernel (moved unchanged) */

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

static TGTBF void bf16_tile(const bf16_args *ba, size_t t0, size_t t1, size_t n0, size_t n1, float *scratch) {
    const clef_gemm_args *a = &ba->g;
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
                    memcpy(abuf + (t - ic) * ldab, ba->xb + t * ba->ldxb + pc, 2 * kp * sizeof(uint16_t));
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

static TGTBF void round_bf16(uint16_t *dst, const float *src, size_t n) {
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

/* ---------------------------------------------------------------- the driver (gemm.c's partition) */

typedef struct {
    bf16_args a;
    float *scratch;       /* CLEF_GEMM_SCRATCH floats per worker */
    size_t cw, nbn, rh;   /* columns per unit, column units, rows per unit */
} job;

static void run_units(void *ctx, size_t b, size_t e, int worker) {
    job *j = ctx;
    float *s = j->scratch + (size_t)worker * CLEF_GEMM_SCRATCH;
    size_t u = b;
    while (u < e) { /* consecutive units of one row band run as one tile */
        size_t it = u / j->nbn, jn = u % j->nbn;
        size_t ue = (it + 1) * j->nbn;
        if (ue > e) ue = e;
        size_t t0 = it * j->rh, t1 = t0 + j->rh < j->a.g.T ? t0 + j->rh : j->a.g.T;
        size_t n0 = jn * j->cw, n1 = (jn + (ue - u)) * j->cw;
        if (n1 > j->a.g.N) n1 = j->a.g.N;
        if (t0 < t1 && n0 < n1) bf16_tile(&j->a, t0, t1, n0, n1, s);
        u = ue;
    }
}

typedef struct { uint16_t *xb; size_t ldxb; const float *x; size_t ldx, K; } round_job;

static void run_round(void *ctx, size_t b, size_t e, int worker) {
    (void)worker;
    round_job *r = ctx;
    for (size_t t = b; t < e; t++) {
        round_bf16(r->xb + t * r->ldxb, r->x + t * r->ldx, r->K);
        if (r->ldxb > r->K) r->xb[t * r->ldxb + r->K] = 0;
    }
}

int bench_gemm_avx512bf16_available(void) {
    return clef_cpu_has(CLEF_CPU_AVX512F | CLEF_CPU_AVX512BW | CLEF_CPU_AVX512VL | CLEF_CPU_AVX512DQ |
                        CLEF_CPU_FMA | CLEF_CPU_AVX512BF16);
}

int bench_gemm_avx512bf16(clef_pool *pool, float *y, size_t ldy, const float *x, size_t ldx, size_t T,
                          size_t K, const uint16_t *W, size_t ldw, size_t N, const float *bias) {
    if (!bench_gemm_avx512bf16_available()) return -1;
    if (T == 0 || N == 0) return 0;
    job j;
    memset(&j, 0, sizeof j);
    j.a.g = (clef_gemm_args){.y = y, .ldy = ldy, .x = x, .ldx = ldx, .W = W, .ldw = ldw,
                             .bias = bias, .T = T, .K = K, .N = N};
    size_t nth = (size_t)clef_pool_size(pool);
    /* units as gemm.c cuts them: column blocks of 128, narrower (32) when that leaves workers idle,
     * row bands too when even that does */
    j.cw = 128;
    j.nbn = (N + j.cw - 1) / j.cw;
    if (j.nbn < 2 * nth && N > 32) {
        j.cw = 32;
        j.nbn = (N + 31) / 32;
    }
    size_t nbt = 1;
    if (j.nbn < nth && T >= 24) {
        nbt = (nth + j.nbn - 1) / j.nbn;
        if (nbt > T / 12) nbt = T / 12;
    }
    j.rh = (T + nbt - 1) / nbt;
    j.rh = (j.rh + 11) / 12 * 12;
    nbt = (T + j.rh - 1) / j.rh;
    size_t units = nbt * j.nbn;
    size_t nw = nth < units ? nth : units;
    size_t bytes = (nw * CLEF_GEMM_SCRATCH * sizeof(float) + 63) / 64 * 64;
    j.scratch = aligned_alloc(64, bytes);
    if (!j.scratch) return -1;
    uint16_t *xb = NULL;
    if (K > 0) {
        size_t ldxb = K + (K & 1);
        xb = malloc(T * ldxb * sizeof *xb);
        if (!xb) {
            free(j.scratch);
            return -1;
        }
        round_job r = {xb, ldxb, x, ldx, K};
        clef_pool_for(pool, T, 16, run_round, &r);
        j.a.xb = xb;
        j.a.ldxb = ldxb;
    }
    clef_pool_for(pool, units, 1, run_units, &j);
    free(xb);
    free(j.scratch);
    return 0;
}
