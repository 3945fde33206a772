/* The plain CPU backend (see cpu_ops.h). Every kernel is parallel over independent outputs
 * (rows, columns, heads) through clef_pool_for with static partitioning; no reduction is split
 * across workers, so the results are bit-identical for any thread count. */
#include "compute/cpu/cpu_ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/threads.h"

typedef struct cpu_impl {
    clef_pool *pool;
    int nthreads;
} cpu_impl;

static clef_pool *POOL(clef_ops *ops) { return ((cpu_impl *)ops->impl)->pool; }
static int NW(clef_ops *ops) { return ((cpu_impl *)ops->impl)->nthreads; }

/* ---------------------------------------------------------------- helpers */

/* Converts n elements of a weight tensor starting at element `off` to fp32. */
static void load_f32(const clef_tensor *t, size_t off, size_t n, float *dst) {
    if (t->dtype == CLEF_ST_BF16) {
        const uint16_t *s = (const uint16_t *)t->data + off;
        for (size_t i = 0; i < n; i++) {
            uint32_t u = (uint32_t)s[i] << 16;
            memcpy(&dst[i], &u, sizeof u);
        }
    } else if (t->dtype == CLEF_ST_F32) {
        memcpy(dst, (const float *)t->data + off, n * sizeof(float));
    } else {
        for (size_t i = 0; i < n; i++) dst[i] = clef_tensor_f32_at(t, (int64_t)(off + i));
    }
}

static inline float wat(const clef_tensor *t, size_t i) { return clef_tensor_f32_at(t, (int64_t)i); }

/* Dot product of two fp32 vectors, accumulated in double (products of floats are exact in
 * double) with four interleaved partial sums in a fixed order. */
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

static inline float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }
static inline float siluf_(float x) { return x / (1.0f + expf(-x)); }

/* ---------------------------------------------------------------- memory */

static float *cpu_alloc(clef_ops *ops, size_t n) {
    (void)ops;
    if (n == 0) n = 1;
    if (n > ((size_t)-1) / sizeof(float) / 2) return NULL;
    void *p = NULL;
    size_t bytes = (n * sizeof(float) + 63) & ~(size_t)63;
    if (posix_memalign(&p, 64, bytes) != 0) return NULL;
    return p;
}
static void cpu_free(clef_ops *ops, float *p) { (void)ops; free(p); }
static void cpu_upload(clef_ops *ops, float *dst, const float *src, size_t n) {
    (void)ops;
    if (n && dst != src) memmove(dst, src, n * sizeof(float));
}
static void cpu_download(clef_ops *ops, float *dst, const float *src, size_t n) {
    (void)ops;
    if (n && dst != src) memmove(dst, src, n * sizeof(float));
}

static void cpu_copy2d(clef_ops *ops, float *y, size_t ldy, const float *x, size_t ldx, size_t rows,
                       size_t cols) {
    (void)ops;
    for (size_t r = 0; r < rows; r++) memmove(y + r * ldy, x + r * ldx, cols * sizeof(float));
}

/* ---------------------------------------------------------------- gathers */

static void cpu_embed(clef_ops *ops, float *y, const clef_tensor *table, const int32_t *ids, size_t n) {
    (void)ops;
    size_t D = (size_t)(table->numel / table->shape[0]);
    for (size_t i = 0; i < n; i++) load_f32(table, (size_t)ids[i] * D, D, y + i * D);
}

typedef struct { float *y; const float *x; size_t ldx, r0, r1, D; } rowmean_ctx;
static void rowmean_fn(void *c_, size_t b, size_t e, int w) {
    (void)w;
    rowmean_ctx *c = c_;
    double inv = (double)(c->r1 - c->r0);
    if (c->r1 <= c->r0) { /* mean of no rows: NaN, as torch */
        for (size_t d = b; d < e; d++) c->y[d] = NAN;
        return;
    }
    for (size_t d = b; d < e; d++) {
        double s = 0;
        for (size_t r = c->r0; r < c->r1; r++) s += c->x[r * c->ldx + d];
        c->y[d] = (float)(s / inv);
    }
}
static void cpu_row_mean(clef_ops *ops, float *y, const float *x, size_t ldx, size_t r0, size_t r1, size_t D) {
    rowmean_ctx c = {y, x, ldx, r0, r1, D};
    clef_pool_for(POOL(ops), D, 64, rowmean_fn, &c);
}

