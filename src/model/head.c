/* JointSchemaHead forward for one record (contract.md §6.3–§6.4), fp32. The matrix work goes
 * through the ops backend; the few per-question reductions over a handful of option vectors
 * (routing softmax, normalize, cosine, the final combination) run on the host on copies. */
#include "model/head.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

size_t clef_head_total_options(const clef_head_in *in) {
    size_t n = 0;
    for (int i = 0; i < in->n_questions; i++) n += (size_t)(in->questions[i].n_options > 0 ? in->questions[i].n_options : 0);
    return n;
}

/* Device buffers of one call, freed together. */
#define HEAD_MAXBUF 48
typedef struct {
    clef_ops *ops;
    float *p[HEAD_MAXBUF];
    int n, oom;
} pool_t;
static float *dalloc(pool_t *pl, size_t n) {
    if (pl->n >= HEAD_MAXBUF) { pl->oom = 1; return NULL; }
    float *p = pl->ops->alloc(pl->ops, n ? n : 1);
    if (!p) pl->oom = 1;
    pl->p[pl->n++] = p;
    return p;
}
static void dfree_all(pool_t *pl) {
    for (int i = 0; i < pl->n; i++) pl->ops->free(pl->ops, pl->p[i]);
    pl->n = 0;
}

static double dotd(const float *a, const float *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}
/* F.normalize: x / max(||x||, eps), norm computed then rounded to fp32 */
static void normalize_into(float *y, const float *x, size_t n, float eps) {
    float nrm = (float)sqrt(dotd(x, x, n));
    if (nrm < eps) nrm = eps;
    for (size_t i = 0; i < n; i++) y[i] = x[i] / nrm;
}

/* torch.nn.MultiheadAttention(query = xq [Tq, W], key = value = xkv [Tk, W]) with in_proj split
 * q/k/v by rows, no masks; out [Tq, W]. Scratch: q [Tq, W], k, v [Tk, W], a [Tq, W]. */
static void mha(clef_ops *ops, float *out, const float *xq, size_t Tq, const float *xkv, size_t Tk,
                const clef_tensor *in_w, const clef_tensor *in_b, const clef_tensor *out_w,
                const clef_tensor *out_b, size_t W, size_t heads, float *q, float *k, float *v, float *a) {
    size_t hd = W / heads;
    ops->linear(ops, q, xq, Tq, in_w, 0, W, in_b);
    ops->linear(ops, k, xkv, Tk, in_w, W, W, in_b);
    ops->linear(ops, v, xkv, Tk, in_w, 2 * W, W, in_b);
    clef_attention1(ops, a, W, q, W, k, W, v, W, Tq, Tk, heads, heads, hd, (float)(1.0 / sqrt((double)hd)), 0);
    ops->linear(ops, out, a, Tq, out_w, 0, W, out_b);
}

