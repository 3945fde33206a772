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

/* Packed records (ops.h clef_seg): up to CSEG_MAX segments per launch, by value (no upload; a CUDA
 * graph holds the table as a launch argument); grid y = the segment. A tap before the segment's first
 * row reads the segment's window in[s] ([K-1, C], oldest first) or is skipped (zero history, as on the
 * CPU: the same products in the same order as the uninterrupted run). */
static const int CSEG_MAX = 32;
struct ConvTab {
    int nseg;
    size_t row0[CSEG_MAX];
    unsigned n[CSEG_MAX];
    unsigned snap[CSEG_MAX]; /* out: the window before this segment row */
    const float *in[CSEG_MAX];
    float *out[CSEG_MAX];
};

__global__ void k_conv1d_silu(float *y, const float *x, size_t C, size_t K, const float *w, ConvTab tab) {
    const int sg = blockIdx.y;
    const size_t row0 = tab.row0[sg], n = tab.n[sg];
    const float *in = tab.in[sg];
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n * C; i += (size_t)gridDim.x * blockDim.x) {
        const size_t t = i / C, ch = i % C;
        const float *wr = w + ch * K;
        double s = 0;
        for (size_t k = 0; k < K; k++) {
            if (t + k + 1 >= K) /* tap k reads segment row t - (K-1) + k */
                s += (double)wr[k] * x[(row0 + t + k + 1 - K) * C + ch];
            else if (in) /* window row (K-1) + (t - (K-1) + k) */
                s += (double)wr[k] * in[(t + k) * C + ch];
        }
        y[(row0 + t) * C + ch] = dev_siluf((float)s);
    }
}

/* The K-1 input rows before segment row snap into out[s] (after the conv: out may be in[s]). One
 * thread per channel reads its whole window first, so out == in works too. */
__global__ void k_conv1d_window(const float *x, size_t C, size_t K, ConvTab tab) {
    const int sg = blockIdx.y;
    float *out = tab.out[sg];
    if (!out) return;
    const size_t row0 = tab.row0[sg];
    const long snap = (long)tab.snap[sg], H = (long)K - 1;
    const float *in = tab.in[sg];
    for (size_t ch = blockIdx.x * (size_t)blockDim.x + threadIdx.x; ch < C; ch += (size_t)gridDim.x * blockDim.x) {
        float win[7];
        for (long j = 0; j < H; j++) {
            const long idx = snap - H + j; /* segment row */
            win[j] = idx >= 0 ? x[(row0 + (size_t)idx) * C + ch] : in ? in[(size_t)(H + idx) * C + ch] : 0.0f;
        }
        for (long j = 0; j < H; j++) out[(size_t)j * C + ch] = win[j];
    }
}

void op_conv1d_silu(clef_ops *ops, float *y, const float *x, size_t C, const clef_tensor *w, const clef_seg *segs,
                    size_t nseg, const clef_seg_state *st) {
    ProfScope ps(ops, OP_CONV1D_SILU);
    if (!nseg || !C) return;
    size_t K = (size_t)(w->numel / w->shape[0]);
    if (K < 1 || K > 8) {
        fail(ops, "conv1d_silu", "kernel size over 8 is not supported by the CUDA backend");
        return;
    }
    size_t maxn = 0;
    for (size_t i = 0; i < nseg; i++) {
        if (segs[i].n > 0xffffffffu) {
            fail(ops, "conv1d_silu", "segment over 2^32 rows");
            return;
        }
        if (st && st[i].out) {
            if (st[i].snap == 0 || st[i].snap > segs[i].n) {
                fail(ops, "conv1d_silu", "a window is saved before a row of the segment (0 < snap <= n)");
                return;
            }
        }
        if (segs[i].n > maxn) maxn = segs[i].n;
    }
    const float *wf = weight_f32(ops, w);
    if (!wf) return;
    Impl *im = IM(ops);
    size_t i = 0;
    while (i < nseg) {
        ConvTab tab;
        memset(&tab, 0, sizeof tab);
        int n = 0;
        bool outs = false;
        for (; i < nseg && n < CSEG_MAX; i++) {
            const clef_seg_state *ss = st ? &st[i] : nullptr;
            if (!segs[i].n && !(ss && ss->out)) continue;
            tab.row0[n] = segs[i].row0;
            tab.n[n] = (unsigned)segs[i].n;
            tab.in[n] = ss ? ss->in : nullptr;
            tab.out[n] = ss ? ss->out : nullptr;
            tab.snap[n] = ss && ss->out ? (unsigned)ss->snap : 0;
            outs = outs || tab.out[n];
            n++;
        }
        tab.nseg = n;
        if (!n) break;
        unsigned gx = egrid(maxn * C);
        if (maxn) k_conv1d_silu<<<dim3(gx, (unsigned)n), 256, 0, im->stream>>>(y, x, C, K, wf, tab);
        if (outs) k_conv1d_window<<<dim3(grid1d(C, 256), (unsigned)n), 256, 0, im->stream>>>(x, C, K, tab);
    }
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
