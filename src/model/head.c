/* JointSchemaHead forward (contract.md §6.3–§6.4), fp32, for a batch of records at once. The
 * head's weights are shared by every record, so each Linear runs once over the stacked rows of all
 * records (options, questions, memory rows): a record's few option and question rows no longer
 * stream the head's 121.8M weights on their own (about 60 ms a record on real4 before). Only the
 * attentions mix rows, and they run block diagonal (one segment per record), so a record's bits do
 * not depend on its company: the GEMMs' bits do not depend on a row's position (compute/ops.h).
 * The few per-question reductions over a handful of option vectors (routing softmax, normalize,
 * cosine, the final combination) run on the host on copies. */
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

/* One record's sizes and where its rows sit in the stacked buffers. */
typedef struct {
    size_t T, past, Tn; /* tokens; resumed rows; rows computed here (T - past) */
    size_t N, Q;        /* options, questions */
    size_t tn0, t0;     /* its first row among the new rows (Hn) and among the memory rows (M) */
    size_t n0, q0;      /* its first option row, its first question row */
} head_rec;

/* The validated sizes of one call. */
typedef struct {
    size_t Hb, W, F, heads;
    size_t n;                 /* records */
    size_t Tn, T, N, Q;       /* sums over the records */
    size_t maxspan;           /* longest option span */
    size_t Tm;                /* rows of the k/v scratch: max(T, N, Q) */
    head_rec *r;
} head_dims;

/* The row sets an attention reads: each record's options, questions (fields) or memory rows. */
typedef enum { ROWS_OPTIONS, ROWS_FIELDS, ROWS_MEMORY } row_set;
static size_t rows_total(const head_dims *d, row_set s) { return s == ROWS_OPTIONS ? d->N : s == ROWS_FIELDS ? d->Q : d->T; }
static void rows_of(const head_rec *r, row_set s, size_t *off, size_t *n) {
    *off = s == ROWS_OPTIONS ? r->n0 : s == ROWS_FIELDS ? r->q0 : r->t0;
    *n = s == ROWS_OPTIONS ? r->N : s == ROWS_FIELDS ? r->Q : r->T;
}

/* torch.nn.MultiheadAttention(query = xq, key = value = xkv) with in_proj split q/k/v by rows, no
 * masks, for every record at once: the projections over all rows, the attention per record (one
 * segment each). out [rows(qs), W]. Scratch: q, a [rows(qs), W], k, v [rows(ks), W]. */
static void mha(clef_ops *ops, const head_dims *d, clef_attn_seg *segs, float *out, const float *xq, row_set qs,
                const float *xkv, row_set ks, const clef_tensor *in_w, const clef_tensor *in_b,
                const clef_tensor *out_w, const clef_tensor *out_b, float *q, float *k, float *v, float *a) {
    const size_t W = d->W, heads = d->heads, hd = W / heads, Tq = rows_total(d, qs), Tk = rows_total(d, ks);
    ops->linear(ops, q, xq, Tq, in_w, 0, W, in_b);
    ops->linear(ops, k, xkv, Tk, in_w, W, W, in_b);
    ops->linear(ops, v, xkv, Tk, in_w, 2 * W, W, in_b);
    for (size_t i = 0; i < d->n; i++) {
        rows_of(&d->r[i], qs, &segs[i].q0, &segs[i].nq);
        rows_of(&d->r[i], ks, &segs[i].k0, &segs[i].nk);
    }
    ops->attention(ops, a, W, q, W, k, W, v, W, segs, d->n, heads, heads, hd, (float)(1.0 / sqrt((double)hd)), 0);
    ops->linear(ops, out, a, Tq, out_w, 0, W, out_b);
}

