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

/* ---- segments (ops.h clef_seg): up to DSEG_MAX per launch, by value (a CUDA graph holds the table as
 * a launch argument; no upload). Kernel A's grid runs over the chunks of all of them (chunks aligned
 * at each segment's first row); kernel B's z over the segments, each block running its segment's
 * chunks in sequence from its initial state (zeros, or in[s] [Hv, dk, dv]) and writing the state
 * after chunk snapc[s] to out[s]: every segment and head slice in parallel. ---- */
static const int DSEG_MAX = 32;
struct DeltaTab {
    int nseg;
    size_t row0[DSEG_MAX];
    unsigned n[DSEG_MAX];
    unsigned first[DSEG_MAX + 1]; /* the segment's first chunk; first[nseg] = chunks in all */
    int snapc[DSEG_MAX];          /* the segment's chunk after which its state is saved; -1: none */
    const float *in[DSEG_MAX];
    float *out[DSEG_MAX];
};

__device__ __forceinline__ int dseg_of(const DeltaTab &t, unsigned c) {
    int s = 0;
    while (s + 1 < t.nseg && t.first[s + 1] <= c) s++;
    return s;
}
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
                             const float *g, DeltaTab tab, size_t Hk, size_t Hv, size_t dk, size_t dv, int C, size_t nch) {
    extern __shared__ float sm[];
    float *G = sm;       /* [C] */
    float *Mm = sm + C;  /* [C, C] */
    const size_t c = blockIdx.x, h = blockIdx.y;
    const size_t kh = h / (Hv / Hk);
    const int sg = dseg_of(tab, (unsigned)c);
    const size_t t0 = tab.row0[sg] + (c - tab.first[sg]) * (size_t)C, tend = tab.row0[sg] + tab.n[sg];
    const int n = (int)(tend - t0 < (size_t)C ? tend - t0 : (size_t)C);
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

/* ---- v2 of kernel A (CLEF_CUDA_DELTA=v3 and v4, verified by run 2026-12-04a; v1 / v2 keep the kernel above) ----
 *
 * Run 2026-11-30b: delta_rule took 0.85 ms per layer at 436 tokens although kernel B v2 does ~7 chunk
 * steps; the cost is kernel A's products: each thread reads its own row k_s straight from global
 * memory (32 distinct cache lines per warp load, ~0.8M L1 wavefronts per block). v2 of A computes
 * the same numbers, in the same order, from shared memory:
 *  - the chunk's k and q rows are staged in shared memory (rows >= n zero);
 *  - M and Intra by register tiles: a thread owns 2 x 2 (r, s) outputs of both matrices, each with
 *    the CPU's four interleaved double partial sums over k (k = m mod 4), combined as
 *    (s0 + s1) + (s2 + s3), then rounded and scaled by the decay as in v1: the same bits;
 *  - the forward substitution right-looking with the column in registers: acc[r] starts at the
 *    right-hand side, and after row s is final (rounded to float) every acc[r], r > s, subtracts
 *    M[r][s] x_s. Each acc[r] still sums over s in ascending order in double: the CPU's order and
 *    roundings, but the 63 - s updates of a step are independent (no dependent chain per column).
 *    M lives in shared memory as double, transposed (M[r][s] for fixed s is contiguous).
 * Needs dk % 4 == 0 and dk <= 128 (shared memory: 32 KB of M + 2 x 64 x (dk + 4) floats). */
static const int A2_NT = 256;
static const int A2_DKMAX = 128;

static size_t prep2_smem_bytes(size_t dk) {
    return (size_t)CMAX * CMAX * sizeof(double) + (2 * (size_t)CMAX * (dk + 4) + 4 * (size_t)CMAX) * sizeof(float);
}

/* Rows HF*32 .. HF*32+31 of one column of kernel A v2's forward substitution (a template so that
 * every index is a constant and acc / x stay in registers). */
template <int HF>
__device__ __forceinline__ void solve_half(float (&x)[CMAX / 2], const double *Mt, const float *Ks, const float *be,
                                           const float *eG, const float *vsrc, int ldvi, int ldk, int j, bool isw,
                                           int n, float *dst, int ld) {
    const int H = CMAX / 2, R0 = HF * H;
    double acc[H];
#pragma unroll
    for (int rr = 0; rr < H; rr++) {
        const int r = R0 + rr;
        float b = 0.0f;
        if (r < n) b = isw ? (Ks[r * ldk + j] * be[r]) * eG[r] : vsrc[(size_t)(r * ldvi)] * be[r];
        acc[rr] = (double)b;
    }
#pragma unroll
    for (int s = 0; s < R0 + H; s++) {
        float xs;
        if (s >= R0) { /* row s is final */
            xs = (float)acc[s - R0];
            if (HF == 0) x[s] = xs;
            if (s < n) dst[s * ld] = xs;
        } else {
            xs = x[s];
        }
        const double xd = (double)xs;
        const double *mc = Mt + s * CMAX;
#pragma unroll
        for (int r = (s + 1 > R0 ? s + 1 : R0); r < R0 + H; r++) acc[r - R0] = __fma_rn(-mc[r], xd, acc[r - R0]); /* acc - M x, one rounding */
    }
}

__global__ void __launch_bounds__(A2_NT, 1)
k_delta_prep2(DeltaScratch S, const float *q, const float *k, const float *v, const float *beta, const float *g,
              DeltaTab tab, size_t Hk, size_t Hv, size_t dk, size_t dv, int C, size_t nch) {
    extern __shared__ double2 smd2[]; /* double2: 16-byte alignment for the double loads */
    double *Mt = reinterpret_cast<double *>(smd2);          /* [s][r] = M[r][s], r > s, r < n; else 0 */
    const int dki = (int)dk, ldk = dki + 4;                 /* +4: float4 rows, rows 4 banks apart */
    float *Ks = reinterpret_cast<float *>(Mt + CMAX * CMAX); /* [CMAX][ldk] */
    float *Qs = Ks + CMAX * ldk;
    float *G = Qs + CMAX * ldk, *eG = G + CMAX, *eK = eG + CMAX, *be = eK + CMAX;
    const size_t c = blockIdx.x, h = blockIdx.y;
    const size_t kh = h / (Hv / Hk);
    const int sg = dseg_of(tab, (unsigned)c);
    const size_t t0 = tab.row0[sg] + (c - tab.first[sg]) * (size_t)C, tend = tab.row0[sg] + tab.n[sg];
    const int n = (int)(tend - t0 < (size_t)C ? tend - t0 : (size_t)C);
    const size_t ldq = Hk * dk, ldv = Hv * dv, ldg = Hv;
    const size_t blk = h * nch + c;
    float *W = S.W + blk * (size_t)C * dk, *U = S.U + blk * (size_t)C * dv;
    float *Qd = S.Qd + blk * (size_t)C * dk, *Kd = S.Kd + blk * (size_t)C * dk;
    float *In = S.In + blk * (size_t)C * C;
    const int tid = threadIdx.x;

    for (int p = tid; p < CMAX * CMAX; p += A2_NT) Mt[p] = 0.0;
    if (tid < CMAX) {
        G[tid] = tid < n ? g[(t0 + tid) * ldg + h] : 0.0f;
        be[tid] = tid < n ? beta[(t0 + tid) * ldg + h] : 0.0f;
    }
    for (int p = tid; p < CMAX * dki; p += A2_NT) { /* coalesced along each row */
        const int r = p / dki, i = p % dki;
        const size_t src = (t0 + r) * ldq + kh * dk + i;
        Ks[r * ldk + i] = r < n ? k[src] : 0.0f;
        Qs[r * ldk + i] = r < n ? q[src] : 0.0f;
    }
    __syncthreads();
    if (tid == 0) { /* the cumulative decay, in double as on the CPU */
        double run = 0;
        for (int r = 0; r < n; r++) {
            run += G[r];
            G[r] = (float)run;
        }
        S.lam[blk] = expf(G[n - 1]);
    }
    __syncthreads();
    if (tid < CMAX) {
        const float Gl = G[n - 1];
        eG[tid] = tid < n ? expf(G[tid]) : 0.0f;
        eK[tid] = tid < n ? expf(Gl - G[tid]) : 0.0f;
    }
    __syncthreads();
    /* Qd, Kd (rows < n; kernel B reads no others) */
    for (int p = tid; p < n * dki; p += A2_NT) {
        const int r = p / dki, i = p % dki;
        Qd[p] = Qs[r * ldk + i] * eG[r];
        Kd[p] = Ks[r * ldk + i] * eK[r];
    }
    /* M and Intra: 2 x 2 tiles (r0 + a, s0 + b) with s0 <= r0. The 528 lower tiles of the 32 x 32 tile
     * grid are numbered by pairs of tile rows (p, 31 - p), 33 tiles per pair. */
    for (int t = tid; t < 528; t += A2_NT) {
        const int pr = t / 33, idx = t % 33;
        const int tr = idx <= pr ? pr : 31 - pr, ts = idx <= pr ? idx : idx - pr - 1;
        const int r0 = 2 * tr, s0 = 2 * ts;
        if (r0 >= n) continue;
        double am[2][2][4], ai[2][2][4];
#pragma unroll
        for (int a = 0; a < 2; a++)
#pragma unroll
            for (int b = 0; b < 2; b++)
#pragma unroll
                for (int m = 0; m < 4; m++) am[a][b][m] = ai[a][b][m] = 0.0;
        const float be0 = be[r0], be1 = be[r0 + 1];
        for (int i = 0; i < dki; i += 4) {
            const float4 k0 = *reinterpret_cast<const float4 *>(Ks + r0 * ldk + i);
            const float4 k1 = *reinterpret_cast<const float4 *>(Ks + (r0 + 1) * ldk + i);
            const float4 q0 = *reinterpret_cast<const float4 *>(Qs + r0 * ldk + i);
            const float4 q1 = *reinterpret_cast<const float4 *>(Qs + (r0 + 1) * ldk + i);
            const float4 s0v = *reinterpret_cast<const float4 *>(Ks + s0 * ldk + i);
            const float4 s1v = *reinterpret_cast<const float4 *>(Ks + (s0 + 1) * ldk + i);
            /* kb = k * beta rounded to float first, as the CPU does */
            const float ka[2][4] = {{k0.x * be0, k0.y * be0, k0.z * be0, k0.w * be0},
                                    {k1.x * be1, k1.y * be1, k1.z * be1, k1.w * be1}};
            const float qa[2][4] = {{q0.x, q0.y, q0.z, q0.w}, {q1.x, q1.y, q1.z, q1.w}};
            const float kb[2][4] = {{s0v.x, s0v.y, s0v.z, s0v.w}, {s1v.x, s1v.y, s1v.z, s1v.w}};
#pragma unroll
            for (int a = 0; a < 2; a++)
#pragma unroll
                for (int b = 0; b < 2; b++)
#pragma unroll
                    for (int m = 0; m < 4; m++) {
                        const double ks = (double)kb[b][m];
                        am[a][b][m] = __fma_rn((double)ka[a][m], ks, am[a][b][m]);
                        ai[a][b][m] = __fma_rn((double)qa[a][m], ks, ai[a][b][m]);
                    }
        }
#pragma unroll
        for (int a = 0; a < 2; a++)
#pragma unroll
            for (int b = 0; b < 2; b++) {
                const int r = r0 + a, s = s0 + b;
                if (r >= n || s > r) continue;
                const float d = expf(G[r] - G[s]);
                const float mv = (float)((am[a][b][0] + am[a][b][1]) + (am[a][b][2] + am[a][b][3])) * d;
                const float iv = (float)((ai[a][b][0] + ai[a][b][1]) + (ai[a][b][2] + ai[a][b][3])) * d;
                if (s < r) Mt[s * CMAX + r] = (double)mv;
                In[r * C + s] = iv;
            }
    }
    __syncthreads();
    /* (I + L) [W | U] = [Kb exp(G) | Vb], one column per thread, right-looking (see above), in two halves
     * of 32 rows so that only 32 double accumulators are live (64 spilled): rows 32..63 first take
     * s = 0..31 from the finished first half, then continue; each acc[r] still sums s in order. */
    for (size_t j = tid; j < dk + dv; j += A2_NT) {
        const bool isw = j < dk;
        const int ld = isw ? dki : (int)dv; /* row stride of the output column */
        float *dst = isw ? W + j : U + (j - dk);
        const float *vsrc = isw ? v : v + t0 * ldv + h * dv + (j - dk); /* read only when !isw */
        const int ldvi = (int)ldv;
        float x[CMAX / 2]; /* the first half's solution */
        solve_half<0>(x, Mt, Ks, be, eG, vsrc, ldvi, ldk, (int)j, isw, n, dst, ld);
        solve_half<1>(x, Mt, Ks, be, eG, vsrc, ldvi, ldk, (int)j, isw, n, dst, ld);
    }
}

__global__ void k_delta_scan(DeltaScratch S, float *o, DeltaTab tab, size_t Hv, size_t dk, size_t dv, int C, size_t nch) {
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

    const int sg = blockIdx.z;
    const size_t cbeg = tab.first[sg], cend = tab.first[sg + 1];
    const size_t snapc = tab.snapc[sg] < 0 ? (size_t)-1 : cbeg + (size_t)tab.snapc[sg];
    const float *st_in = tab.in[sg];
    float *st_out = tab.out[sg];
    for (size_t p = threadIdx.x; p < dk * VS; p += blockDim.x) {
        const size_t ci = j0 + p % VS;
        R[p] = st_in && ci < dv ? st_in[(h * dk + p / VS) * dv + ci] : 0.0f;
    }
    __syncthreads();
    for (size_t c = cbeg; c < cend; c++) {
        const size_t t0 = tab.row0[sg] + (c - cbeg) * (size_t)C, tend = tab.row0[sg] + tab.n[sg];
        const int n = (int)(tend - t0 < (size_t)C ? tend - t0 : (size_t)C);
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
        /* R = lambda R + Kd^T Vn (not after the segment's last chunk unless its state is saved, as on
         * the CPU) */
        if (c + 1 < cend || c == snapc) {
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
                    if (c == snapc && jok) st_out[(h * dk + i0 + ii) * dv + jj] = *rp;
                }
            }
        }
        __syncthreads();
    }
}

