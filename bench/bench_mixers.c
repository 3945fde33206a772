/* Times the token mixers of the CPU backend at the real shapes of clef-flash (Qwen3.5-9B):
 *   delta_rule: Hk 16, Hv 32, dk = dv = 128, chunk 64        (one Gated DeltaNet layer)
 *   attention:  16 query heads, 4 kv heads, head_dim 256, causal (one full-attention layer)
 * for the fast kernels (clef_cpu_delta_rule / clef_cpu_attention) and, with --ref, the previous
 * scalar implementations (clef_cpu_*_ref), with 1 and 2 threads. Prints wall time (median of the
 * repeats), process CPU time (min of the repeats), GFLOP/s on the wall time and per CPU-second
 * (times threads: what the cores would give unshared), and max |fast - ref| / max |ref| when both
 * ran (the ref runs once).
 *
 *   bench/build.sh (or: cc -std=c11 -D_GNU_SOURCE -O2 -march=x86-64-v2 -Isrc bench/bench_mixers.c
 *   build/libclef.a -o build-bench/bench_mixers -lm -pthread)
 *   build-bench/bench_mixers [--T 512,2048,8192] [--threads 1,2] [--reps 3] [--ref] [--ref-max-T 2048]
 *
 * FLOPs (2 per multiply-add, the triangles counted as triangles):
 *   delta_rule per chunk of n rows and head: n(n+1)dk [M, Intra] + n(n-1)/2 (dv+dk) [solve]
 *     + 3 n dk dv [W·R, Qd·R, Kdᵀ·Vn] + n(n+1)/2 dv [Intra·Vn], times 2.
 *   attention: 4 nh hd T(T+1)/2 (q·k and p·v over the causal triangle). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/threads.h"
#include "compute/cpu/cpu_mixers.h"

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
    int ths[8] = {1, 2}, nth = 2, reps = 3, ref = 0, only = -1;
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
        } else if (!strcmp(argv[i], "--ref")) {
            ref = 1;
        } else if (!strcmp(argv[i], "--ref-max-T") && i + 1 < argc) {
            ref_max_T = (size_t)atol(argv[++i]);
        } else {
            fprintf(stderr, "usage: %s [--T a,b] [--threads a,b] [--reps n] [--op delta|attn] [--ref] [--ref-max-T n]\n", argv[0]);
            return 2;
        }
    }
    if (reps < 1) reps = 1;
    const size_t Hk = 16, Hv = 32, dk = 128, dv = 128, C = 64;
    const size_t nh = 16, nkv = 4, hd = 256;
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
        if (!o || !oref || !ao || !aoref) { fprintf(stderr, "out of memory\n"); return 2; }
        double fl_d = delta_flops(T, Hv, dk, dv, C), fl_a = 4.0 * nh * hd * (double)T * (double)(T + 1) / 2;
        for (int op = 0; op < 2; op++) {
            if (only >= 0 && op != only) continue;
            for (int impl = 0; impl < 2; impl++) {
                if (impl == 1 && (!ref || T > ref_max_T)) continue;
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
                            rc = impl ? clef_cpu_delta_rule_ref(pool, oref, q, k, v, beta, g, T, Hk, Hv, dk, dv, C)
                                      : clef_cpu_delta_rule(pool, o, q, k, v, beta, g, T, Hk, Hv, dk, dv, C);
                        else
                            rc = impl ? clef_cpu_attention_ref(pool, aoref, nh * hd, aq, nh * hd, ak, nkv * hd, av,
                                                               nkv * hd, T, T, nh, nkv, hd, 0.0625f, 1)
                                      : clef_cpu_attention(pool, ao, nh * hd, aq, nh * hd, ak, nkv * hd, av,
                                                           nkv * hd, T, T, nh, nkv, hd, 0.0625f, 1);
                        walls[rep] = now_s() - w0;
                        if (cpu_s() - c0 < cpu_min) cpu_min = cpu_s() - c0;
                        if (rc) { fprintf(stderr, "out of memory in the op\n"); return 2; }
                    }
                    qsort(walls, (size_t)nr, sizeof walls[0], cmp_d);
                    double wm = walls[nr / 2], fl = op == 0 ? fl_d : fl_a;
                    char diff[32] = "-";
                    if (impl == 1) {
                        double mr, md = op == 0 ? maxdiff(o, oref, T * Hv * dv, &mr) : maxdiff(ao, aoref, T * nh * hd, &mr);
                        snprintf(diff, sizeof diff, "%.2e", md / (mr > 0 ? mr : 1));
                    }
                    printf("%-10s %6zu %3d %-5s %10.1f %10.1f %8.2f %12s\n", op == 0 ? "delta_rule" : "attention", T,
                           ths[tj], impl ? "ref" : "fast", wm * 1e3, cpu_min * 1e3, fl / wm * 1e-9, diff);
                    printf("%-10s %6zu %3d %-5s %10s %10s %8.2f  (GFLOP per CPU-second x threads, min cpu)\n", "", T, ths[tj],
                           impl ? "ref" : "fast", "", "", fl / (cpu_min / ths[tj]) * 1e-9);
                    fflush(stdout);
                    clef_pool_destroy(pool);
                }
            }
        }
        printf("# T=%zu: delta_rule %.3f GFLOP, attention %.3f GFLOP per layer\n", T, fl_d * 1e-9, fl_a * 1e-9);
        free(q); free(k); free(v); free(beta); free(g); free(o); free(oref);
        free(aq); free(ak); free(av); free(ao); free(aoref);
    }
    return 0;
}
