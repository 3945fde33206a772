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

/* The validated sizes of one call. */
typedef struct {
    size_t T, Hb, W, F, heads, past, Tn; /* Tn: rows computed here (T - past) */
    size_t N, maxspan, Tm;               /* options; longest option span; rows of the k/v scratch */
    int Q;
} head_dims;

/* Step 0: the arguments against the config and each other. */
static int head_check(const clef_head_config *hc, const clef_head_weights *hw, const clef_tensor *lm_head,
                      const clef_head_in *in, head_dims *d, clef_err *err) {
    const size_t T = in->T, past = in->past;
    memset(d, 0, sizeof *d);
    d->T = T;
    d->Hb = (size_t)hc->hidden_size;
    d->W = (size_t)hc->width;
    d->F = (size_t)hc->feedforward;
    d->heads = (size_t)hc->heads;
    d->Q = in->n_questions;
    d->past = past;
    d->Tn = T - past;
    const int Q = d->Q;
    if (T == 0 || past >= T || !in->hidden || !in->ids || (past && !in->mem_past))
        return clef_err_set(err, CLEF_E_INTERNAL, "head called with no tokens");
    if (in->mem_snap && (past || in->snap_rows > T))
        return clef_err_set(err, CLEF_E_INTERNAL, "head: memory rows saved only from a whole record");
    if (Q <= 0 || !in->questions) return clef_err_set(err, CLEF_E_INTERNAL, "head called with no questions");
    if (d->heads == 0 || d->W % d->heads != 0 || hw->n_evidence != hc->routing_layers || hw->n_layers != hc->layers)
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
    d->N = N;
    d->maxspan = maxspan;
    d->Tm = T > N ? T : N;
    if (d->Tm < (size_t)Q) d->Tm = (size_t)Q;
    return 0;
}

/* The buffers of one call: device (pl, freed together) and host copies. */
typedef struct {
    pool_t pl;
    float *Hn, *M, *Mn, *Qv, *Cv, *Lx, *tmp, *R, *t1, *t2, *qs, *ks, *vs, *as, *ff, *B, *Fd, *Gp, *Te, *Sd;
    float *feat, *r1, *r2, *On;
    const float *g; /* the global row: the last row of Hn */
    float *hQ, *hg, *hL, *hR, *hB, *hS, *hF, *hO, *hfeat, *hr, *v1, *v2, *v3, *hcos, *hprior;
    double *sc;
    int32_t *types;
} head_bufs;

static int head_alloc(clef_ops *ops, const head_dims *d, head_bufs *b, clef_err *err) {
    const size_t T = d->T, Hb = d->Hb, W = d->W, F = d->F, N = d->N, Q = (size_t)d->Q, NQ = N > Q ? N : Q;
    memset(b, 0, sizeof *b);
    pool_t *pl = &b->pl;
    pl->ops = ops;
    b->Hn = dalloc(pl, d->Tn * Hb);  /* hidden_norm(hidden) of the new rows */
    b->M = dalloc(pl, T * W);        /* memory */
    b->Mn = dalloc(pl, T * W);       /* memory_norm(M) */
    b->Qv = dalloc(pl, Q * Hb);      /* question means */
    b->Cv = dalloc(pl, N * Hb);      /* option context means */
    b->Lx = dalloc(pl, N * Hb);      /* lexical means */
    b->tmp = dalloc(pl, d->maxspan * Hb); /* gathered lm_head rows of one span */
    b->R = dalloc(pl, N * W);
    b->t1 = dalloc(pl, N * W);
    b->t2 = dalloc(pl, NQ * W);
    b->qs = dalloc(pl, NQ * W);
    b->ks = dalloc(pl, d->Tm * W);
    b->vs = dalloc(pl, d->Tm * W);
    b->as = dalloc(pl, NQ * W);
    b->ff = dalloc(pl, NQ * F);
    b->B = dalloc(pl, Q * W);
    b->Fd = dalloc(pl, Q * W);
    b->Gp = dalloc(pl, W);
    b->Te = dalloc(pl, Q * W);
    b->Sd = dalloc(pl, Q * W);
    b->feat = dalloc(pl, N * 4 * W);
    b->r1 = dalloc(pl, N * W);
    b->r2 = dalloc(pl, N);
    b->On = dalloc(pl, N * W);
    /* host copies */
    b->hQ = malloc(Q * Hb * sizeof(float));
    b->hg = malloc(Hb * sizeof(float));
    b->hL = malloc(N * Hb * sizeof(float));
    b->hR = malloc(N * W * sizeof(float));
    b->hB = malloc(Q * W * sizeof(float));
    b->hS = malloc(Q * W * sizeof(float));
    b->hF = malloc(Q * W * sizeof(float));
    b->hO = malloc(N * W * sizeof(float));
    b->hfeat = malloc(N * 4 * W * sizeof(float));
    b->hr = malloc(N * sizeof(float));
    b->v1 = malloc(Hb * sizeof(float));
    b->v2 = malloc(Hb * sizeof(float));
    b->v3 = malloc(Hb * sizeof(float));
    b->sc = malloc(N * sizeof(double));
    b->hcos = malloc(N * sizeof(float));
    b->hprior = malloc(N * sizeof(float));
    b->types = malloc(Q * sizeof(int32_t));
    if (pl->oom || !b->hQ || !b->hg || !b->hL || !b->hR || !b->hB || !b->hS || !b->hF || !b->hO || !b->hfeat ||
        !b->hr || !b->v1 || !b->v2 || !b->v3 || !b->sc || !b->hcos || !b->hprior || !b->types)
        return clef_err_set(err, CLEF_E_OOM, "out of memory in the head (%zu tokens, %zu options)", T, N);
    return 0;
}

