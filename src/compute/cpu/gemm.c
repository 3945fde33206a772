/* GEMM dispatch: picks the kernel from the CPU's features, allocates per-worker scratch, cuts the
 * output into tiles for the thread pool. See gemm.h for the arithmetic every exact kernel follows
 * (which is why the partition here can be anything: it never changes a bit). */
#include "compute/cpu/gemm.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/cpu_features.h"
#include "base/clock.h"

static const char *const kernel_names[CLEF_GEMM_NKERNELS] = {
    "auto", "ref", "avx2", "avx512", "amx",
};

const char *clef_gemm_name(clef_gemm_kernel kern) {
    return (unsigned)kern < CLEF_GEMM_NKERNELS ? kernel_names[kern] : "?";
}

#define NEED_AVX2 (CLEF_CPU_AVX2 | CLEF_CPU_FMA)
#define NEED_AVX512 (CLEF_CPU_AVX512F | CLEF_CPU_AVX512BW | CLEF_CPU_AVX512VL | \
                     CLEF_CPU_AVX512DQ | CLEF_CPU_FMA)

/* Linux hands a process the AMX tile state only on request (once per process, any thread). */
static int g_amx_ok;
static pthread_once_t g_amx_once = PTHREAD_ONCE_INIT;
static void amx_request(void) {
#ifdef SYS_arch_prctl
    g_amx_ok = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0;
#endif
}
static int amx_permitted(void) {
    pthread_once(&g_amx_once, amx_request);
    return g_amx_ok;
}

int clef_gemm_available(clef_gemm_kernel kern, const char **why) {
    const char *w = NULL;
    switch (kern) {
    case CLEF_GEMM_AUTO:
    case CLEF_GEMM_REF: break;
    case CLEF_GEMM_AVX2:
        if (!clef_cpu_has(NEED_AVX2)) w = "the CPU lacks AVX2 or FMA";
        break;
    case CLEF_GEMM_AVX512:
        if (!clef_cpu_has(NEED_AVX512)) w = "the CPU lacks AVX-512 F/BW/VL/DQ";
        break;
    case CLEF_GEMM_AMX:
        if (!clef_cpu_has(NEED_AVX512 | CLEF_CPU_AMX_TILE | CLEF_CPU_AMX_BF16))
            w = "the CPU (or its OS) lacks AMX-BF16";
        else if (!amx_permitted())
            w = "Linux refused the AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM)";
        break;
    default: w = "no such kernel"; break;
    }
    if (why) *why = w;
    return w == NULL;
}

static clef_gemm_kernel g_default;
static double g_gflops[CLEF_GEMM_NKERNELS]; /* the timing behind the pick; 0 = not timed */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* GFLOP/s of one exact kernel on one thread, on a block of the decoder's shape (48 rows x 512 x
 * 1,024, ~50 MFLOP, a few ms): the best of 3 after one warm-up call. 0 when it could not run. */
#define PROBE_T 48
#define PROBE_K 1024
#define PROBE_N 512
static double probe(clef_gemm_kernel k, float *y, const float *x, const uint16_t *W) {
    if (clef_gemm_bf16_with(k, NULL, y, PROBE_N, x, PROBE_K, PROBE_T, PROBE_K, W, PROBE_K, PROBE_N, NULL)) return 0;
    double best = 0;
    for (int r = 0; r < 3; r++) {
        double t0 = clef_now();
        if (clef_gemm_bf16_with(k, NULL, y, PROBE_N, x, PROBE_K, PROBE_T, PROBE_K, W, PROBE_K, PROBE_N, NULL)) return 0;
        double dt = clef_now() - t0;
        if (dt > 0 && (best == 0 || dt < best)) best = dt;
    }
    return best > 0 ? 2.0 * PROBE_T * PROBE_K * PROBE_N / best * 1e-9 : 0;
}