/* Step 0 for one record: its arguments against the config. */
static int head_check_one(const clef_tensor *lm_head, const clef_tensor *type_embedding, const clef_head_in *in,
                          head_rec *r, size_t *maxspan, clef_err *err) {
    const size_t T = in->T, past = in->past;
    const int Q = in->n_questions;
    r->T = T;
    r->past = past;
    r->Tn = T - past;
    if (T == 0 || past >= T || !in->hidden || !in->ids || (past && !in->mem_past))
        return clef_err_set(err, CLEF_E_INTERNAL, "head called with no tokens");
    if (in->mem_snap && (past || in->snap_rows > T))
        return clef_err_set(err, CLEF_E_INTERNAL, "head: memory rows saved only from a whole record");
    if (Q <= 0 || !in->questions) return clef_err_set(err, CLEF_E_INTERNAL, "head called with no questions");
    const int64_t V = lm_head->shape[0];
    size_t N = 0;
    for (int i = 0; i < Q; i++) {
        const clef_head_question *qq = &in->questions[i];
        /* a type indexes a row of type_embedding (weights.c binds one row per question type) */
        if ((int)qq->type < 0 || (int64_t)qq->type >= type_embedding->shape[0])
            return clef_err_set(err, CLEF_E_INTERNAL, "question %d has type %d", i, (int)qq->type);
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
            if ((size_t)(e - s) > *maxspan) *maxspan = (size_t)(e - s);
        }
        N += (size_t)qq->n_options;
    }
    r->N = N;
    r->Q = (size_t)Q;
    return 0;
}

/* Step 0: every record's arguments, and where its rows go. */
static int head_check(const clef_head_config *hc, const clef_head_weights *hw, const clef_tensor *lm_head,
                      const clef_head_in *ins, size_t n, head_dims *d, clef_err *err) {
    memset(d, 0, sizeof *d);
    d->Hb = (size_t)hc->hidden_size;
    d->W = (size_t)hc->width;
    d->F = (size_t)hc->feedforward;
    d->heads = (size_t)hc->heads;
    d->n = n;
    if (n == 0) return clef_err_set(err, CLEF_E_INTERNAL, "head called with no records");
    if (d->heads == 0 || d->W % d->heads != 0 || hw->n_evidence != hc->routing_layers || hw->n_layers != hc->layers)
        return clef_err_set(err, CLEF_E_BAD_MODEL, "head config and weights disagree");
    d->r = calloc(n, sizeof *d->r);
    if (!d->r) return clef_err_set(err, CLEF_E_OOM, "out of memory in the head (%zu records)", n);
    for (size_t i = 0; i < n; i++) {
        head_rec *r = &d->r[i];
        if (head_check_one(lm_head, &hw->type_embedding, &ins[i], r, &d->maxspan, err)) return -1;
        r->tn0 = d->Tn;
        r->t0 = d->T;
        r->n0 = d->N;
        r->q0 = d->Q;
        d->Tn += r->Tn;
        d->T += r->T;
        d->N += r->N;
        d->Q += r->Q;
    }
    d->Tm = d->T > d->N ? d->T : d->N;
    if (d->Tm < d->Q) d->Tm = d->Q;
    return 0;
}

/* The buffers of one call (rows of every record, stacked): device (pl, freed together) and host
 * copies. */
typedef struct {
    pool_t pl;
    float *Hn, *M, *Mn, *Qv, *Cv, *Lx, *tmp, *R, *t1, *t2, *qs, *ks, *vs, *as, *ff, *B, *Fd, *G, *Gp, *Te, *Sd;
    float *feat, *r1, *r2, *On;
    float *hQ, *hg, *hL, *hR, *hB, *hS, *hF, *hO, *hfeat, *hr, *v1, *v2, *v3, *hcos, *hprior;
    double *sc;
    int32_t *types;
    clef_attn_seg *segs;
} head_bufs;

