/* The serving scheduler: a FIFO queue with a token-budget batch policy and one worker thread
 * (see scheduler.h). */
#include "serve/scheduler.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>

/* How many queued items the worker looks at when it forms a batch (the oldest ones). */
#define SCHED_SCAN 512

struct clef_sched {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t worker;
    clef_sched_item *head, *tail;
    size_t depth;
    int stopping;
    clef_sched_config cfg;
    clef_sched_run_fn run;
    clef_sched_expire_fn expire;
    void *ctx;
};

size_t clef_sched_pick(const size_t *tokens, size_t n, size_t budget, size_t max_batch, size_t *out) {
    if (n == 0 || max_batch == 0) return 0;
    size_t k = 0, used = tokens[0];
    out[k++] = 0;
    for (size_t i = 1; i < n && k < max_batch; i++) {
        if (used >= budget) break;
        if (tokens[i] <= budget - used) {
            out[k++] = i;
            used += tokens[i];
        }
    }
    return k;
}

/* Whether the worker should wait for more items before taking a batch (under the lock); *until
 * is then the oldest item's last moment to wait. It waits while the queue holds fewer items than
 * the previous batch had (those clients are likely coming back) and the batch is not full. */
static int should_gather(const clef_sched *s, double last_run_s, size_t last_n, double *until) {
    if (s->cfg.gather_s <= 0 || s->stopping || !s->head) return 0;
    double w = CLEF_SCHED_GATHER_FRACTION * last_run_s;
    *until = s->head->enqueued + (w < s->cfg.gather_s ? w : s->cfg.gather_s);
    if (clef_now() >= *until) return 0;
    size_t n = 0, used = 0;
    for (const clef_sched_item *it = s->head; it && n < SCHED_SCAN; it = it->next) {
        n++;
        used += it->tokens;
        if (n >= last_n || n >= s->cfg.max_batch || used >= s->cfg.batch_tokens) return 0;
    }
    return 1;
}

/* Unlinks expired items into *expired (under the lock). */
static void take_expired(clef_sched *s, double now, clef_sched_item **expired) {
    clef_sched_item **pp = &s->head, *last = NULL;
    while (*pp) {
        clef_sched_item *it = *pp;
        if (it->deadline > 0 && now > it->deadline) {
            *pp = it->next;
            s->depth--;
            it->next = *expired;
            *expired = it;
        } else {
            last = it;
            pp = &it->next;
        }
    }
    s->tail = last;
}

static void *worker_main(void *arg) {
    clef_sched *s = arg;
    size_t cap = s->cfg.max_batch;
    size_t *tok = malloc(SCHED_SCAN * sizeof *tok);
    size_t *idx = malloc(SCHED_SCAN * sizeof *idx);
    clef_sched_item **scan = malloc(SCHED_SCAN * sizeof *scan);
    clef_sched_item **batch = malloc(cap * sizeof *batch);
    int ok = tok && idx && scan && batch;
    double last_run_s = 0; /* the previous batch's run time: the gathering window scales with it */
    size_t last_n = 0;     /* and its size: how many items the gathering waits for at most */
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->head && !s->stopping) pthread_cond_wait(&s->cv, &s->mu);
        if (!s->head && s->stopping) break;
        double until;
        if (should_gather(s, last_run_s, last_n, &until)) { /* woken by each submit, then looks again */
            struct timespec ts = {(time_t)until, (long)((until - (double)(time_t)until) * 1e9)};
            pthread_cond_timedwait(&s->cv, &s->mu, &ts);
            continue;
        }
        clef_sched_item *expired = NULL;
        take_expired(s, clef_now(), &expired);
        size_t n = 0, k = 0;
        if (s->head) {
            if (ok) {
                for (clef_sched_item *it = s->head; it && n < SCHED_SCAN; it = it->next) {
                    scan[n] = it;
                    tok[n] = it->tokens;
                    n++;
                }
                k = clef_sched_pick(tok, n, s->cfg.batch_tokens, cap, idx);
                for (size_t j = 0; j < k; j++) batch[j] = scan[idx[j]];
            } else { /* no scratch memory: run one at a time */
                k = 1;
            }
            /* unlink the chosen items (they are among the first n, in order) */
            clef_sched_item *one = s->head;
            if (!ok) {
                s->head = one->next;
                s->depth--;
            } else {
                size_t j = 0;
                clef_sched_item **pp = &s->head;
                while (*pp && j < k) {
                    if (*pp == batch[j]) {
                        *pp = (*pp)->next;
                        s->depth--;
                        j++;
                    } else {
                        pp = &(*pp)->next;
                    }
                }
            }
            clef_sched_item *last = NULL;
            for (clef_sched_item *it = s->head; it; it = it->next) last = it;
            s->tail = last;
            pthread_mutex_unlock(&s->mu);
            while (expired) {
                clef_sched_item *nx = expired->next;
                expired->next = NULL;
                s->expire(s->ctx, expired);
                expired = nx;
            }
            double t_run = clef_now();
            if (ok) {
                for (size_t j = 0; j < k; j++) batch[j]->next = NULL;
                s->run(s->ctx, batch, k);
            } else {
                one->next = NULL;
                s->run(s->ctx, &one, 1);
            }
            last_run_s = clef_now() - t_run;
            last_n = ok ? k : 1;
            pthread_mutex_lock(&s->mu);
        } else {
            pthread_mutex_unlock(&s->mu);
            while (expired) {
                clef_sched_item *nx = expired->next;
                expired->next = NULL;
                s->expire(s->ctx, expired);
                expired = nx;
            }
            pthread_mutex_lock(&s->mu);
        }
    }
    pthread_mutex_unlock(&s->mu);
    free(tok);
    free(idx);
    free(scan);
    free(batch);
    return NULL;
}

clef_sched *clef_sched_create(const clef_sched_config *cfg, clef_sched_run_fn run,
                              clef_sched_expire_fn expire, void *ctx) {
    clef_sched *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->cfg = *cfg;
    if (!s->cfg.batch_tokens) s->cfg.batch_tokens = CLEF_SCHED_BATCH_TOKENS_DEFAULT;
    if (!s->cfg.max_batch) s->cfg.max_batch = CLEF_SCHED_MAX_BATCH_DEFAULT;
    if (s->cfg.max_batch > SCHED_SCAN) s->cfg.max_batch = SCHED_SCAN;
    if (!s->cfg.queue_len) s->cfg.queue_len = CLEF_SCHED_QUEUE_LEN_DEFAULT;
    s->run = run;
    s->expire = expire;
    s->ctx = ctx;
    pthread_mutex_init(&s->mu, NULL);
    pthread_condattr_t ca; /* timed waits on clef_now()'s clock */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&s->worker, NULL, worker_main, s) != 0) {
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
        free(s);
        return NULL;
    }
    return s;
}

int clef_sched_submit(clef_sched *s, clef_sched_item *it) {
    pthread_mutex_lock(&s->mu);
    if (s->stopping) {
        pthread_mutex_unlock(&s->mu);
        return -2;
    }
    if (s->depth >= s->cfg.queue_len) {
        pthread_mutex_unlock(&s->mu);
        return -1;
    }
    it->next = NULL;
    it->enqueued = clef_now();
    if (s->tail) s->tail->next = it;
    else s->head = it;
    s->tail = it;
    s->depth++;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

size_t clef_sched_depth(clef_sched *s) {
    pthread_mutex_lock(&s->mu);
    size_t d = s->depth;
    pthread_mutex_unlock(&s->mu);
    return d;
}

void clef_sched_stop(clef_sched *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->worker, NULL);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}
