/* The AVX-512 loops of src/compute/cpu/cpu_simd.c and their AVX2 + FMA twins (cpu_simd_avx2.c)
 * give the scalar loops' bits (each set that this CPU can run is checked; an AVX-512 CPU checks both): expf against libm
 * (a stride through all 2^32 inputs plus the special cases; the whole range was checked once, see
 * docs/performance.md), the elementwise ops, the norms' sums and scalings and the conv1d row,
 * each against the scalar expression it replaces, on awkward lengths (tails) and magnitudes. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/cpu/cpu_simd.h"
#include "test.h"

static inline float silu_s(float x) { return x / (1.0f + expf(-x)); }
static inline float sigm_s(float x) { return 1.0f / (1.0f + expf(-x)); }

static uint64_t rs = 0x9e3779b97f4a7c15ull;
static float frand(float scale) { /* uniform-ish in [-scale, scale), some exact zeros and large values */
    rs = rs * 6364136223846793005ull + 1442695040888963407ull;
    uint32_t u = (uint32_t)(rs >> 33);
    if (u % 97 == 0) return 0.0f;
    if (u % 89 == 0) return (u & 1 ? 1.0f : -1.0f) * (80.0f + (float)(u % 40)); /* near and past |x| = 88 */
    return scale * ((float)(u % 2000001) / 1000000.0f - 1.0f);
}

static int same(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }

