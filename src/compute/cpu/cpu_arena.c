/* The CPU backend's buffer cache (see cpu_arena.h): a pool of base/bufpool.h, with the backend's
 * sizing in floats and the poison mode. */
#include "compute/cpu/cpu_arena.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/bufpool.h"

struct clef_arena {
    clef_bufpool *pool;
    int poison;
};

clef_arena *clef_arena_create(size_t cap) {
    clef_arena *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    a->pool = clef_bufpool_create(cap, CLEF_ARENA_MIN_BYTES);
    if (!a->pool) {
        free(a);
        return NULL;
    }
    return a;
}

void clef_arena_destroy(clef_arena *a) {
    if (!a) return;
    clef_bufpool_destroy(a->pool);
    free(a);
}

void clef_arena_set_poison(clef_arena *a, int on) { a->poison = on != 0; }

static float *alloc_from(clef_arena *a, clef_bufpool *pool, size_t n) {
    if (n == 0) n = 1;
    if (n > (SIZE_MAX / 4) / sizeof(float)) return NULL;
    float *p = clef_bufpool_alloc(pool, n * sizeof(float));
    if (p && a->poison) { /* n floats of NaN (CLEF_ARENA_POISON_BITS) */
        uint32_t bits = CLEF_ARENA_POISON_BITS;
        for (size_t i = 0; i < n; i++) memcpy(&p[i], &bits, sizeof bits);
    }
    return p;
}

float *clef_arena_alloc(clef_arena *a, size_t n) { return alloc_from(a, a->pool, n); }
float *clef_arena_alloc_kept(clef_arena *a, size_t n) { return alloc_from(a, NULL, n); }

void clef_arena_free(clef_arena *a, float *p) {
    (void)a;
    clef_bufpool_free(p);
}

void clef_arena_get_stats(clef_arena *a, clef_arena_stats *st) {
    clef_bufpool_stats ps;
    clef_bufpool_get_stats(a->pool, &ps);
    st->held_bytes = ps.held_bytes;
    st->cached_bytes = ps.free_bytes;
    st->cached_blocks = ps.extents;
    st->hits = ps.hits;
    st->misses = ps.misses;
    st->released = ps.released;
    st->live_bytes = ps.live_bytes;
    st->peak_live_bytes = ps.peak_live_bytes;
}