/* ---------------------------------------------------------------- linear */

#define LIN_NB 8 /* weight rows converted per block */

typedef struct {
    float *y; const float *x; size_t T, K, N, row0;
    const clef_tensor *w, *b;
    float *scratch; /* per worker LIN_NB * K */
} linear_ctx;

static void linear_fn(void *c_, size_t b, size_t e, int worker) {
    linear_ctx *c = c_;
    float *wb = c->scratch + (size_t)worker * LIN_NB * c->K;
    for (size_t n0 = b; n0 < e; n0 += LIN_NB) {
        size_t nb = e - n0 < LIN_NB ? e - n0 : LIN_NB;
        load_f32(c->w, (c->row0 + n0) * c->K, nb * c->K, wb);
        double bias[LIN_NB];
        for (size_t r = 0; r < nb; r++) bias[r] = c->b ? (double)wat(c->b, c->row0 + n0 + r) : 0.0;
        for (size_t t = 0; t < c->T; t++) {
            const float *xr = c->x + t * c->K;
            float *yr = c->y + t * c->N + n0;
            for (size_t r = 0; r < nb; r++) yr[r] = (float)(dot_d(xr, wb + r * c->K, c->K) + bias[r]);
        }
    }
}

static void cpu_linear(clef_ops *ops, float *y, const float *x, size_t T, const clef_tensor *w,
                       size_t row0, size_t N, const clef_tensor *b) {
    if (T == 0 || N == 0) return;
    size_t K = (size_t)(w->numel / w->shape[0]);
    int nw = NW(ops);
    float *scratch = malloc((size_t)nw * LIN_NB * K * sizeof(float));
    if (!scratch) { ops->failed = 1; return; }
    linear_ctx c = {y, x, T, K, N, row0, w, b, scratch};
    clef_pool_for(POOL(ops), N, LIN_NB, linear_fn, &c);
    free(scratch);
}

/* ---------------------------------------------------------------- norms */

typedef struct {
    float *y; const float *x; const float *z; size_t ldy, ldx, D;
    const float *w; int offset; float eps, scale; int kind;
} norm_ctx;

enum { K_RMS, K_LAYER, K_L2, K_GATED };

static void norm_fn(void *c_, size_t b, size_t e, int worker) {
    (void)worker;
    norm_ctx *c = c_;
    size_t D = c->D;
    for (size_t r = b; r < e; r++) {
        const float *x = c->x + r * c->ldx;
        float *y = c->y + r * c->ldy;
        if (c->kind == K_LAYER) {
            double s = 0;
            for (size_t d = 0; d < D; d++) s += x[d];
            double mean = s / (double)D, v = 0;
            for (size_t d = 0; d < D; d++) { double t = x[d] - mean; v += t * t; }
            double rstd = 1.0 / sqrt(v / (double)D + (double)c->eps);
            for (size_t d = 0; d < D; d++)
                y[d] = (float)(((double)x[d] - mean) * rstd * (double)c->w[d] + (double)c->z[d]);
            continue;
        }
        double ss = 0;
        for (size_t d = 0; d < D; d++) ss += (double)x[d] * x[d];
        if (c->kind == K_L2) {
            float inv = (float)(1.0 / sqrt(ss + (double)c->eps));
            for (size_t d = 0; d < D; d++) {
                float t = x[d] * inv;
                y[d] = c->scale != 1.0f ? t * c->scale : t;
            }
            continue;
        }
        float inv = (float)(1.0 / sqrt(ss / (double)D + (double)c->eps));
        if (c->kind == K_RMS) {
            for (size_t d = 0; d < D; d++) {
                float n = x[d] * inv;
                y[d] = n * (c->offset ? 1.0f + c->w[d] : c->w[d]);
            }
        } else { /* gated */
            const float *z = c->z + r * c->ldx;
            for (size_t d = 0; d < D; d++) {
                float n = c->w[d] * (x[d] * inv);
                y[d] = n * siluf_(z[d]);
            }
        }
    }
}

