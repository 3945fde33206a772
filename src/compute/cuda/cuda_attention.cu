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

void op_attention(clef_ops *ops, float *o, size_t ldo, const float *q, size_t ldq, const float *k, size_t ldk,
                  const float *v, size_t ldv, size_t Tq, size_t Tk, size_t nh, size_t nkv, size_t hd, float scale,
                  int causal) {
    ProfScope ps(ops, OP_ATTENTION);
    if (Tq == 0 || nh == 0) return;
    Impl *im = IM(ops);
    if (hd == 0 || hd > 256 || nkv == 0 || nh % nkv || nh > 65535) {
        fail(ops, "attention", "head dim over 256 or bad head counts");
        return;
    }
    size_t smem = ((size_t)BQ * hd + (size_t)BK * (hd + 1) + (size_t)BK * hd) * sizeof(float);
    if (smem > (size_t)im->max_smem_optin) {
        fail(ops, "attention", "not enough shared memory on this device");
        return;
    }
    if (smem > 48 * 1024 &&
        !cuda_ok(ops, cudaFuncSetAttribute(k_attention, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
                 "attention (shared memory)"))
        return;
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
