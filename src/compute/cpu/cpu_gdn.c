/* Gated DeltaNet ops of the CPU backend (see cpu_mixers.h): conv1d_silu, l2norm, gated_rmsnorm,
 * the chunked gated delta rule (model.md §4.4.6), and the double-accumulation kernel
 * clef_mix_gemm that the delta rule and attention share. */
/* Elementwise loops are vectorized (the cost model of -O3); no expression is contracted into an
 * FMA except inside the kernel, which asks for it (see gemm_avx512). */
#pragma GCC optimize("vect-cost-model=dynamic", "fp-contract=off")

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu_features.h"
#include "compute/cpu/cpu_mixers.h"
#include "compute/cpu/cpu_simd.h"

static int nworkers(clef_pool *p) { return p ? clef_pool_size(p) : 1; }
static inline float siluf_(float x) { return x / (1.0f + expf(-x)); }

static void load_f32(const clef_tensor *t, size_t off, size_t n, float *dst) {
    if (t->dtype == CLEF_ST_F32) {
        memcpy(dst, (const float *)t->data + off, n * sizeof(float));
        return;
    }
    for (size_t i = 0; i < n; i++) dst[i] = clef_tensor_f32_at(t, (int64_t)(off + i));
}

/* ================================================================ the shared kernel */

typedef double vd8 __attribute__((vector_size(64)));
typedef double vd8u __attribute__((vector_size(64), aligned(8), may_alias)); /* unaligned access */

static inline size_t rup(size_t x, size_t m) { return (x + m - 1) / m * m; }

/* Register tiles of MR rows x NV vectors of 8 doubles, written out variable by variable (an array
 * of 24 vectors would live on the stack). Both operands are double in memory, so the inner loop is
 * NV vector loads of B, MR broadcast loads of A and MR * NV FMAs. */
#define LD(p) (*(const vd8u *)(p))
#define ST(p, x) (*(vd8u *)(p) = (x))

