/* Internals shared by the CUDA backend's translation units (not for the C side). */
#ifndef CLEF_COMPUTE_CUDA_INTERNAL_CUH
#define CLEF_COMPUTE_CUDA_INTERNAL_CUH

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <stdint.h>
#include <stdio.h>
#include <string.h>

extern "C" { /* the C headers declare C functions (clef_err_set, clef_knobs_env, ...) */
#include "base/err.h"
#include "base/knobs.h"
#include "compute/ops.h"
}
#include "compute/cuda/cuda_ops.h"

namespace clefcu {

/* ---- arena ---- */
struct Chunk {
    char *base;
    size_t size;
    std::map<size_t, size_t> free_blocks; /* offset -> size, coalesced */
};
/* An arena: the main one (Impl::main), or a CUDA graph's own (GraphEntry::pool: what a captured
 * forward allocates, so that a replay finds its buffers at the captured addresses). */
struct Pool {
    std::vector<Chunk> chunks;
    size_t grow = (size_t)1 << 30; /* a new chunk is max(request, grow) */
    size_t live = 0;               /* live allocations */
    size_t live_bytes = 0, peak_bytes = 0;
};
struct Live {
    Pool *pool;
    int chunk;
    size_t off, size;
};

/* ---- CUDA graphs (cuda_graph.cu; docs/cuda.md "Graphs") ---- */
enum GraphMode { G_OFF = 0, G_CAPTURE = 1, G_REPLAY = 2 };
enum GraphState { GS_NEW = 0, GS_WARM = 1, GS_READY = 2, GS_UNSAFE = 3 };
struct GraphEntry {
    int state = GS_NEW;
    int misses = 0;                  /* replays whose calls differed from the capture */
    Pool pool;                       /* the captured forward's allocations */
    size_t warm_peak = 0;            /* the eager run's peak arena use (sizes the pool) */
    size_t stage_need = 0;           /* bytes the eager run uploaded from the host */
    char *stage = nullptr;           /* pinned host staging of the uploads (cudaMallocHost) */
    size_t stage_size = 0, stage_cur = 0;
    uint64_t fp = 0;                 /* fingerprint of the captured calls */
    uint64_t ncalls = 0;
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    cudaEvent_t done = nullptr;      /* recorded after each launch: its staging may be rewritten after */
    std::string why;                 /* why it is unsafe (reports) */
};

/* ---- weight cache ---- */
struct Weight {
    void *raw = nullptr;  /* as stored: bf16 (raw_dtype CLEF_ST_BF16) or fp32 (CLEF_ST_F32) */
    int raw_dtype = 0;
    float *f32 = nullptr; /* fp32 copy (== raw when raw is fp32) */
    size_t numel = 0;
    bool owned = true;    /* raw allocated by us (synthetic weights too) */
};

enum OpId {
    OP_UPLOAD, OP_DOWNLOAD, OP_COPY2D, OP_EMBED, OP_ROW_MEAN, OP_LINEAR, OP_RMSNORM, OP_LAYERNORM,
    OP_L2NORM, OP_GATED_RMSNORM, OP_ROPE, OP_CONV1D_SILU, OP_GDN_GATES, OP_DELTA_RULE, OP_ATTENTION,
    OP_SILU_MUL, OP_GELU, OP_SIGMOID_MUL, OP_ADD,
    OP_DELTA_A, OP_DELTA_B, /* kernels inside delta_rule (their time is part of delta_rule's) */
    OP_COUNT
};
extern const char *const op_names[OP_COUNT];

struct GemmKey {
    int n, t, k;
    uint32_t align; /* the operands' alignments, packed */
    bool operator<(const GemmKey &o) const {
        if (n != o.n) return n < o.n;
        if (t != o.t) return t < o.t;
        if (k != o.k) return k < o.k;
        return align < o.align;
    }
};
struct GemmPlan {
    bool ok = false;
    cublasLtMatmulAlgo_t algo;
};
/* What CLEF_CUDA_GEMM_TOPN's choices did (clef_cuda_gemm_stats, cuda_ops.h). */
struct GemmTuneStats {
    uint64_t shapes = 0, tried = 0, same_bits = 0, picked_other = 0, skipped = 0;
    double first_us = 0, best_us = 0; /* summed over the tuned shapes: one call with the first / the picked algorithm */
};

struct Impl {
    int device = 0, precision = CLEF_CUDA_FP32;
    cudaStream_t stream = nullptr;
    cublasHandle_t blas = nullptr;
    cublasLtHandle_t lt = nullptr;
    void *lt_ws = nullptr;
    size_t lt_ws_size = 0;
    std::map<GemmKey, GemmPlan> plans;
    int gemm_topn = 0;             /* CLEF_CUDA_GEMM_TOPN (cuda_linear.cu pick_algo); 0 / 1 = the heuristic's first */
    GemmTuneStats gemm_tune;
    bool linear_split = true;      /* clef_cuda_kernels (cuda_ops.h) */
    int attn_kernel = CLEF_CUDA_ATTN_V4;
    int delta_kernel = CLEF_CUDA_DELTA_V4;
    int max_smem_optin = 48 * 1024;
    int sm_count = 0;
    int cc_major = 0;             /* compute capability (mma.sync TF32 needs 8.0) */
    char name[256] = {0};

