/* Gathers and norms: embed, row_mean, rmsnorm, layernorm, l2norm, gated_rmsnorm. One block per
 * row; sums of squares and means accumulate in double (float products are exact in double) and
 * reduce through a fixed tree (warp shuffles, then the warps' partials in order), so the bits
 * repeat and differ from the CPU's sequential double sums only in the last bits of a double. The
 * fp32 expressions after the reduction are the CPU backend's, operation for operation (the CUDA
 * sources are built with -fmad=false so no multiply-add is contracted). */
#include "compute/cuda/cuda_internal.cuh"

namespace clefcu {

static const int NB = 128; /* threads per row block */

__device__ double block_sum(double v, double *sh) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        double r = 0;
        for (int i = 0; i < (int)(blockDim.x >> 5); i++) r += sh[i];
        sh[32] = r;
    }
    __syncthreads();
    double r = sh[32];
    __syncthreads();
    return r;
}

enum { K_RMS, K_L2, K_GATED };

__global__ void k_rowsq(float *Y, size_t ldy, const float *X, size_t ldx, const float *Z, size_t D, const float *w,
                        int offset, float eps, float scale, int kind) {
    __shared__ double sh[33];
    size_t r = blockIdx.x;
    const float *x = X + r * ldx;
    float *y = Y + r * ldy;
    double ss = 0;
    for (size_t d = threadIdx.x; d < D; d += blockDim.x) ss += (double)x[d] * x[d];
    ss = block_sum(ss, sh);
    if (kind == K_L2) {
        float inv = (float)(1.0 / sqrt(ss + (double)eps));
        for (size_t d = threadIdx.x; d < D; d += blockDim.x) {
            float t = x[d] * inv;
            y[d] = scale != 1.0f ? t * scale : t;
        }
        return;
    }
    float inv = (float)(1.0 / sqrt(ss / (double)D + (double)eps));
    if (kind == K_RMS) {
        for (size_t d = threadIdx.x; d < D; d += blockDim.x) {
            float n = x[d] * inv;
            y[d] = n * (offset ? 1.0f + w[d] : w[d]);
        }
    } else {
        const float *z = Z + r * D;
        for (size_t d = threadIdx.x; d < D; d += blockDim.x) {
            float n = w[d] * (x[d] * inv);
            y[d] = n * dev_siluf(z[d]);
        }
    }
}

__global__ void k_layernorm(float *Y, const float *X, size_t D, const float *w, const float *b, float eps) {
    __shared__ double sh[33];
    size_t r = blockIdx.x;
    const float *x = X + r * D;
    float *y = Y + r * D;
    double s = 0;
    for (size_t d = threadIdx.x; d < D; d += blockDim.x) s += x[d];
    s = block_sum(s, sh);
    double mean = s / (double)D, v = 0;
    for (size_t d = threadIdx.x; d < D; d += blockDim.x) {
        double t = x[d] - mean;
        v += t * t;
    }
    v = block_sum(v, sh);
    double rstd = 1.0 / sqrt(v / (double)D + (double)eps);
    for (size_t d = threadIdx.x; d < D; d += blockDim.x)
        y[d] = (float)(((double)x[d] - mean) * rstd * (double)w[d] + (double)b[d]);
}

static bool rows_ok(clef_ops *ops, size_t rows) {
    if (rows > 0x7fffffffu) return fail(ops, "norm", "more than 2^31 rows");
    return true;
}

void op_rmsnorm(clef_ops *ops, float *y, size_t ldy, const float *x, size_t ldx, size_t rows, size_t D,
                const clef_tensor *w, int offset, float eps) {
    ProfScope ps(ops, OP_RMSNORM);
    if (!rows || !rows_ok(ops, rows)) return;
    const float *wf = weight_f32(ops, w);
    if (!wf) return;
    k_rowsq<<<(unsigned)rows, NB, 0, IM(ops)->stream>>>(y, ldy, x, ldx, nullptr, D, wf, offset, eps, 1.0f, K_RMS);
    launch_ok(ops, "rmsnorm");
}

