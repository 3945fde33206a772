/* Gated full attention mixer (model.md §4.3), fp32. */
#include <math.h>

#include "model/text.h"

int clef_attention_forward(clef_ops *ops, const clef_text_config *tc, const clef_text_layer *L,
                           const float *u, size_t T, const clef_rope_tab *rope, float *out,
                           clef_err *err) {
    const size_t H = (size_t)tc->hidden_size, nh = (size_t)tc->num_attention_heads;
    const size_t nkv = (size_t)tc->num_key_value_heads, hd = (size_t)tc->head_dim;
    const size_t rot = (size_t)tc->rotary_dim, qd = nh * hd, kvd = nkv * hd;
    const float eps = (float)tc->rms_norm_eps;
    int rc = -1;

    float *qg = ops->alloc(ops, T * 2 * qd); /* q_proj output; later the attention output */
    float *q = ops->alloc(ops, T * qd);
    float *gate = ops->alloc(ops, T * qd);
    float *k = ops->alloc(ops, T * kvd);
    float *v = ops->alloc(ops, T * kvd);
    if (!qg || !q || !gate || !k || !v) {
        clef_err_set(err, CLEF_E_OOM, "out of memory in a full-attention layer (%zu tokens)", T);
        goto done;
    }
    /* 1-2: projections; q_proj rows are [query 0..hd | gate hd..2hd] per head */
    ops->linear(ops, qg, u, T, &L->attn.q_proj, 0, 2 * qd, NULL);
    ops->linear(ops, k, u, T, &L->attn.k_proj, 0, kvd, NULL);
    ops->linear(ops, v, u, T, &L->attn.v_proj, 0, kvd, NULL);
    /* 3: per-head RMSNorm with offset weights (the q norm also de-interleaves the query) */
    ops->rmsnorm(ops, q, hd, qg, 2 * hd, T * nh, hd, &L->attn.q_norm, 1, eps);
    ops->copy2d(ops, gate, hd, qg + hd, 2 * hd, T * nh, hd);
    ops->rmsnorm(ops, k, hd, k, hd, T * nkv, hd, &L->attn.k_norm, 1, eps);
    /* 4: partial rotary, rotate-half pairing, on the first rotary_dim dims */
    if (rot > 0) {
        ops->rope(ops, q, qd, T, nh, hd, rot, rope->cos, rope->sin);
        ops->rope(ops, k, kvd, T, nkv, hd, rot, rope->cos, rope->sin);
    }
    /* 5: causal GQA, scale head_dim^-0.5 */
    float *o = qg;
    ops->attention(ops, o, qd, q, qd, k, kvd, v, kvd, T, T, nh, nkv, hd, (float)pow((double)hd, -0.5), 1);
    /* 6: o * sigmoid(gate); 7: o_proj */
    ops->sigmoid_mul(ops, o, gate, T * qd);
    ops->linear(ops, out, o, T, &L->attn.o_proj, 0, H, NULL);
    if (ops->failed) {
        clef_err_set(err, CLEF_E_OOM, "out of memory inside a full-attention op");
        goto done;
    }
    rc = 0;
done:
    ops->free(ops, qg);
    ops->free(ops, q);
    ops->free(ops, gate);
    ops->free(ops, k);
    ops->free(ops, v);
    return rc;
}
