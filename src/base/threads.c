#include "base/threads.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

struct clef_pool {
    int n;                  /* pieces of a job: the workers asked for, the caller included */
    int live;               /* workers that exist, the caller included: 1 .. n (after a fork, 1) */
    pthread_t *tids;        /* n - 1; tids[w - 1] valid for w < live */
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
    struct clef_pool *next; /* the list of live pools (fork handlers) */
};

typedef struct { clef_pool *p; int w; unsigned long seen; } worker_arg;

/* ---- fork
 * A child of fork() has one thread: the pools' helpers stay in the parent. So that a child never
 * waits on a worker that does not exist, and can still use an engine opened before the fork (the
 * model's pages shared copy-on-write), every pool is listed here and pthread_atfork's handlers
 * take each pool's locks before the fork (a parallel-for in flight finishes first) and hand them
 * back after; in the child they also reset the pool to its caller alone (live = 1), and the next
 * clef_pool_for starts the helpers again (or, when it cannot, runs their pieces itself: the same
 * pieces, the same bits). */
static pthread_mutex_t g_pools_mu = PTHREAD_MUTEX_INITIALIZER;
static clef_pool *g_pools;
static pthread_once_t g_fork_once = PTHREAD_ONCE_INIT;

static void fork_prepare(void) {
    pthread_mutex_lock(&g_pools_mu);
    for (clef_pool *p = g_pools; p; p = p->next) {
        pthread_mutex_lock(&p->call);
        pthread_mutex_lock(&p->mu);
    }
}

static void fork_parent(void) {
    for (clef_pool *p = g_pools; p; p = p->next) {
        pthread_mutex_unlock(&p->mu);
        pthread_mutex_unlock(&p->call);
    }
    pthread_mutex_unlock(&g_pools_mu);
}

static void fork_child(void) {
    for (clef_pool *p = g_pools; p; p = p->next) {
        p->live = 1;
        p->pending = 0;
        /* the helpers that waited on these did not come along: fresh ones (glibc's init only clears) */
        pthread_cond_init(&p->go, NULL);
        pthread_cond_init(&p->done, NULL);
        pthread_mutex_unlock(&p->mu);
        pthread_mutex_unlock(&p->call);
    }
    pthread_mutex_unlock(&g_pools_mu);
}

static void fork_register(void) { pthread_atfork(fork_prepare, fork_parent, fork_child); }

static void list_add(clef_pool *p) {
    pthread_once(&g_fork_once, fork_register);
    pthread_mutex_lock(&g_pools_mu);
    p->next = g_pools;
    g_pools = p;
    pthread_mutex_unlock(&g_pools_mu);
}

static void list_remove(clef_pool *p) {
    pthread_mutex_lock(&g_pools_mu);
    for (clef_pool **q = &g_pools; *q; q = &(*q)->next)
        if (*q == p) {
            *q = p->next;
            break;
        }
    pthread_mutex_unlock(&g_pools_mu);
}

/* ---- the pool */

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
    unsigned long seen = wa->seen; /* the job before its start: it never runs an older one */
    free(wa);
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

/* Starts helpers live .. n-1 (no job runs: `call` held, or the pool not yet shared). Returns 0
 * when all started; else the ones that did are kept. */
static int start_helpers(clef_pool *p) {
    while (p->live < p->n) {
        int w = p->live;
        worker_arg *wa = malloc(sizeof *wa);
        if (!wa) return -1;
        wa->p = p;
        wa->w = w;
        wa->seen = p->gen;
        if (pthread_create(&p->tids[w - 1], NULL, worker_main, wa) != 0) {
            free(wa);
            return -1;
        }
        p->live = w + 1;
    }
    return 0;
}

clef_pool *clef_pool_create(int nthreads, clef_err *err) {
    if (nthreads <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        nthreads = c > 0 ? (int)c : 1;
    }
    if (nthreads > CLEF_POOL_MAX_THREADS) nthreads = CLEF_POOL_MAX_THREADS;
    clef_pool *p = calloc(1, sizeof *p);
    if (!p) { clef_err_set(err, CLEF_E_OOM, "out of memory creating the thread pool"); return NULL; }
    p->n = p->live = 1;
    pthread_mutex_init(&p->call, NULL);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->go, NULL);
    pthread_cond_init(&p->done, NULL);
    if (nthreads > 1) {
        p->tids = calloc((size_t)nthreads - 1, sizeof *p->tids);
        if (!p->tids) { clef_pool_destroy(p); clef_err_set(err, CLEF_E_OOM, "out of memory creating the thread pool"); return NULL; }
        p->n = nthreads;
        if (start_helpers(p) != 0) {
            int started = p->live;
            p->n = p->live; /* destroy joins what started */
            clef_pool_destroy(p);
            clef_err_set(err, CLEF_E_INTERNAL, "could not start thread %d of %d", started, nthreads);
            return NULL;
        }
    }
    list_add(p);
    return p;
}

void clef_pool_destroy(clef_pool *p) {
    if (!p) return;
    list_remove(p);
    pthread_mutex_lock(&p->mu);
    p->quit = 1;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    for (int w = 1; w < p->live; w++) pthread_join(p->tids[w - 1], NULL);
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
    if (p->live < p->n) start_helpers(p); /* after a fork; what cannot start, the caller runs below */
    pthread_mutex_lock(&p->mu);
    p->jn = n;
    p->jgrain = grain ? grain : 1;
    p->fn = fn;
    p->ctx = ctx;
    p->pending = p->live - 1;
    p->gen++;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    run_piece(p, 0);
    for (int w = p->live; w < p->n; w++) run_piece(p, w); /* helpers that could not start */
    pthread_mutex_lock(&p->mu);
    while (p->pending > 0) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
    pthread_mutex_unlock(&p->call);
}
