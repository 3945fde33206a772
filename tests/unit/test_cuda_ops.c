/* Every op of the CUDA backend against the CPU backend (the reference) on random inputs at the real
 * shapes of the model (hidden 4096, attention 16/4 heads x 256, GDN 16/32 heads x 128, vision
 * 1152 / 16 x 72, head width 1024 / 16 x 64), T = 1, 63, 64, 65, 512 (and 1100 / 1500 for the
 * delta rule and attention), for both precisions, each with the newest kernels (modes "fp32",
 * "fast") and the old ones (modes "fp32/old", "fast/old": one-term bf16 GEMMs, SIMT attention,
 * delta rule v1; in the fp32 modes "attention" is the register-tiled kernel vs the first SIMT one).
 * The delta rule also runs v2 (kernel A v1 + kernel B v2) and v3 (A v2 + B v2), which must give
 * the same bits as the newest v4 (A v2 + B v3): every variant computes the same sums in the same order.
 * Built only with `make CUDA=1`; exits 77 when no GPU is present at run time.
 *
 * Error measure: rel = max |gpu - cpu| / max |cpu| over the output (NaNs must match). Bars:
 *   fp32 (parity) backend: 2e-6 for elementwise ops and norms, 1e-5 for linear, attention and the
 *                          delta rule (fp32 GEMM / fp32 online softmax vs the CPU's double sums);
 *   fast backend: the same, except linear: with the two-term split of the activations the bar
 *                 derived in split_bar (~1e-4 here); the old one-term path 1e-2. The fast attention
 *                 (3xTF32 tensor cores) and delta rule (fp32 sums) keep 1e-5;
 *   bf16 backend: linear 1e-2; its one-term attention (v4) 1e-2 against the CPU on the same
 *                 bf16-rounded inputs (t_attention and t_packed_attention in MODE_BF16).
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
static clef_ops *cpu, *gpu[2], *gpu_bf16; /* gpu_bf16: CLEF_CUDA_BF16 (one-term GEMMs, bias in the epilogue) */
#define MODE_BF16 NMODES /* the bf16 precision's own rows (cmpv's name and worst only) */
static const char *mode_name[NMODES + 1] = {"fp32", "fast", "fp32/old", "fast/old", "bf16"};

static clef_ops *backend_of(int m) { return m == MODE_BF16 ? gpu_bf16 : gpu[m & 1]; }