/* ---- v2 of kernel B (CLEF_CUDA_DELTA=v2 and v3; v1 selects the one above, v4 v3 below) ----
 *
 * The first device run measured kernel B at ~190 us per chunk step (v1: one output per thread with a
 * serial double chain, few warps, 12 synchronised tile loads per chunk), i.e. 50 ms per call at 16k
 * tokens and 1.5 ms at 436. v2 keeps the block shape (one block per v-head and 32 state columns,
 * chunks in sequence) but register-tiles every product: each thread owns a 4 x 2 tile of Vn / O (rows
 * rg + 16m, columns cj and cj + 16) and an 8 x 2 tile of the state update, with independent
 * accumulators, and the chunk's W, Qd, Kd and Intra are staged whole in shared memory (float4 copies
 * of the contiguous per-chunk blocks kernel A wrote; rows >= n zero-filled, so garbage in the
 * scratch never reaches a sum). Per chunk: [W, Qd] -> Vn = U - W R and Qd R; [Kd, Intra] ->
 * O = Qd R + Intra Vn and R = lambda R + Kd^T Vn.
 * Acc = double for the parity path (the CPU's sums: same order over i and r, exact products, so the
 * same roundings), float (explicit FMAs) for the fast path. Needs dk % 4 == 0 and dk <= 128. */