clef_gemm_kernel clef_gemm_fastest(const clef_gemm_kernel *cands, size_t n, double *gflops) {
    clef_gemm_kernel best = CLEF_GEMM_REF;
    double best_g = -1;
    float *x = malloc((size_t)PROBE_T * PROBE_K * sizeof *x), *y = malloc((size_t)PROBE_T * PROBE_N * sizeof *y);
    uint16_t *W = malloc((size_t)PROBE_N * PROBE_K * sizeof *W);
    for (size_t i = 0; i < n; i++) gflops[i] = 0;
    if (x && y && W) {
        uint32_t s = 0x12345678u; /* small values, so no denormal or Inf slows a kernel */
        for (size_t i = 0; i < (size_t)PROBE_T * PROBE_K; i++) { s = s * 1664525u + 1013904223u; x[i] = (float)(s >> 20) / 4096.0f - 0.5f; }
        for (size_t i = 0; i < (size_t)PROBE_N * PROBE_K; i++) { s = s * 1664525u + 1013904223u; W[i] = (uint16_t)(0x3c00u + (s >> 24)); }
        /* two rounds alternating the kernels, so a neighbour's burst on a shared machine hits all alike */
        for (int r = 0; r < 2; r++)
            for (size_t i = 0; i < n; i++) {
                double g = clef_gemm_available(cands[i], NULL) ? probe(cands[i], y, x, W) : 0;
                if (g > gflops[i]) gflops[i] = g;
            }
    }
    for (size_t i = 0; i < n; i++) /* ties and failed timings: the earlier candidate */
        if (clef_gemm_available(cands[i], NULL) && gflops[i] > best_g) best = cands[i], best_g = gflops[i];
    free(x);
    free(y);
    free(W);
    return best;
}

/* AMX when granted (2.5x any FMA kernel: docs/performance.md); else, of the exact FMA kernels this
 * CPU runs, the one that measures faster here. They give the same bits (gemm.h), so the choice
 * changes only the time; an AVX-512 CPU is not always faster with AVX-512 (issue 34: a 2-vCPU EPYC
 * measured avx2 204 GFLOP/s, avx512 191). */
static void pick_default(void) {
    clef_gemm_kernel k = CLEF_GEMM_REF;
    int a512 = clef_gemm_available(CLEF_GEMM_AVX512, NULL), a2 = clef_gemm_available(CLEF_GEMM_AVX2, NULL);
    if (clef_gemm_available(CLEF_GEMM_AMX, NULL)) k = CLEF_GEMM_AMX;
    else if (a512 && a2) {
        const clef_gemm_kernel c[2] = {CLEF_GEMM_AVX512, CLEF_GEMM_AVX2};
        double g[2];
        k = clef_gemm_fastest(c, 2, g);
        g_gflops[CLEF_GEMM_AVX512] = g[0];
        g_gflops[CLEF_GEMM_AVX2] = g[1];
    } else if (a512) k = CLEF_GEMM_AVX512;
    else if (a2) k = CLEF_GEMM_AVX2;
    g_default = k;
}

clef_gemm_kernel clef_gemm_default(void) {
    pthread_once(&g_once, pick_default);
    return g_default;
}

double clef_gemm_measured_gflops(clef_gemm_kernel kern) {
    pthread_once(&g_once, pick_default);
    return (unsigned)kern < CLEF_GEMM_NKERNELS ? g_gflops[kern] : 0;
}

clef_gemm_kernel clef_gemm_named(const char *name) {
    if (name && *name)
        for (int i = CLEF_GEMM_REF; i < CLEF_GEMM_NKERNELS; i++)
            if (strcmp(name, kernel_names[i]) == 0 && clef_gemm_available((clef_gemm_kernel)i, NULL))
                return (clef_gemm_kernel)i;
    return clef_gemm_default();
}

/* ---------------------------------------------------------------- tiling */

typedef struct {
    clef_gemm_args a;
    clef_gemm_tile_fn fn;
    float *scratch;       /* CLEF_GEMM_SCRATCH floats per worker */
    size_t cw, nbn;       /* columns per unit, column units */
    size_t rh;            /* rows per unit */
} job;

static void run_units(void *ctx, size_t b, size_t e, int worker) {
    job *j = ctx;
    float *s = j->scratch + (size_t)worker * CLEF_GEMM_SCRATCH;
    /* consecutive units of one row band with consecutive columns run as one tile */
    size_t u = b;
    while (u < e) {
        size_t it = u / j->nbn, jn = u % j->nbn;
        size_t ue = (it + 1) * j->nbn;
        if (ue > e) ue = e;
        size_t t0 = it * j->rh, t1 = t0 + j->rh < j->a.T ? t0 + j->rh : j->a.T;
        size_t n0 = jn * j->cw, n1 = (jn + (ue - u)) * j->cw;
        if (n1 > j->a.N) n1 = j->a.N;
        if (t0 < t1 && n0 < n1) j->fn(&j->a, t0, t1, n0, n1, s);
        u = ue;
    }
}

/* ---------------------------------------------------------------- AMX */

/* The packed activations of a chunk (up to 37 MB at K = 12,288) and the workers' scratch
 * (packed weights of CLEF_AMX_NCB panels for all of K, partial sums) are kept between calls: a
 * fresh buffer per call would page-fault its way in every time. One cached buffer for the
 * process, taken with trylock; a caller that finds it busy uses a buffer of its own. */
