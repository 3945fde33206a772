/* GEMM for fp32 activations x bf16 weights (the `linear` op's kernel):
 *
 *     y[t, n] = sum_k x[t, k] * W[n, k]  (+ bias[n])     t < T, n < N, k < K
 *
 * x fp32 rows at stride ldx, W bf16 rows (as stored in the checkpoint, row-major [N x K]) at
 * stride ldw, y fp32 rows at stride ldy. y must not overlap x, W or bias.
 *
 * Exact kernels (REF, AVX2, AVX512) all compute, for every output element, the same sequence of
 * roundings, so they give the same bits as each other, for any thread count, any T and any
 * position of the row in the batch:
 *
 *     acc = +0;  for k = 0 .. K-1:  acc = fmaf(x[t,k], (float)W[n,k], acc);   y = acc + bias[n]
 *
 * (one fp32 fused multiply-add per k in increasing k, bf16 -> fp32 widening is exact; the bias,
 * when given, is added once at the end with one fp32 rounding). Blocking over K only stores the
 * partial sum to y and reloads it (exact), so it never changes the order. The error bound is the
 * usual one for a sequential fp32 dot product: |y - exact| <= K * 2^-24 * sum_k |x w| (about
 * 2.4e-4 relative to sum|x w| at K = 4096; random-sign data sits near sqrt(K) * 2^-24 instead).
 *
 * (An AVX512_BF16 kernel that rounds x to bf16, not exact and slower than AVX512, is kept for
 * measuring in bench/gemm_avx512bf16.c, outside the library.)
 *
 * The AMX kernel (gemm_amx.c) takes the same exact fp32 inputs (x split exactly into three bf16
 * terms) and accumulates in fp32 in its own fixed order: its bits differ from the exact kernels'
 * but, like theirs, never depend on threads, T or a row's position.
 *
 * Threads: work is cut into tiles of output (column blocks, and row blocks when N is small); each
 * tile runs entirely on one worker, so the bits are those above whatever the partition. */
#ifndef CLEF_COMPUTE_CPU_GEMM_H
#define CLEF_COMPUTE_CPU_GEMM_H

#include <stddef.h>
#include <stdint.h>

#include "base/threads.h"

typedef enum {
    CLEF_GEMM_AUTO = 0,    /* the fastest exact-input kernel this CPU runs (AMX; else the faster of AVX512 / AVX2 as measured; REF) */
    CLEF_GEMM_REF,         /* portable C, fmaf in k order (slow; the fallback) */
    CLEF_GEMM_AVX2,        /* AVX2 + FMA: 6 x 16 register tile */
    CLEF_GEMM_AVX512,      /* AVX-512F/BW: 12 x 32 register tile */
    CLEF_GEMM_AMX,         /* AMX-BF16, x split exactly into 3 bf16 terms (gemm_amx.c): exact
                            * inputs, fp32 accumulation in its own fixed order */
    CLEF_GEMM_NKERNELS
} clef_gemm_kernel;

/* y = x . W^T (+ bias) with the CLEF_GEMM_AUTO kernel (chosen once from the CPU's features; the
 * CPU backend passes the one its knobs name instead: clef_gemm_named, CLEF_GEMM). pool may
 * be NULL (calling thread only). bias may be NULL. T, N or K == 0 is allowed (K == 0 writes bias
 * or zeros). Returns 0, or -1 when scratch memory could not be allocated (y then unspecified). */
int clef_gemm_bf16(clef_pool *pool, float *y, size_t ldy, const float *x, size_t ldx, size_t T,
                   size_t K, const uint16_t *W, size_t ldw, size_t N, const float *bias);

/* The same with an explicit kernel; -1 also when the CPU cannot run it. */
int clef_gemm_bf16_with(clef_gemm_kernel kern, clef_pool *pool, float *y, size_t ldy,
                        const float *x, size_t ldx, size_t T, size_t K, const uint16_t *W,
                        size_t ldw, size_t N, const float *bias);

