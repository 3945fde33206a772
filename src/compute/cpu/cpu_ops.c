/* The plain CPU backend (see cpu_ops.h). Every kernel is parallel over independent outputs
 * (rows, columns, heads) through clef_pool_for with static partitioning; no reduction is split
 * across workers, so the results are bit-identical for any thread count. */
#include "compute/cpu/cpu_ops.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/threads.h"
#include "compute/cpu/cpu_arena.h"
#include "compute/cpu/cpu_mixers.h"
#include "compute/cpu/cpu_simd.h"
#include "compute/cpu/gemm.h"
#include "compute/cpu/gemm_int8.h"

typedef struct cpu_impl {
    clef_pool *pool;
    int nthreads;
    clef_arena *arena; /* ops->alloc / ops->free: buffers kept for the next forward */
    /* from the knobs at create (base/knobs.h; docs/knobs.md) */
    int linear_double;     /* CLEF_LINEAR=double */
    int amx_packed;        /* weights packed at load: the AMX kernel runs and CLEF_AMX_PACKED != 0 */
    clef_gemm_kernel gemm; /* CLEF_GEMM, or the fastest exact kernel */
    int int8;              /* the int8 precision: BF16 Linears through gemm_int8.h */
} cpu_impl;

static clef_pool *POOL(clef_ops *ops) { return ((cpu_impl *)ops->impl)->pool; }
static int NW(clef_ops *ops) { return ((cpu_impl *)ops->impl)->nthreads; }

/* ---------------------------------------------------------------- helpers */

/* Converts n elements of a weight tensor starting at element `off` to fp32. */
static void load_f32(const clef_tensor *t, size_t off, size_t n, float *dst) {
    if (t->dtype == CLEF_ST_BF16) {
        const uint16_t *s = (const uint16_t *)t->data + off;
        for (size_t i = 0; i < n; i++) {
            uint32_t u = (uint32_t)s[i] << 16;
            memcpy(&dst[i], &u, sizeof u);
        }
    } else if (t->dtype == CLEF_ST_F32) {
        memcpy(dst, (const float *)t->data + off, n * sizeof(float));
    } else {
        for (size_t i = 0; i < n; i++) dst[i] = clef_tensor_f32_at(t, (int64_t)(off + i));
    }
}

static inline float wat(const clef_tensor *t, size_t i) { return clef_tensor_f32_at(t, (int64_t)i); }


static inline float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }
static inline float siluf_(float x) { return x / (1.0f + expf(-x)); }

/* ---------------------------------------------------------------- memory */

static float *cpu_alloc(clef_ops *ops, size_t n) { return clef_arena_alloc(((cpu_impl *)ops->impl)->arena, n); }
static float *cpu_alloc_kept(clef_ops *ops, size_t n) { return clef_arena_alloc_kept(((cpu_impl *)ops->impl)->arena, n); }
static void cpu_free(clef_ops *ops, float *p) { clef_arena_free(((cpu_impl *)ops->impl)->arena, p); }

static void cpu_buffer_stats(clef_ops *ops, clef_ops_buffers *out) {
    clef_arena_stats st;
    clef_arena_get_stats(((cpu_impl *)ops->impl)->arena, &st);
    *out = (clef_ops_buffers){.held_bytes = st.held_bytes, .cached_bytes = st.cached_bytes, .cached_blocks = st.cached_blocks,
                              .live_bytes = st.live_bytes, .peak_live_bytes = st.peak_live_bytes,
                              .hits = st.hits, .misses = st.misses, .released = st.released};
}

/* CLEF_CPU_CACHE_MB: the most MiB of freed activation buffers kept for reuse (0: none). */
static size_t cache_cap(const clef_knobs *k) {
    return k->cpu_cache_mb < 0 ? CLEF_ARENA_CAP_DEFAULT : (size_t)k->cpu_cache_mb << 20;
}
static void cpu_upload(clef_ops *ops, float *dst, const float *src, size_t n) {
    (void)ops;
    if (n && dst != src) memmove(dst, src, n * sizeof(float));
}
static void cpu_download(clef_ops *ops, float *dst, const float *src, size_t n) {
    (void)ops;
    if (n && dst != src) memmove(dst, src, n * sizeof(float));
}

