/* Register-only throughput loops for the instructions the GEMM kernels use, shared by
 * bench_peak.c and bench_gemm.c (which reports each kernel against the peak of its instruction,
 * measured in the same run). Each loop keeps 12 independent accumulators (enough to cover the
 * FMA latency on two ports) and touches no memory. */
#ifndef CLEF_BENCH_PEAK_H
#define CLEF_BENCH_PEAK_H

#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "compute/cpu/gemm.h"

typedef enum { PEAK_FMA_ZMM, PEAK_FMA_YMM, PEAK_DPBF16_ZMM, PEAK_DPBUSD_ZMM, PEAK_AMX_BF16, PEAK_N } peak_kind;

static const char *const peak_names[PEAK_N] = {"vfmadd231ps zmm", "vfmadd231ps ymm",
                                                 "vdpbf16ps zmm", "vpdpbusd zmm", "tdpbf16ps (AMX)"};
/* flops (or int ops) per loop iteration: 12 instructions x lanes x multiply-adds per lane x 2;
 * AMX: 4 tdpbf16ps of 16 x 16 x 32 multiply-adds */
#define PEAK_ACC 12
static const double peak_iter_ops[PEAK_N] = {PEAK_ACC * 16 * 2, PEAK_ACC * 8 * 2, PEAK_ACC * 16 * 2 * 2,
                                             PEAK_ACC * 16 * 4 * 2, 4.0 * 16 * 16 * 32 * 2};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Process CPU time (all threads). On a shared machine wall time measures our share of the cores;
 * flop / (CPU seconds / threads) estimates the rate with the cores to ourselves (time slicing
 * still costs some cache refills, so it stays an estimate). */
static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Inline assembly, so the loop is exactly 12 independent accumulators (zmm0-11, or their ymm
 * halves) fed from two registers that hold zeros: no memory operands, nothing to optimize. */
