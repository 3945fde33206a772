/* GEMM throughput at the model's shapes: each clef_gemm kernel the CPU runs, and OpenBLAS
 * cblas_sgemm on the same shape with the weights converted to fp32 once outside the timing, on 1
 * thread and on N threads (int8: the int8 precision's GEMM, gemm_int8.h, on weights quantized
 * once outside the timing, the activations' quantization inside it; its % is of the fp32 FMA peak); GFLOP/s (2*T*K*N / time, median of R runs) and the fraction of the
 * peak of the instruction each kernel uses, measured in the same run (peak.h).
 *   bench/build.sh && build-bench/bench_gemm [-r reps] [-t maxthreads] [-T tokens] [-k kernels]
 * kernels: comma list of amx,amxp,avx512,avx2,avx512bf16,int8,ref,openblas (default: all but ref); -s i runs
 * only shape i (0: 4096->12288, 1: 4096->8192, 2: 4096->4096, 3: 12288->4096). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/cpu_features.h"
#include "base/threads.h"
#include "compute/cpu/gemm.h"
#include "compute/cpu/gemm_int8.h"
#include "gemm_avx512bf16.h"
#include "peak.h"

#ifdef HAVE_OPENBLAS
#include <cblas.h>
void openblas_set_num_threads(int);
#endif

static uint64_t rng = 88172645463325252ull;
static float frand(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static int has(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)) != NULL; p += n)
        if ((p == list || p[-1] == ',') && (p[n] == 0 || p[n] == ',')) return 1;
    return 0;
}

static void report(const char *shape, const char *kname, int th, double flop, double *v, double *c,
                   int reps, double pk, double pkc, const char *instr) {
    qsort(v, (size_t)reps, sizeof v[0], dcmp);
    qsort(c, (size_t)reps, sizeof c[0], dcmp);
    double g = flop / v[reps / 2] * 1e-9, gc = flop / c[reps / 2] * 1e-9;
    printf("%-20s %-10s %3d %8.1f %8.1f %5.1f%% %8.1f %5.1f%%  %s\n", shape, kname, th,
           v[reps / 2] * 1e3, g, pk > 0 ? 100 * g / pk : 0, gc, pkc > 0 ? 100 * gc / pkc : 0, instr);
    fflush(stdout);
}

int main(int argc, char **argv) {
    int reps = 5, maxth = (int)sysconf(_SC_NPROCESSORS_ONLN);
    size_t T = 512;
    int only = -1; /* -s i: only shape i */
    const char *kl = "amx,amxp,avx512,avx2,avx512bf16,int8,openblas";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-r")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-t")) maxth = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-T")) T = (size_t)atol(argv[i + 1]);
        else if (!strcmp(argv[i], "-k")) kl = argv[i + 1];
        else if (!strcmp(argv[i], "-s")) only = atoi(argv[i + 1]);
    }
    if (reps < 1 || reps > 64) reps = 5;
    if (maxth < 1) maxth = 1;
    static const size_t shapes[][2] = {{4096, 12288}, {4096, 8192}, {4096, 4096}, {12288, 4096}};
    int ths[2] = {1, maxth};
    int nths = maxth > 1 ? 2 : 1;

    char feat[256];
    printf("cpu features: %s\n", clef_cpu_feature_string(feat, sizeof feat));
    /* peaks of the instructions used, in this run */
    double pk[2][PEAK_N] = {{0}}, pkc[2][PEAK_N] = {{0}};
    unsigned need[PEAK_N] = {CLEF_CPU_AVX512F | CLEF_CPU_FMA, CLEF_CPU_AVX2 | CLEF_CPU_FMA,
                             CLEF_CPU_AVX512BF16, CLEF_CPU_AVX512VNNI,
                             CLEF_CPU_AMX_TILE | CLEF_CPU_AMX_BF16};
    int amx_ok = clef_gemm_available(CLEF_GEMM_AMX, NULL);
    for (int ti = 0; ti < nths; ti++)
        for (int k = 0; k < PEAK_N; k++)
            if (k != PEAK_DPBUSD_ZMM && clef_cpu_has(need[k]) && (k != PEAK_AMX_BF16 || amx_ok)) {
                pk[ti][k] = peak_median((peak_kind)k, ths[ti], reps, 0.2, &pkc[ti][k]);
                printf("peak %-16s %d thread(s): %7.1f GFLOP/s wall, %7.1f cpu\n", peak_names[k],
                       ths[ti], pk[ti][k], pkc[ti][k]);
            }

    clef_pool *pools[2] = {NULL, NULL};
    clef_err err;
    for (int ti = 0; ti < nths; ti++) pools[ti] = clef_pool_create(ths[ti], &err);

    printf("\nwall: GFLOP/s of the run (median) and %% of the instruction's wall peak; cpu: flop per\n"
           "CPU-second x threads (median) and %% of the instruction's cpu peak\n");
    printf("%-20s %-10s %3s %8s %8s %6s %8s %6s  %s\n", "shape T x K -> N", "kernel", "thr",
           "ms", "wall", "%pk", "cpu", "%pk", "instruction");
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        if (only >= 0 && (size_t)only != s) continue;
        size_t K = shapes[s][0], N = shapes[s][1];
        float *x = malloc(T * K * sizeof *x), *y = malloc(T * N * sizeof *y);
        uint16_t *W = malloc(N * K * sizeof *W);
        if (!x || !y || !W) { fprintf(stderr, "out of memory\n"); return 1; }
        for (size_t i = 0; i < T * K; i++) x[i] = frand();
        for (size_t i = 0; i < N * K; i++) {
            float f = frand() * 0.05f;
            uint32_t u;
            memcpy(&u, &f, sizeof u);
            W[i] = (uint16_t)(u >> 16);
        }
        double flop = 2.0 * (double)T * (double)K * (double)N;
        char shape[64];
        snprintf(shape, sizeof shape, "%zux%zu->%zu", T, K, N);
        /* amxp: the AMX kernel on weights packed once beforehand (clef_gemm_pack, outside the
         * timing), as the model's Linear layers run it since session 4; avx512bf16: the bench's own
         * kernel (gemm_avx512bf16.c, no longer in the library) */
        struct { const char *name; clef_gemm_kernel k; peak_kind p; int packed, bf16; } ks[] = {
            {"avx512", CLEF_GEMM_AVX512, PEAK_FMA_ZMM, 0, 0},
            {"avx2", CLEF_GEMM_AVX2, PEAK_FMA_YMM, 0, 0},
            {"avx512bf16", CLEF_GEMM_AVX512, PEAK_DPBF16_ZMM, 0, 1},
            {"ref", CLEF_GEMM_REF, PEAK_FMA_YMM, 0, 0},
            {"amx", CLEF_GEMM_AMX, PEAK_AMX_BF16, 0, 0},
            {"amxp", CLEF_GEMM_AMX, PEAK_AMX_BF16, 1, 0},
        };
        for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
            if (!has(kl, ks[ki].name)) continue;
            const char *why;
            if (ks[ki].bf16 && !bench_gemm_avx512bf16_available()) {
                printf("%-22s %-11s skipped: the CPU lacks AVX512_BF16\n", shape, ks[ki].name);
                continue;
            }
            if (!clef_gemm_available(ks[ki].k, &why)) {
                printf("%-22s %-11s skipped: %s\n", shape, ks[ki].name, why);
                continue;
            }
            clef_gemm_packed *P = NULL;
            if (ks[ki].packed && !(P = clef_gemm_pack(pools[0], W, K, N, K))) {
                fprintf(stderr, "packing failed\n");
                return 1;
            }
            for (int ti = 0; ti < nths; ti++) {
                double v[64], c[64];
                for (int r = -1; r < reps; r++) { /* r = -1: warm-up */
                    double t0 = now_s(), c0 = cpu_s();
                    int rc = P ? clef_gemm_bf16_packed(pools[ti], y, N, x, K, T, P, 0, N, NULL)
                             : ks[ki].bf16 ? bench_gemm_avx512bf16(pools[ti], y, N, x, K, T, K, W, K, N, NULL)
                                           : clef_gemm_bf16_with(ks[ki].k, pools[ti], y, N, x, K, T, K, W, K, N, NULL);
                    if (r < 0) continue;
                    if (rc) {
                        fprintf(stderr, "gemm failed\n");
                        return 1;
                    }
                    v[r] = now_s() - t0;
                    c[r] = (cpu_s() - c0) / ths[ti];
                }
                /* amx executes 3 products per useful one (the 3 bf16 terms of x): its % of the
                 * instruction's peak counts the executed ones */
                double ex = ks[ki].k == CLEF_GEMM_AMX ? 3.0 : 1.0;
                report(shape, ks[ki].name, ths[ti], flop, v, c, reps, pk[ti][ks[ki].p] / ex,
                       pkc[ti][ks[ki].p] / ex, ks[ki].k == CLEF_GEMM_AMX ? "tdpbf16ps (AMX), 3 per product" : peak_names[ks[ki].p]);
                fflush(stdout);
            }
            clef_gemm_packed_free(P);
        }
        if (has(kl, "int8")) {
            clef_q8_weights *q = clef_q8_quantize_bf16(pools[nths - 1], W, K, N, K);
            if (!q) { fprintf(stderr, "out of memory\n"); return 1; }
            for (int ti = 0; ti < nths; ti++) {
                double v[64], c[64];
                for (int r = -1; r < reps; r++) {
                    double t0 = now_s(), c0 = cpu_s();
                    if (clef_gemm_q8(CLEF_Q8_AUTO, pools[ti], y, N, x, K, T, q, 0, N, NULL)) {
                        fprintf(stderr, "int8 gemm failed\n");
                        return 1;
                    }
                    if (r < 0) continue;
                    v[r] = now_s() - t0;
                    c[r] = (cpu_s() - c0) / ths[ti];
                }
                report(shape, "int8", ths[ti], flop, v, c, reps, pk[ti][PEAK_FMA_YMM], pkc[ti][PEAK_FMA_YMM],
                       "vpmaddwd ymm (% of the fp32 FMA ymm peak)");
            }
            clef_q8_weights_free(q);
        }