static void cpu_copy2d(clef_ops *ops, float *y, size_t ldy, const float *x, size_t ldx, size_t rows,
                       size_t cols) {
    (void)ops;
    for (size_t r = 0; r < rows; r++) memmove(y + r * ldy, x + r * ldx, cols * sizeof(float));
}

/* ---------------------------------------------------------------- gathers */

static void cpu_embed(clef_ops *ops, float *y, const clef_tensor *table, const int32_t *ids, size_t n) {
    (void)ops;
    size_t D = (size_t)(table->numel / table->shape[0]);
    for (size_t i = 0; i < n; i++) load_f32(table, (size_t)ids[i] * D, D, y + i * D);
}

typedef struct { float *y; const float *x; size_t ldx, r0, r1, D; } rowmean_ctx;
static void rowmean_fn(void *c_, size_t b, size_t e, int w) {
    (void)w;
    rowmean_ctx *c = c_;
    double inv = (double)(c->r1 - c->r0);
    if (c->r1 <= c->r0) { /* mean of no rows: NaN, as torch */
        for (size_t d = b; d < e; d++) c->y[d] = NAN;
        return;
    }
    for (size_t d = b; d < e; d++) {
        double s = 0;
        for (size_t r = c->r0; r < c->r1; r++) s += c->x[r * c->ldx + d];
        c->y[d] = (float)(s / inv);
    }
}
static void cpu_row_mean(clef_ops *ops, float *y, const float *x, size_t ldx, size_t r0, size_t r1, size_t D) {
    rowmean_ctx c = {y, x, ldx, r0, r1, D};
    clef_pool_for(POOL(ops), D, 64, rowmean_fn, &c);
}

/* ---------------------------------------------------------------- linear */

#define LIN_NB 8 /* weight rows converted per block */

typedef struct {
    float *y; const float *x; size_t T, K, N, row0;
    const clef_tensor *w, *b;
    float *scratch; /* per worker LIN_NB * K */
} linear_ctx;

static void linear_fn(void *c_, size_t b, size_t e, int worker) {
    linear_ctx *c = c_;
    float *wb = c->scratch + (size_t)worker * LIN_NB * c->K;
    for (size_t n0 = b; n0 < e; n0 += LIN_NB) {
        size_t nb = e - n0 < LIN_NB ? e - n0 : LIN_NB;
        load_f32(c->w, (c->row0 + n0) * c->K, nb * c->K, wb);
        double bias[LIN_NB];
        for (size_t r = 0; r < nb; r++) bias[r] = c->b ? (double)wat(c->b, c->row0 + n0 + r) : 0.0;
        for (size_t t = 0; t < c->T; t++) {
            const float *xr = c->x + t * c->K;
            float *yr = c->y + t * c->N + n0;
            for (size_t r = 0; r < nb; r++) yr[r] = (float)(dot_d(xr, wb + r * c->K, c->K) + bias[r]);
        }
    }
}

/* The double-accumulation loop above is the reference for the GEMM kernels (tests) and runs for
 * non-BF16 weights; BF16 weights (every Linear of the checkpoint) go to src/compute/cpu/gemm.c:
 * fp32 activations, bf16 widened exactly, one fp32 FMA per k in k order — exact inputs, fp32
 * accumulation, the same bits for any thread count and batch size. CLEF_LINEAR=double forces
 * the double loop everywhere (for measuring the difference; see docs/fidelity.md). */
static int linear_force_double(clef_ops *ops) { return ((cpu_impl *)ops->impl)->linear_double; }

/* BF16 weights packed once for the AMX kernel (gemm.h clef_gemm_pack), made at load through
 * prepare_weight and owned by the model. Only where the AMX kernel is the one linear runs
 * (not with CLEF_GEMM=avx512|avx2|ref), not on the parity path
 * (CLEF_LINEAR=double) and not with CLEF_AMX_PACKED=0 (the per-call packing, for comparing). */
