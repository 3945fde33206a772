/* The knob registry (src/base/knobs.h): parsing from a lookup (defaults, every value, bad values),
 * the process registry read once, and the CPU backend taking its settings from the struct it is
 * given, not from the environment: a backend created with linear_double set runs the double loop
 * (its Linear equals the double-accumulated sum rounded once) while the environment says nothing. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/knobs.h"
#include "compute/cpu/cpu_ops.h"
#include "test.h"

typedef struct { const char *const *kv; } env_t; /* name, value, name, value, ..., NULL */

static const char *lookup(const char *name, void *ctx) {
    const env_t *e = ctx;
    for (const char *const *p = e->kv; *p; p += 2)
        if (!strcmp(p[0], name)) return p[1];
    return NULL;
}

static void parse(clef_knobs *k, const char *const *kv) {
    env_t e = {kv};
    clef_knobs_parse(k, lookup, &e);
}

static void test_parse(void) {
    clef_knobs k, d;
    clef_knobs_default(&d);
    static const char *const none[] = {NULL};
    parse(&k, none);
    CHECK(memcmp(&k, &d, sizeof k) == 0);
    CHECK(k.device == CLEF_KNOB_UNSET && k.precision == CLEF_KNOB_UNSET && k.cpu_cache_mb == -1);
    CHECK(k.cuda_pool_mb == 1024 && k.amx_packed == 1 && !k.linear_double && !k.gemm[0] && !k.cpu_mask[0]);
    CHECK(k.cuda_linear_split == 1 && k.cuda_attn == 3 && k.cuda_delta == 3);

    static const char *const all[] = {"CLEF_DEVICE", "cuda", "CLEF_PRECISION", "fast", "CLEF_CPU_CACHE_MB", "0",
                                      "CLEF_CUDA_POOL_MB", "256", "CLEF_LINEAR", "double", "CLEF_GEMM", "avx2",
                                      "CLEF_AMX_PACKED", "0", "CLEF_CPU_MASK", "avx512f,amx-bf16", "CLEF_ARENA_POISON", "1",
                                      "CLEF_CUDA_LINEAR", "bf16", "CLEF_CUDA_ATTN", "v3", "CLEF_CUDA_DELTA", "v1",
                                      NULL};
    parse(&k, all);
    CHECK(k.device == CLEF_KNOB_DEVICE_CUDA && k.precision == CLEF_KNOB_PRECISION_FAST);
    CHECK(k.cpu_cache_mb == 0 && k.cuda_pool_mb == 256 && k.linear_double == 1 && k.amx_packed == 0);
    CHECK(k.arena_poison == 1);
    CHECK_STR(k.gemm, "avx2");
    CHECK_STR(k.cpu_mask, "avx512f,amx-bf16");
    CHECK(k.cuda_linear_split == 0 && k.cuda_attn == 2 && k.cuda_delta == 0);

    static const char *const other[] = {"CLEF_DEVICE", "cpu", "CLEF_PRECISION", "fp32", "CLEF_CUDA_ATTN", "simt",
                                        "CLEF_CUDA_DELTA", "v3", NULL};
    parse(&k, other);
    CHECK(k.device == CLEF_KNOB_DEVICE_CPU && k.precision == CLEF_KNOB_PRECISION_FP32);
    CHECK(k.cuda_attn == 0 && k.cuda_delta == 2);
    static const char *const v5[] = {"CLEF_CUDA_DELTA", "v5", NULL};
    parse(&k, v5);
    CHECK(k.cuda_delta == 4);
    /* CLEF_CUDA_GEMM_TOPN: 0..16, else the default 0 (the heuristic's first algorithm) */
    CHECK(d.cuda_gemm_topn == 0);
    static const char *const topn[] = {"CLEF_CUDA_GEMM_TOPN", "8", NULL};
    parse(&k, topn);
    CHECK(k.cuda_gemm_topn == 8);
    static const char *const topn_max[] = {"CLEF_CUDA_GEMM_TOPN", "16", NULL};
    parse(&k, topn_max);
    CHECK(k.cuda_gemm_topn == 16);
    static const char *const topn_bad[][3] = {{"CLEF_CUDA_GEMM_TOPN", "17", NULL}, {"CLEF_CUDA_GEMM_TOPN", "-1", NULL},
                                              {"CLEF_CUDA_GEMM_TOPN", "4x", NULL}, {"CLEF_CUDA_GEMM_TOPN", "", NULL}};
    for (size_t i = 0; i < sizeof topn_bad / sizeof topn_bad[0]; i++) {
        parse(&k, topn_bad[i]);
        CHECK_MSG(k.cuda_gemm_topn == 0, "CLEF_CUDA_GEMM_TOPN=%s: %d", topn_bad[i][1], k.cuda_gemm_topn);
    }

    /* bad values: CLEF_DEVICE / CLEF_PRECISION are reported (clef_open), the diagnostic ones fall
     * back to their defaults as they always did */
    static const char *const bad[] = {"CLEF_DEVICE", "gpu", "CLEF_PRECISION", "half", "CLEF_CPU_CACHE_MB", "12x",
                                      "CLEF_CUDA_POOL_MB", "-5", "CLEF_LINEAR", "doubl", "CLEF_AMX_PACKED", "no",
                                      "CLEF_CUDA_ATTN", "v9", "CLEF_CUDA_DELTA", "", NULL};
    parse(&k, bad);
    CHECK(k.device == CLEF_KNOB_BAD && k.precision == CLEF_KNOB_BAD);
    CHECK_STR(k.device_raw, "gpu");
    CHECK_STR(k.precision_raw, "half");
    CHECK(k.cpu_cache_mb == -1 && k.cuda_pool_mb == 1024 && !k.linear_double && k.amx_packed == 1);
    CHECK(k.cuda_attn == 3 && k.cuda_delta == 3);
    static const char *const empty[] = {"CLEF_DEVICE", "", "CLEF_PRECISION", "", NULL};
    parse(&k, empty);
    CHECK(k.device == CLEF_KNOB_UNSET && k.precision == CLEF_KNOB_UNSET);

    /* the process registry: one struct, the same on every call */
    CHECK(clef_knobs_env() == clef_knobs_env());
    /* the table names every knob once */
    CHECK(clef_knob_count >= 12);
    for (size_t i = 0; i < clef_knob_count; i++)
        for (size_t j = i + 1; j < clef_knob_count; j++)
            CHECK_MSG(strcmp(clef_knob_table[i].name, clef_knob_table[j].name), "%s twice", clef_knob_table[i].name);
}

