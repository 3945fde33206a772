/* Times the token mixers of the CPU backend at the real shapes of clef-flash (Qwen3.5-9B):
 *   delta_rule: Hk 16, Hv 32, dk = dv = 128, chunk 64        (one Gated DeltaNet layer)
 *   attention:  16 query heads, 4 kv heads, head_dim 256, causal (one full-attention layer)
 *   --vision:   the vision tower's attention instead (16 heads, no GQA, head_dim 72, non-causal, one
 *               image of T patches: 1,200 at 640 x 480, 8,160 at 1920 x 1080; one block of 27)
 * for the fast kernels (clef_cpu_delta_rule / clef_cpu_attention; "fp32": clef_cpu_attention_f32, the
 * default path's attention on AVX-512, its max|d|/max against the double kernel) and, with --ref, the previous
 * scalar implementations (tests/unit/ref_mixers.c), with 1 and 2 threads. Prints wall time (median of the
 * repeats), process CPU time (min of the repeats), GFLOP/s on the wall time and per CPU-second
 * (times threads: what the cores would give unshared), and max |fast - ref| / max |ref| when both
 * ran (the ref runs once).
 *
 *   bench/build.sh (or: cc -std=c11 -D_GNU_SOURCE -O2 -march=x86-64-v2 -Isrc bench/bench_mixers.c
 *   build/libclef.a -o build-bench/bench_mixers -lm -pthread)
 *   build-bench/bench_mixers [--T 512,2048,8192] [--threads 1,2] [--reps 3] [--ref] [--ref-max-T 2048]
 *   build-bench/bench_mixers --vision --T 1200,8160 --threads 1,2 [--ref --ref-max-T 1200]
 *
 * FLOPs (2 per multiply-add, the triangles counted as triangles):
 *   delta_rule per chunk of n rows and head: n(n+1)dk [M, Intra] + n(n-1)/2 (dv+dk) [solve]
 *     + 3 n dk dv [W·R, Qd·R, Kdᵀ·Vn] + n(n+1)/2 dv [Intra·Vn], times 2.
 *   attention: 4 nh hd T(T+1)/2 (q·k and p·v over the causal triangle); --vision: 4 nh hd T^2.
 *
 * --gemm also times the linear op's GEMM (the CPU backend's kernel: CLEF_GEMM or the fastest, T x 4096 x 4096, bf16 weights) in the same
 * run and prints, per T and thread count, the mixers' estimated share of a whole prefill:
 *   mixers = 24 delta_rule + 8 attention (one layer each as measured),
 *   linear = 13.84 GFLOP per token (model.md §3.4) at the GEMM's measured rate,
 *   share  = mixers / (mixers + linear)   (norms, conv, gates and the head are left out).
 * Times for the share are CPU seconds / threads (what the cores would give unshared).
 *
 * --fp32-kernel: the experiment behind the choice of double accumulation (docs/rejected-experiments.md).
 * The product attention spends most of its time in, S = Q Kᵀ for one tile (64 query rows x 256 x 64
 * keys, operands packed as the library packs them), with the library's kernel (fp32 values in double,
 * double FMA, 6 x 32 tile) against the same loop nest in fp32 (fp32 FMA, 6 x 64 tile, AVX-512), on one
 * thread: GFLOP per CPU-second and the error of the fp32 scores against the double ones, relative to
 * sum |q_i k_i| (what bounds the error of a dot product). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/threads.h"
#include "compute/cpu/cpu_mixers.h"
#include "compute/cpu/cpu_simd.h"
#include "base/knobs.h"
#include "compute/cpu/gemm.h"
#include "ref_mixers.h" /* tests/unit/: the scalar references, shared with test_cpu_mixers */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng = 0x2545f4914f6cdd1dull;
static float urandf(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0);
}