typedef struct {
    clef_prepared base;
    clef_gemm_packed *g;
} cpu_packed;
static const char cpu_packed_kind = 0; /* its address tags our prepared weights */

static void cpu_packed_destroy(clef_prepared *p) {
    if (!p) return;
    clef_gemm_packed_free(((cpu_packed *)p)->g);
    free(p);
}

/* The int8 precision's weights (gemm_int8.h), quantized once at load from the mapping, whose pages
 * the model then releases: the int8 copy (about half the bf16 bytes) replaces them. */
typedef struct {
    clef_prepared base;
    clef_q8_weights *q;
} cpu_q8;
static const char cpu_q8_kind = 0;

static void cpu_q8_destroy(clef_prepared *p) {
    if (!p) return;
    clef_q8_weights_free(((cpu_q8 *)p)->q);
    free(p);
}

static clef_prepared *prepare_q8(clef_ops *ops, const clef_tensor *w) {
    size_t N = (size_t)w->shape[0], K = (size_t)(w->numel / w->shape[0]);
    cpu_q8 *p = malloc(sizeof *p);
    if (!p) return NULL;
    p->q = clef_q8_quantize_bf16(POOL(ops), w->data, K, N, K);
    if (!p->q) { free(p); return NULL; }
    p->base = (clef_prepared){.kind = &cpu_q8_kind, .bytes = clef_q8_weights_bytes(p->q) + sizeof *p, .destroy = cpu_q8_destroy};
    return &p->base;
}

static clef_prepared *cpu_prepare_weight(clef_ops *ops, const clef_tensor *w) {
    if (((cpu_impl *)ops->impl)->int8) {
        if (!w || w->dtype != CLEF_ST_BF16 || !w->data || w->ndim < 2 || w->shape[0] <= 0 || w->numel <= 0) return NULL;
        return prepare_q8(ops, w);
    }
    if (!((cpu_impl *)ops->impl)->amx_packed || !w || w->dtype != CLEF_ST_BF16 || !w->data || w->ndim < 2 ||
        w->shape[0] <= 0 || w->numel <= 0)
        return NULL;
    size_t N = (size_t)w->shape[0], K = (size_t)(w->numel / w->shape[0]);
    cpu_packed *p = malloc(sizeof *p);
    if (!p) return NULL;
    p->g = clef_gemm_pack(POOL(ops), w->data, K, N, K);
    if (!p->g) { free(p); return NULL; }
    p->base = (clef_prepared){.kind = &cpu_packed_kind, .bytes = clef_gemm_packed_bytes(p->g) + sizeof *p,
                              .destroy = cpu_packed_destroy};
    return &p->base;
}

/* The int8 precision: the weight's int8 form made at load, or, where none was made (out of memory
 * then, or a tensor the model did not prepare), the slice's rows quantized for this call: the
 * quantization is per row, so both give the same bits. */
static void linear_q8(clef_ops *ops, float *y, const float *x, size_t T, const clef_tensor *w, size_t K, size_t row0,
                      size_t N, const clef_tensor *b) {
    float *bias = NULL;
    if (b) {
        bias = malloc(N * sizeof *bias);
        if (!bias) { clef_ops_fail(ops, CLEF_OPS_OOM, "linear: out of memory for a bias of %zu floats", N); return; }
        for (size_t n = 0; n < N; n++) bias[n] = wat(b, row0 + n);
    }
    const clef_q8_weights *q = w->prep && w->prep->kind == &cpu_q8_kind ? ((cpu_q8 *)w->prep)->q : NULL;
    clef_q8_weights *own = NULL;
    if (!q) {
        if (K > CLEF_Q8_MAX_K) {
            clef_ops_fail(ops, CLEF_OPS_SHAPE, "linear: int8 takes K <= %zu, not %zu", CLEF_Q8_MAX_K, K);
            free(bias);
            return;
        }
        q = own = clef_q8_quantize_bf16(POOL(ops), (const uint16_t *)w->data + row0 * K, K, N, K);
        row0 = 0;
    }
    if (!q || clef_gemm_q8(CLEF_Q8_AUTO, POOL(ops), y, N, x, K, T, q, row0, N, bias))
        clef_ops_fail(ops, CLEF_OPS_OOM, "linear: out of memory for the int8 GEMM (%zu x %zu x %zu)", T, N, K);
    clef_q8_weights_free(own);
    free(bias);
}