static float *vec_f32(clef_ops *ops, const clef_tensor *t, size_t D) {
    float *v = malloc((D ? D : 1) * sizeof(float));
    if (!v) { ops->failed = 1; return NULL; }
    load_f32(t, 0, D, v);
    return v;
}

static void cpu_rmsnorm(clef_ops *ops, float *y, size_t ldy, const float *x, size_t ldx, size_t rows,
                        size_t D, const clef_tensor *w, int offset, float eps) {
    float *wv = vec_f32(ops, w, D);
    if (!wv) return;
    norm_ctx c = {y, x, NULL, ldy, ldx, D, wv, offset, eps, 1.0f, K_RMS};
    clef_pool_for(POOL(ops), rows, 1, norm_fn, &c);
    free(wv);
}

static void cpu_layernorm(clef_ops *ops, float *y, const float *x, size_t rows, size_t D,
                          const clef_tensor *w, const clef_tensor *b, float eps) {
    float *wv = vec_f32(ops, w, D), *bv = vec_f32(ops, b, D);
    if (wv && bv) {
        norm_ctx c = {y, x, bv, D, D, D, wv, 0, eps, 1.0f, K_LAYER};
        clef_pool_for(POOL(ops), rows, 1, norm_fn, &c);
    }
    free(wv);
    free(bv);
}

static void cpu_l2norm(clef_ops *ops, float *x, size_t ld, size_t rows, size_t D, float eps, float scale) {
    norm_ctx c = {x, x, NULL, ld, ld, D, NULL, 0, eps, scale, K_L2};
    clef_pool_for(POOL(ops), rows, 1, norm_fn, &c);
}

static void cpu_gated_rmsnorm(clef_ops *ops, float *y, const float *x, const float *z, size_t rows,
                              size_t D, const clef_tensor *w, float eps) {
    float *wv = vec_f32(ops, w, D);
    if (!wv) return;
    norm_ctx c = {y, x, z, D, D, D, wv, 0, eps, 1.0f, K_GATED};
    clef_pool_for(POOL(ops), rows, 1, norm_fn, &c);
    free(wv);
}

/* ---------------------------------------------------------------- rope */

typedef struct { float *x; size_t ld, nh, hd, rot; const float *cos, *sin; } rope_ctx;
static void rope_fn(void *c_, size_t b, size_t e, int worker) {
    (void)worker;
    rope_ctx *c = c_;
    size_t half = c->rot / 2;
    for (size_t t = b; t < e; t++) {
        const float *cs = c->cos + t * half, *sn = c->sin + t * half;
        for (size_t h = 0; h < c->nh; h++) {
            float *v = c->x + t * c->ld + h * c->hd;
            for (size_t d = 0; d < half; d++) {
                float x1 = v[d], x2 = v[d + half];
                float a = x1 * cs[d], bb = x2 * sn[d];
                float cc = x2 * cs[d], dd = x1 * sn[d];
                v[d] = a - bb;
                v[d + half] = cc + dd;
            }
        }
    }
}
static void cpu_rope(clef_ops *ops, float *x, size_t ld, size_t T, size_t nh, size_t hd, size_t rot,
                     const float *cos, const float *sin) {
    rope_ctx c = {x, ld, nh, hd, rot, cos, sin};
    clef_pool_for(POOL(ops), T, 1, rope_fn, &c);
}

/* ---------------------------------------------------------------- GDN pieces */

typedef struct { float *y; const float *x; size_t T, C, K; const float *w; } conv_ctx;
static void conv_fn(void *c_, size_t b, size_t e, int worker) {
    (void)worker;
    conv_ctx *c = c_;
    size_t K = c->K;
    for (size_t ch = b; ch < e; ch++) {
        const float *w = c->w + ch * K;
        for (size_t t = 0; t < c->T; t++) {
            double s = 0;
            for (size_t k = 0; k < K; k++) {
                /* tap k reads position t - (K-1) + k */
                if (t + k + 1 < K) continue;
                s += (double)w[k] * c->x[(t + k + 1 - K) * c->C + ch];
            }
            c->y[t * c->C + ch] = siluf_((float)s);
        }
    }
}
static void cpu_conv1d_silu(clef_ops *ops, float *y, const float *x, size_t T, size_t C, const clef_tensor *w) {
    size_t K = (size_t)(w->numel / w->shape[0]);
    float *wv = vec_f32(ops, w, C * K);
    if (!wv) return;
    conv_ctx c = {y, x, T, C, K, wv};
    clef_pool_for(POOL(ops), C, 16, conv_fn, &c);
    free(wv);
}

