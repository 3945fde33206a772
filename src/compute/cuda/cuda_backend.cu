/* The CUDA backend's frame: device and stream, the activation arena, the weight cache, transfers,
 * per-op timing and the table (cuda_ops.h). The op families live in cuda_{linear,norm,elementwise,
 * delta,attention}.cu. */
#include "compute/cuda/cuda_internal.cuh"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <new>

namespace clefcu {

const char *const op_names[OP_COUNT] = {
    "upload", "download", "copy2d", "embed", "row_mean", "linear", "rmsnorm", "layernorm", "l2norm",
    "gated_rmsnorm", "rope", "conv1d_silu", "gdn_gates", "delta_rule", "attention", "silu_mul", "gelu",
    "sigmoid_mul", "add", "delta_rule.A", "delta_rule.B"};

static const size_t ALIGN = 256;
static const size_t EV_PAIRS = 8192;

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

static bool add_chunk(Pool *pool, size_t bytes) {
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

/* ---------------------------------------------------------------- synthetic weights */

__device__ __forceinline__ uint64_t splitmix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

__global__ void k_fill(void *dst, int bf16, size_t n, uint64_t seed, float center, float scale) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint64_t r = splitmix64(seed ^ splitmix64(i));
        float u = (float)((double)(r >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0);
        float v = center + scale * u;
        if (bf16)
            ((__nv_bfloat16 *)dst)[i] = __float2bfloat16_rn(v);
        else
            ((float *)dst)[i] = v;
    }
}

} // namespace clefcu

using namespace clefcu;

/* ---------------------------------------------------------------- the table */

static void cu_destroy(clef_ops *ops) {
    if (!ops) return;
    Impl *im = IM(ops);
    if (im) {
        if (im->stream) cudaStreamSynchronize(im->stream);
        graph_destroy(ops);
        linear_destroy(ops);
        for (auto &kv : im->weights) {
            Weight &w = kv.second;
            if (w.f32 && (void *)w.f32 != w.raw) cudaFree(w.f32);
            if (w.raw && w.owned) cudaFree(w.raw);
        }
        pool_release(&im->main);
        for (auto e : im->ev_pool) cudaEventDestroy(e);
        if (im->stream) cudaStreamDestroy(im->stream);
        delete im;
    }
    free(ops);
}

extern "C" int clef_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

