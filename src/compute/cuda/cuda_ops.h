/* The CUDA backend (docs/cuda.md): the clef_ops table (compute/ops.h) on one NVIDIA GPU. Plain C
 * header: the engine, tests and benchmarks include it; the implementation is in cuda_*.cu, built
 * only with `make CUDA=1` (which defines CLEF_HAVE_CUDA for the C side).
 *
 * - Activations are fp32 device buffers from one arena (a big cudaMalloc'd block made at create,
 *   grown by further blocks only when a request needs more; blocks are kept, so a steady stream of
 *   requests allocates nothing).
 * - Weights are uploaded on first use and cached, keyed by the tensor's host data pointer (the
 *   mapped checkpoint): bf16 as stored, plus an fp32 copy where an op needs one.
 * - Precision: CLEF_CUDA_FP32 is the parity path (fp32 activations and weights, fp32 GEMMs with TF32
 *   off, double sums in the reductions); CLEF_CUDA_FAST feeds the bf16 weights and each activation
 *   split into two bf16 terms to the tensor cores (cuBLASLt, fp32 accumulation: two products per
 *   weight); CLEF_CUDA_BF16 rounds each activation to bf16 once (one product per weight: half the
 *   tensor-core work, ~u = 2^-8 relative input error). Both keep everything but the Linear GEMMs
 *   as the fast path has them (tensor-core 3xTF32 attention, fp32-sum delta rule).
 * - Deterministic: one stream, no atomics, fixed reduction trees; the same request gives the same
 *   bits on the same GPU model and library versions.
 * - Ops never fail on valid arguments; a CUDA or cuBLAS error or an exhausted arena sets
 *   ops->status (compute/ops.h clef_ops_fail): CLEF_OPS_OOM for an exhausted arena or
 *   cudaErrorMemoryAllocation, CLEF_OPS_DEVICE with CUDA's error name and words otherwise, and
 *   clef_cuda_last_error returns its message. */
#ifndef CLEF_COMPUTE_CUDA_OPS_H
#define CLEF_COMPUTE_CUDA_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "base/knobs.h"
#include "compute/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The same values as CLEF_PRECISION_FP32 / _FAST / _BF16 (include/clef.h): the engine passes its
 * option through. */
enum { CLEF_CUDA_FP32 = 0, CLEF_CUDA_FAST = 1, CLEF_CUDA_BF16 = 2 };

/* Number of CUDA devices usable by this process (0 when there is no driver or no GPU). */
int clef_cuda_device_count(void);

/* The backend on GPU `device` (0-based) with precision CLEF_CUDA_FP32, _FAST or _BF16. knobs
 * (base/knobs.h; NULL: the process's, clef_knobs_env()): the arena starts at CLEF_CUDA_POOL_MB MiB
 * (default 1024), the kernel variants below. NULL with err set (BadModel when there is no usable
 * GPU, OutOfMemory) on failure. Free with ops->destroy(ops). */
clef_ops *clef_cuda_ops_create(int device, int precision, const clef_knobs *knobs, clef_err *err);

/* The last CUDA / cuBLAS error message recorded by an op ("" when none). */
const char *clef_cuda_last_error(const clef_ops *ops);
/* The device's name ("NVIDIA H200", ...). */
const char *clef_cuda_device_name(const clef_ops *ops);
/* Waits for all queued work; returns 0, or -1 when an error was recorded (ops->status set). */
int clef_cuda_sync(clef_ops *ops);
/* Bytes held on the device: the arena blocks and the cached weights. */
void clef_cuda_memory(const clef_ops *ops, size_t *arena_bytes, size_t *weight_bytes);

/* Synthetic weights for benchmarks (no file): allocates a tensor of `shape` (dtype CLEF_ST_BF16 or
 * CLEF_ST_F32) on the device, fills it with center + scale * u, u uniform in [-1, 1) from a
 * counter hash of (seed, index), and registers it in the weight cache. t->data is set to a unique
 * key that must never be dereferenced on the host (it is the device address). Returns 0 or -1
 * with err set. */
int clef_cuda_synthetic_weight(clef_ops *ops, clef_tensor *t, int dtype, const int64_t *shape, int ndim,
                               uint64_t seed, float center, float scale, clef_err *err);

/* Kernel variants. The default is the newest variant a device run has verified (test_cuda_ops and
 * the corpus on an H200: runs 2026-12-04a, b and c); newer ones written since are opt-in until a run checks
 * them, and the old ones stay selectable for side-by-side runs and as a fallback. At create, the
 * knobs CLEF_CUDA_LINEAR=bf16 (one bf16 term per activation in the fast GEMMs instead of the two-term
 * split), $CLEF_CUDA_ATTN=simt|v2|v3|v4 and $CLEF_CUDA_DELTA=v1|v2|v3|v4 choose; clef_cuda_set_kernels
 * switches later (tests, bench_cuda). */
/* attention: SIMT = the first kernel (both precisions); V2 = fast: tensor cores 3xTF32 (verified
 * 2026-11-30b), fp32: SIMT; V3 = V2 + the register-tiled fp32 kernel (verified 2026-12-04a:
 * fp32 attention 2.0 / 18.4 ms at 436 / 2,048 tokens on the 9B shape, SIMT 6.4 / 87.9) */
/* V4 (default) = V3 + one-term bf16 tensor-core attention in the bf16 precision (verified 2026-12-04b:
 * bf16 attention 114 ms at 16,384 tokens on the 9B shape, v3 896 ms; corpus argmax 123/125 vs 124/125) */
