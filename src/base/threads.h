/* A small fixed thread pool with one primitive: a parallel-for over [0, n) with STATIC
 * partitioning. The range is cut into `nthreads` contiguous pieces (piece boundaries rounded to a
 * multiple of `grain`), piece w runs on worker w (worker 0 is the calling thread). Nothing is
 * stolen or rebalanced, so which worker computes which index depends only on (n, grain,
 * nthreads); a kernel that computes each output element entirely inside one index (never
 * splitting a reduction across indices) gives bit-identical results for any thread count.
 *
 * clef_pool_for is serialized by an internal mutex (two callers take turns) and must not be
 * called from inside a worker function. */
#ifndef CLEF_BASE_THREADS_H
#define CLEF_BASE_THREADS_H

#include <stddef.h>

#include "base/err.h"

typedef struct clef_pool clef_pool;

/* fn(ctx, begin, end, worker): process indices [begin, end); worker in [0, nthreads). */
typedef void (*clef_range_fn)(void *ctx, size_t begin, size_t end, int worker);

/* nthreads <= 0: the number of online CPUs. At most CLEF_POOL_MAX_THREADS. NULL with err set
 * (OutOfMemory / InternalError) when threads cannot be started. */
#define CLEF_POOL_MAX_THREADS 256
clef_pool *clef_pool_create(int nthreads, clef_err *err);
void clef_pool_destroy(clef_pool *p);
int clef_pool_size(const clef_pool *p);

/* Runs fn over [0, n) and returns when every piece is done. grain 0 counts as 1. A NULL pool
 * runs everything on the calling thread as worker 0. */
void clef_pool_for(clef_pool *p, size_t n, size_t grain, clef_range_fn fn, void *ctx);

/* The piece of worker w (what clef_pool_for hands it); exposed for tests. */
void clef_pool_piece(size_t n, size_t grain, int nthreads, int w, size_t *begin, size_t *end);

#endif
