/* Buffers kept for reuse (see bufpool.h): blocks carved from held chunks, freed extents
 * coalesced, chunks folded together as they grow. */
#include "base/bufpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
/* Free extents are poisoned, so a use after free is still caught; a handed-out block is
 * unpoisoned only up to the requested size, so its page slack is caught as an overflow; the
 * header stays poisoned outside alloc/free, so an underflow is caught too. */
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define HDR 64               /* header before the data: keeps the data 64-byte aligned */
#define GRAIN ((size_t)4096) /* extents are whole pages */
#define CHUNK_MIN CLEF_BUFPOOL_CHUNK_MIN
#define CHUNK_ROUND ((size_t)2 << 20)
#define MAX_CHUNKS 256
#define MAGIC 0xc1ef0b0fu

typedef struct {
    size_t off, len;
} extent;

typedef struct chunk {
    char *base;
    size_t size, used;
    int nlive;          /* blocks handed out from it */
    extent *free;       /* free extents, by address, never adjacent (coalesced) */
    int nfree, capfree; /* capfree >= nlive + 1 always: a free never needs memory */
} chunk;

typedef struct {
    clef_bufpool *pool; /* NULL: a plain block */
    chunk *ch;          /* NULL: not from a chunk */
    size_t len;         /* bytes of the block, header included; 0: plain (malloc'd) */
    unsigned magic;
    char pad[HDR - 2 * sizeof(void *) - sizeof(size_t) - sizeof(unsigned)];
} hdr_t;
_Static_assert(sizeof(hdr_t) == HDR, "header size");

struct clef_bufpool {
    pthread_mutex_t mu;
    size_t cap, min_bytes, held; /* bytes of chunks allowed / held */
    size_t live, peak_live;
    chunk *ch[MAX_CHUNKS];
    int n;
    size_t hits, misses, own, released;
};

static _Atomic(clef_bufpool *) g_process;

clef_bufpool *clef_bufpool_process(void) { return atomic_load_explicit(&g_process, memory_order_acquire); }
void clef_bufpool_set_process(clef_bufpool *p) { atomic_store_explicit(&g_process, p, memory_order_release); }

clef_bufpool *clef_bufpool_create(size_t cap, size_t min_bytes) {
    clef_bufpool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    if (pthread_mutex_init(&p->mu, NULL) != 0) {
        free(p);
        return NULL;
    }
    p->cap = cap;
    p->min_bytes = min_bytes;
    return p;
}

static void chunk_release(chunk *c) {
    UNPOISON(c->base, c->size);
    free(c->base);
    free(c->free);
    free(c);
}

