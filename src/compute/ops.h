/* The op interface the model code calls (text forward, vision tower, head). A backend
 * (cpu/, cuda/) fills a clef_ops table of function pointers; model code never sees a
 * backend type.
 *
 * Conventions
 * - Activations are contiguous fp32 "device" buffers obtained from ops->alloc (on the CPU backend
 *   plain host memory; ops->host_memory says so). Sizes and strides are in floats. `ld*` is the
 *   distance between consecutive rows.
 * - Weights are clef_tensor views (compute/tensor.h) of the mapped checkpoint, BF16 or F32 (F16
 *   accepted too), row-major. A backend may cache device copies keyed by the tensor's data
 *   pointer; the model passes the tensors as bound by model/weights.h, with the backend's
 *   prepared form (prepare_weight) in w->prep where it made one.
 * - Arrays documented as "host" (token ids, positions) are ordinary host memory.
 * - Ops do not fail on valid arguments. A backend that cannot run an op (out of scratch memory, a
 *   device error, a shape it does not support) records why with clef_ops_fail and leaves the output
 *   unspecified: ops->status is a value (a code and the backend's message), sticky, the first
 *   failure kept. Callers check clef_ops_failed at safe points (the model does after each layer)
 *   and turn the status into their clef_err with clef_ops_take, which clears it.
 * - Every op computes each output element inside one worker, so results do not depend on the
 *   thread count. Long sums accumulate in double on the CPU backend.
 * - Unless stated, output buffers must not overlap inputs; "in place" ops say so. */
#ifndef CLEF_COMPUTE_OPS_H
#define CLEF_COMPUTE_OPS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/err.h"
#include "compute/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct clef_ops clef_ops;

/* Why an op failed (clef_ops.status.code). */
enum {
    CLEF_OPS_OK = 0,
    CLEF_OPS_OOM = 1,    /* host or device memory ran out: reported as OutOfMemory */
    CLEF_OPS_DEVICE = 2, /* the device (CUDA, cuBLAS) refused or faulted: InternalError with its text */
    CLEF_OPS_SHAPE = 3   /* arguments this backend does not support: InternalError */
};

typedef struct clef_ops_status {
    int code;      /* CLEF_OPS_*: the first failure since the last clef_ops_take / clef_ops_clear */
    char msg[256]; /* the backend's words, e.g. "attention: out of memory for 4 workers' scores" */
} clef_ops_status;

/* Packed forwards: one op call covers several records, each a segment of consecutive rows. Ops that
 * mix rows (conv1d, the delta rule, attention) never mix two segments; every other op is per row,
 * so a record's bits do not depend on its company (docs/architecture.md "Packed forwards"). */
typedef struct clef_seg {
    size_t row0, n;   /* rows [row0, row0 + n) of the packed buffers */
} clef_seg;

/* The recurrent state of one segment in a sequential mixer (device buffers; layout per op). */
typedef struct clef_seg_state {
    const float *in;  /* the state before the segment's first row; NULL: zeros (a record's start) */
    float *out;       /* NULL, or where the state after `snap` rows is written */
    size_t snap;
} clef_seg_state;

/* One segment of an attention call. */
typedef struct clef_attn_seg {
    size_t q0, nq;    /* query (and output) rows */
    size_t k0, nk;    /* key / value rows; causal needs nk >= nq */
} clef_attn_seg;

/* A backend's own form of one weight tensor (e.g. the CPU's AMX kernel layout), made once at load
 * by ops->prepare_weight. The model owns it (clef_tensor.prep; model/weights.h): it is freed with
 * destroy, which needs no clef_ops, so the model may outlive the backend or the reverse. A
 * backend uses only the ones it made (kind, compared by address) and reads the tensor's data
 * otherwise. Backends embed this as the first member of their own struct. */
typedef struct clef_prepared {
    const void *kind;                         /* the address of a backend's tag */
    size_t bytes;                             /* memory held (for reports) */
    void (*destroy)(struct clef_prepared *p);
} clef_prepared;

/* What a backend's activation buffers hold (ops->buffer_stats). Bytes of the blocks it manages
 * (small ones may go straight to the C allocator and are not counted). */