static pthread_mutex_t amx_mu = PTHREAD_MUTEX_INITIALIZER;
static void *amx_cache;
static size_t amx_cache_bytes;

typedef struct { uint16_t *xp; const float *x; size_t ldx, rows, K; } amx_pack_job;
static void run_amx_pack(void *ctx, size_t b, size_t e, int worker) {
    (void)worker;
    const amx_pack_job *p = ctx;
    clef_gemm_amx_pack(p->xp, p->x, p->ldx, p->rows, p->K, b, e);
}
typedef struct { clef_gemm_amx_chunk c; unsigned char *scratch; size_t per_worker; } amx_job;
static void run_amx_panels(void *ctx, size_t b, size_t e, int worker) {
    amx_job *j = ctx;
    clef_gemm_amx_panels(&j->c, b, e, j->scratch + (size_t)worker * j->per_worker);
}

/* W (unpacked: weights copied into tile layout per panel block) or wp (clef_gemm_pack's buffer,
 * panel 0 = column 0 of this call; read in place). Either way the same products in the same order. */
static int gemm_amx(clef_pool *pool, float *y, size_t ldy, const float *x, size_t ldx, size_t T,
                    size_t K, const uint16_t *W, size_t ldw, const uint16_t *wp, size_t N,
                    const float *bias) {
    size_t tc = T < CLEF_AMX_TC ? T : CLEF_AMX_TC;
    size_t xbytes = (clef_gemm_amx_xp_elems(tc, K) * sizeof(uint16_t) + 63) / 64 * 64;
    size_t per_worker = (clef_gemm_amx_scratch_bytes(K, wp != NULL) + 63) / 64 * 64;
    size_t npanel = (N + 31) / 32, nth = (size_t)clef_pool_size(pool);
    size_t need = xbytes + nth * per_worker;
    unsigned char *buf;
    int cached = pthread_mutex_trylock(&amx_mu) == 0;
    if (cached) {
        if (amx_cache_bytes < need) {
            free(amx_cache);
            amx_cache = aligned_alloc(64, need);
            amx_cache_bytes = amx_cache ? need : 0;
        }
        buf = amx_cache;
    } else {
        buf = aligned_alloc(64, need);
    }
    int rc = -1;
    if (buf) {
        uint16_t *xp = (uint16_t *)buf;
        for (size_t t0 = 0; t0 < T; t0 += CLEF_AMX_TC) {
            size_t rows = T - t0 < CLEF_AMX_TC ? T - t0 : CLEF_AMX_TC;
            amx_pack_job pj = {xp, x + t0 * ldx, ldx, rows, K};
            clef_pool_for(pool, (rows + 31) / 32 * 32, 16, run_amx_pack, &pj);
            amx_job j = {{.xp = xp, .rows = rows, .y = y + t0 * ldy, .ldy = ldy, .W = W, .ldw = ldw,
                          .wp = wp, .bias = bias, .K = K, .N = N}, buf + xbytes, per_worker};
            clef_pool_for(pool, npanel, 1, run_amx_panels, &j);
        }
        rc = 0;
    }
    if (cached) pthread_mutex_unlock(&amx_mu);
    else free(buf);
    return rc;
}

/* ---------------------------------------------------------------- AMX, weights packed once */

struct clef_gemm_packed {
    uint16_t *wp;   /* npanel * clef_gemm_amx_panel_elems(K) bf16 */
    size_t N, K, npanel, bytes;
};

typedef struct { const clef_gemm_packed *p; const uint16_t *W; size_t ldw; } pack_w_job;
static void run_pack_w(void *ctx, size_t b, size_t e, int worker) {
    (void)worker;
    const pack_w_job *j = ctx;
    clef_gemm_amx_pack_w(j->p->wp, j->W, j->ldw, j->p->N, j->p->K, b, e - b);
}

clef_gemm_packed *clef_gemm_pack(clef_pool *pool, const uint16_t *W, size_t ldw, size_t N, size_t K) {
    if (N == 0 || K == 0 || !clef_gemm_available(CLEF_GEMM_AMX, NULL)) return NULL;
    size_t npanel = (N + 31) / 32, pe = clef_gemm_amx_panel_elems(K);
    if (pe > SIZE_MAX / sizeof(uint16_t) / npanel) return NULL;
    size_t bytes = npanel * pe * sizeof(uint16_t); /* a multiple of 2 KB: aligned_alloc's rule holds */
    clef_gemm_packed *p = malloc(sizeof *p);
    if (!p) return NULL;
    *p = (clef_gemm_packed){.wp = aligned_alloc(64, bytes), .N = N, .K = K, .npanel = npanel, .bytes = bytes};
    if (!p->wp) { free(p); return NULL; }
    /* blocks of 8 panels per worker piece: each reads 16-row groups along all of K (pack_w) */
    pack_w_job j = {p, W, ldw};
    clef_pool_for(pool, npanel, CLEF_AMX_NCB, run_pack_w, &j);
    return p;
}

