/* GEMM kernels (compute/cpu/gemm.h): every kernel against a double-precision reference on random
 * shapes (edge sizes included; one crossing every block boundary), the exact kernels bit-identical to each other, to themselves for
 * 1 / 2 / 3 threads, and for a row computed alone vs inside a larger batch.
 *
 * Error bounds checked, per output with S = sum_k |x w| + |b|:
 *   exact kernels (ref, avx2, avx512): |y - y_double| <= (K + 1) * 2^-24 * S, and the same bits
 *     from every exact kernel   (sequential fp32
 *     FMA chain plus the bias add; the worst case, random data sits far below it)
 *   amx (x split into 3 exact bf16 terms, fp32 accumulation over the 3K products):
 *                                     |y - y_double| <= (3K + 2) * 2^-24 * 1.01 * S
 *     (|h| + |m| + |l| <= (1 + 2^-7 + 2^-15) |x|); its own bits, fixed for any thread count,
 *     batch and row position, not those of the exact kernels
 * amx with its weights packed once (clef_gemm_pack): the bits of the amx path above, for every
 *     thread count, batch, row and panel-aligned row slice (check_packed).
 * A kernel this CPU cannot run is skipped with its reason printed. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu_features.h"
#include "base/threads.h"
#include "compute/cpu/gemm.h"
#include "test.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float frand(void) { return (float)((double)rnd() / 4294967296.0 * 2.0 - 1.0); }

static float bf(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static uint16_t to_bf16(float f) { /* truncation is fine for test data */
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (uint16_t)(u >> 16);
}

typedef struct {
    size_t T, K, N, ldx, ldw, ldy;
    float *x, *bias;
    uint16_t *W;
    double *ref, *mag; /* double reference and sum |x w| + |b| */
} problem;

static void make(problem *p, size_t T, size_t K, size_t N, int with_bias, size_t pad) {
    memset(p, 0, sizeof *p);
    p->T = T; p->K = K; p->N = N;
    p->ldx = K + pad; p->ldw = K + pad; p->ldy = N + pad;
    p->x = malloc((T * p->ldx + 1) * sizeof(float));
    p->W = malloc((N * p->ldw + 1) * sizeof(uint16_t));
    p->bias = with_bias ? malloc((N + 1) * sizeof(float)) : NULL;
    p->ref = malloc((T * N + 1) * sizeof(double));
    p->mag = malloc((T * N + 1) * sizeof(double));
    for (size_t i = 0; i < T * p->ldx; i++) p->x[i] = frand() * (rnd() % 8 == 0 ? 8.0f : 1.0f);
    for (size_t i = 0; i < N * p->ldw; i++) p->W[i] = to_bf16(frand() * 0.05f);
    if (p->bias) for (size_t n = 0; n < N; n++) p->bias[n] = frand();
    for (size_t t = 0; t < T; t++)
        for (size_t n = 0; n < N; n++) {
            double s = 0, m = 0;
            for (size_t k = 0; k < K; k++) {
                double v = (double)p->x[t * p->ldx + k] * (double)bf(p->W[n * p->ldw + k]);
                s += v;
                m += fabs(v);
            }
            if (p->bias) { s += p->bias[n]; m += fabs(p->bias[n]); }
            p->ref[t * N + n] = s;
            p->mag[t * N + n] = m;
        }
}

static void unmake(problem *p) {
    free(p->x); free(p->W); free(p->bias); free(p->ref); free(p->mag);
}

static float *run(problem *p, clef_gemm_kernel k, clef_pool *pool) {
    float *y = malloc((p->T * p->ldy + 1) * sizeof(float));
    for (size_t i = 0; i < p->T * p->ldy; i++) y[i] = NAN;
    int rc = clef_gemm_bf16_with(k, pool, y, p->ldy, p->x, p->ldx, p->T, p->K, p->W, p->ldw, p->N,
                                 p->bias);
    CHECK(rc == 0);
    return y;
}