typedef struct {
    size_t held_bytes;                  /* memory the backend keeps for activations (in use or free) */
    size_t cached_bytes, cached_blocks; /* the free part of it; the pieces that free part is in */
    size_t live_bytes, peak_live_bytes; /* handed out now / at most at once so far */
    uint64_t hits, misses, released;    /* requests served from the cache / fresh; blocks given back */
} clef_ops_buffers;

struct clef_ops {
    const char *name;     /* "cpu", ... */
    int host_memory;      /* 1: device buffers are host memory (pointers may be used directly) */
    clef_ops_status status; /* sticky: why an op failed (clef_ops_fail); code 0 while none did */
    int can_resume;       /* 1: conv1d_silu and delta_rule honour clef_seg_state and causal attention
                             takes cached keys (nk > nq); the engine's state cache needs it */
    void *impl;           /* backend state */

    void (*destroy)(clef_ops *ops);

    /* Optional (NULL: nothing to report): the backend's activation buffers, for /metrics.
     * Thread-safe; may be called while a forward runs. */
    void (*buffer_stats)(clef_ops *ops, clef_ops_buffers *out);

    /* ---- memory (n in floats) ---- */
    float *(*alloc)(clef_ops *ops, size_t n);                 /* NULL when out of memory */
    /* Optional (NULL: alloc; clef_ops_alloc_kept): a buffer that outlives the forward (the state
     * cache's saved states), freed with ops->free like any other. The CPU backend does not take
     * these from the pool of its activations, so long-lived blocks do not sit among each forward's
     * short-lived ones (the soak's pool peak in use: 73.1 -> 54.6 MB; docs/reliability.md). */
    float *(*alloc_kept)(clef_ops *ops, size_t n);
    void (*free)(clef_ops *ops, float *p);                    /* NULL ok */
    void (*upload)(clef_ops *ops, float *dst, const float *host_src, size_t n);
    void (*download)(clef_ops *ops, float *host_dst, const float *src, size_t n);
    /* y[r, c] = x[r, c] for r < rows, c < cols (strided copy; a gather of columns). */
    void (*copy2d)(clef_ops *ops, float *y, size_t ldy, const float *x, size_t ldx, size_t rows,
                   size_t cols);

    /* ---- gathers ---- */
    /* y[i, :] = table[ids[i], :] converted to fp32; table [V, D]; ids host, each in [0, V). */
    void (*embed)(clef_ops *ops, float *y, const clef_tensor *table, const int32_t *ids, size_t n);
    /* y[d] = mean over rows r in [r0, r1) of x[r, d]; x has row stride ldx. NaN when r1 <= r0
     * (torch's mean of an empty slice). */
    void (*row_mean)(clef_ops *ops, float *y, const float *x, size_t ldx, size_t r0, size_t r1,
                     size_t D);

    /* ---- weights (optional: NULL when the backend has nothing to prepare) ---- */
    /* Called by the model once per Linear weight ([N, ...] with K = numel / N) at load. Returns the
     * backend's form of w, or NULL (nothing to prepare here, or out of memory: linear then reads
     * w->data, as without the hook). Once it returns non-NULL the model may release the pages of
     * w->data (they fault back in if read). */
    clef_prepared *(*prepare_weight)(clef_ops *ops, const clef_tensor *w);

    /* ---- linear algebra ---- */
    /* nn.Linear on a block of weight rows: y[t, n] = sum_k x[t, k] * W[row0 + n, k] (+ b[row0 + n])
     * for t < T, n < N; K = W.shape[last]; x [T, K] and y [T, N] contiguous. b may be NULL. */
    void (*linear)(clef_ops *ops, float *y, const float *x, size_t T, const clef_tensor *w,
                   size_t row0, size_t N, const clef_tensor *b);