static void cpu_linear(clef_ops *ops, float *y, const float *x, size_t T, const clef_tensor *w,
                       size_t row0, size_t N, const clef_tensor *b) {
    if (T == 0 || N == 0) return;
    size_t K = (size_t)(w->numel / w->shape[0]);
    if (w->dtype == CLEF_ST_BF16 && ((cpu_impl *)ops->impl)->int8) {
        linear_q8(ops, y, x, T, w, K, row0, N, b);
        return;
    }
    if (w->dtype == CLEF_ST_BF16 && !linear_force_double(ops)) {
        float *bias = NULL;
        if (b) {
            bias = malloc(N * sizeof *bias);
            if (!bias) { clef_ops_fail(ops, CLEF_OPS_OOM, "linear: out of memory for a bias of %zu floats", N); return; }
            for (size_t n = 0; n < N; n++) bias[n] = wat(b, row0 + n);
        }
        const clef_gemm_packed *g = w->prep && w->prep->kind == &cpu_packed_kind ? ((cpu_packed *)w->prep)->g : NULL;
        int rc;
        if (g && clef_gemm_packed_fits(g, row0, N)) {
            rc = clef_gemm_bf16_packed(POOL(ops), y, N, x, K, T, g, row0, N, bias);
        } else { /* a row slice not at a panel boundary (none in the release model) reads the mapping */
            const uint16_t *W = (const uint16_t *)w->data + row0 * K;
            rc = clef_gemm_bf16_with(((cpu_impl *)ops->impl)->gemm, POOL(ops), y, N, x, K, T, K, W, K, N, bias);
        }
        if (rc) clef_ops_fail(ops, CLEF_OPS_OOM, "linear: out of memory for the GEMM's packing buffers (%zu x %zu x %zu)", T, N, K);
        free(bias);
        return;
    }
    int nw = NW(ops);
    float *scratch = malloc((size_t)nw * LIN_NB * K * sizeof(float));
    if (!scratch) { clef_ops_fail(ops, CLEF_OPS_OOM, "linear: out of memory for %d workers' weight rows (K = %zu)", nw, K); return; }
    linear_ctx c = {y, x, T, K, N, row0, w, b, scratch};
    clef_pool_for(POOL(ops), N, LIN_NB, linear_fn, &c);
    free(scratch);
}

/* ---------------------------------------------------------------- norms */

typedef struct {
    float *y; const float *x; const float *z; size_t ldy, ldx, D;
    const float *w; int offset; float eps, scale; int kind;
} norm_ctx;

enum { K_RMS, K_LAYER, K_L2, K_GATED };

/* rmsnorm and layernorm rows 8 at a time with the AVX-512 or AVX2 loops (cpu_simd.h: the scalar
 * loop's bits); returns the first row left for the scalar loop. */
static size_t norm_simd(norm_ctx *c, size_t b, size_t e) {
    size_t D = c->D;
    const clef_simd_loops *L = clef_simd_loops_here();
    if ((c->kind != K_RMS && c->kind != K_LAYER) || !L || 7 * c->ldx + D > (size_t)INT32_MAX) return b;
    if (c->kind == K_LAYER) {
        for (; e - b >= 8; b += 8) {
            double mean[8], var[8];
            L->meanvar8(mean, var, c->x + b * c->ldx, c->ldx, D);
            for (size_t j = 0; j < 8; j++) {
                double rstd = 1.0 / sqrt(var[j] / (double)D + (double)c->eps);
                L->ln_scale(c->y + (b + j) * c->ldy, c->x + (b + j) * c->ldx, mean[j], rstd, c->w, c->z, D);
            }
        }
        return b;
    }
    for (; e - b >= 8; b += 8) {
        double ss[8];
        L->sumsq8(ss, c->x + b * c->ldx, c->ldx, D);
        for (size_t j = 0; j < 8; j++) {
            float inv = (float)(1.0 / sqrt(ss[j] / (double)D + (double)c->eps));
            L->rms_scale(c->y + (b + j) * c->ldy, c->x + (b + j) * c->ldx, inv, c->w, c->offset, D);
        }
    }
    return b;
}

