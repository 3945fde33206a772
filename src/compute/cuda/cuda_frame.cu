/* The CUDA backend's frame, below the op families and the graphs: failures as ops->status, the
 * activation arena and scratch, the weight cache, transfers, per-op timing and graph_break. It calls
 * nothing else of src/compute/cuda/; the op files (cuda_{linear,norm,elementwise,delta,attention}.cu),
 * cuda_graph.cu and cuda_backend.cu (device, stream, the table) call it. */
#include "compute/cuda/cuda_internal.cuh"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

namespace clefcu {

const char *const op_names[OP_COUNT] = {
    "upload", "download", "copy2d", "embed", "row_mean", "linear", "rmsnorm", "layernorm", "l2norm",
    "gated_rmsnorm", "rope", "conv1d_silu", "gdn_gates", "delta_rule", "attention", "silu_mul", "gelu",
    "sigmoid_mul", "add", "delta_rule.A", "delta_rule.B"};

static const size_t ALIGN = 256;

bool fail_code(clef_ops *ops, int code, const char *what, const char *detail) {
    if (detail && *detail) clef_ops_fail(ops, code, "%s: %s", what, detail);
    else clef_ops_fail(ops, code, "%s", what);
    return false;
}

bool fail(clef_ops *ops, const char *what, const char *detail) { return fail_code(ops, CLEF_OPS_DEVICE, what, detail); }

bool cuda_ok(clef_ops *ops, cudaError_t e, const char *what) {
    if (e == cudaSuccess) return true;
    char detail[160];
    snprintf(detail, sizeof detail, "CUDA error %s: %s", cudaGetErrorName(e), cudaGetErrorString(e));
    return fail_code(ops, e == cudaErrorMemoryAllocation ? CLEF_OPS_OOM : CLEF_OPS_DEVICE, what, detail);
}

bool launch_ok(clef_ops *ops, const char *what) { return cuda_ok(ops, cudaGetLastError(), what); }

/* ---------------------------------------------------------------- arena */

bool add_chunk(Pool *pool, size_t bytes) {
    char *p = nullptr;
    if (cudaMalloc((void **)&p, bytes) != cudaSuccess) {
        (void)cudaGetLastError(); /* clear the sticky-free allocation error */
        return false;
    }
    Chunk c;
    c.base = p;
    c.size = bytes;
    try {
        c.free_blocks[0] = bytes;
        pool->chunks.push_back(c);
    } catch (...) {
        cudaFree(p);
        return false;
    }
    return true;
}

void *pool_alloc(Impl *im, Pool *pool, size_t bytes) {
    if (bytes == 0) bytes = 1;
    if (bytes > ((size_t)-1) / 2) return nullptr;
    bytes = (bytes + ALIGN - 1) & ~(ALIGN - 1);
    for (int pass = 0; pass < 2; pass++) {
        for (size_t ci = 0; ci < pool->chunks.size(); ci++) {
            Chunk &c = pool->chunks[ci];
            for (auto it = c.free_blocks.begin(); it != c.free_blocks.end(); ++it) {
                if (it->second < bytes) continue;
                size_t off = it->first, sz = it->second;
                char *p = c.base + off;
                im->live[p] = Live{pool, (int)ci, off, bytes}; /* may throw: before the free map changes */
                c.free_blocks.erase(it);
                if (sz > bytes) c.free_blocks[off + bytes] = sz - bytes;
                pool->live++;
                pool->live_bytes += bytes;
                if (pool->live_bytes > pool->peak_bytes) pool->peak_bytes = pool->live_bytes;
                return p;
            }
        }
        if (pass == 0) {
            size_t want = bytes > pool->grow ? bytes : pool->grow;
            if (!add_chunk(pool, want) && !(want > bytes && add_chunk(pool, bytes))) return nullptr;
        }
    }
    return nullptr;
}

void pool_release(Pool *pool) {
    for (auto &c : pool->chunks) cudaFree(c.base);
    pool->chunks.clear();
    pool->live = pool->live_bytes = pool->peak_bytes = 0;
}

static void *arena_alloc(Impl *im, size_t bytes) { return pool_alloc(im, im->cur_pool, bytes); }

static void arena_free(Impl *im, void *vp) {
    if (!vp) return;
    auto it = im->live.find((char *)vp);
    if (it == im->live.end()) return; /* not ours: ignore (never happens with the model code) */
    Live l = it->second;
    im->live.erase(it);
    Pool *pool = l.pool;
    pool->live--;
    pool->live_bytes -= l.size;
    Chunk &c = pool->chunks[(size_t)l.chunk];
    size_t off = l.off, sz = l.size;
    auto next = c.free_blocks.lower_bound(off);
    if (next != c.free_blocks.end() && next->first == off + sz) {
        sz += next->second;
        next = c.free_blocks.erase(next);
    }
    if (next != c.free_blocks.begin()) {
        auto prev = std::prev(next);
        if (prev->first + prev->second == off) {
            prev->second += sz;
            return;
        }
    }
    c.free_blocks[off] = sz;
}

void *scratch_alloc(clef_ops *ops, size_t bytes) {
    void *p = nullptr;
    try {
        p = arena_alloc(IM(ops), bytes);
    } catch (...) {
        p = nullptr;
    }
    if (!p) fail_code(ops, CLEF_OPS_OOM, "out of device memory for an op's scratch", nullptr);
    return p;
}

void scratch_free(clef_ops *ops, void *p) { arena_free(IM(ops), p); }

float *cu_alloc(clef_ops *ops, size_t n) {
    if (n > ((size_t)-1) / sizeof(float) / 2) return nullptr;
    try {
        return (float *)arena_alloc(IM(ops), (n ? n : 1) * sizeof(float));
    } catch (...) {
        return nullptr;
    }
}

void cu_free(clef_ops *ops, float *p) { arena_free(IM(ops), p); }

/* ---------------------------------------------------------------- weights */

__global__ void k_widen_bf16(float *y, const uint16_t *x, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = bf16_bits_to_f32(x[i]);
}

static Weight *weight_entry(clef_ops *ops, const clef_tensor *t) {
    Impl *im = IM(ops);
    try {
        return &im->weights[std::make_pair(t->data, (size_t)t->numel)];
    } catch (...) {
        fail_code(ops, CLEF_OPS_OOM, "out of host memory for the weight cache", nullptr);
        return nullptr;
    }
}

/* Uploads the tensor as stored (BF16 stays bf16; F32 stays fp32; F16 and others become fp32). */
static bool upload_raw(clef_ops *ops, Weight *w, const clef_tensor *t) {
    Impl *im = IM(ops);
    size_t n = (size_t)t->numel;
    w->numel = n;
    if (t->dtype == CLEF_ST_BF16) {
        if (!cuda_ok(ops, cudaMalloc(&w->raw, (n ? n : 1) * 2), "cudaMalloc (weight)")) return false;
        w->raw_dtype = CLEF_ST_BF16;
        im->weight_bytes += n * 2;
        return cuda_ok(ops, cudaMemcpyAsync(w->raw, t->data, n * 2, cudaMemcpyHostToDevice, im->stream),
                       "upload weight");
    }
    if (!cuda_ok(ops, cudaMalloc(&w->raw, (n ? n : 1) * 4), "cudaMalloc (weight)")) return false;
    w->raw_dtype = CLEF_ST_F32;
    w->f32 = (float *)w->raw;
    im->weight_bytes += n * 4;
    if (t->dtype == CLEF_ST_F32)
        return cuda_ok(ops, cudaMemcpyAsync(w->raw, t->data, n * 4, cudaMemcpyHostToDevice, im->stream),
                       "upload weight");
    float *h = (float *)malloc((n ? n : 1) * sizeof(float));
    if (!h) return fail_code(ops, CLEF_OPS_OOM, "out of host memory converting a weight", nullptr);
    for (size_t i = 0; i < n; i++) h[i] = clef_tensor_f32_at(t, (int64_t)i);
    bool ok = cuda_ok(ops, cudaMemcpyAsync(w->raw, h, n * 4, cudaMemcpyHostToDevice, im->stream), "upload weight");
    cudaStreamSynchronize(im->stream); /* h is freed next */
    free(h);
    return ok;
}

/* A weight not yet on the device while a graph is captured: its upload (pageable memory, a
 * cudaMalloc) cannot be part of the graph; the capture is given up (the eager rerun uploads it). */
static bool capture_miss(clef_ops *ops) {
    if (IM(ops)->gmode != G_CAPTURE) return false;
    graph_break(ops, "a weight was first used during the capture");
    return true;
}

const void *weight_raw(clef_ops *ops, const clef_tensor *t, int *dtype) {
    Weight *w = weight_entry(ops, t);
    if (!w) return nullptr;
    if (!w->raw && (capture_miss(ops) || !upload_raw(ops, w, t))) return nullptr;
    *dtype = w->raw_dtype;
    return w->raw;
}

const float *weight_f32(clef_ops *ops, const clef_tensor *t) {
    Impl *im = IM(ops);
    Weight *w = weight_entry(ops, t);
    if (!w) return nullptr;
    if (w->f32) return w->f32;
    if (capture_miss(ops)) return nullptr;
    size_t n = (size_t)t->numel;
    if (!w->raw && t->dtype != CLEF_ST_BF16) return upload_raw(ops, w, t) ? w->f32 : nullptr;
    /* bf16: widen on the device; the bf16 bytes come from the cached copy when there is one, else
     * through a temporary (the parity path keeps only the fp32 copy of a matrix). */
    const uint16_t *src = (const uint16_t *)w->raw;
    void *tmp = nullptr;
    if (!src) {
        if (!cuda_ok(ops, cudaMalloc(&tmp, (n ? n : 1) * 2), "cudaMalloc (weight staging)")) return nullptr;
        if (!cuda_ok(ops, cudaMemcpyAsync(tmp, t->data, n * 2, cudaMemcpyHostToDevice, im->stream), "upload weight")) {
            cudaFree(tmp);
            return nullptr;
        }
        src = (const uint16_t *)tmp;
    }
    float *f = nullptr;
    if (!cuda_ok(ops, cudaMalloc((void **)&f, (n ? n : 1) * 4), "cudaMalloc (fp32 weight)")) {
        if (tmp) cudaFree(tmp);
        return nullptr;
    }
    w->numel = n;
    k_widen_bf16<<<grid1d(n, 256) > 4096 ? 4096 : grid1d(n, 256), 256, 0, im->stream>>>(f, src, n);
    bool ok = launch_ok(ops, "widen weight");
    if (tmp) {
        cudaStreamSynchronize(im->stream);
        cudaFree(tmp);
    }
    if (!ok) {
        cudaFree(f);
        return nullptr;
    }
    w->f32 = f;
    im->weight_bytes += n * 4;
    return f;
}

/* ---------------------------------------------------------------- transfers */

bool h2d(clef_ops *ops, void *dst, const void *src, size_t bytes, const char *what) {
    Impl *im = IM(ops);
    if (!bytes) return true;
    if (im->gmode == G_CAPTURE) { /* through the graph's pinned staging: a replay refills the slot */
        GraphEntry *g = im->gcur;
        size_t a = (bytes + 15) & ~(size_t)15;
        if (!g->stage || a > g->stage_size - g->stage_cur) {
            graph_break(ops, "more host uploads than the warm-up run made");
            return false;
        }
        char *slot = g->stage + g->stage_cur;
        g->stage_cur += a;
        memcpy(slot, src, bytes);
        return cuda_ok(ops, cudaMemcpyAsync(dst, slot, bytes, cudaMemcpyHostToDevice, im->stream), what);
    }
    if (im->gcount) im->gstage_count += (bytes + 15) & ~(size_t)15;
    /* pageable source: returns once the bytes are staged, so the caller may free src at once */
    return cuda_ok(ops, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, im->stream), what);
}

