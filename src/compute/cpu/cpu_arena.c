/* The CPU backend's buffer cache (see cpu_arena.h): large blocks carved from held chunks, freed
 * extents coalesced. Written here rather than taken from an allocator library because what it
 * must do is narrow and exact: never give memory back while under the cap (so the resident set
 * stays where the largest forward put it) and never clear or purge pages behind our back
 * (jemalloc's and glibc's purging is what made the resident set move). */
#include "compute/cpu/cpu_arena.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
/* Free extents are poisoned, so a use after ops->free is still caught; a handed-out block is
 * unpoisoned only up to the requested size, so its page slack is caught as an overflow; the
 * header stays poisoned outside alloc/free, so an underflow is caught too. */
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define HDR 64                       /* header before the data: keeps the data 64-byte aligned */
#define GRAIN ((size_t)4096)         /* extents are whole pages */
#define CHUNK_MIN CLEF_ARENA_CHUNK_MIN
#define CHUNK_ROUND ((size_t)2 << 20)
#define MAX_CHUNKS 256

typedef struct {
    size_t off, len;
} extent;

typedef struct chunk {
    char *base;
    size_t size, used;
    int nlive;         /* blocks handed out from it */
    extent *free;      /* free extents, by address, never adjacent (coalesced) */
    int nfree, capfree; /* capfree >= nlive + 1 always: a free never needs memory */
} chunk;

typedef struct {
    chunk *ch;  /* NULL: not from a chunk */
    size_t len; /* bytes of the block, header included; 0 (with ch NULL): a small malloc'd block */
    size_t pad[HDR / sizeof(size_t) - 2];
} hdr_t;
_Static_assert(sizeof(hdr_t) == HDR, "header size");

struct clef_arena {
    pthread_mutex_t mu;
    size_t cap, held; /* bytes of chunks allowed / held */
    size_t live, peak_live;
    chunk *ch[MAX_CHUNKS];
    int n;
    size_t hits, misses, released;
    int poison;
};

clef_arena *clef_arena_create(size_t cap) {
    clef_arena *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    if (pthread_mutex_init(&a->mu, NULL) != 0) {
        free(a);
        return NULL;
    }
    a->cap = cap;
    return a;
}

static void chunk_release(chunk *c) {
    UNPOISON(c->base, c->size);
    free(c->base);
    free(c->free);
    free(c);
}

void clef_arena_destroy(clef_arena *a) {
    if (!a) return;
    for (int i = 0; i < a->n; i++) chunk_release(a->ch[i]);
    pthread_mutex_destroy(&a->mu);
    free(a);
}

void clef_arena_set_poison(clef_arena *a, int on) { a->poison = on != 0; }

/* Poison mode: n floats of NaN (CLEF_ARENA_POISON_BITS). */
static float *handed_out(const clef_arena *a, float *p, size_t n) {
    if (a->poison) {
        uint32_t bits = CLEF_ARENA_POISON_BITS;
        for (size_t i = 0; i < n; i++) memcpy(&p[i], &bits, sizeof bits);
    }
    return p;
}