/* The backend of mode m with the kernels of that mode selected (bf16: its defaults, attention v4). */
static clef_ops *G_of(int m) {
    clef_ops *g = backend_of(m);
    clef_cuda_kernels k;
    if (m == MODE_BF16) {
        clef_cuda_get_kernels(g, &k);
        k.attn = CLEF_CUDA_ATTN_V4;
        clef_cuda_set_kernels(g, &k);
        return g;
    }
    k.linear_split = m < 2;
    k.attn = m < 2 ? CLEF_CUDA_ATTN_V3 : CLEF_CUDA_ATTN_SIMT; /* the newest, verified or not */
    k.delta = m < 2 ? CLEF_CUDA_DELTA_V4 : CLEF_CUDA_DELTA_V1;
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

static double worst[NMODES + 1];

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
    CHECK_MSG(!clef_ops_failed(backend_of(m)), "%s (%s): backend failed: %s", op, mode_name[m], clef_cuda_last_error(backend_of(m)));
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
    { /* the bf16 precision: one bf16 term per activation, the bias in cuBLASLt's epilogue; bar as the
         one-term fast path (1e-2), same bits on repeat */
        clef_ops *g = gpu_bf16;
        float *dx = dev(g, x, T * K), *dy = dev(g, NULL, T * N);
        g->linear(g, dy, dx, T, &w, row0, N, bias ? &b : NULL);
        float *got = host_of(g, dy, T * N);
        CHECK_MSG(!clef_ops_failed(g), "linear (bf16): backend failed: %s", clef_cuda_last_error(g));
        char name[48];
        snprintf(name, sizeof name, "linear%zux%zu%s/bf16", N, K, bias ? "+b" : "");
        cmpv(name, MODE_BF16, T, got, ref, T * N, 1e-2);
        g->linear(g, dy, dx, T, &w, row0, N, bias ? &b : NULL);
        float *again = host_of(g, dy, T * N);
        CHECK_MSG(!memcmp(again, got, T * N * sizeof(float)), "linear bf16 T=%zu: not deterministic", T);
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
    /* v2 (kernel A v1 + B v2), v3 (A v2 + B v2) and v5 (v4 with 16 columns a block in B) must give
     * v4's bits (A v2 + B v3): every variant of A and of B computes the same sums in the same order */
    static const int others[] = {CLEF_CUDA_DELTA_V2, CLEF_CUDA_DELTA_V3, CLEF_CUDA_DELTA_V5};
    for (int m = 0; m < 2; m++)
        for (size_t vi = 0; vi < sizeof others / sizeof others[0]; vi++) {
            const int var = others[vi];
            clef_ops *G = G_of(m);
            clef_cuda_kernels kv;
            clef_cuda_get_kernels(G, &kv);
            kv.delta = var;
            clef_cuda_set_kernels(G, &kv);
            float *got = delta_on(G, q, k, v, beta, g, T, Hk, Hv, dk, dv, NULL);
            check_ok(m, "delta_rule v2/v3/v5");
            char name[48];
            snprintf(name, sizeof name, "delta%zux%zu/v%d", Hv, dk, var + 1);
            cmpv(name, m, T, got, ref, T * Hv * dv, 1e-5);
            CHECK_MSG(!memcmp(got, newest[m], T * Hv * dv * 4), "delta_rule %s T=%zu dk=%zu: v%d and v4 differ",
                      mode_name[m], T, dk, var + 1);
            free(got);
        }
    free(newest[0]); free(newest[1]);
    free(q); free(k); free(v); free(beta); free(g); free(ref);
}

/* The bf16 precision's one-term attention (attention v4) rounds Q, K, V (and P) to bf16; its reference
 * is the CPU's attention on the same bf16-rounded Q, K, V, so what is left is P's rounding (2^-9
 * relative per weight) and fp32 sums: rel <= 1e-2, as the bf16 linear. Indexing or fragment errors
 * give O(1) differences. The other modes: the CPU's attention within 1e-5. */
static float bf_round(float x) { return clef_bf16_to_f32(f2bf(x)); }
static void bf_round_all(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = bf_round(x[i]);
}
static double attn_tol(int m) { return m == MODE_BF16 ? 1e-2 : 1e-5; }

/* Modes 0..NMODES-1, or the bf16 precision alone (bf16 = 1); against the CPU, and the same bits on
 * repeat. */
static void t_attention(const char *name, size_t Tq, size_t Tk, size_t nh, size_t nkv, size_t hd, int causal,
                        int packed, int bf16) {
    /* packed: q, k, v interleaved in one [T, 3 * nh * hd] buffer, as the vision tower passes them */
    size_t ldq = packed ? 3 * nh * hd : nh * hd, ldk = packed ? 3 * nh * hd : nkv * hd;
    size_t nq = Tq * ldq, nk = Tk * ldk;
    float *q = rvec(nq, 1.5f, 0.0f), *k = packed ? q : rvec(nk, 1.5f, 0.0f), *v = packed ? q : rvec(nk, 1.0f, 0.0f);
    if (bf16) {
        bf_round_all(q, nq);
        if (!packed) { bf_round_all(k, nk); bf_round_all(v, nk); }
    }
    const float *qp = q, *kp = packed ? q + nh * hd : k, *vp = packed ? q + 2 * nh * hd : v;
    size_t ldo = nh * hd;
    float *ref = malloc(Tq * ldo * 4);
    float scale = (float)(1.0 / sqrt((double)hd));
    clef_attention1(cpu, ref, ldo, qp, ldq, kp, ldk, vp, ldk, Tq, Tk, nh, nkv, hd, scale, causal);
    for (int m = bf16 ? MODE_BF16 : 0; m < (bf16 ? MODE_BF16 + 1 : NMODES); m++) {
        clef_ops *g = G_of(m);
        float *dq = dev(g, q, nq), *dk = packed ? dq : dev(g, k, nk), *dv = packed ? dq : dev(g, v, nk);
        float *dqp = dq, *dkp = packed ? dq + nh * hd : dk, *dvp = packed ? dq + 2 * nh * hd : dv;
        float *o = dev(g, NULL, Tq * ldo);
        clef_attention1(g, o, ldo, dqp, ldq, dkp, ldk, dvp, ldk, Tq, Tk, nh, nkv, hd, scale, causal);
        float *got = host_of(g, o, Tq * ldo);
        check_ok(m, "attention");
        cmpv(name, m, Tq, got, ref, Tq * ldo, attn_tol(m));
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

/* ------------------------------------------------------------------ packed records (segments) */

/* Bit equality of two host vectors (NaNs included). */
static int same_bits(const float *a, const float *b, size_t n) { return !memcmp(a, b, n * sizeof(float)); }

/* Segments of a packed buffer: rows [row0, row0 + n) with gaps between them (rows no segment covers
 * must stay untouched), lengths around the chunk size. */
#define NPS 5
static const size_t ps_n[NPS] = {100, 64, 1, 130, 37};
static size_t ps_row0[NPS], ps_T;
static void ps_layout(void) {
    size_t r = 3;
    for (int i = 0; i < NPS; i++) { ps_row0[i] = r; r += ps_n[i] + 2; }
    ps_T = r;
}

/* conv1d_silu: the packed call (segments 1 and 3 resume from a window, 0 / 3 / 4 save one) against
 * each segment alone on the GPU (same bits) and the CPU's packed call (2e-6; windows exact). */
static void t_packed_conv(int m) {
    const size_t C = 512, K = 4, H = K - 1;
    ps_layout();
    clef_tensor cw = wt(CLEF_ST_BF16, C, 0, 0.5f, 0.0f);
    { uint16_t *d = malloc(C * K * 2); if (!d) exit(1); for (size_t i = 0; i < C * K; i++) d[i] = f2bf(0.5f * frand()); free((void *)cw.data); cw.data = d; }
    cw.ndim = 3; cw.shape[0] = (int64_t)C; cw.shape[1] = 1; cw.shape[2] = (int64_t)K; cw.numel = (int64_t)(C * K); cw.nbytes = C * K * 2;
    float *x = rvec(ps_T * C, 2.0f, 0.0f), *win = rvec(NPS * H * C, 2.0f, 0.0f);
    float *ref = calloc(ps_T * C, 4), *rwin = calloc(NPS * H * C, 4);
    clef_seg seg[NPS];
    clef_seg_state st[NPS];
    const size_t snaps[NPS] = {100, 0, 0, 64, 2};
    for (int i = 0; i < NPS; i++) {
        seg[i] = (clef_seg){ps_row0[i], ps_n[i]};
        st[i] = (clef_seg_state){NULL, NULL, 0};
    }
    /* CPU reference */
    {
        clef_seg_state cs[NPS];
        for (int i = 0; i < NPS; i++) {
            cs[i] = (clef_seg_state){(i == 1 || i == 3) ? win + i * H * C : NULL, snaps[i] ? rwin + i * H * C : NULL, snaps[i]};
        }
        cpu->conv1d_silu(cpu, ref, x, C, &cw, seg, NPS, cs);
    }
    clef_ops *g = G_of(m);
    float *dx = dev(g, x, ps_T * C), *dy = dev(g, NULL, ps_T * C), *dwin = dev(g, win, NPS * H * C);
    float *dout = dev(g, NULL, NPS * H * C), *zero = calloc(ps_T * C, 4);
    g->upload(g, dy, zero, ps_T * C);
    for (int i = 0; i < NPS; i++)
        st[i] = (clef_seg_state){(i == 1 || i == 3) ? dwin + i * H * C : NULL, snaps[i] ? dout + i * H * C : NULL, snaps[i]};
    g->conv1d_silu(g, dy, dx, C, &cw, seg, NPS, st);
    float *got = host_of(g, dy, ps_T * C), *gwin = host_of(g, dout, NPS * H * C);
    check_ok(m, "conv1d_silu packed");
    cmpv("conv1d/packed", m, ps_T, got, ref, ps_T * C, 2e-6);
    for (int i = 0; i < NPS; i++)
        if (snaps[i]) CHECK_MSG(same_bits(gwin + i * H * C, rwin + i * H * C, H * C), "conv window %d (%s) differs", i, mode_name[m]);
    /* each segment alone, into a fresh buffer: the packed call's rows bit for bit */
    for (int i = 0; i < NPS; i++) {
        g->upload(g, dy, zero, ps_T * C);
        g->conv1d_silu(g, dy, dx, C, &cw, &seg[i], 1, &st[i]);
        float *one = host_of(g, dy, ps_T * C);
        CHECK_MSG(same_bits(one + ps_row0[i] * C, got + ps_row0[i] * C, ps_n[i] * C), "conv segment %d alone != packed (%s)", i,
                  mode_name[m]);
        free(one);
    }
    CHECK_MSG(same_bits(got, zero, ps_row0[0] * C), "conv wrote rows before the first segment (%s)", mode_name[m]);
    free(got); free(gwin); free(zero); free(x); free(win); free(ref); free(rwin);
    g->free(g, dx); g->free(g, dy); g->free(g, dwin); g->free(g, dout);
    wkeep(cw);
}

/* The delta rule over packed segments: states in for segments 1 and 3, states out after chunk
 * boundaries or the end; against the CPU (1e-5; states 1e-5), each segment alone (same bits), and
 * a resume: segment 3 run as [0, 64) saving its state, then [64, 130) from it = the uninterrupted
 * run's rows and final state, bit for bit. */
static void t_packed_delta(int m, size_t Hk, size_t Hv, size_t dk, size_t dv) {
    ps_layout();
    const size_t T = ps_T, SS = Hv * dk * dv;
    float *q = rvec(T * Hk * dk, 1.0f, 0.0f), *k = rvec(T * Hk * dk, 1.0f, 0.0f), *v = rvec(T * Hv * dv, 1.0f, 0.0f);
    l2rows(q, T * Hk, dk, (float)pow((double)dk, -0.5));
    l2rows(k, T * Hk, dk, 1.0f);
    float *beta = malloc(T * Hv * 4), *gg = malloc(T * Hv * 4), *sin_ = rvec(NPS * SS, 0.5f, 0.0f);
    for (size_t i = 0; i < T * Hv; i++) {
        beta[i] = 0.5f + 0.49f * frand();
        gg[i] = -0.3f * (1.0f + frand());
    }
    const size_t snaps[NPS] = {64, 0, 1, 130, 37};
    clef_seg seg[NPS];
    clef_seg_state cs[NPS], st[NPS];
    float *ref = calloc(T * Hv * dv, 4), *rst = calloc(NPS * SS, 4);
    for (int i = 0; i < NPS; i++) {
        seg[i] = (clef_seg){ps_row0[i], ps_n[i]};
        cs[i] = (clef_seg_state){(i == 1 || i == 3) ? sin_ + i * SS : NULL, snaps[i] ? rst + i * SS : NULL, snaps[i]};
    }
    cpu->delta_rule(cpu, ref, q, k, v, beta, gg, Hk, Hv, dk, dv, 64, seg, NPS, cs);
    clef_ops *G = G_of(m);
    float *dq = dev(G, q, T * Hk * dk), *dk_ = dev(G, k, T * Hk * dk), *dv_ = dev(G, v, T * Hv * dv);
    float *db = dev(G, beta, T * Hv), *dg = dev(G, gg, T * Hv), *dout = dev(G, NULL, T * Hv * dv);
    float *dsin = dev(G, sin_, NPS * SS), *dsout = dev(G, NULL, NPS * SS), *zero = calloc(T * Hv * dv, 4);
    G->upload(G, dout, zero, T * Hv * dv);
    for (int i = 0; i < NPS; i++)
        st[i] = (clef_seg_state){(i == 1 || i == 3) ? dsin + i * SS : NULL, snaps[i] ? dsout + i * SS : NULL, snaps[i]};
    G->delta_rule(G, dout, dq, dk_, dv_, db, dg, Hk, Hv, dk, dv, 64, seg, NPS, st);
    float *got = host_of(G, dout, T * Hv * dv), *gst = host_of(G, dsout, NPS * SS);
    check_ok(m, "delta packed");
    char name[48];
    snprintf(name, sizeof name, "delta%zux%zu/packed", Hv, dk);
    cmpv(name, m, T, got, ref, T * Hv * dv, 1e-5);
    for (int i = 0; i < NPS; i++)
        if (snaps[i]) {
            snprintf(name, sizeof name, "delta/state%d", i);
            cmpv(name, m, snaps[i], gst + i * SS, rst + i * SS, SS, 1e-5);
        }
    for (int i = 0; i < NPS; i++) {
        G->upload(G, dout, zero, T * Hv * dv);
        float *d1 = dev(G, NULL, SS);
        clef_seg_state s1 = st[i];
        if (s1.out) s1.out = d1;
        G->delta_rule(G, dout, dq, dk_, dv_, db, dg, Hk, Hv, dk, dv, 64, &seg[i], 1, &s1);
        float *one = host_of(G, dout, T * Hv * dv), *ost = host_of(G, d1, SS);
        const size_t off = ps_row0[i] * Hv * dv, len = ps_n[i] * Hv * dv;
        CHECK_MSG(same_bits(one + off, got + off, len), "delta segment %d alone != packed (%s)", i, mode_name[m]);
        if (snaps[i]) CHECK_MSG(same_bits(ost, gst + i * SS, SS), "delta state %d alone != packed (%s)", i, mode_name[m]);
        free(one); free(ost);
        G->free(G, d1);
    }
    CHECK_MSG(same_bits(got, zero, ps_row0[0] * Hv * dv), "delta wrote rows before the first segment (%s)", mode_name[m]);
    { /* resume: segment 3 (from its state in) as [0, 64) + [64, 130) */
        float *mid = dev(G, NULL, SS), *fin = dev(G, NULL, SS);
        clef_seg a = {ps_row0[3], 64}, b = {ps_row0[3] + 64, ps_n[3] - 64};
        clef_seg_state sa = {dsin + 3 * SS, mid, 64}, sb = {mid, fin, ps_n[3] - 64};
        G->upload(G, dout, zero, T * Hv * dv);
        G->delta_rule(G, dout, dq, dk_, dv_, db, dg, Hk, Hv, dk, dv, 64, &a, 1, &sa);
        G->delta_rule(G, dout, dq, dk_, dv_, db, dg, Hk, Hv, dk, dv, 64, &b, 1, &sb);
        float *res = host_of(G, dout, T * Hv * dv), *rfin = host_of(G, fin, SS);
        const size_t off = ps_row0[3] * Hv * dv, len = ps_n[3] * Hv * dv;
        CHECK_MSG(same_bits(res + off, got + off, len), "delta resumed at 64 != uninterrupted (%s)", mode_name[m]);
        CHECK_MSG(same_bits(rfin, gst + 3 * SS, SS), "delta resumed final state != uninterrupted (%s)", mode_name[m]);
        free(res); free(rfin);
        G->free(G, mid); G->free(G, fin);
    }
    free(got); free(gst); free(zero); free(q); free(k); free(v); free(beta); free(gg); free(sin_); free(ref); free(rst);
    G->free(G, dq); G->free(G, dk_); G->free(G, dv_); G->free(G, db); G->free(G, dg); G->free(G, dout);
    G->free(G, dsin); G->free(G, dsout);
}

/* Block-diagonal attention: packed segments (causal; one with 40 cached keys before its queries)
 * against the CPU (attn_tol; for MODE_BF16 on bf16-rounded inputs) and each segment alone (same
 * bits); more segments than one launch holds. */
static void t_packed_attention(int m, size_t nh, size_t nkv, size_t hd, int causal, size_t nseg_many) {
    ps_layout();
    const size_t T = ps_T + 40, ldq = nh * hd, ldk = nkv * hd;
    float *q = rvec(T * ldq, 1.5f, 0.0f), *k = rvec(T * ldk, 1.5f, 0.0f), *v = rvec(T * ldk, 1.0f, 0.0f);
    if (m == MODE_BF16) { bf_round_all(q, T * ldq); bf_round_all(k, T * ldk); bf_round_all(v, T * ldk); }
    clef_attn_seg seg[NPS];
    for (int i = 0; i < NPS; i++) seg[i] = (clef_attn_seg){ps_row0[i], ps_n[i], ps_row0[i], ps_n[i]};
    /* segment 3 has 40 cached keys: its queries are the last nq of nk = nq + 40 keys starting 40 rows
     * earlier (key rows may be any rows; they overlap segments 1 and 2 here) */
    seg[3].k0 = ps_row0[3] - 40;
    seg[3].nk = ps_n[3] + 40;
    if (!causal) seg[1].nk = 30; /* Tq != Tk */
    float scale = (float)(1.0 / sqrt((double)hd));
    float *ref = calloc(T * ldq, 4), *zero = calloc(T * ldq, 4);
    cpu->attention(cpu, ref, ldq, q, ldq, k, ldk, v, ldk, seg, NPS, nh, nkv, hd, scale, causal);
    clef_ops *g = G_of(m);
    float *dq = dev(g, q, T * ldq), *dk = dev(g, k, T * ldk), *dv = dev(g, v, T * ldk), *o = dev(g, NULL, T * ldq);
    g->upload(g, o, zero, T * ldq);
    g->attention(g, o, ldq, dq, ldq, dk, ldk, dv, ldk, seg, NPS, nh, nkv, hd, scale, causal);
    float *got = host_of(g, o, T * ldq);
    check_ok(m, "attention packed");
    char name[48];
    snprintf(name, sizeof name, "attn%zu/%zux%zu%s/packed", nh, nkv, hd, causal ? "c" : "");
    cmpv(name, m, T, got, ref, T * ldq, attn_tol(m));
    for (int i = 0; i < NPS; i++) {
        g->upload(g, o, zero, T * ldq);
        g->attention(g, o, ldq, dq, ldq, dk, ldk, dv, ldk, &seg[i], 1, nh, nkv, hd, scale, causal);
        float *one = host_of(g, o, T * ldq);
        CHECK_MSG(same_bits(one + seg[i].q0 * ldq, got + seg[i].q0 * ldq, seg[i].nq * ldq), "%s: segment %d alone != packed (%s)",
                  name, i, mode_name[m]);
        free(one);
    }
    if (nseg_many) { /* many short segments (several launches): each row as its own one-row segment */
        clef_attn_seg *many = malloc(nseg_many * sizeof *many);
        for (size_t i = 0; i < nseg_many; i++) many[i] = (clef_attn_seg){i, 1, i, 1};
        float *r2 = calloc(T * ldq, 4);
        cpu->attention(cpu, r2, ldq, q, ldq, k, ldk, v, ldk, many, nseg_many, nh, nkv, hd, scale, causal);
        g->upload(g, o, zero, T * ldq);
        g->attention(g, o, ldq, dq, ldq, dk, ldk, dv, ldk, many, nseg_many, nh, nkv, hd, scale, causal);
        float *h2 = host_of(g, o, T * ldq);
        snprintf(name, sizeof name, "attn/%zu-segs", nseg_many);
        cmpv(name, m, nseg_many, h2, r2, T * ldq, attn_tol(m));
        free(many); free(r2); free(h2);
    }
    free(got); free(q); free(k); free(v); free(ref); free(zero);
    g->free(g, dq); g->free(g, dk); g->free(g, dv); g->free(g, o);
}

/* ------------------------------------------------------------------ CUDA graphs */

/* A small "forward": upload host rows, embed ids, a Linear with bias, rmsnorm, silu_mul, attention;
 * scratch allocated and freed inside, the result written to ctx->out (given). */
typedef struct gpass {
    const float *x;      /* host [T, K] (changes between calls) */
    const int32_t *ids;  /* host [T] */
    size_t T, K, N;
    const clef_tensor *w, *b, *nw, *tab;
    float *out;          /* device [T, N] */
    int download_inside; /* 1: a download in the middle (a host sync: must stay eager) */
} gpass;

static int gpass_fn(clef_ops *g, void *vctx) {
    gpass *c = vctx;
    size_t T = c->T, K = c->K, N = c->N;
    float *x = g->alloc(g, T * K), *y = g->alloc(g, T * N), *e = g->alloc(g, T * N), *a = g->alloc(g, T * N);
    if (!x || !y || !e || !a) return -1;
    g->upload(g, x, c->x, T * K);
    g->linear(g, y, x, T, c->w, 0, N, c->b);
    g->embed(g, e, c->tab, c->ids, T);
    g->add(g, y, y, e, T * N);
    g->rmsnorm(g, y, N, y, N, T, N, c->nw, 1, 1e-6f);
    if (c->download_inside) {
        float probe[2];
        g->download(g, probe, y, 2);
    }
    g->silu_mul(g, a, y, e, T * N);
    /* 4 heads of N / 4: q = k = v = a, causal */
    clef_attention1(g, c->out, N, a, N, a, N, a, N, T, T, 4, 4, N / 4, 0.125f, 1);
    g->free(g, x);
    g->free(g, y);
    g->free(g, e);
    g->free(g, a);
    return clef_ops_failed(g) ? -1 : 0;
}

/* Graph passes give the eager pass's bits: eager run, capture, replays with new host data (uploads
 * and ids), a replay with another output buffer (fingerprint miss: eager + recapture), and a pass
 * that downloads inside (kept eager). */
static void t_graph(int m) {
    const size_t T = 100, K = 256, N = 256, V = 500;
    clef_ops *g = G_of(m);
    clef_tensor w = wt(CLEF_ST_BF16, N, K, 0.05f, 0.0f), b = wt(CLEF_ST_BF16, N, 0, 0.5f, 0.0f);
    clef_tensor nw = wt(CLEF_ST_BF16, N, 0, 0.2f, 0.0f), tab = wt(CLEF_ST_BF16, V, N, 1.0f, 0.0f);
    float *out = dev(g, NULL, T * N), *out2 = dev(g, NULL, T * N);
    int32_t *ids = malloc(T * sizeof(int32_t));
    if (!ids) exit(1);
    clef_cuda_graph_info s0, s1;
    clef_cuda_graph_stats(g, &s0);
    for (int call = 0; call < 6; call++) {
        float *x = rvec(T * K, 1.0f, 0.0f);
        for (size_t i = 0; i < T; i++) ids[i] = (int32_t)((rs = rs * 6364136223846793005ull + 1) >> 33) % (int32_t)V;
        gpass c = {x, ids, T, K, N, &w, &b, &nw, &tab, call == 4 ? out2 : out, call == 5};
        clef_cuda_set_graph(g, 0);
        CHECK(gpass_fn(g, &c) == 0);
        float *ref = host_of(g, c.out, T * N);
        clef_cuda_set_graph(g, 1);
        uint64_t key = call == 5 ? 2 : 1;
        CHECK_MSG(clef_cuda_graph_run(g, key, gpass_fn, &c) == 0, "graph pass %d (%s): %s", call, mode_name[m],
                  clef_cuda_last_error(g));
        float *got = host_of(g, c.out, T * N);
        CHECK_MSG(!memcmp(got, ref, T * N * sizeof(float)), "graph pass %d (%s) differs from the eager pass", call,
                  mode_name[m]);
        clef_cuda_set_graph(g, 0);
        free(ref);
        free(got);
        free(x);
    }
    clef_cuda_graph_stats(g, &s1);
    /* key 1: eager (0), capture (1), replay (2, 3), miss -> eager (4); key 2: eager warm-up (5) */
    printf("graph %-8s captured %llu replayed %llu fallbacks %llu eager %llu unsafe %zu (%s)\n", mode_name[m],
           (unsigned long long)(s1.captured - s0.captured), (unsigned long long)(s1.replayed - s0.replayed),
           (unsigned long long)(s1.fallbacks - s0.fallbacks), (unsigned long long)(s1.eager - s0.eager), s1.unsafe,
           s1.last_unsafe_why);
    CHECK_MSG(s1.captured - s0.captured == 1 && s1.replayed - s0.replayed == 2 && s1.fallbacks - s0.fallbacks == 1,
              "graph %s: captured %llu replayed %llu fallbacks %llu (want 1, 2, 1)", mode_name[m],
              (unsigned long long)(s1.captured - s0.captured), (unsigned long long)(s1.replayed - s0.replayed),
              (unsigned long long)(s1.fallbacks - s0.fallbacks));
    /* key 2 downloads inside: its capture must give up and rerun eagerly (the bits checked above) */
    {
        float *x = rvec(T * K, 1.0f, 0.0f);
        gpass c = {x, ids, T, K, N, &w, &b, &nw, &tab, out, 1};
        clef_cuda_set_graph(g, 1);
        CHECK(clef_cuda_graph_run(g, 2, gpass_fn, &c) == 0);
        clef_cuda_set_graph(g, 0);
        clef_cuda_graph_info s2;
        clef_cuda_graph_stats(g, &s2);
        CHECK_MSG(s2.unsafe > s1.unsafe, "graph %s: a pass with a download inside was not kept eager", mode_name[m]);
        free(x);
    }
    check_ok(m, "graph");
    g->free(g, out);
    g->free(g, out2);
    free(ids);
    wkeep(w); wkeep(b); wkeep(nw); wkeep(tab);
}

/* CLEF_CUDA_GEMM_TOPN (cuda_ops.h clef_cuda_set_gemm_topn): a backend that times the heuristic's top 8
 * cuBLASLt algorithms per shape must give the default backend's bits (only algorithms with the first's
 * bits are eligible), on every shape a forward uses, with and without the bias epilogue, in the bf16 and
 * the fast precision (the split's concatenated T <= 64 GEMM and its two T > 64 GEMMs), on the first call
 * of a shape (when it is tuned) and after. Prints what the choice did (the device check's summary). */
static void t_gemm_topn(void) {
    static const struct { size_t N, K; int bias; } shapes[] = {
        {12288, 4096, 0}, {4096, 12288, 0}, {8192, 4096, 0}, {4096, 4096, 0}, {32, 4096, 0}, {1024, 1024, 1}, {1, 1024, 1}};
    static const size_t Ts[] = {1, 64, 65, 436, 2048};
    clef_err err;
    clef_err_clear(&err);
    for (int fast = 0; fast < 2; fast++) {
        clef_ops *base = fast ? gpu[1] : gpu_bf16;
        clef_ops *g = clef_cuda_ops_create(0, fast ? CLEF_CUDA_FAST : CLEF_CUDA_BF16, NULL, &err);
        CHECK_MSG(g != NULL, "gemm topn: backend creation failed: %s", err.msg);
        if (!g) return;
        if (fast) G_of(1); /* the default backend with the newest kernels: the split */
        clef_cuda_set_gemm_topn(g, 8);
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            size_t N = shapes[si].N, K = shapes[si].K;
            clef_tensor w = wt(CLEF_ST_BF16, N, K, 0.05f, 0.0f), b = wt(CLEF_ST_BF16, N, 0, 0.5f, 0.0f);
            for (size_t ti = 0; ti < sizeof Ts / sizeof Ts[0]; ti++) {
                size_t T = Ts[ti];
                if (N * K * T > (size_t)12288 * 4096 * 436) continue; /* the big ones at 436 rows at most */
                float *x = rvec(T * K, 1.0f, 0.0f);
                float *bx = dev(base, x, T * K), *by = dev(base, NULL, T * N);
                float *gx = dev(g, x, T * K), *gy = dev(g, NULL, T * N);
                const clef_tensor *bp = shapes[si].bias ? &b : NULL;
                base->linear(base, by, bx, T, &w, 0, N, bp);
                g->linear(g, gy, gx, T, &w, 0, N, bp); /* the first call: the shape is tuned */
                float *want = host_of(base, by, T * N), *got = host_of(g, gy, T * N);
                CHECK_MSG(!clef_ops_failed(g), "gemm topn: backend failed: %s", clef_cuda_last_error(g));
                CHECK_MSG(!memcmp(want, got, T * N * sizeof(float)), "gemm topn %s %zux%zu%s T=%zu: bits differ from the default",
                          fast ? "fast" : "bf16", N, K, shapes[si].bias ? "+b" : "", T);
                g->linear(g, gy, gx, T, &w, 0, N, bp); /* the kept pick */
                float *again = host_of(g, gy, T * N);
                CHECK_MSG(!memcmp(want, again, T * N * sizeof(float)), "gemm topn %s %zux%zu T=%zu: second call differs",
                          fast ? "fast" : "bf16", N, K, T);
                free(x);
                free(want);
                free(got);
                free(again);
                base->free(base, bx);
                base->free(base, by);
                g->free(g, gx);
                g->free(g, gy);
            }
            wkeep(w);
            wkeep(b);
        }
        clef_cuda_gemm_info s;
        clef_cuda_gemm_stats(g, &s);
        printf("gemm topn %s: top %d, %llu shapes tuned (%llu skipped), %llu candidates run, %llu with the first's bits, "
               "%llu shapes picked another, one call of each: %.1f us first -> %.1f us picked\n",
               fast ? "fast" : "bf16", s.topn, (unsigned long long)s.shapes, (unsigned long long)s.skipped,
               (unsigned long long)s.tried, (unsigned long long)s.same_bits, (unsigned long long)s.picked_other,
               s.first_us, s.best_us);
        CHECK_MSG(s.shapes > 0, "gemm topn %s: no shape was tuned", fast ? "fast" : "bf16");
        g->destroy(g);
    }
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
    gpu_bf16 = gpu[1] ? clef_cuda_ops_create(0, CLEF_CUDA_BF16, NULL, &err) : NULL;
    if (!cpu || !gpu[0] || !gpu[1] || !gpu_bf16) {
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
        for (int bf16 = 0; bf16 < 2; bf16++) {
            t_attention("attn16/4x256c", T, T, 16, 4, 256, 1, 0, bf16);
            t_attention("vis16x72", T, T, 16, 16, 72, 0, 1, bf16);
        }
        t_misc(T);
    }
    t_linear(65, 4096, 4096, 0, 0);           /* a full square projection */
    t_linear(64, 12288, 4096, 0, 0);          /* mlp gate/up */
    t_linear(3, 1, 1024, 0, 1);               /* scorer3: N = 1 */
    t_gemm_topn();
    t_delta(130, 2, 4, 16, 24);               /* the tiny checkpoint's GDN dims, 3 chunks */
    t_delta(65, 4, 8, 64, 32);                /* dk 64, GQA 2 */
    t_delta(100, 2, 2, 32, 80);               /* dk + dv = 112 < one column per thread */
    t_delta(70, 1, 2, 18, 20);                /* dk % 4 != 0: kernel A v1 and kernel B v1 in every mode */
    t_delta(129, 1, 1, 160, 96);              /* dk > 128: the same fallback; dk + dv > 256 columns */
    for (int bf16 = 0; bf16 < 2; bf16++) {
        t_attention("head16x64", 7, 512, 16, 16, 64, 0, 0, bf16); /* Tq != Tk, as the head's cross attention */
        t_attention("tiny4/2x32c", 100, 100, 4, 2, 32, 1, 0, bf16);
        t_attention("a8/2x128c", 200, 200, 8, 2, 128, 1, 0, bf16); /* the tensor-core kernels' DP = 128 */
        t_attention("a2/1x100c", 130, 130, 2, 1, 100, 1, 0, bf16);  /* hd padded to 128, GQA 2 */
        t_attention("a3x80", 65, 40, 3, 3, 80, 0, 0, bf16);         /* DP = 80 exactly, Tq > Tk */
    }
    /* long: many chunks / key tiles, T not a multiple of the tiles */
    t_delta(1500, 16, 32, 128, 128);
    for (int bf16 = 0; bf16 < 2; bf16++) {
        t_attention("attn16/4x256c", 1500, 1500, 16, 4, 256, 1, 0, bf16);
        t_attention("vis16x72", 1100, 1100, 16, 16, 72, 0, 1, bf16);
    }
    t_packed_attention(MODE_BF16, 16, 4, 256, 1, 70);
    t_packed_attention(MODE_BF16, 4, 2, 32, 1, 0);
    t_packed_attention(MODE_BF16, 16, 16, 72, 0, 0);
    for (int m = 0; m < NMODES; m++) {
        t_packed_conv(m);
        t_packed_delta(m, 16, 32, 128, 128);
        t_packed_delta(m, 2, 4, 16, 24);   /* the tiny dims (kernel B v2, kernel A v1 or v2) */
        t_packed_delta(m, 1, 2, 18, 20);   /* dk % 4 != 0: the v1 kernels */
        t_packed_attention(m, 16, 4, 256, 1, 70); /* > 64 segments: two launches */
        t_packed_attention(m, 4, 2, 32, 1, 0);
        t_packed_attention(m, 16, 16, 72, 0, 0);   /* vision: not causal, Tq != Tk in one segment */
    }
    t_graph(0);
    t_graph(1);
    /* the arena must not grow over repeated requests */
    size_t a0 = 0, a1 = 0;
    clef_cuda_memory(gpu[0], &a0, NULL);
    t_delta(512, 16, 32, 128, 128);
    t_attention("attn16/4x256c", 512, 512, 16, 4, 256, 1, 0, 0);
    clef_cuda_memory(gpu[0], &a1, NULL);
    CHECK_MSG(a0 == a1, "arena grew from %zu to %zu bytes on a repeated request", a0, a1);
    printf("worst rel: fp32 %.3e, fast %.3e, fp32/old %.3e, fast/old %.3e, bf16 %.3e\n", worst[0], worst[1],
           worst[2], worst[3], worst[MODE_BF16]);
    gpu_bf16->destroy(gpu_bf16);
    gpu[1]->destroy(gpu[1]);
    gpu[0]->destroy(gpu[0]);
    cpu->destroy(cpu);
    for (size_t i = 0; i < nkept; i++) free(kept[i]);
    return TEST_END();
}
