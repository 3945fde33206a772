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

/* The buffers of one call: the rows of every record, stacked (record i's rows start at its head_rec
 * offsets: tn0 for new rows, t0 memory, n0 options, q0 questions). Hb = the text model's hidden size,
 * W = the head's width, F = its feed-forward width, T/Tn/N/Q = memory rows, new rows, options and
 * questions over all records, n = records. Device buffers (pl, freed together), then host copies. */
typedef struct {
    pool_t pl;
    float *hidden_normed;        /* [Tn, Hb] hidden_norm(hidden) of the new rows */
    float *memory;               /* [T, W] memory_projection rows: resumed ones, then the new ones */
    float *memory_normed;        /* [T, W] memory_norm(memory) of the current routing layer */
    float *question_means;       /* [Q, Hb] mean of hidden_normed over each question's span */
    float *option_context_means; /* [N, Hb] the same over each option's span */
    float *option_lexical_means; /* [N, Hb] mean of the raw lm_head rows of each option's tokens */
    float *span_lm_rows;         /* [longest span, Hb] the lm_head rows of one option's tokens */
    float *option_states;        /* [N, W] option queries, then refined by each routing layer */
    /* A sublayer's normed input and the branch it adds to the residual (the option queries use them for
     * the lexical and the question projections), for the options' or the fields' rows; N >= Q (every
     * question has an option), so max(N, Q) is N. */
    float *sublayer_in;          /* [N, W] */
    float *sublayer_out;         /* [max(N, Q), W] */
    float *attn_q;               /* [max(N, Q), W] an attention's queries */
    float *attn_k, *attn_v;      /* [max(T, N, Q), W]; attn_k first holds the new rows' memory projection */
    float *attn_heads;           /* [max(N, Q), W] the heads' output, before out_proj */
    float *ff_hidden;            /* [max(N, Q), F] a feed-forward's hidden rows */
    float *base_fields;          /* [Q, W] question_projection(question_means) */
    float *fields;               /* [Q, W] base + option summary + global + type, then the decoder
                                  * layers and field_norm */
    float *global_rows;          /* [n, Hb] each record's last hidden_normed row */
    float *global_projected;     /* [n, W] global_projection(global_rows) */
    float *type_rows;            /* [Q, W] type_embedding[type] of each question */
    float *option_summary;       /* [Q, W] option_summary_norm of the host's option summary */
    float *scorer_features;      /* [N, 4W] per option [f, o, f*o, |f-o|] */
    float *scorer_hidden;        /* [N, W] gelu(scorer0(features)) */
    float *residual_logits;      /* [N] scorer3(scorer_hidden): each option's residual term */
    float *options_normed;       /* [N, W] option_norm(option_states) */
    /* host copies of the device rows of the same names */
    float *host_question_means, *host_global_rows, *host_option_lexical_means, *host_option_states;
    float *host_base_fields, *host_option_summary, *host_fields, *host_options_normed;
    float *host_scorer_features, *host_residual_logits;
    float *anchor_sum, *anchor;      /* [Hb] question mean + global row; the same normalized */
    float *lexical_unit;             /* [Hb] an option's lexical mean, normalized */
    float *host_cosine, *host_prior; /* [N] cos(field, option), the lexical prior */
    double *summary_weights;         /* [options of a question] scores, then their softmax numerators */
    int32_t *question_types;         /* [Q] */
    clef_attn_seg *attn_segs;        /* [n] one segment per record */
} head_bufs;

