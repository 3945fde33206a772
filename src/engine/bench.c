/* Benchmarking (include/clef.h, `clef bench`): a job of synthetic token ids, and a timed run of
 * jobs through the group function of clef_run_batch (batch.c), so the bench times the very forward
 * that serving and `clef batch` run; there is no second assembly of the forward here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/question_type.h"
#include "engine/engine_internal.h"

/* The synthetic schema (clef.h): the questions' types and option counts for n >= 64 tokens. */
static const int big_types[3] = {CLEF_Q_NOUL, CLEF_Q_CHOICE, CLEF_Q_SCORE};
static const size_t big_options[3] = {2, 4, 5};

static int bench_err(char *errbuf, size_t err_len, const char *type, const char *msg) {
    if (errbuf && err_len) snprintf(errbuf, err_len, "%s: %s", type, msg);
    return -1;
}

/* The record's questions: n >= 64, three questions over the last 46 tokens (an 8-token span, then
 * its two-token options); else one choice question over [0, n-2) with two one-token options. */
static int synthetic_questions(clef_record *r) {
    const size_t n = r->n_ids;
    const int big = n >= 64;
    r->n_questions = big ? 3 : 1;
    r->questions = calloc(r->n_questions, sizeof *r->questions);
    if (!r->questions) return -1;
    if (!big) {
        clef_enc_question *q = &r->questions[0];
        q->type = CLEF_Q_CHOICE;
        q->span = (clef_span){0, n - 2};
        q->n_options = 2;
        q->option_spans = malloc(2 * sizeof *q->option_spans);
        if (!q->option_spans) return -1;
        q->option_spans[0] = (clef_span){n - 2, n - 1};
        q->option_spans[1] = (clef_span){n - 1, n};
        return 0;
    }
    size_t t = n - 46;
    for (size_t i = 0; i < 3; i++) {
        clef_enc_question *q = &r->questions[i];
        q->type = big_types[i];
        q->span = (clef_span){t, t + 8};
        t += 8;
        q->n_options = big_options[i];
        q->option_spans = malloc(q->n_options * sizeof *q->option_spans);
        if (!q->option_spans) return -1;
        for (size_t o = 0; o < q->n_options; o++, t += 2) q->option_spans[o] = (clef_span){t, t + 2};
    }
    return 0;
}

clef_job *clef_bench_job(clef_engine *e, const int32_t *ids, size_t n, char *errbuf, size_t err_len) {
    char msg[160];
    if (n < 3 || n > ((size_t)1 << 24)) {
        snprintf(msg, sizeof msg, "bench: %zu tokens (3 to %zu)", n, (size_t)1 << 24);
        bench_err(errbuf, err_len, CLEF_E_INTERNAL, msg);
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= e->mf->cfg.text.vocab_size) {
            snprintf(msg, sizeof msg, "token id %d outside the vocabulary", (int)ids[i]);
            bench_err(errbuf, err_len, CLEF_E_INTERNAL, msg);
            return NULL;
        }
    clef_job *j = calloc(1, sizeof *j);
    if (!j) goto oom;
    j->e = e;
    j->rec.input_ids = malloc(n * sizeof *j->rec.input_ids);
    if (!j->rec.input_ids) goto oom;
    memcpy(j->rec.input_ids, ids, n * sizeof *ids);
    j->rec.n_ids = n;
    if (synthetic_questions(&j->rec)) goto oom;
    for (size_t q = 0; q < j->rec.n_questions; q++) j->n_logits += j->rec.questions[q].n_options;
    j->logits = calloc(j->n_logits, sizeof *j->logits);
    if (!j->logits) goto oom;
    return j;
oom:
    clef_job_free(j);
    bench_err(errbuf, err_len, CLEF_E_OOM, "out of memory");
    return NULL;
}

int clef_bench_run(clef_engine *e, clef_job *const *jobs, size_t n, double *seconds_text, double *seconds_head,
                   char *errbuf, size_t err_len) {
    clef_group_times times = {0, 0};
    if (n == 0 || n > 4096) {
        char msg[80];
        snprintf(msg, sizeof msg, "bench: %zu jobs (1 to 4096)", n);
        return bench_err(errbuf, err_len, CLEF_E_INTERNAL, msg);
    }
    if (clef_engine_run_group_timed(e, jobs, n, &times)) {
        for (size_t i = 0; i < n; i++)
            if (jobs[i]->err.type) return bench_err(errbuf, err_len, jobs[i]->err.type, jobs[i]->err.msg);
    }
    if (seconds_text) *seconds_text = times.seconds_text;
    if (seconds_head) *seconds_head = times.seconds_head;
    return 0;
}