static float *rnd(size_t n, float lo, float hi) {
    float *p = malloc(n * sizeof(float));
    if (!p) { fprintf(stderr, "out of memory\n"); exit(2); }
    for (size_t i = 0; i < n; i++) p[i] = lo + (hi - lo) * urandf();
    return p;
}
static void l2rows(float *x, size_t rows, size_t d, float scale) {
    for (size_t r = 0; r < rows; r++) {
        double s = 0;
        for (size_t i = 0; i < d; i++) s += (double)x[r * d + i] * x[r * d + i];
        float inv = (float)(1.0 / sqrt(s + 1e-6));
        for (size_t i = 0; i < d; i++) x[r * d + i] = x[r * d + i] * inv * scale;
    }
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* ---- the fp32 kernel experiment (--fp32-kernel) ---- */
typedef float vf16 __attribute__((vector_size(64)));
typedef float vf16u __attribute__((vector_size(64), aligned(4), may_alias));
#define FLD(p) (*(const vf16u *)(p))
#define FST(p, x) (*(vf16u *)(p) = (x))
#define F4_DECL(r) vf16 c##r##0 = z, c##r##1 = z, c##r##2 = z, c##r##3 = z;
#define F4_FMA(r) { float a = ab[r * lda + p]; c##r##0 += b0 * a; c##r##1 += b1 * a; c##r##2 += b2 * a; c##r##3 += b3 * a; }
#define F4_STORE(r) { float *cr = C + (r0 + r) * ldc; FST(cr, c##r##0); FST(cr + 16, c##r##1); FST(cr + 32, c##r##2); FST(cr + 48, c##r##3); }
#define FROWS6(X) X(0) X(1) X(2) X(3) X(4) X(5)
/* C[m x 64] = A[m x P] B[P x 64], m a multiple of 6, B row-major with 64 columns */
__attribute__((target("avx512f,avx512vl,avx512dq,avx2,fma"), optimize("fp-contract=fast")))
static void gemm_f32_6x64(float *C, size_t ldc, const float *A, size_t lda, const float *B, size_t m, size_t P) {
    const vf16 z = {0};
    for (size_t r0 = 0; r0 < m; r0 += 6) {
        const float *ab = A + r0 * lda;
        FROWS6(F4_DECL)
        const float *bp = B;
        for (size_t p = 0; p < P; p++, bp += 64) {
            vf16 b0 = FLD(bp), b1 = FLD(bp + 16), b2 = FLD(bp + 32), b3 = FLD(bp + 48);
            FROWS6(F4_FMA)
        }
        FROWS6(F4_STORE)
    }
}

static int fp32_kernel_experiment(int reps) {
    const size_t m = 66, P = 256, N = 64; /* 66 = 64 query rows rounded to the 6-row tile */
    float *Af = rnd(m * P, -2, 2), *Bf = rnd(P * N, -1, 1), *Cf = malloc(m * N * sizeof(float));
    double *Ad = malloc(m * P * sizeof(double)), *Bd = malloc(P * N * sizeof(double)), *Cd = malloc(m * N * sizeof(double));
    for (size_t i = 0; i < m * P; i++) Ad[i] = Af[i];
    /* the library's packed layout for B: panels of 32 columns */
    for (size_t p = 0; p < P; p++)
        for (size_t c = 0; c < N; c++) Bd[(c / 32) * P * 32 + p * 32 + c % 32] = Bf[p * N + c];
    const int inner = 2000;
    double best_d = 1e300, best_f = 1e300;
    for (int rep = 0; rep < reps; rep++) {
        double c0 = cpu_s();
        for (int it = 0; it < inner; it++) clef_mix_gemm(Cd, N, Ad, P, Bd, 32, P * 32, m, P, N, -1, -1, 0, 0);
        double c1 = cpu_s();
        for (int it = 0; it < inner; it++) gemm_f32_6x64(Cf, N, Af, P, Bf, m, P);
        double c2 = cpu_s();
        if (c1 - c0 < best_d) best_d = c1 - c0;
        if (c2 - c1 < best_f) best_f = c2 - c1;
    }
    double fl = 2.0 * m * P * N * inner, worst = 0, sum = 0;
    for (size_t r = 0; r < m; r++)
        for (size_t c = 0; c < N; c++) {
            double mag = 0;
            for (size_t p = 0; p < P; p++) mag += fabs((double)Af[r * P + p] * Bf[p * N + c]);
            double e = fabs((double)Cf[r * N + c] - Cd[r * N + c]) / mag;
            if (e > worst) worst = e;
            sum += e;
        }
    printf("S = Q K^T tile (%zu x %zu x %zu), one thread, best of %d x %d calls:\n", m, P, N, reps, inner);
    printf("  double kernel (%s, 6 x 32 doubles): %.1f GFLOP per CPU-second\n", clef_mix_isa(), fl / best_d * 1e-9);
    printf("  fp32 kernel (avx512, 6 x 64 floats): %.1f GFLOP per CPU-second (x%.2f)\n", fl / best_f * 1e-9, best_d / best_f);
    printf("  fp32 scores vs double: max |err| / sum|q k| %.3g, mean %.3g (double: one rounding to fp32 at the end)\n",
           worst, sum / (double)(m * N));
    free(Af); free(Bf); free(Cf); free(Ad); free(Bd); free(Cd);
    return 0;
}

static double delta_flops(size_t T, size_t Hv, size_t dk, size_t dv, size_t C) {
    double f = 0;
    for (size_t t0 = 0; t0 < T; t0 += C) {
        double n = (double)(T - t0 < C ? T - t0 : C);
        f += n * (n + 1) * dk + n * (n - 1) / 2 * (double)(dv + dk) + 2 * n * dk * dv +
             (t0 + C < T ? n * dk * dv : 0) + n * (n + 1) / 2 * dv;
    }
    return 2 * f * (double)Hv;
}

typedef struct { double wall, cpu; } timing;

static double maxdiff(const float *a, const float *b, size_t n, double *maxref) {
    double m = 0, r = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= m)) m = d;
        if (fabs(b[i]) > r) r = fabs(b[i]);
    }
    *maxref = r;
    return m;
}

