/* Softmax attention of the CPU backend (see cpu_mixers.h and ops.h's `attention`).
 *
 * Fast path: one work item = (kv head j, block of query rows) holding the rows of every query head
 * that uses kv head j (GQA by indexing: K and V are read in place, never copied per head). Keys run
 * in tiles of ATT_KB; per tile: S = Q_blk · K_tileᵀ (clef_mix_gemm, products exact in double,
 * sums in double), an online softmax in double (running max m, running sum l, the accumulated
 * output rescaled by exp(m_old − m_new) when the max grows), O += P · V_tile (double). Causal:
 * tiles past the block's last row are skipped, keys past a row's position get p = 0. The kv heads
 * run one after another; before each, its K (transposed) and V are converted to double once
 * (16 * Tk * head_dim bytes: 67 MB at 16K tokens and head_dim 256), so the tiles are read without
 * conversions. Besides that, memory per worker is O(rows · (head_dim + ATT_KB)). Masked or padded
 * keys add exact zeros, so a row's bits depend neither on its block nor on the thread count. */
#pragma GCC optimize("fp-contract=fast")

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compute/cpu/cpu_mixers.h"

static int nworkers(clef_pool *p) { return p ? clef_pool_size(p) : 1; }
static inline size_t rup(size_t x, size_t m) { return (x + m - 1) / m * m; }

#define ATT_KB 64    /* keys per tile (a multiple of CLEF_MIX_NCOL and of 8) */
#define ATT_ROWS 256 /* target query rows per work item (all heads of the group together) */

typedef double vd8 __attribute__((vector_size(64)));
typedef double vd8u __attribute__((vector_size(64), aligned(8), may_alias));
typedef long long vl8 __attribute__((vector_size(64)));
typedef unsigned long long vu8 __attribute__((vector_size(64))); /* bit arithmetic that may wrap */

/* exp(x) for NX vectors of 8 doubles each, x <= 0 or -inf: 2^k * e^r with k = round(x / ln 2),
 * r = x - k ln 2 (two-part ln 2, |r| <= 0.35), e^r by its Taylor series to degree 13 (truncation
 * < 1e-17 relative), results below 2^-1022 flushed to 0. Within a few ulp of exp. Every step runs
 * over all NX vectors before the next: the 14-step Horner chain is latency-bound one vector at a
 * time (a row's 8 vectors then took more time than its two GEMMs); interleaved, the FMA units stay
 * busy. Each lane's operations, and so its bits, are those of the one-vector form. */
#define VEXP_NX (ATT_KB / 8)
static inline __attribute__((always_inline)) void vexp(vd8 *xs) {
    const double magic = 6755399441055744.0;    /* 1.5 * 2^52: rounds to an integer */
    static const double coef[] = {1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0,
                                  1.0 / 362880.0, 1.0 / 40320.0, 1.0 / 5040.0, 1.0 / 720.0,
                                  1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0};
    vl8 tiny[VEXP_NX];
    vd8 t[VEXP_NX], r[VEXP_NX], p[VEXP_NX];
    for (int i = 0; i < VEXP_NX; i++) {
        vd8 x = xs[i];
        tiny[i] = x < -708.0;                   /* all-ones where flushed (and -inf) */
        vd8 lim = (vd8){0} - 708.0, xc;
        vl8 xb, lb;
        memcpy(&xb, &x, sizeof xb);
        memcpy(&lb, &lim, sizeof lb);
        xb = (xb & ~tiny[i]) | (lb & tiny[i]);
        memcpy(&xc, &xb, sizeof xc);
        t[i] = xc * 1.4426950408889634 + magic;
        vd8 k = t[i] - magic;
        r[i] = xc - k * 0.693147180559890330187;  /* ln 2 high part (exact times k) */
        r[i] = r[i] - k * 5.4979230187083711552e-14; /* ln 2 low part */
        p[i] = (vd8){0} + 1.0 / 6227020800.0;   /* 1/13! */
    }
#pragma GCC unroll 13
    for (int c = 0; c < (int)(sizeof coef / sizeof coef[0]); c++)
#pragma GCC unroll 8
        for (int i = 0; i < VEXP_NX; i++) p[i] = p[i] * r[i] + coef[c];
    for (int i = 0; i < VEXP_NX; i++) {
        /* unsigned: masked lanes (scores past a row's keys) may hold any k, and wrap harmlessly */
        vu8 ki, bits;
        memcpy(&ki, &t[i], sizeof ki);
        ki = ki - 0x4338000000000000ULL;        /* k as an integer (two's complement) */
        bits = (ki + 1023) << 52;
        vd8 sc;
        memcpy(&sc, &bits, sizeof sc);
        vd8 e = p[i] * sc;
        vl8 eb;
        memcpy(&eb, &e, sizeof eb);
        eb &= ~tiny[i];
        memcpy(&e, &eb, sizeof e);
        xs[i] = e;
    }
}