static int same_bits(const problem *p, const float *a, const float *b) {
    for (size_t t = 0; t < p->T; t++)
        if (memcmp(a + t * p->ldy, b + t * p->ldy, p->N * sizeof(float)) != 0) return 0;
    return 1;
}

/* max over outputs of |y - ref| / S, and whether every output is within its bound */
static double check_err(const problem *p, const float *y, double bound_rel, double *worst) {
    double w = 0;
    int ok = 1;
    for (size_t t = 0; t < p->T; t++)
        for (size_t n = 0; n < p->N; n++) {
            double e = fabs((double)y[t * p->ldy + n] - p->ref[t * p->N + n]);
            double m = p->mag[t * p->N + n];
            double r = m > 0 ? e / m : (e == 0 ? 0 : INFINITY);
            if (r > w) w = r;
            if (!(e <= bound_rel * m)) ok = 0;
        }
    *worst = w;
    return ok;
}

/* The AMX kernel with the weights packed once (clef_gemm_pack) against the per-call packing
 * (y1 = clef_gemm_bf16_with(AMX) on 1 thread): the same bits for every pool, for rows alone and as
 * smaller batches, and for row slices [row0, row0 + n) at panel boundaries (the model's
 * linear(..., row0, N, ...)), n a multiple of 32 or not; a slice off a panel boundary is refused
 * (the caller then uses the unpacked path). */
static void check_packed(const problem *p, const float *y1, clef_pool *pools[4], size_t s) {
    clef_gemm_packed *g = clef_gemm_pack(pools[s % 4], p->W, p->ldw, p->N, p->K);
    CHECK_MSG(g != NULL, "clef_gemm_pack T=%zu K=%zu N=%zu", p->T, p->K, p->N);
    if (!g) return;
    CHECK(clef_gemm_packed_bytes(g) >= (p->N + 31) / 32 * 32 * ((p->K + 31) / 32 * 32) * 2);
    float *y = malloc((p->T * p->ldy + 1) * sizeof(float));
    CHECK(y != NULL);
    if (!y) { clef_gemm_packed_free(g); return; }
    for (int th = 0; th < 4; th++) {
        for (size_t i = 0; i < p->T * p->ldy; i++) y[i] = NAN;
        CHECK(clef_gemm_bf16_packed(pools[th], y, p->ldy, p->x, p->ldx, p->T, g, 0, p->N, p->bias) == 0);
        CHECK_MSG(same_bits(p, y, y1), "packed threads=%d T=%zu K=%zu N=%zu bias=%d", th, p->T, p->K, p->N,
                  p->bias != NULL);
        int pad_ok = 1;
        for (size_t t = 0; t < p->T; t++)
            for (size_t n = p->N; n < p->ldy; n++) if (!isnan(y[t * p->ldy + n])) pad_ok = 0;
        CHECK(pad_ok);
    }
    size_t step = p->T > 100 ? p->T / 4 + 1 : 7;
    for (size_t t = 0; t < p->T; t += step) { /* row t alone; rows [t, T) as a batch */
        CHECK(clef_gemm_bf16_packed(pools[2], y, p->N, p->x + t * p->ldx, p->ldx, 1, g, 0, p->N, p->bias) == 0);
        CHECK_MSG(memcmp(y, y1 + t * p->ldy, p->N * sizeof(float)) == 0, "packed row %zu alone (T=%zu K=%zu N=%zu)",
                  t, p->T, p->K, p->N);
        CHECK(clef_gemm_bf16_packed(pools[3], y, p->ldy, p->x + t * p->ldx, p->ldx, p->T - t, g, 0, p->N,
                                    p->bias) == 0);
        int ok = 1;
        for (size_t r = 0; r < p->T - t; r++)
            if (memcmp(y + r * p->ldy, y1 + (t + r) * p->ldy, p->N * sizeof(float))) ok = 0;
        CHECK_MSG(ok, "packed rows [%zu, %zu) as a batch differ (K=%zu N=%zu)", t, p->T, p->K, p->N);
    }
    /* row slices: every panel boundary (at most 6) x (to the end, 5 short of it, 1 row) */
    for (size_t row0 = 0, nb = 0; row0 < p->N && nb < 6; row0 += 32, nb++) {
        size_t ns[3] = {p->N - row0, p->N - row0 > 5 ? p->N - row0 - 5 : 1, 1};
        for (int v = 0; v < 3; v++) {
            size_t n = ns[v];
            float *ys = malloc(p->T * n * sizeof(float)), *yu = malloc(p->T * n * sizeof(float));
            CHECK(ys != NULL && yu != NULL);
            if (!ys || !yu) { free(ys); free(yu); continue; }
            const float *b = p->bias ? p->bias + row0 : NULL;
            CHECK(clef_gemm_packed_fits(g, row0, n));
            CHECK(clef_gemm_bf16_packed(pools[s % 3 + 1], ys, n, p->x, p->ldx, p->T, g, row0, n, b) == 0);
            CHECK(clef_gemm_bf16_with(CLEF_GEMM_AMX, pools[2], yu, n, p->x, p->ldx, p->T, p->K, p->W + row0 * p->ldw,
                                      p->ldw, n, b) == 0);
            CHECK_MSG(memcmp(ys, yu, p->T * n * sizeof(float)) == 0, "packed slice [%zu, %zu) T=%zu K=%zu N=%zu", row0,
                      row0 + n, p->T, p->K, p->N);
            free(ys);
            free(yu);
        }
    }
    /* off a panel boundary or out of range: refused, y untouched */
    float z = 7.0f;
    CHECK(!clef_gemm_packed_fits(g, 1, 1) && clef_gemm_bf16_packed(pools[2], &z, 1, p->x, p->ldx, 1, g, 1, 1, NULL) == -1);
    CHECK(!clef_gemm_packed_fits(g, 0, p->N + 1) && !clef_gemm_packed_fits(g, (p->N + 31) / 32 * 32 + 32, 0));
    CHECK(z == 7.0f);
    free(y);
    clef_gemm_packed_free(g);
}