static const int S2_NT = 256;
static const int S2_VS = 32;   /* state columns per block */
static const int S2_DKMAX = 128;

template <typename Acc> __device__ __forceinline__ Acc fma_acc(float a, float b, Acc c);
template <> __device__ __forceinline__ double fma_acc<double>(float a, float b, double c) {
    return __fma_rn((double)a, (double)b, c); /* the product is exact in double: = c + a*b rounded once */
}
template <> __device__ __forceinline__ float fma_acc<float>(float a, float b, float c) { return __fmaf_rn(a, b, c); }

/* Kernel B's chunk tiles (v2 and v3): float4 copies of the contiguous per-chunk blocks kernel A
 * wrote, rows >= n zero-filled so garbage in the scratch never reaches a sum.
 * W and Qd ([n][dk] each) into A and B ([CMAX][ldw]). */
__device__ __forceinline__ void load_rows2(float *A, float *B, const float4 *W4, const float4 *Q4, int n, int dk4,
                                           int ldw, int tid) {
    const float4 z4 = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int p = tid; p < CMAX * dk4; p += S2_NT) { /* p = r * dk4 + q: the global layout for r < n */
        const int r = p / dk4, q = p % dk4;
        *reinterpret_cast<float4 *>(A + r * ldw + 4 * q) = r < n ? W4[p] : z4;
        *reinterpret_cast<float4 *>(B + r * ldw + 4 * q) = r < n ? Q4[p] : z4;
    }
}
/* Kd ([n][dk]) into A ([CMAX][ldw]) and the lower triangle of Intra (In: [C][C]) into B ([CMAX][ldi]). */
__device__ __forceinline__ void load_kd_intra(float *A, float *B, const float4 *K4, const float *In, int n, int dk4,
                                              int ldw, int ldi, int C, int tid) {
    const float4 z4 = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int p = tid; p < CMAX * dk4; p += S2_NT) {
        const int r = p / dk4, q = p % dk4;
        *reinterpret_cast<float4 *>(A + r * ldw + 4 * q) = r < n ? K4[p] : z4;
    }
    for (int p = tid; p < CMAX * CMAX; p += S2_NT) {
        const int r = p / CMAX, s2 = p % CMAX;
        B[r * ldi + s2] = r < n && s2 <= r ? In[(size_t)r * C + s2] : 0.0f;
    }
}