void op_layernorm(clef_ops *ops, float *y, const float *x, size_t rows, size_t D, const clef_tensor *w,
                  const clef_tensor *b, float eps) {
    ProfScope ps(ops, OP_LAYERNORM);
    if (!rows || !rows_ok(ops, rows)) return;
    const float *wf = weight_f32(ops, w), *bf = weight_f32(ops, b);
    if (!wf || !bf) return;
    k_layernorm<<<(unsigned)rows, NB, 0, IM(ops)->stream>>>(y, x, D, wf, bf, eps);
    launch_ok(ops, "layernorm");
}

void op_l2norm(clef_ops *ops, float *x, size_t ld, size_t rows, size_t D, float eps, float scale) {
    ProfScope ps(ops, OP_L2NORM);
    if (!rows || !rows_ok(ops, rows)) return;
    k_rowsq<<<(unsigned)rows, NB, 0, IM(ops)->stream>>>(x, ld, x, ld, nullptr, D, nullptr, 0, eps, scale, K_L2);
    launch_ok(ops, "l2norm");
}

void op_gated_rmsnorm(clef_ops *ops, float *y, const float *x, const float *z, size_t rows, size_t D,
                      const clef_tensor *w, float eps) {
    ProfScope ps(ops, OP_GATED_RMSNORM);
    if (!rows || !rows_ok(ops, rows)) return;
    const float *wf = weight_f32(ops, w);
    if (!wf) return;
    k_rowsq<<<(unsigned)rows, NB, 0, IM(ops)->stream>>>(y, D, x, D, z, D, wf, 0, eps, 1.0f, K_GATED);
    launch_ok(ops, "gated_rmsnorm");
}

/* ---------------------------------------------------------------- gathers */

__global__ void k_embed_bf16(float *y, const uint16_t *table, const int32_t *ids, size_t n, size_t D) {
    size_t total = n * D;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / D, d = i % D;
        y[i] = bf16_bits_to_f32(table[(size_t)ids[r] * D + d]);
    }
}

__global__ void k_embed_f32(float *y, const float *table, const int32_t *ids, size_t n, size_t D) {
    size_t total = n * D;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / D, d = i % D;
        y[i] = table[(size_t)ids[r] * D + d];
    }
}

void op_embed(clef_ops *ops, float *y, const clef_tensor *table, const int32_t *ids, size_t n) {
    ProfScope ps(ops, OP_EMBED);
    if (!n) return;
    Impl *im = IM(ops);
    size_t D = (size_t)(table->numel / table->shape[0]);
    int dt = 0;
    const void *tab = weight_raw(ops, table, &dt);
    if (!tab) return;
    int32_t *dids = (int32_t *)scratch_alloc(ops, n * sizeof(int32_t));
    if (!dids) return;
    if (h2d(ops, dids, ids, n * sizeof(int32_t), "embed ids")) {
        unsigned g = grid1d(n * D, 256);
        if (g > 8192) g = 8192;
        if (dt == CLEF_ST_BF16)
            k_embed_bf16<<<g, 256, 0, im->stream>>>(y, (const uint16_t *)tab, dids, n, D);
        else
            k_embed_f32<<<g, 256, 0, im->stream>>>(y, (const float *)tab, dids, n, D);
        launch_ok(ops, "embed");
    }
    scratch_free(ops, dids);
}

__global__ void k_row_mean(float *y, const float *x, size_t ldx, size_t r0, size_t r1, size_t D) {
    size_t d = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (d >= D) return;
    if (r1 <= r0) {
        y[d] = __int_as_float(0x7fc00000); /* NaN: torch's mean of an empty slice */
        return;
    }
    double s = 0;
    for (size_t r = r0; r < r1; r++) s += x[r * ldx + d];
    y[d] = (float)(s / (double)(r1 - r0));
}

void op_row_mean(clef_ops *ops, float *y, const float *x, size_t ldx, size_t r0, size_t r1, size_t D) {
    ProfScope ps(ops, OP_ROW_MEAN);
    if (!D) return;
    k_row_mean<<<grid1d(D, 128), 128, 0, IM(ops)->stream>>>(y, x, ldx, r0, r1, D);
    launch_ok(ops, "row_mean");
}

} // namespace clefcu