static void norm_fn(void *c_, size_t b, size_t e, int worker) {
    (void)worker;
    norm_ctx *c = c_;
    size_t D = c->D;
    for (size_t r = norm_simd(c, b, e); r < e; r++) {
        const float *x = c->x + r * c->ldx;
        float *y = c->y + r * c->ldy;
        if (c->kind == K_LAYER) {
            double s = 0;
            for (size_t d = 0; d < D; d++) s += x[d];
            double mean = s / (double)D, v = 0;
            for (size_t d = 0; d < D; d++) { double t = x[d] - mean; v += t * t; }
            double rstd = 1.0 / sqrt(v / (double)D + (double)c->eps);
            for (size_t d = 0; d < D; d++)
                y[d] = (float)(((double)x[d] - mean) * rstd * (double)c->w[d] + (double)c->z[d]);
            continue;
        }
        double ss = 0;
        for (size_t d = 0; d < D; d++) ss += (double)x[d] * x[d];
        if (c->kind == K_L2) {
            float inv = (float)(1.0 / sqrt(ss + (double)c->eps));
            for (size_t d = 0; d < D; d++) {
                float t = x[d] * inv;
                y[d] = c->scale != 1.0f ? t * c->scale : t;
            }
            continue;
        }
        float inv = (float)(1.0 / sqrt(ss / (double)D + (double)c->eps));
        if (c->kind == K_RMS) {
            for (size_t d = 0; d < D; d++) {
                float n = x[d] * inv;
                y[d] = n * (c->offset ? 1.0f + c->w[d] : c->w[d]);
            }
        } else { /* gated */
            const float *z = c->z + r * c->ldx;
            for (size_t d = 0; d < D; d++) {
                float n = c->w[d] * (x[d] * inv);
                y[d] = n * siluf_(z[d]);
            }
        }
    }
}

static float *vec_f32(clef_ops *ops, const clef_tensor *t, size_t D) {
    float *v = malloc((D ? D : 1) * sizeof(float));
    if (!v) { clef_ops_fail(ops, CLEF_OPS_OOM, "norm: out of memory for a weight of %zu floats", D); return NULL; }
    load_f32(t, 0, D, v);
    return v;
}

static void cpu_rmsnorm(clef_ops *ops, float *y, size_t ldy, const float *x, size_t ldx, size_t rows,
                        size_t D, const clef_tensor *w, int offset, float eps) {
    float *wv = vec_f32(ops, w, D);
    if (!wv) return;
    norm_ctx c = {y, x, NULL, ldy, ldx, D, wv, offset, eps, 1.0f, K_RMS};
    clef_pool_for(POOL(ops), rows, 1, norm_fn, &c);
    free(wv);
}

static void cpu_layernorm(clef_ops *ops, float *y, const float *x, size_t rows, size_t D,
                          const clef_tensor *w, const clef_tensor *b, float eps) {
    float *wv = vec_f32(ops, w, D), *bv = vec_f32(ops, b, D);
    if (wv && bv) {
        norm_ctx c = {y, x, bv, D, D, D, wv, 0, eps, 1.0f, K_LAYER};
        clef_pool_for(POOL(ops), rows, 1, norm_fn, &c);
    }
    free(wv);
    free(bv);
}

static void cpu_l2norm(clef_ops *ops, float *x, size_t ld, size_t rows, size_t D, float eps, float scale) {
    clef_cpu_l2norm(POOL(ops), x, ld, rows, D, eps, scale);
}

static void cpu_gated_rmsnorm(clef_ops *ops, float *y, const float *x, const float *z, size_t rows,
                              size_t D, const clef_tensor *w, float eps) {
    if (clef_cpu_gated_rmsnorm(POOL(ops), y, x, z, rows, D, w, eps))
        clef_ops_fail(ops, CLEF_OPS_OOM, "gated_rmsnorm: out of memory for a weight of %zu floats", D);
}