void clef_bufpool_destroy(clef_bufpool *p) {
    if (!p) return;
    for (int i = 0; i < p->n; i++) chunk_release(p->ch[i]);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

static void *finish(clef_bufpool *p, void *base, chunk *c, size_t len, size_t bytes) {
    UNPOISON(base, HDR);
    *(hdr_t *)base = (hdr_t){.pool = p, .ch = c, .len = len, .magic = MAGIC};
    POISON(base, HDR);
    UNPOISON((char *)base + HDR, bytes);
    return (char *)base + HDR;
}

/* Room for one more free extent than blocks handed out, made before a block is handed out. */
static int reserve_extents(chunk *c) {
    if (c->capfree >= c->nlive + 2) return 0;
    int want = c->capfree ? 2 * c->capfree : 8;
    extent *e = realloc(c->free, (size_t)want * sizeof *e);
    if (!e) return -1;
    c->free = e;
    c->capfree = want;
    return 0;
}

static void count_live(clef_bufpool *p, size_t len) { /* lock held */
    p->live += len;
    if (p->live > p->peak_live) p->peak_live = p->live;
}

/* Hands out len bytes from extent j of chunk c (its start). Lock held. */
static void *carve(clef_bufpool *p, chunk *c, int j, size_t len) {
    void *base = c->base + c->free[j].off;
    c->free[j].off += len;
    c->free[j].len -= len;
    if (c->free[j].len == 0) {
        memmove(&c->free[j], &c->free[j + 1], (size_t)(c->nfree - j - 1) * sizeof(extent));
        c->nfree--;
    }
    c->used += len;
    c->nlive++;
    count_live(p, len);
    return base;
}

static size_t chunk_size(size_t len) {
    return len > CHUNK_MIN ? (len + CHUNK_ROUND - 1) / CHUNK_ROUND * CHUNK_ROUND : CHUNK_MIN;
}

/* A new chunk of at least len bytes within the cap; NULL when it cannot be. Lock held.
 * Every wholly free chunk is folded into it (released, its size added to the new one's):
 * otherwise each block larger than any free extent got a chunk of just its size beside the
 * free ones, and a soak on tiny held 256 MB of chunks for forwards that never had more than
 * 88 MB in use at once. It is also at least half of what stays held, so each growth leaves
 * headroom and a need slightly larger than any before still fits (docs/reliability.md "The
 * soak", docs/rejected-experiments.md "Buffer cache chunk rules"). */
static chunk *grow(clef_bufpool *p, size_t len) {
    size_t fold = 0;
    for (int i = 0; i < p->n;) {
        chunk *c = p->ch[i];
        if (c->used) {
            i++;
            continue;
        }
        fold += c->size;
        p->held -= c->size;
        p->ch[i] = p->ch[--p->n];
        p->released++;
        chunk_release(c);
    }
    size_t want = len + fold;
    if (want < p->held / 2) want = p->held / 2;
    size_t size = chunk_size(want);
    if (p->held + size > p->cap) size = chunk_size(len); /* the headroom does not fit under the cap */
    if (size > p->cap) size = len;                       /* a small cap: a chunk of just this block */
    if (p->held + size > p->cap || p->n == MAX_CHUNKS) return NULL;
    chunk *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    void *base = NULL;
    if (posix_memalign(&base, GRAIN, size) != 0) {
        free(c);
        return NULL;
    }
    /* Touched whole now: the page faults are paid once, here, and the resident set is what is
     * held from the start (untouched, a chunk's far pages went resident one use at a time, so
     * the resident set crept up long after what was held had stopped moving). */
    memset(base, 0, size);
    c->base = base;
    c->size = size;
    if (reserve_extents(c) != 0) {
        free(base);
        free(c);
        return NULL;
    }
    c->free[0] = (extent){0, size};
    c->nfree = 1;
    POISON(c->base, size);
    p->ch[p->n++] = c;
    p->held += size;
    return c;
}

void *clef_bufpool_alloc(clef_bufpool *p, size_t n) {
    if (n == 0) n = 1;
    if (n > SIZE_MAX / 4) return NULL;
    void *base = NULL;
    if (!p || n + HDR < p->min_bytes) {
        if (posix_memalign(&base, HDR, n + HDR) != 0) return NULL;
        return finish(NULL, base, NULL, 0, n);
    }
    size_t len = (n + HDR + GRAIN - 1) / GRAIN * GRAIN;
    pthread_mutex_lock(&p->mu);
    chunk *bc = NULL;
    int bj = -1;
    for (int i = 0; i < p->n; i++) { /* best fit: the smallest free extent that holds it */
        chunk *c = p->ch[i];
        for (int j = 0; j < c->nfree; j++)
            if (c->free[j].len >= len && (!bc || c->free[j].len < bc->free[bj].len)) {
                bc = c;
                bj = j;
            }
    }
    if (bc && reserve_extents(bc) != 0) bc = NULL;
    if (bc) {
        p->hits++;
    } else {
        p->misses++;
        bc = grow(p, len);
        bj = 0;
    }
    if (bc) {
        base = carve(p, bc, bj, len);
        pthread_mutex_unlock(&p->mu);
        return finish(p, base, bc, len, n);
    }
    p->own++;
    pthread_mutex_unlock(&p->mu);
    /* over the cap (or out of memory for a chunk): a block of its own, given back when freed */
    if (posix_memalign(&base, GRAIN, len) != 0) return NULL;
    pthread_mutex_lock(&p->mu);
    count_live(p, len);
    pthread_mutex_unlock(&p->mu);
    return finish(p, base, NULL, len, n);
}

/* Returns [off, off + len) to chunk c's free extents, merged with its neighbours. Lock held. */
static void give_back(clef_bufpool *p, chunk *c, size_t off, size_t len) {
    int j = 0;
    while (j < c->nfree && c->free[j].off < off) j++;
    int left = j > 0 && c->free[j - 1].off + c->free[j - 1].len == off;
    int right = j < c->nfree && off + len == c->free[j].off;
    if (left && right) {
        c->free[j - 1].len += len + c->free[j].len;
        memmove(&c->free[j], &c->free[j + 1], (size_t)(c->nfree - j - 1) * sizeof(extent));
        c->nfree--;
    } else if (left) {
        c->free[j - 1].len += len;
    } else if (right) {
        c->free[j].off = off;
        c->free[j].len += len;
    } else { /* capfree > nfree: reserved when the block was handed out */
        memmove(&c->free[j + 1], &c->free[j], (size_t)(c->nfree - j) * sizeof(extent));
        c->free[j] = (extent){off, len};
        c->nfree++;
    }
    c->used -= len;
    c->nlive--;
    p->live -= len;
}

void clef_bufpool_free(void *ptr) {
    if (!ptr) return;
    void *base = (char *)ptr - HDR;
    UNPOISON(base, HDR);
    hdr_t h = *(hdr_t *)base;
    if (h.magic != MAGIC) { /* not a block of clef_bufpool_alloc: a bug to stop at, not to pass on */
        fprintf(stderr, "clef_bufpool_free: %p is not a pool block\n", ptr);
        abort();
    }
    ((hdr_t *)base)->magic = 0;
    clef_bufpool *p = h.pool;
    if (!h.ch) {
        if (h.len) {
            pthread_mutex_lock(&p->mu);
            p->live -= h.len;
            p->released++;
            pthread_mutex_unlock(&p->mu);
        }
        free(base);
        return;
    }
    POISON(base, h.len);
    pthread_mutex_lock(&p->mu);
    give_back(p, h.ch, (size_t)((char *)base - h.ch->base), h.len);
    pthread_mutex_unlock(&p->mu);
}

void clef_bufpool_get_stats(clef_bufpool *p, clef_bufpool_stats *st) {
    memset(st, 0, sizeof *st);
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    size_t used = 0;
    for (int i = 0; i < p->n; i++) used += p->ch[i]->used;
    st->cap = p->cap;
    st->held_bytes = p->held;
    st->free_bytes = p->held - used;
    st->chunks = (size_t)p->n;
    st->hits = p->hits;
    st->misses = p->misses;
    st->own = p->own;
    st->released = p->released;
    st->live_bytes = p->live;
    st->peak_live_bytes = p->peak_live;
    pthread_mutex_unlock(&p->mu);
}
