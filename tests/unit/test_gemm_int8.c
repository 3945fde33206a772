/* The int8 Linear (compute/cpu/gemm_int8.h) against a straightforward C reference of the same
 * quantized arithmetic written here (per-row max, 127 / max, round to nearest even, an int64 sum,
 * one fp32 rescale): bit for bit, for every kernel this CPU runs, 1 / 2 / 3 threads, a row alone and
 * inside a batch, any row slice of the weights. Also: all-±127 rows at the largest K (the integer
 * sums must neither saturate nor wrap), zero rows (scale 0), rows with Inf / NaN (NaN out), a K
 * over the limit refused, and the weights' bytes (int8 + one scale a row). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/threads.h"
#include "compute/cpu/gemm_int8.h"
#include "test.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;
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
static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (uint16_t)(u >> 16);
}

/* The reference: one row's scale and values, written plainly. */
static float ref_quant(const float *v, size_t K, int *q) {
    float m = 0;
    for (size_t k = 0; k < K; k++) {
        if (isnan(v[k]) || isinf(v[k])) {
            for (size_t i = 0; i < K; i++) q[i] = 0;
            return NAN;
        }
        if (fabsf(v[k]) > m) m = fabsf(v[k]);
    }
    for (size_t k = 0; k < K; k++) {
        if (m == 0) { q[k] = 0; continue; }
        float s = v[k] * (127.0f / m);
        float r = nearbyintf(s); /* ties to even in the default rounding mode */
        q[k] = r > 127 ? 127 : r < -127 ? -127 : (int)r;
    }
    return m == 0 ? 0.0f : m / 127.0f;
}

static void ref_gemm(float *y, const float *x, size_t T, size_t K, const uint16_t *W, size_t N, const float *bias) {
    int *qx = malloc(K * sizeof *qx), *qw = malloc(N * K * sizeof *qw);
    float *sw = malloc(N * sizeof *sw), *row = malloc(K * sizeof *row);
    for (size_t n = 0; n < N; n++) {
        for (size_t k = 0; k < K; k++) row[k] = bf(W[n * K + k]);
        sw[n] = ref_quant(row, K, qw + n * K);
    }
    for (size_t t = 0; t < T; t++) {
        float sx = ref_quant(x + t * K, K, qx);
        for (size_t n = 0; n < N; n++) {
            int64_t s = 0;
            for (size_t k = 0; k < K; k++) s += (int64_t)qx[k] * qw[n * K + k];
            float v = (float)s * (sx * sw[n]);
            y[t * N + n] = bias ? v + bias[n] : v;
        }
    }
    free(qx);
    free(qw);
    free(sw);
    free(row);
}

static int same(const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t u, v;
        memcpy(&u, &a[i], 4);
        memcpy(&v, &b[i], 4);
        if (u != v && !(isnan(a[i]) && isnan(b[i]))) return 0;
    }
    return 1;
}

static const clef_q8_kernel KERNELS[] = {CLEF_Q8_REF, CLEF_Q8_AVX2};

static void check_shape(size_t T, size_t K, size_t N, int with_bias, clef_pool *pools[4], int special) {
    float *x = malloc(T * K * sizeof *x), *bias = with_bias ? malloc(N * sizeof *bias) : NULL;
    uint16_t *W = malloc(N * K * sizeof *W);
    float *yr = malloc(T * N * sizeof *yr), *y = malloc(T * N * sizeof *y);
    for (size_t i = 0; i < T * K; i++) x[i] = frand() * (1 + (float)(i % 7));
    for (size_t i = 0; i < N * K; i++) W[i] = to_bf16(frand() * 0.05f);
    for (size_t n = 0; with_bias && n < N; n++) bias[n] = frand();
    if (special) {
        for (size_t k = 0; k < K; k++) x[k] = 0;                      /* row 0: all zero */
        if (T > 1) x[K + K / 2] = NAN;                                /* row 1: a NaN */
        if (T > 2) x[2 * K] = -INFINITY;                              /* row 2: -Inf */
        for (size_t k = 0; N > 1 && k < K; k++) W[K + k] = 0;         /* weight row 1: all zero */
        for (size_t k = 0; k < K; k++) W[k] = to_bf16(k % 3 ? 0.5f : -0.25f); /* row 0: a tie at .5 */
    }
    ref_gemm(yr, x, T, K, W, N, bias);
    clef_q8_weights *q = clef_q8_quantize_bf16(pools[2], W, K, N, K);
    CHECK(q && q->N == N && q->K == K && q->ldq % CLEF_Q8_PAD == 0);
    if (!q) goto out;
    CHECK(clef_q8_weights_bytes(q) < N * K * 2 / 2 + N * (CLEF_Q8_PAD + 4) + 64);
    for (size_t i = 0; i < sizeof KERNELS / sizeof KERNELS[0]; i++) {
        clef_q8_kernel k = KERNELS[i];
        if (!clef_q8_available(k)) {
            printf("skip int8 kernel %s: not on this CPU\n", clef_q8_name(k));
            continue;
        }
        for (int th = 0; th < 4; th++) {
            memset(y, 0xff, T * N * sizeof *y);
            CHECK(clef_gemm_q8(k, pools[th], y, N, x, K, T, q, 0, N, bias) == 0);
            CHECK_MSG(same(y, yr, T * N), "%s threads=%d T=%zu K=%zu N=%zu bias=%d: differs from the reference",
                      clef_q8_name(k), th, T, K, N, with_bias);
        }
        /* a row alone, the rows after it as a batch, and a slice of the weight rows */
        size_t t = T / 2, r0 = N / 3, nn = N - r0 > 5 ? 5 : N - r0;
        CHECK(clef_gemm_q8(k, pools[3], y, N, x + t * K, K, T - t, q, 0, N, bias) == 0);
        CHECK_MSG(same(y, yr + t * N, (T - t) * N), "%s rows [%zu, %zu) as a batch", clef_q8_name(k), t, T);
        CHECK(clef_gemm_q8(k, pools[1], y, N, x + t * K, K, 1, q, 0, N, bias) == 0);
        CHECK_MSG(same(y, yr + t * N, N), "%s row %zu alone", clef_q8_name(k), t);
        if (nn) {
            CHECK(clef_gemm_q8(k, pools[2], y, nn, x, K, T, q, r0, nn, bias ? bias + r0 : NULL) == 0);
            int ok = 1;
            for (size_t r = 0; r < T; r++) ok &= same(y + r * nn, yr + r * N + r0, nn);
            CHECK_MSG(ok, "%s weight rows [%zu, %zu)", clef_q8_name(k), r0, r0 + nn);
        }
        CHECK(clef_gemm_q8(k, pools[2], y, N, x, K, T, q, 1, N, bias) == -1); /* past the end */
    }
    if (special) {
        CHECK(yr[0] == (bias ? bias[0] : 0.0f));                /* zero row: 0 (+ bias) */
        if (T > 1) CHECK(isnan(yr[N]));
        if (T > 2) CHECK(isnan(yr[2 * N]));
    }
    clef_q8_weights_free(q);
out:
    free(x);
    free(bias);
    free(W);
    free(yr);
    free(y);
}

