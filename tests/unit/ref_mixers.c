/* The scalar references of the CPU token mixers: the previous implementations of the delta rule and of
 * attention, unchanged, moved out of the library once the fast kernels superseded them for running
 * (7-12x slower; docs/precision.md "Variants kept, and why"). Compiled into tests/unit/test_cpu_mixers
 * (Makefile) and bench/bench_mixers (bench/build.sh), which compare the library's kernels with them.
 * Same arithmetic as the parity path (cpu_mixers.h): fp32 storage, double sums. */
#include "ref_mixers.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int nworkers(clef_pool *p) { return p ? clef_pool_size(p) : 1; }

/* ================================================================ delta rule */

/* The previous implementation, unchanged: scalar, float storage, double sums. */
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
        for (size_t r = 0; r < n; r++) {
            for (size_t s2 = 0; s2 <= r; s2++) {
                float d = expf(G[r] - G[s2]);
                Mm[r * C + s2] = (float)dot_d(Kb + r * dk, Kc + s2 * dk, dk) * d;
                In[r * C + s2] = (float)dot_d(Q + r * dk, Kc + s2 * dk, dk) * d;
            }
        }
        for (size_t r = 0; r < n; r++) {
            float eg = expf(G[r]);
            for (size_t i = 0; i < dk; i++) Kb[r * dk + i] *= eg;
        }
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
        float Gl = G[n - 1];
        float lam = expf(Gl);
        for (size_t r = 0; r < n; r++) {
            float eq = expf(G[r]), ek = expf(Gl - G[r]);
            for (size_t i = 0; i < dk; i++) {
                Q[r * dk + i] *= eq;
                Kt[i * C + r] = Kc[r * dk + i] * ek;
            }
        }
        for (size_t r = 0; r < n; r++) {
            for (size_t j = 0; j < dv; j++) {
                double acc = 0;
                for (size_t i = 0; i < dk; i++) acc += (double)Kb[r * dk + i] * R[i * dv + j];
                Vn[r * dv + j] = Vb[r * dv + j] - (float)acc;
            }
        }
        for (size_t r = 0; r < n; r++) {
            float *orow = c->o + (t0 + r) * ldv + h * dv;
            for (size_t j = 0; j < dv; j++) {
                double a1 = 0, a2 = 0;
                for (size_t i = 0; i < dk; i++) a1 += (double)Q[r * dk + i] * R[i * dv + j];
                for (size_t s2 = 0; s2 <= r; s2++) a2 += (double)In[r * C + s2] * Vn[s2 * dv + j];
                orow[j] = (float)a1 + (float)a2;
            }
        }
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

int ref_cpu_delta_rule(clef_pool *pool, float *o, const float *q, const float *k,
                       const float *v, const float *beta, const float *g, size_t T, size_t Hk,
                       size_t Hv, size_t dk, size_t dv, size_t chunk) {
    if (T == 0) return 0;
    size_t C = chunk ? chunk : 64;
    size_t per = dk * dv + 3 * C * dk + 2 * C * dv + 2 * C * C + C + dk * C;
    int nw = nworkers(pool);
    float *scratch = malloc((size_t)nw * per * sizeof(float));
    if (!scratch) return -1;
    delta_ctx c = {o, q, k, v, beta, g, T, Hk, Hv, dk, dv, C, scratch, per};
    clef_pool_for(pool, Hv, 1, delta_fn, &c);
    free(scratch);
    return 0;
}

/* ================================================================ attention */

/* The previous implementation, unchanged: per (head, 16 query rows), scores of every key in double
 * (O(Tk) scratch per worker), exp and sum in key order, weighted sum of V in key order. */
#define ATT_QB 16

typedef struct {
    float *o; const float *q, *k, *v;
    size_t ldo, ldq, ldk, ldv, Tq, Tk, nh, nkv, hd, nblk;
    float scale; int causal;
    double *scratch; size_t per_worker;
} attn_ctx;


static void attn_fn(void *c_, size_t b, size_t e, int worker) {
    attn_ctx *c = c_;
    double *sc = c->scratch + (size_t)worker * c->per_worker; /* [ATT_QB, Tk] */
    double *acc = sc + ATT_QB * c->Tk;                          /* [ATT_QB, hd] */
    size_t group = c->nh / c->nkv, hd = c->hd, Tk = c->Tk;
    for (size_t it = b; it < e; it++) {
        size_t h = it / c->nblk, i0 = (it % c->nblk) * ATT_QB, j = h / group;
        size_t nq = c->Tq - i0 < ATT_QB ? c->Tq - i0 : ATT_QB;
        size_t off = Tk - c->Tq; /* causal: keys before the queries' own rows */
        size_t nmax = c->causal ? i0 + nq + off : Tk;
        double m[ATT_QB], sum[ATT_QB];
        for (size_t r = 0; r < nq; r++) { m[r] = -INFINITY; sum[r] = 0; }
        for (size_t t = 0; t < nmax; t++) {
            const float *kv = c->k + t * c->ldk + j * hd;
            for (size_t r = 0; r < nq; r++) {
                if (c->causal && t > i0 + r + off) continue;
                double s = dot_d(c->q + (i0 + r) * c->ldq + h * hd, kv, hd) * (double)c->scale;
                sc[r * Tk + t] = s;
                if (s > m[r]) m[r] = s;
            }
        }
        for (size_t r = 0; r < nq; r++) {
            size_t n = c->causal ? i0 + r + 1 + off : Tk;
            double *sr = sc + r * Tk;
            for (size_t t = 0; t < n; t++) { sr[t] = exp(sr[t] - m[r]); sum[r] += sr[t]; }
            for (size_t d = 0; d < hd; d++) acc[r * hd + d] = 0;
        }
        for (size_t t = 0; t < nmax; t++) {
            const float *vv = c->v + t * c->ldv + j * hd;
            for (size_t r = 0; r < nq; r++) {
                if (c->causal && t > i0 + r + off) continue;
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

int ref_cpu_attention(clef_pool *pool, float *o, size_t ldo, const float *q, size_t ldq,
                      const float *k, size_t ldk, const float *v, size_t ldv, size_t Tq,
                      size_t Tk, size_t nh, size_t nkv, size_t hd, float scale, int causal) {
    if (Tq == 0 || nh == 0) return 0;
    if (causal && Tk < Tq) return -1;
    size_t per = ATT_QB * (Tk + hd);
    int nw = nworkers(pool);
    double *scratch = malloc((size_t)nw * per * sizeof(double));
    if (!scratch) return -1;
    size_t nblk = (Tq + ATT_QB - 1) / ATT_QB;
    attn_ctx c = {o, q, k, v, ldo, ldq, ldk, ldv, Tq, Tk, nh, nkv, hd, nblk, scale, causal, scratch, per};
    clef_pool_for(pool, nh * nblk, 1, attn_fn, &c);
    free(scratch);
    return 0;
}
