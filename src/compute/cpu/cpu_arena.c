/* The CPU backend's buffer cache (see cpu_arena.h). */
#include "compute/cpu/cpu_arena.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
/* Cached blocks are poisoned, so a use after ops->free is still caught; a handed-out block is
 * unpoisoned only up to the requested size, so its class slack is caught as an overflow; the
 * header stays poisoned outside alloc/free, so an underflow is caught too. */
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define HDR 64                            /* header before the data: keeps the data 64-byte aligned */
#define SLOTS 64                          /* most blocks cached */

typedef struct {
    size_t cap; /* bytes of the whole block, header included; 0: a small block (malloc'd) */
    size_t pad[HDR / sizeof(size_t) - 1];
} hdr_t;

typedef struct {
    void *base;
    size_t cap;
    uint64_t stamp; /* when freed: the oldest go first */
} slot_t;

struct clef_arena {
    pthread_mutex_t mu;
    size_t cap, cached;
    size_t live, peak_live; /* bytes of large blocks handed out now / at most so far */
    int n;
    uint64_t clock;
    slot_t slot[SLOTS];
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

void clef_arena_destroy(clef_arena *a) {
    if (!a) return;
    for (int i = 0; i < a->n; i++) free(a->slot[i].base);
    pthread_mutex_destroy(&a->mu);
    free(a);
}

/* x rounded up to 3 significant bits (8 classes per power of two). x >= CLEF_ARENA_MIN_BYTES. */
static size_t size_class(size_t x) {
    int b = 63 - __builtin_clzll((unsigned long long)x);
    size_t step = (size_t)1 << (b - 3);
    return (x + step - 1) & ~(step - 1);
}

/* Removes slot i (order does not matter: the stamps keep the age). Lock held. */
static void *take(clef_arena *a, int i) {
    void *base = a->slot[i].base;
    a->cached -= a->slot[i].cap;
    a->slot[i] = a->slot[--a->n];
    return base;
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

float *clef_arena_alloc(clef_arena *a, size_t n) {
    if (n == 0) n = 1;
    if (n > (SIZE_MAX / 2) / sizeof(float)) return NULL;
    size_t bytes = n * sizeof(float), need = bytes + HDR;
    void *base = NULL;
    if (need < CLEF_ARENA_MIN_BYTES) {
        if (posix_memalign(&base, 64, need) != 0) return NULL;
        ((hdr_t *)base)->cap = 0;
        POISON(base, HDR);
        return handed_out(a, (float *)((char *)base + HDR), n);
    }
    pthread_mutex_lock(&a->mu);
    int best = -1;
    for (int i = 0; i < a->n; i++) { /* the smallest fitting block, however large */
        size_t c = a->slot[i].cap;
        if (c >= need && (best < 0 || c < a->slot[best].cap)) best = i;
    }
    size_t cap = 0;
    if (best >= 0) {
        cap = a->slot[best].cap;
        base = take(a, best);
        a->hits++;
    } else {
        a->misses++;
    }
    pthread_mutex_unlock(&a->mu);
    if (!base) {
        cap = size_class(need);
        if (posix_memalign(&base, 64, cap) != 0) return NULL;
        POISON((char *)base + HDR, cap - HDR);
    }
    pthread_mutex_lock(&a->mu);
    a->live += cap;
    if (a->live > a->peak_live) a->peak_live = a->live;
    pthread_mutex_unlock(&a->mu);
    UNPOISON(base, HDR);
    ((hdr_t *)base)->cap = cap;
    POISON(base, HDR);
    UNPOISON((char *)base + HDR, bytes);
    return handed_out(a, (float *)((char *)base + HDR), n);
}

void clef_arena_free(clef_arena *a, float *p) {
    if (!p) return;
    void *base = (char *)p - HDR;
    UNPOISON(base, HDR);
    size_t cap = ((hdr_t *)base)->cap;
    if (cap) {
        pthread_mutex_lock(&a->mu);
        a->live -= cap;
        pthread_mutex_unlock(&a->mu);
    }
    if (cap == 0 || cap > a->cap) {
        if (cap) {
            pthread_mutex_lock(&a->mu);
            a->released++;
            pthread_mutex_unlock(&a->mu);
        }
        free(base);
        return;
    }
    POISON((char *)base + HDR, cap - HDR);
    void *drop[SLOTS];
    int nd = 0;
    pthread_mutex_lock(&a->mu);
    while (a->n > 0 && (a->n == SLOTS || a->cached + cap > a->cap)) { /* evict the oldest */
        int old = 0;
        for (int i = 1; i < a->n; i++)
            if (a->slot[i].stamp < a->slot[old].stamp) old = i;
        drop[nd++] = take(a, old);
        a->released++;
    }
    a->slot[a->n++] = (slot_t){base, cap, ++a->clock};
    a->cached += cap;
    pthread_mutex_unlock(&a->mu);
    for (int i = 0; i < nd; i++) free(drop[i]); /* munmap outside the lock */
}

void clef_arena_get_stats(clef_arena *a, clef_arena_stats *st) {
    pthread_mutex_lock(&a->mu);
    st->cached_bytes = a->cached;
    st->cached_blocks = (size_t)a->n;
    st->hits = a->hits;
    st->misses = a->misses;
    st->released = a->released;
    st->live_bytes = a->live;
    st->peak_live_bytes = a->peak_live;
    pthread_mutex_unlock(&a->mu);
}