extern "C" clef_ops *clef_cuda_ops_create(int device, int precision, const clef_knobs *knobs, clef_err *err) {
    if (!knobs) knobs = clef_knobs_env();
    int n = clef_cuda_device_count();
    if (n <= 0) {
        clef_err_set(err, CLEF_E_BAD_MODEL, "the CUDA backend found no usable GPU (cudaGetDeviceCount: 0)");
        return NULL;
    }
    if (device < 0 || device >= n) {
        clef_err_set(err, CLEF_E_BAD_MODEL, "CUDA device %d does not exist (%d present)", device, n);
        return NULL;
    }
    if (precision != CLEF_CUDA_FP32 && precision != CLEF_CUDA_FAST && precision != CLEF_CUDA_BF16) {
        clef_err_set(err, CLEF_E_BAD_MODEL, "unknown CUDA precision %d", precision);
        return NULL;
    }
    clef_ops *ops = (clef_ops *)calloc(1, sizeof *ops);
    Impl *im = new (std::nothrow) Impl();
    if (!ops || !im) {
        free(ops);
        delete im;
        clef_err_set(err, CLEF_E_OOM, "out of memory creating the CUDA backend");
        return NULL;
    }
    ops->impl = im;
    ops->name = precision == CLEF_CUDA_FAST ? "cuda-fast" : precision == CLEF_CUDA_BF16 ? "cuda-bf16" : "cuda";
    ops->host_memory = 0;
    ops->destroy = cu_destroy;
    im->device = device;
    im->precision = precision;
    cudaError_t e = cudaSetDevice(device);
    cudaDeviceProp prop;
    if (e == cudaSuccess) e = cudaGetDeviceProperties(&prop, device);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&im->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        clef_err_set(err, CLEF_E_BAD_MODEL, "CUDA device %d: %s", device, cudaGetErrorString(e));
        cu_destroy(ops);
        return NULL;
    }
    snprintf(im->name, sizeof im->name, "%s", prop.name);
    im->max_smem_optin = prop.sharedMemPerBlockOptin > 0 ? (int)prop.sharedMemPerBlockOptin : 48 * 1024;
    im->sm_count = prop.multiProcessorCount;
    im->cc_major = prop.major;
    /* the knobs CLEF_CUDA_LINEAR / _ATTN / _DELTA / _POOL_MB (base/knobs.h numbers the variants as
     * CLEF_CUDA_ATTN_* / CLEF_CUDA_DELTA_* do) */
    static_assert(CLEF_CUDA_ATTN_SIMT == 0 && CLEF_CUDA_ATTN_V2 == 1 && CLEF_CUDA_ATTN_V3 == 2 && CLEF_CUDA_ATTN_V4 == 3,
                  "knobs.h");
    static_assert(CLEF_CUDA_DELTA_V1 == 0 && CLEF_CUDA_DELTA_V2 == 1 && CLEF_CUDA_DELTA_V3 == 2 && CLEF_CUDA_DELTA_V4 == 3 &&
                      CLEF_CUDA_DELTA_V5 == 4,
                  "knobs.h");
    im->linear_split = knobs->cuda_linear_split;
    im->attn_kernel = knobs->cuda_attn;
    im->delta_kernel = knobs->cuda_delta;
    im->gemm_topn = knobs->cuda_gemm_topn;
    size_t pool_mb = knobs->cuda_pool_mb > 0 ? (size_t)knobs->cuda_pool_mb : 1024;
    im->main.grow = pool_mb << 20;
    im->cur_pool = &im->main;
    im->graph_on = knobs->cuda_graph != 0;
    if (knobs->cuda_graph_max >= 0) im->graph_max = (size_t)knobs->cuda_graph_max;
    bool ok = true;
    try {
        ok = add_chunk(&im->main, pool_mb << 20);
        if (ok) {
            im->ev_pool.resize(2 * EV_PAIRS);
            im->ev_op.resize(EV_PAIRS);
            for (auto &ev : im->ev_pool)
                if (cudaEventCreate(&ev) != cudaSuccess) ok = false;
        }
    } catch (...) {
        ok = false;
    }
    if (!ok) {
        clef_err_set(err, CLEF_E_OOM, "could not reserve the %zu MiB CUDA arena on %s", pool_mb, im->name);
        cu_destroy(ops);
        return NULL;
    }
    if (!linear_init(ops)) {
        clef_err_set(err, CLEF_E_BAD_MODEL, "cuBLAS: %s", ops->status.msg);
        cu_destroy(ops);
        return NULL;
    }
    graph_install(ops); /* the op table: cuda_graph.cu */
    /* conv1d_silu / delta_rule take states in and out, attention cached keys (varlen kernels) */
    ops->can_resume = 1;
    return ops;
}

extern "C" const char *clef_cuda_last_error(const clef_ops *ops) {
    return ops->status.msg;
}

extern "C" void clef_cuda_get_kernels(const clef_ops *ops, clef_cuda_kernels *k) {
    const Impl *im = static_cast<const Impl *>(ops->impl);
    k->linear_split = im->linear_split ? 1 : 0;
    k->attn = im->attn_kernel;
    k->delta = im->delta_kernel;
}

extern "C" void clef_cuda_set_kernels(clef_ops *ops, const clef_cuda_kernels *k) {
    Impl *im = IM(ops);
    im->linear_split = k->linear_split != 0;
    im->attn_kernel = k->attn == CLEF_CUDA_ATTN_SIMT || k->attn == CLEF_CUDA_ATTN_V2 || k->attn == CLEF_CUDA_ATTN_V3
                          ? k->attn
                          : CLEF_CUDA_ATTN_V4;
    im->delta_kernel = k->delta >= CLEF_CUDA_DELTA_V1 && k->delta <= CLEF_CUDA_DELTA_V5 ? k->delta : CLEF_CUDA_DELTA_V4;
}

extern "C" const char *clef_cuda_device_name(const clef_ops *ops) { return static_cast<const Impl *>(ops->impl)->name; }

extern "C" int clef_cuda_sync(clef_ops *ops) {
    if (IM(ops)->gmode != G_OFF) { /* inside a captured / replayed forward: a sync cannot be in a graph */
        graph_break(ops, "clef_cuda_sync inside the forward");
        return clef_ops_failed(ops) ? -1 : 0;
    }
    cuda_ok(ops, cudaStreamSynchronize(IM(ops)->stream), "synchronize");
    launch_ok(ops, "synchronize");
    return clef_ops_failed(ops) ? -1 : 0;
}

