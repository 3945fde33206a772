/* A bounded work queue (see workq.h): a ring of item pointers, one mutex, one condition. */
#include "serve/workq.h"

#include <pthread.h>
#include <stdlib.h>

struct clef_workq {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t *th;
    int nth;
    void **ring;
    size_t cap, head, n, running;
    int stopping;
    clef_workq_fn fn;
    void *ctx;
};

static void *wq_main(void *arg) {
    clef_workq *q = arg;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (!q->n && !q->stopping) pthread_cond_wait(&q->cv, &q->mu);
        if (!q->n) break;
        void *it = q->ring[q->head];
        q->head = (q->head + 1) % q->cap;
        q->n--;
        q->running++;
        pthread_mutex_unlock(&q->mu);
        q->fn(q->ctx, it);
        pthread_mutex_lock(&q->mu);
        q->running--;
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

clef_workq *clef_workq_create(int threads, size_t cap, clef_workq_fn fn, void *ctx) {
    if (threads < 1) threads = 1;
    if (cap < 1) cap = 1;
    clef_workq *q = calloc(1, sizeof *q);
    if (!q) return NULL;
    q->ring = calloc(cap, sizeof *q->ring);
    q->th = calloc((size_t)threads, sizeof *q->th);
    if (!q->ring || !q->th) {
        free(q->ring);
        free(q->th);
        free(q);
        return NULL;
    }
    q->cap = cap;
    q->fn = fn;
    q->ctx = ctx;
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    for (int i = 0; i < threads; i++) {
        if (pthread_create(&q->th[i], NULL, wq_main, q) != 0) break;
        q->nth++;
    }
    if (!q->nth) {
        pthread_mutex_destroy(&q->mu);
        pthread_cond_destroy(&q->cv);
        free(q->ring);
        free(q->th);
        free(q);
        return NULL;
    }
    return q;
}

int clef_workq_push(clef_workq *q, void *item) {
    pthread_mutex_lock(&q->mu);
    int rc = 0;
    if (q->stopping) rc = -2;
    else if (q->n >= q->cap) rc = -1;
    else {
        q->ring[(q->head + q->n) % q->cap] = item;
        q->n++;
        pthread_cond_signal(&q->cv);
    }
    pthread_mutex_unlock(&q->mu);
    return rc;
}

size_t clef_workq_busy(clef_workq *q) {
    pthread_mutex_lock(&q->mu);
    size_t b = q->n + q->running;
    pthread_mutex_unlock(&q->mu);
    return b;
}

void clef_workq_stop(clef_workq *q) {
    if (!q) return;
    pthread_mutex_lock(&q->mu);
    q->stopping = 1;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    for (int i = 0; i < q->nth; i++) pthread_join(q->th[i], NULL);
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
    free(q->ring);
    free(q->th);
    free(q);
}