/* Shared memory of v2: always CMAX rows (the 4 x 16 row tiling covers 64 rows; rows >= n are zero),
 * whatever the chunk size. */
static size_t scan2_smem_floats(size_t dk) {
    size_t ldw = dk + 4, ldi = (size_t)CMAX + 4;
    size_t a = (size_t)CMAX * ldw, b = a > (size_t)CMAX * ldi ? a : (size_t)CMAX * ldi;
    return a + b + dk * S2_VS + (size_t)CMAX * S2_VS;
}

template <typename Acc>
__global__ void __launch_bounds__(S2_NT)
k_delta_scan2(DeltaScratch S, float *o, DeltaTab tab, size_t Hv, size_t dk, size_t dv, int C, size_t nch) {
    extern __shared__ float4 sm4[]; /* float4: the float4 stores below need 16-byte alignment */
    float *sm = reinterpret_cast<float *>(sm4);
    const int ldw = (int)dk + 4, ldi = CMAX + 4;  /* +4: rows r and r + 1 land 4 banks apart */
    const size_t asz = (size_t)CMAX * ldw, bsz = asz > (size_t)CMAX * ldi ? asz : (size_t)CMAX * ldi;
    float *A = sm;                   /* [CMAX][ldw]: W, then Kd */
    float *B = A + asz;              /* [CMAX][ldw]: Qd, then Intra as [CMAX][ldi] */
    float *R = B + bsz;              /* [dk][VS] state slice */
    float *Vn = R + dk * S2_VS;      /* [CMAX][VS] */
    const size_t h = blockIdx.x, j0 = (size_t)blockIdx.y * S2_VS;
    const int tid = threadIdx.x, cj = tid & 15, rg = tid >> 4; /* rg: 0..15 */
    const size_t ja = j0 + cj, jb = j0 + cj + 16;
    const bool oka = ja < dv, okb = jb < dv;
    const size_t ldv = Hv * dv;
    const int dk4 = (int)dk / 4, dki = (int)dk;

    const int sg = blockIdx.z;
    const size_t cbeg = tab.first[sg], cend = tab.first[sg + 1];
    const size_t snapc = tab.snapc[sg] < 0 ? (size_t)-1 : cbeg + (size_t)tab.snapc[sg];
    const float *st_in = tab.in[sg];
    float *st_out = tab.out[sg];
    for (size_t p = tid; p < dk * S2_VS; p += S2_NT) {
        const size_t ci = j0 + p % S2_VS;
        R[p] = st_in && ci < dv ? st_in[(h * dk + p / S2_VS) * dv + ci] : 0.0f;
    }
    for (size_t c = cbeg; c < cend; c++) {
        const size_t t0 = tab.row0[sg] + (c - cbeg) * (size_t)C, tend = tab.row0[sg] + tab.n[sg];
        const int n = (int)(tend - t0 < (size_t)C ? tend - t0 : (size_t)C);
        const size_t blk = h * nch + c;
        const float4 *W4 = reinterpret_cast<const float4 *>(S.W + blk * (size_t)C * dk);
        const float4 *Q4 = reinterpret_cast<const float4 *>(S.Qd + blk * (size_t)C * dk);
        const float4 *K4 = reinterpret_cast<const float4 *>(S.Kd + blk * (size_t)C * dk);
        const float *U = S.U + blk * (size_t)C * dv, *In = S.In + blk * (size_t)C * C;
        const float lam = S.lam[blk];
        __syncthreads(); /* the previous chunk is done with A, B, R, Vn (and the R zeroing) */
        load_rows2(A, B, W4, Q4, n, dk4, ldw, tid);
        __syncthreads();
        /* Vn = U - W R and O1 = Qd R, both over i in order (the CPU's order) */
        Acc av[4][2], ao[4][2];
#pragma unroll
        for (int m = 0; m < 4; m++) av[m][0] = av[m][1] = ao[m][0] = ao[m][1] = (Acc)0;
        for (int i = 0; i < dki; i++) {
            const float ra = R[i * S2_VS + cj], rb = R[i * S2_VS + cj + 16];
#pragma unroll
            for (int m = 0; m < 4; m++) {
                const int r = rg + 16 * m;
                const float w = A[r * ldw + i], q = B[r * ldw + i];
                av[m][0] = fma_acc<Acc>(w, ra, av[m][0]);
                av[m][1] = fma_acc<Acc>(w, rb, av[m][1]);
                ao[m][0] = fma_acc<Acc>(q, ra, ao[m][0]);
                ao[m][1] = fma_acc<Acc>(q, rb, ao[m][1]);
            }
        }
#pragma unroll
        for (int m = 0; m < 4; m++) {
            const int r = rg + 16 * m;
            Vn[r * S2_VS + cj] = r < n && oka ? U[(size_t)r * dv + ja] - (float)av[m][0] : 0.0f;
            Vn[r * S2_VS + cj + 16] = r < n && okb ? U[(size_t)r * dv + jb] - (float)av[m][1] : 0.0f;
        }
        __syncthreads(); /* Vn complete; A and B free */
        load_kd_intra(A, B, K4, In, n, dk4, ldw, ldi, C, tid);
        __syncthreads();
        /* O = (float)(Qd R) + (float)(Intra Vn), the sum over s <= r in order */
#pragma unroll
        for (int m = 0; m < 4; m++) {
            const int r = rg + 16 * m;
            if (r >= n) continue;
            Acc a0 = (Acc)0, a1 = (Acc)0;
            for (int s2 = 0; s2 <= r; s2++) {
                const float x = B[r * ldi + s2];
                a0 = fma_acc<Acc>(x, Vn[s2 * S2_VS + cj], a0);
                a1 = fma_acc<Acc>(x, Vn[s2 * S2_VS + cj + 16], a1);
            }
            float *orow = o + (t0 + r) * ldv + h * dv;
            if (oka) orow[ja] = (float)ao[m][0] + (float)a0;
            if (okb) orow[jb] = (float)ao[m][1] + (float)a1;
        }
        /* R = lambda R + Kd^T Vn over r in order (not after the segment's last chunk unless its state
         * is saved, as on the CPU) */
        if (c + 1 < cend || c == snapc) {
            Acc ar[8][2];
#pragma unroll
            for (int m = 0; m < 8; m++) ar[m][0] = ar[m][1] = (Acc)0;
            for (int r = 0; r < n; r++) {
                const float va = Vn[r * S2_VS + cj], vb = Vn[r * S2_VS + cj + 16];
#pragma unroll
                for (int m = 0; m < 8; m++) {
                    const int i = rg + 16 * m;
                    const float kd = i < dki ? A[r * ldw + i] : 0.0f;
                    ar[m][0] = fma_acc<Acc>(kd, va, ar[m][0]);
                    ar[m][1] = fma_acc<Acc>(kd, vb, ar[m][1]);
                }
            }
#pragma unroll
            for (int m = 0; m < 8; m++) {
                const int i = rg + 16 * m;
                if (i >= dki) continue;
                float *ra = &R[i * S2_VS + cj], *rb = &R[i * S2_VS + cj + 16];
                *ra = *ra * lam + (float)ar[m][0];
                *rb = *rb * lam + (float)ar[m][1];
                if (c == snapc) {
                    if (oka) st_out[(h * dk + i) * dv + ja] = *ra;
                    if (okb) st_out[(h * dk + i) * dv + jb] = *rb;
                }
            }
        }
    }
}

