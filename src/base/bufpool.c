/* Buffers kept for reuse (see bufpool.h): blocks carved from one reserved address range whose
 * usable part grows in place, freed extents coalesced. */
#include "base/bufpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

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
#define GROW_MIN CLEF_BUFPOOL_GROW_MIN
#define GROW_ROUND ((size_t)2 << 20)
#define MAGIC 0xc1ef0b0fu
#define OWN ((size_t)-1) /* hdr_t.off of a block mapped on its own */

typedef struct {
    size_t off, len;
} extent;

typedef struct {
    clef_bufpool *pool; /* NULL: a plain block */
    size_t off;         /* offset in the pool's range; OWN: a mapping of its own */
    size_t len;         /* bytes of the block, header included; 0: plain (malloc'd) */
    unsigned magic;
    char pad[HDR - sizeof(void *) - 2 * sizeof(size_t) - sizeof(unsigned)];
} hdr_t;
_Static_assert(sizeof(hdr_t) == HDR, "header size");

struct clef_bufpool {
    pthread_mutex_t mu;
    size_t cap, min_bytes;
    char *base;          /* the reserved range (NULL until the first pooled block) */
    size_t reserved;     /* its bytes: the cap, at most the machine's memory */
    size_t held;         /* its first `held` bytes are usable (touched); the rest is PROT_NONE */
    extent *free;        /* free extents of [0, held), by address, never adjacent (coalesced) */
    int nfree, capfree;  /* capfree >= nlive + 1 always: a free never needs memory */
    int nlive;           /* blocks handed out from the range */
    size_t used;         /* their bytes */
    size_t live, peak_live;
    size_t hits, misses, own, released;
    size_t first_grow;   /* the range's first growth (GROW_MIN, or the budget: clef_bufpool_set_budget) */
    /* admission (clef_bufpool_admit): a request waits while `live` >= budget */
    pthread_cond_t below; /* broadcast when a free brings `live` under the budget with waiters */
    size_t budget;        /* 0: none */
    double wait_s;
    int waiters;
    size_t admits, waited, timeouts;
};

static _Atomic(clef_bufpool *) g_process;

clef_bufpool *clef_bufpool_process(void) { return atomic_load_explicit(&g_process, memory_order_acquire); }
void clef_bufpool_set_process(clef_bufpool *p) { atomic_store_explicit(&g_process, p, memory_order_release); }

clef_bufpool *clef_bufpool_create(size_t cap, size_t min_bytes) {
    clef_bufpool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    pthread_condattr_t ca;
    int ok = pthread_condattr_init(&ca) == 0;
    /* the waits' deadlines are on the monotonic clock: a wall-clock step cannot stretch them */
    int cond_ok = ok && pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0 && pthread_cond_init(&p->below, &ca) == 0;
    if (ok) pthread_condattr_destroy(&ca);
    if (!cond_ok) {
        free(p);
        return NULL;
    }
    if (pthread_mutex_init(&p->mu, NULL) != 0) {
        pthread_cond_destroy(&p->below);
        free(p);
        return NULL;
    }
    p->cap = cap;
    p->min_bytes = min_bytes;
    p->first_grow = GROW_MIN;
    return p;
}

void clef_bufpool_set_budget(clef_bufpool *p, size_t budget, double wait_s) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->budget = budget;
    p->wait_s = wait_s > 0 ? wait_s : 0; /* 0: no deadline */
    size_t first = budget < p->cap ? budget : p->cap;
    first = (first + GROW_ROUND - 1) / GROW_ROUND * GROW_ROUND;
    p->first_grow = first > GROW_MIN ? first : GROW_MIN;
    pthread_cond_broadcast(&p->below); /* a larger budget may admit a waiter */
    pthread_mutex_unlock(&p->mu);
}

int clef_bufpool_admit(clef_bufpool *p) {
    if (!p) return 0;
    pthread_mutex_lock(&p->mu);
    p->admits++;
    int rc = 0;
    if (p->budget && p->live >= p->budget) {
        p->waited++;
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        double s = p->wait_s < 1e6 ? p->wait_s : 1e6; /* bounded: no overflow of tv_sec */
        long long ns = (long long)until.tv_nsec + (long long)((s - (double)(long long)s) * 1e9);
        until.tv_sec += (time_t)s + (time_t)(ns / 1000000000LL);
        until.tv_nsec = (long)(ns % 1000000000LL);
        p->waiters++;
        while (p->budget && p->live >= p->budget && rc == 0) {
            if (p->wait_s <= 0) pthread_cond_wait(&p->below, &p->mu); /* no deadline */
            else if (pthread_cond_timedwait(&p->below, &p->mu, &until) != 0 && p->live >= p->budget) rc = -1;
        }
        p->waiters--;
        if (rc) p->timeouts++;
    }
    pthread_mutex_unlock(&p->mu);
    return rc;
}

