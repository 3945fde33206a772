/* Every op of the CUDA backend against the CPU backend (the reference) on random inputs at the real
 * shapes of the model (hidden 4096, attention 16/4 heads x 256, GDN 16/32 heads x 128, vision
 * 1152 / 16 x 72, head width 1024 / 16 x 64), T = 1, 63, 64, 65, 512 (and 1100 / 1500 for the
 * delta rule and attention), for both precisions, each with the newest kernels (modes "fp32",
 * "fast") and the old ones (modes "fp32/old", "fast/old": one-term bf16 GEMMs, SIMT attention,
 * delta rule v1; in the fp32 modes "attention" is the register-tiled kernel vs the first SIMT one).
 * The delta rule also runs v2 (kernel A v1 + kernel B v2), which must give the same
 * bits as the default v3 (kernel A v2 computes the same numbers in the same order).
 * Built only with `make CUDA=1`; exits 77 when no GPU is present at run time.
 *
 * Error measure: rel = max |gpu - cpu| / max |cpu| over the output (NaNs must match). Bars:
 *   fp32 (parity) backend: 2e-6 for elementwise ops and norms, 1e-5 for linear, attention and the
 *                          delta rule (fp32 GEMM / fp32 online softmax vs the CPU's double sums);
 *   fast backend: the same, except linear: with the two-term split of the activations the bar
 *                 derived in split_bar (~1e-4 here); the old one-term path 1e-2. The fast attention
 *                 (3xTF32 tensor cores) and delta rule (fp32 sums) keep 1e-5.
 * Also checked: the same call twice gives the same bits (linear, attention, delta rule), and the
 * arena reuses memory (no growth over repeated calls). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/cpu/cpu_ops.h"
#include "compute/cuda/cuda_ops.h"
#include "test.h"

static uint64_t rs = 0x1234567887654321ull;
static float frand(void) { /* uniform [-1, 1) */
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (float)((double)(rs >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0);
}

static float *rvec(size_t n, float scale, float center) {
    float *v = malloc((n ? n : 1) * sizeof(float));
    if (!v) { fprintf(stderr, "out of memory\n"); exit(1); }
    for (size_t i = 0; i < n; i++) v[i] = center + scale * frand();
    return v;
}