/* ---- v3 of kernel B (CLEF_CUDA_DELTA=v4 = A v2 + B v3, the default since run 2026-12-04c; v5 = the
 * same with 16 state columns a block) ----
 *
 * Run 2026-12-04a: kernel B v2 takes ~22 us a chunk step (3.7 ms at 436 tokens, 139 ms at 16k for 24
 * layers) for ~4,000 FMAs a thread: it is bound by shared-memory loads, ~10 scalar loads per 16 FMAs
 * at 8 warps an SM. v3 computes the same sums in the same order (the same bits as v2) with 16-byte
 * operand loads:
 *  - the state slice is kept transposed, Rt[col][i] (rows dk + 4 floats), so a thread reads 4
 *    consecutive i of its columns with float4 loads; W and Qd rows are read 4 i at a time;
 *    per 4 i and two columns: 10 float4 loads for 64 FMAs (v2: 40 scalar loads);
 *  - Vn is written twice, Vn[r][col] (the state update's operand) and Vnt[col][r] (rows 68), so
 *    Intra Vn reads 4 keys a float4 (and the row's tail r % 4 one at a time: exactly v2's terms);
 *  - in the state update a thread owns 8 consecutive i (8 rg .. 8 rg + 7) instead of rg + 16 m, so
 *    Kd's row is two float4 loads per r.
 * NCOL: state columns a thread owns (cj + 16 cc, cc < NCOL), so a block owns 16 NCOL columns. NCOL =
 * 2 (v4): dk = dv = 128 with 32 value heads is 128 blocks, one an SM (run 2026-12-04c: two would fit);
 * NCOL = 1 (v5): 256 blocks, each with the chunk's whole tiles and half the products. A column's
 * sums are the same either way (the same bits). Shared memory (dk = 128, NCOL = 2): 2 x 64 x 132 +
 * 32 x 132 + 64 x 32 + 32 x 68 floats = 101 KB (NCOL = 1: 84 KB). Needs dk % 4 == 0 and dk <= 128. */
template <int NCOL> static size_t scan3_smem_floats(size_t dk) {
    const size_t vs = 16 * NCOL, ldw = dk + 4, ldi = (size_t)CMAX + 4;
    size_t a = (size_t)CMAX * ldw, b = a > (size_t)CMAX * ldi ? a : (size_t)CMAX * ldi;
    return a + b + vs * ldw + (size_t)CMAX * vs + vs * ldi;
}