int clef_head_forward(clef_ops *ops, const clef_head_config *hc, const clef_head_weights *hw,
                      const clef_tensor *lm_head, const clef_head_in *in, float *logits,
                      clef_err *err) {
    const size_t T = in->T, Hb = (size_t)hc->hidden_size, W = (size_t)hc->width;
    const size_t F = (size_t)hc->feedforward, heads = (size_t)hc->heads;
    const int Q = in->n_questions;
    const float ln_eps = 1e-5f;
    const size_t past = in->past, Tn = T - past; /* rows computed here */
    if (T == 0 || past >= T || !in->hidden || !in->ids || (past && !in->mem_past))
        return clef_err_set(err, CLEF_E_INTERNAL, "head called with no tokens");
    if (in->mem_snap && (past || in->snap_rows > T))
        return clef_err_set(err, CLEF_E_INTERNAL, "head: memory rows saved only from a whole record");
    if (Q <= 0 || !in->questions) return clef_err_set(err, CLEF_E_INTERNAL, "head called with no questions");
    if (heads == 0 || W % heads != 0 || hw->n_evidence != hc->routing_layers || hw->n_layers != hc->layers)
        return clef_err_set(err, CLEF_E_BAD_MODEL, "head config and weights disagree");
    const int64_t V = lm_head->shape[0];
    size_t N = 0, maxspan = 0;
    for (int i = 0; i < Q; i++) {
        const clef_head_question *qq = &in->questions[i];
        if (qq->type < 0 || qq->type > 2) return clef_err_set(err, CLEF_E_INTERNAL, "question %d has type %d", i, qq->type);
        /* An empty span is allowed: its mean is NaN, as in the reference (contract.md §3.2: a
         * question with an empty id and no instructions gives NaN logits for the whole record). */
        if (qq->q_start < 0 || qq->q_end < qq->q_start || (size_t)qq->q_end > T ||
            (qq->q_end > qq->q_start && (size_t)qq->q_start < past))
            return clef_err_set(err, CLEF_E_INTERNAL, "question %d span [%d, %d) is outside %zu tokens", i, (int)qq->q_start, (int)qq->q_end, T);
        if (qq->n_options <= 0 || !qq->option_spans) return clef_err_set(err, CLEF_E_INTERNAL, "question %d has no options", i);
        for (int j = 0; j < qq->n_options; j++) {
            int32_t s = qq->option_spans[2 * j], e = qq->option_spans[2 * j + 1];
            if (s < 0 || e < s || (size_t)e > T || (e > s && (size_t)s < past))
                return clef_err_set(err, CLEF_E_INTERNAL, "question %d option %d span [%d, %d) is outside %zu tokens", i, j, (int)s, (int)e, T);
            for (int32_t t = s; t < e; t++)
                if (in->ids[t] < 0 || in->ids[t] >= V) return clef_err_set(err, CLEF_E_INTERNAL, "token id %d outside the lexical table", (int)in->ids[t]);
            if ((size_t)(e - s) > maxspan) maxspan = (size_t)(e - s);
        }
        N += (size_t)qq->n_options;
    }
    size_t Tm = T > N ? T : N; /* rows of the k/v scratch (memory or fields) */
    if (Tm < (size_t)Q) Tm = (size_t)Q;

    int rc = -1;
    pool_t pl = {ops, {0}, 0, 0};
    float *Hn = dalloc(&pl, Tn * Hb);         /* hidden_norm(hidden) of the new rows */
    float *M = dalloc(&pl, T * W);            /* memory */
    float *Mn = dalloc(&pl, T * W);           /* memory_norm(M) */
    float *Qv = dalloc(&pl, (size_t)Q * Hb);  /* question means */
    float *Cv = dalloc(&pl, N * Hb);          /* option context means */
    float *Lx = dalloc(&pl, N * Hb);          /* lexical means */
    float *tmp = dalloc(&pl, maxspan * Hb);   /* gathered lm_head rows of one span */
    float *R = dalloc(&pl, N * W);
    float *t1 = dalloc(&pl, N * W), *t2 = dalloc(&pl, (N > (size_t)Q ? N : (size_t)Q) * W);
    float *qs = dalloc(&pl, (N > (size_t)Q ? N : (size_t)Q) * W);
    float *ks = dalloc(&pl, Tm * W), *vs = dalloc(&pl, Tm * W);
    float *as = dalloc(&pl, (N > (size_t)Q ? N : (size_t)Q) * W);
    float *ff = dalloc(&pl, (N > (size_t)Q ? N : (size_t)Q) * F);
    float *B = dalloc(&pl, (size_t)Q * W), *Fd = dalloc(&pl, (size_t)Q * W), *Gp = dalloc(&pl, W);
    float *Te = dalloc(&pl, (size_t)Q * W), *Sd = dalloc(&pl, (size_t)Q * W);
    float *feat = dalloc(&pl, N * 4 * W), *r1 = dalloc(&pl, N * W), *r2 = dalloc(&pl, N);
    float *On = dalloc(&pl, N * W);
    /* host copies */
    float *hQ = malloc((size_t)Q * Hb * sizeof(float)), *hg = malloc(Hb * sizeof(float));
    float *hL = malloc(N * Hb * sizeof(float)), *hR = malloc(N * W * sizeof(float));
    float *hB = malloc((size_t)Q * W * sizeof(float)), *hS = malloc((size_t)Q * W * sizeof(float));
    float *hF = malloc((size_t)Q * W * sizeof(float)), *hO = malloc(N * W * sizeof(float));
    float *hfeat = malloc(N * 4 * W * sizeof(float)), *hr = malloc(N * sizeof(float));
    float *v1 = malloc(Hb * sizeof(float)), *v2 = malloc(Hb * sizeof(float)), *v3 = malloc(Hb * sizeof(float));
    double *sc = malloc(N * sizeof(double));
    float *hcos = malloc(N * sizeof(float)), *hprior = malloc(N * sizeof(float));
    int32_t *types = malloc((size_t)Q * sizeof(int32_t));
    if (pl.oom || !hQ || !hg || !hL || !hR || !hB || !hS || !hF || !hO || !hfeat || !hr || !v1 || !v2 ||
        !v3 || !sc || !hcos || !hprior || !types) {
        clef_err_set(err, CLEF_E_OOM, "out of memory in the head (%zu tokens, %zu options)", T, N);
        goto done;
    }

    /* 1-3: hidden_norm, memory, global (= the last row of Hn) */
    ops->layernorm(ops, Hn, in->hidden, Tn, Hb, &hw->hidden_norm_w, &hw->hidden_norm_b, ln_eps);
    if (past) ops->copy2d(ops, M, W, in->mem_past, W, past, W);
    ops->linear(ops, M + past * W, Hn, Tn, &hw->memory_projection, 0, W, NULL);
    if (in->mem_snap && in->snap_rows) ops->copy2d(ops, in->mem_snap, W, M, W, in->snap_rows, W);
    const float *g = Hn + (Tn - 1) * Hb;
    /* 4-6: question means, option context means, lexical means of raw lm_head rows */
    size_t oi = 0;
    for (int i = 0; i < Q; i++) {
        const clef_head_question *qq = &in->questions[i];
        /* spans of the new rows (an empty span's mean is NaN wherever it lies) */
        size_t q0 = qq->q_end > qq->q_start ? (size_t)qq->q_start - past : 0;
        ops->row_mean(ops, Qv + (size_t)i * Hb, Hn, Hb, q0, q0 + (size_t)(qq->q_end - qq->q_start), Hb);
        for (int j = 0; j < qq->n_options; j++, oi++) {
            size_t s = (size_t)qq->option_spans[2 * j], e = (size_t)qq->option_spans[2 * j + 1];
            size_t sn = e > s ? s - past : 0;
            ops->row_mean(ops, Cv + oi * Hb, Hn, Hb, sn, sn + (e > s ? e - s : 0), Hb);
            if (e > s) ops->embed(ops, tmp, lm_head, in->ids + s, e - s);
            ops->row_mean(ops, Lx + oi * Hb, tmp, Hb, 0, e - s, Hb);
        }
        types[i] = qq->type;
    }
    /* 7: option queries R = (W_oc c + W_ol l) + W_oq q (broadcast per question) */
    ops->linear(ops, R, Cv, N, &hw->option_context_projection, 0, W, NULL);
    ops->linear(ops, t1, Lx, N, &hw->option_lexical_projection, 0, W, NULL);
    ops->add(ops, R, R, t1, N * W);
    ops->linear(ops, t2, Qv, (size_t)Q, &hw->option_question_projection, 0, W, NULL);
    oi = 0;
    for (int i = 0; i < Q; i++) {
        size_t n = (size_t)in->questions[i].n_options;
        for (size_t j = 0; j < n; j++) ops->copy2d(ops, t1 + (oi + j) * W, W, t2 + (size_t)i * W, W, 1, W);
        oi += n;
    }
    ops->add(ops, R, R, t1, N * W);
    /* 8: evidence routing layers */
    for (int l = 0; l < hc->routing_layers; l++) {
        const clef_head_evidence_layer *E = &hw->evidence[l];
        ops->layernorm(ops, t1, R, N, W, &E->query_norm_w, &E->query_norm_b, ln_eps);
        ops->layernorm(ops, Mn, M, T, W, &E->memory_norm_w, &E->memory_norm_b, ln_eps);
        mha(ops, t2, t1, N, Mn, T, &E->attn_in_w, &E->attn_in_b, &E->attn_out_w, &E->attn_out_b, W, heads, qs, ks, vs, as);
        ops->add(ops, R, R, t2, N * W);
        ops->layernorm(ops, t1, R, N, W, &E->ff_norm_w, &E->ff_norm_b, ln_eps);
        ops->linear(ops, ff, t1, N, &E->ff0_w, 0, F, &E->ff0_b);
        ops->gelu(ops, ff, N * F, 0);
        ops->linear(ops, t2, ff, N, &E->ff3_w, 0, W, &E->ff3_b);
        ops->add(ops, R, R, t2, N * W);
    }
    /* 10: base fields; 11: option summary (host) */
    ops->linear(ops, B, Qv, (size_t)Q, &hw->question_projection, 0, W, NULL);
    if (ops->failed) { clef_err_set(err, CLEF_E_OOM, "out of memory inside a head op"); goto done; }
    ops->download(ops, hR, R, N * W);
    ops->download(ops, hB, B, (size_t)Q * W);
    {
        float sw = (float)sqrt((double)W);
        oi = 0;
        for (int i = 0; i < Q; i++) {
            size_t n = (size_t)in->questions[i].n_options;
            double m = -INFINITY, sum = 0;
            for (size_t j = 0; j < n; j++) {
                float s = (float)dotd(hR + (oi + j) * W, hB + (size_t)i * W, W) / sw;
                sc[j] = s;
                if (sc[j] > m) m = sc[j];
            }
            for (size_t j = 0; j < n; j++) { sc[j] = exp(sc[j] - m); sum += sc[j]; }
            for (size_t d = 0; d < W; d++) {
                double acc = 0;
                for (size_t j = 0; j < n; j++) acc += (double)((float)(sc[j] / sum) * hR[(oi + j) * W + d]);
                hS[(size_t)i * W + d] = (float)acc;
            }
            oi += n;
        }
    }
    /* 12: fields = ((b + option_summary_norm(s)) + W_g g) + type_embedding[type] */
    ops->upload(ops, Sd, hS, (size_t)Q * W);
    ops->layernorm(ops, Sd, Sd, (size_t)Q, W, &hw->option_summary_norm_w, &hw->option_summary_norm_b, ln_eps);
    ops->add(ops, Fd, B, Sd, (size_t)Q * W);
    ops->linear(ops, Gp, g, 1, &hw->global_projection, 0, W, NULL);
    for (int i = 0; i < Q; i++) ops->add(ops, Fd + (size_t)i * W, Fd + (size_t)i * W, Gp, W);
    ops->embed(ops, Te, &hw->type_embedding, types, (size_t)Q);
    ops->add(ops, Fd, Fd, Te, (size_t)Q * W);
    /* 13: TransformerDecoderLayers, norm_first, no masks; cross-attention to the raw memory */
    for (int l = 0; l < hc->layers; l++) {
        const clef_head_decoder_layer *D = &hw->layers[l];
        ops->layernorm(ops, t1, Fd, (size_t)Q, W, &D->norm1_w, &D->norm1_b, ln_eps);
        mha(ops, t2, t1, (size_t)Q, t1, (size_t)Q, &D->sa_in_w, &D->sa_in_b, &D->sa_out_w, &D->sa_out_b, W, heads, qs, ks, vs, as);
        ops->add(ops, Fd, Fd, t2, (size_t)Q * W);
        ops->layernorm(ops, t1, Fd, (size_t)Q, W, &D->norm2_w, &D->norm2_b, ln_eps);
        mha(ops, t2, t1, (size_t)Q, M, T, &D->ca_in_w, &D->ca_in_b, &D->ca_out_w, &D->ca_out_b, W, heads, qs, ks, vs, as);
        ops->add(ops, Fd, Fd, t2, (size_t)Q * W);
        ops->layernorm(ops, t1, Fd, (size_t)Q, W, &D->norm3_w, &D->norm3_b, ln_eps);
        ops->linear(ops, ff, t1, (size_t)Q, &D->linear1_w, 0, F, &D->linear1_b);
        ops->gelu(ops, ff, (size_t)Q * F, 0);
        ops->linear(ops, t2, ff, (size_t)Q, &D->linear2_w, 0, W, &D->linear2_b);
        ops->add(ops, Fd, Fd, t2, (size_t)Q * W);
    }
    /* 14: field_norm */
    ops->layernorm(ops, Fd, Fd, (size_t)Q, W, &hw->field_norm_w, &hw->field_norm_b, ln_eps);
    /* 15: per option: o = option_norm(R), cosine, residual scorer, prior */
    ops->layernorm(ops, On, R, N, W, &hw->option_norm_w, &hw->option_norm_b, ln_eps);
    if (ops->failed) { clef_err_set(err, CLEF_E_OOM, "out of memory inside a head op"); goto done; }
    ops->download(ops, hF, Fd, (size_t)Q * W);
    ops->download(ops, hO, On, N * W);
    ops->download(ops, hQ, Qv, (size_t)Q * Hb);
    ops->download(ops, hg, g, Hb);
    ops->download(ops, hL, Lx, N * Hb);
    const float ln100 = (float)log(100.0);
    float pls = clef_tensor_f32_at(&hw->prior_logit_scale, 0);
    float jls = clef_tensor_f32_at(&hw->joint_logit_scale, 0);
    float rg = clef_tensor_f32_at(&hw->residual_gate, 0);
    float prior_scale = expf(pls < ln100 ? pls : ln100);
    float joint_scale = expf(jls < ln100 ? jls : ln100);
    float gate = 1.0f / (1.0f + expf(-rg));
    oi = 0;
    for (int i = 0; i < Q; i++) {
        size_t n = (size_t)in->questions[i].n_options;
        const float *Fi = hF + (size_t)i * W;
        for (size_t d = 0; d < Hb; d++) v1[d] = hQ[(size_t)i * Hb + d] + hg[d];
        normalize_into(v2, v1, Hb, 1e-12f); /* anchor */
        float fn = (float)sqrt(dotd(Fi, Fi, W));
        if (fn < 1e-8f) fn = 1e-8f;
        for (size_t j = 0; j < n; j++) {
            const float *o = hO + (oi + j) * W;
            normalize_into(v3, hL + (oi + j) * Hb, Hb, 1e-12f);
            hprior[oi + j] = prior_scale * (float)dotd(v3, v2, Hb);
            float on = (float)sqrt(dotd(o, o, W));
            if (on < 1e-8f) on = 1e-8f;
            double c = 0;
            for (size_t d = 0; d < W; d++) c += (double)(Fi[d] / fn) * (double)(o[d] / on);
            hcos[oi + j] = (float)c;
            float *fr = hfeat + (oi + j) * 4 * W;
            for (size_t d = 0; d < W; d++) {
                fr[d] = Fi[d];
                fr[W + d] = o[d];
                fr[2 * W + d] = Fi[d] * o[d];
                fr[3 * W + d] = fabsf(Fi[d] - o[d]);
            }
        }
        oi += n;
    }
    ops->upload(ops, feat, hfeat, N * 4 * W);
    ops->linear(ops, r1, feat, N, &hw->scorer0_w, 0, W, &hw->scorer0_b);
    ops->gelu(ops, r1, N * W, 0);
    ops->linear(ops, r2, r1, N, &hw->scorer3_w, 0, 1, &hw->scorer3_b);
    if (ops->failed) { clef_err_set(err, CLEF_E_OOM, "out of memory inside a head op"); goto done; }
    ops->download(ops, hr, r2, N);
    for (size_t j = 0; j < N; j++) {
        float joint = joint_scale * hcos[j] + hr[j];
        logits[j] = hprior[j] + gate * joint;
    }
    rc = 0;
done:
    dfree_all(&pl);
    free(hQ); free(hg); free(hL); free(hR); free(hB); free(hS); free(hF); free(hO); free(hfeat);
    free(hr); free(v1); free(v2); free(v3); free(sc); free(hcos); free(hprior); free(types);
    return rc;
}