/* ---------------------------------------------------------------- rope */

typedef struct { float *x; size_t ld, nh, hd, rot; const float *cos, *sin; } rope_ctx;
static void rope_fn(void *c_, size_t b, size_t e, int worker) {
    (void)worker;
    rope_ctx *c = c_;
    size_t half = c->rot / 2;
    for (size_t t = b; t < e; t++) {
        const float *cs = c->cos + t * half, *sn = c->sin + t * half;
        for (size_t h = 0; h < c->nh; h++) {
            float *v = c->x + t * c->ld + h * c->hd;
            for (size_t d = 0; d < half; d++) {
                float x1 = v[d], x2 = v[d + half];
                float a = x1 * cs[d], bb = x2 * sn[d];
                float cc = x2 * cs[d], dd = x1 * sn[d];
                v[d] = a - bb;
                v[d + half] = cc + dd;
            }
        }
    }
}
static void cpu_rope(clef_ops *ops, float *x, size_t ld, size_t T, size_t nh, size_t hd, size_t rot,
                     const float *cos, const float *sin) {
    rope_ctx c = {x, ld, nh, hd, rot, cos, sin};
    clef_pool_for(POOL(ops), T, 1, rope_fn, &c);
}

/* ---------------------------------------------------------------- GDN pieces */

static void cpu_conv1d_silu(clef_ops *ops, float *y, const float *x, size_t C, const clef_tensor *w,
                            const clef_seg *segs, size_t nseg, const clef_seg_state *st) {
    if (clef_cpu_conv1d_silu_segs(POOL(ops), y, x, C, w, segs, nseg, st))
        clef_ops_fail(ops, CLEF_OPS_OOM, "conv1d_silu: out of memory for its scratch (%zu channels)", C);
}

static void cpu_gdn_gates(clef_ops *ops, float *beta, float *g, const float *b, const float *a, size_t T,
                          size_t H, const clef_tensor *A_log, const clef_tensor *dt_bias) {
    (void)ops;
    for (size_t t = 0; t < T; t++) {
        for (size_t h = 0; h < H; h++) {
            size_t i = t * H + h;
            beta[i] = sigmoidf_(b[i]);
            float u = a[i] + wat(dt_bias, h);
            float sp = u > 20.0f ? u : log1pf(expf(u));
            float na = -expf(wat(A_log, h));
            g[i] = na * sp;
        }
    }
}

/* The delta rule, conv1d_silu, l2norm and gated_rmsnorm live in cpu_gdn.c, attention in
 * cpu_attention.c (cpu_mixers.h). */
static void cpu_delta_rule(clef_ops *ops, float *o, const float *q, const float *k, const float *v,
                           const float *beta, const float *g, size_t Hk, size_t Hv, size_t dk, size_t dv,
                           size_t chunk, const clef_seg *segs, size_t nseg, const clef_seg_state *st) {
    if (clef_cpu_delta_rule_segs(POOL(ops), o, q, k, v, beta, g, Hk, Hv, dk, dv, chunk, segs, nseg, st))
        clef_ops_fail(ops, CLEF_OPS_OOM, "delta_rule: out of memory for its scratch (%zu v-heads, chunk %zu)", Hv, chunk);
}

/* ---------------------------------------------------------------- attention */

/* fp32 products on the default path (as its GEMMs accumulate in fp32; the AVX-512 kernel, or its
 * AVX2 twin with the same bits), double accumulation on the parity path (CLEF_LINEAR=double) and
 * where neither AVX-512 nor AVX2 + FMA is available. */