template <typename Acc, int NCOL>
__global__ void __launch_bounds__(S2_NT)
k_delta_scan3(DeltaScratch S, float *o, DeltaTab tab, size_t Hv, size_t dk, size_t dv, int C, size_t nch) {
    constexpr int VSB = 16 * NCOL; /* state columns of the block */
    extern __shared__ float4 sm4c[];
    float *sm = reinterpret_cast<float *>(sm4c);
    const int ldw = (int)dk + 4, ldi = CMAX + 4;
    const size_t asz = (size_t)CMAX * ldw, bsz = asz > (size_t)CMAX * ldi ? asz : (size_t)CMAX * ldi;
    float *A = sm;                 /* [CMAX][ldw]: W, then Kd */
    float *B = A + asz;            /* [CMAX][ldw]: Qd, then Intra as [CMAX][ldi] */
    float *Rt = B + bsz;           /* [VSB][ldw]: the state slice, transposed */
    float *Vn = Rt + VSB * ldw;    /* [CMAX][VSB] */
    float *Vnt = Vn + CMAX * VSB;  /* [VSB][ldi] */
    const size_t h = blockIdx.x, j0 = (size_t)blockIdx.y * VSB;
    const int tid = threadIdx.x, cj = tid & 15, rg = tid >> 4; /* rg: 0..15 */
    size_t col[NCOL];
    bool ok[NCOL];
#pragma unroll
    for (int cc = 0; cc < NCOL; cc++) {
        col[cc] = j0 + cj + 16 * cc;
        ok[cc] = col[cc] < dv;
    }
    const size_t ldv = Hv * dv;
    const int dk4 = (int)dk / 4, dki = (int)dk;

    const int sg = blockIdx.z;
    const size_t cbeg = tab.first[sg], cend = tab.first[sg + 1];
    const size_t snapc = tab.snapc[sg] < 0 ? (size_t)-1 : cbeg + (size_t)tab.snapc[sg];
    const float *st_in = tab.in[sg];
    float *st_out = tab.out[sg];
    for (size_t p = tid; p < dk * VSB; p += S2_NT) {
        const size_t i = p / VSB, cc = p % VSB, ci = j0 + cc;
        Rt[cc * ldw + i] = st_in && ci < dv ? st_in[(h * dk + i) * dv + ci] : 0.0f;
    }
    const float *r_row[NCOL];
#pragma unroll
    for (int cc = 0; cc < NCOL; cc++) r_row[cc] = Rt + (cj + 16 * cc) * ldw;
    for (size_t c = cbeg; c < cend; c++) {
        const size_t t0 = tab.row0[sg] + (c - cbeg) * (size_t)C, tend = tab.row0[sg] + tab.n[sg];
        const int n = (int)(tend - t0 < (size_t)C ? tend - t0 : (size_t)C);
        const size_t blk = h * nch + c;
        const float4 *W4 = reinterpret_cast<const float4 *>(S.W + blk * (size_t)C * dk);
        const float4 *Q4 = reinterpret_cast<const float4 *>(S.Qd + blk * (size_t)C * dk);
        const float4 *K4 = reinterpret_cast<const float4 *>(S.Kd + blk * (size_t)C * dk);
        const float *U = S.U + blk * (size_t)C * dv, *In = S.In + blk * (size_t)C * C;
        const float lam = S.lam[blk];
        const float4 z4 = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        __syncthreads(); /* the previous chunk is done with A, B, Rt, Vn, Vnt (and the Rt zeroing) */
        load_rows2(A, B, W4, Q4, n, dk4, ldw, tid);
        __syncthreads();
        /* Vn = U - W R and O1 = Qd R, over i in order, 4 i a step */
        Acc av[4][NCOL], ao[4][NCOL];
#pragma unroll
        for (int m = 0; m < 4; m++)
#pragma unroll
            for (int cc = 0; cc < NCOL; cc++) av[m][cc] = ao[m][cc] = (Acc)0;
        for (int i = 0; i < dki; i += 4) {
            float4 rr[NCOL];
#pragma unroll
            for (int cc = 0; cc < NCOL; cc++) rr[cc] = *reinterpret_cast<const float4 *>(r_row[cc] + i);
#pragma unroll
            for (int m = 0; m < 4; m++) {
                const int r = rg + 16 * m;
                const float4 w = *reinterpret_cast<const float4 *>(A + r * ldw + i);
                const float4 q = *reinterpret_cast<const float4 *>(B + r * ldw + i);
#pragma unroll
                for (int cc = 0; cc < NCOL; cc++) {
                    av[m][cc] = fma_acc<Acc>(w.x, rr[cc].x, av[m][cc]);
                    ao[m][cc] = fma_acc<Acc>(q.x, rr[cc].x, ao[m][cc]);
                    av[m][cc] = fma_acc<Acc>(w.y, rr[cc].y, av[m][cc]);
                    ao[m][cc] = fma_acc<Acc>(q.y, rr[cc].y, ao[m][cc]);
                    av[m][cc] = fma_acc<Acc>(w.z, rr[cc].z, av[m][cc]);
                    ao[m][cc] = fma_acc<Acc>(q.z, rr[cc].z, ao[m][cc]);
                    av[m][cc] = fma_acc<Acc>(w.w, rr[cc].w, av[m][cc]);
                    ao[m][cc] = fma_acc<Acc>(q.w, rr[cc].w, ao[m][cc]);
                }
            }
        }
#pragma unroll
        for (int m = 0; m < 4; m++) {
            const int r = rg + 16 * m;
#pragma unroll
            for (int cc = 0; cc < NCOL; cc++) {
                const float vv = r < n && ok[cc] ? U[(size_t)r * dv + col[cc]] - (float)av[m][cc] : 0.0f;
                Vn[r * VSB + cj + 16 * cc] = vv;
                Vnt[(cj + 16 * cc) * ldi + r] = vv;
            }
        }
        __syncthreads(); /* Vn complete; A and B free */
        load_kd_intra(A, B, K4, In, n, dk4, ldw, ldi, C, tid);
        __syncthreads();
        /* O = (float)(Qd R) + (float)(Intra Vn), the sum over s <= r in order: 4 keys a step while a
         * whole step is <= r, then one at a time (v2's terms exactly, no zero products added) */
        const float *v_row[NCOL];
#pragma unroll
        for (int cc = 0; cc < NCOL; cc++) v_row[cc] = Vnt + (cj + 16 * cc) * ldi;
#pragma unroll
        for (int m = 0; m < 4; m++) {
            const int r = rg + 16 * m;
            if (r >= n) continue;
            Acc a[NCOL];
#pragma unroll
            for (int cc = 0; cc < NCOL; cc++) a[cc] = (Acc)0;
            const float *brow = B + r * ldi;
            int s2 = 0;
            for (; s2 + 3 <= r; s2 += 4) {
                const float4 x = *reinterpret_cast<const float4 *>(brow + s2);
#pragma unroll
                for (int cc = 0; cc < NCOL; cc++) {
                    const float4 y = *reinterpret_cast<const float4 *>(v_row[cc] + s2);
                    a[cc] = fma_acc<Acc>(x.x, y.x, a[cc]);
                    a[cc] = fma_acc<Acc>(x.y, y.y, a[cc]);
                    a[cc] = fma_acc<Acc>(x.z, y.z, a[cc]);
                    a[cc] = fma_acc<Acc>(x.w, y.w, a[cc]);
                }
            }
            for (; s2 <= r; s2++) {
                const float x = brow[s2];
#pragma unroll
                for (int cc = 0; cc < NCOL; cc++) a[cc] = fma_acc<Acc>(x, v_row[cc][s2], a[cc]);
            }
            float *orow = o + (t0 + r) * ldv + h * dv;
#pragma unroll
            for (int cc = 0; cc < NCOL; cc++)
                if (ok[cc]) orow[col[cc]] = (float)ao[m][cc] + (float)a[cc];
        }
        /* R = lambda R + Kd^T Vn over r in order; this thread's i: 8 rg .. 8 rg + 7 (not after the
         * segment's last chunk unless its state is saved, as on the CPU) */
        if (c + 1 < cend || c == snapc) {
            const int i0 = 8 * rg;
            if (i0 < dki) { /* dk <= 128: 16 groups of 8 cover it; dk % 4 == 0: a group is 4 or 8 */
                const bool two = i0 + 4 < dki;
                Acc ar[8][NCOL];
#pragma unroll
                for (int m = 0; m < 8; m++)
#pragma unroll
                    for (int cc = 0; cc < NCOL; cc++) ar[m][cc] = (Acc)0;
                for (int r = 0; r < n; r++) {
                    float vv[NCOL];
#pragma unroll
                    for (int cc = 0; cc < NCOL; cc++) vv[cc] = Vn[r * VSB + cj + 16 * cc];
                    const float4 k0 = *reinterpret_cast<const float4 *>(A + r * ldw + i0);
                    const float4 k1 = two ? *reinterpret_cast<const float4 *>(A + r * ldw + i0 + 4) : z4;
                    const float kd[8] = {k0.x, k0.y, k0.z, k0.w, k1.x, k1.y, k1.z, k1.w};
#pragma unroll
                    for (int m = 0; m < 8; m++)
#pragma unroll
                        for (int cc = 0; cc < NCOL; cc++) ar[m][cc] = fma_acc<Acc>(kd[m], vv[cc], ar[m][cc]);
                }
#pragma unroll
                for (int m = 0; m < 8; m++) {
                    const int i = i0 + m;
                    if (i >= dki) continue;
#pragma unroll
                    for (int cc = 0; cc < NCOL; cc++) {
                        float *rp = &Rt[(cj + 16 * cc) * ldw + i];
                        *rp = *rp * lam + (float)ar[m][cc];
                        if (c == snapc && ok[cc]) st_out[(h * dk + i) * dv + col[cc]] = *rp;
                    }
                }
            }
        }
    }
}