static void head_free(head_bufs *b) {
    dfree_all(&b->pl);
    free(b->hQ); free(b->hg); free(b->hL); free(b->hR); free(b->hB); free(b->hS); free(b->hF); free(b->hO);
    free(b->hfeat); free(b->hr); free(b->v1); free(b->v2); free(b->v3); free(b->sc); free(b->hcos);
    free(b->hprior); free(b->types);
}

/* Steps 1-6: hidden_norm, memory (resumed rows copied, saved rows copied out), the global row,
 * question means, option context means, lexical means of raw lm_head rows. */
static void head_memory_and_means(clef_ops *ops, const clef_head_weights *hw, const clef_tensor *lm_head,
                                  const clef_head_in *in, const head_dims *d, head_bufs *b) {
    const size_t Hb = d->Hb, W = d->W, past = d->past, Tn = d->Tn;
    const float ln_eps = 1e-5f;
    /* 1-3: hidden_norm, memory, global (= the last row of Hn) */
    ops->layernorm(ops, b->Hn, in->hidden, Tn, Hb, &hw->hidden_norm_w, &hw->hidden_norm_b, ln_eps);
    if (past) ops->copy2d(ops, b->M, W, in->mem_past, W, past, W);
    ops->linear(ops, b->M + past * W, b->Hn, Tn, &hw->memory_projection, 0, W, NULL);
    if (in->mem_snap && in->snap_rows) ops->copy2d(ops, in->mem_snap, W, b->M, W, in->snap_rows, W);
    b->g = b->Hn + (Tn - 1) * Hb;
    /* 4-6: question means, option context means, lexical means of raw lm_head rows */
    size_t oi = 0;
    for (int i = 0; i < d->Q; i++) {
        const clef_head_question *qq = &in->questions[i];
        /* spans of the new rows (an empty span's mean is NaN wherever it lies) */
        size_t q0 = qq->q_end > qq->q_start ? (size_t)qq->q_start - past : 0;
        ops->row_mean(ops, b->Qv + (size_t)i * Hb, b->Hn, Hb, q0, q0 + (size_t)(qq->q_end - qq->q_start), Hb);
        for (int j = 0; j < qq->n_options; j++, oi++) {
            size_t s = (size_t)qq->option_spans[2 * j], e = (size_t)qq->option_spans[2 * j + 1];
            size_t sn = e > s ? s - past : 0;
            ops->row_mean(ops, b->Cv + oi * Hb, b->Hn, Hb, sn, sn + (e > s ? e - s : 0), Hb);
            if (e > s) ops->embed(ops, b->tmp, lm_head, in->ids + s, e - s);
            ops->row_mean(ops, b->Lx + oi * Hb, b->tmp, Hb, 0, e - s, Hb);
        }
        b->types[i] = qq->type;
    }
}