__attribute__((target("avx512f,fma"), noinline)) static void peak_fma_zmm(long iters) {
    if (iters < 1) return;
    __asm__ volatile(
        "vpxord %%zmm12, %%zmm12, %%zmm12\n"
        "vpxord %%zmm13, %%zmm13, %%zmm13\n"
        "1:\n"
        "vfmadd231ps %%zmm13, %%zmm12, %%zmm0\n"
        "vfmadd231ps %%zmm13, %%zmm12, %%zmm1\n"
        "vfmadd231ps %%zmm13, %%zmm12, %%zmm2\n"
        "vfmadd231ps %%zmm13, %%zmm12, %%zmm3\n"
        "vfmadd231ps %%zmm13, %%zmm12, %%zmm4\n"
        "vfmadd231ps %%zmm13, %%zmm12, %%zmm5\n"
        "vfmadd231ps %%zmm13, %%zmm12, %%zmm6\n"
        "vfmadd231ps %%zmm13, %%zmm12, %%zmm7\n"
        "vfmadd231ps %%zmm13, %%zmm12, %%zmm8\n"
        "vfmadd231ps %%zmm13, %%zmm12, %%zmm9\n"
        "vfmadd231ps %%zmm13, %%zmm12, %%zmm10\n"
        "vfmadd231ps %%zmm13, %%zmm12, %%zmm11\n"
        "dec %0\n"
        "jnz 1b\n"
        : "+r"(iters)
        :
        : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "cc");
}
/* AVX2 + FMA only (no zmm): it runs on CPUs without AVX-512 */
__attribute__((target("avx2,fma"), noinline)) static void peak_fma_ymm(long iters) {
    if (iters < 1) return;
    __asm__ volatile(
        "vxorps %%ymm12, %%ymm12, %%ymm12\n"
        "vxorps %%ymm13, %%ymm13, %%ymm13\n"
        "1:\n"
        "vfmadd231ps %%ymm13, %%ymm12, %%ymm0\n"
        "vfmadd231ps %%ymm13, %%ymm12, %%ymm1\n"
        "vfmadd231ps %%ymm13, %%ymm12, %%ymm2\n"
        "vfmadd231ps %%ymm13, %%ymm12, %%ymm3\n"
        "vfmadd231ps %%ymm13, %%ymm12, %%ymm4\n"
        "vfmadd231ps %%ymm13, %%ymm12, %%ymm5\n"
        "vfmadd231ps %%ymm13, %%ymm12, %%ymm6\n"
        "vfmadd231ps %%ymm13, %%ymm12, %%ymm7\n"
        "vfmadd231ps %%ymm13, %%ymm12, %%ymm8\n"
        "vfmadd231ps %%ymm13, %%ymm12, %%ymm9\n"
        "vfmadd231ps %%ymm13, %%ymm12, %%ymm10\n"
        "vfmadd231ps %%ymm13, %%ymm12, %%ymm11\n"
        "dec %0\n"
        "jnz 1b\n"
        : "+r"(iters)
        :
        : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "cc");
}
__attribute__((target("avx512f,avx512bf16"), noinline)) static void peak_dpbf16(long iters) {
    if (iters < 1) return;
    __asm__ volatile(
        "vpxord %%zmm12, %%zmm12, %%zmm12\n"
        "vpxord %%zmm13, %%zmm13, %%zmm13\n"
        "1:\n"
        "vdpbf16ps %%zmm13, %%zmm12, %%zmm0\n"
        "vdpbf16ps %%zmm13, %%zmm12, %%zmm1\n"
        "vdpbf16ps %%zmm13, %%zmm12, %%zmm2\n"
        "vdpbf16ps %%zmm13, %%zmm12, %%zmm3\n"
        "vdpbf16ps %%zmm13, %%zmm12, %%zmm4\n"
        "vdpbf16ps %%zmm13, %%zmm12, %%zmm5\n"
        "vdpbf16ps %%zmm13, %%zmm12, %%zmm6\n"
        "vdpbf16ps %%zmm13, %%zmm12, %%zmm7\n"
        "vdpbf16ps %%zmm13, %%zmm12, %%zmm8\n"
        "vdpbf16ps %%zmm13, %%zmm12, %%zmm9\n"
        "vdpbf16ps %%zmm13, %%zmm12, %%zmm10\n"
        "vdpbf16ps %%zmm13, %%zmm12, %%zmm11\n"
        "dec %0\n"
        "jnz 1b\n"
        : "+r"(iters)
        :
        : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "cc");
}
__attribute__((target("avx512f,avx512vnni"), noinline)) static void peak_dpbusd(long iters) {
    if (iters < 1) return;
    __asm__ volatile(
        "vpxord %%zmm12, %%zmm12, %%zmm12\n"
        "vpxord %%zmm13, %%zmm13, %%zmm13\n"
        "1:\n"
        "vpdpbusd %%zmm13, %%zmm12, %%zmm0\n"
        "vpdpbusd %%zmm13, %%zmm12, %%zmm1\n"
        "vpdpbusd %%zmm13, %%zmm12, %%zmm2\n"
        "vpdpbusd %%zmm13, %%zmm12, %%zmm3\n"
        "vpdpbusd %%zmm13, %%zmm12, %%zmm4\n"
        "vpdpbusd %%zmm13, %%zmm12, %%zmm5\n"
        "vpdpbusd %%zmm13, %%zmm12, %%zmm6\n"
        "vpdpbusd %%zmm13, %%zmm12, %%zmm7\n"
        "vpdpbusd %%zmm13, %%zmm12, %%zmm8\n"
        "vpdpbusd %%zmm13, %%zmm12, %%zmm9\n"
        "vpdpbusd %%zmm13, %%zmm12, %%zmm10\n"
        "vpdpbusd %%zmm13, %%zmm12, %%zmm11\n"
        "dec %0\n"
        "jnz 1b\n"
        : "+r"(iters)
        :
        : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "cc");
}

