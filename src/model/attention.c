/* Gated full attention mixer (model.md §4.3), fp32. */
#include <math.h>
#include <stdlib.h>

#include "model/text.h"

int clef_attention_forward(clef_ops *ops, const clef_text_config *tc, const clef_text_layer *L,
                           const float *u, size_t T, const clef_mix_segs *sg, const clef_rope_tab *rope,
                           float *out, clef_err *err) {
    const size_t H = (size_t)tc->hidden_size, nh = (size_t)tc->num_attention_heads;
    const size_t nkv = (size_t)tc->num_key_value_heads, hd = (size_t)tc->head_dim;
    const size_t rot = (size_t)tc->rotary_dim, qd = nh * hd, kvd = nkv * hd;
    const float eps = (float)tc->rms_norm_eps;
    int rc = -1;
    clef_attn_seg *as = NULL;
    float *kall = NULL, *vall = NULL;

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
    /* 5: causal GQA per record, scale head_dim^-0.5. A record that resumes from a cached state
     * sees its cached keys first: its keys are gathered into [cached | own] rows. A record whose
     * state is wanted gives its first rows' keys. */
    float *o = qg;
    size_t nk_all = 0;
    int resumed = 0;
    for (size_t s = 0; s < sg->n; s++) {
        const clef_forward_seg *r = &sg->rec[s];
        nk_all += sg->rows[s].n + (r->resume ? r->resume->rows : 0);
        if (r->resume) resumed = 1;
        if (r->snap) {
            ops->copy2d(ops, r->snap->k[sg->layer], kvd, k + sg->rows[s].row0 * kvd, kvd, r->snap->rows, kvd);
            ops->copy2d(ops, r->snap->v[sg->layer], kvd, v + sg->rows[s].row0 * kvd, kvd, r->snap->rows, kvd);
        }
    }
    as = malloc(sg->n * sizeof *as);
    if (!as) { clef_err_set(err, CLEF_E_OOM, "out of memory in a full-attention layer"); goto done; }
    const float *ka = k, *va = v;
    if (resumed) {
        kall = ops->alloc(ops, nk_all * kvd);
        vall = ops->alloc(ops, nk_all * kvd);
        if (!kall || !vall) {
            clef_err_set(err, CLEF_E_OOM, "out of memory for the keys of a full-attention layer (%zu rows)", nk_all);
            goto done;
        }
        ka = kall;
        va = vall;
    }
    for (size_t s = 0, krow = 0; s < sg->n; s++) {
        const clef_forward_seg *r = &sg->rec[s];
        size_t past = r->resume ? r->resume->rows : 0, row0 = sg->rows[s].row0, n = sg->rows[s].n;
        as[s].q0 = row0;
        as[s].nq = n;
        if (!resumed) {
            as[s].k0 = row0;
            as[s].nk = n;
            continue;
        }
        if (past) {
            ops->copy2d(ops, kall + krow * kvd, kvd, r->resume->k[sg->layer], kvd, past, kvd);
            ops->copy2d(ops, vall + krow * kvd, kvd, r->resume->v[sg->layer], kvd, past, kvd);
        }
        ops->copy2d(ops, kall + (krow + past) * kvd, kvd, k + row0 * kvd, kvd, n, kvd);
        ops->copy2d(ops, vall + (krow + past) * kvd, kvd, v + row0 * kvd, kvd, n, kvd);
        as[s].k0 = krow;
        as[s].nk = past + n;
        krow += past + n;
    }
    ops->attention(ops, o, qd, q, qd, ka, kvd, va, kvd, as, sg->n, nh, nkv, hd, (float)pow((double)hd, -0.5), 1);
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
    ops->free(ops, kall);
    ops->free(ops, vall);
    free(as);
    return rc;
}