/* After a free (lock held): wake the waiting requests when there is room now. */
static void wake_waiters(clef_bufpool *p) {
    if (p->waiters && p->live < p->budget) pthread_cond_broadcast(&p->below);
}

/* The range's usable part, [0, held), is given back with the range. */
static void range_release(clef_bufpool *p) {
    if (!p->base) return;
    UNPOISON(p->base, p->held); /* ASan's shadow would outlive the mapping */
    munmap(p->base, p->reserved);
    p->base = NULL;
}

void clef_bufpool_destroy(clef_bufpool *p) {
    if (!p) return;
    range_release(p);
    free(p->free);
    pthread_cond_destroy(&p->below);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

static void *finish(clef_bufpool *p, void *base, size_t off, size_t len, size_t bytes) {
    UNPOISON(base, HDR);
    *(hdr_t *)base = (hdr_t){.pool = p, .off = off, .len = len, .magic = MAGIC};
    POISON(base, HDR);
    UNPOISON((char *)base + HDR, bytes);
    return (char *)base + HDR;
}

/* Room for one more free extent than blocks handed out, made before a block is handed out. */
static int reserve_extents(clef_bufpool *p) {
    if (p->capfree >= p->nlive + 2) return 0;
    int want = p->capfree ? 2 * p->capfree : 8;
    extent *e = realloc(p->free, (size_t)want * sizeof *e);
    if (!e) return -1;
    p->free = e;
    p->capfree = want;
    return 0;
}

static void count_live(clef_bufpool *p, size_t len) { /* lock held */
    p->live += len;
    if (p->live > p->peak_live) p->peak_live = p->live;
}

/* Hands out len bytes from free extent j (its start). Lock held. */
static size_t carve(clef_bufpool *p, int j, size_t len) {
    size_t off = p->free[j].off;
    p->free[j].off += len;
    p->free[j].len -= len;
    if (p->free[j].len == 0) {
        memmove(&p->free[j], &p->free[j + 1], (size_t)(p->nfree - j - 1) * sizeof(extent));
        p->nfree--;
    }
    p->used += len;
    p->nlive++;
    count_live(p, len);
    return off;
}

/* Address space for the whole cap, reserved once (PROT_NONE: no memory, no commit charge) so
 * that the usable part can grow in place. At most the machine's memory: holding more could
 * never be resident anyway. Lock held. */
static int range_reserve(clef_bufpool *p) {
    if (p->base) return 0;
    size_t n = p->cap / GRAIN * GRAIN;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0 && (size_t)pages <= SIZE_MAX / (size_t)page && n > (size_t)pages * (size_t)page)
        n = (size_t)pages * (size_t)page / GRAIN * GRAIN;
    void *m = n ? mmap(NULL, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0) : MAP_FAILED;
    if (m == MAP_FAILED) return -1; /* tried again at the next misfit */
    p->base = m;
    p->reserved = n;
    return 0;
}

/* Makes room for a block of len bytes that fits no free extent by growing the usable part of the
 * range in place: by what is missing beyond the free extent at its end (which the new pages
 * extend), in steps of 2 MiB, at least 8 MiB the first time. Returns the free extent that now
 * holds it, or -1 (over the cap, or out of memory). Lock held.
 * (Before, a misfit made a new chunk of at least half of what was held, elsewhere in the address
 * space: the pools stepped up by 30-40 MB at their first misfit, minutes into the AVX2 soak, with
 * their peak in use unchanged: docs/reliability.md "The soak".) */
