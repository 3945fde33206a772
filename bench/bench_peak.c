/* Per-instruction peak throughput (register-only): vfmadd231ps zmm / ymm, vdpbf16ps zmm,
 * vpdpbusd zmm, AMX tdpbf16ps, on 1 thread and on N threads (default: the online CPUs), median
 * of R runs.
 *   bench/build.sh && build-bench/bench_peak [threads] [reps] */
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/cpu_features.h"
#include "peak.h"

/* ---- AMX TDPBF16PS (tile dot product of bf16 pairs into fp32): only where cpu_features reports
 * amx_bf16 (cpuid and the OS's XCR0) and Linux grants the tile state (arch_prctl). 4 independent
 * 16 x 16 fp32 accumulator tiles from two A and two B tiles; 16 x 16 x 32 multiply-adds each. */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_cfg;

__attribute__((target("amx-tile,amx-bf16"), noinline)) static void amx_loop(long iters) {
    static const uint16_t one[16 * 32] = {0};
    amx_cfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int i = 0; i < 8; i++) { c.colsb[i] = 64; c.rows[i] = 16; }
    __asm__ volatile("" : : "r"(&c) : "memory"); /* gcc 12 drops the stores otherwise */
    _tile_loadconfig(&c);
    _tile_loadd(4, one, 64);
    _tile_loadd(5, one, 64);
    _tile_loadd(6, one, 64);
    _tile_loadd(7, one, 64);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (long i = 0; i < iters; i++) {
        _tile_dpbf16ps(0, 4, 5);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 6, 5);
        _tile_dpbf16ps(3, 6, 7);
    }
    _tile_release();
}

static void *amx_thread(void *p) {
    amx_loop(*(long *)p);
    return NULL;
}

/* GFLOP/s (wall) of n threads; *cpu_rate per CPU-second x threads */
static double amx_once(int n, long iters, double *cpu_rate) {
    pthread_t t[64];
    if (n > 64) n = 64;
    double t0 = now_s(), c0 = cpu_s();
    for (int i = 1; i < n; i++) pthread_create(&t[i], NULL, amx_thread, &iters);
    amx_loop(iters);
    for (int i = 1; i < n; i++) pthread_join(t[i], NULL);
    double dt = now_s() - t0, dc = cpu_s() - c0;
    double g = (double)n * (double)iters * 4 * 16 * 16 * 32 * 2 * 1e-9;
    *cpu_rate = g / (dc / n);
    return g / dt;
}

static void amx_report(int nth, int reps) {
    if (!clef_cpu_has(CLEF_CPU_AMX_TILE | CLEF_CPU_AMX_BF16)) {
        printf("%-18s   skipped: not supported\n", "tdpbf16ps (AMX)");
        return;
    }
    if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) != 0) {
        printf("%-18s   skipped: the kernel refused the AMX tile state\n", "tdpbf16ps (AMX)");
        return;
    }
    double w[2], c[2];
    for (int k = 0; k < 2; k++) {
        int n = k ? nth : 1;
        double v[64], cv[64];
        for (int r = 0; r < reps && r < 64; r++) v[r] = amx_once(n, 2000000, &cv[r]);
        qsort(v, (size_t)reps, sizeof v[0], dcmp);
        qsort(cv, (size_t)reps, sizeof cv[0], dcmp);
        w[k] = v[reps / 2];
        c[k] = cv[reps / 2];
    }
    printf("%-18s %10.1f %10.1f %10.1f %10.1f\n", "tdpbf16ps (AMX)", w[0], c[0], w[1], c[1]);
}

int main(int argc, char **argv) {
    int nth = argc > 1 ? atoi(argv[1]) : (int)sysconf(_SC_NPROCESSORS_ONLN);
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    if (nth < 1) nth = 1;
    if (reps < 1) reps = 1;
    char feat[256];
    printf("cpu features: %s\nthreads: 1 and %d\n", clef_cpu_feature_string(feat, sizeof feat), nth);
    printf("GFLOP/s (GOP/s for vpdpbusd), median of %d; wall = what the run got, cpu = per CPU-second"
           " x threads\n", reps);
    printf("%-18s %10s %10s %10s %10s\n", "instruction", "1t wall", "1t cpu", "Nt wall", "Nt cpu");
    unsigned need[PEAK_N] = {CLEF_CPU_AVX512F | CLEF_CPU_FMA, CLEF_CPU_AVX2 | CLEF_CPU_FMA,
                             CLEF_CPU_AVX512BF16, CLEF_CPU_AVX512VNNI};
    for (int k = 0; k < PEAK_N; k++) {
        if (!clef_cpu_has(need[k])) {
            printf("%-18s   skipped: not supported\n", peak_names[k]);
            continue;
        }
        double c1, cn;
        double one = peak_median((peak_kind)k, 1, reps, 0.3, &c1);
        double all = peak_median((peak_kind)k, nth, reps, 0.3, &cn);
        printf("%-18s %10.1f %10.1f %10.1f %10.1f\n", peak_names[k], one, c1, all, cn);
    }
    amx_report(nth, reps);
    return 0;
}
