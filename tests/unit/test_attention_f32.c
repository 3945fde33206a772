/* The fp32-product attention (the default path's: cpu_attention_f32.c on AVX-512 CPUs, its AVX2
 * build cpu_attention_f32_avx2.c on AVX2 + FMA ones) against a scalar reference that performs the
 * order those files document, bit for bit (memcmp), so that both kinds of CPU compute the same
 * bits: each kernel this CPU can run is checked (an AVX-512 CPU checks both), with 1 and 3 threads.
 *
 * The reference, per query row i and head h (kv head h / group), keys in tiles of 64 from 0 up to
 * the row's last visible key:
 *   s = fma(k[p], q[p], s) for p in order from +0; x = s * scale in fp32 (-inf past the tile's
 *   valid keys); the tile max through _mm512_reduce_max_ps's tree (maxps: a > b ? a : b); the
 *   running max m and sum l in double, rescaling O by (float)exp(m - mn) and l by exp(m - mn) when
 *   the max grows; p = expf(x - (float)m) (libm's expf, whose bits clef_simd_expf and
 *   clef_simd2_expf reproduce: test_simd); the tile's sum as 8 double lanes (lane L: keys L, L+8,
 *   ... in order) added as _mm512_reduce_add_pd does; O = fma(v, p, O) over the valid keys in
 *   order; out = (float)((double)O / l).
 * (The kernels also add p = 0 times the masked keys' V, which leaves every finite O unchanged but
 * for the sign of a zero; the random inputs here never make O a signed zero.)
 * Shapes: GQA and not, causal with and without a cache (Tk > Tq), cross attention, odd lengths
 * around the 64-key tile, head_dim 8 / 32 / 40 / 72 / 128 / 256, strided rows, scores that grow
 * along the keys (the max rises in every tile), and wide scores (p over dozens of binades, so the
 * double tile sums round and their order matters). */
#pragma GCC optimize("fp-contract=off")
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/threads.h"
#include "compute/cpu/cpu_mixers.h"
#include "compute/cpu/cpu_simd.h"
#include "test.h"

#define KB 64

static inline float maxps(float a, float b) { return a > b ? a : b; }

static void ref_attention(float *o, size_t ldo, const float *q, size_t ldq, const float *k, size_t ldk,
                          const float *v, size_t ldv, size_t Tq, size_t Tk, size_t nh, size_t nkv, size_t hd,
                          float scale, int causal) {
    const size_t group = nh / nkv, off = Tk - Tq;
    float *O = malloc(hd * sizeof(float));
    if (!O) return;
    for (size_t i = 0; i < Tq; i++)
        for (size_t h = 0; h < nh; h++) {
            const size_t j = h / group, lim = causal ? i + off + 1 : Tk;
            const float *qr = q + i * ldq + h * hd;
            double m = -INFINITY, l = 0.0;
            memset(O, 0, hd * sizeof(float));
            for (size_t t0 = 0; t0 < lim; t0 += KB) {
                size_t nt = Tk - t0 < KB ? Tk - t0 : KB, nv = lim - t0 < nt ? lim - t0 : nt;
                float x[KB], p[KB];
                for (size_t u = 0; u < KB; u++) {
                    if (u >= nv) { x[u] = -INFINITY; continue; }
                    const float *kr = k + (t0 + u) * ldk + j * hd;
                    float s = 0.0f;
                    for (size_t d = 0; d < hd; d++) s = fmaf(kr[d], qr[d], s);
                    x[u] = s * scale;
                }
                float lane[16]; /* the 16-lane running max, then _mm512_reduce_max_ps's tree */
                for (int L = 0; L < 16; L++) {
                    lane[L] = -INFINITY;
                    for (int c = 0; c < KB / 16; c++) lane[L] = maxps(lane[L], x[16 * c + L]);
                }
                float t3[8], t6[4], t8[4];
                for (int L = 0; L < 8; L++) t3[L] = maxps(lane[8 + L], lane[L]);
                for (int L = 0; L < 4; L++) t6[L] = maxps(t3[4 + L], t3[L]);
                for (int L = 0; L < 4; L++) t8[L] = maxps(t6[L], t6[L ^ 2]);
                float mt = maxps(t8[0], t8[1]);
                double mn = m > mt ? m : mt;
                if (mn == -INFINITY) continue;
                if (mn != m) {
                    double alpha = exp(m - mn);
                    for (size_t d = 0; d < hd; d++) O[d] = O[d] * (float)alpha;
                    l *= alpha;
                    m = mn;
                }
                double a[8] = {0};
                for (size_t u = 0; u < KB; u++) p[u] = expf(x[u] - (float)mn);
                for (int c = 0; c < KB / 8; c++)
                    for (int L = 0; L < 8; L++) a[L] += (double)p[8 * c + L];
                l += ((a[4] + a[0]) + (a[6] + a[2])) + ((a[5] + a[1]) + (a[7] + a[3]));
                for (size_t u = 0; u < nv; u++) {
                    const float *vr = v + (t0 + u) * ldv + j * hd;
                    for (size_t d = 0; d < hd; d++) O[d] = fmaf(vr[d], p[u], O[d]);
                }
            }
            float *orow = o + i * ldo + h * hd;
            for (size_t d = 0; d < hd; d++) orow[d] = (float)((double)O[d] / l);
        }
    free(O);
}

