/* The ceiling of the AMX GEMM's micro-kernel on this CPU: its exact loop (clef_amx_step: per 32-k
 * step 2 weight tiles + 6 x-term tiles loaded, 12 tdpbf16ps into 4 C tiles) with every tile in
 * L1, so no cache level, packing or epilogue costs anything; compared with bench_peak's
 * register-only tdpbf16ps loop in the same run. What a whole GEMM built on this loop can reach
 * is at most the "L1" rows; issue 8 asks >= 80% of the register-only peak.
 *   bench/build.sh && build-bench/bench_amx_ceiling [threads] [reps]
 * Rows (each thread has its own 40 KB of tiles, in L1: 4 k steps of one 32-row block and two
 * panels; the 2 x 2 loop uses the first panel):
 *   peak          bench_peak's loop: 4 tdpbf16ps on fixed random operands, no loads
 *   L1 real       the kernel's loop; x terms = the library's exact split (clef_gemm_amx_pack) of
 *                 activation-like fp32 values, weights = the library's packing (clef_gemm_amx_pack_w)
 *                 of weight-like bf16 values
 *   L1 real, C    the same, plus the 4 C tiles stored and another 4 loaded every 8 k steps, as the
 *                 kernel does at each K block (CLEF_AMX_KC = 256), or every 32 (a K block of 1,024)
 *   L1 zeros      the kernel's loop on all-zero tiles (how much the operand bits cost)
 *   1x4           an alternative loop (ceil_loop_1x4: 7 loads per 12 products), without and with
 *                 the partial sums moved every 8 k steps
 * GFLOP/s count executed products (3 per useful one in the GEMM), as bench_gemm's "% pk". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/cpu_features.h"
#include "compute/cpu/gemm_amx_step.h"
#include "peak.h"

enum { STEPS = 4, K = 32 * STEPS, ROWS = 32, COLS = 64, TILE = 16 * 32 };
enum { MODE_REAL, MODE_REAL_C, MODE_REAL_C32, MODE_ZERO, MODE_1X4, MODE_1X4_C, NMODE };
static const char *const mode_names[NMODE] = {"L1 real", "L1 real, C every 8", "L1 real, C every 32",
                                              "L1 zeros", "1x4: L1 real", "1x4: L1 real, C every 8"};
static const int swap_every[NMODE] = {0, 8, 32, 0, 0, 8};

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double urand(void) {
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}
static double nrand(void) { /* Box-Muller */
    double u = urand(), v = urand();
    return sqrt(-2.0 * log(u + 1e-300)) * cos(6.283185307179586 * v);
}

/* Tiles of one thread: x terms of ROWS rows x K (STEPS x 6 tiles) then the weights of COLS / 32
 * panels (STEPS x 2 tiles each), in the kernel's layouts. */
static uint16_t *make_tiles(int zero) {
    size_t xe = clef_gemm_amx_xp_elems(ROWS, K), we = COLS / 32 * clef_gemm_amx_panel_elems(K);
    uint16_t *t = aligned_alloc(64, (xe + we) * sizeof(uint16_t));
    float *x = malloc(sizeof(float) * ROWS * K);
    uint16_t *w = malloc(sizeof(uint16_t) * COLS * K);
    if (!t || !x || !w) { fprintf(stderr, "out of memory\n"); exit(1); }
    for (size_t i = 0; i < (size_t)ROWS * K; i++) x[i] = zero ? 0.0f : (float)nrand(); /* a normed activation */
    for (size_t i = 0; i < (size_t)COLS * K; i++) {
        float f = zero ? 0.0f : (float)(0.02 * nrand()); /* a trained Linear's scale */
        uint32_t b;
        memcpy(&b, &f, 4);
        w[i] = (uint16_t)(b >> 16);
    }
    clef_gemm_amx_pack(t, x, K, ROWS, K, 0, ROWS);
    clef_gemm_amx_pack_w(t + xe, w, K, COLS, K, 0, COLS / 32);
    free(x);
    free(w);
    return t;
}

static float cbuf_store[64][2][32 * 32] __attribute__((aligned(64)));

__attribute__((target("amx-tile,amx-bf16"), noinline)) static void ceil_loop(const uint16_t *tiles, long iters, int swap_every_n, float (*cb)[32 * 32]) {
    const uint16_t *wp = tiles + clef_gemm_amx_xp_elems(ROWS, K);
    clef_gemm_amx_tile_config();
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
    int which = 0, left = swap_every_n;
    for (long i = 0; i < iters; i++) {
        long b = i & (STEPS - 1);
        clef_amx_step(wp + (size_t)b * 2 * TILE, tiles + (size_t)b * 6 * TILE);
        if (swap_every_n && --left == 0) {
            left = swap_every_n; /* the end of a K block: partial sums out, the next panel's in */
            float *c = cb[which], *d = cb[which ^ 1];
            _tile_stored(0, c, 128); _tile_stored(1, c + 16, 128);
            _tile_stored(2, c + 16 * 32, 128); _tile_stored(3, c + 16 * 32 + 16, 128);
            _tile_loadd(0, d, 128); _tile_loadd(1, d + 16, 128);
            _tile_loadd(2, d + 16 * 32, 128); _tile_loadd(3, d + 16 * 32 + 16, 128);
            which ^= 1;
        }
    }
    _tile_release();
}

/* The 1 x 4 alternative: one 16-row tile of x, its three terms held in tiles 4-6 for the k step,
 * and 4 C tiles = 64 columns (2 panels), each weight tile loaded once into tile 7 and used by the
 * 3 terms in a row (the tile unit forwards a C tile between dependent products at full rate:
 * measured, /tmp harness): 7 loads per 12 products instead of 8. */
