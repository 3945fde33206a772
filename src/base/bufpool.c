/* The request-buffer pool (see bufpool.h): size classes with free lists, a byte cap, plain
 * allocation when the pool cannot serve. */
#include "base/bufpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
/* A free buffer is poisoned whole, so a use after clef_bufpool_free is caught; a handed-out one is
 * unpoisoned only up to the requested size, so its class's slack is caught as an overflow. */
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define HDR 64        /* header before the data: keeps the data 64-byte aligned */
#define STEPS 4       /* classes per doubling of the size */
#define NCLASS (STEPS * 30)
#define LOOKUP STEPS  /* a request may take a free buffer up to this many classes above its own (<= 2x) */
#define MAGIC 0xc1ef0b0fu

typedef struct hdr {
    clef_bufpool *pool; /* NULL: a plain buffer */
    struct hdr *next;   /* on its class's free list, while free */
    size_t size;        /* usable bytes: the class's size (pooled) or the request's (plain) */
    int cls;
    unsigned magic;
    char pad[HDR - 2 * sizeof(void *) - sizeof(size_t) - sizeof(int) - sizeof(unsigned)];
} hdr;
_Static_assert(sizeof(hdr) == HDR, "header size");

struct clef_bufpool {
    pthread_mutex_t mu;
    size_t cap, held, live, peak_live, buffers;
    size_t hits, made, plain, evicted;
    hdr *free[NCLASS];
};

static _Atomic(clef_bufpool *) g_process;

clef_bufpool *clef_bufpool_process(void) { return atomic_load_explicit(&g_process, memory_order_acquire); }
void clef_bufpool_set_process(clef_bufpool *p) { atomic_store_explicit(&g_process, p, memory_order_release); }

/* 1, 1.25, 1.5, 1.75 times each power of two from CLEF_BUFPOOL_MIN: whole pages */
static size_t class_size(int k) {
    size_t base = CLEF_BUFPOOL_MIN << (k / STEPS);
    return base / STEPS * (size_t)(STEPS + k % STEPS);
}

static int class_of(size_t n) { /* NCLASS: larger than every class */
    int k = 0;
    while (k < NCLASS && class_size(k) < n) k++;
    return k;
}

clef_bufpool *clef_bufpool_create(size_t cap) {
    clef_bufpool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    if (pthread_mutex_init(&p->mu, NULL) != 0) {
        free(p);
        return NULL;
    }
    p->cap = cap;
    return p;
}

static void release(hdr *h) {
    UNPOISON((char *)h + HDR, h->size);
    h->magic = 0;
    free(h);
}

void clef_bufpool_destroy(clef_bufpool *p) {
    if (!p) return;
    for (int k = 0; k < NCLASS; k++)
        while (p->free[k]) {
            hdr *h = p->free[k];
            p->free[k] = h->next;
            release(h);
        }
    pthread_mutex_destroy(&p->mu);
    free(p);
}

static void *hand_out(hdr *h, size_t n) {
    char *d = (char *)h + HDR;
    UNPOISON(d, n);
    return d;
}

static void count_live(clef_bufpool *p, size_t size) { /* lock held */
    p->live += size;
    if (p->live > p->peak_live) p->peak_live = p->live;
}

/* A pooled buffer of class k for n bytes: a free one, or a new one within the cap; NULL when
 * the pool cannot (the caller then allocates plainly). */
static void *pooled(clef_bufpool *p, int k, size_t n) {
    const size_t size = class_size(k);
    if (size > p->cap) return NULL; /* never flush the pool for what it could not hold anyway */
    pthread_mutex_lock(&p->mu);
    for (int j = k; j < NCLASS && j <= k + LOOKUP; j++)
        if (p->free[j]) {
            hdr *h = p->free[j];
            p->free[j] = h->next;
            p->hits++;
            count_live(p, h->size);
            pthread_mutex_unlock(&p->mu);
            return hand_out(h, n);
        }
    hdr *evict = NULL;
    while (p->held + size > p->cap) { /* room under the cap: the largest free buffers go first */
        int j = NCLASS - 1;
        while (j >= 0 && !p->free[j]) j--;
        if (j < 0) break;
        hdr *v = p->free[j];
        p->free[j] = v->next;
        p->held -= v->size;
        p->buffers--;
        p->evicted++;
        v->next = evict;
        evict = v;
    }
    const int room = p->held + size <= p->cap;
    if (room) { /* reserved before it is made, so that no other thread passes the cap meanwhile */
        p->held += size;
        p->buffers++;
    }
    pthread_mutex_unlock(&p->mu);
    while (evict) {
        hdr *v = evict;
        evict = v->next;
        release(v);
    }
    if (!room) return NULL;
    void *mem = NULL;
    if (posix_memalign(&mem, HDR, HDR + size) != 0) {
        pthread_mutex_lock(&p->mu);
        p->held -= size;
        p->buffers--;
        pthread_mutex_unlock(&p->mu);
        return NULL;
    }
    /* Touched whole now: its pages are resident from the start, so reusing it for a smaller or
     * larger request of its class never moves the resident set. */
    memset(mem, 0, HDR + size);
    hdr *h = mem;
    h->pool = p;
    h->size = size;
    h->cls = k;
    h->magic = MAGIC;
    POISON((char *)h + HDR, size);
    pthread_mutex_lock(&p->mu);
    p->made++;
    count_live(p, size);
    pthread_mutex_unlock(&p->mu);
    return hand_out(h, n);
}

void *clef_bufpool_alloc(clef_bufpool *p, size_t n) {
    if (n == 0) n = 1;
    if (n > SIZE_MAX / 2) return NULL;
    const int big = p && n >= CLEF_BUFPOOL_MIN;
    const int k = big ? class_of(n) : NCLASS;
    if (k < NCLASS) {
        void *d = pooled(p, k, n);
        if (d) return d;
    }
    void *mem = NULL;
    if (posix_memalign(&mem, HDR, HDR + n) != 0) return NULL;
    hdr *h = mem;
    memset(h, 0, HDR);
    h->size = n;
    h->cls = -1;
    h->magic = MAGIC;
    if (big) {
        pthread_mutex_lock(&p->mu);
        p->plain++;
        pthread_mutex_unlock(&p->mu);
    }
    return (char *)h + HDR;
}

void clef_bufpool_free(void *ptr) {
    if (!ptr) return;
    hdr *h = (hdr *)((char *)ptr - HDR);
    if (h->magic != MAGIC) { /* not a buffer of clef_bufpool_alloc: a bug to stop at, not to pass on */
        fprintf(stderr, "clef_bufpool_free: %p is not a pool buffer\n", ptr);
        abort();
    }
    clef_bufpool *p = h->pool;
    if (!p) {
        h->magic = 0;
        free(h);
        return;
    }
    POISON(ptr, h->size);
    pthread_mutex_lock(&p->mu);
    h->next = p->free[h->cls];
    p->free[h->cls] = h;
    p->live -= h->size;
    pthread_mutex_unlock(&p->mu);
}

void clef_bufpool_get_stats(clef_bufpool *p, clef_bufpool_stats *st) {
    memset(st, 0, sizeof *st);
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    st->cap = p->cap;
    st->held_bytes = p->held;
    st->live_bytes = p->live;
    st->peak_live_bytes = p->peak_live;
    st->buffers = p->buffers;
    st->hits = p->hits;
    st->made = p->made;
    st->plain = p->plain;
    st->evicted = p->evicted;
    pthread_mutex_unlock(&p->mu);
}