static int head_alloc(clef_ops *ops, const head_dims *d, head_bufs *b, clef_err *err) {
    const size_t T = d->T, Hb = d->Hb, W = d->W, F = d->F, N = d->N, Q = d->Q, NQ = N > Q ? N : Q, n = d->n;
    memset(b, 0, sizeof *b);
    pool_t *pl = &b->pl;
    pl->ops = ops;
    b->hidden_normed = dalloc(pl, d->Tn * Hb);
    b->memory = dalloc(pl, T * W);
    b->memory_normed = dalloc(pl, T * W);
    b->question_means = dalloc(pl, Q * Hb);
    b->option_context_means = dalloc(pl, N * Hb);
    b->option_lexical_means = dalloc(pl, N * Hb);
    b->span_lm_rows = dalloc(pl, d->maxspan * Hb);
    b->option_states = dalloc(pl, N * W);
    b->sublayer_in = dalloc(pl, N * W);
    b->sublayer_out = dalloc(pl, NQ * W);
    b->attn_q = dalloc(pl, NQ * W);
    b->attn_k = dalloc(pl, d->Tm * W);
    b->attn_v = dalloc(pl, d->Tm * W);
    b->attn_heads = dalloc(pl, NQ * W);
    b->ff_hidden = dalloc(pl, NQ * F);
    b->base_fields = dalloc(pl, Q * W);
    b->fields = dalloc(pl, Q * W);
    b->global_rows = dalloc(pl, n * Hb);
    b->global_projected = dalloc(pl, n * W);
    b->type_rows = dalloc(pl, Q * W);
    b->option_summary = dalloc(pl, Q * W);
    b->scorer_features = dalloc(pl, N * 4 * W);
    b->scorer_hidden = dalloc(pl, N * W);
    b->residual_logits = dalloc(pl, N);
    b->options_normed = dalloc(pl, N * W);
    /* host copies */
    b->host_question_means = malloc(Q * Hb * sizeof(float));
    b->host_global_rows = malloc(n * Hb * sizeof(float));
    b->host_option_lexical_means = malloc(N * Hb * sizeof(float));
    b->host_option_states = malloc(N * W * sizeof(float));
    b->host_base_fields = malloc(Q * W * sizeof(float));
    b->host_option_summary = malloc(Q * W * sizeof(float));
    b->host_fields = malloc(Q * W * sizeof(float));
    b->host_options_normed = malloc(N * W * sizeof(float));
    b->host_scorer_features = malloc(N * 4 * W * sizeof(float));
    b->host_residual_logits = malloc(N * sizeof(float));
    b->anchor_sum = malloc(Hb * sizeof(float));
    b->anchor = malloc(Hb * sizeof(float));
    b->lexical_unit = malloc(Hb * sizeof(float));
    b->summary_weights = malloc(N * sizeof(double));
    b->host_cosine = malloc(N * sizeof(float));
    b->host_prior = malloc(N * sizeof(float));
    b->question_types = malloc(Q * sizeof(int32_t));
    b->attn_segs = malloc(n * sizeof *b->attn_segs);
    if (pl->oom || !b->host_question_means || !b->host_global_rows || !b->host_option_lexical_means ||
        !b->host_option_states || !b->host_base_fields || !b->host_option_summary || !b->host_fields ||
        !b->host_options_normed || !b->host_scorer_features || !b->host_residual_logits || !b->anchor_sum ||
        !b->anchor || !b->lexical_unit || !b->summary_weights || !b->host_cosine || !b->host_prior ||
        !b->question_types || !b->attn_segs)
        return clef_err_set(err, CLEF_E_OOM, "out of memory in the head (%zu records, %zu tokens, %zu options)", n, T, N);
    return 0;
}

static void head_free(head_bufs *b) {
    dfree_all(&b->pl);
    free(b->host_question_means);
    free(b->host_global_rows);
    free(b->host_option_lexical_means);
    free(b->host_option_states);
    free(b->host_base_fields);
    free(b->host_option_summary);
    free(b->host_fields);
    free(b->host_options_normed);
    free(b->host_scorer_features);
    free(b->host_residual_logits);
    free(b->anchor_sum);
    free(b->anchor);
    free(b->lexical_unit);
    free(b->summary_weights);
    free(b->host_cosine);
    free(b->host_prior);
    free(b->question_types);
    free(b->attn_segs);
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
        ops->layernorm(ops, b->hidden_normed + d->r[i].tn0 * Hb, ins[i].hidden, d->r[i].Tn, Hb, &hw->hidden_norm_w,
                       &hw->hidden_norm_b, ln_eps);
    ops->linear(ops, b->attn_k, b->hidden_normed, d->Tn, &hw->memory_projection, 0, W, NULL);
    for (size_t i = 0; i < d->n; i++) {
        const head_rec *r = &d->r[i];
        const clef_head_in *in = &ins[i];
        float *memory = b->memory + r->t0 * W;
        if (r->past) ops->copy2d(ops, memory, W, in->mem_past, W, r->past, W);
        ops->copy2d(ops, memory + r->past * W, W, b->attn_k + r->tn0 * W, W, r->Tn, W);
        if (in->mem_snap && in->snap_rows) ops->copy2d(ops, in->mem_snap, W, memory, W, in->snap_rows, W);
        ops->copy2d(ops, b->global_rows + i * Hb, Hb, b->hidden_normed + (r->tn0 + r->Tn - 1) * Hb, Hb, 1, Hb);
    }
    /* 4-6: question means, option context means, lexical means of raw lm_head rows */
    for (size_t i = 0; i < d->n; i++) {
        const head_rec *r = &d->r[i];
        const clef_head_in *in = &ins[i];
        const float *hidden_normed = b->hidden_normed + r->tn0 * Hb;
        const size_t past = r->past;
        size_t oi = r->n0;
        for (size_t q = 0; q < r->Q; q++) {
            const clef_head_question *qq = &in->questions[q];
            /* spans of the new rows (an empty span's mean is NaN wherever it lies) */
            size_t q0 = qq->q_end > qq->q_start ? (size_t)qq->q_start - past : 0;
            ops->row_mean(ops, b->question_means + (r->q0 + q) * Hb, hidden_normed, Hb, q0,
                          q0 + (size_t)(qq->q_end - qq->q_start), Hb);
            for (int j = 0; j < qq->n_options; j++, oi++) {
                size_t s = (size_t)qq->option_spans[2 * j], e = (size_t)qq->option_spans[2 * j + 1];
                size_t sn = e > s ? s - past : 0;
                ops->row_mean(ops, b->option_context_means + oi * Hb, hidden_normed, Hb, sn, sn + (e > s ? e - s : 0),
                              Hb);
                if (e > s) ops->embed(ops, b->span_lm_rows, lm_head, in->ids + s, e - s);
                ops->row_mean(ops, b->option_lexical_means + oi * Hb, b->span_lm_rows, Hb, 0, e - s, Hb);
            }
            b->question_types[r->q0 + q] = qq->type;
        }
    }
}

