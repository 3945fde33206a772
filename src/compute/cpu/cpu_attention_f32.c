/* Softmax attention with fp32 products: the default path's attention on CPUs with AVX-512
 * (cpu_ops.c chooses it; CPUs with AVX2 + FMA but no AVX-512 run cpu_attention_f32_avx2.c, the
 * same operations per element in the same order, so the same bits; the parity path,
 * CLEF_LINEAR=double, keeps cpu_attention.c's double accumulation).
 *
 * Why: the vision tower attends over every patch of an image in each of its 27 blocks, O(patches²)
 * (8,160 patches for a 1920 x 1080 image), and there the double products were two thirds of the
 * time; fp32 FMA has twice the lanes. The arithmetic is then the reference's class (torch's SDPA
 * runs in fp32): S = Q·Kᵀ and O += P·V summed in fp32 in a fixed order (k, then keys, ascending),
 * the softmax's running max and sum in double, p = expf(s - m) with glibc's expf
 * (clef_simd_expf). Measured against the double path: max|d| / max 2.3e-6 at 1,200 patches, 3.5e-6
 * at 8,160 (bench_mixers --vision; docs/performance.md "Attention at the vision tower's shape"); the
 * tower, final-norm and probability bounds of test_tiny_vision and test_real4 hold with it.
 *
 * Structure as cpu_attention.c: work item = (kv head j, block of query rows, all query heads of
 * the group), keys in tiles of 64, online softmax, per kv head K (transposed) and V copied once
 * into tile-major panels. Each output element is computed inside one work item in a fixed order,
 * so the bits depend neither on the thread count nor on the blocking. */
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compute/cpu/cpu_mixers.h"
#include "compute/cpu/cpu_simd.h"

#define TGT __attribute__((target("avx512f,avx512vl,avx512dq,avx2,fma"), optimize("fp-contract=fast")))
#define KB 64        /* keys per tile */
#define ROWS 256     /* target query rows per work item (all heads of the group) */
#define MR 6         /* the kernel's register tile: 6 rows x 64 (or 16) columns */

static inline size_t rup(size_t x, size_t m) { return (x + m - 1) / m * m; }

typedef float vf __attribute__((vector_size(64)));
typedef float vfu __attribute__((vector_size(64), aligned(4), may_alias));
#define LD(p) (*(const vfu *)(p))
#define ST(p, x) (*(vfu *)(p) = (x))

/* C[r, c] (+)= sum_{p < P} A[r, p] B[p, c] for r < m, c < ncols (a multiple of 16), one FMA per p in
 * p order per element; B row-major (ldb). Rows up to the next multiple of MR past m are read from
 * A (never stored), so A needs that slack. Written out per accumulator as cpu_gdn.c's kernel. */
