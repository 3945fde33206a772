/* Softmax attention, FlashAttention-style: one block per (16 query rows, query head); K and V are
 * streamed through shared memory in tiles of 32 keys and each query row keeps a running maximum,
 * a running sum and its output accumulator (online softmax), so memory is O(tile), never T x T.
 * GQA reads kv head h / (nh / nkv) in place (no copies); causal blocks stop at their last row.
 * fp32 with explicit FMAs (the CPU backend sums in double: differences are float rounding, ~1e-6
 * relative). Each output element is produced by one lane with a fixed order: no atomics. Head dims
 * up to 256.
 *
 * Packed records (ops.h clef_attn_seg): every kernel takes a table of up to SEG_MAX segments by value
 * (no upload: a CUDA graph holds it as a launch argument); the grid's x runs over the query blocks of
 * all of them, a block finds its segment in the table (cumulative block counts) and works on that
 * segment's query rows [q0, q0 + nq) and keys [k0, k0 + nk) only: block-diagonal attention, so a
 * row's bits do not depend on the other segments. Causal with nk > nq (keys cached from an earlier
 * forward): query row i sees keys t <= i + (nk - nq). More segments: one launch per SEG_MAX. */
#include "compute/cuda/cuda_internal.cuh"

namespace clefcu {

/* ---- segments ---- */
static const int SEG_MAX = 64;
struct AttnTab {
    int nseg;
    unsigned q0[SEG_MAX], nq[SEG_MAX], k0[SEG_MAX], nk[SEG_MAX];
    unsigned first[SEG_MAX + 1]; /* the segment's first query block; first[nseg] = blocks in all */
};

__device__ __forceinline__ int seg_of(const AttnTab &t, unsigned b) {
    int s = 0;
    while (s + 1 < t.nseg && t.first[s + 1] <= b) s++;
    return s;
}

/* The block's segment: shifts q, o, k, v to its first rows and defines Tq, Tk (its query and key
 * rows), off (causal: keys t <= i + off) and i0 (the block's first query row in the segment). */
#define ATTN_SEGMENT(BQV)                                                                                  \
    const int seg_ = seg_of(tab, blockIdx.x);                                                              \
    const size_t Tq = tab.nq[seg_], Tk = tab.nk[seg_], off = causal ? Tk - Tq : 0;                         \
    const size_t i0 = (size_t)(blockIdx.x - tab.first[seg_]) * (size_t)(BQV);                              \
    q += (size_t)tab.q0[seg_] * ldq;                                                                       \
    o += (size_t)tab.q0[seg_] * ldo;                                                                       \
    k += (size_t)tab.k0[seg_] * ldk;                                                                       \
    v += (size_t)tab.k0[seg_] * ldv

/* Calls launch(tab, blocks) for each group of up to SEG_MAX segments with query rows (query blocks of
 * BQV rows). */
template <typename F> static void for_seg_groups(const clef_attn_seg *segs, size_t nseg, int BQV, F launch) {
    size_t i = 0;
    while (i < nseg) {
        AttnTab tab;
        memset(&tab, 0, sizeof tab);
        unsigned nb = 0;
        int n = 0;
        for (; i < nseg && n < SEG_MAX; i++) {
            if (!segs[i].nq) continue;
            tab.q0[n] = (unsigned)segs[i].q0;
            tab.nq[n] = (unsigned)segs[i].nq;
            tab.k0[n] = (unsigned)segs[i].k0;
            tab.nk[n] = (unsigned)segs[i].nk;
            tab.first[n] = nb;
            nb += (unsigned)((segs[i].nq + (size_t)BQV - 1) / (size_t)BQV);
            n++;
        }
        tab.first[n] = nb;
        tab.nseg = n;
        if (nb) launch(tab, nb);
    }
}

static const int BQ = 16;    /* query rows per block */
static const int BK = 32;    /* keys per tile */
static const int NW = 4;     /* warps per block */
static const int RPW = BQ / NW;
static const int EMAX = 8;   /* hd / 32 rounded up, hd <= 256 */

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* One attention call's operands, as op_attention receives them. */
struct AttnArgs {
    float *o;
    size_t ldo;
    const float *q;
    size_t ldq;
    const float *k;
    size_t ldk;
    const float *v;
    size_t ldv;
    const clef_attn_seg *segs;
    size_t nseg, nh, nkv, hd;
    float scale;
    int causal;
};

/* The kernels on fp32 operands (SIMT, 3xTF32 tensor cores, register tiles) share one signature and
 * one launcher; a pick names the kernel and how it is launched. */
typedef void (*AttnKernel)(float *, size_t, const float *, size_t, const float *, size_t, const float *, size_t,
                           AttnTab, size_t, size_t, int, float, int);
struct AttnPick {
    AttnKernel kernel;
    size_t smem;      /* dynamic shared memory, bytes */
    int bq, threads;  /* query rows and threads per block */
    const char *what; /* for a failed launch's message */
};

/* Launches p over every segment group; false when its shared memory is over the device's (the
 * caller falls back). True also when CUDA refused the opt-in (ops->status is then set). */
static bool launch_attn(clef_ops *ops, const AttnPick &p, const AttnArgs &a) {
    Impl *im = IM(ops);
    if (p.smem > (size_t)im->max_smem_optin) return false;
    if (!smem_optin(ops, p.kernel, p.smem, "attention (shared memory)")) return true;
    for_seg_groups(a.segs, a.nseg, p.bq, [&](const AttnTab &tab, unsigned nb) {
        dim3 grid(nb, (unsigned)a.nh);
        p.kernel<<<grid, p.threads, p.smem, im->stream>>>(a.o, a.ldo, a.q, a.ldq, a.k, a.ldk, a.v, a.ldv, tab, a.nh, a.nkv,
                                                          (int)a.hd, a.scale, a.causal);
    });
    launch_ok(ops, p.what);
    return true;
}

__global__ void __launch_bounds__(NW * 32)
k_attention(float *o, size_t ldo, const float *q, size_t ldq, const float *k, size_t ldk, const float *v, size_t ldv,
            AttnTab tab, size_t nh, size_t nkv, int hd, float scale, int causal) {
    extern __shared__ float sm[];
    const int hdp = hd + 1;
    float *Qs = sm;                          /* [BQ, hd] */
    float *Ks = Qs + BQ * hd;                /* [BK, hd + 1] */
    float *Vs = Ks + BK * hdp;               /* [BK, hd] */
    ATTN_SEGMENT(BQ);
    const size_t h = blockIdx.y, jh = h / (nh / nkv);
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int E = (hd + 31) / 32;

    for (int p = threadIdx.x; p < BQ * hd; p += blockDim.x) {
        int r = p / hd, d = p % hd;
        Qs[p] = i0 + r < Tq ? q[(i0 + r) * ldq + h * hd + d] : 0.0f;
    }
    float m[RPW], l[RPW], acc[RPW][EMAX];
    for (int rr = 0; rr < RPW; rr++) {
        m[rr] = -INFINITY;
        l[rr] = 0.0f;
        for (int e = 0; e < EMAX; e++) acc[rr][e] = 0.0f;
    }
    size_t kend = Tk;
    if (causal) {
        size_t last = (i0 + BQ < Tq ? i0 + BQ : Tq) + off; /* keys <= last row + off */
        kend = last < Tk ? last : Tk;
    }
    for (size_t k0 = 0; k0 < kend; k0 += BK) {
        __syncthreads();
        for (int p = threadIdx.x; p < BK * hd; p += blockDim.x) {
            int t = p / hd, d = p % hd;
            bool ok = k0 + t < Tk;
            Ks[t * hdp + d] = ok ? k[(k0 + t) * ldk + jh * hd + d] : 0.0f;
            Vs[t * hd + d] = ok ? v[(k0 + t) * ldv + jh * hd + d] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int rr = 0; rr < RPW; rr++) {
            const int r = w * RPW + rr;
            const size_t i = i0 + r;
            if (i >= Tq) continue; /* warp-uniform */
            const size_t key = k0 + lane;
            bool valid = key < Tk && (!causal || key <= i + off);
            float s = 0.0f;
            const float *qr = Qs + r * hd, *kr = Ks + lane * hdp;
            for (int d = 0; d < hd; d++) s = __fmaf_rn(qr[d], kr[d], s);
            s = valid ? s * scale : -INFINITY;
            float mt = warp_max(s);
            float mn = fmaxf(m[rr], mt);
            if (mn == -INFINITY) continue; /* nothing valid yet (warp-uniform) */
            float p = valid ? expf(s - mn) : 0.0f;
            float corr = expf(m[rr] - mn);
            l[rr] = l[rr] * corr + warp_sum(p);
            m[rr] = mn;
#pragma unroll
            for (int e = 0; e < EMAX; e++) acc[rr][e] *= corr;
            for (int t = 0; t < BK; t++) {
                float pt = __shfl_sync(0xffffffffu, p, t);
                const float *vr = Vs + t * hd;
#pragma unroll
                for (int e = 0; e < EMAX; e++) {
                    int d = lane + 32 * e;
                    if (e < E && d < hd) acc[rr][e] = __fmaf_rn(pt, vr[d], acc[rr][e]);
                }
            }
        }
    }
#pragma unroll
    for (int rr = 0; rr < RPW; rr++) {
        const size_t i = i0 + w * RPW + rr;
        if (i >= Tq) continue;
        float *orow = o + i * ldo + h * hd;
#pragma unroll
        for (int e = 0; e < EMAX; e++) {
            int d = lane + 32 * e;
            if (e < E && d < hd) orow[d] = acc[rr][e] / l[rr];
        }
    }
}

/* ---- v2 for the fast precision: tensor cores, 3xTF32 (the default there; CLEF_CUDA_ATTN=simt
 * selects the kernel above) ----
 *
 * The SIMT kernel reached ~3.6 TFLOP/s at 16k tokens (run 2026-11-30a: 4.3 s of the 6.0 s fast
 * prefill). This is a FlashAttention-2 style kernel on mma.sync m16n8k8 TF32: one block of 4 warps per
 * (64 query rows, head), each warp 16 rows; K/V tiles of 32 keys in shared memory (fp32); S = Q K^T
 * and O += P V on the tensor cores with fp32 accumulation; online softmax in fp32 registers.
 * Precision: one bf16 (or tf32) rounding of Q, K, P, V would cost about as much as the one-term
 * bf16 GEMMs did (corpus max |dp| 1.6e-2), so every operand is split x = big + small (both tf32,
 * round to nearest; x - big is exact) and each product is big*big + big*small + small*big: the
 * dropped terms are ~2^-22 relative, fp32-class, and the op keeps the 1e-5 bar of the parity path.
 * P V sums keys in a permuted order inside each group of 8 (the accumulator layout of S is reused
 * as P's operand layout; V's rows are read in the same permutation): a fixed order, so the bits
 * repeat. Head dims are padded with zeros to DP in {32, 64, 72, 128, 256}. */
static const int T2_BQ = 64, T2_BK = 32, T2_NT = 128;

__device__ __forceinline__ uint32_t tf32_rna(float x) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}
/* x = big + small, both tf32 (x - big is exact in fp32) */
__device__ __forceinline__ void tf32_split(float x, uint32_t &big, uint32_t &small) {
    big = tf32_rna(x);
    small = tf32_rna(x - __uint_as_float(big));
}
__device__ __forceinline__ void mma_tf32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/* c += a b with both split: small terms first */
__device__ __forceinline__ void mma3(float (&c)[4], const uint32_t (&ab)[4], const uint32_t (&as)[4], uint32_t bb0,
                                     uint32_t bb1, uint32_t bs0, uint32_t bs1) {
    mma_tf32(c, as, bb0, bb1);
    mma_tf32(c, ab, bs0, bs1);
    mma_tf32(c, ab, bb0, bb1);
}