/* Step 7: option queries R = (W_oc c + W_ol l) + W_oq q (broadcast per question). */
static void head_option_queries(clef_ops *ops, const clef_head_weights *hw, const clef_head_in *in,
                                const head_dims *d, head_bufs *b) {
    const size_t W = d->W, N = d->N;
    ops->linear(ops, b->R, b->Cv, N, &hw->option_context_projection, 0, W, NULL);
    ops->linear(ops, b->t1, b->Lx, N, &hw->option_lexical_projection, 0, W, NULL);
    ops->add(ops, b->R, b->R, b->t1, N * W);
    ops->linear(ops, b->t2, b->Qv, (size_t)d->Q, &hw->option_question_projection, 0, W, NULL);
    size_t oi = 0;
    for (int i = 0; i < d->Q; i++) {
        size_t n = (size_t)in->questions[i].n_options;
        for (size_t j = 0; j < n; j++) ops->copy2d(ops, b->t1 + (oi + j) * W, W, b->t2 + (size_t)i * W, W, 1, W);
        oi += n;
    }
    ops->add(ops, b->R, b->R, b->t1, N * W);
}

/* Step 8: the evidence routing layers (options attend to the normalized memory). */
static void head_evidence_routing(clef_ops *ops, const clef_head_config *hc, const clef_head_weights *hw,
                                  const head_dims *d, head_bufs *b) {
    const size_t T = d->T, W = d->W, F = d->F, N = d->N;
    const float ln_eps = 1e-5f;
    for (int l = 0; l < hc->routing_layers; l++) {
        const clef_head_evidence_layer *E = &hw->evidence[l];
        ops->layernorm(ops, b->t1, b->R, N, W, &E->query_norm_w, &E->query_norm_b, ln_eps);
        ops->layernorm(ops, b->Mn, b->M, T, W, &E->memory_norm_w, &E->memory_norm_b, ln_eps);
        mha(ops, b->t2, b->t1, N, b->Mn, T, &E->attn_in_w, &E->attn_in_b, &E->attn_out_w, &E->attn_out_b, W, d->heads,
            b->qs, b->ks, b->vs, b->as);
        ops->add(ops, b->R, b->R, b->t2, N * W);
        ops->layernorm(ops, b->t1, b->R, N, W, &E->ff_norm_w, &E->ff_norm_b, ln_eps);
        ops->linear(ops, b->ff, b->t1, N, &E->ff0_w, 0, F, &E->ff0_b);
        ops->gelu(ops, b->ff, N * F, 0);
        ops->linear(ops, b->t2, b->ff, N, &E->ff3_w, 0, W, &E->ff3_b);
        ops->add(ops, b->R, b->R, b->t2, N * W);
    }
}

/* Step 11 (host): the option summary per question, softmax(R . b / sqrt(W))-weighted options. */
static void head_option_summary(const clef_head_in *in, const head_dims *d, head_bufs *b) {
    const size_t W = d->W;
    float sw = (float)sqrt((double)W);
    size_t oi = 0;
    for (int i = 0; i < d->Q; i++) {
        size_t n = (size_t)in->questions[i].n_options;
        double m = -INFINITY, sum = 0;
        for (size_t j = 0; j < n; j++) {
            float s = (float)dotd(b->hR + (oi + j) * W, b->hB + (size_t)i * W, W) / sw;
            b->sc[j] = s;
            if (b->sc[j] > m) m = b->sc[j];
        }
        for (size_t j = 0; j < n; j++) { b->sc[j] = exp(b->sc[j] - m); sum += b->sc[j]; }
        for (size_t dd = 0; dd < W; dd++) {
            double acc = 0;
            for (size_t j = 0; j < n; j++) acc += (double)((float)(b->sc[j] / sum) * b->hR[(oi + j) * W + dd]);
            b->hS[(size_t)i * W + dd] = (float)acc;
        }
        oi += n;
    }
}