static int head_alloc(clef_ops *ops, const head_dims *d, head_bufs *b, clef_err *err) {
    const size_t T = d->T, Hb = d->Hb, W = d->W, F = d->F, N = d->N, Q = d->Q, NQ = N > Q ? N : Q, n = d->n;
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
    b->G = dalloc(pl, n * Hb);       /* each record's global row */
    b->Gp = dalloc(pl, n * W);
    b->Te = dalloc(pl, Q * W);
    b->Sd = dalloc(pl, Q * W);
    b->feat = dalloc(pl, N * 4 * W);
    b->r1 = dalloc(pl, N * W);
    b->r2 = dalloc(pl, N);
    b->On = dalloc(pl, N * W);
    /* host copies */
    b->hQ = malloc(Q * Hb * sizeof(float));
    b->hg = malloc(n * Hb * sizeof(float));
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
    b->segs = malloc(n * sizeof *b->segs);
    if (pl->oom || !b->hQ || !b->hg || !b->hL || !b->hR || !b->hB || !b->hS || !b->hF || !b->hO || !b->hfeat ||
        !b->hr || !b->v1 || !b->v2 || !b->v3 || !b->sc || !b->hcos || !b->hprior || !b->types || !b->segs)
        return clef_err_set(err, CLEF_E_OOM, "out of memory in the head (%zu records, %zu tokens, %zu options)", n, T, N);
    return 0;
}

static void head_free(head_bufs *b) {
    dfree_all(&b->pl);
    free(b->hQ); free(b->hg); free(b->hL); free(b->hR); free(b->hB); free(b->hS); free(b->hF); free(b->hO);
    free(b->hfeat); free(b->hr); free(b->v1); free(b->v2); free(b->v3); free(b->sc); free(b->hcos);
    free(b->hprior); free(b->types); free(b->segs);
}

/* Steps 1-6: hidden_norm, memory (resumed rows copied, saved rows copied out), the global rows,
 * question means, option context means, lexical means of raw lm_head rows. */
static void head_memory_and_means(clef_ops *ops, const clef_head_weights *hw, const clef_tensor *lm_head,
                                  const clef_head_in *ins, const head_dims *d, head_bufs *b) {
    const size_t Hb = d->Hb, W = d->W;
    const float ln_eps = 1e-5f;
    /* 1-3: hidden_norm, memory (the new rows of every record projected at once into the k
     * scratch, then placed after each record's resumed rows), global (the last row of Hn) */
    for (size_t i = 0; i < d->n; i++)
        ops->layernorm(ops, b->Hn + d->r[i].tn0 * Hb, ins[i].hidden, d->r[i].Tn, Hb, &hw->hidden_norm_w,
                       &hw->hidden_norm_b, ln_eps);
    ops->linear(ops, b->ks, b->Hn, d->Tn, &hw->memory_projection, 0, W, NULL);
    for (size_t i = 0; i < d->n; i++) {
        const head_rec *r = &d->r[i];
        const clef_head_in *in = &ins[i];
        float *M = b->M + r->t0 * W;
        if (r->past) ops->copy2d(ops, M, W, in->mem_past, W, r->past, W);
        ops->copy2d(ops, M + r->past * W, W, b->ks + r->tn0 * W, W, r->Tn, W);
        if (in->mem_snap && in->snap_rows) ops->copy2d(ops, in->mem_snap, W, M, W, in->snap_rows, W);
        ops->copy2d(ops, b->G + i * Hb, Hb, b->Hn + (r->tn0 + r->Tn - 1) * Hb, Hb, 1, Hb);
    }
    /* 4-6: question means, option context means, lexical means of raw lm_head rows */
    for (size_t i = 0; i < d->n; i++) {
        const head_rec *r = &d->r[i];
        const clef_head_in *in = &ins[i];
        const float *Hn = b->Hn + r->tn0 * Hb;
        const size_t past = r->past;
        size_t oi = r->n0;
        for (size_t q = 0; q < r->Q; q++) {
            const clef_head_question *qq = &in->questions[q];
            /* spans of the new rows (an empty span's mean is NaN wherever it lies) */
            size_t q0 = qq->q_end > qq->q_start ? (size_t)qq->q_start - past : 0;
            ops->row_mean(ops, b->Qv + (r->q0 + q) * Hb, Hn, Hb, q0, q0 + (size_t)(qq->q_end - qq->q_start), Hb);
            for (int j = 0; j < qq->n_options; j++, oi++) {
                size_t s = (size_t)qq->option_spans[2 * j], e = (size_t)qq->option_spans[2 * j + 1];
                size_t sn = e > s ? s - past : 0;
                ops->row_mean(ops, b->Cv + oi * Hb, Hn, Hb, sn, sn + (e > s ? e - s : 0), Hb);
                if (e > s) ops->embed(ops, b->tmp, lm_head, in->ids + s, e - s);
                ops->row_mean(ops, b->Lx + oi * Hb, b->tmp, Hb, 0, e - s, Hb);
            }
            b->types[r->q0 + q] = qq->type;
        }
    }
}

