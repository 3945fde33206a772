/* Softmax attention, FlashAttention-style: one block per (16 query rows, query head); K and V are
 * streamed through shared memory in tiles of 32 keys and each query row keeps a running maximum,
 * a running sum and its output accumulator (online softmax), so memory is O(tile), never T x T.
 * GQA reads kv head h / (nh / nkv) in place (no copies); causal blocks stop at their last row.
 * fp32 with explicit FMAs (the CPU backend sums in double: differences are float rounding, ~1e-6
 * relative). Each output element is produced by one lane with a fixed order: no atomics. Head dims
 * up to 256. */
#include "compute/cuda/cuda_internal.cuh"

namespace clefcu {

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

__global__ void __launch_bounds__(NW * 32)
k_attention(float *o, size_t ldo, const float *q, size_t ldq, const float *k, size_t ldk, const float *v, size_t ldv,
            size_t Tq, size_t Tk, size_t nh, size_t nkv, int hd, float scale, int causal) {
    extern __shared__ float sm[];
    const int hdp = hd + 1;
    float *Qs = sm;                          /* [BQ, hd] */
    float *Ks = Qs + BQ * hd;                /* [BK, hd + 1] */
    float *Vs = Ks + BK * hdp;               /* [BK, hd] */
    const size_t i0 = (size_t)blockIdx.x * BQ, h = blockIdx.y, jh = h / (nh / nkv);
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
        size_t last = i0 + BQ < Tq ? i0 + BQ : Tq; /* keys <= last row */
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
            bool valid = key < Tk && (!causal || key <= i);
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

template <int DP> static size_t t2_smem_bytes() { return (size_t)(T2_BQ + 2 * T2_BK) * (DP + 4) * sizeof(float); }

/* Fragment layouts (PTX ISA, mma.m16n8k8 .tf32), g = lane / 4, c = lane % 4:
 *   A 16x8: a0 (g, c), a1 (g + 8, c), a2 (g, c + 4), a3 (g + 8, c + 4)
 *   B 8x8:  b0 (k = c, n = g), b1 (k = c + 4, n = g)
 *   C 16x8: c0 (g, 2c), c1 (g, 2c + 1), c2 (g + 8, 2c), c3 (g + 8, 2c + 1) */
template <int DP>
__global__ void __launch_bounds__(T2_NT)
k_attention_tc(float *o, size_t ldo, const float *q, size_t ldq, const float *k, size_t ldk, const float *v,
               size_t ldv, size_t Tq, size_t Tk, size_t nh, size_t nkv, int hd, float scale, int causal) {
    constexpr int LD = DP + 4; /* row r and r + 1 four banks apart: conflict-free fragment loads */
    constexpr int NO = DP / 8; /* n-tiles of O, k-steps of S */
    extern __shared__ float4 sm4[];
    float *Qs = reinterpret_cast<float *>(sm4); /* [BQ][LD] */
    float *Ks = Qs + T2_BQ * LD;                /* [BK][LD] */
    float *Vs = Ks + T2_BK * LD;                /* [BK][LD] */
    const size_t i0 = (size_t)blockIdx.x * T2_BQ, h = blockIdx.y, jh = h / (nh / nkv);
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
        size_t last = i0 + T2_BQ < Tq ? i0 + T2_BQ : Tq;
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
        if (causal && k0 > i0 + wr + 15) continue; /* every key after this warp's rows (warp-uniform) */
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
        /* scale, mask, online softmax (each row's values sit in the 4 lanes of a quad) */
        float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
        for (int j = 0; j < 4; j++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                size_t key = k0 + j * 8 + 2 * c4 + (e & 1), row = e < 2 ? row0 : row1;
                bool valid = key < Tk && (!causal || key <= row);
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
        const float corr0 = m0 == -INFINITY ? 0.0f : expf(m0 - mn0), corr1 = m1 == -INFINITY ? 0.0f : expf(m1 - mn1);
        float ps0 = 0.0f, ps1 = 0.0f;
#pragma unroll
        for (int j = 0; j < 4; j++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float mn = e < 2 ? mn0 : mn1;
                sacc[j][e] = sacc[j][e] == -INFINITY ? 0.0f : expf(sacc[j][e] - mn);
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

/* Launches the tensor-core kernel for the padded head dim DP; false when it does not apply (shared
 * memory) so the caller falls back to SIMT. */
template <int DP>
static bool launch_tc(clef_ops *ops, float *o, size_t ldo, const float *q, size_t ldq, const float *k, size_t ldk,
                      const float *v, size_t ldv, size_t Tq, size_t Tk, size_t nh, size_t nkv, size_t hd, float scale,
                      int causal) {
    Impl *im = IM(ops);
    size_t smem = t2_smem_bytes<DP>();
    if (smem > (size_t)im->max_smem_optin) return false;
    if (!smem_optin(ops, k_attention_tc<DP>, smem, "attention (shared memory)"))
        return true; /* failed is set: nothing more to do */
    dim3 grid((unsigned)((Tq + T2_BQ - 1) / T2_BQ), (unsigned)nh);
    k_attention_tc<DP><<<grid, T2_NT, smem, im->stream>>>(o, ldo, q, ldq, k, ldk, v, ldv, Tq, Tk, nh, nkv, (int)hd,
                                                          scale, causal);
    launch_ok(ops, "attention (tensor cores)");
    return true;
}

/* ---- register-tiled SIMT kernel for the fp32 (parity) precision: CLEF_CUDA_ATTN=v3 (opt-in:
 * written after the last device run and not yet run on a GPU; the default fp32 kernel stays
 * k_attention until a run verifies this one) ----
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
               size_t Tq, size_t Tk, size_t nh, size_t nkv, int hd, float scale, int causal) {
    constexpr int LD = DP + 4;         /* rows 4 banks apart: the float4 key loads are conflict-free */
    constexpr int E = DP / 16, RI = T3_BQ / 16, LP = T3_BK + 1;
    extern __shared__ float4 sm4a[];   /* float4: 16-byte alignment */
    float *Qs = reinterpret_cast<float *>(sm4a); /* [BQ][LD] */
    float *KV = Qs + T3_BQ * LD;                 /* [BK][LD]: K, then V of the tile */
    float *Ps = KV + T3_BK * LD;                 /* [BQ][LP] */
    const size_t i0 = (size_t)blockIdx.x * T3_BQ, h = blockIdx.y, jh = h / (nh / nkv);
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
        const size_t last = i0 + T3_BQ < Tq ? i0 + T3_BQ : Tq; /* keys <= the block's last row */
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
                ok[j] = key < Tk && (!causal || key <= row);
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

/* Launches the register-tiled fp32 kernel for DP; false when it does not apply (shared memory). */
template <int DP>
static bool launch_rt(clef_ops *ops, float *o, size_t ldo, const float *q, size_t ldq, const float *k, size_t ldk,
                      const float *v, size_t ldv, size_t Tq, size_t Tk, size_t nh, size_t nkv, size_t hd, float scale,
                      int causal) {
    Impl *im = IM(ops);
    size_t smem = t3_smem_bytes<DP>();
    if (smem > (size_t)im->max_smem_optin) return false;
    if (!smem_optin(ops, k_attention_rt<DP>, smem, "attention (shared memory)")) return true; /* failed is set */
    dim3 grid((unsigned)((Tq + T3_BQ - 1) / T3_BQ), (unsigned)nh);
    k_attention_rt<DP><<<grid, T3_NT, smem, im->stream>>>(o, ldo, q, ldq, k, ldk, v, ldv, Tq, Tk, nh, nkv, (int)hd,
                                                          scale, causal);
    launch_ok(ops, "attention (register tiles)");
    return true;
}

void op_attention_one(clef_ops *ops, float *o, size_t ldo, const float *q, size_t ldq, const float *k, size_t ldk,
                  const float *v, size_t ldv, size_t Tq, size_t Tk, size_t nh, size_t nkv, size_t hd, float scale,
                  int causal) {
    ProfScope ps(ops, OP_ATTENTION);
    if (Tq == 0 || nh == 0) return;
    Impl *im = IM(ops);
    if (hd == 0 || hd > 256 || nkv == 0 || nh % nkv || nh > 65535) {
        fail(ops, "attention", "head dim over 256 or bad head counts");
        return;
    }
    if (im->attn_kernel != CLEF_CUDA_ATTN_SIMT && im->precision == CLEF_CUDA_FAST && im->cc_major >= 8 &&
        (Tq + T2_BQ - 1) / T2_BQ <= 0x7fffffffu) {
        bool done = hd <= 32    ? launch_tc<32>(ops, o, ldo, q, ldq, k, ldk, v, ldv, Tq, Tk, nh, nkv, hd, scale, causal)
                    : hd <= 64  ? launch_tc<64>(ops, o, ldo, q, ldq, k, ldk, v, ldv, Tq, Tk, nh, nkv, hd, scale, causal)
                    : hd <= 72  ? launch_tc<72>(ops, o, ldo, q, ldq, k, ldk, v, ldv, Tq, Tk, nh, nkv, hd, scale, causal)
                    : hd <= 128 ? launch_tc<128>(ops, o, ldo, q, ldq, k, ldk, v, ldv, Tq, Tk, nh, nkv, hd, scale, causal)
                                : launch_tc<256>(ops, o, ldo, q, ldq, k, ldk, v, ldv, Tq, Tk, nh, nkv, hd, scale, causal);
        if (done) return;
    }
    if (im->attn_kernel == CLEF_CUDA_ATTN_V3 && im->precision == CLEF_CUDA_FP32 &&
        (Tq + T3_BQ - 1) / T3_BQ <= 0x7fffffffu) {
        bool done = hd <= 32    ? launch_rt<32>(ops, o, ldo, q, ldq, k, ldk, v, ldv, Tq, Tk, nh, nkv, hd, scale, causal)
                    : hd <= 64  ? launch_rt<64>(ops, o, ldo, q, ldq, k, ldk, v, ldv, Tq, Tk, nh, nkv, hd, scale, causal)
                    : hd <= 80  ? launch_rt<80>(ops, o, ldo, q, ldq, k, ldk, v, ldv, Tq, Tk, nh, nkv, hd, scale, causal)
                    : hd <= 128 ? launch_rt<128>(ops, o, ldo, q, ldq, k, ldk, v, ldv, Tq, Tk, nh, nkv, hd, scale, causal)
                                : launch_rt<256>(ops, o, ldo, q, ldq, k, ldk, v, ldv, Tq, Tk, nh, nkv, hd, scale, causal);
        if (done) return;
    }
    size_t smem = ((size_t)BQ * hd + (size_t)BK * (hd + 1) + (size_t)BK * hd) * sizeof(float);
    if (smem > (size_t)im->max_smem_optin) {
        fail(ops, "attention", "not enough shared memory on this device");
        return;
    }
    if (!smem_optin(ops, k_attention, smem, "attention (shared memory)")) return;
    size_t nb = (Tq + BQ - 1) / BQ;
    if (nb > 0x7fffffffu) {
        fail(ops, "attention", "too many query rows");
        return;
    }
    dim3 grid((unsigned)nb, (unsigned)nh);
    k_attention<<<grid, NW * 32, smem, im->stream>>>(o, ldo, q, ldq, k, ldk, v, ldv, Tq, Tk, nh, nkv, (int)hd, scale,
                                                     causal);
    launch_ok(ops, "attention");
}

} // namespace clefcu