/* Each kernel family (A: the chunk preparation; B: the scan over chunks) shares one signature and
 * one launch; a pick names the variant the knobs, the precision and the shapes choose. */
typedef void (*DeltaPrepKernel)(DeltaScratch, const float *, const float *, const float *, const float *, const float *,
                                DeltaTab, size_t, size_t, size_t, size_t, int, size_t);
typedef void (*DeltaScanKernel)(DeltaScratch, float *, DeltaTab, size_t, size_t, size_t, int, size_t);
struct DeltaPrepPick {
    DeltaPrepKernel kernel;
    int threads;
    size_t smem; /* dynamic shared memory, bytes */
};
struct DeltaScanPick {
    DeltaScanKernel kernel;
    int threads;
    size_t smem;
    size_t cols; /* state columns a block owns: the grid's y is dv / cols */
};

/* Kernel A: v3's prep2 (dk % 4 == 0, dk <= 128) or v1's. */
static DeltaPrepPick pick_prep(const Impl *im, size_t dk, int C) {
    const size_t sm2 = prep2_smem_bytes(dk);
    if (im->delta_kernel >= CLEF_CUDA_DELTA_V3 && dk % 4 == 0 && dk <= (size_t)A2_DKMAX &&
        sm2 <= (size_t)im->max_smem_optin)
        return {k_delta_prep2, A2_NT, sm2};
    return {k_delta_prep, NT, ((size_t)C + (size_t)C * C) * sizeof(float)};
}

/* Kernel B: v3 (kernel B v3: 32 columns a block under v4, 16 under v5), v2, or v1; fast: fp32 sums
 * (the fast and bf16 precisions), else double. smB: v1's shared memory, checked by the caller. */
static DeltaScanPick pick_scan(const Impl *im, size_t dk, size_t smB, bool fast) {
    const size_t optin = (size_t)im->max_smem_optin;
    const size_t sm2 = scan2_smem_floats(dk) * sizeof(float);
    const bool v2 = im->delta_kernel != CLEF_CUDA_DELTA_V1 && dk % 4 == 0 && dk <= (size_t)S2_DKMAX && sm2 <= optin;
    if (v2 && im->delta_kernel == CLEF_CUDA_DELTA_V5) {
        const size_t sm3 = scan3_smem_floats<1>(dk) * sizeof(float);
        if (sm3 <= optin) return {fast ? k_delta_scan3<float, 1> : k_delta_scan3<double, 1>, S2_NT, sm3, 16};
    } else if (v2 && im->delta_kernel >= CLEF_CUDA_DELTA_V4) {
        const size_t sm3 = scan3_smem_floats<2>(dk) * sizeof(float);
        if (sm3 <= optin) return {fast ? k_delta_scan3<float, 2> : k_delta_scan3<double, 2>, S2_NT, sm3, 32};
    }
    if (v2) return {fast ? k_delta_scan2<float> : k_delta_scan2<double>, S2_NT, sm2, (size_t)S2_VS};
    return {k_delta_scan, NT, smB, (size_t)VS};
}