/* One kernel call per segment (each plans its own query blocks over the workers). */
static void cpu_attention(clef_ops *ops, float *o, size_t ldo, const float *q, size_t ldq, const float *k,
                          size_t ldk, const float *v, size_t ldv, const clef_attn_seg *segs, size_t nseg,
                          size_t nh, size_t nkv, size_t hd, float scale, int causal) {
    int (*kernel)(clef_pool *, float *, size_t, const float *, size_t, const float *, size_t, const float *,
                  size_t, size_t, size_t, size_t, size_t, size_t, float, int) =
        linear_force_double(ops) ? clef_cpu_attention
        : clef_simd_ok()         ? clef_cpu_attention_f32
        : clef_simd2_ok()        ? clef_cpu_attention_f32_avx2
                                 : clef_cpu_attention;
    for (size_t i = 0; i < nseg; i++) {
        const clef_attn_seg *sg = &segs[i];
        if (kernel(POOL(ops), o + sg->q0 * ldo, ldo, q + sg->q0 * ldq, ldq, k + sg->k0 * ldk, ldk, v + sg->k0 * ldv,
                ldv, sg->nq, sg->nk, nh, nkv, hd, scale, causal)) {
            clef_ops_fail(ops, CLEF_OPS_OOM, "attention: out of memory for the workers' scores (%zu keys)", sg->nk);
            return;
        }
    }
}

/* ---------------------------------------------------------------- elementwise */

typedef struct { float *y; const float *a, *b; int kind; } ew_ctx;
enum { E_SILU_MUL, E_GELU, E_GELU_TANH, E_SIGMOID_MUL, E_ADD };

static void ew_fn(void *c_, size_t b, size_t e, int worker) {
    (void)worker;
    ew_ctx *c = c_;
    float *y = c->y;
    const float *A = c->a, *B = c->b;
    switch (c->kind) {
    case E_SILU_MUL:
        for (size_t i = b; i < e; i++) y[i] = siluf_(A[i]) * B[i];
        break;
    case E_GELU:
        for (size_t i = b; i < e; i++) {
            double x = y[i];
            y[i] = (float)(0.5 * x * (1.0 + erf(x * 0.70710678118654752440)));
        }
        break;
    case E_GELU_TANH: /* 0.5 x (1 + tanh u) as x / (1 + exp(-2u)), in double: cpu_simd.h */
        for (size_t i = b; i < e; i++) y[i] = clef_gelu_tanh1(y[i]);
        break;
    case E_SIGMOID_MUL:
        for (size_t i = b; i < e; i++) y[i] = y[i] * sigmoidf_(A[i]);
        break;
    case E_ADD:
        for (size_t i = b; i < e; i++) y[i] = A[i] + B[i];
        break;
    }
}

/* The same ops with the AVX-512 or AVX2 loops (cpu_simd.h: the same bits). */
static void ew_simd_fn(void *c_, size_t b, size_t e, int worker) {
    (void)worker;
    ew_ctx *c = c_;
    const clef_simd_loops *L = clef_simd_loops_here();
    switch (c->kind) {
    case E_SILU_MUL: L->silu_mul(c->y + b, c->a + b, c->b + b, e - b); break;
    case E_SIGMOID_MUL: L->sigmoid_mul(c->y + b, c->a + b, e - b); break;
    case E_ADD: L->add(c->y + b, c->a + b, c->b + b, e - b); break;
    case E_GELU_TANH: L->gelu_tanh(c->y + b, e - b); break;
    default: ew_fn(c_, b, e, worker); break;
    }
}

static void ew(clef_ops *ops, float *y, const float *a, const float *b, size_t n, int kind) {
    ew_ctx c = {y, a, b, kind};
    clef_pool_for(POOL(ops), n, 4096, clef_simd_loops_here() ? ew_simd_fn : ew_fn, &c);
}
static void cpu_silu_mul(clef_ops *ops, float *y, const float *gate, const float *up, size_t n) { ew(ops, y, gate, up, n, E_SILU_MUL); }
static void cpu_gelu(clef_ops *ops, float *x, size_t n, int tanh_approx) { ew(ops, x, NULL, NULL, n, tanh_approx ? E_GELU_TANH : E_GELU); }
static void cpu_sigmoid_mul(clef_ops *ops, float *x, const float *gate, size_t n) { ew(ops, x, gate, NULL, n, E_SIGMOID_MUL); }
static void cpu_add(clef_ops *ops, float *y, const float *a, const float *b, size_t n) { ew(ops, y, a, b, n, E_ADD); }

/* ---------------------------------------------------------------- table */

