/* The blocked loop nest of the exact FMA kernels (gemm_avx512.c, gemm_avx2.c), in a header so that
 * each kernel file inlines it with its own weight packing and micro-kernel: direct calls, compiled
 * under the kernel's own target attribute.
 *
 * Loop order: K blocks of CLEF_GEMM_KC outermost (each block of x is copied once per K block, at a
 * padded stride: rows K floats apart fall into the same L1 sets; the partial sums in y stream
 * once per K block); then blocks of CLEF_GEMM_MC rows; then column blocks of CLEF_GEMM_NC: the
 * block's weights are packed (the next block's rows prefetched into L2 meanwhile) and each
 * micro-panel of x (mr rows) stays in L1 while the packed block streams from L2. Every output
 * element is the micro-kernel's k-ordered sum (gemm.h), whatever the blocking. */
#ifndef CLEF_COMPUTE_CPU_GEMM_BLOCKED_H
#define CLEF_COMPUTE_CPU_GEMM_BLOCKED_H

#include <immintrin.h>
#include <string.h>

#include "compute/cpu/gemm.h"

/* packs columns [0, nc) of w (rows of W), k in [0, kc), into the kernel's fp32 panels in dst */
typedef void (*gemm_pack_fn)(float *dst, const uint16_t *w, size_t ldw, size_t nc, size_t kc);
/* one micro-tile: rows [0, mr) of a times the packed panel b ([kc][nr]) into c; columns past
 * ncols (<= nr) are neither read from c nor stored; first: start from 0, else from c; bias: add
 * it (the last K block) */
typedef void (*gemm_tile_fn)(int mr, size_t kc, const float *a, size_t lda, const float *b, float *c,
                             size_t ldc, size_t ncols, int first, const float *bias);

/* K = 0: y = bias (or 0) */
static inline void gemm_k_zero(const clef_gemm_args *a, size_t t0, size_t t1, size_t n0, size_t n1) {
    for (size_t t = t0; t < t1; t++)
        for (size_t n = n0; n < n1; n++) a->y[t * a->ldy + n] = a->bias ? a->bias[n] + 0.0f : 0.0f;
}

/* Prefetches (into L2) rows [*row, stop) of the weight block that is packed next: rows
 * [jn, jn + nn) of W at columns [pn, pn + kn). Called with growing `stop` while the current block
 * computes, so the DRAM reads overlap the FMAs. */
static inline void gemm_prefetch_w(const clef_gemm_args *a, size_t jn, size_t nn, size_t pn, size_t kn,
                                   size_t *row, size_t stop) {
    if (stop > nn) stop = nn;
    for (; *row < stop; (*row)++) {
        const char *wp = (const char *)(a->W + (jn + *row) * a->ldw + pn);
        for (size_t o = 0; o < kn * 2; o += 64) _mm_prefetch(wp + o, _MM_HINT_T1);
        _mm_prefetch(wp + kn * 2 - 1, _MM_HINT_T1);
    }
}

/* Rows [t0, t1) x columns [n0, n1) of y. scratch: CLEF_GEMM_SCRATCH floats (the packed block,
 * then the copy of x). mr, nr: the micro-kernel's register tile. */
static inline __attribute__((always_inline)) void gemm_blocked(const clef_gemm_args *a, size_t t0, size_t t1,
                                                               size_t n0, size_t n1, float *scratch, size_t mr,
                                                               size_t nr, gemm_pack_fn pack, gemm_tile_fn tile) {
    const size_t K = a->K, MC = CLEF_GEMM_MC, KC = CLEF_GEMM_KC, NC = CLEF_GEMM_NC;
    if (K == 0) { gemm_k_zero(a, t0, t1, n0, n1); return; }
    float *abuf = scratch + KC * NC;
    for (size_t pc = 0; pc < K; pc += KC) {
        size_t kc = K - pc < KC ? K - pc : KC;
        int first = pc == 0;
        int last = pc + kc >= K;
        for (size_t ic = t0; ic < t1; ic += MC) {
            size_t ie = t1 - ic < MC ? t1 : ic + MC;
            for (size_t t = ic; t < ie; t++)
                memcpy(abuf + (t - ic) * CLEF_GEMM_LDA, a->x + t * a->ldx + pc, kc * sizeof(float));
            for (size_t jc = n0; jc < n1; jc += NC) {
                size_t nc = n1 - jc < NC ? n1 - jc : NC;
                pack(scratch, a->W + jc * a->ldw + pc, a->ldw, nc, kc);
                /* the block packed next: the next column block, else the next K block's first */
                size_t pn = pc, jn = jc + nc, nn = n1 - jn < NC ? n1 - jn : NC;
                if (jn >= n1) { jn = n0; pn = pc + kc; nn = n1 - n0 < NC ? n1 - n0 : NC; }
                if (pn >= K) nn = 0;
                size_t kn = K - pn < KC ? K - pn : KC;
                size_t pf_row = 0;
                for (size_t t = ic; t < ie; t += mr) {
                    int m = ie - t < mr ? (int)(ie - t) : (int)mr;
                    gemm_prefetch_w(a, jn, nn, pn, kn, &pf_row, (nn * (t + mr - ic) + (ie - ic) - 1) / (ie - ic));
                    for (size_t jr = 0; jr < nc; jr += nr)
                        tile(m, kc, abuf + (t - ic) * CLEF_GEMM_LDA, CLEF_GEMM_LDA, scratch + (jr / nr) * kc * nr,
                             a->y + t * a->ldy + jc + jr, a->ldy, nc - jr < nr ? nc - jr : nr, first,
                             last && a->bias ? a->bias + jc + jr : NULL);
                }
            }
        }
    }
}

#endif
