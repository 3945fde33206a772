/* The token mixers of the CPU backend (cpu_gdn.c: conv1d_silu, l2norm, gated_rmsnorm, the chunked
 * delta rule; cpu_attention.c: attention). cpu_ops.c wires them into the op table; each returns 0,
 * or -1 when scratch memory could not be allocated (the caller records it with clef_ops_fail).
 *
 * Arithmetic (the parity path): fp32 storage at the points the reference rounds, every product of
 * two fp32 values taken exactly in double and summed in double in a fixed sequential order, one
 * rounding to fp32 per stored value. The fast kernels are register-blocked double-accumulation
 * loops (AVX-512 / AVX2+FMA chosen at run time, plain C otherwise). Each output element is computed
 * inside one work item (a v-head; a kv head x block of query rows), so the bits never depend on the
 * thread count. The previous scalar implementations, which the tests and the benchmark compare these
 * with, live in tests/unit/ref_mixers.c (not in the library). Attention has a second implementation
 * with fp32 products (clef_cpu_attention_f32, and its AVX2 build clef_cpu_attention_f32_avx2 with
 * the same bits), the default path's where AVX-512 or AVX2 + FMA is usable (cpu_ops.c). */
#ifndef CLEF_COMPUTE_CPU_MIXERS_H
#define CLEF_COMPUTE_CPU_MIXERS_H

#include <stddef.h>

#include "base/threads.h"
#include "compute/ops.h"

/* The ops.h contracts, per segment (the *_segs forms; the plain forms are one segment of T rows
 * with zero states). */
int clef_cpu_conv1d_silu(clef_pool *pool, float *y, const float *x, size_t T, size_t C,
                         const clef_tensor *w);
int clef_cpu_conv1d_silu_segs(clef_pool *pool, float *y, const float *x, size_t C, const clef_tensor *w,
                              const clef_seg *segs, size_t nseg, const clef_seg_state *st);
void clef_cpu_l2norm(clef_pool *pool, float *x, size_t ld, size_t rows, size_t D, float eps,
                     float scale);
int clef_cpu_gated_rmsnorm(clef_pool *pool, float *y, const float *x, const float *z, size_t rows,
                           size_t D, const clef_tensor *w, float eps);

int clef_cpu_delta_rule(clef_pool *pool, float *o, const float *q, const float *k, const float *v,
                        const float *beta, const float *g, size_t T, size_t Hk, size_t Hv,
                        size_t dk, size_t dv, size_t chunk);
int clef_cpu_delta_rule_segs(clef_pool *pool, float *o, const float *q, const float *k, const float *v,
                             const float *beta, const float *g, size_t Hk, size_t Hv, size_t dk, size_t dv,
                             size_t chunk, const clef_seg *segs, size_t nseg, const clef_seg_state *st);

/* Attention (ops.h) over one segment: Tq query rows, Tk key rows; causal: query i sees keys
 * t <= i + (Tk - Tq) (Tk >= Tq, else -1). */
int clef_cpu_attention(clef_pool *pool, float *o, size_t ldo, const float *q, size_t ldq,
                       const float *k, size_t ldk, const float *v, size_t ldv, size_t Tq, size_t Tk,
                       size_t nh, size_t nkv, size_t hd, float scale, int causal);
/* The same op with fp32 products (cpu_attention_f32.c): the default path's attention where
 * clef_simd_ok() (it uses AVX-512 and clef_simd_expf); clef_cpu_attention stays the parity path's. */
int clef_cpu_attention_f32(clef_pool *pool, float *o, size_t ldo, const float *q, size_t ldq,
                           const float *k, size_t ldk, const float *v, size_t ldv, size_t Tq, size_t Tk,
                           size_t nh, size_t nkv, size_t hd, float scale, int causal);
/* Its AVX2 + FMA build (cpu_attention_f32_avx2.c), the same bits: the default path's attention
 * where clef_simd2_ok() but not clef_simd_ok(). */
int clef_cpu_attention_f32_avx2(clef_pool *pool, float *o, size_t ldo, const float *q, size_t ldq,
                                const float *k, size_t ldk, const float *v, size_t ldv, size_t Tq, size_t Tk,
                                size_t nh, size_t nkv, size_t hd, float scale, int causal);
/* Shared by the two attention implementations: query blocks of about `rows` rows (all heads of a
 * kv group together), at least two per worker and a multiple of the workers (the kv heads run one
 * after another, each waiting for its slowest worker). A row's bits depend on neither. */
void clef_att_plan(size_t Tq, size_t group, size_t rows, int nworkers, size_t *qb, size_t *nblk);
/* Work item bz's block: zigzag, so a contiguous range of items mixes cheap and dear causal blocks. */
static inline size_t clef_att_block(size_t bz, size_t nblk) { return (bz & 1) ? nblk - 1 - bz / 2 : bz / 2; }
/* Valid keys [0, nv) of query position i in a tile of nt keys from t0. */
static inline size_t clef_att_valid(int causal, size_t i, size_t t0, size_t nt) {
    if (!causal) return nt;
    return i + 1 <= t0 ? 0 : (i + 1 - t0 < nt ? i + 1 - t0 : nt);
}

/* ---- internal: the shared kernel (cpu_gdn.c) ----
 * C[r, c] (+)= sum_{p < pend(r)} A[r, p] * B[p, c] for r < m, c < cend(r), all double, summed
 * sequentially over p (one FMA per p on the SIMD paths) into C (accum: starting from C's value,
 * else from 0). The callers hold fp32 values in double arrays, so those products are exact.
 *   ncols must be a multiple of 8. B is stored in panels of CLEF_MIX_NCOL columns (the last one
 *   may be partly used):
 *   B[p, c] at B + (c / NCOL) * bpanel + p * ldb + c % NCOL (row-major B: bpanel = NCOL;
 *   packed panels: ldb = NCOL, bpanel = rows * NCOL, read sequentially).
 *   Rows up to the next multiple of CLEF_MIX_MR past m are READ from A (never stored in C), so
 *   A needs that slack.
 *   trip >= 0: pend(r) = min(P, rbase + r + trip) (a lower-triangular A); the values of A at
 *   p >= pend(r) inside a block of rows must be finite zeros (they may be read).
 *   tric >= 0: only columns c < round_up(rbase + r + tric, CLEF_MIX_NCOL) need be computed
 *   (a lower-triangular C); others may be left unwritten. */
#define CLEF_MIX_MR 6
#define CLEF_MIX_NCOL 32
void clef_mix_gemm(double *C, size_t ldc, const double *A, size_t lda, const double *B,
                   size_t ldb, size_t bpanel, size_t m, size_t P, size_t ncols, long trip, long tric,
                   size_t rbase, int accum);
/* "avx512", "avx2" or "generic": the kernel clef_mix_gemm runs on this CPU. */
const char *clef_mix_isa(void);

/* Dot product of two fp32 vectors, accumulated in double (products of floats are exact in
 * double) with four interleaved partial sums in a fixed order (the CPU backend's reference sums). */
static inline double dot_d(const float *a, const float *b, size_t n) {
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    size_t k = 0;
    for (; k + 4 <= n; k += 4) {
        s0 += (double)a[k] * b[k];
        s1 += (double)a[k + 1] * b[k + 1];
        s2 += (double)a[k + 2] * b[k + 2];
        s3 += (double)a[k + 3] * b[k + 3];
    }
    for (; k < n; k++) s0 += (double)a[k] * b[k];
    return (s0 + s1) + (s2 + s3);
}

#endif
