/* The chunked gated delta rule (model.md §4.4.6; the CPU backend's delta_head, step for step), in
 * two kernels:
 *
 *  A. one block per (chunk, v-head), all chunks at once: the chunk's cumulative decay G, the
 *     matrices M = (Kb k^T) . D and Intra = (q k^T) . D (dot products in double with the CPU's four
 *     interleaved partial sums, so they match it bit for bit up to expf), the unit lower-triangular
 *     solves (I + L) U = Vb and (I + L) W = Kb . exp(G) (one thread per column, rows in order, double
 *     sums as on the CPU), Qd = q . exp(G), Kd = k . exp(G_last - G), lambda = exp(G_last). These go
 *     to a global scratch of [Hv, chunks] blocks.
 *  B. one block per (v-head, slice of 32 state columns), chunks in sequence with the state slice
 *     R[:, slice] in shared memory: Vn = U - W R, O = Qd R + Intra Vn, R = lambda R + Kd^T Vn. The
 *     columns of the state are independent, so the slices need no communication. W, Qd and Kd are
 *     read through shared-memory tiles of 32 columns; sums in double.
 *
 * No atomics; every output element is written by one thread with a fixed summation order. */
#include "compute/cuda/cuda_internal.cuh"

namespace clefcu {

static const int CMAX = 64; /* chunk size limit (the model uses 64) */
static const int VS = 32;   /* state columns per block in kernel B */
static const int KT = 32;   /* k-dim tile in kernel B */
static const int NT = 256;  /* threads per block */

struct DeltaScratch {
    float *W, *U, *Qd, *Kd, *In, *lam;
};

__device__ __forceinline__ double dot4(const float *a, float be, const float *b, size_t n, bool scale_a) {
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    size_t k = 0;
    for (; k + 4 <= n; k += 4) {
        float a0 = scale_a ? a[k] * be : a[k], a1 = scale_a ? a[k + 1] * be : a[k + 1];
        float a2 = scale_a ? a[k + 2] * be : a[k + 2], a3 = scale_a ? a[k + 3] * be : a[k + 3];
        s0 += (double)a0 * b[k];
        s1 += (double)a1 * b[k + 1];
        s2 += (double)a2 * b[k + 2];
        s3 += (double)a3 * b[k + 3];
    }
    for (; k < n; k++) s0 += (double)(scale_a ? a[k] * be : a[k]) * b[k];
    return (s0 + s1) + (s2 + s3);
}

__global__ void k_delta_prep(DeltaScratch S, const float *q, const float *k, const float *v, const float *beta,
                             const float *g, size_t T, size_t Hk, size_t Hv, size_t dk, size_t dv, int C, size_t nch) {
    extern __shared__ float sm[];
    float *G = sm;       /* [C] */
    float *Mm = sm + C;  /* [C, C] */
    const size_t c = blockIdx.x, h = blockIdx.y;
    const size_t kh = h / (Hv / Hk);
    const size_t t0 = c * (size_t)C;
    const int n = (int)(T - t0 < (size_t)C ? T - t0 : (size_t)C);
    const size_t ldq = Hk * dk, ldv = Hv * dv, ldg = Hv;
    const size_t blk = h * nch + c;
    float *W = S.W + blk * (size_t)C * dk, *U = S.U + blk * (size_t)C * dv;
    float *Qd = S.Qd + blk * (size_t)C * dk, *Kd = S.Kd + blk * (size_t)C * dk;
    float *In = S.In + blk * (size_t)C * C;

    if (threadIdx.x == 0) {
        double run = 0;
        for (int r = 0; r < n; r++) {
            run += g[(t0 + r) * ldg + h];
            G[r] = (float)run;
        }
    }
    __syncthreads();
    /* intra-chunk matrices with the pairwise decay */
    for (int p = threadIdx.x; p < n * n; p += blockDim.x) {
        int r = p / n, s = p % n;
        if (s > r) continue;
        const float *kr = k + (t0 + r) * ldq + kh * dk, *ks = k + (t0 + s) * ldq + kh * dk;
        const float *qr = q + (t0 + r) * ldq + kh * dk;
        float be = beta[(t0 + r) * ldg + h];
        float d = expf(G[r] - G[s]);
        Mm[r * C + s] = (float)dot4(kr, be, ks, dk, true) * d;
        In[r * C + s] = (float)dot4(qr, 1.0f, ks, dk, false) * d;
    }
    __syncthreads();
    /* forward substitution, one column per thread: columns 0..dk-1 of W, then 0..dv-1 of U */
    for (size_t j = threadIdx.x; j < dk + dv; j += blockDim.x) {
        float col[CMAX];
        for (int r = 0; r < n; r++) {
            float be = beta[(t0 + r) * ldg + h];
            if (j < dk) {
                float kb = k[(t0 + r) * ldq + kh * dk + j] * be;
                col[r] = kb * expf(G[r]);
            } else {
                col[r] = v[(t0 + r) * ldv + h * dv + (j - dk)] * be;
            }
        }
        for (int r = 1; r < n; r++) {
            double acc = col[r];
            for (int s = 0; s < r; s++) acc -= (double)Mm[r * C + s] * col[s];
            col[r] = (float)acc;
        }
        if (j < dk)
            for (int r = 0; r < n; r++) W[(size_t)r * dk + j] = col[r];
        else
            for (int r = 0; r < n; r++) U[(size_t)r * dv + (j - dk)] = col[r];
    }
    /* Qd, Kd, lambda (G_last = the last real row) */
    float Gl = G[n - 1];
    for (size_t p = threadIdx.x; p < (size_t)n * dk; p += blockDim.x) {
        size_t r = p / dk, i = p % dk;
        float eq = expf(G[r]), ek = expf(Gl - G[r]);
        Qd[p] = q[(t0 + r) * ldq + kh * dk + i] * eq;
        Kd[p] = k[(t0 + r) * ldq + kh * dk + i] * ek;
    }
    if (threadIdx.x == 0) S.lam[blk] = expf(Gl);
}

__global__ void k_delta_scan(DeltaScratch S, float *o, size_t T, size_t Hv, size_t dk, size_t dv, int C, size_t nch) {
    extern __shared__ float sm[];
    float *R = sm;                       /* [dk, VS] */
    float *Vn = R + dk * VS;             /* [C, VS] */
    float *buf = Vn + (size_t)C * VS;    /* [C, KT] */
    float *Ins = buf + (size_t)C * KT;   /* [C, C] */
    const size_t h = blockIdx.x, j0 = (size_t)blockIdx.y * VS;
    const int j = threadIdx.x % VS, rg = threadIdx.x / VS; /* rows rg, rg + 8, ... */
    const int RSTEP = NT / VS, RPT = CMAX / RSTEP;         /* 8 row groups, 8 rows per thread */
    const size_t jj = j0 + (size_t)j;
    const bool jok = jj < dv;
    const size_t ldv = Hv * dv;

    for (size_t p = threadIdx.x; p < dk * VS; p += blockDim.x) R[p] = 0.0f;
    __syncthreads();
    for (size_t c = 0; c < nch; c++) {
        const size_t t0 = c * (size_t)C;
        const int n = (int)(T - t0 < (size_t)C ? T - t0 : (size_t)C);
        const size_t blk = h * nch + c;
        const float *W = S.W + blk * (size_t)C * dk, *U = S.U + blk * (size_t)C * dv;
        const float *Qd = S.Qd + blk * (size_t)C * dk, *Kd = S.Kd + blk * (size_t)C * dk;
        const float *In = S.In + blk * (size_t)C * C;
        const float lam = S.lam[blk];
        for (int p = threadIdx.x; p < n * n; p += blockDim.x) {
            int r = p / n, s = p % n;
            Ins[r * C + s] = s <= r ? In[r * C + s] : 0.0f;
        }
        /* Vn = U - W R */
        double acc[RPT];
        for (int m = 0; m < RPT; m++) acc[m] = 0;
        for (size_t i0 = 0; i0 < dk; i0 += KT) {
            __syncthreads();
            for (int p = threadIdx.x; p < n * KT; p += blockDim.x) {
                int r = p / KT, ii = p % KT;
                buf[p] = i0 + ii < dk ? W[(size_t)r * dk + i0 + ii] : 0.0f;
            }
            __syncthreads();
            size_t lim = dk - i0 < (size_t)KT ? dk - i0 : (size_t)KT;
            for (int m = 0; m < RPT; m++) {
                int r = rg + RSTEP * m;
                if (r >= n) break;
                double a = acc[m];
                for (size_t ii = 0; ii < lim; ii++) a += (double)buf[r * KT + ii] * R[(i0 + ii) * VS + j];
                acc[m] = a;
            }
        }
        for (int m = 0; m < RPT; m++) {
            int r = rg + RSTEP * m;
            if (r >= n) break;
            Vn[r * VS + j] = jok ? U[(size_t)r * dv + jj] - (float)acc[m] : 0.0f;
        }
        /* O = Qd R + Intra Vn (a1 over the state, a2 over the chunk) */
        for (int m = 0; m < RPT; m++) acc[m] = 0;
        for (size_t i0 = 0; i0 < dk; i0 += KT) {
            __syncthreads();
            for (int p = threadIdx.x; p < n * KT; p += blockDim.x) {
                int r = p / KT, ii = p % KT;
                buf[p] = i0 + ii < dk ? Qd[(size_t)r * dk + i0 + ii] : 0.0f;
            }
            __syncthreads();
            size_t lim = dk - i0 < (size_t)KT ? dk - i0 : (size_t)KT;
            for (int m = 0; m < RPT; m++) {
                int r = rg + RSTEP * m;
                if (r >= n) break;
                double a = acc[m];
                for (size_t ii = 0; ii < lim; ii++) a += (double)buf[r * KT + ii] * R[(i0 + ii) * VS + j];
                acc[m] = a;
            }
        }
        __syncthreads(); /* Vn complete */
        for (int m = 0; m < RPT; m++) {
            int r = rg + RSTEP * m;
            if (r >= n) break;
            double a2 = 0;
            for (int s = 0; s <= r; s++) a2 += (double)Ins[r * C + s] * Vn[s * VS + j];
            if (jok) o[(t0 + r) * ldv + h * dv + jj] = (float)acc[m] + (float)a2;
        }
        /* R = lambda R + Kd^T Vn (not after the last chunk, as on the CPU) */
        if (c + 1 < nch) {
            for (size_t i0 = 0; i0 < dk; i0 += KT) {
                __syncthreads();
                for (int p = threadIdx.x; p < n * KT; p += blockDim.x) {
                    int r = p / KT, ii = p % KT;
                    buf[p] = i0 + ii < dk ? Kd[(size_t)r * dk + i0 + ii] : 0.0f;
                }
                __syncthreads();
                for (int ii = rg; ii < KT; ii += RSTEP) {
                    if (i0 + (size_t)ii >= dk) break;
                    double a = 0;
                    for (int r = 0; r < n; r++) a += (double)buf[r * KT + ii] * Vn[r * VS + j];
                    float *rp = &R[(i0 + ii) * VS + j];
                    *rp = *rp * lam + (float)a;
                }
            }
        }
        __syncthreads();
    }
}

void op_delta_rule(clef_ops *ops, float *o, const float *q, const float *k, const float *v, const float *beta,
                   const float *g, size_t T, size_t Hk, size_t Hv, size_t dk, size_t dv, size_t chunk) {
    ProfScope ps(ops, OP_DELTA_RULE);
    if (T == 0) return;
    Impl *im = IM(ops);
    if (chunk == 0) chunk = 64;
    if (chunk > (size_t)CMAX) {
        fail(ops, "delta_rule", "chunk over 64 is not supported by the CUDA backend");
        return;
    }
    if (!Hk || !Hv || Hv % Hk || !dk || !dv) {
        fail(ops, "delta_rule", "bad head counts");
        return;
    }
    const int C = (int)chunk;
    const size_t nch = (T + chunk - 1) / chunk;
    const size_t per = (size_t)C * (3 * dk + dv + (size_t)C);
    float *base = (float *)scratch_alloc(ops, (Hv * nch * per + Hv * nch) * sizeof(float));
    if (!base) return;
    DeltaScratch S;
    S.W = base;
    S.Qd = S.W + Hv * nch * (size_t)C * dk;
    S.Kd = S.Qd + Hv * nch * (size_t)C * dk;
    S.U = S.Kd + Hv * nch * (size_t)C * dk;
    S.In = S.U + Hv * nch * (size_t)C * dv;
    S.lam = S.In + Hv * nch * (size_t)C * C;

    size_t smA = ((size_t)C + (size_t)C * C) * sizeof(float);
    size_t smB = (dk * VS + (size_t)C * VS + (size_t)C * KT + (size_t)C * C) * sizeof(float);
    if (smB > (size_t)im->max_smem_optin || nch > 0x7fffffffu || Hv > 65535) {
        fail(ops, "delta_rule", "key head dim too large for the device's shared memory");
        scratch_free(ops, base);
        return;
    }
    if (smB > 48 * 1024 &&
        !cuda_ok(ops, cudaFuncSetAttribute(k_delta_scan, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smB),
                 "delta_rule (shared memory)")) {
        scratch_free(ops, base);
        return;
    }
    dim3 ga((unsigned)nch, (unsigned)Hv);
    k_delta_prep<<<ga, NT, smA, im->stream>>>(S, q, k, v, beta, g, T, Hk, Hv, dk, dv, C, nch);
    dim3 gb((unsigned)Hv, (unsigned)((dv + VS - 1) / VS));
    k_delta_scan<<<gb, NT, smB, im->stream>>>(S, o, T, Hv, dk, dv, C, nch);
    launch_ok(ops, "delta_rule");
    scratch_free(ops, base);
}

} // namespace clefcu