extern "C" void clef_cuda_memory(const clef_ops *ops, size_t *arena_bytes, size_t *weight_bytes) {
    const Impl *im = static_cast<const Impl *>(ops->impl);
    size_t a = 0;
    for (auto &c : im->main.chunks) a += c.size;
    for (auto &kv : im->graphs)
        for (auto &c : kv.second.pool.chunks) a += c.size;
    if (arena_bytes) *arena_bytes = a;
    if (weight_bytes) *weight_bytes = im->weight_bytes;
}

extern "C" int clef_cuda_synthetic_weight(clef_ops *ops, clef_tensor *t, int dtype, const int64_t *shape, int ndim,
                                          uint64_t seed, float center, float scale, clef_err *err) {
    Impl *im = IM(ops);
    if ((dtype != CLEF_ST_BF16 && dtype != CLEF_ST_F32) || ndim < 0 || ndim > CLEF_MAX_DIMS)
        return clef_err_set(err, CLEF_E_INTERNAL, "synthetic weight: bad dtype or rank");
    int64_t numel = 1;
    memset(t, 0, sizeof *t);
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return clef_err_set(err, CLEF_E_INTERNAL, "synthetic weight: negative dim");
        t->shape[i] = shape[i];
        numel *= shape[i];
    }
    size_t es = dtype == CLEF_ST_BF16 ? 2 : 4, n = (size_t)numel;
    void *p = nullptr;
    if (cudaMalloc(&p, (n ? n : 1) * es) != cudaSuccess) {
        (void)cudaGetLastError();
        return clef_err_set(err, CLEF_E_OOM, "synthetic weight: cudaMalloc of %zu bytes failed", n * es);
    }
    k_fill<<<grid1d(n, 256) > 8192 ? 8192 : grid1d(n, 256), 256, 0, im->stream>>>(p, dtype == CLEF_ST_BF16, n, seed,
                                                                                  center, scale);
    if (cudaGetLastError() != cudaSuccess) {
        cudaFree(p);
        return clef_err_set(err, CLEF_E_INTERNAL, "synthetic weight: fill kernel failed");
    }
    try {
        Weight &w = im->weights[std::make_pair((const void *)p, n)];
        w.raw = p;
        w.raw_dtype = dtype;
        w.numel = n;
        if (dtype == CLEF_ST_F32) w.f32 = (float *)p;
    } catch (...) {
        cudaFree(p);
        return clef_err_set(err, CLEF_E_OOM, "synthetic weight: out of host memory");
    }
    im->weight_bytes += n * es;
    t->data = p;
    t->dtype = dtype;
    t->ndim = ndim;
    t->numel = numel;
    t->nbytes = n * es;
    t->name = "synthetic";
    return 0;
}

extern "C" void clef_cuda_profile(clef_ops *ops, int on) {
    Impl *im = IM(ops);
    if (!on && im->prof_on) cudaStreamSynchronize(im->stream);
    im->prof_on = on != 0;
}

extern "C" size_t clef_cuda_profile_read(clef_ops *ops, clef_cuda_op_time *out, size_t max) {
    Impl *im = IM(ops);
    cudaStreamSynchronize(im->stream);
    for (size_t i = 0; i < im->ev_used; i++) {
        float ms = 0;
        if (cudaEventElapsedTime(&ms, im->ev_pool[2 * i], im->ev_pool[2 * i + 1]) == cudaSuccess)
            im->prof_ms[im->ev_op[i]] += ms;
        im->prof_calls[im->ev_op[i]]++;
    }
    (void)cudaGetLastError();
    im->ev_used = 0;
    size_t n = 0;
    for (int op = 0; op < OP_COUNT && n < max; op++) {
        if (!im->prof_calls[op]) continue;
        out[n].op = op_names[op];
        out[n].calls = im->prof_calls[op];
        out[n].ms = im->prof_ms[op];
        out[n].flop = im->prof_flop[op];
        n++;
    }
    return n;
}

extern "C" void clef_cuda_profile_reset(clef_ops *ops) {
    Impl *im = IM(ops);
    cudaStreamSynchronize(im->stream);
    im->ev_used = 0;
    for (int op = 0; op < OP_COUNT; op++) {
        im->prof_ms[op] = 0;
        im->prof_flop[op] = 0;
        im->prof_calls[op] = 0;
    }
}