static int grow(clef_bufpool *p, size_t len) {
    if (range_reserve(p) != 0) return -1;
    int tail = p->nfree > 0 && p->free[p->nfree - 1].off + p->free[p->nfree - 1].len == p->held;
    size_t need = len - (tail ? p->free[p->nfree - 1].len : 0);
    size_t step = (need + GROW_ROUND - 1) / GROW_ROUND * GROW_ROUND;
    if (p->held == 0 && step < p->first_grow) step = p->first_grow;
    if (step > p->reserved - p->held) step = need; /* near the cap: just what is missing */
    if (step > p->reserved - p->held) return -1;
    if (!tail && p->nfree == p->capfree) return -1; /* never: reserve_extents made room */
    char *at = p->base + p->held;
    if (mprotect(at, step, PROT_READ | PROT_WRITE) != 0) return -1;
    /* Touched whole now: the page faults are paid once, here, and the resident set is what is
     * held from the start (untouched, far pages went resident one use at a time, so the
     * resident set crept up long after what was held had stopped moving). */
    memset(at, 0, step);
    POISON(at, step);
    if (tail) {
        p->free[p->nfree - 1].len += step;
    } else {
        p->free[p->nfree] = (extent){p->held, step};
        p->nfree++;
    }
    p->held += step;
    return p->nfree - 1;
}

void *clef_bufpool_alloc(clef_bufpool *p, size_t n) {
    if (n == 0) n = 1;
    if (n > SIZE_MAX / 4) return NULL;
    void *base = NULL;
    if (!p || n + HDR < p->min_bytes) {
        if (posix_memalign(&base, HDR, n + HDR) != 0) return NULL;
        return finish(NULL, base, OWN, 0, n);
    }
    size_t len = (n + HDR + GRAIN - 1) / GRAIN * GRAIN;
    pthread_mutex_lock(&p->mu);
    int bj = -1;
    if (p->cap >= len && reserve_extents(p) == 0) {
        for (int j = 0; j < p->nfree; j++) /* best fit: the smallest free extent that holds it */
            if (p->free[j].len >= len && (bj < 0 || p->free[j].len < p->free[bj].len)) bj = j;
        if (bj >= 0) {
            p->hits++;
        } else {
            p->misses++;
            bj = grow(p, len);
        }
    } else {
        p->misses++;
    }
    if (bj >= 0) {
        size_t off = carve(p, bj, len);
        base = p->base + off;
        pthread_mutex_unlock(&p->mu);
        return finish(p, base, off, len, n);
    }
    p->own++;
    pthread_mutex_unlock(&p->mu);
    /* over the cap (or out of memory for the range): a block of its own, given back when freed */
    if (posix_memalign(&base, GRAIN, len) != 0) return NULL;
    pthread_mutex_lock(&p->mu);
    count_live(p, len);
    pthread_mutex_unlock(&p->mu);
    return finish(p, base, OWN, len, n);
}

/* Returns [off, off + len) to the free extents, merged with its neighbours. Lock held. */
static void give_back(clef_bufpool *p, size_t off, size_t len) {
    int j = 0;
    while (j < p->nfree && p->free[j].off < off) j++;
    int left = j > 0 && p->free[j - 1].off + p->free[j - 1].len == off;
    int right = j < p->nfree && off + len == p->free[j].off;
    if (left && right) {
        p->free[j - 1].len += len + p->free[j].len;
        memmove(&p->free[j], &p->free[j + 1], (size_t)(p->nfree - j - 1) * sizeof(extent));
        p->nfree--;
    } else if (left) {
        p->free[j - 1].len += len;
    } else if (right) {
        p->free[j].off = off;
        p->free[j].len += len;
    } else { /* capfree > nfree: reserved when the block was handed out */
        memmove(&p->free[j + 1], &p->free[j], (size_t)(p->nfree - j) * sizeof(extent));
        p->free[j] = (extent){off, len};
        p->nfree++;
    }
    p->used -= len;
    p->nlive--;
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
    if (h.off == OWN) {
        if (h.len) {
            pthread_mutex_lock(&p->mu);
            p->live -= h.len;
            p->released++;
            wake_waiters(p);
            pthread_mutex_unlock(&p->mu);
        }
        free(base);
        return;
    }
    POISON(base, h.len);
    pthread_mutex_lock(&p->mu);
    give_back(p, h.off, h.len);
    wake_waiters(p);
    pthread_mutex_unlock(&p->mu);
}

void clef_bufpool_get_stats(clef_bufpool *p, clef_bufpool_stats *st) {
    memset(st, 0, sizeof *st);
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    st->cap = p->cap;
    st->held_bytes = p->held;
    st->free_bytes = p->held - p->used;
    st->extents = (size_t)p->nfree;
    st->hits = p->hits;
    st->misses = p->misses;
    st->own = p->own;
    st->released = p->released;
    st->live_bytes = p->live;
    st->peak_live_bytes = p->peak_live;
    st->budget = p->budget;
    st->admits = p->admits;
    st->waited = p->waited;
    st->timeouts = p->timeouts;
    pthread_mutex_unlock(&p->mu);
}