/* Weights packed once for the AMX kernel. The unpacked AMX path copies every block of weights
 * into its tile layout on every call (a DRAM-bound copy, ~35% of a one-thread GEMM: docs/
 * performance.md, GEMM); a packed matrix holds all of W in exactly that layout (32-column panels,
 * each [K/32 blocks][2 column tiles][16 pair rows][32 bf16], zero rows past N and zero k past K),
 * so the kernel reads it in place. Same products in the same order as clef_gemm_bf16_with(AMX):
 * the same bits, for any thread count, T and row slice. */
typedef struct clef_gemm_packed clef_gemm_packed;
#define CLEF_GEMM_PACKED_ALIGN 32 /* row0 of a slice must be a multiple of this (the panel width) */
/* Packs W [N x K] (row stride ldw >= K) with the pool's workers. NULL when AMX is not available
 * (clef_gemm_available), N or K is 0, or out of memory. */
clef_gemm_packed *clef_gemm_pack(clef_pool *pool, const uint16_t *W, size_t ldw, size_t N, size_t K);
void clef_gemm_packed_free(clef_gemm_packed *p); /* NULL ok */
size_t clef_gemm_packed_bytes(const clef_gemm_packed *p); /* the memory it holds */
/* 1 when rows [row0, row0 + N) of the packed matrix can be used (row0 a multiple of
 * CLEF_GEMM_PACKED_ALIGN, in range); otherwise call clef_gemm_bf16_with on the original rows. */
int clef_gemm_packed_fits(const clef_gemm_packed *p, size_t row0, size_t N);
/* y = x . W[row0 .. row0 + N)^T (+ bias[0 .. N)) from the packed matrix, K = the packed K. Returns
 * 0, or -1 when the slice does not fit (clef_gemm_packed_fits) or scratch memory ran out. */
int clef_gemm_bf16_packed(clef_pool *pool, float *y, size_t ldy, const float *x, size_t ldx, size_t T,
                          const clef_gemm_packed *p, size_t row0, size_t N, const float *bias);

/* 1 when this CPU (after CLEF_CPU_MASK, base/cpu_features.h) runs the kernel; else 0 and *why
 * (when why != NULL) names what is missing. */
int clef_gemm_available(clef_gemm_kernel kern, const char **why);
const char *clef_gemm_name(clef_gemm_kernel kern);
/* What CLEF_GEMM_AUTO resolves to, chosen once per process at first use: AMX where Linux grants
 * it; else, where both AVX-512 and AVX2 kernels run, the one a short timing on this CPU finds
 * faster (a few ms, one thread; the same bits either way); else the best one the CPU runs. */
clef_gemm_kernel clef_gemm_default(void);
/* The single-thread GFLOP/s clef_gemm_default measured for the kernel (0: not timed). */
double clef_gemm_measured_gflops(clef_gemm_kernel kern);
/* Of the n candidate kernels, the one this CPU runs fastest by that timing (gflops[i]: each one's
 * best GFLOP/s, 0 for one it cannot run); the first runnable one on a tie or when the probe's
 * memory ran out; CLEF_GEMM_REF when none runs. */
clef_gemm_kernel clef_gemm_fastest(const clef_gemm_kernel *cands, size_t n, double *gflops);
/* The exact-input kernel called name ("ref", "avx2", "avx512", "amx": the knob CLEF_GEMM) when this
 * CPU runs it, else clef_gemm_default(). */
clef_gemm_kernel clef_gemm_named(const char *name);

/* ---- internal: the per-ISA pieces gemm.c dispatches to ---- */
typedef struct {
    float *y; size_t ldy;
    const float *x; size_t ldx;
    const uint16_t *W; size_t ldw;
    const float *bias;
    size_t T, K, N;
} clef_gemm_args;

/* Computes rows [t0, t1) x columns [n0, n1) of y; scratch holds clef_gemm_*_scratch floats. */
typedef void (*clef_gemm_tile_fn)(const clef_gemm_args *a, size_t t0, size_t t1, size_t n0,
                                  size_t n1, float *scratch);

