/* systemone_answer() and the response body in C: see response.h and contract.md §7-§8. */
#include "decision/response.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "base/pyfmt.h"

void clef_softmax_f32(const float *x, size_t n, float *p) {
    if (n == 0) return;
    float m = x[0];
    for (size_t i = 1; i < n; i++)
        if (x[i] > m || isnan(x[i])) m = x[i];
    float lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (size_t i = 0; i < n; i++) {
        float e = expf(x[i] - m);
        p[i] = e;
        lanes[i % 8] += e;
    }
    for (int w = 4; w >= 1; w /= 2)
        for (int i = 0; i < w; i++) lanes[i] = lanes[i] + lanes[i + w];
    float r = 1.0f / lanes[0];
    for (size_t i = 0; i < n; i++) p[i] = p[i] * r;
}

/* A Python float as json.dumps prints it. */
static void put_float(clef_buf *o, double x) {
    if (isnan(x)) {
        clef_buf_puts(o, "NaN");
        return;
    }
    if (isinf(x)) {
        clef_buf_puts(o, x > 0 ? "Infinity" : "-Infinity");
        return;
    }
    char tmp[40];
    int n = clef_py_repr_double(x, tmp);
    clef_buf_put(o, tmp, (size_t)n);
}

static void put_round(clef_buf *o, float p) { put_float(o, clef_py_round((double)p, 4)); }

static void put_key(clef_buf *o, const char *k, size_t n) {
    clef_json_render_string(o, k, n);
    clef_buf_putc(o, ':');
}

/* Python's max(): the first element, replaced only by a strictly greater one. */
static size_t py_argmax(const float *p, const size_t *order, size_t n) {
    size_t best = order[0];
    for (size_t k = 1; k < n; k++)
        if (p[order[k]] > p[best]) best = order[k];
    return best;
}

/* Each type's fields after {"type":NAME,NAME: (question_type.h: one answer_<name> per row). */
static void answer_noul(clef_buf *o, const clef_question *q, const float *p) {
    (void)q;
    put_round(o, p[0]); /* option 0 is "true" */
}

static void answer_choice(clef_buf *o, const clef_question *q, const float *p) {
    size_t n = q->n_options, c = py_argmax(p, q->listing, n);
    clef_json_render_string(o, q->options[c].id, q->options[c].id_len);
    clef_buf_puts(o, ",\"confidence\":");
    put_round(o, p[c]);
    clef_buf_puts(o, ",\"probabilities\":{");
    for (size_t k = 0; k < n; k++) {
        if (k) clef_buf_putc(o, ',');
        const clef_option *opt = &q->options[q->listing[k]];
        put_key(o, opt->id, opt->id_len);
        put_round(o, p[q->listing[k]]);
    }
    clef_buf_putc(o, '}');
}

static void answer_score(clef_buf *o, const clef_question *q, const float *p) {
    /* sum(index * p[level]) from the integer 0: int * float, CPython's compensated sum */
    size_t n = q->n_options;
    double *terms = calloc(n ? n : 1, sizeof *terms); /* calloc: GCC 12 cannot see that n == 0 reads none */
    if (!terms) {
        o->oom = 1;
        return;
    }
    for (size_t k = 0; k < n; k++) terms[k] = (double)k * (double)p[k];
    double s = clef_py_sum(terms, n);
    free(terms);
    put_float(o, clef_py_round(s, 4));
    clef_buf_puts(o, ",\"confidence\":");
    put_round(o, p[py_argmax(p, q->listing, n)]);
    clef_buf_puts(o, ",\"legend\":{");
    for (size_t k = 0; k < n; k++) {
        if (k) clef_buf_putc(o, ',');
        put_key(o, q->options[k].id, q->options[k].id_len);
        if (clef_json_render(o, q->legend[k], 0)) o->oom = 1;
    }
    clef_buf_puts(o, "},\"probabilities\":{");
    for (size_t k = 0; k < n; k++) {
        if (k) clef_buf_putc(o, ',');
        put_key(o, q->options[k].id, q->options[k].id_len);
        put_round(o, p[k]);
    }
    clef_buf_putc(o, '}');
}