/* The online-softmax step of one row for one key tile (ATT_KB scores in sr, the first nv valid):
 * scale, running max, rescale of the row's output and sum, p = exp(s - m) (0 past nv), sum of p in
 * a fixed order (8 lane sums, then pairs). */
static inline __attribute__((always_inline)) void row_step_body(double *sr, size_t nv, double scale,
                                                                double *m, double *l, double *orow,
                                                                size_t hdp) {
    /* scale the valid scores, their max (exact in any order) */
    const vl8 lane = {0, 1, 2, 3, 4, 5, 6, 7};
    vd8 vmax = (vd8){0} - INFINITY;
    for (size_t t0 = 0; t0 < nv; t0 += 8) {
        vd8 x = *(const vd8u *)(sr + t0) * scale;
        *(vd8u *)(sr + t0) = x;
        vl8 valid = (lane + (long long)t0) < (long long)nv, xb, mb;
        vd8 neg = (vd8){0} - INFINITY;
        memcpy(&xb, &x, sizeof xb);
        memcpy(&mb, &neg, sizeof mb);
        xb = (xb & valid) | (mb & ~valid);
        memcpy(&x, &xb, sizeof x);
        vl8 gt = x > vmax;
        vl8 vb;
        memcpy(&vb, &vmax, sizeof vb);
        vb = (xb & gt) | (vb & ~gt);
        memcpy(&vmax, &vb, sizeof vmax);
    }
    double mt = -INFINITY;
    for (int i = 0; i < 8; i++) mt = vmax[i] > mt ? vmax[i] : mt;
    double mn = *m > mt ? *m : mt;
    if (nv == 0 || mn == -INFINITY) {
        for (size_t tt = 0; tt < ATT_KB; tt++) sr[tt] = 0.0;
        return;
    }
    if (mn != *m) {
        double alpha = exp(*m - mn); /* 0 when m was -inf */
        vd8 av = (vd8){0} + alpha;
        for (size_t d = 0; d < hdp; d += 8) *(vd8u *)(orow + d) = *(const vd8u *)(orow + d) * av;
        *l *= alpha;
        *m = mn;
    }
    /* p = exp(s - m) for the whole tile at once (masked keys: computed, then 0; adding +0 to
     * the sum, which is >= +0, changes no bit) */
    vd8 e[VEXP_NX];
    for (int i = 0; i < VEXP_NX; i++) e[i] = *(const vd8u *)(sr + 8 * i) - mn;
    vexp(e);
    vd8 acc = {0};
    for (int i = 0; i < VEXP_NX; i++) {
        vl8 valid = (lane + (long long)(8 * i)) < (long long)nv;
        vl8 eb;
        memcpy(&eb, &e[i], sizeof eb);
        eb &= valid;
        memcpy(&e[i], &eb, sizeof e[i]);
        *(vd8u *)(sr + 8 * i) = e[i];
        acc += e[i];
    }
    double s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    *l += s;
}

#define ROW_ARGS double *sr, size_t nv, double scale, double *m, double *l, double *orow, size_t hdp
__attribute__((target("avx512f,avx512vl,avx512dq,avx2,fma"))) static void row_avx512(ROW_ARGS) {
    row_step_body(sr, nv, scale, m, l, orow, hdp);
}
__attribute__((target("avx2,fma"))) static void row_avx2(ROW_ARGS) {
    row_step_body(sr, nv, scale, m, l, orow, hdp);
}
static void row_generic(ROW_ARGS) { row_step_body(sr, nv, scale, m, l, orow, hdp); }