void cu_upload(clef_ops *ops, float *dst, const float *src, size_t n) {
    ProfScope ps(ops, OP_UPLOAD);
    h2d(ops, dst, src, n * sizeof(float), "upload");
}

void cu_download(clef_ops *ops, float *dst, const float *src, size_t n) {
    ProfScope ps(ops, OP_DOWNLOAD);
    if (!n) return;
    Impl *im = IM(ops);
    if (im->gmode != G_OFF) { /* a host sync: the pass cannot be a graph (it reruns eagerly) */
        memset(dst, 0, n * sizeof(float));
        graph_break(ops, "the forward downloads data (a host sync)");
        return;
    }
    if (!cuda_ok(ops, cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToHost, im->stream), "download"))
        return;
    cuda_ok(ops, cudaStreamSynchronize(im->stream), "download (sync)");
}

/* ---------------------------------------------------------------- timing */

ProfScope::ProfScope(clef_ops *o, int op) : ops(o) {
    Impl *im = IM(o);
    if (!im->prof_on || im->gmode != G_OFF) return; /* graphs run unprofiled (clef_cuda_graph_run) */
    if (im->ev_used == EV_PAIRS) { /* fold the recorded pairs into the totals */
        size_t n = im->ev_used;
        cudaStreamSynchronize(im->stream);
        for (size_t i = 0; i < n; i++) {
            float ms = 0;
            if (cudaEventElapsedTime(&ms, im->ev_pool[2 * i], im->ev_pool[2 * i + 1]) == cudaSuccess) {
                im->prof_ms[im->ev_op[i]] += ms;
            }
            im->prof_calls[im->ev_op[i]]++;
        }
        im->ev_used = 0;
    }
    pair = (int)im->ev_used++;
    im->ev_op[(size_t)pair] = op;
    cudaEventRecord(im->ev_pool[2 * (size_t)pair], im->stream);
}

ProfScope::~ProfScope() {
    if (pair < 0) return;
    cudaEventRecord(IM(ops)->ev_pool[2 * (size_t)pair + 1], IM(ops)->stream);
}

/* ---------------------------------------------------------------- graphs */

/* Gives up the capture of this pass (it reruns eagerly): what cannot be part of a graph calls it. */
void graph_break(clef_ops *ops, const char *why) {
    Impl *im = IM(ops);
    if (im->gmode == G_OFF) return;
    if (!im->gbroken) im->gwhy = why;
    im->gbroken = true;
}

} // namespace clefcu