static void cpu_gdn_gates(clef_ops *ops, float *beta, float *g, const float *b, const float *a, size_t T,
                          size_t H, const clef_tensor *A_log, const clef_tensor *dt_bias) {
    (void)ops;
    for (size_t t = 0; t < T; t++) {
        for (size_t h = 0; h < H; h++) {
            size_t i = t * H + h;
            beta[i] = sigmoidf_(b[i]);
            float u = a[i] + wat(dt_bias, h);
            float sp = u > 20.0f ? u : log1pf(expf(u));
            float na = -expf(wat(A_log, h));
            g[i] = na * sp;
        }
    }
}

/* Chunked gated delta rule, one v-head per work item. Float storage, double sums. */
typedef struct {
    float *o; const float *q, *k, *v, *beta, *g;
    size_t T, Hk, Hv, dk, dv, C;
    float *scratch; size_t per_worker;
} delta_ctx;

static void delta_head(const delta_ctx *c, size_t h, float *s) {
    const size_t C = c->C, dk = c->dk, dv = c->dv, T = c->T;
    const size_t kh = h / (c->Hv / c->Hk);
    float *R = s;               s += dk * dv;   /* state [dk, dv] */
    float *Q = s;               s += C * dk;    /* q~ chunk, later Qd */
    float *Kc = s;              s += C * dk;    /* k^ chunk, later Kd */
    float *Kb = s;              s += C * dk;    /* k^ * beta, later decayed (W rhs), then W */
    float *Vb = s;              s += C * dv;    /* v * beta, then U */
    float *Vn = s;              s += C * dv;
    float *Mm = s;              s += C * C;     /* (Kb k^T) . D, strictly lower used */
    float *In = s;              s += C * C;     /* (q~ k^T) . D, lower incl. diagonal */
    float *G = s;               s += C;         /* cumsum of g */
    float *Kt = s;              s += dk * C;    /* Kd transposed [dk, C] */
    memset(R, 0, dk * dv * sizeof(float));
    const size_t ldq = c->Hk * dk, ldv = c->Hv * dv, ldg = c->Hv;
    for (size_t t0 = 0; t0 < T; t0 += C) {
        size_t n = T - t0 < C ? T - t0 : C;
        /* load */
        double run = 0;
        for (size_t r = 0; r < n; r++) {
            size_t t = t0 + r;
            memcpy(Q + r * dk, c->q + t * ldq + kh * dk, dk * sizeof(float));
            memcpy(Kc + r * dk, c->k + t * ldq + kh * dk, dk * sizeof(float));
            float be = c->beta[t * ldg + h];
            for (size_t i = 0; i < dk; i++) Kb[r * dk + i] = Kc[r * dk + i] * be;
            const float *vr = c->v + t * ldv + h * dv;
            for (size_t j = 0; j < dv; j++) Vb[r * dv + j] = vr[j] * be;
            run += c->g[t * ldg + h];
            G[r] = (float)run;
        }
        /* intra-chunk matrices with the pairwise decay */
        for (size_t r = 0; r < n; r++) {
            for (size_t s2 = 0; s2 <= r; s2++) {
                float d = expf(G[r] - G[s2]);
                Mm[r * C + s2] = (float)dot_d(Kb + r * dk, Kc + s2 * dk, dk) * d;
                In[r * C + s2] = (float)dot_d(Q + r * dk, Kc + s2 * dk, dk) * d;
            }
        }
        /* rhs of the second solve: Kb * exp(G) (in place in Kb) */
        for (size_t r = 0; r < n; r++) {
            float eg = expf(G[r]);
            for (size_t i = 0; i < dk; i++) Kb[r * dk + i] *= eg;
        }
        /* unit lower-triangular forward substitution: (I + L) U = Vb, (I + L) W = Kb */
        for (size_t r = 1; r < n; r++) {
            for (size_t j = 0; j < dv; j++) {
                double acc = Vb[r * dv + j];
                for (size_t s2 = 0; s2 < r; s2++) acc -= (double)Mm[r * C + s2] * Vb[s2 * dv + j];
                Vb[r * dv + j] = (float)acc;
            }
            for (size_t i = 0; i < dk; i++) {
                double acc = Kb[r * dk + i];
                for (size_t s2 = 0; s2 < r; s2++) acc -= (double)Mm[r * C + s2] * Kb[s2 * dk + i];
                Kb[r * dk + i] = (float)acc;
            }
        }
        /* Qd = q~ * exp(G), Kd = k^ * exp(G_last - G), lambda = exp(G_last); G_last is the last
         * row of the zero-padded chunk, which equals the last real row. */
        float Gl = G[n - 1];
        float lam = expf(Gl);
        for (size_t r = 0; r < n; r++) {
            float eq = expf(G[r]), ek = expf(Gl - G[r]);
            for (size_t i = 0; i < dk; i++) {
                Q[r * dk + i] *= eq;
                Kt[i * C + r] = Kc[r * dk + i] * ek;
            }
        }
        /* Vn = U - W R */
        for (size_t r = 0; r < n; r++) {
            for (size_t j = 0; j < dv; j++) {
                double acc = 0;
                for (size_t i = 0; i < dk; i++) acc += (double)Kb[r * dk + i] * R[i * dv + j];
                Vn[r * dv + j] = Vb[r * dv + j] - (float)acc;
            }
        }
        /* O = Qd R + Intra Vn */
        for (size_t r = 0; r < n; r++) {
            float *orow = c->o + (t0 + r) * ldv + h * dv;
            for (size_t j = 0; j < dv; j++) {
                double a1 = 0, a2 = 0;
                for (size_t i = 0; i < dk; i++) a1 += (double)Q[r * dk + i] * R[i * dv + j];
                for (size_t s2 = 0; s2 <= r; s2++) a2 += (double)In[r * C + s2] * Vn[s2 * dv + j];
                orow[j] = (float)a1 + (float)a2;
            }
        }
        /* R = lambda R + Kd^T Vn */
        if (t0 + n < T) {
            for (size_t i = 0; i < dk; i++) {
                for (size_t j = 0; j < dv; j++) {
                    double acc = 0;
                    for (size_t r = 0; r < n; r++) acc += (double)Kt[i * C + r] * Vn[r * dv + j];
                    R[i * dv + j] = R[i * dv + j] * lam + (float)acc;
                }
            }
        }
    }
}