enum { CLEF_CUDA_ATTN_SIMT = 0, CLEF_CUDA_ATTN_V2 = 1, CLEF_CUDA_ATTN_V3 = 2, CLEF_CUDA_ATTN_V4 = 3 };
/* delta: V1 = the first kernels A and B; V2 = A v1 + B v2 (verified 2026-11-30b); V3 = A v2 + B v2
 * (verified 2026-12-04a: kernel A 2.9 / 13.4 ms at 436 / 2,048 tokens, v1 17.1 / 62.1); V4 (default)
 * = A v2 + B v3, the same sums with 16-byte operand loads (verified 2026-12-04c: the same bits as v3,
 * kernel B 2.8 / 12.9 / 104 ms at 436 / 2,048 / 16,384 tokens in bf16, v2 3.7 / 17.2 / 141); V5 = V4
 * with 16 state columns a block in kernel B (twice the blocks, the same bits) */
enum { CLEF_CUDA_DELTA_V1 = 0, CLEF_CUDA_DELTA_V2 = 1, CLEF_CUDA_DELTA_V3 = 2, CLEF_CUDA_DELTA_V4 = 3, CLEF_CUDA_DELTA_V5 = 4 };
typedef struct clef_cuda_kernels {
    int linear_split; /* fast GEMMs: 1 = x = h + l in two bf16 terms, 0 = one bf16 term */
    int attn;         /* CLEF_CUDA_ATTN_* */
    int delta;        /* CLEF_CUDA_DELTA_* */
} clef_cuda_kernels;
void clef_cuda_get_kernels(const clef_ops *ops, clef_cuda_kernels *k);
void clef_cuda_set_kernels(clef_ops *ops, const clef_cuda_kernels *k);

/* The cuBLASLt algorithm of the bf16 GEMMs (bf16 and fast precisions). n <= 1 (default,
 * $CLEF_CUDA_GEMM_TOPN unset): the heuristic's first algorithm for each shape. n in 2..16: on the first
 * use of a shape, the heuristic's top n are run on that call's own operands; those whose output has the
 * same bits as the first's (an order-independent hash of the output's words) are timed (CUDA events),
 * and the fastest is kept for the shape for the life of the backend. Only algorithms that reproduce the
 * first's bits are eligible, so the answers are those of n <= 1 whatever the timings say (packed = alone
 * and repeat bits as before); the choice costs a host sync and ~4 n runs of the GEMM once per shape, and
 * is skipped while a graph is being captured and for the fast path's accumulating (beta = 1) GEMM.
 * Not verified on a GPU yet: default off. Setting it forgets the shapes' choices. */
void clef_cuda_set_gemm_topn(clef_ops *ops, int n);
typedef struct clef_cuda_gemm_info {
    int topn;                      /* the setting */
    uint64_t shapes;               /* shapes tuned */
    uint64_t tried, same_bits;     /* candidates run, and those with the first's bits (the first included) */
    uint64_t picked_other;         /* shapes that kept another algorithm than the first */
    uint64_t skipped;              /* shapes left on the first (capturing, no candidates, a failed run) */
    double first_us, best_us;      /* one call of every tuned shape: with the first algorithm, with the picked */
} clef_cuda_gemm_info;
void clef_cuda_gemm_stats(const clef_ops *ops, clef_cuda_gemm_info *s);

/* CUDA graphs for whole forward passes (docs/cuda.md "Graphs"). Off by default (run 2026-12-04a: the
 * same bits, 1.7 ms saved at 436 tokens, ~0.7 GB of pool per shape; the engine does not call it yet): $CLEF_CUDA_GRAPH=1 at create, or clef_cuda_set_graph; $CLEF_CUDA_GRAPH_MAX (default
 * 8) caps the graphs kept (later keys run eagerly). clef_cuda_graph_run(ops, key, fn, ctx) runs
 * fn(ops, ctx) (a forward that allocates, uploads and calls ops, and frees what it allocated) and
 * returns its result: with graphs off, or profiling on, simply fn; else the first call of a key runs
 * eagerly (warm-up), the second is captured into a graph, later ones replay it when the pass makes
 * the same calls (checked by a fingerprint; otherwise fn reruns eagerly). A pass that downloads or
 * syncs inside stays eager. The key is the caller's shape (token count; a packed batch's layout
 * hash). */
typedef int (*clef_cuda_pass_fn)(clef_ops *ops, void *ctx);
void clef_cuda_set_graph(clef_ops *ops, int on);
int clef_cuda_graph_enabled(const clef_ops *ops);
int clef_cuda_graph_run(clef_ops *ops, uint64_t key, clef_cuda_pass_fn fn, void *ctx);
typedef struct clef_cuda_graph_info {
    uint64_t eager, captured, replayed, fallbacks; /* passes by kind (a fallback also counts as eager) */
    size_t graphs, unsafe;                          /* keys with a graph / kept eager */
    size_t pool_bytes, staging_bytes;               /* device pools and pinned staging of the graphs */
    char last_unsafe_why[96];
} clef_cuda_graph_info;
void clef_cuda_graph_stats(const clef_ops *ops, clef_cuda_graph_info *s);

/* Per-op timing with CUDA events (off by default; on costs a little launch overhead). */
typedef struct clef_cuda_op_time {
    const char *op;  /* "linear", "attention", ... */
    uint64_t calls;
    double ms;       /* summed kernel time between the op's start and end events */
    double flop;     /* floating-point operations its kernels issued (the real work: the fast
                        precision's two GEMM products per weight, 3xTF32 attention's three MMAs per
                        product); 0 for ops that do not count (elementwise, norms) */
} clef_cuda_op_time;
void clef_cuda_profile(clef_ops *ops, int on);
/* Syncs, then fills out[0..n) (n <= max) with the totals since the last reset; returns n. */
size_t clef_cuda_profile_read(clef_ops *ops, clef_cuda_op_time *out, size_t max);
void clef_cuda_profile_reset(clef_ops *ops);

#ifdef __cplusplus
}
#endif
#endif