void clef_gemm_packed_free(clef_gemm_packed *p) {
    if (!p) return;
    free(p->wp);
    free(p);
}

size_t clef_gemm_packed_bytes(const clef_gemm_packed *p) { return p ? p->bytes + sizeof *p : 0; }

int clef_gemm_packed_fits(const clef_gemm_packed *p, size_t row0, size_t N) {
    return p && row0 % CLEF_GEMM_PACKED_ALIGN == 0 && row0 <= p->N && N <= p->N - row0;
}

/* A slice whose N is not a multiple of 32 reads, in its last panel, the next slice's rows where
 * the unpacked path has zeros: those columns of the tiles are computed and never stored, and a
 * column of C depends only on its own column of B, so the stored bits are the same. */
int clef_gemm_bf16_packed(clef_pool *pool, float *y, size_t ldy, const float *x, size_t ldx, size_t T,
                          const clef_gemm_packed *p, size_t row0, size_t N, const float *bias) {
    if (!clef_gemm_packed_fits(p, row0, N)) return -1;
    if (T == 0 || N == 0) return 0;
    const uint16_t *wp = p->wp + row0 / 32 * clef_gemm_amx_panel_elems(p->K);
    return gemm_amx(pool, y, ldy, x, ldx, T, p->K, NULL, 0, wp, N, bias);
}

int clef_gemm_bf16_with(clef_gemm_kernel kern, clef_pool *pool, float *y, size_t ldy,
                        const float *x, size_t ldx, size_t T, size_t K, const uint16_t *W,
                        size_t ldw, size_t N, const float *bias) {
    if (kern == CLEF_GEMM_AUTO) kern = clef_gemm_default();
    if (!clef_gemm_available(kern, NULL)) return -1;
    if (T == 0 || N == 0) return 0;
    if (kern == CLEF_GEMM_AMX && K > 0) return gemm_amx(pool, y, ldy, x, ldx, T, K, W, ldw, NULL, N, bias);
    job j;
    memset(&j, 0, sizeof j);
    j.a = (clef_gemm_args){.y = y, .ldy = ldy, .x = x, .ldx = ldx, .W = W, .ldw = ldw,
                           .bias = bias, .T = T, .K = K, .N = N};
    switch (kern) {
    case CLEF_GEMM_AVX2: j.fn = clef_gemm_avx2_tile; break;
    case CLEF_GEMM_AVX512: j.fn = clef_gemm_avx512_tile; break;
    default: j.fn = clef_gemm_ref_tile; break;
    }
    size_t nth = (size_t)clef_pool_size(pool);
    /* Units: column blocks of 128 (a worker's consecutive units run as one tile); narrower (32)
     * when that leaves workers idle; row bands too when even that does. */
    j.cw = 128;
    j.nbn = (N + j.cw - 1) / j.cw;
    if (j.nbn < 2 * nth && N > 32) {
        j.cw = 32;
        j.nbn = (N + 31) / 32;
    }
    size_t nbt = 1;
    if (j.nbn < nth && T >= 24) {
        nbt = (nth + j.nbn - 1) / j.nbn;
        if (nbt > T / 12) nbt = T / 12;
    }
    j.rh = (T + nbt - 1) / nbt;
    j.rh = (j.rh + 11) / 12 * 12;
    nbt = (T + j.rh - 1) / j.rh;
    size_t units = nbt * j.nbn;
    size_t nw = nth < units ? nth : units;

    size_t bytes = (nw * CLEF_GEMM_SCRATCH * sizeof(float) + 63) / 64 * 64;
    j.scratch = aligned_alloc(64, bytes);
    if (!j.scratch) return -1;
    clef_pool_for(pool, units, 1, run_units, &j);
    free(j.scratch);
    return 0;
}

int clef_gemm_bf16(clef_pool *pool, float *y, size_t ldy, const float *x, size_t ldx, size_t T,
                   size_t K, const uint16_t *W, size_t ldw, size_t N, const float *bias) {
    return clef_gemm_bf16_with(CLEF_GEMM_AUTO, pool, y, ldy, x, ldx, T, K, W, ldw, N, bias);
}
