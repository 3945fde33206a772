/* The int8 Linear (gemm_int8.h): quantization of weights and activation rows, the portable
 * reference tile, and the dispatch over the thread pool. Integer sums are exact, so the partition
 * of the output among workers never changes a bit. */
#include "compute/cpu/gemm_int8.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu_features.h"

static const char *const q8_names[CLEF_Q8_NKERNELS] = {"auto", "ref", "avx2"};
const char *clef_q8_name(clef_q8_kernel kern) { return (unsigned)kern < CLEF_Q8_NKERNELS ? q8_names[kern] : "?"; }

int clef_q8_available(clef_q8_kernel kern) {
    switch (kern) {
    case CLEF_Q8_AUTO:
    case CLEF_Q8_REF: return 1;
    case CLEF_Q8_AVX2: return clef_cpu_has(CLEF_CPU_AVX2);
    default: return 0;
    }
}

static clef_q8_kernel q8_default(void) { return clef_q8_available(CLEF_Q8_AVX2) ? CLEF_Q8_AVX2 : CLEF_Q8_REF; }

static inline float elem(const void *src, int bf16, size_t k) {
    if (!bf16) return ((const float *)src)[k];
    uint32_t u = (uint32_t)((const uint16_t *)src)[k] << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float clef_q8_quantize_row(int8_t *q, const void *src, int bf16, size_t K) {
    float amax = 0;
    int finite = 1;
    for (size_t k = 0; k < K; k++) {
        float a = fabsf(elem(src, bf16, k));
        if (!(a <= 3.4028235e38f)) finite = 0; /* Inf or NaN */
        else if (a > amax) amax = a;
    }
    if (!finite || amax == 0) {
        memset(q, 0, K);
        return finite ? 0.0f : NAN;
    }
    float inv = 127.0f / amax;
    for (size_t k = 0; k < K; k++) {
        long v = lrintf(elem(src, bf16, k) * inv); /* the current rounding mode: to nearest, ties even */
        q[k] = (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
    }
    return amax / 127.0f;
}

static size_t padded(size_t K) { return (K + CLEF_Q8_PAD - 1) / CLEF_Q8_PAD * CLEF_Q8_PAD; }

/* ---------------------------------------------------------------- weights */

typedef struct { clef_q8_weights *w; const uint16_t *W; size_t ldw; } qw_job;
static void run_qw(void *ctx, size_t b, size_t e, int worker) {
    (void)worker;
    const qw_job *j = ctx;
    for (size_t n = b; n < e; n++)
        j->w->scale[n] = clef_q8_quantize_row(j->w->q + n * j->w->ldq, j->W + n * j->ldw, 1, j->w->K);
}

clef_q8_weights *clef_q8_quantize_bf16(clef_pool *pool, const uint16_t *W, size_t ldw, size_t N, size_t K) {
    if (N == 0 || K == 0 || K > CLEF_Q8_MAX_K) return NULL;
    size_t ldq = padded(K);
    if (N > (SIZE_MAX - 63) / ldq) return NULL;
    clef_q8_weights *w = malloc(sizeof *w);
    if (!w) return NULL;
    /* aligned_alloc's size: a multiple of the alignment (C11; ASan checks it) */
    *w = (clef_q8_weights){.q = aligned_alloc(64, (N * ldq + 63) / 64 * 64), .scale = malloc(N * sizeof(float)),
                           .N = N, .K = K, .ldq = ldq};
    if (!w->q || !w->scale) {
        clef_q8_weights_free(w);
        return NULL;
    }
    for (size_t n = 0; n < N; n++) memset(w->q + n * ldq + K, 0, ldq - K);
    qw_job j = {w, W, ldw};
    clef_pool_for(pool, N, 16, run_qw, &j);
    return w;
}

void clef_q8_weights_free(clef_q8_weights *w) {
    if (!w) return;
    free(w->q);
    free(w->scale);
    free(w);
}

size_t clef_q8_weights_bytes(const clef_q8_weights *w) {
    return w ? w->N * w->ldq + w->N * sizeof(float) + sizeof *w : 0;
}

/* ---------------------------------------------------------------- the reference tile */

static void ref_tile(int32_t *acc, size_t lda, const int16_t *xq, const int8_t *wq, size_t ldq, size_t t0, size_t t1,
                     size_t n0, size_t n1) {
    for (size_t t = t0; t < t1; t++)
        for (size_t n = n0; n < n1; n++) {
            int32_t s = 0;
            for (size_t k = 0; k < ldq; k++) s += (int32_t)xq[t * ldq + k] * (int32_t)wq[n * ldq + k];
            acc[(t - t0) * lda + (n - n0)] = s;
        }
}

/* ---------------------------------------------------------------- dispatch */

/* Activation rows quantized (int16 holding the int8 values, for vpmaddwd) with their scales. */
typedef struct { int16_t *xq; float *sx; const float *x; size_t ldx, K, ldq; } qx_job;
static void run_qx(void *ctx, size_t b, size_t e, int worker) {
    (void)worker;
    const qx_job *j = ctx;
    for (size_t t = b; t < e; t++) {
        int16_t *d = j->xq + t * j->ldq;
        /* int8 into the row's upper half, then widened forwards in place: element k is read from
         * byte ldq + k before any write reaches it (writes end at byte 2k + 1 < ldq + k + 1) */
        int8_t *q8 = (int8_t *)d + j->ldq;
        j->sx[t] = clef_q8_quantize_row(q8, j->x + t * j->ldx, 0, j->K);
        for (size_t k = 0; k < j->K; k++) d[k] = q8[k];
        for (size_t k = j->K; k < j->ldq; k++) d[k] = 0;
    }
}

typedef struct {
    clef_q8_kernel kern;
    float *y; size_t ldy;
    const int16_t *xq; const float *sx;
    const clef_q8_weights *w; size_t row0, N, T;
    const float *bias;
    int32_t *acc;          /* per worker: RB x CB int32 */
    size_t cb, nbn, rb;    /* columns per unit, column units, rows per unit */
} q8_job;

enum { Q8_CB = 48, Q8_RB = 64 }; /* a unit: up to 64 rows x 48 columns (48 x K int8 of W stay in L2) */

static void run_units(void *ctx, size_t b, size_t e, int worker) {
    q8_job *j = ctx;
    int32_t *acc = j->acc + (size_t)worker * Q8_RB * Q8_CB;
    const size_t ldq = j->w->ldq;
    const int8_t *wq = j->w->q + j->row0 * ldq;
    const float *sw = j->w->scale + j->row0;
    for (size_t u = b; u < e; u++) {
        size_t it = u / j->nbn, jn = u % j->nbn;
        size_t n0 = jn * j->cb, n1 = n0 + j->cb < j->N ? n0 + j->cb : j->N;
        size_t tb = it * j->rb, te = tb + j->rb < j->T ? tb + j->rb : j->T;
        for (size_t t0 = tb; t0 < te; t0 += Q8_RB) {
            size_t t1 = t0 + Q8_RB < te ? t0 + Q8_RB : te;
            if (j->kern == CLEF_Q8_AVX2) clef_q8_avx2_tile(acc, Q8_CB, j->xq, wq, ldq, t0, t1, n0, n1);
            else ref_tile(acc, Q8_CB, j->xq, wq, ldq, t0, t1, n0, n1);
            for (size_t t = t0; t < t1; t++) {
                float *yr = j->y + t * j->ldy;
                const int32_t *ar = acc + (t - t0) * Q8_CB;
                for (size_t n = n0; n < n1; n++) {
                    float v = (float)ar[n - n0] * (j->sx[t] * sw[n]);
                    yr[n] = j->bias ? v + j->bias[n] : v;
                }
            }
        }
    }
}

int clef_gemm_q8(clef_q8_kernel kern, clef_pool *pool, float *y, size_t ldy, const float *x, size_t ldx, size_t T,
                 const clef_q8_weights *w, size_t row0, size_t N, const float *bias) {
    if (kern == CLEF_Q8_AUTO) kern = q8_default();
    if (!clef_q8_available(kern) || !w || row0 > w->N || N > w->N - row0) return -1;
    if (T == 0 || N == 0) return 0;
    size_t ldq = w->ldq, nth = (size_t)clef_pool_size(pool);
    if (T > (SIZE_MAX - 63) / sizeof(int16_t) / ldq) return -1;
    int16_t *xq = aligned_alloc(64, (T * ldq * sizeof(int16_t) + 63) / 64 * 64);
    float *sx = malloc(T * sizeof *sx);
    q8_job j = {.kern = kern, .y = y, .ldy = ldy, .xq = xq, .sx = sx, .w = w, .row0 = row0, .N = N, .T = T, .bias = bias};
    j.cb = Q8_CB;
    j.nbn = (N + Q8_CB - 1) / Q8_CB;
    size_t nbt = 1; /* row bands too when the columns leave workers idle */
    if (j.nbn < 2 * nth && T >= 8) {
        nbt = (2 * nth + j.nbn - 1) / j.nbn;
        if (nbt > T / 4) nbt = T / 4;
    }
    j.rb = (T + nbt - 1) / nbt;
    j.rb = (j.rb + 3) / 4 * 4;
    nbt = (T + j.rb - 1) / j.rb;
    j.acc = malloc(nth * Q8_RB * Q8_CB * sizeof(int32_t));
    int rc = -1;
    if (xq && sx && j.acc) {
        qx_job qj = {xq, sx, x, ldx, w->K, ldq};
        clef_pool_for(pool, T, 4, run_qx, &qj);
        clef_pool_for(pool, nbt * j.nbn, 1, run_units, &j);
        rc = 0;
    }
    free(xq);
    free(sx);
    free(j.acc);
    return rc;
}