/* AMX TDPBF16PS: 4 independent 16 x 16 fp32 accumulator tiles from two A and two B tiles, in the
 * library's tile configuration. Only where clef_gemm_available(CLEF_GEMM_AMX), which also asks
 * Linux for the tile state. The operands are random bf16 values (random sign and mantissa, |v| in
 * [1, 2)) rather than zeros; held fixed, they run at the zero tiles' rate (~3,400 GFLOP/s on one
 * core here, 2026-11-30). A throwaway harness that loads fresh random tiles from L1 for every
 * product, in the AMX GEMM's pattern (8 loads per 12 products), ran at ~2,600, and at ~3,400 with
 * zero tiles: the unit's rate depends on how much the operand bits change, so this peak is the
 * instruction's ceiling, not what a GEMM on real data can reach (docs/performance.md). */
__attribute__((target("amx-tile,amx-bf16"), noinline)) static void peak_amx(long iters) {
    static uint16_t ops[4][16 * 32];
    uint32_t r = 0x2545f491u;
    for (size_t t = 0; t < 4; t++)
        for (size_t i = 0; i < 16 * 32; i++) {
            r = r * 1664525u + 1013904223u;
            ops[t][i] = (uint16_t)(0x3f80u | ((r >> 9) & 0x7fu) | ((r >> 16) & 0x8000u));
        }
    clef_gemm_amx_tile_config();
    _tile_loadd(4, ops[0], 64);
    _tile_loadd(5, ops[1], 64);
    _tile_loadd(6, ops[2], 64);
    _tile_loadd(7, ops[3], 64);
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

typedef struct { peak_kind k; long iters; } peak_arg;

static void *peak_thread(void *p) {
    peak_arg *a = p;
    switch (a->k) {
    case PEAK_FMA_ZMM: peak_fma_zmm(a->iters); break;
    case PEAK_FMA_YMM: peak_fma_ymm(a->iters); break;
    case PEAK_DPBF16_ZMM: peak_dpbf16(a->iters); break;
    case PEAK_AMX_BF16: peak_amx(a->iters); break;
    default: peak_dpbusd(a->iters); break;
    }
    return NULL;
}

/* GFLOP/s (GOP/s) of `nthreads` threads each running `iters` loop iterations; *cpu_rate gets
 * the CPU-time rate (see cpu_s). */
static double peak_once(peak_kind k, int nthreads, long iters, double *cpu_rate) {
    pthread_t t[64];
    peak_arg a = {k, iters};
    if (nthreads > 64) nthreads = 64;
    double t0 = now_s(), c0 = cpu_s();
    for (int i = 1; i < nthreads; i++) pthread_create(&t[i], NULL, peak_thread, &a);
    peak_thread(&a);
    for (int i = 1; i < nthreads; i++) pthread_join(t[i], NULL);
    double dt = now_s() - t0, dc = cpu_s() - c0;
    double ops = (double)nthreads * (double)iters * peak_iter_ops[k] * 1e-9;
    if (cpu_rate) *cpu_rate = ops / (dc / nthreads);
    return ops / dt;
}

static int dcmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* median over `reps` runs of about `seconds` each (iterations sized from a short probe); *cpu_med
 * gets the median CPU-time rate */
static double peak_median(peak_kind k, int nthreads, int reps, double seconds, double *cpu_med) {
    double probe;
    peak_once(k, 1, 1000000, &probe); /* GOP/s of one thread */
    double per_iter = peak_iter_ops[k] * 1e-9 / probe;
    long iters = (long)(seconds / per_iter);
    if (iters < 1000) iters = 1000;
    double v[64], c[64];
    if (reps > 64) reps = 64;
    for (int r = 0; r < reps; r++) v[r] = peak_once(k, nthreads, iters, &c[r]);
    qsort(v, (size_t)reps, sizeof v[0], dcmp);
    qsort(c, (size_t)reps, sizeof c[0], dcmp);
    if (cpu_med) *cpu_med = c[reps / 2];
    return v[reps / 2];
}

#endif