#define R4_DECL(r) vf c##r##0, c##r##1, c##r##2, c##r##3;
#define R4_INIT(r) if (accum && r0 + r < m) { const float *cr = C + (r0 + r) * ldc + c0; \
    c##r##0 = LD(cr); c##r##1 = LD(cr + 16); c##r##2 = LD(cr + 32); c##r##3 = LD(cr + 48); } \
    else { c##r##0 = c##r##1 = c##r##2 = c##r##3 = z; }
#define R4_FMA(r) { float a = ab[r * lda + p]; c##r##0 += b0 * a; c##r##1 += b1 * a; \
    c##r##2 += b2 * a; c##r##3 += b3 * a; }
#define R4_STORE(r) if (r0 + r < m) { float *cr = C + (r0 + r) * ldc + c0; \
    ST(cr, c##r##0); ST(cr + 16, c##r##1); ST(cr + 32, c##r##2); ST(cr + 48, c##r##3); }
#define R1_DECL(r) vf c##r##0;
#define R1_INIT(r) if (accum && r0 + r < m) c##r##0 = LD(C + (r0 + r) * ldc + c0); else c##r##0 = z;
#define R1_FMA(r) { float a = ab[r * lda + p]; c##r##0 += b0 * a; }
#define R1_STORE(r) if (r0 + r < m) ST(C + (r0 + r) * ldc + c0, c##r##0);
#define ROWS6(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define NEST(NV, DECL, INIT, FMA, STORE, LOADB)                                                    \
    for (; c0 + NV * 16 <= ncols; c0 += NV * 16)                                                   \
        for (size_t r0 = 0; r0 < m; r0 += MR) {                                                    \
            const float *ab = A + r0 * lda;                                                        \
            ROWS6(DECL)                                                                            \
            ROWS6(INIT)                                                                            \
            const float *bp = B + c0;                                                              \
            for (size_t p = 0; p < P; p++, bp += ldb) {                                            \
                LOADB                                                                              \
                ROWS6(FMA)                                                                         \
            }                                                                                      \
            ROWS6(STORE)                                                                           \
        }

static TGT void gemm_f32(float *C, size_t ldc, const float *A, size_t lda, const float *B, size_t ldb,
                         size_t m, size_t P, size_t ncols, int accum) {
    const vf z = {0};
    size_t c0 = 0;
    NEST(4, R4_DECL, R4_INIT, R4_FMA, R4_STORE,
         vf b0 = LD(bp); vf b1 = LD(bp + 16); vf b2 = LD(bp + 32); vf b3 = LD(bp + 48);)
    NEST(1, R1_DECL, R1_INIT, R1_FMA, R1_STORE, vf b0 = LD(bp);)
}

/* The online-softmax step of one row for one tile (KB scores in s, the first nv valid): scale,
 * running max m and sum l (double), the row's output rescaled when the max grows, s := p =
 * expf(s - m) (0 past nv). NaN scores give NaN (max_ps returns its second operand for a NaN). */
static TGT void row_step(float *s, size_t nv, float scale, double *m, double *l, float *orow, size_t hp) {
    __m512 x[KB / 16], vmax = _mm512_set1_ps(-INFINITY);
    for (int i = 0; i < KB / 16; i++) {
        long left = (long)nv - 16 * i;
        __mmask16 valid = left >= 16 ? (__mmask16)0xffff : left <= 0 ? 0 : (__mmask16)((1u << left) - 1u);
        __m512 v = _mm512_mul_ps(_mm512_loadu_ps(s + 16 * i), _mm512_set1_ps(scale));
        x[i] = _mm512_mask_blend_ps(valid, _mm512_set1_ps(-INFINITY), v);
        vmax = _mm512_max_ps(vmax, x[i]);
    }
    float mt = _mm512_reduce_max_ps(vmax);
    double mn = *m > mt ? *m : mt;
    if (nv == 0 || mn == -INFINITY) {
        memset(s, 0, KB * sizeof(float));
        return;
    }
    if (mn != *m) {
        double alpha = exp(*m - mn); /* 0 when m was -inf */
        __m512 av = _mm512_set1_ps((float)alpha);
        for (size_t d = 0; d < hp; d += 16) _mm512_storeu_ps(orow + d, _mm512_mul_ps(_mm512_loadu_ps(orow + d), av));
        *l *= alpha;
        *m = mn;
    }
    float e[KB] __attribute__((aligned(64)));
    __m512 mf = _mm512_set1_ps((float)mn);
    for (int i = 0; i < KB / 16; i++) _mm512_store_ps(e + 16 * i, _mm512_sub_ps(x[i], mf));
    clef_simd_expf(s, e, KB); /* expf(-inf) = 0 for the masked keys */
    __m512d acc = _mm512_setzero_pd();
    for (int i = 0; i < KB / 8; i++) acc = _mm512_add_pd(acc, _mm512_cvtps_pd(_mm256_loadu_ps(s + 8 * i)));
    *l += _mm512_reduce_add_pd(acc);
}

typedef struct {
    float *o; const float *q, *k, *v;
    size_t ldo, ldq, ldk, ldv, Tq, Tk, nkv, hd, hp, group, qb, nblk, rows, tkp;
    size_t j;        /* the kv head of this pass */
    float *KT, *V;   /* kv head j: per key tile, Kᵀ [hd][KB] and V [KB][hp] */
    float scale; int causal;
    unsigned char *ds; size_t dper; /* per worker: Q block, S, O (float), m, l (double) */
} att32_ctx;

/* Key tiles [b, e) of kv head j into KT and V (zeros past Tk and past hd). */
static void prep_fn(void *c_, size_t b, size_t e, int worker) {
    (void)worker;
    att32_ctx *c = c_;
    const size_t hd = c->hd, hp = c->hp;
    for (size_t u = b; u < e; u++) {
        float *kt = c->KT + u * hd * KB, *vt = c->V + u * KB * hp;
        for (size_t tt = 0; tt < KB; tt++) {
            size_t t = u * KB + tt;
            const float *kr = t < c->Tk ? c->k + t * c->ldk + c->j * hd : NULL;
            const float *vr = t < c->Tk ? c->v + t * c->ldv + c->j * hd : NULL;
            for (size_t d = 0; d < hd; d++) kt[d * KB + tt] = kr ? kr[d] : 0.0f;
            for (size_t d = 0; d < hp; d++) vt[tt * hp + d] = vr && d < hd ? vr[d] : 0.0f;
        }
    }
}

static TGT void att_item(const att32_ctx *c, size_t bz, unsigned char *ds) {
    const size_t hd = c->hd, hp = c->hp, group = c->group, rows = c->rows, j = c->j;
    size_t blk = clef_att_block(bz, c->nblk);
    size_t i0 = blk * c->qb, nq = c->Tq - i0 < c->qb ? c->Tq - i0 : c->qb;
    size_t nr = group * nq;
    double *m = (double *)(void *)ds, *l = m + rows;
    float *Qs = (float *)(void *)(l + rows), *S = Qs + rows * hd, *O = S + rows * KB;
    for (size_t gi = 0; gi < group; gi++)
        for (size_t ii = 0; ii < nq; ii++)
            memcpy(Qs + (gi * nq + ii) * hd, c->q + (i0 + ii) * c->ldq + (j * group + gi) * hd, hd * sizeof(float));
    for (size_t r = 0; r < nr; r++) { m[r] = -INFINITY; l[r] = 0.0; }
    memset(O, 0, nr * hp * sizeof(float));
    size_t tmax = c->Tk;
    const size_t off = c->Tk - c->Tq; /* causal: keys before the queries' own rows (a cache's) */
    if (c->causal && i0 + nq + off < tmax) tmax = i0 + nq + off;
    for (size_t t0 = 0; t0 < tmax; t0 += KB) {
        size_t nt = tmax - t0 < KB ? tmax - t0 : KB;
        gemm_f32(S, KB, Qs, hd, c->KT + t0 * hd, KB, nr, hd, KB, 0);
        for (size_t r = 0; r < nr; r++)
            row_step(S + r * KB, clef_att_valid(c->causal, i0 + r % nq + off, t0, nt), c->scale, m + r, l + r,
                     O + r * hp, hp);
        gemm_f32(O, hp, S, KB, c->V + t0 * hp, hp, nr, nt, hp, 1);
    }
    for (size_t r = 0; r < nr; r++) {
        size_t gi = r / nq, ii = r % nq;
        float *orow = c->o + (i0 + ii) * c->ldo + (j * group + gi) * hd;
        for (size_t d = 0; d < hd; d++) orow[d] = (float)((double)O[r * hp + d] / l[r]);
    }
}

static void att_fn(void *c_, size_t b, size_t e, int worker) {
    att32_ctx *c = c_;
    for (size_t it = b; it < e; it++) att_item(c, it, c->ds + (size_t)worker * c->dper);
}

int clef_cpu_attention_f32(clef_pool *pool, float *o, size_t ldo, const float *q, size_t ldq,
                           const float *k, size_t ldk, const float *v, size_t ldv, size_t Tq, size_t Tk,
                           size_t nh, size_t nkv, size_t hd, float scale, int causal) {
    if (Tq == 0 || nh == 0) return 0;
    if (causal && Tk < Tq) return -1;
    att32_ctx c;
    memset(&c, 0, sizeof c);
    c.o = o; c.q = q; c.k = k; c.v = v;
    c.ldo = ldo; c.ldq = ldq; c.ldk = ldk; c.ldv = ldv;
    c.Tq = Tq; c.Tk = Tk; c.nkv = nkv; c.hd = hd;
    c.hp = rup(hd ? hd : 1, 16);
    c.tkp = rup(Tk ? Tk : 1, KB);
    c.group = nh / nkv;
    c.scale = scale;
    c.causal = causal;
    int nw = pool ? clef_pool_size(pool) : 1;
    clef_att_plan(Tq, c.group, ROWS, nw, &c.qb, &c.nblk);
    c.rows = rup(c.group * c.qb, MR) + MR; /* A slack for the kernel */
    c.dper = rup(2 * c.rows * sizeof(double) + c.rows * (hd + KB + c.hp) * sizeof(float), 64);
    c.ds = calloc((size_t)nw, c.dper); /* slack rows stay finite */
    c.KT = malloc(hd * c.tkp * sizeof(float) + 64);
    c.V = malloc(c.tkp * c.hp * sizeof(float) + 64);
    if (!c.ds || !c.KT || !c.V) { free(c.ds); free(c.KT); free(c.V); return -1; }
    for (c.j = 0; c.j < nkv; c.j++) {
        if (Tk) clef_pool_for(pool, c.tkp / KB, 1, prep_fn, &c);
        clef_pool_for(pool, c.nblk, 1, att_fn, &c);
    }
    free(c.ds);
    free(c.KT);
    free(c.V);
    return 0;
}