#ifdef HAVE_OPENBLAS
        if (has(kl, "openblas")) {
            float *Wf = malloc(N * K * sizeof *Wf);
            if (!Wf) { fprintf(stderr, "out of memory\n"); return 1; }
            for (size_t i = 0; i < N * K; i++) {
                uint32_t u = (uint32_t)W[i] << 16;
                memcpy(&Wf[i], &u, sizeof u);
            }
            for (int ti = 0; ti < nths; ti++) {
                openblas_set_num_threads(ths[ti]);
                double v[64], c[64];
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)T, (int)N, (int)K, 1.0f, x,
                            (int)K, Wf, (int)K, 0.0f, y, (int)N);
                for (int r = 0; r < reps; r++) {
                    double t0 = now_s(), c0 = cpu_s();
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)T, (int)N, (int)K, 1.0f,
                                x, (int)K, Wf, (int)K, 0.0f, y, (int)N);
                    v[r] = now_s() - t0;
                    c[r] = (cpu_s() - c0) / ths[ti];
                }
                report(shape, "openblas", ths[ti], flop, v, c, reps, pk[ti][PEAK_FMA_ZMM],
                       pkc[ti][PEAK_FMA_ZMM], "vfmadd231ps zmm (fp32 weights)");
                fflush(stdout);
            }
            free(Wf);
        }
#endif
        free(x); free(y); free(W);
    }
    for (int ti = 0; ti < nths; ti++) clef_pool_destroy(pools[ti]);
    return 0;
}
