/* Every CPU op against a naive double-precision formula on random inputs (the chunked delta rule
 * against the token-by-token recurrence of model.md §4.4.5 at T = 1, 63, 64, 65, 130; blocked
 * attention against a naive softmax), and every op run with 1 and 3 threads must give
 * bit-identical outputs. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/threads.h"
#include "compute/cpu/cpu_ops.h"
#include "test.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double urand(void) { /* [0, 1) */
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}
static float srand1(void) { return (float)(urand() * 2.0 - 1.0); }

static float *rnd(size_t n, float scale) {
    float *p = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) p[i] = srand1() * scale;
    return p;
}

static uint16_t f2bf(float f) { /* round to nearest even */
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* A bf16 tensor with random values; also returns the exact fp32 values. */
static clef_tensor bf16_tensor(int64_t rows, int64_t cols, float scale, float **vals) {
    clef_tensor t;
    memset(&t, 0, sizeof t);
    size_t n = (size_t)(rows * cols);
    uint16_t *d = malloc(n * 2);
    float *v = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) { d[i] = f2bf(srand1() * scale); v[i] = clef_bf16_to_f32(d[i]); }
    t.data = d; t.dtype = CLEF_ST_BF16; t.ndim = 2; t.shape[0] = rows; t.shape[1] = cols; t.numel = (int64_t)n;
    t.nbytes = n * 2; t.name = "w";
    *vals = v;
    return t;
}
static clef_tensor f32_tensor(int64_t n, const float *src) {
    clef_tensor t;
    memset(&t, 0, sizeof t);
    float *d = malloc((size_t)n * sizeof(float));
    memcpy(d, src, (size_t)n * sizeof(float));
    t.data = d; t.dtype = CLEF_ST_F32; t.ndim = 1; t.shape[0] = n; t.numel = n; t.nbytes = (size_t)n * 4; t.name = "f";
    return t;
}

/* max relative error measured as |a-b| / max(|b|, floor) */
static double maxrel(const float *a, const double *b, size_t n, double floor_) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]) / fmax(fabs(b[i]), floor_);
        if (!(d <= m)) m = d; /* NaN propagates */
    }
    return m;
}
static double rel_l2(const float *a, const double *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) { double d = a[i] - b[i]; num += d * d; den += b[i] * b[i]; }
    return sqrt(num / (den > 0 ? den : 1));
}

/* ---- the outputs of one full pass over every op, for the 1-vs-N thread comparison ---- */
#define MAXOUT 64
typedef struct { float *p[MAXOUT]; size_t n[MAXOUT]; int k; } outs;
static void keep(outs *o, const float *p, size_t n) {
    o->p[o->k] = malloc(n * sizeof(float));
    memcpy(o->p[o->k], p, n * sizeof(float));
    o->n[o->k++] = n;
}

/* Token-by-token recurrence in double (model.md §4.4.5). */
static void delta_ref(double *o, const float *q, const float *k, const float *v, const float *beta,
                      const float *g, size_t T, size_t Hk, size_t Hv, size_t dk, size_t dv) {
    double *R = malloc(dk * dv * sizeof(double)), *kv = malloc(dv * sizeof(double));
    for (size_t h = 0; h < Hv; h++) {
        size_t kh = h / (Hv / Hk);
        memset(R, 0, dk * dv * sizeof(double));
        for (size_t t = 0; t < T; t++) {
            const float *qt = q + (t * Hk + kh) * dk, *kt = k + (t * Hk + kh) * dk, *vt = v + (t * Hv + h) * dv;
            double dec = exp((double)g[t * Hv + h]), be = beta[t * Hv + h];
            for (size_t i = 0; i < dk * dv; i++) R[i] *= dec;
            for (size_t j = 0; j < dv; j++) {
                double s = 0;
                for (size_t i = 0; i < dk; i++) s += R[i * dv + j] * kt[i];
                kv[j] = be * (vt[j] - s);
            }
            for (size_t i = 0; i < dk; i++)
                for (size_t j = 0; j < dv; j++) R[i * dv + j] += (double)kt[i] * kv[j];
            for (size_t j = 0; j < dv; j++) {
                double s = 0;
                for (size_t i = 0; i < dk; i++) s += R[i * dv + j] * qt[i];
                o[(t * Hv + h) * dv + j] = s;
            }
        }
    }
    free(R);
    free(kv);
}