/* Step 7: option queries R = (W_oc c + W_ol l) + W_oq q (broadcast per question). */
static void head_option_queries(clef_ops *ops, const clef_head_weights *hw, const clef_head_in *ins,
                                const head_dims *d, head_bufs *b) {
    const size_t W = d->W, N = d->N;
    ops->linear(ops, b->R, b->Cv, N, &hw->option_context_projection, 0, W, NULL);
    ops->linear(ops, b->t1, b->Lx, N, &hw->option_lexical_projection, 0, W, NULL);
    ops->add(ops, b->R, b->R, b->t1, N * W);
    ops->linear(ops, b->t2, b->Qv, d->Q, &hw->option_question_projection, 0, W, NULL);
    for (size_t i = 0; i < d->n; i++) {
        size_t oi = d->r[i].n0;
        for (size_t q = 0; q < d->r[i].Q; q++) {
            size_t n = (size_t)ins[i].questions[q].n_options;
            for (size_t j = 0; j < n; j++)
                ops->copy2d(ops, b->t1 + (oi + j) * W, W, b->t2 + (d->r[i].q0 + q) * W, W, 1, W);
            oi += n;
        }
    }
    ops->add(ops, b->R, b->R, b->t1, N * W);
}

/* Step 8: the evidence routing layers (options attend to their record's normalized memory). */
static void head_evidence_routing(clef_ops *ops, const clef_head_config *hc, const clef_head_weights *hw,
                                  const head_dims *d, head_bufs *b) {
    const size_t T = d->T, W = d->W, F = d->F, N = d->N;
    const float ln_eps = 1e-5f;
    for (int l = 0; l < hc->routing_layers; l++) {
        const clef_head_evidence_layer *E = &hw->evidence[l];
        ops->layernorm(ops, b->t1, b->R, N, W, &E->query_norm_w, &E->query_norm_b, ln_eps);
        ops->layernorm(ops, b->Mn, b->M, T, W, &E->memory_norm_w, &E->memory_norm_b, ln_eps);
        mha(ops, d, b->segs, b->t2, b->t1, ROWS_OPTIONS, b->Mn, ROWS_MEMORY, &E->attn_in_w, &E->attn_in_b,
            &E->attn_out_w, &E->attn_out_b, b->qs, b->ks, b->vs, b->as);
        ops->add(ops, b->R, b->R, b->t2, N * W);
        ops->layernorm(ops, b->t1, b->R, N, W, &E->ff_norm_w, &E->ff_norm_b, ln_eps);
        ops->linear(ops, b->ff, b->t1, N, &E->ff0_w, 0, F, &E->ff0_b);
        ops->gelu(ops, b->ff, N * F, 0);
        ops->linear(ops, b->t2, b->ff, N, &E->ff3_w, 0, W, &E->ff3_b);
        ops->add(ops, b->R, b->R, b->t2, N * W);
    }
}