    Pool main;
    Pool *cur_pool = nullptr;      /* where alloc / scratch go: &main, or the capturing graph's pool */
    std::unordered_map<char *, Live> live;
    std::map<std::pair<const void *, size_t>, Weight> weights;
    size_t weight_bytes = 0;

    /* graphs */
    bool graph_on = false;                 /* $CLEF_CUDA_GRAPH=1 / clef_cuda_set_graph */
    size_t graph_max = 8;                  /* graphs kept ($CLEF_CUDA_GRAPH_MAX) */
    int gmode = G_OFF;
    GraphEntry *gcur = nullptr;            /* the entry being captured / replayed */
    uint64_t gfp = 0, gcalls = 0;          /* running fingerprint of this pass */
    bool gbroken = false;                  /* this capture / replay cannot stand (a host sync, ...) */
    const char *gwhy = nullptr;
    bool gcount = false;                   /* an eager warm-up: count the uploaded bytes */
    size_t gstage_count = 0;
    std::map<uint64_t, GraphEntry> graphs;
    uint64_t graph_stats[4] = {0, 0, 0, 0}; /* eager, captured, replayed, fell back */

    bool prof_on = false;
    std::vector<cudaEvent_t> ev_pool;     /* pairs: 2i start, 2i+1 end */
    std::vector<int> ev_op;               /* op of pair i */
    size_t ev_used = 0;
    double prof_ms[OP_COUNT] = {0};
    uint64_t prof_calls[OP_COUNT] = {0};
    double prof_flop[OP_COUNT] = {0};     /* the arithmetic each op issued (prof_flop below) */
};

static inline Impl *IM(clef_ops *ops) { return static_cast<Impl *>(ops->impl); }

/* Records a failure (clef_ops_fail: sticky ops->status, the first kept) as "what: detail"; returns
 * false. fail records a device error (CLEF_OPS_DEVICE); fail_code another code (CLEF_OPS_OOM,
 * CLEF_OPS_SHAPE). cuda_ok records cudaErrorMemoryAllocation as CLEF_OPS_OOM. */
bool fail_code(clef_ops *ops, int code, const char *what, const char *detail);
bool fail(clef_ops *ops, const char *what, const char *detail);
bool cuda_ok(clef_ops *ops, cudaError_t e, const char *what);
/* Lets `kernel` launch with `bytes` of dynamic shared memory: above the default 48 KB that needs a
 * per-kernel opt-in (the caller has checked bytes <= Impl::max_smem_optin). False, with
 * ops->status set, when CUDA refuses. */
template <typename Kernel>
static inline bool smem_optin(clef_ops *ops, Kernel kernel, size_t bytes, const char *what) {
    return bytes <= 48 * 1024 ||
           cuda_ok(ops, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes), what);
}
/* Checks the last launch. */
bool launch_ok(clef_ops *ops, const char *what);

/* Arena scratch inside an op (bytes). NULL (and ops->status) when out of memory. */
void *scratch_alloc(clef_ops *ops, size_t bytes);
void scratch_free(clef_ops *ops, void *p);

/* Host -> device copy of `bytes` on the stream. While a graph is captured the bytes go through the
 * graph's pinned staging (a replay refills it); an eager warm-up counts them. False (ops->status set,
 * or the capture marked broken) on failure. */
bool h2d(clef_ops *ops, void *dst, const void *src, size_t bytes, const char *what);
/* Marks the pass being captured / replayed as unusable (it falls back to an eager run). */
void graph_break(clef_ops *ops, const char *why);
/* Fills the op table with the graph-aware entry points (cuda_graph.cu) around the op_* functions. */
void graph_install(clef_ops *ops);
void graph_destroy(clef_ops *ops);
/* Arena of a pool (cuda_frame.cu): add_chunk gives it a device chunk of `bytes` (false when cudaMalloc
 * fails); pool_alloc is NULL when out of memory. */