/* Step 12: fields = ((b + option_summary_norm(s)) + W_g g) + type_embedding[type]. */
static void head_fields(clef_ops *ops, const clef_head_weights *hw, const head_dims *d, head_bufs *b) {
    const size_t W = d->W, Q = (size_t)d->Q;
    const float ln_eps = 1e-5f;
    ops->upload(ops, b->Sd, b->hS, Q * W);
    ops->layernorm(ops, b->Sd, b->Sd, Q, W, &hw->option_summary_norm_w, &hw->option_summary_norm_b, ln_eps);
    ops->add(ops, b->Fd, b->B, b->Sd, Q * W);
    ops->linear(ops, b->Gp, b->g, 1, &hw->global_projection, 0, W, NULL);
    for (size_t i = 0; i < Q; i++) ops->add(ops, b->Fd + i * W, b->Fd + i * W, b->Gp, W);
    ops->embed(ops, b->Te, &hw->type_embedding, b->types, Q);
    ops->add(ops, b->Fd, b->Fd, b->Te, Q * W);
}

/* Step 13: TransformerDecoderLayers, norm_first, no masks; cross-attention to the raw memory. */
static void head_decoder(clef_ops *ops, const clef_head_config *hc, const clef_head_weights *hw, const head_dims *d,
                         head_bufs *b) {
    const size_t T = d->T, W = d->W, F = d->F, Q = (size_t)d->Q, heads = d->heads;
    const float ln_eps = 1e-5f;
    for (int l = 0; l < hc->layers; l++) {
        const clef_head_decoder_layer *D = &hw->layers[l];
        ops->layernorm(ops, b->t1, b->Fd, Q, W, &D->norm1_w, &D->norm1_b, ln_eps);
        mha(ops, b->t2, b->t1, Q, b->t1, Q, &D->sa_in_w, &D->sa_in_b, &D->sa_out_w, &D->sa_out_b, W, heads, b->qs, b->ks,
            b->vs, b->as);
        ops->add(ops, b->Fd, b->Fd, b->t2, Q * W);
        ops->layernorm(ops, b->t1, b->Fd, Q, W, &D->norm2_w, &D->norm2_b, ln_eps);
        mha(ops, b->t2, b->t1, Q, b->M, T, &D->ca_in_w, &D->ca_in_b, &D->ca_out_w, &D->ca_out_b, W, heads, b->qs, b->ks,
            b->vs, b->as);
        ops->add(ops, b->Fd, b->Fd, b->t2, Q * W);
        ops->layernorm(ops, b->t1, b->Fd, Q, W, &D->norm3_w, &D->norm3_b, ln_eps);
        ops->linear(ops, b->ff, b->t1, Q, &D->linear1_w, 0, F, &D->linear1_b);
        ops->gelu(ops, b->ff, Q * F, 0);
        ops->linear(ops, b->t2, b->ff, Q, &D->linear2_w, 0, W, &D->linear2_b);
        ops->add(ops, b->Fd, b->Fd, b->t2, Q * W);
    }
}

/* Step 15 (host): per option the lexical prior, the cosine of field and option, and the scorer's
 * features [f, o, f*o, |f-o|]. */
static void head_option_features(const clef_head_weights *hw, const clef_head_in *in, const head_dims *d,
                                 head_bufs *b) {
    const size_t Hb = d->Hb, W = d->W;
    const float ln100 = (float)log(100.0);
    float pls = clef_tensor_f32_at(&hw->prior_logit_scale, 0);
    float prior_scale = expf(pls < ln100 ? pls : ln100);
    size_t oi = 0;
    for (int i = 0; i < d->Q; i++) {
        size_t n = (size_t)in->questions[i].n_options;
        const float *Fi = b->hF + (size_t)i * W;
        for (size_t k = 0; k < Hb; k++) b->v1[k] = b->hQ[(size_t)i * Hb + k] + b->hg[k];
        normalize_into(b->v2, b->v1, Hb, 1e-12f); /* anchor */
        float fn = (float)sqrt(dotd(Fi, Fi, W));
        if (fn < 1e-8f) fn = 1e-8f;
        for (size_t j = 0; j < n; j++) {
            const float *o = b->hO + (oi + j) * W;
            normalize_into(b->v3, b->hL + (oi + j) * Hb, Hb, 1e-12f);
            b->hprior[oi + j] = prior_scale * (float)dotd(b->v3, b->v2, Hb);
            float on = (float)sqrt(dotd(o, o, W));
            if (on < 1e-8f) on = 1e-8f;
            double c = 0;
            for (size_t k = 0; k < W; k++) c += (double)(Fi[k] / fn) * (double)(o[k] / on);
            b->hcos[oi + j] = (float)c;
            float *fr = b->hfeat + (oi + j) * 4 * W;
            for (size_t k = 0; k < W; k++) {
                fr[k] = Fi[k];
                fr[W + k] = o[k];
                fr[2 * W + k] = Fi[k] * o[k];
                fr[3 * W + k] = fabsf(Fi[k] - o[k]);
            }
        }
        oi += n;
    }
}

