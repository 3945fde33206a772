/* Gated DeltaNet mixer (model.md §4.4), fp32. */
#include <math.h>
#include <stdlib.h>

#include "model/text.h"

int clef_gdn_forward(clef_ops *ops, const clef_text_config *tc, const clef_text_layer *L,
                     const float *u, size_t T, const clef_mix_segs *sg, float *out, clef_err *err) {
    const size_t H = (size_t)tc->hidden_size;
    const size_t Hk = (size_t)tc->linear_num_key_heads, Hv = (size_t)tc->linear_num_value_heads;
    const size_t dk = (size_t)tc->linear_key_head_dim, dv = (size_t)tc->linear_value_head_dim;
    const size_t Kd = Hk * dk, Vd = Hv * dv, CD = 2 * Kd + Vd;
    int rc = -1;
    clef_seg_state *cst = calloc(sg->n, sizeof *cst), *rst = calloc(sg->n, sizeof *rst);
    if (!cst || !rst) {
        free(cst);
        free(rst);
        return clef_err_set(err, CLEF_E_OOM, "out of memory in a Gated DeltaNet layer");
    }
    for (size_t s = 0; s < sg->n; s++) { /* each record's conv window and delta-rule state */
        const clef_forward_seg *r = &sg->rec[s];
        if (r->resume) {
            cst[s].in = r->resume->conv[sg->layer];
            rst[s].in = r->resume->rec[sg->layer];
        }
        if (r->snap) {
            cst[s].out = r->snap->conv[sg->layer];
            rst[s].out = r->snap->rec[sg->layer];
            cst[s].snap = rst[s].snap = r->snap->rows;
        }
    }

    float *mixed = ops->alloc(ops, T * CD);  /* projections, later q | k | v contiguous */
    float *conv = ops->alloc(ops, T * CD);   /* conv output, later the kernel output [T, Vd] */
    float *z = ops->alloc(ops, T * Vd);
    float *ab = ops->alloc(ops, 4 * T * Hv); /* b, a, beta, g */
    if (!mixed || !conv || !z || !ab) {
        clef_err_set(err, CLEF_E_OOM, "out of memory in a Gated DeltaNet layer (%zu tokens)", T);
        goto done;
    }
    float *b = ab, *a = ab + T * Hv, *beta = ab + 2 * T * Hv, *g = ab + 3 * T * Hv;

    /* §4.4.1 projections */
    ops->linear(ops, mixed, u, T, &L->gdn.in_proj_qkv, 0, CD, NULL);
    ops->linear(ops, z, u, T, &L->gdn.in_proj_z, 0, Vd, NULL);
    ops->linear(ops, b, u, T, &L->gdn.in_proj_b, 0, Hv, NULL);
    ops->linear(ops, a, u, T, &L->gdn.in_proj_a, 0, Hv, NULL);
    /* §4.4.2 causal conv1d + SiLU */
    ops->conv1d_silu(ops, conv, mixed, CD, &L->gdn.conv1d, sg->rows, sg->n, cst);
    /* §4.4.3 split (q | k | v contiguous per token-head) and gates */
    float *q = mixed, *k = mixed + T * Kd, *v = mixed + 2 * T * Kd;
    ops->copy2d(ops, q, Kd, conv, CD, T, Kd);
    ops->copy2d(ops, k, Kd, conv + Kd, CD, T, Kd);
    ops->copy2d(ops, v, Vd, conv + 2 * Kd, CD, T, Vd);
    ops->gdn_gates(ops, beta, g, b, a, T, Hv, &L->gdn.A_log, &L->gdn.dt_bias);
    /* §4.4.4 l2norm (eps 1e-6 in the sum, hard-coded in transformers), q * dk^-0.5 */
    ops->l2norm(ops, q, dk, T * Hk, dk, 1e-6f, (float)pow((double)dk, -0.5));
    ops->l2norm(ops, k, dk, T * Hk, dk, 1e-6f, 1.0f);
    /* §4.4.6 chunked delta rule, C = 64 */
    float *o = conv;
    ops->delta_rule(ops, o, q, k, v, beta, g, Hk, Hv, dk, dv, CLEF_DELTA_CHUNK, sg->rows, sg->n, rst);
    /* §4.4.7 gated RMSNorm per (token, v-head), then §4.4.8 out_proj */
    ops->gated_rmsnorm(ops, o, o, z, T * Hv, dv, &L->gdn.norm, (float)tc->rms_norm_eps);
    ops->linear(ops, out, o, T, &L->gdn.out_proj, 0, H, NULL);
    if (ops->failed) {
        clef_err_set(err, CLEF_E_OOM, "out of memory inside a Gated DeltaNet op");
        goto done;
    }
    rc = 0;
done:
    ops->free(ops, mixed);
    ops->free(ops, conv);
    ops->free(ops, z);
    ops->free(ops, ab);
    free(cst);
    free(rst);
    return rc;
}