int main(void) {
    char feat[256];
    printf("cpu: %s\n", clef_cpu_feature_string(feat, sizeof feat));
    printf("default kernel: %s\n", clef_gemm_name(clef_gemm_default()));
    clef_err err;
    clef_pool *pools[4] = {NULL, clef_pool_create(1, &err), clef_pool_create(2, &err),
                           clef_pool_create(3, &err)};
    CHECK(pools[1] && pools[2] && pools[3]);

    const clef_gemm_kernel kernels[] = {CLEF_GEMM_REF, CLEF_GEMM_AVX2, CLEF_GEMM_AVX512, CLEF_GEMM_AMX};
    int avail[CLEF_GEMM_NKERNELS] = {0};
    for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; i++) {
        const char *why;
        avail[kernels[i]] = clef_gemm_available(kernels[i], &why);
        if (!avail[kernels[i]]) printf("skip kernel %s: %s\n", clef_gemm_name(kernels[i]), why);
    }
    CHECK(avail[CLEF_GEMM_REF]);
    CHECK(clef_gemm_available(clef_gemm_default(), NULL));

    /* The measured dispatch (clef_gemm_fastest, what clef_gemm_default runs between AVX-512 and
     * AVX2): it must pick the kernel its own timing finds faster, and the portable C kernel (a libm
     * fmaf per product) is far slower than AVX2, in either order of the candidates. */
    if (avail[CLEF_GEMM_AVX2]) {
        const clef_gemm_kernel c1[2] = {CLEF_GEMM_REF, CLEF_GEMM_AVX2}, c2[2] = {CLEF_GEMM_AVX2, CLEF_GEMM_REF};
        double g1[2], g2[2];
        clef_gemm_kernel k1 = clef_gemm_fastest(c1, 2, g1), k2 = clef_gemm_fastest(c2, 2, g2);
        printf("timed: ref %.2f, avx2 %.2f GFLOP/s\n", g1[0], g1[1]);
        CHECK_MSG(k1 == CLEF_GEMM_AVX2 && k2 == CLEF_GEMM_AVX2 && g1[1] > g1[0] && g2[0] > g2[1],
                  "the measured pick: %s / %s", clef_gemm_name(k1), clef_gemm_name(k2));
    }
    if (avail[CLEF_GEMM_AVX2] && avail[CLEF_GEMM_AVX512] && !avail[CLEF_GEMM_AMX]) {
        clef_gemm_kernel d = clef_gemm_default();
        double g5 = clef_gemm_measured_gflops(CLEF_GEMM_AVX512), g2 = clef_gemm_measured_gflops(CLEF_GEMM_AVX2);
        printf("default by timing: avx512 %.1f, avx2 %.1f GFLOP/s -> %s\n", g5, g2, clef_gemm_name(d));
        CHECK(g5 > 0 && g2 > 0 && d == (g2 > g5 ? CLEF_GEMM_AVX2 : CLEF_GEMM_AVX512));
    }

    /* T, K, N, pad: edge sizes around the tiles (12 x 32, 6 x 16), K blocks (256)
     * and the 32-pair packing steps. */
    static const size_t shapes[][4] = {
        {1, 1, 1, 0},    {1, 7, 1, 0},     {3, 1, 5, 1},     {1, 64, 17, 0},   {12, 32, 32, 0},
        {13, 33, 33, 3}, {11, 31, 47, 0},  {25, 257, 70, 0}, {7, 513, 33, 5},  {24, 256, 64, 0},
        {37, 600, 100, 0}, {6, 16, 16, 0}, {5, 15, 9, 2},    {50, 1000, 300, 0}, {2, 2, 300, 0},
        {100, 40, 3, 0}, {97, 130, 260, 1}, {1, 4100, 40, 0},
        {530, 520, 540, 0}, /* more than one row block (516), K block (256) and column block (512) */
        {1100, 12288, 40, 0}, /* amx: 3 chunks of 512 rows (x packed per chunk) */
    };
    const size_t nshape = sizeof shapes / sizeof shapes[0];
    double worst_exact = 0, worst_amx = 0;
    for (size_t s = 0; s < nshape; s++) {
        for (int with_bias = 0; with_bias < 2; with_bias++) {
            problem p;
            make(&p, shapes[s][0], shapes[s][1], shapes[s][2], with_bias, shapes[s][3]);
            const double u = ldexp(1.0, -24);
            /* the portable kernel (a libm fmaf per product) only on the smaller shapes: it is
             * very slow under the sanitizers; on the large shape the exact SIMD kernels are
             * compared with each other */
            int big = (double)p.T * (double)p.K * (double)p.N > 4e6;
            float *yexact = NULL;
            for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; i++) {
                clef_gemm_kernel k = kernels[i];
                if (!avail[k] || (big && k == CLEF_GEMM_REF)) continue;
                int exact = k != CLEF_GEMM_AMX;
                double bound = exact ? (double)(p.K + 1) * u : (double)(3 * p.K + 2) * u * 1.01;
                float *y1 = run(&p, k, pools[1]);
                double w;
                CHECK_MSG(check_err(&p, y1, bound, &w), "%s T=%zu K=%zu N=%zu bias=%d: rel err %.3g > %.3g",
                          clef_gemm_name(k), p.T, p.K, p.N, with_bias, w, bound);
                if (exact && w > worst_exact) worst_exact = w;
                if (k == CLEF_GEMM_AMX && w > worst_amx) worst_amx = w;
                if (exact && !yexact) {
                    yexact = malloc(p.T * p.ldy * sizeof(float));
                    memcpy(yexact, y1, p.T * p.ldy * sizeof(float));
                } else if (exact) {
                    CHECK_MSG(same_bits(&p, y1, yexact), "%s differs from the first exact kernel "
                              "T=%zu K=%zu N=%zu bias=%d", clef_gemm_name(k), p.T, p.K, p.N, with_bias);
                }
                /* the padding between rows of y is never written */
                int pad_ok = 1;
                for (size_t t = 0; t < p.T; t++)
                    for (size_t n = p.N; n < p.ldy; n++) if (!isnan(y1[t * p.ldy + n])) pad_ok = 0;
                CHECK(pad_ok);
                for (int th = 0; th < 4; th++) { /* NULL pool, 1 (again), 2, 3 threads */
                    if (th == 1) continue;
                    float *yt = run(&p, k, pools[th]);
                    CHECK_MSG(same_bits(&p, y1, yt), "%s threads=%d T=%zu K=%zu N=%zu",
                              clef_gemm_name(k), th, p.T, p.K, p.N);
                    free(yt);
                }
                /* every 7th row (fewer when T is large) alone (T = 1), and rows [t, T) as a
                 * smaller batch */
                size_t step = p.T > 100 ? p.T / 4 + 1 : 7;
                for (size_t t = 0; t < p.T; t += step) {
                    float *ya = malloc(p.N * sizeof(float));
                    CHECK(clef_gemm_bf16_with(k, pools[2], ya, p.N, p.x + t * p.ldx, p.ldx, 1, p.K,
                                              p.W, p.ldw, p.N, p.bias) == 0);
                    CHECK_MSG(memcmp(ya, y1 + t * p.ldy, p.N * sizeof(float)) == 0,
                              "%s row %zu alone differs (T=%zu K=%zu N=%zu)", clef_gemm_name(k), t,
                              p.T, p.K, p.N);
                    free(ya);
                    size_t T2 = p.T - t;
                    float *yb = malloc(T2 * p.ldy * sizeof(float));
                    CHECK(clef_gemm_bf16_with(k, pools[3], yb, p.ldy, p.x + t * p.ldx, p.ldx, T2,
                                              p.K, p.W, p.ldw, p.N, p.bias) == 0);
                    int ok = 1;
                    for (size_t r = 0; r < T2; r++)
                        if (memcmp(yb + r * p.ldy, y1 + (t + r) * p.ldy, p.N * sizeof(float))) ok = 0;
                    CHECK_MSG(ok, "%s rows [%zu, %zu) as a batch differ", clef_gemm_name(k), t, p.T);
                    free(yb);
                }
                if (k == CLEF_GEMM_AMX) check_packed(&p, y1, pools, s);
                free(y1);
            }
            free(yexact);
            unmake(&p);
        }
    }
    printf("worst |y - exact| / sum|x w|: exact kernels %.3g, amx %.3g\n", worst_exact, worst_amx);

    /* Extreme inputs: every kernel with exact fp32 inputs must give the exact kernels' class of
     * answer — huge finite x stays finite and accurate (the amx split truncates, so it never
     * rounds up to Inf), Inf and NaN propagate as Inf / NaN with the same sign, 0 * Inf = NaN. */
    {
        problem p;
        make(&p, 6, 70, 40, 1, 0);
        p.x[0 * p.ldx + 3] = 3.0e38f;                 /* row 0: one huge value */
        p.x[1 * p.ldx + 5] = INFINITY;                /* row 1: +Inf */
        p.x[2 * p.ldx + 7] = -INFINITY;               /* row 2: -Inf */
        uint32_t qn = 0x7f800001u;                    /* row 3: a NaN with only low payload bits */
        memcpy(&p.x[3 * p.ldx + 9], &qn, sizeof qn);
        p.x[4 * p.ldx + 1] = 1.17549435e-38f;         /* row 4: the smallest normal */
        for (size_t n = 0; n < p.N; n += 7) p.W[n * p.ldw + 5] = 0; /* some 0 * Inf */
        for (size_t t = 0; t < p.T; t++) /* recompute the reference rows */
            for (size_t n = 0; n < p.N; n++) {
                double sum = 0, m = 0;
                for (size_t k = 0; k < p.K; k++) {
                    double v = (double)p.x[t * p.ldx + k] * (double)bf(p.W[n * p.ldw + k]);
                    sum += v;
                    m += fabs(v);
                }
                sum += p.bias[n];
                m += fabs(p.bias[n]);
                p.ref[t * p.N + n] = sum;
                p.mag[t * p.N + n] = m;
            }
        float *ye = run(&p, clef_gemm_default() == CLEF_GEMM_AMX ? CLEF_GEMM_AVX512 : CLEF_GEMM_REF, pools[2]);
        for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; i++) {
            clef_gemm_kernel k = kernels[i];
            if (!avail[k]) continue;
            float *y = run(&p, k, pools[2]);
            int ok = 1;
            for (size_t t = 0; t < p.T; t++)
                for (size_t n = 0; n < p.N; n++) {
                    float a = y[t * p.ldy + n], e = ye[t * p.ldy + n];
                    if (isnan(e) || isinf(e)) {
                        if (!(isnan(a) == isnan(e) && isinf(a) == isinf(e) && (isnan(a) || a == e))) ok = 0;
                    } else {
                        double bound = (double)(3 * p.K + 2) * ldexp(1.0, -24) * 1.01 * p.mag[t * p.N + n];
                        if (!(fabs((double)a - p.ref[t * p.N + n]) <= bound)) ok = 0;
                    }
                }
            CHECK_MSG(ok, "%s: extreme inputs answered differently from the exact kernel", clef_gemm_name(k));
            free(y);
        }
        free(ye);
        unmake(&p);
    }

    /* K = 0: bias (or zeros) */
    {
        float y[6], bias[3] = {1.5f, -2.0f, 0.0f};
        for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; i++) {
            if (!avail[kernels[i]]) continue;
            for (int i2 = 0; i2 < 6; i2++) y[i2] = NAN;
            CHECK(clef_gemm_bf16_with(kernels[i], pools[2], y, 3, NULL, 0, 2, 0, NULL, 0, 3, bias) == 0);
            CHECK(y[0] == 1.5f && y[1] == -2.0f && y[2] == 0.0f && y[3] == 1.5f && y[5] == 0.0f);
            CHECK(clef_gemm_bf16_with(kernels[i], pools[2], y, 3, NULL, 0, 2, 0, NULL, 0, 3, NULL) == 0);
            CHECK(y[0] == 0.0f && y[4] == 0.0f);
        }
    }
    /* T = 0 or N = 0: nothing written */
    {
        float y = 7.0f, x = 1.0f;
        uint16_t w = 0x3f80;
        CHECK(clef_gemm_bf16(pools[2], &y, 1, &x, 1, 0, 1, &w, 1, 1, NULL) == 0 && y == 7.0f);
        CHECK(clef_gemm_bf16(pools[2], &y, 1, &x, 1, 1, 1, &w, 1, 0, NULL) == 0 && y == 7.0f);
        CHECK(clef_gemm_bf16(pools[2], &y, 1, &x, 1, 1, 1, &w, 1, 1, NULL) == 0 && y == 1.0f);
    }
    /* packing: nothing to pack, or no AMX here */
    CHECK(clef_gemm_pack(pools[2], NULL, 0, 0, 16) == NULL);
    if (!avail[CLEF_GEMM_AMX]) {
        uint16_t w1[32] = {0};
        CHECK(clef_gemm_pack(pools[2], w1, 32, 1, 32) == NULL);
        printf("skip packed AMX weights: no AMX here\n");
    }
    clef_gemm_packed_free(NULL);
    /* an unavailable / bogus kernel is refused */
    CHECK(clef_gemm_bf16_with(CLEF_GEMM_NKERNELS, NULL, NULL, 0, NULL, 0, 1, 1, NULL, 0, 1, NULL) == -1);

    for (int i = 1; i < 4; i++) clef_pool_destroy(pools[i]);
    return TEST_END();
}