/* The online-softmax step both tensor-core kernels share, on one warp's 16 rows x 8 NS keys of S in
 * the m16n8 accumulator layout (rows g and g + 8; each row's values sit in the 4 lanes of a quad):
 * scale, mask (keys past Tk, causal), the new row maxima, S -> P = exp(S - max) in place, the rows'
 * sums l and the rescale of the O accumulators. EXP2: scores and maxima in log2 units (the caller's
 * scale includes log2 e) and exp2f; else expf. */
template <int NS, int NO, bool EXP2>
__device__ __forceinline__ void softmax_step(float (&sacc)[NS][4], float (&oacc)[NO][4], float &m0, float &m1,
                                             float &l0, float &l1, size_t k0, int c4, size_t row0, size_t row1,
                                             size_t Tk, size_t off, int causal, float scale) {
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int j = 0; j < NS; j++) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const size_t key = k0 + j * 8 + 2 * c4 + (e & 1), row = e < 2 ? row0 : row1;
            const bool valid = key < Tk && (!causal || key <= row + off);
            sacc[j][e] = valid ? sacc[j][e] * scale : -INFINITY;
        }
        mx0 = fmaxf(mx0, fmaxf(sacc[j][0], sacc[j][1]));
        mx1 = fmaxf(mx1, fmaxf(sacc[j][2], sacc[j][3]));
    }
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
    const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
    /* m == -inf: nothing valid yet, l and O are 0 (corr 0 avoids inf - inf) */
    const float corr0 = m0 == -INFINITY ? 0.0f : EXP2 ? exp2f(m0 - mn0) : expf(m0 - mn0);
    const float corr1 = m1 == -INFINITY ? 0.0f : EXP2 ? exp2f(m1 - mn1) : expf(m1 - mn1);
    float ps0 = 0.0f, ps1 = 0.0f;