static uint16_t f2bf(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* Host weight tensors (kept for the whole run: the GPU cache is keyed by their addresses). */
static clef_tensor wt(int dtype, size_t rows, size_t cols, float scale, float center) {
    clef_tensor t;
    memset(&t, 0, sizeof t);
    size_t n = rows * (cols ? cols : 1);
    t.dtype = dtype;
    t.ndim = cols ? 2 : 1;
    t.shape[0] = (int64_t)rows;
    if (cols) t.shape[1] = (int64_t)cols;
    t.numel = (int64_t)n;
    if (dtype == CLEF_ST_BF16) {
        uint16_t *d = malloc(n * 2);
        if (!d) exit(1);
        for (size_t i = 0; i < n; i++) d[i] = f2bf(center + scale * frand());
        t.data = d;
        t.nbytes = n * 2;
    } else {
        float *d = rvec(n, scale, center);
        t.data = d;
        t.nbytes = n * 4;
    }
    t.name = "test";
    return t;
}

/* The backends cache weights by host address for their whole life (a mapped checkpoint never
 * moves), so a test must not free a weight tensor and let malloc hand its address to the next
 * one: the GPU would use the cached copy of the old data (the first device run saw exactly that:
 * 30 "failures" at the T where an address came back). Weight data is kept until the end. */
static void *kept[4096];
static size_t nkept;
static void wkeep(clef_tensor t) {
    if (nkept == sizeof kept / sizeof kept[0]) { fprintf(stderr, "wkeep: too many weights\n"); exit(1); }
    kept[nkept++] = (void *)t.data;
}

/* Modes: 0 fp32 and 1 fast with the default (newest) kernels, 2 and 3 the same backends switched to
 * the old kernels (one-term bf16 GEMMs, SIMT attention, delta rule v1). Ops without variants run
 * modes 0 and 1 only. */
#define NMODES 4
static clef_ops *cpu, *gpu[2];
static const char *mode_name[NMODES] = {"fp32", "fast", "fp32/old", "fast/old"};

/* The backend of mode m with the kernels of that mode selected. */
static clef_ops *G_of(int m) {
    clef_ops *g = gpu[m & 1];
    clef_cuda_kernels k;
    k.linear_split = m < 2;
    k.attn = m < 2 ? CLEF_CUDA_ATTN_V3 : CLEF_CUDA_ATTN_SIMT; /* the newest, verified or not */
    k.delta = m < 2 ? CLEF_CUDA_DELTA_V3 : CLEF_CUDA_DELTA_V1;
    clef_cuda_set_kernels(g, &k);
    return g;
}

static float *dev(clef_ops *g, const float *h, size_t n) {
    float *d = g->alloc(g, n ? n : 1);
    if (!d) { fprintf(stderr, "device alloc failed\n"); exit(1); }
    if (h && n) g->upload(g, d, h, n);
    return d;
}
static float *host_of(clef_ops *g, const float *d, size_t n) {
    float *h = malloc((n ? n : 1) * sizeof(float));
    if (!h) exit(1);
    g->download(g, h, d, n);
    return h;
}

static double worst[NMODES];

static void cmpv(const char *op, int m, size_t T, const float *got, const float *ref, size_t n, double tol) {
    double maxref = 0, maxd = 0;
    size_t nan_bad = 0, worst_i = 0;
    for (size_t i = 0; i < n; i++) {
        int a = isnan(got[i]), b = isnan(ref[i]);
        if (a || b) {
            if (a != b) nan_bad++;
            continue;
        }
        double d = fabs((double)got[i] - (double)ref[i]);
        if (d > maxd) { maxd = d; worst_i = i; }
        if (fabs(ref[i]) > maxref) maxref = fabs(ref[i]);
    }
    double rel = maxd / (maxref > 0 ? maxref : 1.0);
    if (rel > worst[m]) worst[m] = rel;
    printf("%-14s %-8s T=%-4zu n=%-9zu max|d|=%.3e rel=%.3e tol=%.1e%s\n", op, mode_name[m], T, n, maxd, rel, tol,
           rel <= tol && !nan_bad ? "" : "  <-- FAIL");
    CHECK_MSG(!nan_bad && rel <= tol, "%s %s T=%zu: rel %.3e (tol %.0e), %zu NaN mismatches, worst at %zu (%g vs %g)",
              op, mode_name[m], T, rel, tol, nan_bad, worst_i, n ? got[worst_i] : 0.0, n ? ref[worst_i] : 0.0);
}

static void check_ok(int m, const char *op) {
    CHECK_MSG(!gpu[m & 1]->failed, "%s (%s): backend failed: %s", op, mode_name[m], clef_cuda_last_error(gpu[m & 1]));
}

/* ------------------------------------------------------------------ per-op tests */

/* The fast linear's bar, derived (docs/cuda.md). Each activation is split x = h + l into two bf16
 * terms (round to nearest, unit roundoff u = 2^-8): |x - h| <= u |x| and |(x - h) - l| <= u |x - h|,
 * so |x - h - l| <= u^2 |x|; the bf16 weights are exact and bf16 x bf16 products are exact in fp32.
 * Output i is then off by at most u^2 S_i (S_i = sum_k |W_ik x_k|) plus the fp32 accumulation of 2K
 * products, for which we allow twice the parity path's bar (1e-5 relative, the same fp32 sums over K
 * terms). In the test's rel measure: tol = 2e-5 + u^2 max_i S_i / max_i |y_i|. (The old one-term
 * path has u instead of u^2 and keeps its empirical 1e-2.) */
static double split_bar(const float *x, const clef_tensor *w, size_t row0, size_t T, size_t N, size_t K,
                        const float *ref) {
    const uint16_t *wd = w->data;
    float *aw = malloc(K * sizeof(float)), *ax = malloc(T * K * sizeof(float));
    if (!aw || !ax) exit(1);
    for (size_t i = 0; i < T * K; i++) ax[i] = fabsf(x[i]);
    double maxS = 0, maxy = 0;
    for (size_t n = 0; n < N; n++) {
        for (size_t k = 0; k < K; k++) aw[k] = fabsf(clef_bf16_to_f32(wd[(row0 + n) * K + k]));
        for (size_t t = 0; t < T; t++) {
            /* positive terms in float, 8 lanes: relative error <= K 2^-24, covered by the 1.01 below */
            float p[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            const float *xr = ax + t * K;
            size_t k = 0;
            for (; k + 8 <= K; k += 8)
                for (int j = 0; j < 8; j++) p[j] += aw[k + j] * xr[k + j];
            for (; k < K; k++) p[0] += aw[k] * xr[k];
            double S = 0;
            for (int j = 0; j < 8; j++) S += p[j];
            if (S > maxS) maxS = S;
            if (fabs(ref[t * N + n]) > maxy) maxy = fabs(ref[t * N + n]);
        }
    }
    free(aw);
    free(ax);
    const double u2 = 1.0 / 65536.0;
    return 2e-5 + 1.01 * u2 * maxS / (maxy > 0 ? maxy : 1.0);
}

static void t_linear(size_t T, size_t N, size_t K, size_t row0, int bias) {
    clef_tensor w = wt(CLEF_ST_BF16, row0 + N, K, 0.05f, 0.0f), b = wt(CLEF_ST_BF16, row0 + N, 0, 0.5f, 0.0f);
    float *x = rvec(T * K, 1.0f, 0.0f), *ref = malloc(T * N * sizeof(float));
    if (!ref) exit(1);
    cpu->linear(cpu, ref, x, T, &w, row0, N, bias ? &b : NULL);
    double fast_tol = split_bar(x, &w, row0, T, N, K, ref);
    for (int m = 0; m < NMODES; m++) {
        clef_ops *g = G_of(m);
        float *dx = dev(g, x, T * K), *dy = dev(g, NULL, T * N);
        g->linear(g, dy, dx, T, &w, row0, N, bias ? &b : NULL);
        float *got = host_of(g, dy, T * N);
        check_ok(m, "linear");
        char name[48];
        snprintf(name, sizeof name, "linear%zux%zu%s", N, K, bias ? "+b" : "");
        cmpv(name, m, T, got, ref, T * N, (m & 1) == 0 ? 1e-5 : m == 1 ? fast_tol : 1e-2);
        /* same bits again */
        g->linear(g, dy, dx, T, &w, row0, N, bias ? &b : NULL);
        float *again = host_of(g, dy, T * N);
        CHECK_MSG(!memcmp(again, got, T * N * sizeof(float)), "linear %s T=%zu: not deterministic", mode_name[m], T);
        free(got);
        free(again);
        g->free(g, dx);
        g->free(g, dy);
    }
    free(x);
    free(ref);
    wkeep(w);
    wkeep(b);
}

/* rows of D at strides: rmsnorm (with offset), l2norm, gated, layernorm */
static void t_norms(size_t T) {
    const size_t H = 4096, hd = 256, nh = 16, dk = 128, Hv = 32, Hvis = 1152;
    clef_tensor wH = wt(CLEF_ST_BF16, H, 0, 0.2f, 0.0f), whd = wt(CLEF_ST_BF16, hd, 0, 0.2f, 0.0f);
    clef_tensor wg = wt(CLEF_ST_F32, dk, 0, 0.5f, 1.0f);
    clef_tensor lw = wt(CLEF_ST_BF16, Hvis, 0, 0.3f, 1.0f), lb = wt(CLEF_ST_BF16, Hvis, 0, 0.3f, 0.0f);
    float *x = rvec(T * H, 2.0f, 0.1f), *qg = rvec(T * nh * 2 * hd, 3.0f, 0.0f), *z = rvec(T * Hv * dk, 3.0f, 0.0f);
    float *xv = rvec(T * Hvis, 1.5f, 0.3f);
    float *r1 = malloc(T * H * 4), *r2 = malloc(T * nh * hd * 4), *r3 = malloc(T * nh * 2 * hd * 4);
    float *r4 = malloc(T * Hv * dk * 4), *r5 = malloc(T * Hvis * 4);
    cpu->rmsnorm(cpu, r1, H, x, H, T, H, &wH, 1, 1e-6f);
    cpu->rmsnorm(cpu, r2, hd, qg, 2 * hd, T * nh, hd, &whd, 1, 1e-6f); /* strided q norm */
    memcpy(r3, qg, T * nh * 2 * hd * 4);
    cpu->l2norm(cpu, r3, dk, T * nh * 2 * hd / dk, dk, 1e-6f, 0.08838834764831845f);
    cpu->gated_rmsnorm(cpu, r4, z, qg, T * Hv, dk, &wg, 1e-6f); /* x = z, gate = qg (same size) */
    cpu->layernorm(cpu, r5, xv, T, Hvis, &lw, &lb, 1e-6f);
    for (int m = 0; m < 2; m++) {
        clef_ops *g = G_of(m);
        float *dx = dev(g, x, T * H), *dq = dev(g, qg, T * nh * 2 * hd), *dz = dev(g, z, T * Hv * dk);
        float *dv = dev(g, xv, T * Hvis), *o1 = dev(g, NULL, T * H), *o2 = dev(g, NULL, T * nh * hd);
        float *o4 = dev(g, NULL, T * Hv * dk);
        g->rmsnorm(g, o1, H, dx, H, T, H, &wH, 1, 1e-6f);
        g->rmsnorm(g, o2, hd, dq, 2 * hd, T * nh, hd, &whd, 1, 1e-6f);
        g->gated_rmsnorm(g, o4, dz, dq, T * Hv, dk, &wg, 1e-6f);
        g->layernorm(g, dv, dv, T, Hvis, &lw, &lb, 1e-6f); /* in place */
        g->l2norm(g, dq, dk, T * nh * 2 * hd / dk, dk, 1e-6f, 0.08838834764831845f);
        float *h1 = host_of(g, o1, T * H), *h2 = host_of(g, o2, T * nh * hd), *h3 = host_of(g, dq, T * nh * 2 * hd);
        float *h4 = host_of(g, o4, T * Hv * dk), *h5 = host_of(g, dv, T * Hvis);
        check_ok(m, "norms");
        cmpv("rmsnorm", m, T, h1, r1, T * H, 2e-6);
        cmpv("rmsnorm/head", m, T, h2, r2, T * nh * hd, 2e-6);
        cmpv("l2norm", m, T, h3, r3, T * nh * 2 * hd, 2e-6);
        cmpv("gated_rmsnorm", m, T, h4, r4, T * Hv * dk, 2e-6);
        cmpv("layernorm", m, T, h5, r5, T * Hvis, 2e-6);
        free(h1); free(h2); free(h3); free(h4); free(h5);
        g->free(g, dx); g->free(g, dq); g->free(g, dz); g->free(g, dv); g->free(g, o1); g->free(g, o2); g->free(g, o4);
    }
    free(x); free(qg); free(z); free(xv); free(r1); free(r2); free(r3); free(r4); free(r5);
    wkeep(wH); wkeep(whd); wkeep(wg); wkeep(lw); wkeep(lb);
}

static void t_gdn_small(size_t T) {
    const size_t C = 8192, K = 4, H = 32, nh = 16, hd = 256, rot = 64, half = rot / 2;
    clef_tensor cw = wt(CLEF_ST_BF16, C, 0, 0.5f, 0.0f);
    cw.ndim = 3; cw.shape[0] = (int64_t)C; cw.shape[1] = 1; cw.shape[2] = (int64_t)K; cw.numel = (int64_t)(C * K);
    wkeep(cw);
    { uint16_t *d = malloc(C * K * 2); if (!d) exit(1); for (size_t i = 0; i < C * K; i++) d[i] = f2bf(0.5f * frand()); cw.data = d; cw.nbytes = C * K * 2; }
    clef_tensor alog = wt(CLEF_ST_F32, H, 0, 1.0f, 0.0f), dtb = wt(CLEF_ST_BF16, H, 0, 1.0f, 0.0f);
    float *x = rvec(T * C, 2.0f, 0.0f), *rc = malloc(T * C * 4);
    float *a = rvec(T * H, 24.0f, 0.0f), *b = rvec(T * H, 4.0f, 0.0f), *rb = malloc(T * H * 4), *rg = malloc(T * H * 4);
    float *q = rvec(T * nh * hd, 1.0f, 0.0f), *rq = malloc(T * nh * hd * 4);
    float *cs = malloc(T * half * 4), *sn = malloc(T * half * 4);
    for (size_t i = 0; i < T * half; i++) {
        double th = (double)(i / half) * pow(1e7, -(double)(i % half) / (double)half);
        cs[i] = (float)cos(th);
        sn[i] = (float)sin(th);
    }
    { clef_seg s1 = {0, T}; cpu->conv1d_silu(cpu, rc, x, C, &cw, &s1, 1, NULL); }
    cpu->gdn_gates(cpu, rb, rg, b, a, T, H, &alog, &dtb);
    memcpy(rq, q, T * nh * hd * 4);
    cpu->rope(cpu, rq, nh * hd, T, nh, hd, rot, cs, sn);
    for (int m = 0; m < 2; m++) {
        clef_ops *g = G_of(m);
        float *dx = dev(g, x, T * C), *dc = dev(g, NULL, T * C), *da = dev(g, a, T * H), *db = dev(g, b, T * H);
        float *dbe = dev(g, NULL, T * H), *dg = dev(g, NULL, T * H), *dq = dev(g, q, T * nh * hd);
        float *dcs = dev(g, cs, T * half), *dsn = dev(g, sn, T * half);
        { clef_seg s1 = {0, T}; g->conv1d_silu(g, dc, dx, C, &cw, &s1, 1, NULL); }
        g->gdn_gates(g, dbe, dg, db, da, T, H, &alog, &dtb);
        g->rope(g, dq, nh * hd, T, nh, hd, rot, dcs, dsn);
        float *h1 = host_of(g, dc, T * C), *h2 = host_of(g, dbe, T * H), *h3 = host_of(g, dg, T * H);
        float *h4 = host_of(g, dq, T * nh * hd);
        check_ok(m, "gdn pieces");
        cmpv("conv1d_silu", m, T, h1, rc, T * C, 2e-6);
        cmpv("gdn_gates.beta", m, T, h2, rb, T * H, 2e-6);
        cmpv("gdn_gates.g", m, T, h3, rg, T * H, 2e-6);
        cmpv("rope", m, T, h4, rq, T * nh * hd, 2e-6);
        free(h1); free(h2); free(h3); free(h4);
        g->free(g, dx); g->free(g, dc); g->free(g, da); g->free(g, db); g->free(g, dbe); g->free(g, dg);
        g->free(g, dq); g->free(g, dcs); g->free(g, dsn);
    }
    free(x); free(rc); free(a); free(b); free(rb); free(rg); free(q); free(rq); free(cs); free(sn);
    wkeep(cw); wkeep(alog); wkeep(dtb);
}

static void l2rows(float *x, size_t rows, size_t D, float scale) {
    for (size_t r = 0; r < rows; r++) {
        double s = 0;
        for (size_t d = 0; d < D; d++) s += (double)x[r * D + d] * x[r * D + d];
        float inv = (float)(1.0 / sqrt(s + 1e-6));
        for (size_t d = 0; d < D; d++) x[r * D + d] = x[r * D + d] * inv * scale;
    }
}

/* The delta rule on G: inputs uploaded, output downloaded; *again (when not NULL) a second run on
 * the same device buffers. */
static float *delta_on(clef_ops *G, const float *q, const float *k, const float *v, const float *beta, const float *g,
                       size_t T, size_t Hk, size_t Hv, size_t dk, size_t dv, float **again) {
    float *dq = dev(G, q, T * Hk * dk), *dk_ = dev(G, k, T * Hk * dk), *dv_ = dev(G, v, T * Hv * dv);
    float *db = dev(G, beta, T * Hv), *dg = dev(G, g, T * Hv), *dout = dev(G, NULL, T * Hv * dv);
    { clef_seg s1 = {0, T}; G->delta_rule(G, dout, dq, dk_, dv_, db, dg, Hk, Hv, dk, dv, 64, &s1, 1, NULL); }
    float *got = host_of(G, dout, T * Hv * dv);
    if (again) {
        { clef_seg s1 = {0, T}; G->delta_rule(G, dout, dq, dk_, dv_, db, dg, Hk, Hv, dk, dv, 64, &s1, 1, NULL); }
        *again = host_of(G, dout, T * Hv * dv);
    }
    G->free(G, dq); G->free(G, dk_); G->free(G, dv_); G->free(G, db); G->free(G, dg); G->free(G, dout);
    return got;
}

static void t_delta(size_t T, size_t Hk, size_t Hv, size_t dk, size_t dv) {
    float *q = rvec(T * Hk * dk, 1.0f, 0.0f), *k = rvec(T * Hk * dk, 1.0f, 0.0f), *v = rvec(T * Hv * dv, 1.0f, 0.0f);
    l2rows(q, T * Hk, dk, (float)pow((double)dk, -0.5));
    l2rows(k, T * Hk, dk, 1.0f);
    float *beta = malloc(T * Hv * 4), *g = malloc(T * Hv * 4), *ref = malloc(T * Hv * dv * 4);
    for (size_t i = 0; i < T * Hv; i++) {
        beta[i] = 0.5f + 0.49f * frand();
        g[i] = -0.3f * (1.0f + frand()); /* in (-0.6, 0] */
    }
    { clef_seg s1 = {0, T}; cpu->delta_rule(cpu, ref, q, k, v, beta, g, Hk, Hv, dk, dv, 64, &s1, 1, NULL); }
    float *newest[2] = {NULL, NULL};
    for (int m = 0; m < NMODES; m++) {
        float *again;
        float *got = delta_on(G_of(m), q, k, v, beta, g, T, Hk, Hv, dk, dv, &again);
        check_ok(m, "delta_rule");
        char name[40];
        snprintf(name, sizeof name, "delta%zux%zu", Hv, dk);
        cmpv(name, m, T, got, ref, T * Hv * dv, 1e-5);
        CHECK_MSG(!memcmp(got, again, T * Hv * dv * 4), "delta_rule %s T=%zu: not deterministic", mode_name[m], T);
        if (m < 2)
            newest[m] = got;
        else
            free(got);
        free(again);
    }
    /* v2 (kernel A v1) must give v3's bits: the two kernel A compute the same sums in the same order */
    for (int m = 0; m < 2; m++) {
        clef_ops *G = G_of(m);
        clef_cuda_kernels kv;
        clef_cuda_get_kernels(G, &kv);
        kv.delta = CLEF_CUDA_DELTA_V2;
        clef_cuda_set_kernels(G, &kv);
        float *got = delta_on(G, q, k, v, beta, g, T, Hk, Hv, dk, dv, NULL);
        check_ok(m, "delta_rule v2");
        char name[48];
        snprintf(name, sizeof name, "delta%zux%zu/v2", Hv, dk);
        cmpv(name, m, T, got, ref, T * Hv * dv, 1e-5);
        CHECK_MSG(!memcmp(got, newest[m], T * Hv * dv * 4), "delta_rule %s T=%zu dk=%zu: v2 and v3 differ", mode_name[m], T,
                  dk);
        free(got);
    }
    free(newest[0]); free(newest[1]);
    free(q); free(k); free(v); free(beta); free(g); free(ref);
}

static void t_attention(const char *name, size_t Tq, size_t Tk, size_t nh, size_t nkv, size_t hd, int causal,
                        int packed) {
    /* packed: q, k, v interleaved in one [T, 3 * nh * hd] buffer, as the vision tower passes them */
    size_t ldq = packed ? 3 * nh * hd : nh * hd, ldk = packed ? 3 * nh * hd : nkv * hd;
    size_t nq = Tq * ldq, nk = Tk * ldk;
    float *q = rvec(nq, 1.5f, 0.0f), *k = packed ? q : rvec(nk, 1.5f, 0.0f), *v = packed ? q : rvec(nk, 1.0f, 0.0f);
    const float *qp = q, *kp = packed ? q + nh * hd : k, *vp = packed ? q + 2 * nh * hd : v;
    size_t ldo = nh * hd;
    float *ref = malloc(Tq * ldo * 4);
    float scale = (float)(1.0 / sqrt((double)hd));
    clef_attention1(cpu, ref, ldo, qp, ldq, kp, ldk, vp, ldk, Tq, Tk, nh, nkv, hd, scale, causal);
    for (int m = 0; m < NMODES; m++) {
        clef_ops *g = G_of(m);
        float *dq = dev(g, q, nq), *dk = packed ? dq : dev(g, k, nk), *dv = packed ? dq : dev(g, v, nk);
        float *dqp = dq, *dkp = packed ? dq + nh * hd : dk, *dvp = packed ? dq + 2 * nh * hd : dv;
        float *o = dev(g, NULL, Tq * ldo);
        clef_attention1(g, o, ldo, dqp, ldq, dkp, ldk, dvp, ldk, Tq, Tk, nh, nkv, hd, scale, causal);
        float *got = host_of(g, o, Tq * ldo);
        check_ok(m, "attention");
        cmpv(name, m, Tq, got, ref, Tq * ldo, 1e-5);
        clef_attention1(g, o, ldo, dqp, ldq, dkp, ldk, dvp, ldk, Tq, Tk, nh, nkv, hd, scale, causal);
        float *again = host_of(g, o, Tq * ldo);
        CHECK_MSG(!memcmp(got, again, Tq * ldo * 4), "attention %s %s: not deterministic", name, mode_name[m]);
        free(got); free(again);
        g->free(g, dq);
        if (!packed) { g->free(g, dk); g->free(g, dv); }
        g->free(g, o);
    }
    free(q);
    if (!packed) { free(k); free(v); }
    free(ref);
}

static void t_misc(size_t T) {
    const size_t H = 4096, V = 3000, n = T * H;
    clef_tensor tab = wt(CLEF_ST_BF16, V, H, 1.0f, 0.0f);
    int32_t *ids = malloc(T * sizeof(int32_t));
    for (size_t i = 0; i < T; i++) ids[i] = (int32_t)((rs = rs * 6364136223846793005ull + 1) >> 33) % (int32_t)V;
    float *a = rvec(n, 8.0f, 0.0f), *b = rvec(n, 8.0f, 0.0f);
    float *re = malloc(n * 4), *rsm = malloc(n * 4), *rge = malloc(n * 4), *rgt = malloc(n * 4), *rsg = malloc(n * 4);
    float *rad = malloc(n * 4), *rmean = malloc(2 * H * 4), *rcp = malloc(n * 4);
    cpu->embed(cpu, re, &tab, ids, T);
    cpu->silu_mul(cpu, rsm, a, b, n);
    memcpy(rge, a, n * 4); cpu->gelu(cpu, rge, n, 0);
    memcpy(rgt, a, n * 4); cpu->gelu(cpu, rgt, n, 1);
    memcpy(rsg, a, n * 4); cpu->sigmoid_mul(cpu, rsg, b, n);
    cpu->add(cpu, rad, a, b, n);
    cpu->row_mean(cpu, rmean, a, H, T / 3, T, H);
    cpu->row_mean(cpu, rmean + H, a, H, T, T, H); /* empty: NaN */
    memset(rcp, 0, n * 4);
    cpu->copy2d(cpu, rcp, H, a + 7, H, T, H / 2);
    for (int m = 0; m < 2; m++) {
        clef_ops *g = G_of(m);
        float *da = dev(g, a, n), *db = dev(g, b, n), *o1 = dev(g, NULL, n), *o2 = dev(g, a, n), *o3 = dev(g, a, n);
        float *o4 = dev(g, a, n), *o5 = dev(g, a, n), *o6 = dev(g, NULL, 2 * H), *o7 = dev(g, NULL, n);
        float *o8 = dev(g, NULL, n);
        float *zero = calloc(n, 4);
        g->upload(g, o8, zero, n);
        g->embed(g, o1, &tab, ids, T);
        g->silu_mul(g, o7, da, db, n);
        g->gelu(g, o2, n, 0);
        g->gelu(g, o3, n, 1);
        g->sigmoid_mul(g, o4, db, n);
        g->add(g, o5, o5, db, n); /* y aliases a */
        g->row_mean(g, o6, da, H, T / 3, T, H);
        g->row_mean(g, o6 + H, da, H, T, T, H);
        g->copy2d(g, o8, H, da + 7, H, T, H / 2);
        float *h;
        check_ok(m, "misc");
        h = host_of(g, o1, n); cmpv("embed", m, T, h, re, n, 0); free(h);
        h = host_of(g, o7, n); cmpv("silu_mul", m, T, h, rsm, n, 2e-6); free(h);
        h = host_of(g, o2, n); cmpv("gelu", m, T, h, rge, n, 2e-6); free(h);
        h = host_of(g, o3, n); cmpv("gelu_tanh", m, T, h, rgt, n, 2e-6); free(h);
        h = host_of(g, o4, n); cmpv("sigmoid_mul", m, T, h, rsg, n, 2e-6); free(h);
        h = host_of(g, o5, n); cmpv("add", m, T, h, rad, n, 0); free(h);
        h = host_of(g, o6, 2 * H); cmpv("row_mean", m, T, h, rmean, 2 * H, 2e-6); free(h);
        h = host_of(g, o8, n); cmpv("copy2d", m, T, h, rcp, n, 0); free(h);
        free(zero);
        g->free(g, da); g->free(g, db); g->free(g, o1); g->free(g, o2); g->free(g, o3); g->free(g, o4);
        g->free(g, o5); g->free(g, o6); g->free(g, o7); g->free(g, o8);
    }
    free(ids); free(a); free(b); free(re); free(rsm); free(rge); free(rgt); free(rsg); free(rad); free(rmean); free(rcp);
    wkeep(tab);
}

int main(void) {
    int n = clef_cuda_device_count();
    if (n <= 0) {
        printf("skip: no CUDA device at run time (cudaGetDeviceCount = 0); run tools/device-check.sh on a GPU machine\n");
        return 77;
    }
    clef_err err;
    clef_err_clear(&err);
    cpu = clef_cpu_ops_create(0, NULL, &err);
    gpu[0] = clef_cuda_ops_create(0, CLEF_CUDA_FP32, NULL, &err);
    gpu[1] = gpu[0] ? clef_cuda_ops_create(0, CLEF_CUDA_FAST, NULL, &err) : NULL;
    if (!cpu || !gpu[0] || !gpu[1]) {
        printf("backend creation failed: %s\n", err.msg);
        return 1;
    }
    printf("device: %s\n", clef_cuda_device_name(gpu[0]));
    static const size_t Ts[] = {1, 63, 64, 65, 512};
    for (size_t i = 0; i < sizeof Ts / sizeof Ts[0]; i++) {
        size_t T = Ts[i];
        t_linear(T, 1024, 4096, 0, 0);        /* k_proj */
        t_linear(T, 32, 4096, 0, 0);          /* in_proj_b */
        t_linear(T, 1024, 1024, 2048, 1);     /* head in_proj rows [2W, 3W) with bias */
        t_norms(T);
        t_gdn_small(T);
        t_delta(T, 16, 32, 128, 128);
        t_attention("attn16/4x256c", T, T, 16, 4, 256, 1, 0);
        t_attention("vis16x72", T, T, 16, 16, 72, 0, 1);
        t_misc(T);
    }
    t_linear(65, 4096, 4096, 0, 0);           /* a full square projection */
    t_linear(64, 12288, 4096, 0, 0);          /* mlp gate/up */
    t_linear(3, 1, 1024, 0, 1);               /* scorer3: N = 1 */
    t_delta(130, 2, 4, 16, 24);               /* the tiny checkpoint's GDN dims, 3 chunks */
    t_delta(65, 4, 8, 64, 32);                /* dk 64, GQA 2 */
    t_delta(100, 2, 2, 32, 80);               /* dk + dv = 112 < one column per thread */
    t_delta(70, 1, 2, 18, 20);                /* dk % 4 != 0: kernel A v1 and kernel B v1 in every mode */
    t_delta(129, 1, 1, 160, 96);              /* dk > 128: the same fallback; dk + dv > 256 columns */
    t_attention("head16x64", 7, 512, 16, 16, 64, 0, 0); /* Tq != Tk, as the head's cross attention */
    t_attention("tiny4/2x32c", 100, 100, 4, 2, 32, 1, 0);
    t_attention("a8/2x128c", 200, 200, 8, 2, 128, 1, 0); /* the tensor-core kernel's DP = 128 */
    t_attention("a2/1x100c", 130, 130, 2, 1, 100, 1, 0);  /* hd padded to 128, GQA 2 */
    t_attention("a3x80", 65, 40, 3, 3, 80, 0, 0);         /* fp32 kernel's DP = 80 exactly, Tq > Tk */
    /* long: many chunks / key tiles, T not a multiple of the tiles */
    t_delta(1500, 16, 32, 128, 128);
    t_attention("attn16/4x256c", 1500, 1500, 16, 4, 256, 1, 0);
    t_attention("vis16x72", 1100, 1100, 16, 16, 72, 0, 1);
    /* the arena must not grow over repeated requests */
    size_t a0 = 0, a1 = 0;
    clef_cuda_memory(gpu[0], &a0, NULL);
    t_delta(512, 16, 32, 128, 128);
    t_attention("attn16/4x256c", 512, 512, 16, 4, 256, 1, 0);
    clef_cuda_memory(gpu[0], &a1, NULL);
    CHECK_MSG(a0 == a1, "arena grew from %zu to %zu bytes on a repeated request", a0, a1);
    printf("worst rel: fp32 %.3e, fast %.3e, fp32/old %.3e, fast/old %.3e\n", worst[0], worst[1], worst[2], worst[3]);
    gpu[1]->destroy(gpu[1]);
    gpu[0]->destroy(gpu[0]);
    cpu->destroy(cpu);
    for (size_t i = 0; i < nkept; i++) free(kept[i]);
    return TEST_END();
}