/* Step 11 (host): the option summary per question, softmax(R . b / sqrt(W))-weighted options. */
static void head_option_summary(const clef_head_in *ins, const head_dims *d, head_bufs *b) {
    const size_t W = d->W;
    float sw = (float)sqrt((double)W);
    for (size_t r = 0; r < d->n; r++) {
        size_t oi = d->r[r].n0;
        for (size_t q = 0; q < d->r[r].Q; q++) {
            size_t n = (size_t)ins[r].questions[q].n_options, i = d->r[r].q0 + q;
            double m = -INFINITY, sum = 0;
            for (size_t j = 0; j < n; j++) {
                float s = (float)dotd(b->hR + (oi + j) * W, b->hB + i * W, W) / sw;
                b->sc[j] = s;
                if (b->sc[j] > m) m = b->sc[j];
            }
            for (size_t j = 0; j < n; j++) { b->sc[j] = exp(b->sc[j] - m); sum += b->sc[j]; }
            for (size_t dd = 0; dd < W; dd++) {
                double acc = 0;
                for (size_t j = 0; j < n; j++) acc += (double)((float)(b->sc[j] / sum) * b->hR[(oi + j) * W + dd]);
                b->hS[i * W + dd] = (float)acc;
            }
            oi += n;
        }
    }
}

/* Step 12: fields = ((b + option_summary_norm(s)) + W_g g) + type_embedding[type]. */
static void head_fields(clef_ops *ops, const clef_head_weights *hw, const head_dims *d, head_bufs *b) {
    const size_t W = d->W, Q = d->Q;
    const float ln_eps = 1e-5f;
    ops->upload(ops, b->Sd, b->hS, Q * W);
    ops->layernorm(ops, b->Sd, b->Sd, Q, W, &hw->option_summary_norm_w, &hw->option_summary_norm_b, ln_eps);
    ops->add(ops, b->Fd, b->B, b->Sd, Q * W);
    ops->linear(ops, b->Gp, b->G, d->n, &hw->global_projection, 0, W, NULL);
    for (size_t r = 0; r < d->n; r++)
        for (size_t q = 0; q < d->r[r].Q; q++) {
            float *f = b->Fd + (d->r[r].q0 + q) * W;
            ops->add(ops, f, f, b->Gp + r * W, W);
        }
    ops->embed(ops, b->Te, &hw->type_embedding, b->types, Q);
    ops->add(ops, b->Fd, b->Fd, b->Te, Q * W);
}

/* Step 13: TransformerDecoderLayers, norm_first, no masks; self-attention among a record's fields,
 * cross-attention to its raw memory. */
