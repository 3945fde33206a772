/* Large request buffers (images' pixel arrays) from a bounded pool that is reused.
 *
 * `clef serve` maps and unmaps a request's large buffers per request (glibc's mmap threshold is
 * 128 KiB there), so its resident set followed how many images were in flight at each instant:
 * the 64-client soak on tiny swung by 40-60 MB within every minute, nearly all of it the patch
 * arrays of prepared and queued jobs (docs/reliability.md "The soak"). Kept in glibc's heap
 * instead, it was higher and crept (docs/rejected-experiments.md). This pool keeps them:
 *
 * - Buffers of >= CLEF_BUFPOOL_MIN bytes come in size classes (four per doubling: at most 25%
 *   slack); one is made on the first request its class (or one of the next four classes) has no
 *   free buffer for, touched whole when made, and kept on its class's free list when freed.
 * - What the pool holds (buffers in use and free) stays within its cap: a buffer that would pass
 *   it first evicts free buffers (the largest first); one that still does not fit, a smaller
 *   request, or a pool that cannot make a buffer gives a plain allocation (malloc: under `clef
 *   serve`'s threshold a mapping of its own, returned when freed). Never an error: NULL only
 *   when the plain allocation fails too.
 * - So the resident set rises to what the most buffers in flight at once needed (at most the cap)
 *   and stays there, whatever the instant's count.
 * - Reused memory is not cleared (malloc never promised it; every caller writes the whole array).
 * - Thread-safe: one mutex, two short holds per buffer.
 *
 * Every buffer, pooled or plain, is freed with clef_bufpool_free (a 64-byte header before the
 * data says where it came from); the data is 64-byte aligned. The process pool (NULL unless a
 * driver sets one: clef serve's --request-pool) is the one the image and video code use. */
#ifndef CLEF_BASE_BUFPOOL_H
#define CLEF_BASE_BUFPOOL_H

#include <stddef.h>

#define CLEF_BUFPOOL_MIN ((size_t)128 << 10)

typedef struct clef_bufpool clef_bufpool;

/* NULL when out of memory. cap: most bytes of buffers held, in use or free (0: a pool that holds
 * nothing: every buffer plain). */
clef_bufpool *clef_bufpool_create(size_t cap);
/* Gives back the free buffers; every buffer of the pool must have been freed before. NULL ok. */
void clef_bufpool_destroy(clef_bufpool *p);

/* n bytes (from p, or plain when p is NULL); NULL only when out of memory. */
void *clef_bufpool_alloc(clef_bufpool *p, size_t n);
/* A buffer of clef_bufpool_alloc, from any pool or none; NULL ok. */
void clef_bufpool_free(void *ptr);

typedef struct {
    size_t cap;
    size_t held_bytes, live_bytes; /* buffers the pool holds (in use or free) / in use now */
    size_t peak_live_bytes;        /* in use at most at once so far */
    size_t buffers;                /* buffers held */
    size_t hits, made, plain;      /* requests served by a free buffer / by a new one / plain (of >= MIN bytes) */
    size_t evicted;                /* free buffers given back to make room under the cap */
} clef_bufpool_stats;
void clef_bufpool_get_stats(clef_bufpool *p, clef_bufpool_stats *st);

/* The process's pool for request buffers (NULL: none, every buffer plain). Set it before the
 * threads that allocate start, and back to NULL before destroying it. */
clef_bufpool *clef_bufpool_process(void);
void clef_bufpool_set_process(clef_bufpool *p);

#endif