#pragma unroll
    for (int j = 0; j < NS; j++) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const float mn = e < 2 ? mn0 : mn1;
            sacc[j][e] = sacc[j][e] == -INFINITY ? 0.0f : EXP2 ? exp2f(sacc[j][e] - mn) : expf(sacc[j][e] - mn);
        }
        ps0 += sacc[j][0] + sacc[j][1];
        ps1 += sacc[j][2] + sacc[j][3];
    }
    ps0 += __shfl_xor_sync(0xffffffffu, ps0, 1);
    ps0 += __shfl_xor_sync(0xffffffffu, ps0, 2);
    ps1 += __shfl_xor_sync(0xffffffffu, ps1, 1);
    ps1 += __shfl_xor_sync(0xffffffffu, ps1, 2);
    l0 = l0 * corr0 + ps0;
    l1 = l1 * corr1 + ps1;
    m0 = mn0;
    m1 = mn1;
#pragma unroll
    for (int n = 0; n < NO; n++) {
        oacc[n][0] *= corr0;
        oacc[n][1] *= corr0;
        oacc[n][2] *= corr1;
        oacc[n][3] *= corr1;
    }
}

/* O / l for the warp's rows g and g + 8 (the accumulator layout): columns below hd, rows below Tq. */
template <int NO>
__device__ __forceinline__ void store_rows(float *o, size_t ldo, size_t h, int hd, size_t Tq, size_t row0,
                                           size_t row1, int c4, const float (&oacc)[NO][4], float l0, float l1) {
#pragma unroll
    for (int n = 0; n < NO; n++) {
        const int d = n * 8 + 2 * c4;
        if (row0 < Tq) {
            float *orow = o + row0 * ldo + h * hd;
            if (d < hd) orow[d] = oacc[n][0] / l0;
            if (d + 1 < hd) orow[d + 1] = oacc[n][1] / l0;
        }
        if (row1 < Tq) {
            float *orow = o + row1 * ldo + h * hd;
            if (d < hd) orow[d] = oacc[n][2] / l1;
            if (d + 1 < hd) orow[d + 1] = oacc[n][3] / l1;
        }
    }
}

template <int DP> static size_t t2_smem_bytes() { return (size_t)(T2_BQ + 2 * T2_BK) * (DP + 4) * sizeof(float); }

/* Fragment layouts (PTX ISA, mma.m16n8k8 .tf32), g = lane / 4, c = lane % 4:
 *   A 16x8: a0 (g, c), a1 (g + 8, c), a2 (g, c + 4), a3 (g + 8, c + 4)
 *   B 8x8:  b0 (k = c, n = g), b1 (k = c + 4, n = g)
 *   C 16x8: c0 (g, 2c), c1 (g, 2c + 1), c2 (g + 8, 2c), c3 (g + 8, 2c + 1) */