static void head_decoder(clef_ops *ops, const clef_head_config *hc, const clef_head_weights *hw, const head_dims *d,
                         head_bufs *b) {
    const size_t W = d->W, F = d->F, Q = d->Q;
    const float ln_eps = 1e-5f;
    for (int l = 0; l < hc->layers; l++) {
        const clef_head_decoder_layer *D = &hw->layers[l];
        ops->layernorm(ops, b->t1, b->Fd, Q, W, &D->norm1_w, &D->norm1_b, ln_eps);
        mha(ops, d, b->segs, b->t2, b->t1, ROWS_FIELDS, b->t1, ROWS_FIELDS, &D->sa_in_w, &D->sa_in_b, &D->sa_out_w,
            &D->sa_out_b, b->qs, b->ks, b->vs, b->as);
        ops->add(ops, b->Fd, b->Fd, b->t2, Q * W);
        ops->layernorm(ops, b->t1, b->Fd, Q, W, &D->norm2_w, &D->norm2_b, ln_eps);
        mha(ops, d, b->segs, b->t2, b->t1, ROWS_FIELDS, b->M, ROWS_MEMORY, &D->ca_in_w, &D->ca_in_b, &D->ca_out_w,
            &D->ca_out_b, b->qs, b->ks, b->vs, b->as);
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
static void head_option_features(const clef_head_weights *hw, const clef_head_in *ins, const head_dims *d,
                                 head_bufs *b) {
    const size_t Hb = d->Hb, W = d->W;
    const float ln100 = (float)log(100.0);
    float pls = clef_tensor_f32_at(&hw->prior_logit_scale, 0);
    float prior_scale = expf(pls < ln100 ? pls : ln100);
    for (size_t r = 0; r < d->n; r++) {
        size_t oi = d->r[r].n0;
        const float *g = b->hg + r * Hb;
        for (size_t q = 0; q < d->r[r].Q; q++) {
            size_t n = (size_t)ins[r].questions[q].n_options, i = d->r[r].q0 + q;
            const float *Fi = b->hF + i * W;
            for (size_t k = 0; k < Hb; k++) b->v1[k] = b->hQ[i * Hb + k] + g[k];
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
}

/* Step 15 (host, end): logit = prior + sigmoid(residual_gate) * (joint_scale * cos + residual). */
static void head_logits(const clef_head_weights *hw, const head_dims *d, const head_bufs *b, float *const *logits) {
    const float ln100 = (float)log(100.0);
    float jls = clef_tensor_f32_at(&hw->joint_logit_scale, 0);
    float rg = clef_tensor_f32_at(&hw->residual_gate, 0);
    float joint_scale = expf(jls < ln100 ? jls : ln100);
    float gate = 1.0f / (1.0f + expf(-rg));
    for (size_t r = 0; r < d->n; r++)
        for (size_t j = 0; j < d->r[r].N; j++) {
            size_t o = d->r[r].n0 + j;
            float joint = joint_scale * b->hcos[o] + b->hr[o];
            logits[r][j] = b->hprior[o] + gate * joint;
        }
}

int clef_head_forward_batch(clef_ops *ops, const clef_head_config *hc, const clef_head_weights *hw,
                            const clef_tensor *lm_head, const clef_head_in *ins, size_t n, float *const *logits,
                            clef_err *err) {
    head_dims d;
    int rc = -1;
    head_bufs b;
    memset(&b, 0, sizeof b);
    if (head_check(hc, hw, lm_head, ins, n, &d, err)) goto done;
    const size_t Hb = d.Hb, W = d.W, N = d.N, Q = d.Q;
    const float ln_eps = 1e-5f;
    if (head_alloc(ops, &d, &b, err)) goto done;

    head_memory_and_means(ops, hw, lm_head, ins, &d, &b); /* 1-6 */
    head_option_queries(ops, hw, ins, &d, &b);            /* 7 */
    head_evidence_routing(ops, hc, hw, &d, &b);           /* 8 */
    /* 10: base fields; 11: option summary (host) */
    ops->linear(ops, b.B, b.Qv, Q, &hw->question_projection, 0, W, NULL);
    if (clef_ops_take(ops, "a head op", err)) goto done;
    ops->download(ops, b.hR, b.R, N * W);
    ops->download(ops, b.hB, b.B, Q * W);
    head_option_summary(ins, &d, &b);
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
    ops->download(ops, b.hg, b.G, d.n * Hb);
    ops->download(ops, b.hL, b.Lx, N * Hb);
    head_option_features(hw, ins, &d, &b);
    ops->upload(ops, b.feat, b.hfeat, N * 4 * W);
    ops->linear(ops, b.r1, b.feat, N, &hw->scorer0_w, 0, W, &hw->scorer0_b);
    ops->gelu(ops, b.r1, N * W, 0);
    ops->linear(ops, b.r2, b.r1, N, &hw->scorer3_w, 0, 1, &hw->scorer3_b);
    if (clef_ops_take(ops, "a head op", err)) goto done;
    ops->download(ops, b.hr, b.r2, N);
    head_logits(hw, &d, &b, logits);
    rc = 0;
done:
    head_free(&b);
    free(d.r);
    return rc;
}

int clef_head_forward(clef_ops *ops, const clef_head_config *hc, const clef_head_weights *hw,
                      const clef_tensor *lm_head, const clef_head_in *in, float *logits,
                      clef_err *err) {
    return clef_head_forward_batch(ops, hc, hw, lm_head, in, 1, &logits, err);
}