typedef struct {
    float *o; const float *q, *k, *v;
    size_t ldo, ldq, ldk, ldv, Tq, Tk, nh, nkv, hd, hdp, hpan, group, qb, nblk, nr, rows, tkp;
    size_t j;                   /* the kv head of this pass */
    double *KT, *V;             /* kv head j as double, packed per key tile (see prep_fn) */
    double scale; int causal;
    double *ds; size_t dper;
    void (*row)(ROW_ARGS);
} att_ctx;

/* Converts key tiles [b, e) of kv head j to the kernel's packed panels (zero padding past Tk and
 * past hd): tile u of K transposed is ATT_KB / NCOL panels of [hdp][NCOL] (panel cb holds keys
 * u*ATT_KB + cb*NCOL + lane), tile u of V is hpan / NCOL panels of [ATT_KB][NCOL] (panel cb holds
 * dims cb*NCOL + lane). Every panel is read sequentially by the kernel. */
#define NCOL CLEF_MIX_NCOL
static void prep_fn(void *c_, size_t b, size_t e, int worker) {
    (void)worker;
    att_ctx *c = c_;
    const size_t hd = c->hd, hdp = c->hdp, hpan = c->hpan;
    for (size_t u = b; u < e; u++) {
        double *kt = c->KT + u * hdp * ATT_KB, *vt = c->V + u * ATT_KB * hpan;
        for (size_t tt = 0; tt < ATT_KB; tt++) {
            size_t t = u * ATT_KB + tt;
            double *kcol = kt + (tt / NCOL) * hdp * NCOL + tt % NCOL;
            double *vrow = vt + tt * NCOL;
            if (t < c->Tk) {
                const float *kr = c->k + t * c->ldk + c->j * hd, *vs = c->v + t * c->ldv + c->j * hd;
                for (size_t d = 0; d < hd; d++) {
                    kcol[d * NCOL] = kr[d];
                    vrow[(d / NCOL) * ATT_KB * NCOL + d % NCOL] = vs[d];
                }
                for (size_t d = hd; d < hpan; d++) vrow[(d / NCOL) * ATT_KB * NCOL + d % NCOL] = 0.0;
            } else {
                for (size_t d = 0; d < hd; d++) kcol[d * NCOL] = 0.0;
                for (size_t d = 0; d < hpan; d++) vrow[(d / NCOL) * ATT_KB * NCOL + d % NCOL] = 0.0;
            }
        }
    }
}

static void att_item(const att_ctx *c, size_t bz, double *ds) {
    const size_t hd = c->hd, hdp = c->hdp, group = c->group, rows = c->rows, j = c->j;
    size_t blk = clef_att_block(bz, c->nblk);
    size_t i0 = blk * c->qb, nq = c->Tq - i0 < c->qb ? c->Tq - i0 : c->qb;
    size_t nr = group * nq;
    double *Qs = ds;            ds += rows * hdp;   /* the block's query rows (fp32 values) */
    double *S = ds;             ds += rows * ATT_KB;
    double *O = ds;             ds += rows * hdp;
    double *m = ds;             ds += rows;
    double *l = ds;
    for (size_t gi = 0; gi < group; gi++)
        for (size_t ii = 0; ii < nq; ii++) {
            double *dst = Qs + (gi * nq + ii) * hdp;
            const float *src = c->q + (i0 + ii) * c->ldq + (j * group + gi) * hd;
            for (size_t d = 0; d < hd; d++) dst[d] = src[d];
            for (size_t d = hd; d < hdp; d++) dst[d] = 0.0;
        }
    for (size_t r = 0; r < nr; r++) { m[r] = -INFINITY; l[r] = 0.0; }
    memset(O, 0, nr * hdp * sizeof(double));
    size_t tmax = c->Tk;
    const size_t off = c->Tk - c->Tq; /* causal: keys before the queries' own rows (a cache's) */
    if (c->causal && i0 + nq + off < tmax) tmax = i0 + nq + off;
    for (size_t t0 = 0; t0 < tmax; t0 += ATT_KB) {
        size_t nt = tmax - t0 < ATT_KB ? tmax - t0 : ATT_KB;
        clef_mix_gemm(S, ATT_KB, Qs, hdp, c->KT + t0 * hdp, NCOL, hdp * NCOL, nr, hd, ATT_KB, -1, -1, 0, 0);
        for (size_t r = 0; r < nr; r++)
            c->row(S + r * ATT_KB, clef_att_valid(c->causal, i0 + r % nq + off, t0, nt), c->scale, m + r, l + r,
                   O + r * hdp, hdp);
        clef_mix_gemm(O, hdp, S, ATT_KB, c->V + t0 * c->hpan, NCOL, ATT_KB * NCOL, nr, nt, hdp, -1, -1, 0, 1);
    }
    for (size_t r = 0; r < nr; r++) {
        size_t gi = r / nq, ii = r % nq;
        float *orow = c->o + (i0 + ii) * c->ldo + (j * group + gi) * hd;
        const double *ar = O + r * hdp;
        for (size_t d = 0; d < hd; d++) orow[d] = (float)(ar[d] / l[r]);
    }
}

