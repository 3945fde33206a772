/* The CUDA backend: the device and its stream, the table (cuda_ops.h), synthetic weights and the
 * clef_cuda_* entry points. Below it: cuda_graph.cu (graphs of a pass), the op families in
 * cuda_{linear,norm,elementwise,delta,attention}.cu, and under them all cuda_frame.cu (failures, arena,
 * weight cache, transfers, timing). */
#include "compute/cuda/cuda_internal.cuh"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <new>

namespace clefcu {

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