template <int DP>
__global__ void __launch_bounds__(T2_NT)
k_attention_tc(float *o, size_t ldo, const float *q, size_t ldq, const float *k, size_t ldk, const float *v,
               size_t ldv, AttnTab tab, size_t nh, size_t nkv, int hd, float scale, int causal) {
    constexpr int LD = DP + 4; /* row r and r + 1 four banks apart: conflict-free fragment loads */
    constexpr int NO = DP / 8; /* n-tiles of O, k-steps of S */
    extern __shared__ float4 sm4[];
    float *Qs = reinterpret_cast<float *>(sm4); /* [BQ][LD] */
    float *Ks = Qs + T2_BQ * LD;                /* [BK][LD] */
    float *Vs = Ks + T2_BK * LD;                /* [BK][LD] */
    ATTN_SEGMENT(T2_BQ);
    const size_t h = blockIdx.y, jh = h / (nh / nkv);
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, c4 = lane & 3;
    const int wr = w * 16; /* this warp's first row in the block */

    for (int p = tid; p < T2_BQ * DP; p += T2_NT) {
        int r = p / DP, d = p % DP;
        Qs[r * LD + d] = i0 + r < Tq && d < hd ? q[(i0 + r) * ldq + h * hd + d] : 0.0f;
    }
    float oacc[NO][4];
#pragma unroll
    for (int n = 0; n < NO; n++) oacc[n][0] = oacc[n][1] = oacc[n][2] = oacc[n][3] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f; /* rows g and g + 8 of the warp */
    const size_t row0 = i0 + wr + g, row1 = row0 + 8;
    size_t kend = Tk;
    if (causal) {
        size_t last = (i0 + T2_BQ < Tq ? i0 + T2_BQ : Tq) + off;
        kend = last < Tk ? last : Tk;
    }
    for (size_t k0 = 0; k0 < kend; k0 += T2_BK) {
        __syncthreads(); /* the previous tile is consumed (and Qs is written, first time) */
        for (int p = tid; p < T2_BK * DP; p += T2_NT) {
            int t = p / DP, d = p % DP;
            bool ok = k0 + t < Tk && d < hd;
            Ks[t * LD + d] = ok ? k[(k0 + t) * ldk + jh * hd + d] : 0.0f;
            Vs[t * LD + d] = ok ? v[(k0 + t) * ldv + jh * hd + d] : 0.0f;
        }
        __syncthreads();
        if (causal && k0 > i0 + wr + 15 + off) continue; /* every key after this warp's rows (warp-uniform) */
        /* S = Q K^T over d */
        float sacc[4][4];
#pragma unroll
        for (int j = 0; j < 4; j++) sacc[j][0] = sacc[j][1] = sacc[j][2] = sacc[j][3] = 0.0f;
#pragma unroll 4
        for (int ks = 0; ks < NO; ks++) {
            const int d0 = ks * 8;
            uint32_t ab[4], as[4];
            tf32_split(Qs[(wr + g) * LD + d0 + c4], ab[0], as[0]);
            tf32_split(Qs[(wr + g + 8) * LD + d0 + c4], ab[1], as[1]);
            tf32_split(Qs[(wr + g) * LD + d0 + c4 + 4], ab[2], as[2]);
            tf32_split(Qs[(wr + g + 8) * LD + d0 + c4 + 4], ab[3], as[3]);
#pragma unroll
            for (int j = 0; j < 4; j++) {
                uint32_t bb0, bs0, bb1, bs1;
                tf32_split(Ks[(j * 8 + g) * LD + d0 + c4], bb0, bs0);
                tf32_split(Ks[(j * 8 + g) * LD + d0 + c4 + 4], bb1, bs1);
                mma3(sacc[j], ab, as, bb0, bb1, bs0, bs1);
            }
        }
        softmax_step<4, NO, false>(sacc, oacc, m0, m1, l0, l1, k0, c4, row0, row1, Tk, off, causal, scale);
        /* O += P V, 8 keys per step: P's A operand is S's accumulator with the keys of column slots
         * c and c + 4 taken as keys 2c and 2c + 1; V's rows are read in that same order */
#pragma unroll
        for (int j = 0; j < 4; j++) {
            uint32_t ab[4], as[4];
            tf32_split(sacc[j][0], ab[0], as[0]);
            tf32_split(sacc[j][2], ab[1], as[1]);
            tf32_split(sacc[j][1], ab[2], as[2]);
            tf32_split(sacc[j][3], ab[3], as[3]);
            const float *v0 = Vs + (j * 8 + 2 * c4) * LD, *v1 = v0 + LD;
#pragma unroll /* fully: oacc must stay in registers */
            for (int n = 0; n < NO; n++) {
                uint32_t bb0, bs0, bb1, bs1;
                tf32_split(v0[n * 8 + g], bb0, bs0);
                tf32_split(v1[n * 8 + g], bb1, bs1);
                mma3(oacc[n], ab, as, bb0, bb1, bs0, bs1);
            }
        }
    }
    store_rows<NO>(o, ldo, h, hd, Tq, row0, row1, c4, oacc, l0, l1);
}

/* The tensor-core kernel for the head dim hd, padded to the next of 32, 64, 72, 128, 256. */
template <int DP> static AttnPick tc_pick() {
    return {k_attention_tc<DP>, t2_smem_bytes<DP>(), T2_BQ, T2_NT, "attention (tensor cores)"};
}
static AttnPick pick_tc(size_t hd) {
    return hd <= 32 ? tc_pick<32>() : hd <= 64 ? tc_pick<64>() : hd <= 72 ? tc_pick<72>() : hd <= 128 ? tc_pick<128>()
                                                                                                     : tc_pick<256>();
}

/* ---- register-tiled SIMT kernel for the fp32 (parity) precision: CLEF_CUDA_ATTN=v3 and v4 (the
 * default since run 2026-12-04a verified it: 2.0 / 18.4 ms at 436 / 2,048 tokens, k_attention 6.4 /
 * 87.9) ----
 *
 * k_attention computes one score per lane with a serial dot product and one output column per lane
 * per row: ~3.6 TFLOP/s (run 2026-11-30b: 4.3 s of attention at 16k tokens, fp32). Here a block of
 * 256 threads owns 64 query rows of one head; thread (rg, cg) = (tid / 16, tid % 16) owns rows
 * rg + 16 i (i < 4), keys cg and cg + 16 of each 32-key tile, and output columns cg + 16 e
 * (e < DP / 16): 8 scores and 4 x DP/16 accumulators in registers, every shared-memory value
 * reused 2-4 times. Q (64 rows) stays in shared memory; K and then V of a tile share one buffer.
 * Per tile: S = Q K^T (fp32 FMAs over d in order, as k_attention), the row max / sum across the 16
 * threads of a row group (shuffles in a fixed tree), online-softmax rescale, P to shared memory,
 * O += P V over the 32 keys in order. Exact fp32 with FMAs, no atomics: the same bits on repeat.
 * Head dims are zero-padded to DP in {32, 64, 80, 128, 256}; causal blocks stop at their last row;
 * GQA reads kv head h / (nh / nkv) in place. Shared memory (64 + 32) (DP + 4) + 64 x 33 floats:
 * 108 KB at DP = 256 (sm_89's 99 KB: the text heads fall back to k_attention). */
static const int T3_BQ = 64, T3_BK = 32, T3_NT = 256;

template <int DP> static size_t t3_smem_bytes() {
    return ((size_t)(T3_BQ + T3_BK) * (DP + 4) + (size_t)T3_BQ * (T3_BK + 1)) * sizeof(float);
}

