/* CUDA graphs for whole forward passes (docs/cuda.md "Graphs"): clef_cuda_graph_run runs a caller's
 * pass function (a text forward) so that, from the third call with the same key on, the GPU work is
 * one cudaGraphLaunch instead of ~20 launches per layer. Off by default ($CLEF_CUDA_GRAPH=1 or
 * clef_cuda_set_graph): no device run has measured it yet.
 *
 * Per key (a shape: the caller's token count, or a hash of a packed batch's layout):
 *  1. first call, eager: the pass runs as always; weights get uploaded, GEMM plans chosen, kernel
 *     attributes set, and the bytes uploaded from the host and the arena's peak are measured;
 *  2. second call, capture: the pass runs with the stream in capture mode (relaxed). Allocations come
 *     from the graph's own pool (an arena kept with the graph, sized from step 1), host uploads go
 *     through the graph's pinned staging buffer, and every call into the op table is folded into a
 *     fingerprint (op, pointers, sizes, scalars, weight identities). Anything a graph cannot hold
 *     makes the capture give up and the pass rerun eagerly, the key then stays eager: a download or
 *     clef_cuda_sync inside the pass (a host sync), a weight first used during the capture, an error,
 *     or an allocation still live at the end (it would be reused by the next replay);
 *  3. later calls, replay: the pass's host code runs again but the ops do no GPU work; allocations
 *     replay the pool's deterministic first-fit (op-internal scratch is freed inside each op, so the
 *     pool's free map after an op is what it was before), uploads copy the new host data into the
 *     same staging slots, and the fingerprint is recomputed. Equal fingerprint and call count: one
 *     cudaGraphLaunch. Different (another output buffer, another layout with the same key): the pass
 *     reruns eagerly and the key is captured again (after 3 misses it stays eager).
 * Before a replay refills the staging it waits for the previous launch of that graph (an event).
 * Profiling (clef_cuda_profile) runs passes eagerly. */
#include "compute/cuda/cuda_internal.cuh"

#include <stdlib.h>
#include <string.h>

