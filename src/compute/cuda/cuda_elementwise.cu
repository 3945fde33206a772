/* Elementwise and small per-position ops: copy2d, rope, conv1d_silu, gdn_gates, silu_mul, gelu,
 * sigmoid_mul, add. Each output element is computed by one thread with the CPU backend's
 * expressions (built with -fmad=false: no contracted multiply-adds). */
#include "compute/cuda/cuda_internal.cuh"

namespace clefcu {

static unsigned egrid(size_t n) {
    unsigned g = grid1d(n, 256);
    return g > 16384 ? 16384 : g;
}

#define GRID_LOOP(i, n) \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

__global__ void k_copy2d(float *y, size_t ldy, const float *x, size_t ldx, size_t rows, size_t cols) {
    GRID_LOOP(i, rows * cols) {
        size_t r = i / cols, c = i % cols;
        y[r * ldy + c] = x[r * ldx + c];
    }
}

void op_copy2d(clef_ops *ops, float *y, size_t ldy, const float *x, size_t ldx, size_t rows, size_t cols) {
    ProfScope ps(ops, OP_COPY2D);
    if (!rows || !cols) return;
    k_copy2d<<<egrid(rows * cols), 256, 0, IM(ops)->stream>>>(y, ldy, x, ldx, rows, cols);
    launch_ok(ops, "copy2d");
}

__global__ void k_rope(float *x, size_t ld, size_t T, size_t nh, size_t hd, size_t half, const float *cs,
                       const float *sn) {
    GRID_LOOP(i, T * nh * half) {
        size_t d = i % half, h = (i / half) % nh, t = i / (half * nh);
        float *v = x + t * ld + h * hd;
        float c = cs[t * half + d], s = sn[t * half + d];
        float x1 = v[d], x2 = v[d + half];
        float a = x1 * c, bb = x2 * s;
        float cc = x2 * c, dd = x1 * s;
        v[d] = a - bb;
        v[d + half] = cc + dd;
    }
}

void op_rope(clef_ops *ops, float *x, size_t ld, size_t T, size_t nh, size_t hd, size_t rot, const float *cos,
             const float *sin) {
    ProfScope ps(ops, OP_ROPE);
    size_t half = rot / 2;
    if (!T || !nh || !half) return;
    k_rope<<<egrid(T * nh * half), 256, 0, IM(ops)->stream>>>(x, ld, T, nh, hd, half, cos, sin);
    launch_ok(ops, "rope");
}

__global__ void k_conv1d_silu(float *y, const float *x, size_t T, size_t C, size_t K, const float *w) {
    GRID_LOOP(i, T * C) {
        size_t t = i / C, ch = i % C;
        const float *wr = w + ch * K;
        double s = 0;
        for (size_t k = 0; k < K; k++) {
            if (t + k + 1 < K) continue; /* tap k reads position t - (K-1) + k */
            s += (double)wr[k] * x[(t + k + 1 - K) * C + ch];
        }
        y[i] = dev_siluf((float)s);
    }
}

void op_conv1d_silu_one(clef_ops *ops, float *y, const float *x, size_t T, size_t C, const clef_tensor *w) {
    ProfScope ps(ops, OP_CONV1D_SILU);
    if (!T || !C) return;
    size_t K = (size_t)(w->numel / w->shape[0]);
    const float *wf = weight_f32(ops, w);
    if (!wf) return;
    k_conv1d_silu<<<egrid(T * C), 256, 0, IM(ops)->stream>>>(y, x, T, C, K, wf);
    launch_ok(ops, "conv1d_silu");
}

__global__ void k_gdn_gates(float *beta, float *g, const float *b, const float *a, size_t T, size_t H,
                            const float *A_log, const float *dt_bias) {
    GRID_LOOP(i, T * H) {
        size_t h = i % H;
        beta[i] = dev_sigmoidf(b[i]);
        float u = a[i] + dt_bias[h];
        float sp = u > 20.0f ? u : log1pf(expf(u));
        float na = -expf(A_log[h]);
        g[i] = na * sp;
    }
}

void op_gdn_gates(clef_ops *ops, float *beta, float *g, const float *b, const float *a, size_t T, size_t H,
                  const clef_tensor *A_log, const clef_tensor *dt_bias) {
    ProfScope ps(ops, OP_GDN_GATES);
    if (!T || !H) return;
    const float *al = weight_f32(ops, A_log), *dt = weight_f32(ops, dt_bias);
    if (!al || !dt) return;
    k_gdn_gates<<<egrid(T * H), 256, 0, IM(ops)->stream>>>(beta, g, b, a, T, H, al, dt);
    launch_ok(ops, "gdn_gates");
}

enum { E_SILU_MUL, E_GELU, E_GELU_TANH, E_SIGMOID_MUL, E_ADD };

__global__ void k_ew(float *y, const float *A, const float *B, size_t n, int kind) {
    GRID_LOOP(i, n) {
        switch (kind) {
        case E_SILU_MUL:
            y[i] = dev_siluf(A[i]) * B[i];
            break;
        case E_GELU: {
            double x = y[i];
            y[i] = (float)(0.5 * x * (1.0 + erf(x * 0.70710678118654752440)));
            break;
        }
        case E_GELU_TANH: {
            double x = y[i];
            double inner = 0.79788456080286535588 * (x + 0.044715 * x * x * x);
            y[i] = (float)(0.5 * x * (1.0 + tanh(inner)));
            break;
        }
        case E_SIGMOID_MUL:
            y[i] = y[i] * dev_sigmoidf(A[i]);
            break;
        default:
            y[i] = A[i] + B[i];
            break;
        }
    }
}

static void ew(clef_ops *ops, int op, float *y, const float *a, const float *b, size_t n, int kind) {
    ProfScope ps(ops, op);
    if (!n) return;
    k_ew<<<egrid(n), 256, 0, IM(ops)->stream>>>(y, a, b, n, kind);
    launch_ok(ops, op_names[op]);
}

void op_silu_mul(clef_ops *ops, float *y, const float *gate, const float *up, size_t n) {
    ew(ops, OP_SILU_MUL, y, gate, up, n, E_SILU_MUL);
}
void op_gelu(clef_ops *ops, float *x, size_t n, int tanh_approx) {
    ew(ops, OP_GELU, x, nullptr, nullptr, n, tanh_approx ? E_GELU_TANH : E_GELU);
}
void op_sigmoid_mul(clef_ops *ops, float *x, const float *gate, size_t n) {
    ew(ops, OP_SIGMOID_MUL, x, gate, nullptr, n, E_SIGMOID_MUL);
}
void op_add(clef_ops *ops, float *y, const float *a, const float *b, size_t n) { ew(ops, OP_ADD, y, a, b, n, E_ADD); }

} // namespace clefcu