    /* ---- norms (per row of D values; rows at stride ldx in, ldy out; y may equal x when
     *      ldy == ldx) ---- */
    /* y = x * rsqrt(mean(x^2) + eps) * (offset ? 1 + w : w), w [D]. */
    void (*rmsnorm)(clef_ops *ops, float *y, size_t ldy, const float *x, size_t ldx, size_t rows,
                    size_t D, const clef_tensor *w, int offset, float eps);
    /* y = (x - mean) / sqrt(var + eps) * w + b, biased variance; contiguous rows; in place ok. */
    void (*layernorm)(clef_ops *ops, float *y, const float *x, size_t rows, size_t D,
                      const clef_tensor *w, const clef_tensor *b, float eps);
    /* In place: x = x * rsqrt(sum(x^2) + eps) (eps inside the SUM), then x = x * scale when
     * scale != 1 (a second rounding, as torch does). Rows of D at stride ld. */
    void (*l2norm)(clef_ops *ops, float *x, size_t ld, size_t rows, size_t D, float eps, float scale);
    /* Qwen3_5RMSNormGated: y = w * (x * rsqrt(mean(x^2) + eps)) * silu(z), rows of D
     * contiguous in x, z, y (y may equal x); w [D] a plain multiplier. */
    void (*gated_rmsnorm)(clef_ops *ops, float *y, const float *x, const float *z, size_t rows,
                          size_t D, const clef_tensor *w, float eps);

    /* ---- position ---- */
    /* In place rotate-half rotary on the first `rot` dims of every head: x[t, h, :] at
     * x + t*ld + h*hd, for t < T, h < nh. cos/sin are device tables [T, rot/2] (the half table;
     * dims d and d + rot/2 share angle d):
     *   x'[d] = x[d]*c - x[d+rot/2]*s,  x'[d+rot/2] = x[d+rot/2]*c + x[d]*s. */
    void (*rope)(clef_ops *ops, float *x, size_t ld, size_t T, size_t nh, size_t hd, size_t rot,
                 const float *cos, const float *sin);

    /* ---- Gated DeltaNet ---- */
    /* Causal depthwise conv1d (kernel K from w [C, 1, K], tap K-1 = current token, no bias)
     * followed by SiLU, per segment: segment s covers rows [segs[s].row0, + n) of x and y [*, C]
     * (contiguous) and sees, before its first row, the K-1 input rows of st[s].in ([K-1, C],
     * oldest first) or zeros when st (or st[s].in) is NULL. When st[s].out is set, the K-1 input
     * rows before row st[s].snap of the segment (0 < snap <= n) are written there, in the same
     * layout: the window a later forward resumes from. */
    void (*conv1d_silu)(clef_ops *ops, float *y, const float *x, size_t C, const clef_tensor *w,
                        const clef_seg *segs, size_t nseg, const clef_seg_state *st);
    /* beta = sigmoid(b); g = -exp(A_log) * softplus(a + dt_bias) (torch softplus, threshold 20).
     * a, b, beta, g [T, H] contiguous; A_log, dt_bias [H]. */
    void (*gdn_gates)(clef_ops *ops, float *beta, float *g, const float *b, const float *a,
                      size_t T, size_t H, const clef_tensor *A_log, const clef_tensor *dt_bias);
    /* The chunked gated delta rule (model.md §4.4.6) per segment: chunks of `chunk` tokens aligned
     * at each segment's first row, starting from the state st[s].in ([Hv, dk, dv] fp32) or zeros
     * when st (or st[s].in) is NULL. q [*, Hk, dk] (already l2-normalized and scaled), k [*, Hk, dk]
     * (l2-normalized), v [*, Hv, dv], beta, g [*, Hv]; o [*, Hv, dv]; rows as in segs. v-head h
     * uses k-head h / (Hv / Hk). When st[s].out is set, the state after the segment's first
     * st[s].snap rows is written there (snap a multiple of chunk, or n): resuming from it at that
     * row gives the bits of the uninterrupted run. All contiguous. */
    void (*delta_rule)(clef_ops *ops, float *o, const float *q, const float *k, const float *v,
                       const float *beta, const float *g, size_t Hk, size_t Hv, size_t dk, size_t dv,
                       size_t chunk, const clef_seg *segs, size_t nseg, const clef_seg_state *st);

