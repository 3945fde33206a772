/* Per-instruction peak throughput (register-only): vfmadd231ps zmm / ymm, vdpbf16ps zmm,
 * vpdpbusd zmm, AMX tdpbf16ps, on 1 thread and on N threads (default: the online CPUs), median
 * of R runs.
 *   bench/build.sh && build-bench/bench_peak [threads] [reps] */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/cpu_features.h"
#include "peak.h"

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
                             CLEF_CPU_AVX512BF16, CLEF_CPU_AVX512VNNI,
                             CLEF_CPU_AMX_TILE | CLEF_CPU_AMX_BF16};
    for (int k = 0; k < PEAK_N; k++) {
        if (!clef_cpu_has(need[k])) {
            printf("%-18s   skipped: not supported\n", peak_names[k]);
            continue;
        }
        const char *why;
        if (k == PEAK_AMX_BF16 && !clef_gemm_available(CLEF_GEMM_AMX, &why)) {
            printf("%-18s   skipped: %s\n", peak_names[k], why);
            continue;
        }
        double c1, cn;
        double one = peak_median((peak_kind)k, 1, reps, 0.3, &c1);
        double all = peak_median((peak_kind)k, nth, reps, 0.3, &cn);
        printf("%-18s %10.1f %10.1f %10.1f %10.1f\n", peak_names[k], one, c1, all, cn);
    }
    return 0;
}