static void check_loops(const clef_simd_loops *L, const char *set) {
    printf("%s loops\n", set);
    /* ---- expf: every 251st bit pattern and the special values */
    {
        enum { B = 4096 };
        static float x[B], y[B];
        size_t bad = 0, n = 0;
        uint64_t u = 0;
        while (u < (1ull << 32)) {
            size_t k = 0;
            for (; k < B && u < (1ull << 32); k++, u += 251) {
                uint32_t v = (uint32_t)u;
                memcpy(&x[k], &v, 4);
            }
            L->expf_(y, x, k);
            for (size_t i = 0; i < k; i++) {
                float r = expf(x[i]);
                bad += memcmp(&r, &y[i], 4) != 0;
            }
            n += k;
        }
        CHECK_MSG(bad == 0, "%s expf: %zu of %zu differ from libm", set, bad, n);
        const float sp[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 88.0f, -88.0f, 88.7228f, 88.7229f, -103.97f,
                            -103.28f, -104.0f, 1e-30f, -1e-30f, 0x1p-149f, 1.0f, -1.0f, 0.5f, 87.99f, -87.99f};
        size_t ns = sizeof sp / sizeof sp[0];
        float ys[32];
        L->expf_(ys, sp, ns);
        int ok = 1;
        for (size_t i = 0; i < ns; i++) {
            float r = expf(sp[i]);
            ok &= memcmp(&r, &ys[i], 4) == 0;
        }
        CHECK_MSG(ok, "expf special values");
    }
    /* ---- gelu_tanh: every 4099th bit pattern. The vector loop against the scalar form (the same
     * bits), and the scalar form against the function computed in long double and rounded once
     * (x / (1 + expl(-2u))): at most one fp32 ulp apart. (The libm form 0.5 x (1 + tanh u) it
     * replaced is worse for x below about -5, where 1 + tanh u cancels; counted, not checked.) */
    {
        enum { B = 4096 };
        static float x[B], y[B];
        size_t bad = 0, n = 0, exact = 0, one = 0, worse = 0, libm_worse = 0;
        uint64_t u = 0;
        while (u < (1ull << 32)) {
            size_t k = 0;
            for (; k < B && u < (1ull << 32); k++, u += 4099) {
                uint32_t b32 = (uint32_t)u;
                memcpy(&x[k], &b32, 4);
            }
            memcpy(y, x, k * sizeof(float));
            L->gelu_tanh(y, k);
            for (size_t i = 0; i < k; i++, n++) {
                float s1 = clef_gelu_tanh1(x[i]);
                if (memcmp(&s1, &y[i], 4) != 0 && !(isnan(s1) && isnan(y[i]))) bad++;
                long double xl = x[i];
                long double ul = 0.79788456080286535588L * (xl + 0.044715L * xl * xl * xl);
                float tr = (float)(xl / (1.0L + expl(-2.0L * ul)));
                double xd = x[i];
                float lm = (float)(0.5 * xd * (1.0 + tanh(0.79788456080286535588 * (xd + 0.044715 * xd * xd * xd))));
                if (isnan(tr) || isnan(s1)) { if (isnan(tr) != isnan(s1)) worse++; continue; }
                int32_t a, c, l;
                memcpy(&a, &tr, 4);
                memcpy(&c, &s1, 4);
                memcpy(&l, &lm, 4);
                if (a == c || tr == s1) exact++;
                else if ((a ^ c) >= 0 && (a - c == 1 || c - a == 1)) one++;
                else worse++;
                if (!isnan(lm) && tr != lm && !((a ^ l) >= 0 && (a - l == 1 || l - a == 1))) libm_worse++;
            }
        }
        CHECK_MSG(bad == 0, "gelu_tanh: %zu of %zu vector results differ from the scalar form", bad, n);
        CHECK_MSG(worse == 0, "gelu_tanh: %zu of %zu results more than one ulp from the long double value", worse, n);
        printf("gelu_tanh: %zu bit patterns, vector = scalar; against long double: %zu correctly rounded, %zu one ulp "
               "off (libm's tanh form: %zu more than one ulp off)\n", n, exact, one, libm_worse);
    }

    /* ---- elementwise, lengths with tails */
    const size_t lens[] = {1, 3, 7, 8, 9, 15, 16, 17, 100, 4099}; /* tails of 8 and 16 lanes */
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        size_t n = lens[li];
        float *a = malloc(n * 4), *b = malloc(n * 4), *y = malloc(n * 4), *r = malloc(n * 4);
        if (!a || !b || !y || !r) { CHECK(0); return; }
        for (size_t i = 0; i < n; i++) { a[i] = frand(12.0f); b[i] = frand(3.0f); }
        for (size_t i = 0; i < n; i++) r[i] = silu_s(a[i]) * b[i];
        L->silu_mul(y, a, b, n);
        CHECK_MSG(same(y, r, n), "silu_mul n=%zu", n);
        memcpy(y, a, n * 4);
        L->silu_mul(y, y, b, n); /* in place */
        CHECK_MSG(same(y, r, n), "silu_mul in place n=%zu", n);
        for (size_t i = 0; i < n; i++) r[i] = b[i] * sigm_s(a[i]);
        memcpy(y, b, n * 4);
        L->sigmoid_mul(y, a, n);
        CHECK_MSG(same(y, r, n), "sigmoid_mul n=%zu", n);
        for (size_t i = 0; i < n; i++) r[i] = a[i] + b[i];
        L->add(y, a, b, n);
        CHECK_MSG(same(y, r, n), "add n=%zu", n);
        free(a); free(b); free(y); free(r);
    }
    /* ---- norms: 8 rows of D at stride ld */
    const size_t Ds[] = {1, 3, 5, 7, 8, 9, 16, 72, 128, 257};
    for (size_t di = 0; di < sizeof Ds / sizeof Ds[0]; di++) {
        size_t D = Ds[di], ld = D + 3;
        float *x = malloc(8 * ld * 4), *z = malloc(8 * ld * 4), *w = malloc(D * 4), *y = malloc(D * 4), *r = malloc(D * 4);
        if (!x || !z || !w || !y || !r) { CHECK(0); return; }
        for (size_t i = 0; i < 8 * ld; i++) { x[i] = frand(5.0f) * 1e-3f; z[i] = frand(6.0f); }
        for (size_t d = 0; d < D; d++) w[d] = frand(1.0f);
        double ss[8];
        L->sumsq8(ss, x, ld, D);
        int ok = 1;
        for (size_t j = 0; j < 8; j++) {
            double s = 0;
            for (size_t d = 0; d < D; d++) s += (double)x[j * ld + d] * x[j * ld + d];
            ok &= memcmp(&s, &ss[j], sizeof s) == 0;
        }
        CHECK_MSG(ok, "sumsq8 D=%zu", D);
        float inv = (float)(1.0 / sqrt(ss[3] / (double)D + 1e-6));
        for (int off = 0; off < 2; off++) {
            for (size_t d = 0; d < D; d++) { float nn = x[3 * ld + d] * inv; r[d] = nn * (off ? 1.0f + w[d] : w[d]); }
            L->rms_scale(y, x + 3 * ld, inv, w, off, D);
            CHECK_MSG(same(y, r, D), "rms_scale D=%zu offset %d", D, off);
        }
        for (int k = 0; k < 2; k++) {
            float sc = k ? 0.125f : 1.0f;
            for (size_t d = 0; d < D; d++) { float t = x[5 * ld + d] * inv; r[d] = sc != 1.0f ? t * sc : t; }
            L->l2_scale(y, x + 5 * ld, inv, sc, D);
            CHECK_MSG(same(y, r, D), "l2_scale D=%zu scale %g", D, sc);
        }
        for (size_t d = 0; d < D; d++) { float nn = w[d] * (x[d] * inv); r[d] = nn * silu_s(z[d]); }
        L->gated_scale(y, x, z, inv, w, D);
        CHECK_MSG(same(y, r, D), "gated_scale D=%zu", D);
        /* layernorm: statistics of 8 rows, then the scaling (bias in z) */
        double mean[8], var[8];
        for (size_t i = 0; i < 8 * ld; i++) x[i] = 3.0f + frand(2.0f);
        L->meanvar8(mean, var, x, ld, D);
        ok = 1;
        for (size_t j = 0; j < 8; j++) {
            const float *xr = x + j * ld;
            double s = 0;
            for (size_t d = 0; d < D; d++) s += xr[d];
            double mu = s / (double)D, v = 0;
            for (size_t d = 0; d < D; d++) { double t = xr[d] - mu; v += t * t; }
            ok &= memcmp(&mu, &mean[j], sizeof mu) == 0 && memcmp(&v, &var[j], sizeof v) == 0;
        }
        CHECK_MSG(ok, "meanvar8 D=%zu", D);
        double rstd = 1.0 / sqrt(var[2] / (double)D + 1e-5);
        for (size_t d = 0; d < D; d++)
            r[d] = (float)(((double)x[2 * ld + d] - mean[2]) * rstd * (double)w[d] + (double)z[d]);
        L->ln_scale(y, x + 2 * ld, mean[2], rstd, w, z, D);
        CHECK_MSG(same(y, r, D), "ln_scale D=%zu", D);
        free(x); free(z); free(w); free(y); free(r);
    }
    /* ---- conv1d + SiLU rows, K = 4, the first rows with fewer taps */
    {
        size_t T = 6, K = 4;
        const size_t Cs[] = {1, 8, 9, 16, 37};
        for (size_t ci = 0; ci < sizeof Cs / sizeof Cs[0]; ci++) {
            size_t C = Cs[ci];
            float *x = malloc(T * C * 4), *wt = malloc(K * C * 4), *y = malloc(C * 4), *r = malloc(C * 4);
            if (!x || !wt || !y || !r) { CHECK(0); return; }
            for (size_t i = 0; i < T * C; i++) x[i] = frand(4.0f);
            for (size_t i = 0; i < K * C; i++) wt[i] = frand(1.0f);
            int ok = 1;
            for (size_t t = 0; t < T; t++) {
                size_t k0 = t + 1 >= K ? 0 : K - 1 - t;
                for (size_t c = 0; c < C; c++) {
                    double s = 0;
                    for (size_t k = k0; k < K; k++) s += (double)wt[k * C + c] * x[(t + k + 1 - K) * C + c];
                    r[c] = silu_s((float)s);
                }
                L->conv_silu_row(y, x, t, C, wt, K, k0);
                ok &= same(y, r, C);
            }
            CHECK_MSG(ok, "conv_silu_row C=%zu", C);
            free(x); free(wt); free(y); free(r);
        }
    }
}

int main(void) {
    if (!clef_simd_ok() && !clef_simd2_ok()) {
        puts("skip: neither AVX-512 nor AVX2 + FMA on this CPU (the scalar loops run)");
        return 77;
    }
    if (clef_simd_ok()) check_loops(&clef_simd_loops_avx512, "AVX-512");
    else puts("AVX-512 loops: not checked (no AVX-512 on this CPU)");
    if (clef_simd2_ok()) check_loops(&clef_simd_loops_avx2, "AVX2");
    return TEST_END();
}