    /* ---- attention ---- */
    /* Multi-head softmax attention with grouped kv heads, per segment (block diagonal): segment s
     * has query rows [q0, q0 + nq) and key rows [k0, k0 + nk). Query head h (< nh) uses kv head
     * h / (nh / nkv). q row i head h at q + i*ldq + h*hd; k, v row t kv head j at k + t*ldk + j*hd
     * (v likewise with ldv); o row i head h at o + i*ldo + h*hd.
     *   o_h[i] = sum_t softmax_t(scale * q_h[i] . k_j[t]) v_j[t],
     * over the segment's keys t < nk, or, when causal, t <= i + (nk - nq) (the last nq keys are
     * the queries' own rows; earlier ones came from a cache). A row's bits depend only on its
     * keys, never on the other segments. Memory O(nk) per worker. */
    void (*attention)(clef_ops *ops, float *o, size_t ldo, const float *q, size_t ldq,
                      const float *k, size_t ldk, const float *v, size_t ldv,
                      const clef_attn_seg *segs, size_t nseg, size_t nh, size_t nkv, size_t hd,
                      float scale, int causal);

    /* ---- elementwise (n floats, contiguous) ---- */
    void (*silu_mul)(clef_ops *ops, float *y, const float *gate, const float *up, size_t n); /* y = silu(gate)*up; y may alias */
    void (*gelu)(clef_ops *ops, float *x, size_t n, int tanh_approx); /* in place; erf form when tanh_approx == 0 */
    void (*sigmoid_mul)(clef_ops *ops, float *x, const float *gate, size_t n); /* x *= sigmoid(gate) */
    void (*add)(clef_ops *ops, float *y, const float *a, const float *b, size_t n); /* y = a + b; y may alias a or b */
};

/* Records a failure (the first one is kept: later ones are its consequences). Returns -1. */
int clef_ops_fail(clef_ops *ops, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static inline float *clef_ops_alloc_kept(clef_ops *ops, size_t n) {
    return ops->alloc_kept ? ops->alloc_kept(ops, n) : ops->alloc(ops, n);
}
static inline int clef_ops_failed(const clef_ops *ops) { return ops->status.code != CLEF_OPS_OK; }
static inline void clef_ops_clear(clef_ops *ops) {
    ops->status.code = CLEF_OPS_OK;
    ops->status.msg[0] = '\0';
}
/* Turns a recorded failure into err ("<where>: <the backend's message>"; OutOfMemory for
 * CLEF_OPS_OOM, InternalError otherwise) and clears it. Returns 0 when no op failed, else -1. */
int clef_ops_take(clef_ops *ops, const char *where, clef_err *err);

/* Attention over one segment: Tq query rows against Tk key rows (the common case). */
static inline void clef_attention1(clef_ops *ops, float *o, size_t ldo, const float *q, size_t ldq,
                                   const float *k, size_t ldk, const float *v, size_t ldv, size_t Tq,
                                   size_t Tk, size_t nh, size_t nkv, size_t hd, float scale, int causal) {
    clef_attn_seg s = {0, Tq, 0, Tk};
    ops->attention(ops, o, ldo, q, ldq, k, ldk, v, ldv, &s, 1, nh, nkv, hd, scale, causal);
}

/* Reads element i of a weight tensor as fp32 on the host (BF16, F16 or F32; 0 for other dtypes).
 * Weights are always host-mapped, so this works for any backend; meant for scalars and small
 * tables, not for bulk data. */
static inline float clef_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline float clef_half_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
    if (e == 0x1fu) {
        u = sign | 0x7f800000u | (m << 13);
    } else if (e != 0) {
        u = sign | ((e + 112u) << 23) | (m << 13);
    } else if (m == 0) {
        u = sign;
    } else { /* subnormal: normalize */
        e = 113u;
        while (!(m & 0x400u)) { m <<= 1; e--; }
        u = sign | (e << 23) | ((m & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline float clef_tensor_f32_at(const clef_tensor *t, int64_t i) {
    if (t->dtype == CLEF_ST_BF16) return clef_bf16_to_f32(((const uint16_t *)t->data)[i]);
    if (t->dtype == CLEF_ST_F32) return ((const float *)t->data)[i];
    if (t->dtype == CLEF_ST_F16) return clef_half_to_f32(((const uint16_t *)t->data)[i]);
    return 0.0f;
}

#ifdef __cplusplus
}
#endif

#endif