int main(void) {
    clef_err err;
    clef_pool *pools[4] = {NULL, clef_pool_create(1, &err), clef_pool_create(2, &err), clef_pool_create(3, &err)};
    CHECK(pools[1] && pools[2] && pools[3]);
    static const size_t shapes[][3] = {
        {1, 1, 1}, {1, 15, 2}, {3, 16, 3}, {5, 17, 4}, {4, 31, 7}, {7, 33, 13}, {9, 64, 50}, {13, 100, 49},
        {33, 257, 97}, {70, 520, 100}, {130, 1030, 60}, {2, 4096, 9},
    };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int b = 0; b < 2; b++) check_shape(shapes[s][0], shapes[s][1], shapes[s][2], b, pools, s % 3 == 2);

    /* the largest sums: every q at +-127 over K = CLEF_Q8_MAX_K (127^2 K just under 2^31) */
    {
        size_t K = CLEF_Q8_MAX_K, T = 2, N = 3;
        float *x = malloc(T * K * sizeof *x), *y = malloc(T * N * sizeof *y), *yr = malloc(T * N * sizeof *yr);
        uint16_t *W = malloc(N * K * sizeof *W);
        for (size_t k = 0; k < K; k++) {
            x[k] = 2.0f;                          /* row 0: all +max */
            x[K + k] = k % 2 ? -3.0f : 3.0f;      /* row 1: alternating */
            W[k] = to_bf16(1.0f);                 /* col 0: all +max -> sum 127^2 K */
            W[K + k] = to_bf16(-1.0f);            /* col 1: all -max */
            W[2 * K + k] = to_bf16(k % 2 ? -1.0f : 1.0f);
        }
        ref_gemm(yr, x, T, K, W, N, NULL);
        CHECK(yr[0] == (float)(127.0 * 127.0 * (double)K) * ((2.0f / 127.0f) * (1.0f / 127.0f)));
        clef_q8_weights *q = clef_q8_quantize_bf16(pools[2], W, K, N, K);
        CHECK(q != NULL);
        for (size_t i = 0; q && i < sizeof KERNELS / sizeof KERNELS[0]; i++) {
            if (!clef_q8_available(KERNELS[i])) continue;
            CHECK(clef_gemm_q8(KERNELS[i], pools[2], y, N, x, K, T, q, 0, N, NULL) == 0);
            CHECK_MSG(same(y, yr, T * N), "%s: the largest sums (K = %zu) %g %g %g / %g %g %g vs %g %g %g / %g %g %g",
                      clef_q8_name(KERNELS[i]), K, y[0], y[1], y[2], y[3], y[4], y[5], yr[0], yr[1], yr[2], yr[3],
                      yr[4], yr[5]);
        }
        clef_q8_weights_free(q);
        CHECK(clef_q8_quantize_bf16(NULL, W, K + 1, 1, K + 1) == NULL); /* K over the limit */
        free(x);
        free(y);
        free(yr);
        free(W);
    }
    for (int i = 1; i < 4; i++) clef_pool_destroy(pools[i]);
    printf("%d passed, %d failed\n", test_pass_, test_fail_);
    return test_fail_ ? 1 : 0;
}