static void attn_ref(double *o, const float *q, const float *k, const float *v, size_t Tq, size_t Tk,
                     size_t nh, size_t nkv, size_t hd, double scale, int causal) {
    double *s = malloc(Tk * sizeof(double));
    for (size_t h = 0; h < nh; h++) {
        size_t j = h / (nh / nkv);
        for (size_t i = 0; i < Tq; i++) {
            size_t n = causal ? i + 1 : Tk;
            double m = -1e300, sum = 0;
            for (size_t t = 0; t < n; t++) {
                double d = 0;
                for (size_t x = 0; x < hd; x++) d += (double)q[(i * nh + h) * hd + x] * k[(t * nkv + j) * hd + x];
                s[t] = d * scale;
                if (s[t] > m) m = s[t];
            }
            for (size_t t = 0; t < n; t++) { s[t] = exp(s[t] - m); sum += s[t]; }
            for (size_t x = 0; x < hd; x++) {
                double a = 0;
                for (size_t t = 0; t < n; t++) a += s[t] * v[(t * nkv + j) * hd + x];
                o[(i * nh + h) * hd + x] = a / sum;
            }
        }
    }
    free(s);
}

static double sig(double x) { return 1.0 / (1.0 + exp(-x)); }

static void run_all(clef_ops *ops, outs *out, int check) {
    rng = 0x1234567ull; /* the same inputs for every call */
    /* ---- linear (bf16 weights, bias, row block) ---- */
    {
        size_t T = 7, K = 133, Nall = 41, row0 = 5, N = 29;
        float *wv, *bv;
        clef_tensor w = bf16_tensor((int64_t)Nall, (int64_t)K, 0.5f, &wv);
        clef_tensor b = bf16_tensor((int64_t)Nall, 1, 0.5f, &bv);
        b.ndim = 1;
        float *x = rnd(T * K, 1.0f), *y = ops->alloc(ops, T * N);
        ops->linear(ops, y, x, T, &w, row0, N, &b);
        double *ref = malloc(T * N * sizeof(double));
        for (size_t t = 0; t < T; t++)
            for (size_t n = 0; n < N; n++) {
                double s = bv[row0 + n];
                for (size_t kk = 0; kk < K; kk++) s += (double)x[t * K + kk] * wv[(row0 + n) * K + kk];
                ref[t * N + n] = s;
            }
        /* BF16 weights run the fp32 GEMM (one fp32 FMA per k in k order, src/compute/cpu/gemm.h):
         * bounded by the sequential fp32 dot-product error K * 2^-24 * sum|x w| (+ the bias
         * rounding); CLEF_LINEAR=double runs the double loop, bounded by 1e-6 relative. */
        double *sabs = malloc(T * N * sizeof(double));
        for (size_t t = 0; t < T; t++)
            for (size_t n = 0; n < N; n++) {
                double a = fabs(bv[row0 + n]);
                for (size_t kk = 0; kk < K; kk++) a += fabs((double)x[t * K + kk] * wv[(row0 + n) * K + kk]);
                sabs[t * N + n] = a;
            }
        const char *lin = getenv("CLEF_LINEAR");
        int dbl = lin && !strcmp(lin, "double");
        if (check) {
            double worst = 0;
            for (size_t i = 0; i < T * N; i++) {
                double bound = dbl ? 1e-6 * fmax(fabs(ref[i]), 1e-3) : (double)(K + 1) * 0x1p-24 * sabs[i];
                double ex = fabs((double)y[i] - ref[i]) / bound;
                if (ex > worst) worst = ex;
            }
            CHECK_MSG(worst <= 1.0, "linear: error %.3g x its bound", worst);
        }
        keep(out, y, T * N);
        ops->linear(ops, y, x, T, &w, row0, N, NULL);
        for (size_t t = 0; t < T; t++) for (size_t n = 0; n < N; n++) ref[t * N + n] -= bv[row0 + n];
        if (check) {
            double worst = 0;
            for (size_t i = 0; i < T * N; i++) {
                double bound = dbl ? 1e-6 * fmax(fabs(ref[i]), 1e-3) : (double)K * 0x1p-24 * sabs[i];
                double ex = fabs((double)y[i] - ref[i]) / bound;
                if (ex > worst) worst = ex;
            }
            CHECK_MSG(worst <= 1.0, "linear(no bias): error %.3g x its bound", worst);
        }
        free(sabs);
        keep(out, y, T * N);
        free(ref); free(x); ops->free(ops, y); free((void *)w.data); free((void *)b.data); free(wv); free(bv);
    }
    /* ---- embed + row_mean + copy2d ---- */
    {
        size_t V = 50, D = 19, n = 6;
        float *tv;
        clef_tensor tab = bf16_tensor((int64_t)V, (int64_t)D, 1.0f, &tv);
        int32_t ids[6] = {3, 49, 0, 3, 17, 22};
        float *y = ops->alloc(ops, n * D);
        ops->embed(ops, y, &tab, ids, n);
        int ok = 1;
        for (size_t i = 0; i < n; i++) ok &= memcmp(y + i * D, tv + (size_t)ids[i] * D, D * 4) == 0;
        if (check) CHECK(ok);
        keep(out, y, n * D);
        float m[19];
        double mr[19];
        ops->row_mean(ops, m, y, D, 1, 5, D);
        for (size_t d = 0; d < D; d++) { mr[d] = 0; for (size_t r = 1; r < 5; r++) mr[d] += y[r * D + d]; mr[d] /= 4; }
        if (check) { double e = maxrel(m, mr, D, 1e-3); CHECK_MSG(e < 1e-6, "row_mean %g", e); }
        keep(out, m, D);
        float c[4 * 5];
        ops->copy2d(ops, c, 5, y + 2, D, 4, 5);
        ok = 1;
        for (size_t r = 0; r < 4; r++) for (size_t cc = 0; cc < 5; cc++) ok &= c[r * 5 + cc] == y[r * D + 2 + cc];
        if (check) CHECK(ok);
        ops->free(ops, y); free((void *)tab.data); free(tv);
    }
    /* ---- norms ---- */
    {
        size_t rows = 9, D = 48, ld = 60;
        float *x = rnd(rows * ld, 3.0f), *wv, *bv, *z = rnd(rows * D, 4.0f);
        clef_tensor w = bf16_tensor(D, 1, 0.5f, &wv), b = bf16_tensor(D, 1, 0.5f, &bv);
        w.ndim = b.ndim = 1;
        float *y = malloc(rows * D * sizeof(float));
        double *ref = malloc(rows * ld * sizeof(double));
        for (int offset = 0; offset < 2; offset++) {
            ops->rmsnorm(ops, y, D, x, ld, rows, D, &w, offset, 1e-6f);
            for (size_t r = 0; r < rows; r++) {
                double ss = 0;
                for (size_t d = 0; d < D; d++) ss += (double)x[r * ld + d] * x[r * ld + d];
                double inv = 1.0 / sqrt(ss / D + 1e-6);
                for (size_t d = 0; d < D; d++) ref[r * D + d] = x[r * ld + d] * inv * (offset ? 1.0 + wv[d] : wv[d]);
            }
            if (check) { double e = maxrel(y, ref, rows * D, 1e-3); CHECK_MSG(e < 1e-6, "rmsnorm(offset %d) %g", offset, e); }
            keep(out, y, rows * D);
        }
        /* layernorm (contiguous rows) */
        ops->layernorm(ops, y, x, rows, D, &w, &b, 1e-5f);
        for (size_t r = 0; r < rows; r++) {
            double s = 0, v = 0;
            for (size_t d = 0; d < D; d++) s += x[r * D + d];
            s /= D;
            for (size_t d = 0; d < D; d++) v += (x[r * D + d] - s) * (x[r * D + d] - s);
            v /= D;
            for (size_t d = 0; d < D; d++) ref[r * D + d] = (x[r * D + d] - s) / sqrt(v + 1e-5) * wv[d] + bv[d];
        }
        if (check) { double e = maxrel(y, ref, rows * D, 1e-3); CHECK_MSG(e < 1e-6, "layernorm %g", e); }
        keep(out, y, rows * D);
        /* gated rmsnorm, F32 weight */
        clef_tensor wf = f32_tensor((int64_t)D, wv);
        ops->gated_rmsnorm(ops, y, x, z, rows, D, &wf, 1e-6f);
        for (size_t r = 0; r < rows; r++) {
            double ss = 0;
            for (size_t d = 0; d < D; d++) ss += (double)x[r * D + d] * x[r * D + d];
            double inv = 1.0 / sqrt(ss / D + 1e-6);
            for (size_t d = 0; d < D; d++) {
                double zz = z[r * D + d];
                ref[r * D + d] = wv[d] * x[r * D + d] * inv * zz * sig(zz);
            }
        }
        if (check) { double e = maxrel(y, ref, rows * D, 1e-3); CHECK_MSG(e < 2e-6, "gated_rmsnorm %g", e); }
        keep(out, y, rows * D);
        /* l2norm with eps in the sum, then scale, strided, in place */
        float *x2 = malloc(rows * ld * sizeof(float));
        memcpy(x2, x, rows * ld * sizeof(float));
        x2[2 * ld + 3] = 0; /* keep some variety */
        for (size_t d = 0; d < D; d++) x2[4 * ld + d] = 1e-4f; /* small norm: eps matters */
        double *r2 = malloc(rows * ld * sizeof(double));
        for (size_t r = 0; r < rows; r++) {
            double ss = 0;
            for (size_t d = 0; d < D; d++) ss += (double)x2[r * ld + d] * x2[r * ld + d];
            for (size_t d = 0; d < D; d++) r2[r * D + d] = x2[r * ld + d] / sqrt(ss + 1e-6) * 0.125;
        }
        ops->l2norm(ops, x2, ld, rows, D, 1e-6f, 0.125f);
        for (size_t r = 0; r < rows; r++) memcpy(y + r * D, x2 + r * ld, D * sizeof(float));
        if (check) { double e = maxrel(y, r2, rows * D, 1e-3); CHECK_MSG(e < 1e-6, "l2norm %g", e); }
        keep(out, y, rows * D);
        free(x2); free(r2);
        free(x); free(z); free(y); free(ref); free(wv); free(bv); free((void *)w.data); free((void *)b.data); free((void *)wf.data);
    }
    /* ---- rope (two heads, rot 8 of hd 12, stride 30) ---- */
    {
        size_t T = 5, nh = 2, hd = 12, rot = 8, ld = 30, half = 4;
        float *x = rnd(T * ld, 2.0f), *cs = malloc(T * half * 4), *sn = malloc(T * half * 4);
        for (size_t i = 0; i < T * half; i++) { double a = urand() * 50; cs[i] = (float)cos(a); sn[i] = (float)sin(a); }
        double *ref = malloc(T * ld * sizeof(double));
        for (size_t i = 0; i < T * ld; i++) ref[i] = x[i];
        for (size_t t = 0; t < T; t++)
            for (size_t h = 0; h < nh; h++)
                for (size_t d = 0; d < half; d++) {
                    size_t a = t * ld + h * hd + d;
                    double c = cs[t * half + d], s = sn[t * half + d];
                    ref[a] = (double)x[a] * c - (double)x[a + half] * s;
                    ref[a + half] = (double)x[a + half] * c + (double)x[a] * s;
                }
        ops->rope(ops, x, ld, T, nh, hd, rot, cs, sn);
        if (check) { double e = maxrel(x, ref, T * ld, 1e-2); CHECK_MSG(e < 1e-6, "rope %g", e); }
        keep(out, x, T * ld);
        free(x); free(cs); free(sn); free(ref);
    }
    /* ---- conv1d + silu, gates ---- */
    {
        size_t T = 10, C = 37, K = 4;
        float *wv;
        clef_tensor w = bf16_tensor((int64_t)C, (int64_t)K, 0.7f, &wv);
        w.ndim = 3; w.shape[1] = 1; w.shape[2] = (int64_t)K;
        float *x = rnd(T * C, 2.0f), *y = malloc(T * C * 4);
        double *ref = malloc(T * C * sizeof(double));
        for (size_t t = 0; t < T; t++)
            for (size_t c = 0; c < C; c++) {
                double u = 0;
                for (size_t k = 0; k < K; k++) {
                    long p = (long)t - 3 + (long)k;
                    if (p >= 0) u += (double)wv[c * K + k] * x[(size_t)p * C + c];
                }
                ref[t * C + c] = u * sig(u);
            }
        { clef_seg s1 = {0, T}; ops->conv1d_silu(ops, y, x, C, &w, &s1, 1, NULL); }
        if (check) { double e = maxrel(y, ref, T * C, 1e-3); CHECK_MSG(e < 1e-6, "conv1d_silu %g", e); }
        keep(out, y, T * C);
        /* gates: a spans both sides of the softplus threshold */
        size_t H = 6;
        float *a = rnd(T * H, 30.0f), *b = rnd(T * H, 5.0f), *be = malloc(T * H * 4), *g = malloc(T * H * 4);
        float alog[6];
        for (size_t h = 0; h < H; h++) alog[h] = srand1();
        clef_tensor A = f32_tensor((int64_t)H, alog);
        float *dv;
        clef_tensor dt = bf16_tensor((int64_t)H, 1, 1.0f, &dv);
        dt.ndim = 1;
        ops->gdn_gates(ops, be, g, b, a, T, H, &A, &dt);
        double *rb = malloc(T * H * 8), *rg = malloc(T * H * 8);
        for (size_t t = 0; t < T; t++)
            for (size_t h = 0; h < H; h++) {
                size_t i = t * H + h;
                double u = (double)a[i] + dv[h];
                double sp = u > 20 ? u : log1p(exp(u));
                rb[i] = sig(b[i]);
                rg[i] = -exp((double)alog[h]) * sp;
            }
        if (check) {
            double e1 = maxrel(be, rb, T * H, 1e-3), e2 = maxrel(g, rg, T * H, 1e-3);
            CHECK_MSG(e1 < 1e-6 && e2 < 2e-6, "gates beta %g g %g", e1, e2);
        }
        keep(out, be, T * H);
        keep(out, g, T * H);
        free(a); free(b); free(be); free(g); free(rb); free(rg); free((void *)A.data); free((void *)dt.data); free(dv);
        free(x); free(y); free(ref); free(wv); free((void *)w.data);
    }
    /* ---- chunked delta rule vs the token recurrence ---- */
    {
        static const size_t Ts[] = {1, 63, 64, 65, 130};
        size_t Hk = 2, Hv = 4, dk = 16, dv = 24;
        for (size_t ti = 0; ti < sizeof Ts / sizeof Ts[0]; ti++) {
            size_t T = Ts[ti];
            float *q = rnd(T * Hk * dk, 1.0f), *k = rnd(T * Hk * dk, 1.0f), *v = rnd(T * Hv * dv, 1.0f);
            float *beta = malloc(T * Hv * 4), *g = malloc(T * Hv * 4), *o = malloc(T * Hv * dv * 4);
            for (size_t i = 0; i < T * Hv; i++) { beta[i] = (float)urand(); g[i] = (float)(-urand() * 0.05); }
            ops->l2norm(ops, q, dk, T * Hk, dk, 1e-6f, 1.0f / sqrtf((float)dk));
            ops->l2norm(ops, k, dk, T * Hk, dk, 1e-6f, 1.0f);
            { clef_seg s1 = {0, T}; ops->delta_rule(ops, o, q, k, v, beta, g, Hk, Hv, dk, dv, 64, &s1, 1, NULL); }
            double *ref = malloc(T * Hv * dv * sizeof(double));
            delta_ref(ref, q, k, v, beta, g, T, Hk, Hv, dk, dv);
            if (check) { double e = rel_l2(o, ref, T * Hv * dv); CHECK_MSG(e < 1e-6, "delta_rule T=%zu rel_l2 %g", T, e); }
            keep(out, o, T * Hv * dv);
            free(q); free(k); free(v); free(beta); free(g); free(o); free(ref);
        }
    }
    /* ---- attention: causal GQA (strided inside a wider row) and non-causal cross ---- */
    {
        size_t T = 70, nh = 4, nkv = 2, hd = 16;
        float *q = rnd(T * nh * hd, 2.0f), *k = rnd(T * nkv * hd, 2.0f), *v = rnd(T * nkv * hd, 1.0f);
        float *o = malloc(T * nh * hd * 4);
        double *ref = malloc(T * nh * hd * sizeof(double));
        clef_attention1(ops, o, nh * hd, q, nh * hd, k, nkv * hd, v, nkv * hd, T, T, nh, nkv, hd, 0.25f, 1);
        attn_ref(ref, q, k, v, T, T, nh, nkv, hd, 0.25, 1);
        if (check) { double e = rel_l2(o, ref, T * nh * hd); CHECK_MSG(e < 1e-6, "causal attention %g", e); }
        keep(out, o, T * nh * hd);
        size_t Tq = 3;
        clef_attention1(ops, o, nh * hd, q, nh * hd, k, nkv * hd, v, nkv * hd, Tq, T, nh, nkv, hd, 0.125f, 0);
        attn_ref(ref, q, k, v, Tq, T, nh, nkv, hd, 0.125, 0);
        if (check) { double e = rel_l2(o, ref, Tq * nh * hd); CHECK_MSG(e < 1e-6, "cross attention %g", e); }
        keep(out, o, Tq * nh * hd);
        free(q); free(k); free(v); free(o); free(ref);
    }
    /* ---- elementwise ---- */
    {
        size_t n = 10000;
        float *a = rnd(n, 6.0f), *b = rnd(n, 3.0f), *y = malloc(n * 4);
        double *ref = malloc(n * sizeof(double));
        ops->silu_mul(ops, y, a, b, n);
        for (size_t i = 0; i < n; i++) ref[i] = a[i] * sig(a[i]) * b[i];
        if (check) { double e = maxrel(y, ref, n, 1e-3); CHECK_MSG(e < 1e-6, "silu_mul %g", e); }
        keep(out, y, n);
        memcpy(y, a, n * 4);
        ops->gelu(ops, y, n, 0);
        for (size_t i = 0; i < n; i++) ref[i] = 0.5 * a[i] * (1 + erf(a[i] / sqrt(2.0)));
        if (check) { double e = maxrel(y, ref, n, 1e-3); CHECK_MSG(e < 1e-6, "gelu erf %g", e); }
        keep(out, y, n);
        memcpy(y, a, n * 4);
        ops->gelu(ops, y, n, 1);
        for (size_t i = 0; i < n; i++) {
            double x = a[i];
            ref[i] = 0.5 * x * (1 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
        }
        if (check) { double e = maxrel(y, ref, n, 1e-3); CHECK_MSG(e < 1e-6, "gelu tanh %g", e); }
        keep(out, y, n);
        memcpy(y, a, n * 4);
        ops->sigmoid_mul(ops, y, b, n);
        for (size_t i = 0; i < n; i++) ref[i] = a[i] * sig(b[i]);
        if (check) { double e = maxrel(y, ref, n, 1e-3); CHECK_MSG(e < 1e-6, "sigmoid_mul %g", e); }
        keep(out, y, n);
        ops->add(ops, y, a, b, n);
        for (size_t i = 0; i < n; i++) ref[i] = (double)a[i] + b[i];
        if (check) { double e = maxrel(y, ref, n, 1e-3); CHECK_MSG(e < 1e-7, "add %g", e); }
        keep(out, y, n);
        free(a); free(b); free(y); free(ref);
    }
    CHECK(!ops->failed);
}

int main(void) {
    /* pool partition: covers [0, n) exactly once, aligned to grain */
    for (size_t n = 0; n < 50; n++)
        for (int nt = 1; nt <= 5; nt++) {
            size_t next = 0;
            int ok = 1;
            for (int w = 0; w < nt; w++) {
                size_t b, e;
                clef_pool_piece(n, 4, nt, w, &b, &e);
                ok &= b == next && e >= b && (b % 4 == 0 || b == n);
                next = e;
            }
            CHECK(ok && next == n);
        }
    /* half floats */
    CHECK(clef_half_to_f32(0x3c00) == 1.0f && clef_half_to_f32(0xc000) == -2.0f &&
          clef_half_to_f32(0x0001) == 5.9604644775390625e-08f && clef_half_to_f32(0x7bff) == 65504.0f);

    clef_err err = {0};
    clef_ops *o1 = clef_cpu_ops_create(1, NULL, &err), *o3 = clef_cpu_ops_create(3, NULL, &err);
    CHECK(o1 && o3);
    if (!o1 || !o3) return TEST_END();
    outs a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    run_all(o1, &a, 1);
    run_all(o3, &b, 0);
    CHECK(a.k == b.k && a.k > 20);
    int same = 1;
    for (int i = 0; i < a.k; i++) {
        int s = a.n[i] == b.n[i] && memcmp(a.p[i], b.p[i], a.n[i] * 4) == 0;
        if (!s) fprintf(stderr, "output %d differs between 1 and 3 threads\n", i);
        same &= s;
        free(a.p[i]);
        free(b.p[i]);
    }
    CHECK_MSG(same, "1 vs 3 threads not bit-identical");
    o1->destroy(o1);
    o3->destroy(o3);
    return TEST_END();
}