void clef_gemm_ref_tile(const clef_gemm_args *a, size_t t0, size_t t1, size_t n0, size_t n1,
                        float *scratch);
void clef_gemm_avx2_tile(const clef_gemm_args *a, size_t t0, size_t t1, size_t n0, size_t n1,
                         float *scratch);
void clef_gemm_avx512_tile(const clef_gemm_args *a, size_t t0, size_t t1, size_t n0, size_t n1,
                           float *scratch);

/* Blocking shared by the kernels, and the per-worker scratch (floats): a packed weight block
 * (KC x NC fp32) and a copy of an activation block (MC rows of KC, at a padded stride so the rows
 * do not all map to the same L1 sets as they do at a stride of K = 4096 floats). */
#ifndef CLEF_GEMM_KC
#define CLEF_GEMM_KC 256    /* k per packed block (exact kernels) */
#endif
#ifndef CLEF_GEMM_NC
#define CLEF_GEMM_NC 512    /* columns per packed block; a multiple of every NR */
#endif
#ifndef CLEF_GEMM_MC
#define CLEF_GEMM_MC 516    /* activation rows per block; a multiple of every MR */
#endif
#define CLEF_GEMM_LDA (CLEF_GEMM_KC + 16)

/* AMX kernel (gemm_amx.c): rows per chunk of packed activations, k per packed weight block, and
 * the per-worker scratch. */
#ifndef CLEF_AMX_TC
#define CLEF_AMX_TC 512
#endif
#ifndef CLEF_AMX_KC
#define CLEF_AMX_KC 256 /* a multiple of 32 (docs/rejected-experiments.md: 128 / 256 / 512) */
#endif
#ifndef CLEF_AMX_NCB
#define CLEF_AMX_NCB 8 /* 32-column panels per block sharing one pass over a K block of x */
#endif
/* per worker: NCB panels' weights (not with packed weights) and the partial sums */
size_t clef_gemm_amx_scratch_bytes(size_t K, int packed_weights);
typedef struct {
    const uint16_t *xp;   /* the chunk's packed x terms (clef_gemm_amx_pack) */
    size_t rows;          /* rows in the chunk */
    float *y; size_t ldy; /* row 0 of the chunk */
    const uint16_t *W; size_t ldw;
    const uint16_t *wp;   /* or NULL: all of W packed (clef_gemm_amx_pack_w), panel 0 = column 0 */
    const float *bias;
    size_t K, N;
} clef_gemm_amx_chunk;
size_t clef_gemm_amx_xp_elems(size_t rows, size_t K);
void clef_gemm_amx_pack(uint16_t *xp, const float *x, size_t ldx, size_t rows, size_t K, size_t r0,
                        size_t r1);
/* bf16 elements of W [N x K] packed whole, and the packing of panels [p0, p0 + np) into wp (the
 * whole matrix's buffer: panel p starts at element p * clef_gemm_amx_panel_elems(K)). */
size_t clef_gemm_amx_panel_elems(size_t K);
void clef_gemm_amx_pack_w(uint16_t *wp, const uint16_t *W, size_t ldw, size_t N, size_t K, size_t p0,
                          size_t np);
void clef_gemm_amx_panels(const clef_gemm_amx_chunk *c, size_t p0, size_t p1, void *scratch);
/* Loads, on the calling thread, the tile configuration every AMX user here runs with: palette 1,
 * tiles 0-7 of 16 rows x 64 bytes. Only where clef_gemm_available(CLEF_GEMM_AMX) (which also asks
 * Linux for the tile state); release with _tile_release(). */
void clef_gemm_amx_tile_config(void);
#define CLEF_GEMM_SCRATCH ((size_t)CLEF_GEMM_KC * CLEF_GEMM_NC + (size_t)CLEF_GEMM_MC * CLEF_GEMM_LDA)

#endif