__attribute__((target("amx-tile,amx-bf16"), noinline)) static void ceil_loop_1x4(const uint16_t *tiles, long iters, int swap_every_n, float (*cb)[32 * 32]) {
    const uint16_t *wp = tiles + clef_gemm_amx_xp_elems(ROWS, K);
    const size_t pe = clef_gemm_amx_panel_elems(K);
    clef_gemm_amx_tile_config();
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
    int which = 0, left = swap_every_n;
    for (long i = 0; i < iters; i++) {
        long b = i & (STEPS - 1);
        const uint16_t *xt = tiles + (size_t)b * 6 * TILE; /* row tile 0: terms at +0, +2, +4 tiles */
        const uint16_t *w0 = wp + (size_t)b * 2 * TILE, *w1 = w0 + pe;
        _tile_loadd(4, xt, 64);
        _tile_loadd(5, xt + 2 * TILE, 64);
        _tile_loadd(6, xt + 4 * TILE, 64);
        _tile_loadd(7, w0, 64);
        _tile_dpbf16ps(0, 4, 7); _tile_dpbf16ps(0, 5, 7); _tile_dpbf16ps(0, 6, 7);
        _tile_loadd(7, w0 + TILE, 64);
        _tile_dpbf16ps(1, 4, 7); _tile_dpbf16ps(1, 5, 7); _tile_dpbf16ps(1, 6, 7);
        _tile_loadd(7, w1, 64);
        _tile_dpbf16ps(2, 4, 7); _tile_dpbf16ps(2, 5, 7); _tile_dpbf16ps(2, 6, 7);
        _tile_loadd(7, w1 + TILE, 64);
        _tile_dpbf16ps(3, 4, 7); _tile_dpbf16ps(3, 5, 7); _tile_dpbf16ps(3, 6, 7);
        if (swap_every_n && --left == 0) {
            left = swap_every_n;
            float *c = cb[which], *d = cb[which ^ 1];
            _tile_stored(0, c, 256); _tile_stored(1, c + 16, 256);
            _tile_stored(2, c + 32, 256); _tile_stored(3, c + 48, 256);
            _tile_loadd(0, d, 256); _tile_loadd(1, d + 16, 256);
            _tile_loadd(2, d + 32, 256); _tile_loadd(3, d + 48, 256);
            which ^= 1;
        }
    }
    _tile_release();
}

typedef struct { int mode; long iters /* k steps */; int id; } job;
static void *ceil_thread(void *p) {
    job *j = p;
    uint16_t *t = make_tiles(j->mode == MODE_ZERO);
    void (*loop)(const uint16_t *, long, int, float (*)[32 * 32]) =
        j->mode == MODE_1X4 || j->mode == MODE_1X4_C ? ceil_loop_1x4 : ceil_loop;
    loop(t, 64, swap_every[j->mode], cbuf_store[j->id]); /* warm the tiles into L1 */
    loop(t, j->iters, swap_every[j->mode], cbuf_store[j->id]);
    free(t);
    return NULL;
}

/* GFLOP/s (executed) of n threads; the tile making is outside the timing only in the sense that
 * it is ~1e-4 of a run: each run lasts ~0.3 s. */
static double ceil_once(int mode, int n, long iters) {
    pthread_t th[64];
    job j[64];
    double t0 = now_s();
    for (int i = 0; i < n; i++) {
        j[i] = (job){mode, iters, i};
        if (i) pthread_create(&th[i], NULL, ceil_thread, &j[i]);
    }
    ceil_thread(&j[0]);
    for (int i = 1; i < n; i++) pthread_join(th[i], NULL);
    return (double)n * (double)iters * 12.0 * 16 * 16 * 32 * 2 * 1e-9 / (now_s() - t0);
}

static double ceil_median(int mode, int n, int reps) {
    double probe = ceil_once(mode, 1, 20000);
    long iters = (long)(0.3 / (12.0 * 16 * 16 * 32 * 2 * 1e-9 / probe));
    double v[64];
    for (int r = 0; r < reps; r++) v[r] = ceil_once(mode, n, iters);
    qsort(v, (size_t)reps, sizeof v[0], dcmp);
    return v[reps / 2];
}

int main(int argc, char **argv) {
    int nth = argc > 1 ? atoi(argv[1]) : (int)sysconf(_SC_NPROCESSORS_ONLN);
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    if (nth < 1) nth = 1;
    if (nth > 64) nth = 64;
    if (reps < 1 || reps > 64) reps = 5;
    const char *why;
    if (!clef_gemm_available(CLEF_GEMM_AMX, &why)) {
        printf("skipped: %s\n", why);
        return 0;
    }
    printf("GFLOP/s executed, median of %d runs of ~0.3 s; 1 thread and %d\n", reps, nth);
    double p1 = peak_median(PEAK_AMX_BF16, 1, reps, 0.3, NULL);
    double pn = peak_median(PEAK_AMX_BF16, nth, reps, 0.3, NULL);
    printf("%-22s %10s %7s %10s %7s\n", "loop", "1t", "% pk", "Nt", "% pk");
    printf("%-22s %10.1f %6.1f%% %10.1f %6.1f%%\n", "peak (fixed operands)", p1, 100.0, pn, 100.0);
    for (int m = 0; m < NMODE; m++) {
        double a = ceil_median(m, 1, reps), b = ceil_median(m, nth, reps);
        printf("%-22s %10.1f %6.1f%% %10.1f %6.1f%%\n", mode_names[m], a, 100 * a / p1, b, 100 * b / pn);
    }
    return 0;
}