/* Step 7: option queries R = (W_oc c + W_ol l) + W_oq q (broadcast per question). */
static void head_option_queries(clef_ops *ops, const clef_head_weights *hw, const clef_head_in *ins,
                                const head_dims *d, head_bufs *b) {
    const size_t W = d->W, N = d->N;
    ops->linear(ops, b->option_states, b->option_context_means, N, &hw->option_context_projection, 0, W, NULL);
    ops->linear(ops, b->sublayer_in, b->option_lexical_means, N, &hw->option_lexical_projection, 0, W, NULL);
    ops->add(ops, b->option_states, b->option_states, b->sublayer_in, N * W);
    ops->linear(ops, b->sublayer_out, b->question_means, d->Q, &hw->option_question_projection, 0, W, NULL);
    for (size_t i = 0; i < d->n; i++) {
        size_t oi = d->r[i].n0;
        for (size_t q = 0; q < d->r[i].Q; q++) {
            size_t n = (size_t)ins[i].questions[q].n_options;
            for (size_t j = 0; j < n; j++)
                ops->copy2d(ops, b->sublayer_in + (oi + j) * W, W, b->sublayer_out + (d->r[i].q0 + q) * W, W, 1, W);
            oi += n;
        }
    }
    ops->add(ops, b->option_states, b->option_states, b->sublayer_in, N * W);
}

/* Step 8: the evidence routing layers (options attend to their record's normalized memory). */
static void head_evidence_routing(clef_ops *ops, const clef_head_config *hc, const clef_head_weights *hw,
                                  const head_dims *d, head_bufs *b) {
    const size_t T = d->T, W = d->W, F = d->F, N = d->N;
    const float ln_eps = 1e-5f;
    for (int l = 0; l < hc->routing_layers; l++) {
        const clef_head_evidence_layer *E = &hw->evidence[l];
        ops->layernorm(ops, b->sublayer_in, b->option_states, N, W, &E->query_norm_w, &E->query_norm_b, ln_eps);
        ops->layernorm(ops, b->memory_normed, b->memory, T, W, &E->memory_norm_w, &E->memory_norm_b, ln_eps);
        mha(ops, d, b->attn_segs, b->sublayer_out, b->sublayer_in, ROWS_OPTIONS, b->memory_normed, ROWS_MEMORY,
            &E->attn_in_w, &E->attn_in_b, &E->attn_out_w, &E->attn_out_b, b->attn_q, b->attn_k, b->attn_v,
            b->attn_heads);
        ops->add(ops, b->option_states, b->option_states, b->sublayer_out, N * W);
        ops->layernorm(ops, b->sublayer_in, b->option_states, N, W, &E->ff_norm_w, &E->ff_norm_b, ln_eps);
        ops->linear(ops, b->ff_hidden, b->sublayer_in, N, &E->ff0_w, 0, F, &E->ff0_b);
        ops->gelu(ops, b->ff_hidden, N * F, 0);
        ops->linear(ops, b->sublayer_out, b->ff_hidden, N, &E->ff3_w, 0, W, &E->ff3_b);
        ops->add(ops, b->option_states, b->option_states, b->sublayer_out, N * W);
    }
}