/* Groups of up to DSEG_MAX segments with rows: calls f(tab) for each. */
template <typename F> static void for_delta_groups(const clef_seg *segs, size_t nseg, const clef_seg_state *st,
                                                   size_t C, F f) {
    size_t i = 0;
    while (i < nseg) {
        DeltaTab tab;
        memset(&tab, 0, sizeof tab);
        unsigned nch = 0;
        int n = 0;
        for (; i < nseg && n < DSEG_MAX; i++) {
            if (!segs[i].n) continue;
            tab.row0[n] = segs[i].row0;
            tab.n[n] = (unsigned)segs[i].n;
            tab.first[n] = nch;
            const clef_seg_state *ss = st ? &st[i] : nullptr;
            tab.in[n] = ss ? ss->in : nullptr;
            tab.out[n] = ss ? ss->out : nullptr;
            tab.snapc[n] = ss && ss->out ? (int)((ss->snap + C - 1) / C) - 1 : -1;
            nch += (unsigned)((segs[i].n + C - 1) / C);
            n++;
        }
        tab.first[n] = nch;
        tab.nseg = n;
        if (n) f(tab);
    }
}

void op_delta_rule(clef_ops *ops, float *o, const float *q, const float *k, const float *v, const float *beta,
                   const float *g, size_t Hk, size_t Hv, size_t dk, size_t dv, size_t chunk, const clef_seg *segs,
                   size_t nseg, const clef_seg_state *st) {
    ProfScope ps(ops, OP_DELTA_RULE);
    if (nseg == 0) return;
    Impl *im = IM(ops);
    if (chunk == 0) chunk = 64;
    if (chunk > (size_t)CMAX) {
        fail_code(ops, CLEF_OPS_SHAPE, "delta_rule", "chunk over 64 is not supported by the CUDA backend");
        return;
    }
    if (!Hk || !Hv || Hv % Hk || !dk || !dv) {
        fail_code(ops, CLEF_OPS_SHAPE, "delta_rule", "bad head counts");
        return;
    }
    const int C = (int)chunk;
    /* the chunks of the largest launch group (the scratch is reused group after group) and the work */
    size_t nch_max = 0, nch_all = 0, cur = 0;
    int in_group = 0;
    for (size_t i = 0; i < nseg; i++) {
        if (segs[i].n > 0xffffffffu) {
            fail_code(ops, CLEF_OPS_SHAPE, "delta_rule", "segment over 2^32 rows");
            return;
        }
        if (st && st[i].out && (st[i].snap == 0 || st[i].snap > segs[i].n || (st[i].snap % chunk && st[i].snap != segs[i].n))) {
            fail_code(ops, CLEF_OPS_SHAPE, "delta_rule", "a state is saved after a chunk boundary or the segment's end only");
            return;
        }
        if (!segs[i].n) continue;
        const size_t c = (segs[i].n + chunk - 1) / chunk;
        if (in_group == DSEG_MAX) {
            cur = 0;
            in_group = 0;
        }
        cur += c;
        in_group++;
        nch_all += c;
        if (cur > nch_max) nch_max = cur;
    }
    if (!nch_max) return;
    { /* per chunk and head: M, Intra (2 C^2 dk each), the solves (C^2 (dk + dv)), U - W R, Qd R and the
         state update (2 C dk dv each), Intra Vn (C^2 dv) */
        const double c2 = (double)C * C, cd = (double)C * (double)dk * (double)dv;
        prof_flop(ops, OP_DELTA_RULE, (double)nch_all * (double)Hv * (4 * c2 * dk + c2 * (double)(dk + dv) + 6 * cd + c2 * dv));
    }
    const size_t nch = nch_max; /* scratch blocks per head */
    size_t smB = (dk * VS + (size_t)C * VS + (size_t)C * KT + (size_t)C * C) * sizeof(float);
    if (smB > (size_t)im->max_smem_optin || nch > 0x7fffffffu || Hv > 65535) {
        fail_code(ops, CLEF_OPS_SHAPE, "delta_rule", "key head dim too large for the device's shared memory");
        return;
    }
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

    const DeltaPrepPick A = pick_prep(im, dk, C);
    const DeltaScanPick B = pick_scan(im, dk, smB, im->precision != CLEF_CUDA_FP32);
    if (!smem_optin(ops, A.kernel, A.smem, "delta_rule (shared memory)") ||
        !smem_optin(ops, B.kernel, B.smem, "delta_rule (shared memory)")) {
        scratch_free(ops, base);
        return;
    }
    for_delta_groups(segs, nseg, st, chunk, [&](const DeltaTab &tab) {
        {
            ProfScope pa(ops, OP_DELTA_A);
            const dim3 ga(tab.first[tab.nseg] /* the group's chunks (<= nch) */, (unsigned)Hv);
            A.kernel<<<ga, A.threads, A.smem, im->stream>>>(S, q, k, v, beta, g, tab, Hk, Hv, dk, dv, C, nch);
        }
        ProfScope pb(ops, OP_DELTA_B);
        const dim3 gb((unsigned)Hv, (unsigned)((dv + B.cols - 1) / B.cols), (unsigned)tab.nseg);
        B.kernel<<<gb, B.threads, B.smem, im->stream>>>(S, o, tab, Hv, dk, dv, C, nch);
    });
    launch_ok(ops, "delta_rule");
    scratch_free(ops, base);
}

} // namespace clefcu