/* per-row pieces for NV = 4 */
#define R4_DECL(r) vd8 c##r##0, c##r##1, c##r##2, c##r##3;
#define R4_INIT(r) if (accum && r0 + r < m) { const double *cr = C + (r0 + r) * ldc + c0; \
    c##r##0 = LD(cr); c##r##1 = LD(cr + 8); c##r##2 = LD(cr + 16); c##r##3 = LD(cr + 24); } \
    else { c##r##0 = c##r##1 = c##r##2 = c##r##3 = z; }
#define R4_FMA(r) { double a = ab[r * lda + p]; c##r##0 += b0 * a; c##r##1 += b1 * a; \
    c##r##2 += b2 * a; c##r##3 += b3 * a; }
#define R4_STORE(r) if (r0 + r < m) { double *cr = C + (r0 + r) * ldc + c0; \
    ST(cr, c##r##0); ST(cr + 8, c##r##1); ST(cr + 16, c##r##2); ST(cr + 24, c##r##3); }
/* per-row pieces for NV = 2 */
#define R2_DECL(r) vd8 c##r##0, c##r##1;
#define R2_INIT(r) if (accum && r0 + r < m) { const double *cr = C + (r0 + r) * ldc + c0; \
    c##r##0 = LD(cr); c##r##1 = LD(cr + 8); } else { c##r##0 = c##r##1 = z; }
#define R2_FMA(r) { double a = ab[r * lda + p]; c##r##0 += b0 * a; c##r##1 += b1 * a; }
#define R2_STORE(r) if (r0 + r < m) { double *cr = C + (r0 + r) * ldc + c0; \
    ST(cr, c##r##0); ST(cr + 8, c##r##1); }

/* per-row pieces for NV = 1 (the 8-column tail) */
#define R1_DECL(r) vd8 c##r##0;
#define R1_INIT(r) if (accum && r0 + r < m) c##r##0 = LD(C + (r0 + r) * ldc + c0); else c##r##0 = z;
#define R1_FMA(r) { double a = ab[r * lda + p]; c##r##0 += b0 * a; }
#define R1_STORE(r) if (r0 + r < m) ST(C + (r0 + r) * ldc + c0, c##r##0);

#define ROWS6(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define ROWS2(X) X(0) X(1)

/* The loop nest shared by both tiles: ROWS is the row list, NV the vectors per row. Column panels
 * outermost: one panel of B (P rows x NV*8 columns) stays in L1 while every block of rows passes
 * over it; A is read by broadcasts, 8 consecutive p per cache line. */
#define GEMM_NEST(MR, NV, ROWS, DECL, INIT, FMA, STORE, LOADB)                                    \
    for (size_t c0 = cbeg; c0 + NV * 8 <= cend; c0 += NV * 8) {                                    \
        for (size_t r0 = 0; r0 < m; r0 += MR) {                                                    \
            size_t rlast = rbase + (r0 + MR < m ? r0 + MR : m) - 1;                                \
            size_t pend = P;                                                                       \
            if (trip >= 0 && rlast + (size_t)trip < pend) pend = rlast + (size_t)trip;             \
            if (tric >= 0 && c0 >= rup(rlast + (size_t)tric, CLEF_MIX_NCOL)) continue;             \
            const double *ab = A + r0 * lda;                                                       \
            ROWS(DECL)                                                                             \
            ROWS(INIT)                                                                             \
            const double *bp = B + c0 / CLEF_MIX_NCOL * bpanel + c0 % CLEF_MIX_NCOL;               \
            for (size_t p = 0; p < pend; p++, bp += ldb) {                                         \
                LOADB                                                                              \
                ROWS(FMA)                                                                          \
            }                                                                                      \
            ROWS(STORE)                                                                            \
        }                                                                                          \
    }

#define GEMM_ARGS double *C, size_t ldc, const double *A, size_t lda, const double *B, size_t ldb, \
    size_t bpanel, size_t m, size_t P, size_t ncols, long trip, long tric, size_t rbase, int accum
#define GEMM_PASS C, ldc, A, lda, B, ldb, bpanel, m, P, ncols, trip, tric, rbase, accum

/* Columns [0, ncols): full tiles of NV vectors, then 8-column tiles for the rest (attention's
 * head_dim 72 in the vision tower is 2 x 32 + 8: computing the padding to 96 cost a third more).
 * Every element is the same sequence of FMAs in either tile, so the tiling changes no bit. */
#define GEMM_TILES(MR, NV, ROWS, DECL, INIT, FMA, STORE, LOADB)                                    \
    const vd8 z = {0, 0, 0, 0, 0, 0, 0, 0};                                                        \
    size_t cbeg = 0, cend = ncols / (NV * 8) * (NV * 8);                                           \
    { GEMM_NEST(MR, NV, ROWS, DECL, INIT, FMA, STORE, LOADB) }                                     \
    cbeg = cend; cend = ncols;                                                                     \
    { GEMM_NEST(MR, 1, ROWS, R1_DECL, R1_INIT, R1_FMA, R1_STORE, vd8 b0 = LD(bp);) }

/* 6 x 32: 24 accumulators, 4 B vectors, broadcasts from memory (AVX-512: 32 registers) */
/* The kernel's products are of fp32 values held in double (exact), or attention's p * v, so fusing
 * them into the additions changes no bit in the first case; the SIMD paths ask for FMA. */
__attribute__((target("avx512f,avx512vl,avx512dq,avx2,fma"), optimize("fp-contract=fast")))
static void gemm_avx512(GEMM_ARGS) {
    GEMM_TILES((size_t)6, (size_t)4, ROWS6, R4_DECL, R4_INIT, R4_FMA, R4_STORE,
               vd8 b0 = LD(bp); vd8 b1 = LD(bp + 8); vd8 b2 = LD(bp + 16); vd8 b3 = LD(bp + 24);)
}
/* 6 x 8 (a vd8 is two ymm registers here): 12 accumulators, 2 B registers and a broadcast of AVX2's
 * 16; 12 FMAs per 8 loads, and 12 independent chains to cover the FMA latency (a 2 x 16 tile had 8
 * FMAs per 6 loads and 8 chains) */
__attribute__((target("avx2,fma"), optimize("fp-contract=fast"))) static void gemm_avx2(GEMM_ARGS) {
    GEMM_TILES((size_t)6, (size_t)1, ROWS6, R1_DECL, R1_INIT, R1_FMA, R1_STORE, vd8 b0 = LD(bp);)
}
static void gemm_generic(GEMM_ARGS) {
    GEMM_TILES((size_t)2, (size_t)2, ROWS2, R2_DECL, R2_INIT, R2_FMA, R2_STORE,
               vd8 b0 = LD(bp); vd8 b1 = LD(bp + 8);)
}

typedef void (*gemm_fn)(GEMM_ARGS);
static gemm_fn g_gemm;
static const char *g_isa;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static void pick(void) {
    if (clef_cpu_has(CLEF_CPU_AVX512F | CLEF_CPU_AVX512VL | CLEF_CPU_AVX512DQ | CLEF_CPU_AVX2 |
                     CLEF_CPU_FMA)) {
        g_gemm = gemm_avx512;
        g_isa = "avx512";
    } else if (clef_cpu_has(CLEF_CPU_AVX2 | CLEF_CPU_FMA)) {
        g_gemm = gemm_avx2;
        g_isa = "avx2";
    } else {
        g_gemm = gemm_generic;
        g_isa = "generic";
    }
}
const char *clef_mix_isa(void) {
    pthread_once(&g_once, pick);
    return g_isa;
}
void clef_mix_gemm(GEMM_ARGS) {
    pthread_once(&g_once, pick);
    if (m == 0) return;
    g_gemm(GEMM_PASS);
}

/* ================================================================ conv1d + SiLU */

typedef struct { float *y; const float *x; size_t T, C, K; const float *wt; size_t first; } conv_ctx;

/* One output row t of x's rows [0, T): its K taps in tap order, summed in double (as the
 * reference), from the first tap inside x (k0). */
static void conv_row(const conv_ctx *c, size_t t, size_t k0, const clef_simd_loops *simd) {
    const size_t K = c->K, C = c->C;
    float *yr = c->y + t * C;
    if (simd) { /* the same sums and roundings, 16 (AVX-512) or 8 (AVX2) channels at a time */
        simd->conv_silu_row(yr, c->x, t, C, c->wt, K, k0);
        return;
    }
    for (size_t ch = 0; ch < C; ch++) {
        double s = 0;
        for (size_t k = k0; k < K; k++) s += (double)c->wt[k * C + ch] * c->x[(t + k + 1 - K) * C + ch];
        yr[ch] = siluf_((float)s);
    }
}

/* Rows [first, T) of one segment (taps before its first row are skipped: a zero history). */
static void conv_fn(void *c_, size_t b, size_t e, int worker) {
    (void)worker;
    conv_ctx *c = c_;
    const size_t K = c->K;
    const clef_simd_loops *simd = clef_simd_loops_here();
    for (size_t t = b > c->first ? b : c->first; t < e; t++) conv_row(c, t, t + 1 >= K ? 0 : K - 1 - t, simd);
}

/* The transposed weights [K, C] the row loops read. */
static float *conv_weights(const clef_tensor *w, size_t C, size_t *K) {
    *K = (size_t)(w->numel / w->shape[0]);
    size_t nwt = C * *K > 0 ? C * *K : 1;
    float *wv = malloc(nwt * sizeof(float)), *wt = malloc(nwt * sizeof(float));
    if (!wv || !wt) { free(wv); free(wt); return NULL; }
    load_f32(w, 0, C * *K, wv);
    for (size_t ch = 0; ch < C; ch++)
        for (size_t k = 0; k < *K; k++) wt[k * C + ch] = wv[ch * *K + k];
    free(wv);
    return wt;
}

int clef_cpu_conv1d_silu(clef_pool *pool, float *y, const float *x, size_t T, size_t C,
                         const clef_tensor *w) {
    clef_seg s = {0, T};
    return clef_cpu_conv1d_silu_segs(pool, y, x, C, w, &s, 1, NULL);
}

/* Segment by segment. A segment resuming from a window computes its first K-1 rows from a small
 * buffer [window | its first rows], with every tap inside it: the same products in the same order
 * as the uninterrupted run, whose rows there had all their taps too. */
int clef_cpu_conv1d_silu_segs(clef_pool *pool, float *y, const float *x, size_t C, const clef_tensor *w,
                              const clef_seg *segs, size_t nseg, const clef_seg_state *st) {
    size_t K;
    float *wt = conv_weights(w, C, &K);
    if (!wt) return -1;
    const size_t H = K - 1; /* window rows */
    float *tmp = NULL, *tmpy = NULL;
    int rc = 0;
    for (size_t si = 0; si < nseg && rc == 0; si++) {
        const clef_seg *sg = &segs[si];
        const clef_seg_state *ss = st ? &st[si] : NULL;
        const float *xs = x + sg->row0 * C;
        float *ys = y + sg->row0 * C;
        size_t first = 0; /* rows computed from the window buffer */
        if (ss && ss->in && H > 0 && sg->n > 0) {
            first = sg->n < H ? sg->n : H;
            if (!tmp) {
                tmp = malloc((2 * H) * C * sizeof(float));
                tmpy = malloc((2 * H) * C * sizeof(float));
                if (!tmp || !tmpy) { rc = -1; break; }
            }
            memcpy(tmp, ss->in, H * C * sizeof(float));
            memcpy(tmp + H * C, xs, first * C * sizeof(float));
            conv_ctx cw = {tmpy, tmp, H + first, C, K, wt, 0};
            const clef_simd_loops *simd = clef_simd_loops_here();
            for (size_t t = 0; t < first; t++) conv_row(&cw, H + t, 0, simd);
            memcpy(ys, tmpy + H * C, first * C * sizeof(float));
        }
        if (sg->n > first) {
            conv_ctx c = {ys, xs, sg->n, C, K, wt, first};
            clef_pool_for(pool, sg->n, 4, conv_fn, &c);
        }
        if (ss && ss->out && H > 0) { /* the window before row snap */
            for (size_t j = 0; j < H; j++) {
                long idx = (long)ss->snap - (long)H + (long)j; /* segment-local input row */
                float *dst = ss->out + j * C;
                if (idx >= 0) memcpy(dst, xs + (size_t)idx * C, C * sizeof(float));
                else if (ss->in) memcpy(dst, ss->in + (size_t)((long)H + idx) * C, C * sizeof(float));
                else memset(dst, 0, C * sizeof(float));
            }
        }
    }
    free(tmp);
    free(tmpy);
    free(wt);
    return rc;
}

/* ================================================================ norms */

typedef struct { float *y; const float *x, *z, *w; size_t ld, D; float eps, scale; } nrm_ctx;

static void l2_fn(void *c_, size_t b, size_t e, int worker) {
    (void)worker;
    nrm_ctx *c = c_;
    const clef_simd_loops *L = clef_simd_loops_here();
    if (L && 7 * c->ld + c->D <= (size_t)INT32_MAX) { /* 8 rows at once, the same bits */
        for (; e - b >= 8; b += 8) {
            double ss[8];
            L->sumsq8(ss, c->y + b * c->ld, c->ld, c->D);
            for (size_t j = 0; j < 8; j++) {
                float *x = c->y + (b + j) * c->ld;
                L->l2_scale(x, x, (float)(1.0 / sqrt(ss[j] + (double)c->eps)), c->scale, c->D);
            }
        }
    }
    for (size_t r = b; r < e; r++) {
        float *x = c->y + r * c->ld;
        double ss = 0;
        for (size_t d = 0; d < c->D; d++) ss += (double)x[d] * x[d];
        float inv = (float)(1.0 / sqrt(ss + (double)c->eps));
        for (size_t d = 0; d < c->D; d++) {
            float t = x[d] * inv;
            x[d] = c->scale != 1.0f ? t * c->scale : t;
        }
    }
}

void clef_cpu_l2norm(clef_pool *pool, float *x, size_t ld, size_t rows, size_t D, float eps,
                     float scale) {
    nrm_ctx c = {x, x, NULL, NULL, ld, D, eps, scale};
    clef_pool_for(pool, rows, 16, l2_fn, &c);
}

static void gated_fn(void *c_, size_t b, size_t e, int worker) {
    (void)worker;
    nrm_ctx *c = c_;
    const size_t D = c->D;
    const clef_simd_loops *L = clef_simd_loops_here();
    if (L && 8 * D <= (size_t)INT32_MAX) { /* 8 rows at once, the same bits */
        for (; e - b >= 8; b += 8) {
            double ss[8];
            L->sumsq8(ss, c->x + b * D, D, D);
            for (size_t j = 0; j < 8; j++) {
                float inv = (float)(1.0 / sqrt(ss[j] / (double)D + (double)c->eps));
                L->gated_scale(c->y + (b + j) * D, c->x + (b + j) * D, c->z + (b + j) * D, inv, c->w, D);
            }
        }
    }
    for (size_t r = b; r < e; r++) {
        const float *x = c->x + r * D, *z = c->z + r * D;
        float *y = c->y + r * D;
        double ss = 0;
        for (size_t d = 0; d < D; d++) ss += (double)x[d] * x[d];
        float inv = (float)(1.0 / sqrt(ss / (double)D + (double)c->eps));
        for (size_t d = 0; d < D; d++) {
            float n = c->w[d] * (x[d] * inv);
            y[d] = n * siluf_(z[d]);
        }
    }
}

int clef_cpu_gated_rmsnorm(clef_pool *pool, float *y, const float *x, const float *z, size_t rows,
                           size_t D, const clef_tensor *w, float eps) {
    float *wv = malloc((D ? D : 1) * sizeof(float));
    if (!wv) return -1;
    load_f32(w, 0, D, wv);
    nrm_ctx c = {y, x, z, wv, D, D, eps, 1.0f};
    clef_pool_for(pool, rows, 16, gated_fn, &c);
    free(wv);
    return 0;
}

/* ================================================================ delta rule (fast) */

/* One v-head per work item; per chunk of n <= C rows (model.md §4.4.6, the same roundings as the
 * scalar reference, tests/unit/ref_mixers.c: fp32 values of Kβ, Vβ, M, Intra, U, W, Qd, Kd, Vn, R, double sums):
 *   M = (Kβ k̂ᵀ) ⊙ D (strict lower, stored negated), Intra = (q̃ k̂ᵀ) ⊙ D (lower incl. diagonal);
 *   [U | W] = (I + L)⁻¹ [Vβ | Kβ ⊙ e^Γ]  (blocked forward substitution: rows before the block by
 *   the kernel, rows inside it one by one; every row still sums its terms in index order);
 *   Vn = U − W·R;  O = Qd·R + Intra·Vn;  R = λR + Kdᵀ·Vn.
 * The fp32 values are held in double arrays (exactly) so the kernel reads both operands without
 * conversions; rows are padded to CLEF_MIX_NCOL columns with zeros. */
typedef struct dfast_ctx_ {
    float *o; const float *q, *k, *v, *beta, *g;
    size_t T, Hk, Hv, dk, dv, C;
    size_t dkp, dvp, cp, w2, rows, d1; /* padded sizes */
    double *ds; float *fs; size_t dper, fper;
    double *Rall; /* the state of every head, [Hv][dk][dvp + 8] */
    const clef_seg *segs; size_t nseg; const clef_seg_state *st;
    void (*chunk)(const struct dfast_ctx_ *c, size_t h, size_t t0, size_t tend, int update, double *R,
                  double *ds, float *G);
} dfast_ctx;

/* Chunk [t0, min(t0 + C, tend)) of v-head h, with the head's state R (kept between chunks by the
 * caller; updated when `update`: not after a segment's last chunk unless its state is wanted). */
static inline __attribute__((always_inline)) void dfast_chunk(const dfast_ctx *c, size_t h, size_t t0,
                                                               size_t tend, int update, double *R,
                                                               double *ds, float *G) {
    const size_t C = c->C, dk = c->dk, dv = c->dv, T = tend, rows = c->rows;
    /* column counts for the kernel (multiples of NCOL) and leading dimensions (one cache line
     * more, so that columns of a buffer do not all fall into the same few L1 sets) */
    const size_t nkc = c->dkp, nvc = c->dvp, ncc = c->cp, nwc = c->w2;
    const size_t ldR = nvc + 8, ldQ = nkc + 8, ldKT = ncc + 8, ldUW = nwc + 8, ldVn = nvc + 8,
                 ldM = ncc + 8;
    const size_t kh = h / (c->Hv / c->Hk);
    double *Q = ds;          ds += rows * ldQ; /* q~, later Qd */
    double *Kb = ds;         ds += rows * ldQ; /* k^ * beta */
    double *KT = ds;         ds += nkc * ldKT; /* k^ transposed [dk, C] */
    double *KdT = ds;        ds += rup(nkc, CLEF_MIX_MR) * ldKT; /* Kd transposed (an A: row slack) */
    double *UW = ds;         ds += rows * ldUW; /* [Vb | Kb e^G] -> [U | W] */
    double *Vn = ds;         ds += rows * ldVn;
    double *Mn = ds;         ds += rows * ldM; /* -M, zero on and above the diagonal */
    double *In = ds;         ds += rows * ldM; /* Intra, zero above the diagonal */
    double *D1 = ds;         ds += c->d1;
    double *D2 = ds;
    const size_t ldq = c->Hk * dk, ldv = c->Hv * dv, ldg = c->Hv;
    {
        size_t n = T - t0 < C ? T - t0 : C;
        double run = 0;
        for (size_t r = 0; r < n; r++) {
            size_t t = t0 + r;
            const float *qr = c->q + t * ldq + kh * dk, *kr = c->k + t * ldq + kh * dk;
            const float *vr = c->v + t * ldv + h * dv;
            float be = c->beta[t * ldg + h];
            for (size_t i = 0; i < dk; i++) {
                Q[r * ldQ + i] = qr[i];
                Kb[r * ldQ + i] = kr[i] * be;
                KT[i * ldKT + r] = kr[i];
            }
            for (size_t j = 0; j < dv; j++) UW[r * ldUW + j] = vr[j] * be;
            run += c->g[t * ldg + h];
            G[r] = (float)run;
        }
        for (size_t r = n; r < C; r++) /* columns of a short chunk */
            for (size_t i = 0; i < dk; i++) KT[i * ldKT + r] = 0.0;
        /* M and Intra (lower triangles of C x C) */
        clef_mix_gemm(D1, ldM, Kb, ldQ, KT, ldKT, CLEF_MIX_NCOL, n, dk, ncc, -1, 1, 0, 0);
        clef_mix_gemm(D2, ldM, Q, ldQ, KT, ldKT, CLEF_MIX_NCOL, n, dk, ncc, -1, 1, 0, 0);
        for (size_t r = 0; r < n; r++) {
            for (size_t s = 0; s <= r; s++) {
                float d = expf(G[r] - G[s]);
                Mn[r * ldM + s] = s < r ? -((float)D1[r * ldM + s] * d) : 0.0f;
                In[r * ldM + s] = (float)D2[r * ldM + s] * d;
            }
            for (size_t s = r + 1; s < ncc; s++) Mn[r * ldM + s] = In[r * ldM + s] = 0.0;
        }
        /* rhs of the second solve */
        for (size_t r = 0; r < n; r++) {
            float eg = expf(G[r]);
            for (size_t i = 0; i < dk; i++) UW[r * ldUW + nvc + i] = (float)Kb[r * ldQ + i] * eg;
        }
        /* forward substitution on [Vb | Kb e^G], blocks of CLEF_MIX_MR rows */
        memcpy(D1, UW, n * ldUW * sizeof(double));
        for (size_t b0 = 0; b0 < n; b0 += CLEF_MIX_MR) {
            size_t b1 = b0 + CLEF_MIX_MR < n ? b0 + CLEF_MIX_MR : n;
            if (b0 > 0)
                clef_mix_gemm(D1 + b0 * ldUW, ldUW, Mn + b0 * ldM, ldM, UW, ldUW, CLEF_MIX_NCOL, b1 - b0, b0,
                              nwc, -1, -1, 0, 1);
            for (size_t r = b0; r < b1; r++) {
                double *dr = D1 + r * ldUW;
                for (size_t s = b0; s < r; s++) {
                    double a = Mn[r * ldM + s];
                    const double *us = UW + s * ldUW;
                    for (size_t j = 0; j < nwc; j++) dr[j] += a * us[j];
                }
                for (size_t j = 0; j < nwc; j++) UW[r * ldUW + j] = (float)dr[j];
            }
        }
        /* Qd, Kd^T, lambda */
        float Gl = G[n - 1], lam = expf(Gl);
        for (size_t r = 0; r < n; r++) {
            float eq = expf(G[r]), ek = expf(Gl - G[r]);
            for (size_t i = 0; i < dk; i++) {
                Q[r * ldQ + i] = (float)Q[r * ldQ + i] * eq;
                KdT[i * ldKT + r] = (float)KT[i * ldKT + r] * ek;
            }
        }
        /* Vn = U - W R */
        clef_mix_gemm(D1, ldVn, UW + nvc, ldUW, R, ldR, CLEF_MIX_NCOL, n, dk, nvc, -1, -1, 0, 0);
        for (size_t r = 0; r < n; r++)
            for (size_t j = 0; j < nvc; j++) Vn[r * ldVn + j] = (float)UW[r * ldUW + j] - (float)D1[r * ldVn + j];
        /* O = Qd R + Intra Vn */
        clef_mix_gemm(D1, ldVn, Q, ldQ, R, ldR, CLEF_MIX_NCOL, n, dk, nvc, -1, -1, 0, 0);
        clef_mix_gemm(D2, ldVn, In, ldM, Vn, ldVn, CLEF_MIX_NCOL, n, n, nvc, 1, -1, 0, 0);
        for (size_t r = 0; r < n; r++) {
            float *orow = c->o + (t0 + r) * ldv + h * dv;
            for (size_t j = 0; j < dv; j++) orow[j] = (float)D1[r * ldVn + j] + (float)D2[r * ldVn + j];
        }
        /* R = lambda R + Kd^T Vn */
        if (update) {
            clef_mix_gemm(D1, ldR, KdT, ldKT, Vn, ldVn, CLEF_MIX_NCOL, dk, n, nvc, -1, -1, 0, 0);
            for (size_t i = 0; i < dk; i++)
                for (size_t j = 0; j < nvc; j++)
                    R[i * ldR + j] = (float)R[i * ldR + j] * lam + (float)D1[i * ldR + j];
        }
    }
}

/* The chunk's elementwise work compiled for each ISA (the kernel is dispatched on its own). */
#define CHUNK_ARGS const dfast_ctx *c, size_t h, size_t t0, size_t tend, int update, double *R, double *ds, float *G
__attribute__((target("avx512f,avx512vl,avx512dq,avx2,fma"))) static void chunk_avx512(CHUNK_ARGS) {
    dfast_chunk(c, h, t0, tend, update, R, ds, G);
}
__attribute__((target("avx2,fma"))) static void chunk_avx2(CHUNK_ARGS) { dfast_chunk(c, h, t0, tend, update, R, ds, G); }
static void chunk_generic(CHUNK_ARGS) { dfast_chunk(c, h, t0, tend, update, R, ds, G); }

/* A worker runs its heads chunk by chunk (every head of its range on chunk 0, then on chunk 1, ...):
 * the rows of one token are contiguous across heads, so this reads q, k, v and writes o in long
 * runs instead of one 512-byte piece per 8-16 KB; each head keeps its state R between chunks. */
static void dfast_fn(void *c_, size_t b, size_t e, int worker) {
    dfast_ctx *c = c_;
    double *ds = c->ds + (size_t)worker * c->dper;
    float *G = c->fs + (size_t)worker * c->fper;
    const size_t rsz = c->dkp * (c->dvp + 8), ldR = c->dvp + 8, dk = c->dk, dv = c->dv;
    /* the padding of the scratch rows stays zero: only real columns are ever written */
    memset(ds, 0, c->dper * sizeof(double));
    for (size_t si = 0; si < c->nseg; si++) {
        const clef_seg *sg = &c->segs[si];
        const clef_seg_state *ss = c->st ? &c->st[si] : NULL;
        const size_t tend = sg->row0 + sg->n, snap = ss && ss->out ? sg->row0 + ss->snap : 0;
        for (size_t h = b; h < e; h++) { /* the starting state: zeros, or fp32 values held in double */
            double *R = c->Rall + h * rsz;
            memset(R, 0, rsz * sizeof(double));
            if (ss && ss->in)
                for (size_t i = 0; i < dk; i++)
                    for (size_t j = 0; j < dv; j++) R[i * ldR + j] = ss->in[(h * dk + i) * dv + j];
        }
        for (size_t t0 = sg->row0; t0 < tend; t0 += c->C) {
            size_t t1 = t0 + c->C < tend ? t0 + c->C : tend;
            int update = t1 < tend || t1 == snap;
            for (size_t h = b; h < e; h++) c->chunk(c, h, t0, tend, update, c->Rall + h * rsz, ds, G);
            if (t1 == snap) /* R holds fp32 values: the copy is exact */
                for (size_t h = b; h < e; h++) {
                    const double *R = c->Rall + h * rsz;
                    for (size_t i = 0; i < dk; i++)
                        for (size_t j = 0; j < dv; j++) ss->out[(h * dk + i) * dv + j] = (float)R[i * ldR + j];
                }
        }
    }
}

int clef_cpu_delta_rule(clef_pool *pool, float *o, const float *q, const float *k, const float *v,
                        const float *beta, const float *g, size_t T, size_t Hk, size_t Hv,
                        size_t dk, size_t dv, size_t chunk) {
    clef_seg s = {0, T};
    return clef_cpu_delta_rule_segs(pool, o, q, k, v, beta, g, Hk, Hv, dk, dv, chunk, &s, 1, NULL);
}

int clef_cpu_delta_rule_segs(clef_pool *pool, float *o, const float *q, const float *k, const float *v,
                             const float *beta, const float *g, size_t Hk, size_t Hv, size_t dk, size_t dv,
                             size_t chunk, const clef_seg *segs, size_t nseg, const clef_seg_state *st) {
    size_t T = 0;
    for (size_t si = 0; si < nseg; si++) {
        if (st && st[si].out && (st[si].snap == 0 || st[si].snap > segs[si].n)) return -1;
        if (segs[si].row0 + segs[si].n > T) T = segs[si].row0 + segs[si].n;
    }
    if (T == 0 || Hv == 0) return 0;
    size_t C = chunk ? chunk : 64;
    for (size_t si = 0; si < nseg; si++)
        if (st && st[si].out && st[si].snap % C != 0 && st[si].snap != segs[si].n) return -1;
    dfast_ctx c = {o, q, k, v, beta, g, T, Hk, Hv, dk, dv, C, 0, 0, 0, 0, 0, 0, NULL, NULL, 0, 0, NULL,
                   segs, nseg, st, NULL};
    const char *isa = clef_mix_isa();
    c.chunk = !strcmp(isa, "avx512") ? chunk_avx512 : !strcmp(isa, "avx2") ? chunk_avx2 : chunk_generic;
    c.dkp = rup(dk ? dk : 1, CLEF_MIX_NCOL);
    c.dvp = rup(dv ? dv : 1, CLEF_MIX_NCOL);
    c.cp = rup(C, CLEF_MIX_NCOL);
    c.w2 = c.dvp + c.dkp;
    c.rows = rup(C, CLEF_MIX_MR) + CLEF_MIX_MR;
    if (c.rows < c.cp) c.rows = c.cp;
    {
        const size_t ldR = c.dvp + 8, ldQ = c.dkp + 8, ldKT = c.cp + 8, ldUW = c.w2 + 8, ldVn = c.dvp + 8,
                     ldM = c.cp + 8;
        size_t d1 = c.rows * ldUW;
        if (c.rows * ldM > d1) d1 = c.rows * ldM;
        if (c.dkp * ldR > d1) d1 = c.dkp * ldR;
        c.d1 = d1;
        c.dper = 2 * c.rows * ldQ + c.dkp * ldKT + rup(c.dkp, CLEF_MIX_MR) * ldKT +
                 c.rows * ldUW + c.rows * ldVn + 2 * c.rows * ldM + c.d1 +
                 c.rows * (ldM > ldVn ? ldM : ldVn) + 8;
    }
    c.fper = C + 16;
    int nw = nworkers(pool);
    c.ds = malloc((size_t)nw * c.dper * sizeof(double));
    c.fs = malloc((size_t)nw * c.fper * sizeof(float));
    c.Rall = calloc(Hv * c.dkp * (c.dvp + 8), sizeof(double));
    if (!c.fs || !c.ds || !c.Rall) { free(c.fs); free(c.ds); free(c.Rall); return -1; }
    clef_pool_for(pool, Hv, 1, dfast_fn, &c);
    free(c.fs);
    free(c.ds);
    free(c.Rall);
    return 0;
}