int main(int argc, char **argv) {
    size_t Ts[8] = {512, 2048, 8192}, nT = 3;
    int ths[8] = {1, 2}, nth = 2, reps = 3, ref = 0, only = -1, gemm = 0, vision = 0;
    size_t ref_max_T = 2048;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--T") && i + 1 < argc) {
            nT = 0;
            for (char *s = strtok(argv[++i], ","); s && nT < 8; s = strtok(NULL, ",")) Ts[nT++] = (size_t)atol(s);
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            nth = 0;
            for (char *s = strtok(argv[++i], ","); s && nth < 8; s = strtok(NULL, ",")) ths[nth++] = atoi(s);
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--op") && i + 1 < argc) {
            i++;
            only = !strcmp(argv[i], "delta") ? 0 : !strcmp(argv[i], "attn") ? 1 : -1;
        } else if (!strcmp(argv[i], "--fp32-kernel")) {
            return fp32_kernel_experiment(reps);
        } else if (!strcmp(argv[i], "--gemm")) {
            gemm = 1;
        } else if (!strcmp(argv[i], "--vision")) {
            vision = 1;
            only = 1;
        } else if (!strcmp(argv[i], "--ref")) {
            ref = 1;
        } else if (!strcmp(argv[i], "--ref-max-T") && i + 1 < argc) {
            ref_max_T = (size_t)atol(argv[++i]);
        } else {
            fprintf(stderr, "usage: %s [--T a,b] [--threads a,b] [--reps n] [--op delta|attn] [--ref] [--ref-max-T n] [--gemm] [--vision] [--fp32-kernel]\n", argv[0]);
            return 2;
        }
    }
    if (reps < 1) reps = 1;
    const size_t Hk = 16, Hv = 32, dk = 128, dv = 128, C = 64;
    const size_t nh = 16, nkv = vision ? 16 : 4, hd = vision ? 72 : 256;
    const int causal = !vision;
    const float scale = vision ? (float)(1.0 / sqrt(72.0)) : 0.0625f;
    printf("kernel isa: %s\n", clef_mix_isa());
    printf("%-10s %6s %3s %-5s %10s %10s %8s %12s\n", "op", "T", "thr", "impl", "wall_ms", "cpu_ms", "GFLOP/s", "max|d|/max");
    for (size_t ti = 0; ti < nT; ti++) {
        size_t T = Ts[ti];
        float *q = rnd(T * Hk * dk, -1, 1), *k = rnd(T * Hk * dk, -1, 1), *v = rnd(T * Hv * dv, -1, 1);
        float *beta = rnd(T * Hv, 0, 1), *g = rnd(T * Hv, -0.1f, 0);
        l2rows(q, T * Hk, dk, (float)pow(128.0, -0.5));
        l2rows(k, T * Hk, dk, 1.0f);
        float *o = malloc(T * Hv * dv * sizeof(float)), *oref = malloc(T * Hv * dv * sizeof(float));
        float *aq = rnd(T * nh * hd, -2, 2), *ak = rnd(T * nkv * hd, -2, 2), *av = rnd(T * nkv * hd, -1, 1);
        float *ao = malloc(T * nh * hd * sizeof(float)), *aoref = malloc(T * nh * hd * sizeof(float));
        float *ao32 = malloc(T * nh * hd * sizeof(float));
        if (!o || !oref || !ao || !aoref || !ao32) { fprintf(stderr, "out of memory\n"); return 2; }
        double fl_d = delta_flops(T, Hv, dk, dv, C), fl_a = 4.0 * nh * hd * (double)T * (double)(causal ? (T + 1) / 2.0 : T);
        double fast_cpu[2][8] = {{0}};
        for (int op = 0; op < 2; op++) {
            if (only >= 0 && op != only) continue;
            for (int impl = 0; impl < 3; impl++) { /* fast (double), ref, fp32 (attention, AVX-512) */
                if (impl == 1 && (!ref || T > ref_max_T)) continue;
                if (impl == 2 && (op == 0 || !clef_simd_ok())) continue;
                for (int tj = 0; tj < nth; tj++) {
                    clef_err err;
                    clef_pool *pool = clef_pool_create(ths[tj], &err);
                    if (!pool) { fprintf(stderr, "no pool\n"); return 2; }
                    double walls[64];
                    double cpu_min = 1e300;
                    int nr = impl == 1 ? 1 : (reps > 64 ? 64 : reps);
                    for (int rep = 0; rep < nr; rep++) {
                        double w0 = now_s(), c0 = cpu_s();
                        int rc;
                        if (op == 0)
                            rc = impl ? ref_cpu_delta_rule(pool, oref, q, k, v, beta, g, T, Hk, Hv, dk, dv, C)
                                      : clef_cpu_delta_rule(pool, o, q, k, v, beta, g, T, Hk, Hv, dk, dv, C);
                        else
                            rc = (impl == 1 ? ref_cpu_attention : impl == 2 ? clef_cpu_attention_f32
                                                                                 : clef_cpu_attention)(
                                pool, impl == 1 ? aoref : impl == 2 ? ao32 : ao, nh * hd, aq, nh * hd, ak, nkv * hd, av,
                                nkv * hd, T, T, nh, nkv, hd, scale, causal);
                        walls[rep] = now_s() - w0;
                        if (cpu_s() - c0 < cpu_min) cpu_min = cpu_s() - c0;
                        if (rc) { fprintf(stderr, "out of memory in the op\n"); return 2; }
                    }
                    qsort(walls, (size_t)nr, sizeof walls[0], cmp_d);
                    if (impl == 0) fast_cpu[op][tj] = cpu_min / ths[tj];
                    double wm = walls[nr / 2], fl = op == 0 ? fl_d : fl_a;
                    char diff[32] = "-";
                    if (impl == 1) {
                        double mr, md = op == 0 ? maxdiff(o, oref, T * Hv * dv, &mr) : maxdiff(ao, aoref, T * nh * hd, &mr);
                        snprintf(diff, sizeof diff, "%.2e", md / (mr > 0 ? mr : 1));
                    } else if (impl == 2) { /* against the double kernel's output */
                        double mr, md = maxdiff(ao32, ao, T * nh * hd, &mr);
                        snprintf(diff, sizeof diff, "%.2e", md / (mr > 0 ? mr : 1));
                    }
                    const char *label = impl == 1 ? "ref" : impl == 2 ? "fp32" : "fast";
                    printf("%-10s %6zu %3d %-5s %10.1f %10.1f %8.2f %12s\n", op == 0 ? "delta_rule" : vision ? "vision_att" : "attention", T,
                           ths[tj], label, wm * 1e3, cpu_min * 1e3, fl / wm * 1e-9, diff);
                    printf("%-10s %6zu %3d %-5s %10s %10s %8.2f  (GFLOP per CPU-second x threads, min cpu)\n", "", T, ths[tj],
                           label, "", "", fl / (cpu_min / ths[tj]) * 1e-9);
                    fflush(stdout);
                    clef_pool_destroy(pool);
                }
            }
        }
        printf("# T=%zu: delta_rule %.3f GFLOP, attention %.3f GFLOP per layer\n", T, fl_d * 1e-9, fl_a * 1e-9);
        if (gemm && only < 0) {
            const size_t K = 4096, N = 4096;
            float *x = rnd(T * K, -1, 1), *y = malloc(T * N * sizeof(float));
            uint16_t *W = malloc(N * K * sizeof(uint16_t));
            if (!y || !W) { fprintf(stderr, "out of memory\n"); return 2; }
            for (size_t i = 0; i < N * K; i++) {
                float f = (urandf() - 0.5f) * 0.05f;
                uint32_t u;
                memcpy(&u, &f, 4);
                W[i] = (uint16_t)(u >> 16);
            }
            for (int tj = 0; tj < nth; tj++) {
                clef_err err;
                clef_pool *pool = clef_pool_create(ths[tj], &err);
                double cmin = 1e300;
                for (int rep = 0; rep < reps; rep++) {
                    double c0 = cpu_s();
                    if (clef_gemm_bf16_with(clef_gemm_named(clef_knobs_env()->gemm), pool, y, N, x, K, T, K, W, K, N, NULL)) { fprintf(stderr, "gemm failed\n"); return 2; }
                    if (cpu_s() - c0 < cmin) cmin = cpu_s() - c0;
                }
                clef_pool_destroy(pool);
                double rate = 2.0 * (double)T * K * N / (cmin / ths[tj]); /* flop per second, cores unshared */
                double lin = 13.84e9 * (double)T / rate, mix = 24 * fast_cpu[0][tj] + 8 * fast_cpu[1][tj];
                printf("# T=%zu threads=%d: gemm (%s) %.1f GFLOP/s -> linear %.1f s, mixers %.2f s (24 x %.3f + 8 x %.3f), share %.1f%%\n",
                       T, ths[tj], clef_gemm_name(clef_gemm_named(clef_knobs_env()->gemm)), rate * 1e-9, lin, mix, fast_cpu[0][tj],
                       fast_cpu[1][tj], 100 * mix / (mix + lin));
            }
            free(x); free(y); free(W);
        }
        free(q); free(k); free(v); free(beta); free(g); free(o); free(oref);
        free(aq); free(ak); free(av); free(ao); free(aoref); free(ao32);
    }
    return 0;
}