namespace clefcu {

static const uint64_t FP_SEED = 0xcbf29ce484222325ull;

static inline void fmix(Impl *im, uint64_t v) {
    uint64_t h = (im->gfp ^ v) * 0x100000001b3ull;
    im->gfp = h ^ (h >> 29);
}
static inline void fp_arg(Impl *im, size_t v) { fmix(im, (uint64_t)v); }
static inline void fp_arg(Impl *im, int v) { fmix(im, (uint64_t)(int64_t)v); }
static inline void fp_arg(Impl *im, float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    fmix(im, u);
}
static inline void fp_arg(Impl *im, const void *p) { fmix(im, (uint64_t)(uintptr_t)p); }
static inline void fp_arg(Impl *im, const clef_tensor *t) {
    fmix(im, (uint64_t)(uintptr_t)(t ? t->data : nullptr));
    if (t) {
        fmix(im, (uint64_t)t->numel);
        fmix(im, (uint64_t)t->dtype);
        fmix(im, (uint64_t)t->shape[0]);
    }
}
/* host arrays of segments: their contents (kernel arguments baked into the graph) */
struct SegArg {
    const clef_seg *s;
    size_t n;
    const clef_seg_state *st;
};
struct AttnSegArg {
    const clef_attn_seg *s;
    size_t n;
};
static inline void fp_arg(Impl *im, SegArg a) {
    fmix(im, (uint64_t)a.n);
    for (size_t i = 0; a.s && i < a.n; i++) {
        fmix(im, (uint64_t)a.s[i].row0);
        fmix(im, (uint64_t)a.s[i].n);
        if (a.st) {
            fmix(im, (uint64_t)(uintptr_t)a.st[i].in);
            fmix(im, (uint64_t)(uintptr_t)a.st[i].out);
            fmix(im, (uint64_t)a.st[i].snap);
        }
    }
}
static inline void fp_arg(Impl *im, AttnSegArg a) {
    fmix(im, (uint64_t)a.n);
    for (size_t i = 0; a.s && i < a.n; i++) {
        fmix(im, (uint64_t)a.s[i].q0);
        fmix(im, (uint64_t)a.s[i].nq);
        fmix(im, (uint64_t)a.s[i].k0);
        fmix(im, (uint64_t)a.s[i].nk);
    }
}
static inline void fp_all(Impl *) {}
template <typename A, typename... R> static inline void fp_all(Impl *im, A a, R... r) {
    fp_arg(im, a);
    fp_all(im, r...);
}

/* Folds one op call into the pass's fingerprint; true when the op must not run (a replay). */
template <typename... A> static inline bool graph_call(clef_ops *ops, int op, A... args) {
    Impl *im = IM(ops);
    if (im->gmode == G_OFF) return false;
    im->gcalls++;
    fmix(im, (uint64_t)op + 1);
    fp_all(im, args...);
    return im->gmode == G_REPLAY;
}

/* A replay's upload: the host bytes into the next staging slot (the captured memcpy reads it). */
static void replay_stage(clef_ops *ops, const void *src, size_t bytes) {
    Impl *im = IM(ops);
    GraphEntry *g = im->gcur;
    if (!bytes) return;
    size_t a = (bytes + 15) & ~(size_t)15;
    if (!g->stage || a > g->stage_size - g->stage_cur) {
        graph_break(ops, "more host uploads than the capture made");
        return;
    }
    memcpy(g->stage + g->stage_cur, src, bytes);
    g->stage_cur += a;
}

/* ---------------------------------------------------------------- the op table */

static float *w_alloc(clef_ops *ops, size_t n) {
    float *p = cu_alloc(ops, n);
    graph_call(ops, OP_COUNT + 1, n, (const void *)p);
    return p;
}
static void w_free(clef_ops *ops, float *p) {
    graph_call(ops, OP_COUNT + 2, (const void *)p);
    cu_free(ops, p);
}
static void w_upload(clef_ops *ops, float *dst, const float *src, size_t n) {
    if (graph_call(ops, OP_UPLOAD, (const void *)dst, n)) { /* not src: the host data is what changes */
        replay_stage(ops, src, n * sizeof(float));
        return;
    }
    cu_upload(ops, dst, src, n);
}
static void w_download(clef_ops *ops, float *dst, const float *src, size_t n) {
    cu_download(ops, dst, src, n); /* breaks a capture / replay itself */
}
static void w_copy2d(clef_ops *ops, float *y, size_t ldy, const float *x, size_t ldx, size_t rows, size_t cols) {
    if (graph_call(ops, OP_COPY2D, (const void *)y, ldy, (const void *)x, ldx, rows, cols)) return;
    op_copy2d(ops, y, ldy, x, ldx, rows, cols);
}
static void w_embed(clef_ops *ops, float *y, const clef_tensor *table, const int32_t *ids, size_t n) {
    if (graph_call(ops, OP_EMBED, (const void *)y, table, n)) { /* the ids are data: staged */
        replay_stage(ops, ids, n * sizeof(int32_t));
        return;
    }
    op_embed(ops, y, table, ids, n);
}
static void w_row_mean(clef_ops *ops, float *y, const float *x, size_t ldx, size_t r0, size_t r1, size_t D) {
    if (graph_call(ops, OP_ROW_MEAN, (const void *)y, (const void *)x, ldx, r0, r1, D)) return;
    op_row_mean(ops, y, x, ldx, r0, r1, D);
}
static void w_linear(clef_ops *ops, float *y, const float *x, size_t T, const clef_tensor *w, size_t row0, size_t N,
                     const clef_tensor *b) {
    if (graph_call(ops, OP_LINEAR, (const void *)y, (const void *)x, T, w, row0, N, b)) return;
    op_linear(ops, y, x, T, w, row0, N, b);
}
static void w_rmsnorm(clef_ops *ops, float *y, size_t ldy, const float *x, size_t ldx, size_t rows, size_t D,
                      const clef_tensor *w, int offset, float eps) {
    if (graph_call(ops, OP_RMSNORM, (const void *)y, ldy, (const void *)x, ldx, rows, D, w, offset, eps)) return;
    op_rmsnorm(ops, y, ldy, x, ldx, rows, D, w, offset, eps);
}
static void w_layernorm(clef_ops *ops, float *y, const float *x, size_t rows, size_t D, const clef_tensor *w,
                        const clef_tensor *b, float eps) {
    if (graph_call(ops, OP_LAYERNORM, (const void *)y, (const void *)x, rows, D, w, b, eps)) return;
    op_layernorm(ops, y, x, rows, D, w, b, eps);
}
static void w_l2norm(clef_ops *ops, float *x, size_t ld, size_t rows, size_t D, float eps, float scale) {
    if (graph_call(ops, OP_L2NORM, (const void *)x, ld, rows, D, eps, scale)) return;
    op_l2norm(ops, x, ld, rows, D, eps, scale);
}
static void w_gated_rmsnorm(clef_ops *ops, float *y, const float *x, const float *z, size_t rows, size_t D,
                            const clef_tensor *w, float eps) {
    if (graph_call(ops, OP_GATED_RMSNORM, (const void *)y, (const void *)x, (const void *)z, rows, D, w, eps)) return;
    op_gated_rmsnorm(ops, y, x, z, rows, D, w, eps);
}
static void w_rope(clef_ops *ops, float *x, size_t ld, size_t T, size_t nh, size_t hd, size_t rot, const float *cs,
                   const float *sn) {
    if (graph_call(ops, OP_ROPE, (const void *)x, ld, T, nh, hd, rot, (const void *)cs, (const void *)sn)) return;
    op_rope(ops, x, ld, T, nh, hd, rot, cs, sn);
}
static void w_conv1d_silu(clef_ops *ops, float *y, const float *x, size_t C, const clef_tensor *w, const clef_seg *segs,
                          size_t nseg, const clef_seg_state *st) {
    if (graph_call(ops, OP_CONV1D_SILU, (const void *)y, (const void *)x, C, w, SegArg{segs, nseg, st})) return;
    op_conv1d_silu(ops, y, x, C, w, segs, nseg, st);
}
static void w_gdn_gates(clef_ops *ops, float *beta, float *g, const float *b, const float *a, size_t T, size_t H,
                        const clef_tensor *A_log, const clef_tensor *dt_bias) {
    if (graph_call(ops, OP_GDN_GATES, (const void *)beta, (const void *)g, (const void *)b, (const void *)a, T, H, A_log,
                   dt_bias))
        return;
    op_gdn_gates(ops, beta, g, b, a, T, H, A_log, dt_bias);
}
static void w_delta_rule(clef_ops *ops, float *o, const float *q, const float *k, const float *v, const float *beta,
                         const float *g, size_t Hk, size_t Hv, size_t dk, size_t dv, size_t chunk, const clef_seg *segs,
                         size_t nseg, const clef_seg_state *st) {
    Impl *im = IM(ops);
    if (graph_call(ops, OP_DELTA_RULE, (const void *)o, (const void *)q, (const void *)k, (const void *)v,
                   (const void *)beta, (const void *)g, Hk, Hv, dk, dv, chunk, SegArg{segs, nseg, st},
                   im->delta_kernel))
        return;
    op_delta_rule(ops, o, q, k, v, beta, g, Hk, Hv, dk, dv, chunk, segs, nseg, st);
}
static void w_attention(clef_ops *ops, float *o, size_t ldo, const float *q, size_t ldq, const float *k, size_t ldk,
                        const float *v, size_t ldv, const clef_attn_seg *segs, size_t nseg, size_t nh, size_t nkv,
                        size_t hd, float scale, int causal) {
    Impl *im = IM(ops);
    if (graph_call(ops, OP_ATTENTION, (const void *)o, ldo, (const void *)q, ldq, (const void *)k, ldk, (const void *)v,
                   ldv, AttnSegArg{segs, nseg}, nh, nkv, hd, scale, causal, im->attn_kernel))
        return;
    op_attention(ops, o, ldo, q, ldq, k, ldk, v, ldv, segs, nseg, nh, nkv, hd, scale, causal);
}
static void w_silu_mul(clef_ops *ops, float *y, const float *gate, const float *up, size_t n) {
    if (graph_call(ops, OP_SILU_MUL, (const void *)y, (const void *)gate, (const void *)up, n)) return;
    op_silu_mul(ops, y, gate, up, n);
}
static void w_gelu(clef_ops *ops, float *x, size_t n, int tanh_approx) {
    if (graph_call(ops, OP_GELU, (const void *)x, n, tanh_approx)) return;
    op_gelu(ops, x, n, tanh_approx);
}
static void w_sigmoid_mul(clef_ops *ops, float *x, const float *gate, size_t n) {
    if (graph_call(ops, OP_SIGMOID_MUL, (const void *)x, (const void *)gate, n)) return;
    op_sigmoid_mul(ops, x, gate, n);
}
static void w_add(clef_ops *ops, float *y, const float *a, const float *b, size_t n) {
    if (graph_call(ops, OP_ADD, (const void *)y, (const void *)a, (const void *)b, n)) return;
    op_add(ops, y, a, b, n);
}

void graph_install(clef_ops *ops) {
    ops->alloc = w_alloc;
    ops->free = w_free;
    ops->upload = w_upload;
    ops->download = w_download;
    ops->copy2d = w_copy2d;
    ops->embed = w_embed;
    ops->row_mean = w_row_mean;
    ops->linear = w_linear;
    ops->rmsnorm = w_rmsnorm;
    ops->layernorm = w_layernorm;
    ops->l2norm = w_l2norm;
    ops->gated_rmsnorm = w_gated_rmsnorm;
    ops->rope = w_rope;
    ops->conv1d_silu = w_conv1d_silu;
    ops->gdn_gates = w_gdn_gates;
    ops->delta_rule = w_delta_rule;
    ops->attention = w_attention;
    ops->silu_mul = w_silu_mul;
    ops->gelu = w_gelu;
    ops->sigmoid_mul = w_sigmoid_mul;
    ops->add = w_add;
}

/* ---------------------------------------------------------------- graphs */

static void entry_drop_graph(GraphEntry *g) {
    if (g->exec) cudaGraphExecDestroy(g->exec);
    if (g->graph) cudaGraphDestroy(g->graph);
    g->exec = nullptr;
    g->graph = nullptr;
}

void graph_destroy(clef_ops *ops) {
    Impl *im = IM(ops);
    for (auto &kv : im->graphs) {
        GraphEntry &g = kv.second;
        entry_drop_graph(&g);
        if (g.done) cudaEventDestroy(g.done);
        if (g.stage) cudaFreeHost(g.stage);
        pool_release(&g.pool);
    }
    im->graphs.clear();
}

static void begin_pass(Impl *im, GraphEntry *g, int mode) {
    im->gmode = mode;
    im->gcur = g;
    im->gfp = FP_SEED;
    im->gcalls = 0;
    im->gbroken = false;
    im->gwhy = nullptr;
    im->cur_pool = &g->pool;
    g->stage_cur = 0;
}

static void end_pass(Impl *im) {
    im->gmode = G_OFF;
    im->gcur = nullptr;
    im->cur_pool = &im->main;
}

/* Forgets an error a capture or replay ran into (the eager rerun meets a real one again). */
static void clear_error(clef_ops *ops) {
    Impl *im = IM(ops);
    (void)cudaGetLastError();
    clef_ops_clear(ops);
}

static int eager(clef_ops *ops, clef_cuda_pass_fn fn, void *ctx) {
    IM(ops)->graph_stats[0]++;
    return fn(ops, ctx);
}

static bool launch(clef_ops *ops, GraphEntry *g) {
    Impl *im = IM(ops);
    if (!cuda_ok(ops, cudaGraphLaunch(g->exec, im->stream), "cudaGraphLaunch")) return false;
    return cuda_ok(ops, cudaEventRecord(g->done, im->stream), "graph event");
}

static void make_unsafe(GraphEntry *g, const char *why) {
    g->state = GS_UNSAFE;
    g->why = why ? why : "?";
    entry_drop_graph(g);
    if (g->pool.live == 0) pool_release(&g->pool); /* else a buffer of the pool is still in use */
}

static int warm(clef_ops *ops, GraphEntry *g, clef_cuda_pass_fn fn, void *ctx) {
    Impl *im = IM(ops);
    size_t base = im->main.live_bytes;
    im->main.peak_bytes = base;
    im->gcount = true;
    im->gstage_count = 0;
    int rc = eager(ops, fn, ctx);
    im->gcount = false;
    g->warm_peak = im->main.peak_bytes - base;
    g->stage_need = im->gstage_count;
    if (rc == 0 && !clef_ops_failed(ops)) g->state = GS_WARM;
    return rc;
}

static int capture(clef_ops *ops, GraphEntry *g, clef_cuda_pass_fn fn, void *ctx) {
    Impl *im = IM(ops);
    if (g->stage_size < g->stage_need || !g->stage) {
        if (g->stage) cudaFreeHost(g->stage);
        g->stage = nullptr;
        g->stage_size = 0;
        size_t want = g->stage_need ? g->stage_need : 16;
        if (cudaMallocHost((void **)&g->stage, want) != cudaSuccess) {
            (void)cudaGetLastError();
            g->stage = nullptr;
            make_unsafe(g, "no pinned host memory for the staging");
            return eager(ops, fn, ctx);
        }
        g->stage_size = want;
    }
    if (!g->done && cudaEventCreateWithFlags(&g->done, cudaEventDisableTiming) != cudaSuccess) {
        (void)cudaGetLastError();
        g->done = nullptr;
        make_unsafe(g, "cudaEventCreate failed");
        return eager(ops, fn, ctx);
    }
    /* the pool's first chunk holds the warm run's peak with some room (fragmentation); more are added
     * if needed (cudaMalloc is allowed while capturing in relaxed mode) */
    size_t g0 = g->warm_peak + g->warm_peak / 4;
    g->pool.grow = g0 > ((size_t)64 << 20) ? g0 : ((size_t)64 << 20);
    begin_pass(im, g, G_CAPTURE);
    if (cudaStreamBeginCapture(im->stream, cudaStreamCaptureModeRelaxed) != cudaSuccess) {
        end_pass(im);
        clear_error(ops);
        make_unsafe(g, "cudaStreamBeginCapture failed");
        return eager(ops, fn, ctx);
    }
    int rc = fn(ops, ctx);
    cudaGraph_t graph = nullptr;
    cudaError_t e = cudaStreamEndCapture(im->stream, &graph);
    const char *why = im->gwhy;
    const bool broken = im->gbroken;
    end_pass(im);
    if (!why)
        why = e != cudaSuccess    ? "the capture was invalidated"
              : rc != 0           ? "the pass failed while captured"
              : clef_ops_failed(ops) ? "an op failed while captured"
              : g->pool.live != 0 ? "an allocation outlived the pass"
                                  : nullptr;
    bool ok = e == cudaSuccess && graph && !broken && !why;
    if (ok && cudaGraphInstantiate(&g->exec, graph, 0) != cudaSuccess) {
        ok = false;
        why = "cudaGraphInstantiate failed";
        g->exec = nullptr;
    }
    if (!ok) {
        if (graph) cudaGraphDestroy(graph);
        clear_error(ops);
        make_unsafe(g, why);
        im->graph_stats[3]++;
        return eager(ops, fn, ctx);
    }
    g->graph = graph;
    g->fp = im->gfp;
    g->ncalls = im->gcalls;
    g->state = GS_READY;
    im->graph_stats[1]++;
    if (!launch(ops, g)) return -1;
    return rc;
}

static int replay(clef_ops *ops, GraphEntry *g, clef_cuda_pass_fn fn, void *ctx) {
    Impl *im = IM(ops);
    if (!cuda_ok(ops, cudaEventSynchronize(g->done), "graph event")) return -1; /* the staging is free again */
    begin_pass(im, g, G_REPLAY);
    int rc = fn(ops, ctx);
    const bool same = rc == 0 && !clef_ops_failed(ops) && !im->gbroken && im->gfp == g->fp && im->gcalls == g->ncalls &&
                      g->pool.live == 0;
    const char *why = im->gwhy;
    end_pass(im);
    if (same) {
        im->graph_stats[2]++;
        return launch(ops, g) ? 0 : -1;
    }
    /* another pass under the same key (other buffers or sizes): eager now, captured again next time */
    clear_error(ops);
    im->graph_stats[3]++;
    if (why || g->pool.live != 0 || ++g->misses >= 3) {
        make_unsafe(g, why ? why : g->pool.live ? "an allocation outlived the pass" : "the calls differ on every replay");
    } else {
        entry_drop_graph(g);
        g->state = GS_WARM;
    }
    return eager(ops, fn, ctx);
}

} // namespace clefcu