static void delta_fn(void *c_, size_t b, size_t e, int worker) {
    delta_ctx *c = c_;
    float *s = c->scratch + (size_t)worker * c->per_worker;
    for (size_t h = b; h < e; h++) delta_head(c, h, s);
}

static void cpu_delta_rule(clef_ops *ops, float *o, const float *q, const float *k, const float *v,
                           const float *beta, const float *g, size_t T, size_t Hk, size_t Hv, size_t dk,
                           size_t dv, size_t chunk) {
    if (T == 0) return;
    if (chunk == 0) chunk = 64;
    size_t C = chunk;
    size_t per = dk * dv + 3 * C * dk + 2 * C * dv + 2 * C * C + C + dk * C;
    int nw = NW(ops);
    float *scratch = malloc((size_t)nw * per * sizeof(float));
    if (!scratch) { ops->failed = 1; return; }
    delta_ctx c = {o, q, k, v, beta, g, T, Hk, Hv, dk, dv, C, scratch, per};
    clef_pool_for(POOL(ops), Hv, 1, delta_fn, &c);
    free(scratch);
}

/* ---------------------------------------------------------------- attention */

#define ATT_QB 16 /* query rows per pass over K and V (each K/V row is loaded once per block) */

typedef struct {
    float *o; const float *q, *k, *v;
    size_t ldo, ldq, ldk, ldv, Tq, Tk, nh, nkv, hd, nblk;
    float scale; int causal;
    double *scratch; size_t per_worker;
} attn_ctx;