static void cpu_destroy(clef_ops *ops) {
    if (!ops) return;
    cpu_impl *im = ops->impl;
    if (im) {
        clef_pool_destroy(im->pool);
        clef_arena_destroy(im->arena);
    }
    free(im);
    free(ops);
}

clef_ops *clef_cpu_ops_create(int nthreads, const clef_knobs *knobs, clef_err *err) {
    return clef_cpu_ops_create_prec(nthreads, CLEF_CPU_FP32, knobs, NULL, err);
}

clef_ops *clef_cpu_ops_create_prec(int nthreads, int precision, const clef_knobs *knobs, const char **note,
                                   clef_err *err) {
    if (note) *note = NULL;
    if (precision != CLEF_CPU_FP32 && precision != CLEF_CPU_FAST && precision != CLEF_CPU_BF16 &&
        precision != CLEF_CPU_INT8) {
        clef_err_set(err, CLEF_E_BAD_MODEL, "unknown precision %d", precision);
        return NULL;
    }
    if (!knobs) knobs = clef_knobs_env();
    clef_ops *ops = calloc(1, sizeof *ops);
    cpu_impl *im = calloc(1, sizeof *im);
    if (!ops || !im) {
        free(ops);
        free(im);
        clef_err_set(err, CLEF_E_OOM, "out of memory creating the CPU backend");
        return NULL;
    }
    im->linear_double = knobs->linear_double;
    im->gemm = clef_gemm_named(knobs->gemm);
    im->int8 = precision == CLEF_CPU_INT8;
    im->amx_packed = knobs->amx_packed && !knobs->linear_double && im->gemm == CLEF_GEMM_AMX && !im->int8;
    /* fast and bf16 would round the activations to bf16 terms for AMX or AVX512-BF16; the library
     * has no such CPU kernel yet (none could be measured: docs/precision.md), so they run exact */
    if (note && precision == CLEF_CPU_FAST)
        *note = "--precision fast has no CPU kernel here (it needs AMX: two bf16 terms); running fp32 (exact)";
    if (note && precision == CLEF_CPU_BF16)
        *note = "--precision bf16 has no CPU kernel here (it needs AMX or AVX512-BF16); running fp32 (exact)";
    im->arena = clef_arena_create(cache_cap(knobs));
    if (im->arena) clef_arena_set_poison(im->arena, knobs->arena_poison);
    if (!im->arena) {
        free(ops);
        free(im);
        clef_err_set(err, CLEF_E_OOM, "out of memory creating the CPU backend");
        return NULL;
    }
    im->pool = clef_pool_create(nthreads, err);
    if (!im->pool) { clef_arena_destroy(im->arena); free(ops); free(im); return NULL; }
    im->nthreads = clef_pool_size(im->pool);
    ops->name = im->int8 ? "cpu-int8" : "cpu";
    ops->host_memory = 1;
    ops->impl = im;
    ops->destroy = cpu_destroy;
    ops->buffer_stats = cpu_buffer_stats;
    ops->alloc = cpu_alloc;
    ops->alloc_kept = cpu_alloc_kept;
    ops->free = cpu_free;
    ops->upload = cpu_upload;
    ops->download = cpu_download;
    ops->copy2d = cpu_copy2d;
    ops->embed = cpu_embed;
    ops->row_mean = cpu_row_mean;
    ops->prepare_weight = cpu_prepare_weight;
    ops->linear = cpu_linear;
    ops->rmsnorm = cpu_rmsnorm;
    ops->layernorm = cpu_layernorm;
    ops->l2norm = cpu_l2norm;
    ops->gated_rmsnorm = cpu_gated_rmsnorm;
    ops->rope = cpu_rope;
    ops->can_resume = 1;
    ops->conv1d_silu = cpu_conv1d_silu;
    ops->gdn_gates = cpu_gdn_gates;
    ops->delta_rule = cpu_delta_rule;
    ops->attention = cpu_attention;
    ops->silu_mul = cpu_silu_mul;
    ops->gelu = cpu_gelu;
    ops->sigmoid_mul = cpu_sigmoid_mul;
    ops->add = cpu_add;
    return ops;
}
