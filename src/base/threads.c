#include "base/threads.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

struct clef_pool {
    int n;                  /* workers including the caller */
    pthread_t *tids;        /* n - 1 */
    pthread_mutex_t call;   /* serializes clef_pool_for */
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    unsigned long gen;      /* bumped per job */
    int pending;            /* helper threads still running the current job */
    int quit;
    /* the current job */
    size_t jn, jgrain;
    clef_range_fn fn;
    void *ctx;
};

typedef struct { clef_pool *p; int w; } worker_arg;

void clef_pool_piece(size_t n, size_t grain, int nthreads, int w, size_t *begin, size_t *end) {
    if (grain == 0) grain = 1;
    if (nthreads < 1) nthreads = 1;
    size_t units = (n + grain - 1) / grain;
    size_t per = units / (size_t)nthreads, rem = units % (size_t)nthreads;
    size_t ww = (size_t)w;
    size_t u0 = ww * per + (ww < rem ? ww : rem);
    size_t u1 = u0 + per + (ww < rem ? 1 : 0);
    size_t b = u0 * grain, e = u1 * grain;
    if (b > n) b = n;
    if (e > n) e = n;
    *begin = b;
    *end = e;
}

static void run_piece(clef_pool *p, int w) {
    size_t b, e;
    clef_pool_piece(p->jn, p->jgrain, p->n, w, &b, &e);
    if (b < e) p->fn(p->ctx, b, e, w);
}

static void *worker_main(void *arg) {
    worker_arg *wa = arg;
    clef_pool *p = wa->p;
    int w = wa->w;
    free(wa);
    unsigned long seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->quit && p->gen == seen) pthread_cond_wait(&p->go, &p->mu);
        if (p->quit) break;
        seen = p->gen;
        pthread_mutex_unlock(&p->mu);
        run_piece(p, w);
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

clef_pool *clef_pool_create(int nthreads, clef_err *err) {
    if (nthreads <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        nthreads = c > 0 ? (int)c : 1;
    }
    if (nthreads > CLEF_POOL_MAX_THREADS) nthreads = CLEF_POOL_MAX_THREADS;
    clef_pool *p = calloc(1, sizeof *p);
    if (!p) { clef_err_set(err, CLEF_E_OOM, "out of memory creating the thread pool"); return NULL; }
    p->n = 1;
    pthread_mutex_init(&p->call, NULL);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->go, NULL);
    pthread_cond_init(&p->done, NULL);
    if (nthreads > 1) {
        p->tids = calloc((size_t)nthreads - 1, sizeof *p->tids);
        if (!p->tids) { clef_pool_destroy(p); clef_err_set(err, CLEF_E_OOM, "out of memory creating the thread pool"); return NULL; }
        for (int w = 1; w < nthreads; w++) {
            worker_arg *wa = malloc(sizeof *wa);
            if (!wa) { clef_pool_destroy(p); clef_err_set(err, CLEF_E_OOM, "out of memory creating the thread pool"); return NULL; }
            wa->p = p;
            wa->w = w;
            if (pthread_create(&p->tids[w - 1], NULL, worker_main, wa) != 0) {
                free(wa);
                clef_pool_destroy(p);
                clef_err_set(err, CLEF_E_INTERNAL, "could not start thread %d of %d", w, nthreads);
                return NULL;
            }
            p->n = w + 1;
        }
    }
    return p;
}

void clef_pool_destroy(clef_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->quit = 1;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    for (int w = 1; w < p->n; w++) pthread_join(p->tids[w - 1], NULL);
    free(p->tids);
    pthread_cond_destroy(&p->go);
    pthread_cond_destroy(&p->done);
    pthread_mutex_destroy(&p->mu);
    pthread_mutex_destroy(&p->call);
    free(p);
}

int clef_pool_size(const clef_pool *p) { return p ? p->n : 1; }

void clef_pool_for(clef_pool *p, size_t n, size_t grain, clef_range_fn fn, void *ctx) {
    if (n == 0) return;
    if (!p || p->n == 1) {
        fn(ctx, 0, n, 0);
        return;
    }
    pthread_mutex_lock(&p->call);
    pthread_mutex_lock(&p->mu);
    p->jn = n;
    p->jgrain = grain ? grain : 1;
    p->fn = fn;
    p->ctx = ctx;
    p->pending = p->n - 1;
    p->gen++;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    run_piece(p, 0);
    pthread_mutex_lock(&p->mu);
    while (p->pending > 0) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
    pthread_mutex_unlock(&p->call);
}