/* One work item = (head h, block of up to ATT_QB query rows). Each row's result is computed with
 * exactly the same operations in the same order as a row-at-a-time loop (scores in key order, max,
 * exp and sum in key order, the weighted sum of V in key order), so the blocking changes neither
 * the bits nor their independence of the thread count. */
static void attn_fn(void *c_, size_t b, size_t e, int worker) {
    attn_ctx *c = c_;
    double *sc = c->scratch + (size_t)worker * c->per_worker; /* [ATT_QB, Tk] */
    double *acc = sc + ATT_QB * c->Tk;                          /* [ATT_QB, hd] */
    size_t group = c->nh / c->nkv, hd = c->hd, Tk = c->Tk;
    for (size_t it = b; it < e; it++) {
        size_t h = it / c->nblk, i0 = (it % c->nblk) * ATT_QB, j = h / group;
        size_t nq = c->Tq - i0 < ATT_QB ? c->Tq - i0 : ATT_QB;
        size_t nmax = c->causal ? i0 + nq : Tk; /* keys any row of the block reads */
        double m[ATT_QB], sum[ATT_QB];
        for (size_t r = 0; r < nq; r++) { m[r] = -INFINITY; sum[r] = 0; }
        /* scores: one pass over K */
        for (size_t t = 0; t < nmax; t++) {
            const float *kv = c->k + t * c->ldk + j * hd;
            for (size_t r = 0; r < nq; r++) {
                if (c->causal && t > i0 + r) continue;
                double s = dot_d(c->q + (i0 + r) * c->ldq + h * hd, kv, hd) * (double)c->scale;
                sc[r * Tk + t] = s;
                if (s > m[r]) m[r] = s;
            }
        }
        for (size_t r = 0; r < nq; r++) {
            size_t n = c->causal ? i0 + r + 1 : Tk;
            double *sr = sc + r * Tk;
            for (size_t t = 0; t < n; t++) { sr[t] = exp(sr[t] - m[r]); sum[r] += sr[t]; }
            for (size_t d = 0; d < hd; d++) acc[r * hd + d] = 0;
        }
        /* weighted sum: one pass over V */
        for (size_t t = 0; t < nmax; t++) {
            const float *vv = c->v + t * c->ldv + j * hd;
            for (size_t r = 0; r < nq; r++) {
                if (c->causal && t > i0 + r) continue;
                double p = sc[r * Tk + t];
                double *ar = acc + r * hd;
                for (size_t d = 0; d < hd; d++) ar[d] += p * vv[d];
            }
        }
        for (size_t r = 0; r < nq; r++) {
            float *ov = c->o + (i0 + r) * c->ldo + h * hd;
            for (size_t d = 0; d < hd; d++) ov[d] = (float)(acc[r * hd + d] / sum[r]);
        }
    }
}

static void cpu_attention(clef_ops *ops, float *o, size_t ldo, const float *q, size_t ldq, const float *k,
                          size_t ldk, const float *v, size_t ldv, size_t Tq, size_t Tk, size_t nh, size_t nkv,
                          size_t hd, float scale, int causal) {
    if (Tq == 0 || nh == 0) return;
    size_t per = ATT_QB * (Tk + hd);
    int nw = NW(ops);
    double *scratch = malloc((size_t)nw * per * sizeof(double));
    if (!scratch) { ops->failed = 1; return; }
    size_t nblk = (Tq + ATT_QB - 1) / ATT_QB;
    attn_ctx c = {o, q, k, v, ldo, ldq, ldk, ldv, Tq, Tk, nh, nkv, hd, nblk, scale, causal, scratch, per};
    clef_pool_for(POOL(ops), nh * nblk, 1, attn_fn, &c);
    free(scratch);
}

/* ---------------------------------------------------------------- elementwise */

typedef struct { float *y; const float *a, *b; int kind; } ew_ctx;
enum { E_SILU_MUL, E_GELU, E_GELU_TANH, E_SIGMOID_MUL, E_ADD };