/* The backend follows the struct it is given. */
static void test_backend(void) {
    const char *lin = getenv("CLEF_LINEAR");
    if (lin && !strcmp(lin, "double")) {
        printf("note: CLEF_LINEAR=double in the environment; the backend check still uses explicit knobs\n");
    }
    enum { T = 5, K = 777, N = 24 };
    float *x = malloc(sizeof(float) * T * K), *y = malloc(sizeof(float) * T * N);
    uint16_t *w = malloc(sizeof(uint16_t) * N * K);
    if (!x || !y || !w) { CHECK(0); free(x); free(y); free(w); return; }
    uint32_t s = 12345;
    for (size_t i = 0; i < (size_t)T * K; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = ((float)(s >> 8) / 16777216.0f - 0.5f) * 3.0f;
    }
    for (size_t i = 0; i < (size_t)N * K; i++) {
        s = s * 1664525u + 1013904223u;
        w[i] = (uint16_t)(0x3c00 + (s >> 24)) ^ (uint16_t)((s >> 7) & 0x8000); /* bf16 around +-0.008..0.03 */
    }
    clef_tensor wt;
    memset(&wt, 0, sizeof wt);
    wt.dtype = CLEF_ST_BF16;
    wt.ndim = 2;
    wt.shape[0] = N;
    wt.shape[1] = K;
    wt.numel = (int64_t)N * K;
    wt.data = w;

    clef_knobs kd, kf;
    clef_knobs_default(&kd);
    kd.linear_double = 1;
    clef_knobs_default(&kf);
    clef_err err;
    clef_ops *od = clef_cpu_ops_create(1, &kd, &err), *of = clef_cpu_ops_create(1, &kf, &err);
    CHECK(od && of);
    if (od && of) {
        size_t exact_d = 0, exact_f = 0;
        float *yf = malloc(sizeof(float) * T * N);
        if (!yf) { CHECK(0); goto out; }
        od->linear(od, y, x, T, &wt, 0, N, NULL);
        of->linear(of, yf, x, T, &wt, 0, N, NULL);
        for (size_t t = 0; t < T; t++)
            for (size_t n = 0; n < N; n++) {
                double sd = 0;
                for (size_t k = 0; k < K; k++) {
                    uint32_t u = (uint32_t)w[n * K + k] << 16;
                    float wf;
                    memcpy(&wf, &u, sizeof wf);
                    sd += (double)x[t * K + k] * (double)wf;
                }
                exact_d += y[t * N + n] == (float)sd;
                exact_f += yf[t * N + n] == (float)sd;
            }
        CHECK_MSG(exact_d == (size_t)T * N, "linear_double knob: %zu of %d outputs are the double sum", exact_d, T * N);
        /* the fp32 GEMM (the default knobs) rounds on the way: not every output is the double sum */
        CHECK_MSG(exact_f < (size_t)T * N, "default knobs: all %zu outputs equal the double sum", exact_f);
        printf("linear: double knob %zu/%d outputs = double sum, default knobs %zu/%d\n", exact_d, T * N, exact_f, T * N);
        free(yf);
    }
out:
    if (od) od->destroy(od);
    if (of) of->destroy(of);
    free(x);
    free(y);
    free(w);
}

int main(void) {
    test_parse();
    test_backend();
    return TEST_END();
}