/* Step 11 (host): the option summary per question: its options' states weighted by
 * softmax(option_state . base_field / sqrt(W)). */
static void head_option_summary(const clef_head_in *ins, const head_dims *d, head_bufs *b) {
    const size_t W = d->W;
    float sw = (float)sqrt((double)W);
    for (size_t r = 0; r < d->n; r++) {
        size_t oi = d->r[r].n0;
        for (size_t q = 0; q < d->r[r].Q; q++) {
            size_t n = (size_t)ins[r].questions[q].n_options, i = d->r[r].q0 + q;
            double m = -INFINITY, sum = 0;
            for (size_t j = 0; j < n; j++) {
                float s = (float)dotd(b->host_option_states + (oi + j) * W, b->host_base_fields + i * W, W) / sw;
                b->summary_weights[j] = s;
                if (b->summary_weights[j] > m) m = b->summary_weights[j];
            }
            for (size_t j = 0; j < n; j++) {
                b->summary_weights[j] = exp(b->summary_weights[j] - m);
                sum += b->summary_weights[j];
            }
            for (size_t dd = 0; dd < W; dd++) {
                double acc = 0;
                for (size_t j = 0; j < n; j++)
                    acc += (double)((float)(b->summary_weights[j] / sum) * b->host_option_states[(oi + j) * W + dd]);
                b->host_option_summary[i * W + dd] = (float)acc;
            }
            oi += n;
        }
    }
}

/* Step 12: fields = ((b + option_summary_norm(s)) + W_g g) + type_embedding[type]. */
static void head_fields(clef_ops *ops, const clef_head_weights *hw, const head_dims *d, head_bufs *b) {
    const size_t W = d->W, Q = d->Q;
    const float ln_eps = 1e-5f;
    ops->upload(ops, b->option_summary, b->host_option_summary, Q * W);
    ops->layernorm(ops, b->option_summary, b->option_summary, Q, W, &hw->option_summary_norm_w,
                   &hw->option_summary_norm_b, ln_eps);
    ops->add(ops, b->fields, b->base_fields, b->option_summary, Q * W);
    ops->linear(ops, b->global_projected, b->global_rows, d->n, &hw->global_projection, 0, W, NULL);
    for (size_t r = 0; r < d->n; r++)
        for (size_t q = 0; q < d->r[r].Q; q++) {
            float *f = b->fields + (d->r[r].q0 + q) * W;
            ops->add(ops, f, f, b->global_projected + r * W, W);
        }
    ops->embed(ops, b->type_rows, &hw->type_embedding, b->question_types, Q);
    ops->add(ops, b->fields, b->fields, b->type_rows, Q * W);
}

/* Step 13: TransformerDecoderLayers, norm_first, no masks; self-attention among a record's fields,
 * cross-attention to its raw memory. */