typedef int (*att_fn)(clef_pool *, float *, size_t, const float *, size_t, const float *, size_t, const float *,
                      size_t, size_t, size_t, size_t, size_t, size_t, float, int);

static uint64_t rs = 0x2545f4914f6cdd1dull;
static float frand(float lo, float hi) {
    rs = rs * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * (float)((rs >> 40) & 0xffffff) / 16777216.0f;
}

static clef_pool *pools[4];

static void check(size_t Tq, size_t Tk, size_t nh, size_t nkv, size_t hd, int causal, size_t pad, float qs,
                  int grow) {
    size_t ldq = nh * hd + pad, ldk = nkv * hd + pad, ldv = nkv * hd + 2 * pad, ldo = nh * hd + 3 * pad;
    float *q = malloc(Tq * ldq * 4), *k = malloc(Tk * ldk * 4), *v = malloc(Tk * ldv * 4);
    float *r = calloc(Tq * ldo, 4), *o = calloc(Tq * ldo, 4);
    if (!q || !k || !v || !r || !o) { CHECK(0); goto out; }
    for (size_t x = 0; x < Tq * ldq; x++) q[x] = frand(grow ? 0.0f : -qs, qs);
    for (size_t t = 0; t < Tk; t++)
        for (size_t x = 0; x < ldk; x++) k[t * ldk + x] = frand(-1, 1) + (grow ? 3.0f * (float)t / (float)Tk : 0.0f);
    for (size_t x = 0; x < Tk * ldv; x++) v[x] = frand(-1, 1);
    float scale = (float)(1.0 / sqrt((double)hd));
    ref_attention(r, ldo, q, ldq, k, ldk, v, ldv, Tq, Tk, nh, nkv, hd, scale, causal);
    static const struct { const char *name; att_fn fn; } kern[] = {
        {"AVX-512", clef_cpu_attention_f32}, {"AVX2", clef_cpu_attention_f32_avx2}};
    for (int ki = 0; ki < 2; ki++) {
        if (ki == 0 ? !clef_simd_ok() : !clef_simd2_ok()) continue;
        for (int nt = 1; nt <= 3; nt += 2) {
            memset(o, 0, Tq * ldo * 4);
            CHECK(kern[ki].fn(pools[nt], o, ldo, q, ldq, k, ldk, v, ldv, Tq, Tk, nh, nkv, hd, scale, causal) == 0);
            size_t bad = 0;
            float worst = 0;
            for (size_t i = 0; i < Tq; i++)
                for (size_t x = 0; x < nh * hd; x++) {
                    float a = o[i * ldo + x], b = r[i * ldo + x];
                    if (memcmp(&a, &b, 4) != 0) { bad++; if (fabsf(a - b) > worst) worst = fabsf(a - b); }
                }
            CHECK_MSG(bad == 0, "%s Tq=%zu Tk=%zu nh=%zu nkv=%zu hd=%zu causal=%d, %d threads: %zu of %zu "
                      "values differ from the reference (max |d| %g)", kern[ki].name, Tq, Tk, nh, nkv, hd, causal,
                      nt, bad, Tq * nh * hd, (double)worst);
        }
    }
    printf("Tq=%-4zu Tk=%-4zu nh=%zu nkv=%zu hd=%-3zu causal=%d grow=%d checked\n", Tq, Tk, nh, nkv, hd, causal, grow);
out:
    free(q); free(k); free(v); free(r); free(o);
}

int main(void) {
    if (!clef_simd_ok() && !clef_simd2_ok()) {
        puts("skip: neither AVX-512 nor AVX2 + FMA on this CPU (the double-accumulation attention runs)");
        return 77;
    }
    printf("kernels checked: %s%s\n", clef_simd_ok() ? "AVX-512 " : "", clef_simd2_ok() ? "AVX2" : "");
    clef_err err;
    for (int i = 1; i <= 3; i += 2) {
        pools[i] = clef_pool_create(i, &err);
        if (!pools[i]) { printf("cannot create a pool\n"); return 1; }
    }
    check(1, 1, 2, 1, 32, 1, 0, 2, 0);
    check(37, 37, 4, 2, 72, 1, 3, 2, 0);      /* odd length, head_dim 72 (padded to 80) */
    check(5, 130, 8, 2, 128, 1, 0, 2, 0);     /* decoding after a cache: Tk > Tq */
    check(65, 65, 2, 2, 256, 0, 1, 1, 0);     /* non-causal, no GQA */
    check(63, 200, 4, 1, 32, 0, 0, 2, 1);     /* cross, growing scores */
    check(64, 64, 4, 4, 72, 1, 0, 1, 1);      /* one whole tile, growing scores */
    check(200, 200, 2, 1, 128, 1, 2, 2, 1);   /* several query blocks */
    check(90, 90, 4, 2, 8, 1, 1, 1, 0);       /* head_dim 8 */
    check(65, 130, 6, 3, 40, 0, 2, 1, 1);     /* head_dim 40 */
    check(129, 129, 2, 1, 256, 1, 0, 3, 0);   /* head_dim 256, masked tails of a third tile */
    /* wide scores: p spans dozens of binades, so the tile sums round and their order shows */
    check(70, 150, 4, 2, 32, 1, 0, 40, 0);
    check(33, 100, 2, 1, 72, 0, 1, 25, 1);
    for (int i = 1; i <= 3; i += 2) clef_pool_destroy(pools[i]);
    return TEST_END();
}