static float *finish(const clef_arena *a, void *base, chunk *c, size_t len, size_t bytes, size_t n) {
    UNPOISON(base, HDR);
    *(hdr_t *)base = (hdr_t){.ch = c, .len = len};
    POISON(base, HDR);
    UNPOISON((char *)base + HDR, bytes);
    return handed_out(a, (float *)((char *)base + HDR), n);
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

/* Hands out len bytes from extent j of chunk c (its start). Lock held. */
static void *carve(clef_arena *a, chunk *c, int j, size_t len) {
    void *base = c->base + c->free[j].off;
    c->free[j].off += len;
    c->free[j].len -= len;
    if (c->free[j].len == 0) {
        memmove(&c->free[j], &c->free[j + 1], (size_t)(c->nfree - j - 1) * sizeof(extent));
        c->nfree--;
    }
    c->used += len;
    c->nlive++;
    a->live += len;
    if (a->live > a->peak_live) a->peak_live = a->live;
    return base;
}

static size_t chunk_size(size_t len) {
    return len > CHUNK_MIN ? (len + CHUNK_ROUND - 1) / CHUNK_ROUND * CHUNK_ROUND : CHUNK_MIN;
}

/* A new chunk of at least len bytes within the cap; NULL when it cannot be. Lock held.
 * Every wholly free chunk is folded into it (released, its size added to the new one's):
 * otherwise each block larger than any free extent got a chunk of just its size beside the
 * free ones, and a soak on tiny held 256 MB of chunks for forwards that never had more than
 * 88 MB in use at once; folded, the chunks become few and large, and a forward of any shape no
 * larger than one seen before fits (docs/reliability.md "The soak"). */
static chunk *grow(clef_arena *a, size_t len) {
    size_t fold = 0;
    for (int i = 0; i < a->n;) {
        chunk *c = a->ch[i];
        if (c->used) {
            i++;
            continue;
        }
        fold += c->size;
        a->held -= c->size;
        a->ch[i] = a->ch[--a->n];
        a->released++;
        chunk_release(c);
    }
    size_t size = chunk_size(len + fold);
    if (a->held + size > a->cap) size = chunk_size(len); /* the folded bytes do not fit under the cap */
    if (size > a->cap) size = len;                       /* a small cap: a chunk of just this block */
    if (a->held + size > a->cap || a->n == MAX_CHUNKS) return NULL;
    chunk *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    void *base = NULL;
    if (posix_memalign(&base, GRAIN, size) != 0) {
        free(c);
        return NULL;
    }
    /* Touched whole now: the page faults are paid once, here, and the resident set is what is
     * held from the start (untouched, a chunk's far pages went resident one forward at a time,
     * so the resident set crept up long after what was held had stopped moving). */
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
    a->ch[a->n++] = c;
    a->held += size;
    return c;
}

float *clef_arena_alloc(clef_arena *a, size_t n) {
    if (n == 0) n = 1;
    if (n > (SIZE_MAX / 4) / sizeof(float)) return NULL;
    size_t bytes = n * sizeof(float);
    void *base = NULL;
    if (bytes + HDR < CLEF_ARENA_MIN_BYTES) {
        if (posix_memalign(&base, 64, bytes + HDR) != 0) return NULL;
        return finish(a, base, NULL, 0, bytes, n);
    }
    size_t len = (bytes + HDR + GRAIN - 1) / GRAIN * GRAIN;
    pthread_mutex_lock(&a->mu);
    chunk *bc = NULL;
    int bj = -1;
    for (int i = 0; i < a->n; i++) { /* best fit: the smallest free extent that holds it */
        chunk *c = a->ch[i];
        for (int j = 0; j < c->nfree; j++)
            if (c->free[j].len >= len && (!bc || c->free[j].len < bc->free[bj].len)) {
                bc = c;
                bj = j;
            }
    }
    if (bc && reserve_extents(bc) != 0) bc = NULL;
    if (bc) {
        a->hits++;
    } else {
        a->misses++;
        bc = grow(a, len);
        bj = 0;
    }
    if (bc) {
        base = carve(a, bc, bj, len);
        pthread_mutex_unlock(&a->mu);
        return finish(a, base, bc, len, bytes, n);
    }
    pthread_mutex_unlock(&a->mu);
    /* over the cap (or out of memory for a chunk): a block of its own, given back when freed */
    if (posix_memalign(&base, GRAIN, len) != 0) return NULL;
    pthread_mutex_lock(&a->mu);
    a->live += len;
    if (a->live > a->peak_live) a->peak_live = a->live;
    pthread_mutex_unlock(&a->mu);
    return finish(a, base, NULL, len, bytes, n);
}

/* Returns [off, off + len) to chunk c's free extents, merged with its neighbours. Lock held. */
static void give_back(clef_arena *a, chunk *c, size_t off, size_t len) {
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
    a->live -= len;
}

void clef_arena_free(clef_arena *a, float *p) {
    if (!p) return;
    void *base = (char *)p - HDR;
    UNPOISON(base, HDR);
    hdr_t h = *(hdr_t *)base;
    if (!h.ch) {
        if (h.len) {
            pthread_mutex_lock(&a->mu);
            a->live -= h.len;
            a->released++;
            pthread_mutex_unlock(&a->mu);
        }
        free(base);
        return;
    }
    POISON(base, h.len);
    pthread_mutex_lock(&a->mu);
    give_back(a, h.ch, (size_t)((char *)base - h.ch->base), h.len);
    pthread_mutex_unlock(&a->mu);
}

void clef_arena_get_stats(clef_arena *a, clef_arena_stats *st) {
    pthread_mutex_lock(&a->mu);
    size_t used = 0;
    for (int i = 0; i < a->n; i++) used += a->ch[i]->used;
    st->held_bytes = a->held;
    st->cached_bytes = a->held - used;
    st->cached_blocks = (size_t)a->n;
    st->hits = a->hits;
    st->misses = a->misses;
    st->released = a->released;
    st->live_bytes = a->live;
    st->peak_live_bytes = a->peak_live;
    pthread_mutex_unlock(&a->mu);
}