#define ANSWER_(ID, name, Title, criteria, shape, label, schema) [CLEF_Q_##ID] = answer_##name,
static void (*const answer_fields[CLEF_QTYPE_COUNT])(clef_buf *, const clef_question *, const float *) = {
    CLEF_QUESTION_TYPES(ANSWER_, CLEF_QT_NOSEP)};

static void answer(clef_buf *o, const clef_question *q, const float *p, int raw) {
    size_t n = q->n_options;
    const char *name = clef_qtype_name(q->type); /* a plain ASCII word: no escaping */
    clef_buf_printf(o, "{\"type\":\"%s\",\"%s\":", name, name);
    answer_fields[q->type](o, q, p);
    if (raw) {
        clef_buf_puts(o, ",\"raw\":{");
        for (size_t j = 0; j < n; j++) {
            if (j) clef_buf_putc(o, ',');
            put_key(o, q->options[j].id, q->options[j].id_len);
            put_float(o, (double)p[j]);
        }
        clef_buf_putc(o, '}');
    }
    clef_buf_putc(o, '}');
}

static int render(clef_buf *o, const clef_request *req, const float *v, size_t nv, int is_logits,
                  size_t input_tokens, clef_err *err) {
    if (clef_request_check_criteria(req, err)) return -1;
    size_t total = 0, widest = 1;
    for (size_t i = 0; i < req->n_questions; i++) {
        total += req->questions[i].n_options;
        if (req->questions[i].n_options > widest) widest = req->questions[i].n_options;
    }
    if (total != nv)
        return clef_err_set(err, CLEF_E_INTERNAL, "expected %zu logits (all options of all questions), got %zu",
                            total, nv);
    float *p = malloc(widest * sizeof *p);
    if (!p) return clef_err_set(err, CLEF_E_OOM, "out of memory");
    clef_buf_puts(o, "{\"model\":");
    clef_json_render_string(o, req->model, req->model_len);
    clef_buf_puts(o, ",\"answers\":{");
    size_t off = 0;
    for (size_t i = 0; i < req->n_questions; i++) {
        const clef_question *q = &req->questions[i];
        if (is_logits) clef_softmax_f32(v + off, q->n_options, p);
        else memcpy(p, v + off, q->n_options * sizeof *p);
        off += q->n_options;
        if (i) clef_buf_putc(o, ',');
        put_key(o, q->id, q->id_len);
        answer(o, q, p, req->raw);
    }
    free(p);
    clef_buf_printf(o, "},\"usage\":{\"input_tokens\":%zu,\"output_tokens\":0}}", input_tokens);
    if (o->oom) return clef_err_set(err, CLEF_E_OOM, "out of memory while writing the response");
    return 0;
}

int clef_response_render(clef_buf *out, const clef_request *req, const float *logits, size_t n_logits,
                         size_t input_tokens, clef_err *err) {
    return render(out, req, logits, n_logits, 1, input_tokens, err);
}

int clef_response_render_probs(clef_buf *out, const clef_request *req, const float *probs, size_t n_probs,
                               size_t input_tokens, clef_err *err) {
    return render(out, req, probs, n_probs, 0, input_tokens, err);
}

int clef_error_render(clef_buf *o, const clef_err *e) {
    const char *type = e && e->type ? e->type : CLEF_E_INTERNAL;
    const char *msg = e && e->type ? e->msg : "unknown error";
    return clef_json_render_error(o, type, msg); /* msg may quote a request's ids: lone surrogates too */
}

int clef_error_http_status(const char *t) {
    if (!t) return 500;
    if (!strcmp(t, CLEF_E_BAD_JSON) || !strcmp(t, CLEF_E_INVALID_UTF8)) return 400;
    if (!strcmp(t, CLEF_E_LIMIT) || !strcmp(t, CLEF_E_SCHEMA_TOO_LONG)) return 413;
    if (!strcmp(t, CLEF_E_OOM) || !strcmp(t, CLEF_E_INTERNAL) || !strcmp(t, CLEF_E_IO)) return 500;
    if (!strcmp(t, CLEF_E_BAD_MODEL) || !strcmp(t, CLEF_E_DEADLINE)) return 503;
    return 422; /* MissingModelOrState, NoQuestions, BadQuestion(Type), (Empty|Bad)Criteria, LoneSurrogate,
                   UnsupportedMedia, MediaTokenMismatch */
}