/* The vision tower's 1,200 rows in 5 blocks of 256 kept one of two workers idle a fifth of the
 * time; 6 blocks of 200 do not. */
void clef_att_plan(size_t Tq, size_t group, size_t rows, int nworkers, size_t *qb, size_t *nblk) {
    size_t nw = nworkers > 0 ? (size_t)nworkers : 1;
    size_t qb0 = group >= rows ? 1 : rows / group;
    size_t nb = (Tq + qb0 - 1) / qb0;
    if (nb < 2 * nw) nb = 2 * nw;
    nb = (nb + nw - 1) / nw * nw;
    if (nb > Tq) nb = Tq;
    *qb = (Tq + nb - 1) / nb;
    *nblk = (Tq + *qb - 1) / *qb;
}

static void att_fn(void *c_, size_t b, size_t e, int worker) {
    att_ctx *c = c_;
    for (size_t it = b; it < e; it++)
        att_item(c, it, c->ds + (size_t)worker * c->dper);
}

int clef_cpu_attention(clef_pool *pool, float *o, size_t ldo, const float *q, size_t ldq,
                       const float *k, size_t ldk, const float *v, size_t ldv, size_t Tq, size_t Tk,
                       size_t nh, size_t nkv, size_t hd, float scale, int causal) {
    if (Tq == 0 || nh == 0) return 0;
    if (causal && Tk < Tq) return -1;
    att_ctx c;
    memset(&c, 0, sizeof c);
    c.o = o; c.q = q; c.k = k; c.v = v;
    c.ldo = ldo; c.ldq = ldq; c.ldk = ldk; c.ldv = ldv;
    c.Tq = Tq; c.Tk = Tk; c.nh = nh; c.nkv = nkv; c.hd = hd;
    c.hdp = rup(hd ? hd : 1, 8);           /* columns computed (the kernel's 8-column tail) */
    c.hpan = rup(hd ? hd : 1, CLEF_MIX_NCOL); /* V's panels are NCOL wide */
    c.tkp = rup(Tk ? Tk : 1, ATT_KB);
    c.group = nh / nkv;
    int nw = nworkers(pool);
    clef_att_plan(Tq, c.group, ATT_ROWS, nw, &c.qb, &c.nblk);
    c.nr = c.group * c.qb;
    c.rows = rup(c.nr, CLEF_MIX_MR) + CLEF_MIX_MR; /* A slack for the kernel */
    c.scale = (double)scale;
    c.causal = causal;
    const char *isa = clef_mix_isa();
    c.row = !strcmp(isa, "avx512") ? row_avx512 : !strcmp(isa, "avx2") ? row_avx2 : row_generic;
    c.dper = c.rows * c.hdp + c.rows * ATT_KB + c.rows * c.hdp + 2 * c.rows + 8;
    c.ds = calloc((size_t)nw * c.dper, sizeof(double)); /* A slack rows stay finite */
    c.KT = malloc(c.hdp * c.tkp * sizeof(double));
    c.V = malloc(c.tkp * c.hpan * sizeof(double));
    if (!c.ds || !c.KT || !c.V) { free(c.ds); free(c.KT); free(c.V); return -1; }
    for (c.j = 0; c.j < nkv; c.j++) {
        if (Tk) clef_pool_for(pool, c.tkp / ATT_KB, 1, prep_fn, &c);
        clef_pool_for(pool, c.nblk, 1, att_fn, &c);
    }
    free(c.ds);
    free(c.KT);
    free(c.V);
    return 0;
}