bool add_chunk(Pool *pool, size_t bytes);
void *pool_alloc(Impl *im, Pool *pool, size_t bytes);
void pool_release(Pool *pool);

/* Device copies of a weight tensor: as stored (bf16 or fp32; *dtype says which) or widened to fp32.
 * NULL (and ops->status) on failure. */
const void *weight_raw(clef_ops *ops, const clef_tensor *t, int *dtype);
const float *weight_f32(clef_ops *ops, const clef_tensor *t);

/* Per-op CUDA event timing (RAII): pairs of events, folded into the totals every EV_PAIRS. */
static const size_t EV_PAIRS = 8192;
struct ProfScope {
    clef_ops *ops;
    int pair = -1;
    ProfScope(clef_ops *o, int op);
    ~ProfScope();
};

/* While profiling: adds the floating-point operations op `op` issued to its total (the work the
 * kernels really do: the split's two products per weight, 3xTF32's three MMAs per product). */
static inline void prof_flop(clef_ops *ops, int op, double f) {
    Impl *im = IM(ops);
    if (im->prof_on) im->prof_flop[op] += f;
}

static inline unsigned grid1d(size_t n, unsigned block) {
    size_t g = (n + block - 1) / block;
    return (unsigned)(g > 0x7fffffffu ? 0x7fffffffu : (g ? g : 1));
}

__device__ __forceinline__ float bf16_bits_to_f32(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }
__device__ __forceinline__ float dev_siluf(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float dev_sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

/* Op entry points, one per table slot (defined in the family files; memory and transfers in
 * cuda_frame.cu). cuda_graph.cu puts them in the table behind its wrappers. */
float *cu_alloc(clef_ops *, size_t);
void cu_free(clef_ops *, float *);
void cu_upload(clef_ops *, float *, const float *, size_t);
void cu_download(clef_ops *, float *, const float *, size_t);
void op_embed(clef_ops *, float *, const clef_tensor *, const int32_t *, size_t);
void op_row_mean(clef_ops *, float *, const float *, size_t, size_t, size_t, size_t);
void op_linear(clef_ops *, float *, const float *, size_t, const clef_tensor *, size_t, size_t, const clef_tensor *);
void op_rmsnorm(clef_ops *, float *, size_t, const float *, size_t, size_t, size_t, const clef_tensor *, int, float);
void op_layernorm(clef_ops *, float *, const float *, size_t, size_t, const clef_tensor *, const clef_tensor *, float);
void op_l2norm(clef_ops *, float *, size_t, size_t, size_t, float, float);
void op_gated_rmsnorm(clef_ops *, float *, const float *, const float *, size_t, size_t, const clef_tensor *, float);
void op_rope(clef_ops *, float *, size_t, size_t, size_t, size_t, size_t, const float *, const float *);
void op_gdn_gates(clef_ops *, float *, float *, const float *, const float *, size_t, size_t, const clef_tensor *,
                  const clef_tensor *);
/* The per-segment ops (ops.h clef_seg): varlen kernels, one launch per group of segments. */
void op_conv1d_silu(clef_ops *, float *, const float *, size_t, const clef_tensor *, const clef_seg *, size_t,
                    const clef_seg_state *);
void op_delta_rule(clef_ops *, float *, const float *, const float *, const float *, const float *, const float *,
                   size_t, size_t, size_t, size_t, size_t, const clef_seg *, size_t, const clef_seg_state *);
void op_attention(clef_ops *, float *, size_t, const float *, size_t, const float *, size_t, const float *, size_t,
                  const clef_attn_seg *, size_t, size_t, size_t, size_t, float, int);
void op_copy2d(clef_ops *, float *, size_t, const float *, size_t, size_t, size_t);
void op_silu_mul(clef_ops *, float *, const float *, const float *, size_t);
void op_gelu(clef_ops *, float *, size_t, int);
void op_sigmoid_mul(clef_ops *, float *, const float *, size_t);
void op_add(clef_ops *, float *, const float *, const float *, size_t);

/* Linear-algebra state (cuda_linear.cu). */
bool linear_init(clef_ops *ops);
void linear_destroy(clef_ops *ops);

} // namespace clefcu

#endif
