/* Packed forwards on the device (ops.h: clef_seg): for now one launch sequence per segment over the
 * kernels written for a single record. Resuming from or saving a record's state (clef_seg_state,
 * the state cache) is not implemented on the device yet: the backend leaves ops->can_resume at 0, so
 * the engine never asks, and a call that does fails cleanly. Varlen kernels (one launch for every
 * segment) are issue #17's work. */
#include "compute/cuda/cuda_internal.cuh"

namespace clefcu {

static bool no_states(clef_ops *ops, const char *what, const clef_seg_state *st, size_t nseg) {
    for (size_t i = 0; st && i < nseg; i++)
        if (st[i].in || st[i].out) {
            fail(ops, what, "resuming or saving a record's state is not implemented on CUDA");
            return false;
        }
    return true;
}

void op_conv1d_silu(clef_ops *ops, float *y, const float *x, size_t C, const clef_tensor *w, const clef_seg *segs,
                    size_t nseg, const clef_seg_state *st) {
    if (!no_states(ops, "conv1d_silu", st, nseg)) return;
    for (size_t i = 0; i < nseg; i++)
        op_conv1d_silu_one(ops, y + segs[i].row0 * C, x + segs[i].row0 * C, segs[i].n, C, w);
}

void op_delta_rule(clef_ops *ops, float *o, const float *q, const float *k, const float *v, const float *beta,
                   const float *g, size_t Hk, size_t Hv, size_t dk, size_t dv, size_t chunk, const clef_seg *segs,
                   size_t nseg, const clef_seg_state *st) {
    if (!no_states(ops, "delta_rule", st, nseg)) return;
    const size_t ldq = Hk * dk, ldv = Hv * dv;
    for (size_t i = 0; i < nseg; i++) {
        size_t r = segs[i].row0;
        op_delta_rule_one(ops, o + r * ldv, q + r * ldq, k + r * ldq, v + r * ldv, beta + r * Hv, g + r * Hv,
                          segs[i].n, Hk, Hv, dk, dv, chunk);
    }
}

void op_attention(clef_ops *ops, float *o, size_t ldo, const float *q, size_t ldq, const float *k, size_t ldk,
                  const float *v, size_t ldv, const clef_attn_seg *segs, size_t nseg, size_t nh, size_t nkv,
                  size_t hd, float scale, int causal) {
    for (size_t i = 0; i < nseg; i++) {
        const clef_attn_seg *s = &segs[i];
        if (causal && s->nk != s->nq) {
            fail(ops, "attention", "causal attention over cached keys is not implemented on CUDA");
            return;
        }
        op_attention_one(ops, o + s->q0 * ldo, ldo, q + s->q0 * ldq, ldq, k + s->k0 * ldk, ldk, v + s->k0 * ldv,
                         ldv, s->nq, s->nk, nh, nkv, hd, scale, causal);
    }
}

} // namespace clefcu