static void head_decoder(clef_ops *ops, const clef_head_config *hc, const clef_head_weights *hw, const head_dims *d,
                         head_bufs *b) {
    const size_t W = d->W, F = d->F, Q = d->Q;
    const float ln_eps = 1e-5f;
    for (int l = 0; l < hc->layers; l++) {
        const clef_head_decoder_layer *D = &hw->layers[l];
        ops->layernorm(ops, b->sublayer_in, b->fields, Q, W, &D->norm1_w, &D->norm1_b, ln_eps);
        mha(ops, d, b->attn_segs, b->sublayer_out, b->sublayer_in, ROWS_FIELDS, b->sublayer_in, ROWS_FIELDS,
            &D->sa_in_w, &D->sa_in_b, &D->sa_out_w, &D->sa_out_b, b->attn_q, b->attn_k, b->attn_v, b->attn_heads);
        ops->add(ops, b->fields, b->fields, b->sublayer_out, Q * W);
        ops->layernorm(ops, b->sublayer_in, b->fields, Q, W, &D->norm2_w, &D->norm2_b, ln_eps);
        mha(ops, d, b->attn_segs, b->sublayer_out, b->sublayer_in, ROWS_FIELDS, b->memory, ROWS_MEMORY, &D->ca_in_w,
            &D->ca_in_b, &D->ca_out_w, &D->ca_out_b, b->attn_q, b->attn_k, b->attn_v, b->attn_heads);
        ops->add(ops, b->fields, b->fields, b->sublayer_out, Q * W);
        ops->layernorm(ops, b->sublayer_in, b->fields, Q, W, &D->norm3_w, &D->norm3_b, ln_eps);
        ops->linear(ops, b->ff_hidden, b->sublayer_in, Q, &D->linear1_w, 0, F, &D->linear1_b);
        ops->gelu(ops, b->ff_hidden, Q * F, 0);
        ops->linear(ops, b->sublayer_out, b->ff_hidden, Q, &D->linear2_w, 0, W, &D->linear2_b);
        ops->add(ops, b->fields, b->fields, b->sublayer_out, Q * W);
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
        const float *global = b->host_global_rows + r * Hb;
        for (size_t q = 0; q < d->r[r].Q; q++) {
            size_t n = (size_t)ins[r].questions[q].n_options, i = d->r[r].q0 + q;
            const float *field = b->host_fields + i * W;
            for (size_t k = 0; k < Hb; k++) b->anchor_sum[k] = b->host_question_means[i * Hb + k] + global[k];
            normalize_into(b->anchor, b->anchor_sum, Hb, 1e-12f);
            float fn = (float)sqrt(dotd(field, field, W));
            if (fn < 1e-8f) fn = 1e-8f;
            for (size_t j = 0; j < n; j++) {
                const float *o = b->host_options_normed + (oi + j) * W;
                normalize_into(b->lexical_unit, b->host_option_lexical_means + (oi + j) * Hb, Hb, 1e-12f);
                b->host_prior[oi + j] = prior_scale * (float)dotd(b->lexical_unit, b->anchor, Hb);
                float on = (float)sqrt(dotd(o, o, W));
                if (on < 1e-8f) on = 1e-8f;
                double c = 0;
                for (size_t k = 0; k < W; k++) c += (double)(field[k] / fn) * (double)(o[k] / on);
                b->host_cosine[oi + j] = (float)c;
                float *fr = b->host_scorer_features + (oi + j) * 4 * W;
                for (size_t k = 0; k < W; k++) {
                    fr[k] = field[k];
                    fr[W + k] = o[k];
                    fr[2 * W + k] = field[k] * o[k];
                    fr[3 * W + k] = fabsf(field[k] - o[k]);
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
            float joint = joint_scale * b->host_cosine[o] + b->host_residual_logits[o];
            logits[r][j] = b->host_prior[o] + gate * joint;
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
    ops->linear(ops, b.base_fields, b.question_means, Q, &hw->question_projection, 0, W, NULL);
    if (clef_ops_take(ops, "a head op", err)) goto done;
    ops->download(ops, b.host_option_states, b.option_states, N * W);
    ops->download(ops, b.host_base_fields, b.base_fields, Q * W);
    head_option_summary(ins, &d, &b);
    head_fields(ops, hw, &d, &b);        /* 12 */
    head_decoder(ops, hc, hw, &d, &b);   /* 13 */
    /* 14: field_norm */
    ops->layernorm(ops, b.fields, b.fields, Q, W, &hw->field_norm_w, &hw->field_norm_b, ln_eps);
    /* 15: per option: o = option_norm(option_states), cosine, residual scorer, prior */
    ops->layernorm(ops, b.options_normed, b.option_states, N, W, &hw->option_norm_w, &hw->option_norm_b, ln_eps);
    if (clef_ops_take(ops, "a head op", err)) goto done;
    ops->download(ops, b.host_fields, b.fields, Q * W);
    ops->download(ops, b.host_options_normed, b.options_normed, N * W);
    ops->download(ops, b.host_question_means, b.question_means, Q * Hb);
    ops->download(ops, b.host_global_rows, b.global_rows, d.n * Hb);
    ops->download(ops, b.host_option_lexical_means, b.option_lexical_means, N * Hb);
    head_option_features(hw, ins, &d, &b);
    ops->upload(ops, b.scorer_features, b.host_scorer_features, N * 4 * W);
    ops->linear(ops, b.scorer_hidden, b.scorer_features, N, &hw->scorer0_w, 0, W, &hw->scorer0_b);
    ops->gelu(ops, b.scorer_hidden, N * W, 0);
    ops->linear(ops, b.residual_logits, b.scorer_hidden, N, &hw->scorer3_w, 0, 1, &hw->scorer3_b);
    if (clef_ops_take(ops, "a head op", err)) goto done;
    ops->download(ops, b.host_residual_logits, b.residual_logits, N);
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