using namespace clefcu;

extern "C" void clef_cuda_set_graph(clef_ops *ops, int on) {
    Impl *im = IM(ops);
    if (im->gmode == G_OFF) im->graph_on = on != 0;
}

extern "C" int clef_cuda_graph_enabled(const clef_ops *ops) {
    return static_cast<const Impl *>(ops->impl)->graph_on ? 1 : 0;
}

extern "C" int clef_cuda_graph_run(clef_ops *ops, uint64_t key, clef_cuda_pass_fn fn, void *ctx) {
    Impl *im = IM(ops);
    if (!im->graph_on || im->prof_on || im->gmode != G_OFF || clef_ops_failed(ops)) return eager(ops, fn, ctx);
    GraphEntry *g = nullptr;
    auto it = im->graphs.find(key);
    if (it != im->graphs.end()) {
        g = &it->second;
    } else {
        if (im->graphs.size() >= im->graph_max) return eager(ops, fn, ctx);
        try {
            g = &im->graphs[key];
        } catch (...) {
            return eager(ops, fn, ctx);
        }
    }
    switch (g->state) {
    case GS_NEW: return warm(ops, g, fn, ctx);
    case GS_WARM: return capture(ops, g, fn, ctx);
    case GS_READY: return replay(ops, g, fn, ctx);
    default: return eager(ops, fn, ctx);
    }
}

extern "C" void clef_cuda_graph_stats(const clef_ops *ops, clef_cuda_graph_info *s) {
    const Impl *im = static_cast<const Impl *>(ops->impl);
    memset(s, 0, sizeof *s);
    s->eager = im->graph_stats[0];
    s->captured = im->graph_stats[1];
    s->replayed = im->graph_stats[2];
    s->fallbacks = im->graph_stats[3];
    for (auto &kv : im->graphs) {
        if (kv.second.state == GS_READY) s->graphs++;
        if (kv.second.state == GS_UNSAFE) {
            s->unsafe++;
            if (!s->last_unsafe_why[0])
                snprintf(s->last_unsafe_why, sizeof s->last_unsafe_why, "%s", kv.second.why.c_str());
        }
        for (auto &c : kv.second.pool.chunks) s->pool_bytes += c.size;
        s->staging_bytes += kv.second.stage_size;
    }
}