static void ew_fn(void *c_, size_t b, size_t e, int worker) {
    (void)worker;
    ew_ctx *c = c_;
    float *y = c->y;
    const float *A = c->a, *B = c->b;
    switch (c->kind) {
    case E_SILU_MUL:
        for (size_t i = b; i < e; i++) y[i] = siluf_(A[i]) * B[i];
        break;
    case E_GELU:
        for (size_t i = b; i < e; i++) {
            double x = y[i];
            y[i] = (float)(0.5 * x * (1.0 + erf(x * 0.70710678118654752440)));
        }
        break;
    case E_GELU_TANH:
        for (size_t i = b; i < e; i++) {
            double x = y[i];
            double inner = 0.79788456080286535588 * (x + 0.044715 * x * x * x);
            y[i] = (float)(0.5 * x * (1.0 + tanh(inner)));
        }
        break;
    case E_SIGMOID_MUL:
        for (size_t i = b; i < e; i++) y[i] = y[i] * sigmoidf_(A[i]);
        break;
    case E_ADD:
        for (size_t i = b; i < e; i++) y[i] = A[i] + B[i];
        break;
    }
}

static void ew(clef_ops *ops, float *y, const float *a, const float *b, size_t n, int kind) {
    ew_ctx c = {y, a, b, kind};
    clef_pool_for(POOL(ops), n, 4096, ew_fn, &c);
}
static void cpu_silu_mul(clef_ops *ops, float *y, const float *gate, const float *up, size_t n) { ew(ops, y, gate, up, n, E_SILU_MUL); }
static void cpu_gelu(clef_ops *ops, float *x, size_t n, int tanh_approx) { ew(ops, x, NULL, NULL, n, tanh_approx ? E_GELU_TANH : E_GELU); }
static void cpu_sigmoid_mul(clef_ops *ops, float *x, const float *gate, size_t n) { ew(ops, x, gate, NULL, n, E_SIGMOID_MUL); }
static void cpu_add(clef_ops *ops, float *y, const float *a, const float *b, size_t n) { ew(ops, y, a, b, n, E_ADD); }

/* ---------------------------------------------------------------- table */

static void cpu_destroy(clef_ops *ops) {
    if (!ops) return;
    cpu_impl *im = ops->impl;
    if (im) clef_pool_destroy(im->pool);
    free(im);
    free(ops);
}

clef_ops *clef_cpu_ops_create(int nthreads, clef_err *err) {
    clef_ops *ops = calloc(1, sizeof *ops);
    cpu_impl *im = calloc(1, sizeof *im);
    if (!ops || !im) {
        free(ops);
        free(im);
        clef_err_set(err, CLEF_E_OOM, "out of memory creating the CPU backend");
        return NULL;
    }
    im->pool = clef_pool_create(nthreads, err);
    if (!im->pool) { free(ops); free(im); return NULL; }
    im->nthreads = clef_pool_size(im->pool);
    ops->name = "cpu";
    ops->host_memory = 1;
    ops->impl = im;
    ops->destroy = cpu_destroy;
    ops->alloc = cpu_alloc;
    ops->free = cpu_free;
    ops->upload = cpu_upload;
    ops->download = cpu_download;
    ops->copy2d = cpu_copy2d;
    ops->embed = cpu_embed;
    ops->row_mean = cpu_row_mean;
    ops->linear = cpu_linear;
    ops->rmsnorm = cpu_rmsnorm;
    ops->layernorm = cpu_layernorm;
    ops->l2norm = cpu_l2norm;
    ops->gated_rmsnorm = cpu_gated_rmsnorm;
    ops->rope = cpu_rope;
    ops->conv1d_silu = cpu_conv1d_silu;
    ops->gdn_gates = cpu_gdn_gates;
    ops->delta_rule = cpu_delta_rule;
    ops->attention = cpu_attention;
    ops->silu_mul = cpu_silu_mul;
    ops->gelu = cpu_gelu;
    ops->sigmoid_mul = cpu_sigmoid_mul;
    ops->add = cpu_add;
    return ops;
}