__device__ __forceinline__ float half_max(float v) { /* over the 16 lanes of a half warp */
    for (int o = 8; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float half_sum(float v) {
    for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

template <int DP>
__global__ void __launch_bounds__(T3_NT, 2)
k_attention_rt(float *o, size_t ldo, const float *q, size_t ldq, const float *k, size_t ldk, const float *v, size_t ldv,
               AttnTab tab, size_t nh, size_t nkv, int hd, float scale, int causal) {
    constexpr int LD = DP + 4;         /* rows 4 banks apart: the float4 key loads are conflict-free */
    constexpr int E = DP / 16, RI = T3_BQ / 16, LP = T3_BK + 1;
    extern __shared__ float4 sm4a[];   /* float4: 16-byte alignment */
    float *Qs = reinterpret_cast<float *>(sm4a); /* [BQ][LD] */
    float *KV = Qs + T3_BQ * LD;                 /* [BK][LD]: K, then V of the tile */
    float *Ps = KV + T3_BK * LD;                 /* [BQ][LP] */
    ATTN_SEGMENT(T3_BQ);
    const size_t h = blockIdx.y, jh = h / (nh / nkv);
    const int tid = threadIdx.x, rg = tid >> 4, cg = tid & 15;

    for (int p = tid; p < T3_BQ * DP; p += T3_NT) {
        const int r = p / DP, d = p % DP;
        Qs[r * LD + d] = i0 + r < Tq && d < hd ? q[(i0 + r) * ldq + h * hd + d] : 0.0f;
    }
    float m[RI], l[RI], acc[RI][E];
#pragma unroll
    for (int i = 0; i < RI; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
#pragma unroll
        for (int e = 0; e < E; e++) acc[i][e] = 0.0f;
    }
    size_t kend = Tk;
    if (causal) {
        const size_t last = (i0 + T3_BQ < Tq ? i0 + T3_BQ : Tq) + off; /* keys <= the block's last row + off */
        kend = last < Tk ? last : Tk;
    }
    for (size_t k0 = 0; k0 < kend; k0 += T3_BK) {
        __syncthreads(); /* the previous tile's P V is done with KV and Ps */
        for (int p = tid; p < T3_BK * DP; p += T3_NT) {
            const int t = p / DP, d = p % DP;
            KV[t * LD + d] = k0 + t < Tk && d < hd ? k[(k0 + t) * ldk + jh * hd + d] : 0.0f;
        }
        __syncthreads();
        float sc[RI][2];
#pragma unroll
        for (int i = 0; i < RI; i++) sc[i][0] = sc[i][1] = 0.0f;
#pragma unroll 4
        for (int d = 0; d < DP; d += 4) {
            const float4 ka = *reinterpret_cast<const float4 *>(KV + cg * LD + d);
            const float4 kb = *reinterpret_cast<const float4 *>(KV + (cg + 16) * LD + d);
#pragma unroll
            for (int i = 0; i < RI; i++) {
                const float4 qq = *reinterpret_cast<const float4 *>(Qs + (rg + 16 * i) * LD + d);
                sc[i][0] = __fmaf_rn(qq.x, ka.x, sc[i][0]);
                sc[i][0] = __fmaf_rn(qq.y, ka.y, sc[i][0]);
                sc[i][0] = __fmaf_rn(qq.z, ka.z, sc[i][0]);
                sc[i][0] = __fmaf_rn(qq.w, ka.w, sc[i][0]);
                sc[i][1] = __fmaf_rn(qq.x, kb.x, sc[i][1]);
                sc[i][1] = __fmaf_rn(qq.y, kb.y, sc[i][1]);
                sc[i][1] = __fmaf_rn(qq.z, kb.z, sc[i][1]);
                sc[i][1] = __fmaf_rn(qq.w, kb.w, sc[i][1]);
            }
        }
#pragma unroll
        for (int i = 0; i < RI; i++) {
            const size_t row = i0 + rg + 16 * i;
            float mt = -INFINITY;
            bool ok[2];
#pragma unroll
            for (int j = 0; j < 2; j++) {
                const size_t key = k0 + cg + 16 * j;
                ok[j] = key < Tk && (!causal || key <= row + off);
                sc[i][j] = ok[j] ? sc[i][j] * scale : -INFINITY;
                mt = fmaxf(mt, sc[i][j]);
            }
            mt = half_max(mt); /* every lane takes part: no divergence around the shuffles */
            const float mn = fmaxf(m[i], mt);
            const float mu = mn == -INFINITY ? 0.0f : mn; /* nothing valid yet: p = 0, acc stays 0 */
            const float p0 = ok[0] ? expf(sc[i][0] - mu) : 0.0f, p1 = ok[1] ? expf(sc[i][1] - mu) : 0.0f;
            const float corr = expf(m[i] - mu);
            l[i] = l[i] * corr + half_sum(p0 + p1);
            m[i] = mn;
#pragma unroll
            for (int e = 0; e < E; e++) acc[i][e] *= corr;
            Ps[(rg + 16 * i) * LP + cg] = p0;
            Ps[(rg + 16 * i) * LP + cg + 16] = p1;
        }
        __syncthreads(); /* K done, P complete */
        for (int p = tid; p < T3_BK * DP; p += T3_NT) {
            const int t = p / DP, d = p % DP;
            KV[t * LD + d] = k0 + t < Tk && d < hd ? v[(k0 + t) * ldv + jh * hd + d] : 0.0f;
        }
        __syncthreads();
#pragma unroll 4
        for (int t = 0; t < T3_BK; t++) {
            float vv[E];
#pragma unroll
            for (int e = 0; e < E; e++) vv[e] = KV[t * LD + cg + 16 * e];
#pragma unroll
            for (int i = 0; i < RI; i++) {
                const float pt = Ps[(rg + 16 * i) * LP + t];
#pragma unroll
                for (int e = 0; e < E; e++) acc[i][e] = __fmaf_rn(pt, vv[e], acc[i][e]);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < RI; i++) {
        const size_t row = i0 + rg + 16 * i;
        if (row >= Tq) continue;
        float *orow = o + row * ldo + h * hd;
#pragma unroll
        for (int e = 0; e < E; e++) {
            const int c = cg + 16 * e;
            if (c < hd) orow[c] = acc[i][e] / l[i];
        }
    }
}

/* The register-tiled fp32 kernel for the head dim hd, padded to the next of 32, 64, 80, 128, 256. */
template <int DP> static AttnPick rt_pick() {
    return {k_attention_rt<DP>, t3_smem_bytes<DP>(), T3_BQ, T3_NT, "attention (register tiles)"};
}
static AttnPick pick_rt(size_t hd) {
    return hd <= 32 ? rt_pick<32>() : hd <= 64 ? rt_pick<64>() : hd <= 80 ? rt_pick<80>() : hd <= 128 ? rt_pick<128>()
                                                                                                     : rt_pick<256>();
}

/* ---- v4: one-term bf16 attention on the tensor cores (the bf16 precision only; CLEF_CUDA_ATTN=v4) ----
 *
 * Run 2026-12-04a: at 16,384 tokens the 3xTF32 kernel took 890 ms of bf16's 1,639 ms prefill (~19
 * TFLOP/s of real work: three MMAs per product, every K and V element split into TF32 halves by
 * every warp that reads it). The bf16 precision rounds each GEMM input to bf16 once; v4 does the same
 * for attention, as bf16 inference engines do: a pre-pass writes Q, K and V once as bf16, each head's
 * row zero-padded to DP (so every row starts 32-byte aligned and the kernel needs no masks over d),
 * then FlashAttention-2's loop with mma.sync m16n8k16 (bf16 products, fp32 accumulation): S = Q K^T
 * per 32-key tile, the online softmax in fp32 (exp2 of log2e-scaled scores), P rounded to bf16 as the
 * A operand of P V (S's accumulator layout of two adjacent 8-key tiles is exactly the A fragment of
 * a 16-key step, so P never leaves registers), O in fp32. V stays row-major in shared memory (its tile
 * is stored as K's is: 16-byte copies, conflict-free) and ldmatrix.trans reads its B fragments, two
 * 8-column tiles a call. Fixed order, no atomics: the same bits on repeat, and a
 * segment's rows do not depend on the other segments. Error: what rounding Q, K, V and P to bf16
 * gives (test_cuda_ops compares against the CPU on bf16-rounded inputs, 1e-2).
 *
 * Fragments (PTX ISA, mma.m16n8k16 .bf16), g = lane / 4, c = lane % 4, two bf16 per register, the
 * lower-indexed element in the low half:
 *   A 16x16: a0 (g, 2c..2c+1), a1 (g + 8, 2c..), a2 (g, 2c + 8..), a3 (g + 8, 2c + 8..)
 *   B 16x8:  b0 (k = 2c..2c+1, n = g), b1 (k = 2c + 8.., n = g)
 *   C 16x8:  c0 (g, 2c), c1 (g, 2c + 1), c2 (g + 8, 2c), c3 (g + 8, 2c + 1) */
static const int T4_BQ = 64, T4_BK = 32, T4_NT = 128;

template <int DP> static size_t t4_smem_bytes() {
    return (size_t)(T4_BQ + 2 * T4_BK) * (DP + 8) * sizeof(__nv_bfloat16);
}

static unsigned pre_grid(size_t n) {
    unsigned g = grid1d(n, 256);
    return g > 16384 ? 16384 : g; /* a grid-stride loop does the rest */
}

/* dst[r][h][d] = bf16(src[r * ld + h * hd + d]) for d < hd, 0 for hd <= d < DP: one thread writes 8
 * elements (16 bytes). I: the index type, 32-bit whenever the count fits (a 64-bit division per
 * element was ~15% of the op at 16k tokens, run 2026-12-04d). */
template <int DP, typename I>
__global__ void k_heads_to_bf16(__nv_bfloat16 *dst, const float *src, size_t ld, I rows, I heads, int hd) {
    constexpr int D8 = DP / 8;
    const I n = rows * heads * (I)D8;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
        const I rh = i / (I)D8, hh = rh % heads, r = rh / heads;
        const int d0 = (int)(i % (I)D8) * 8;
        const float *row = src + (size_t)r * ld + (size_t)hh * (size_t)hd;
        __align__(16) __nv_bfloat16 t[8];
#pragma unroll
        for (int e = 0; e < 8; e++) t[e] = __float2bfloat16_rn(d0 + e < hd ? row[d0 + e] : 0.0f);
        *reinterpret_cast<uint4 *>(dst + (size_t)i * 8) = *reinterpret_cast<const uint4 *>(t);
    }
}

/* The pre-pass for rows x heads heads of hd (DP padded) starting at src, into dst. */
template <int DP>
static void heads_to_bf16(cudaStream_t st, __nv_bfloat16 *dst, const float *src, size_t ld, size_t rows, size_t heads,
                          size_t hd) {
    const size_t n = rows * heads * (DP / 8);
    if (n <= 0x7fffffffu) /* i + the grid's stride stays below 2^32 */
        k_heads_to_bf16<DP, unsigned><<<pre_grid(n), 256, 0, st>>>(dst, src, ld, (unsigned)rows, (unsigned)heads, (int)hd);
    else
        k_heads_to_bf16<DP, size_t><<<pre_grid(n), 256, 0, st>>>(dst, src, ld, rows, heads, (int)hd);
}

__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 t = __floats2bfloat162_rn(lo, hi); /* .x (the low half) = lo */
    return *reinterpret_cast<uint32_t *>(&t);
}
__device__ __forceinline__ uint32_t ld32(const __nv_bfloat16 *p) { return *reinterpret_cast<const uint32_t *>(p); }
/* Four 8x8 bf16 matrices, transposed: lanes 8i..8i+7 give the row addresses of matrix i (16-byte
 * aligned); r[i] is this lane's pair (rows 2c, 2c + 1; column g) of matrix i: an mma B fragment
 * register when the rows are the k dimension. */
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const __nv_bfloat16 *row_addr) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(row_addr);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

/* q, k, v: the pre-pass's [rows][heads][DP] bf16 arrays (ldq = nh * DP, ldk = ldv = nkv * DP) */
template <int DP>
__global__ void __launch_bounds__(T4_NT)
k_attention_bf16(float *o, size_t ldo, const __nv_bfloat16 *q, size_t ldq, const __nv_bfloat16 *k, size_t ldk,
                 const __nv_bfloat16 *v, size_t ldv, AttnTab tab, size_t nh, size_t nkv, int hd, float scale_log2,
                 int causal) {
    constexpr int LQ = DP + 8; /* a row of Qs / Ks / Vs: (DP + 8) / 2 words, rows 4, 12 or 20 banks apart (mod 32) */
    constexpr int NO = DP / 8, KS = DP / 16, NS = T4_BK / 8, D8 = DP / 8;
    extern __shared__ float4 sm4b[]; /* float4: 16-byte alignment */
    __nv_bfloat16 *Qs = reinterpret_cast<__nv_bfloat16 *>(sm4b); /* [BQ][LQ] */
    __nv_bfloat16 *Ks = Qs + T4_BQ * LQ;                          /* [BK][LQ] */
    __nv_bfloat16 *Vs = Ks + T4_BK * LQ;                          /* [BK][LQ] */
    ATTN_SEGMENT(T4_BQ);
    const size_t h = blockIdx.y, jh = h / (nh / nkv);
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, c4 = lane & 3;
    const int wr = w * 16;
    const uint4 z4 = make_uint4(0, 0, 0, 0);

    for (int p = tid; p < T4_BQ * D8; p += T4_NT) { /* 8 bf16 (16 bytes) a step */
        const int r = p / D8, c8 = p % D8;
        *reinterpret_cast<uint4 *>(Qs + r * LQ + 8 * c8) =
            i0 + r < Tq ? *reinterpret_cast<const uint4 *>(q + (i0 + r) * ldq + h * DP + 8 * c8) : z4;
    }
    float oacc[NO][4];
#pragma unroll
    for (int n = 0; n < NO; n++) oacc[n][0] = oacc[n][1] = oacc[n][2] = oacc[n][3] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f; /* rows g and g + 8 of the warp */
    const size_t row0 = i0 + wr + g, row1 = row0 + 8;
    size_t kend = Tk;
    if (causal) {
        const size_t last = (i0 + T4_BQ < Tq ? i0 + T4_BQ : Tq) + off;
        kend = last < Tk ? last : Tk;
    }
    for (size_t k0 = 0; k0 < kend; k0 += T4_BK) {
        __syncthreads(); /* the previous tile is consumed (and Qs is written, the first time) */
        for (int p = tid; p < T4_BK * D8; p += T4_NT) {
            const int t = p / D8, c8 = p % D8;
            const bool ok = k0 + t < Tk;
            *reinterpret_cast<uint4 *>(Ks + t * LQ + 8 * c8) =
                ok ? *reinterpret_cast<const uint4 *>(k + (k0 + t) * ldk + jh * DP + 8 * c8) : z4;
            *reinterpret_cast<uint4 *>(Vs + t * LQ + 8 * c8) =
                ok ? *reinterpret_cast<const uint4 *>(v + (k0 + t) * ldv + jh * DP + 8 * c8) : z4;
        }
        __syncthreads();
        if (causal && k0 > i0 + wr + 15 + off) continue; /* every key after this warp's rows (warp-uniform) */
        /* S = Q K^T */
        float sacc[NS][4];
#pragma unroll
        for (int j = 0; j < NS; j++) sacc[j][0] = sacc[j][1] = sacc[j][2] = sacc[j][3] = 0.0f;
#pragma unroll 4
        for (int ks = 0; ks < KS; ks++) {
            const int d0 = ks * 16 + 2 * c4;
            uint32_t a[4];
            a[0] = ld32(Qs + (wr + g) * LQ + d0);
            a[1] = ld32(Qs + (wr + g + 8) * LQ + d0);
            a[2] = ld32(Qs + (wr + g) * LQ + d0 + 8);
            a[3] = ld32(Qs + (wr + g + 8) * LQ + d0 + 8);
#pragma unroll
            for (int j = 0; j < NS; j++)
                mma_bf16(sacc[j], a, ld32(Ks + (j * 8 + g) * LQ + d0), ld32(Ks + (j * 8 + g) * LQ + d0 + 8));
        }
        /* scores in log2 units (scale_log2 = scale log2 e) */
        softmax_step<NS, NO, true>(sacc, oacc, m0, m1, l0, l1, k0, c4, row0, row1, Tk, off, causal, scale_log2);
        /* O += P V, 16 keys a step: the 8-key tiles 2t and 2t + 1 of S are P's A fragment */
#pragma unroll
        for (int t = 0; t < NS / 2; t++) {
            uint32_t a[4];
            a[0] = pack_bf16(sacc[2 * t][0], sacc[2 * t][1]);
            a[1] = pack_bf16(sacc[2 * t][2], sacc[2 * t][3]);
            a[2] = pack_bf16(sacc[2 * t + 1][0], sacc[2 * t + 1][1]);
            a[3] = pack_bf16(sacc[2 * t + 1][2], sacc[2 * t + 1][3]);
            /* lane l addresses key row 16t + (l & 15), columns 8 (n + l / 16): matrices (keys 0-7, tile n),
             * (keys 8-15, tile n), (0-7, n + 1), (8-15, n + 1) = b0, b1 of tiles n and n + 1 */
            const __nv_bfloat16 *vrow = Vs + (t * 16 + (lane & 15)) * LQ + 8 * (lane >> 4);
#pragma unroll /* fully: oacc must stay in registers */
            for (int n = 0; n < NO; n += 2) {
                uint32_t b[4];
                ldsm_x4_trans(b, vrow + 8 * n);
                mma_bf16(oacc[n], a, b[0], b[1]);
                mma_bf16(oacc[n + 1], a, b[2], b[3]);
            }
        }
    }
    store_rows<NO>(o, ldo, h, hd, Tq, row0, row1, c4, oacc, l0, l1);
}

/* The bf16 kernel for the padded head dim DP: the pre-pass into scratch, then the attention; false when
 * it does not apply (shared memory, scratch) so the caller falls back. */
template <int DP>
static bool launch_bf16_dp(clef_ops *ops, const AttnArgs &a) {
    Impl *im = IM(ops);
    const clef_attn_seg *segs = a.segs;
    const size_t nseg = a.nseg, nh = a.nh, nkv = a.nkv, hd = a.hd;
    const size_t smem = t4_smem_bytes<DP>();
    if (smem > (size_t)im->max_smem_optin) return false;
    size_t qrows = 0, krows = 0;
    for (size_t i = 0; i < nseg; i++) {
        if (!segs[i].nq) continue;
        if (segs[i].q0 + segs[i].nq > qrows) qrows = segs[i].q0 + segs[i].nq;
        if (segs[i].k0 + segs[i].nk > krows) krows = segs[i].k0 + segs[i].nk;
    }
    if (!qrows) return true;
    const size_t nqe = qrows * nh * DP, nke = krows * nkv * DP;
    __nv_bfloat16 *qb = (__nv_bfloat16 *)scratch_alloc(ops, (nqe + 2 * nke + 8) * sizeof(__nv_bfloat16));
    if (!qb) return true; /* failed is set */
    __nv_bfloat16 *kb = qb + nqe, *vb = kb + nke; /* nqe, nke are multiples of DP (16): 32-byte aligned */
    if (!smem_optin(ops, k_attention_bf16<DP>, smem, "attention (shared memory)")) {
        scratch_free(ops, qb);
        return true;
    }
    heads_to_bf16<DP>(im->stream, qb, a.q, a.ldq, qrows, nh, hd);
    if (krows) {
        heads_to_bf16<DP>(im->stream, kb, a.k, a.ldk, krows, nkv, hd);
        heads_to_bf16<DP>(im->stream, vb, a.v, a.ldv, krows, nkv, hd);
    }
    const float scale_log2 = a.scale * 1.4426950408889634f; /* softmax in base 2: exp(x) = exp2(x log2 e) */
    for_seg_groups(segs, nseg, T4_BQ, [&](const AttnTab &tab, unsigned nb) {
        dim3 grid(nb, (unsigned)nh);
        k_attention_bf16<DP><<<grid, T4_NT, smem, im->stream>>>(a.o, a.ldo, qb, nh * DP, kb, nkv * DP, vb, nkv * DP, tab,
                                                                nh, nkv, (int)hd, scale_log2, a.causal);
    });
    launch_ok(ops, "attention (bf16)");
    scratch_free(ops, qb);
    return true;
}

/* The bf16 family's launcher: the head dim hd padded to the next of 32, 64, 80, 128, 256. */
static bool launch_bf16(clef_ops *ops, const AttnArgs &a) {
    const size_t hd = a.hd;
    return hd <= 32    ? launch_bf16_dp<32>(ops, a)
           : hd <= 64  ? launch_bf16_dp<64>(ops, a)
           : hd <= 80  ? launch_bf16_dp<80>(ops, a)
           : hd <= 128 ? launch_bf16_dp<128>(ops, a)
                       : launch_bf16_dp<256>(ops, a);
}

void op_attention(clef_ops *ops, float *o, size_t ldo, const float *q, size_t ldq, const float *k, size_t ldk,
                  const float *v, size_t ldv, const clef_attn_seg *segs, size_t nseg, size_t nh, size_t nkv, size_t hd,
                  float scale, int causal) {
    ProfScope ps(ops, OP_ATTENTION);
    if (nseg == 0 || nh == 0) return;
    Impl *im = IM(ops);
    if (hd == 0 || hd > 256 || nkv == 0 || nh % nkv || nh > 65535) {
        fail_code(ops, CLEF_OPS_SHAPE, "attention", "head dim over 256 or bad head counts");
        return;
    }
    /* the products: QK^T and PV over the unmasked (row, key) pairs, x3 on the 3xTF32 tensor cores */
    double pairs = 0;
    size_t blocks = 0;
    for (size_t i = 0; i < nseg; i++) {
        const clef_attn_seg *sg = &segs[i];
        if (sg->q0 > 0xffffffffu || sg->nq > 0xffffffffu - sg->q0 || sg->k0 > 0xffffffffu ||
            sg->nk > 0xffffffffu - sg->k0) {
            fail_code(ops, CLEF_OPS_SHAPE, "attention", "segment rows over 2^32");
            return;
        }
        if (causal && sg->nk < sg->nq) {
            fail_code(ops, CLEF_OPS_SHAPE, "attention", "causal segment with fewer keys than queries");
            return;
        }
        const double nq = (double)sg->nq, nk = (double)sg->nk;
        pairs += causal ? nq * (nk - nq) + nq * (nq + 1) / 2 : nq * nk;
        blocks += (sg->nq + BQ - 1) / BQ;
    }
    if (blocks > 0x7fffffffu) {
        fail_code(ops, CLEF_OPS_SHAPE, "attention", "too many query rows");
        return;
    }
    const bool tc = im->attn_kernel != CLEF_CUDA_ATTN_SIMT && im->precision != CLEF_CUDA_FP32 && im->cc_major >= 8;
    const bool one_term = tc && im->attn_kernel == CLEF_CUDA_ATTN_V4 && im->precision == CLEF_CUDA_BF16;
    prof_flop(ops, OP_ATTENTION, 4.0 * pairs * (double)hd * (double)nh * (tc && !one_term ? 3.0 : 1.0));
    const AttnArgs a = {o, ldo, q, ldq, k, ldk, v, ldv, segs, nseg, nh, nkv, hd, scale, causal};
    if (one_term && launch_bf16(ops, a)) return;
    if (tc && launch_attn(ops, pick_tc(hd), a)) return;
    if (im->attn_kernel >= CLEF_CUDA_ATTN_V3 && im->precision == CLEF_CUDA_FP32 && /* v4 is v3 outside bf16 */
        launch_attn(ops, pick_rt(hd), a))
        return;
    const size_t smem = ((size_t)BQ * hd + (size_t)BK * (hd + 1) + (size_t)BK * hd) * sizeof(float);
    if (!launch_attn(ops, {k_attention, smem, BQ, NW * 32, "attention"}, a))
        fail_code(ops, CLEF_OPS_SHAPE, "attention", "not enough shared memory on this device");
}

} // namespace clefcu