int clef_head_forward(clef_ops *ops, const clef_head_config *hc, const clef_head_weights *hw,
                      const clef_tensor *lm_head, const clef_head_in *in, float *logits,
                      clef_err *err) {
    head_dims d = {0};
    if (head_check(hc, hw, lm_head, in, &d, err)) return -1;
    const size_t Hb = d.Hb, W = d.W, N = d.N, Q = (size_t)d.Q;
    const float ln_eps = 1e-5f;
    int rc = -1;
    head_bufs b;
    if (head_alloc(ops, &d, &b, err)) goto done;

    head_memory_and_means(ops, hw, lm_head, in, &d, &b); /* 1-6 */
    head_option_queries(ops, hw, in, &d, &b);            /* 7 */
    head_evidence_routing(ops, hc, hw, &d, &b);          /* 8 */
    /* 10: base fields; 11: option summary (host) */
    ops->linear(ops, b.B, b.Qv, Q, &hw->question_projection, 0, W, NULL);
    if (clef_ops_take(ops, "a head op", err)) goto done;
    ops->download(ops, b.hR, b.R, N * W);
    ops->download(ops, b.hB, b.B, Q * W);
    head_option_summary(in, &d, &b);
    head_fields(ops, hw, &d, &b);        /* 12 */
    head_decoder(ops, hc, hw, &d, &b);   /* 13 */
    /* 14: field_norm */
    ops->layernorm(ops, b.Fd, b.Fd, Q, W, &hw->field_norm_w, &hw->field_norm_b, ln_eps);
    /* 15: per option: o = option_norm(R), cosine, residual scorer, prior */
    ops->layernorm(ops, b.On, b.R, N, W, &hw->option_norm_w, &hw->option_norm_b, ln_eps);
    if (clef_ops_take(ops, "a head op", err)) goto done;
    ops->download(ops, b.hF, b.Fd, Q * W);
    ops->download(ops, b.hO, b.On, N * W);
    ops->download(ops, b.hQ, b.Qv, Q * Hb);
    ops->download(ops, b.hg, b.g, Hb);
    ops->download(ops, b.hL, b.Lx, N * Hb);
    head_option_features(hw, in, &d, &b);
    ops->upload(ops, b.feat, b.hfeat, N * 4 * W);
    ops->linear(ops, b.r1, b.feat, N, &hw->scorer0_w, 0, W, &hw->scorer0_b);
    ops->gelu(ops, b.r1, N * W, 0);
    ops->linear(ops, b.r2, b.r1, N, &hw->scorer3_w, 0, 1, &hw->scorer3_b);
    if (clef_ops_take(ops, "a head op", err)) goto done;
    ops->download(ops, b.hr, b.r2, N);
    {
        const float ln100 = (float)log(100.0);
        float jls = clef_tensor_f32_at(&hw->joint_logit_scale, 0);
        float rg = clef_tensor_f32_at(&hw->residual_gate, 0);
        float joint_scale = expf(jls < ln100 ? jls : ln100);
        float gate = 1.0f / (1.0f + expf(-rg));
        for (size_t j = 0; j < N; j++) {
            float joint = joint_scale * b.hcos[j] + b.hr[j];
            logits[j] = b.hprior[j] + gate * joint;
        }
    }
    rc = 0;
done:
    head_free(&b);
    return rc;
}
