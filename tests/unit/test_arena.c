/* The CPU backend's buffer cache (src/compute/cpu/cpu_arena.c): reuse, merging, the cap,
 * small blocks, and concurrent use. */
#include <stdint.h>
#include <stdlib.h>

#include "compute/cpu/cpu_arena.h"
#include "test.h"

#define MB ((size_t)1 << 20)

static void *hammer(void *arg) { /* alloc/write/free of varied sizes; returns non-NULL on a bad block */
    clef_arena *a = arg;
    for (int i = 0; i < 300; i++) {
        size_t n = ((size_t)(i % 7) + 1) * (MB / 4) + (size_t)i;
        float *p = clef_arena_alloc(a, n), *q = clef_arena_alloc(a, n / 3 + 1);
        if (!p || !q || ((uintptr_t)p & 63) || ((uintptr_t)q & 63)) return a;
        p[0] = p[n - 1] = (float)i;
        q[0] = (float)i;
        if (p[0] != (float)i || q[0] != (float)i) return a;
        clef_arena_free(a, q);
        clef_arena_free(a, p);
    }
    return NULL;
}

int main(void) {
    clef_arena_stats st;
    {
        clef_arena *a = clef_arena_create(256 * MB);
        CHECK(a != NULL);
        /* a large block comes back for the same request, and for a smaller one (U floats: 1 MiB) */
        const size_t U = MB / 4;
        float *p = clef_arena_alloc(a, 2 * U);
        CHECK(p && ((uintptr_t)p & 63) == 0);
        p[0] = 1.0f;
        p[2 * U - 1] = 2.0f;
        clef_arena_free(a, p);
        clef_arena_get_stats(a, &st);
        CHECK(st.cached_blocks == 1 && st.held_bytes == CLEF_ARENA_GROW_MIN && st.cached_bytes == st.held_bytes &&
              st.misses == 1);
        float *p2 = clef_arena_alloc(a, 2 * U);
        CHECK(p2 == p);
        clef_arena_free(a, p2);
        float *p3 = clef_arena_alloc(a, U);
        CHECK(p3 == p);
        clef_arena_get_stats(a, &st);
        CHECK(st.hits == 2 && st.misses == 1 && st.live_bytes >= MB && st.live_bytes < MB + 8192);
        clef_arena_free(a, p3);
        /* blocks alive at once are distinct and do not overlap; freed neighbours merge, so one block
         * of their combined size fits where they were */
        float *b1 = clef_arena_alloc(a, 2 * U), *b2 = clef_arena_alloc(a, 2 * U), *b3 = clef_arena_alloc(a, U);
        CHECK(b1 == p && b2 && b3 && (char *)b2 >= (char *)(b1 + 2 * U) && (char *)b3 >= (char *)(b2 + 2 * U));
        clef_arena_free(a, b2);
        clef_arena_free(a, b1);
        float *big = clef_arena_alloc(a, 4 * U);
        CHECK(big == p);
        clef_arena_free(a, big);
        clef_arena_free(a, b3);
        clef_arena_get_stats(a, &st);
        CHECK_MSG(st.misses == 1 && st.cached_blocks == 1 && st.cached_bytes == st.held_bytes && st.live_bytes == 0,
                  "wholly free again, in one piece: %zu misses, %zu extents, %zu of %zu bytes free", st.misses,
                  st.cached_blocks, st.cached_bytes, st.held_bytes);
        CHECK(st.peak_live_bytes >= 5 * MB);
        /* a block larger than every free extent grows the range in place by what the free extent
         * at its end lacks (2 MiB steps): the free 8 MiB become the block's start */
        float *huge = clef_arena_alloc(a, 20 * MB); /* 80 MiB + a page */
        CHECK(huge == p);
        clef_arena_get_stats(a, &st);
        CHECK_MSG(st.cached_blocks == 1 && st.held_bytes == 82 * MB && st.released == 0,
                  "%zu extents, %zu bytes held, %zu released", st.cached_blocks, st.held_bytes, st.released);
        float *huge2 = clef_arena_alloc(a, 20 * MB); /* right after it: 80 MiB more */
        clef_arena_get_stats(a, &st);
        CHECK(huge2 == huge + 20 * MB + 1024 && st.cached_blocks == 1 && st.held_bytes == 162 * MB);
        clef_arena_free(a, huge2);
        clef_arena_free(a, huge);
        /* small blocks: aligned, not from chunks */
        float *t = clef_arena_alloc(a, 10), *z = clef_arena_alloc(a, 0);
        CHECK(t && z && ((uintptr_t)t & 63) == 0 && ((uintptr_t)z & 63) == 0);
        clef_arena_get_stats(a, &st);
        size_t before = st.cached_bytes;
        clef_arena_free(a, t);
        clef_arena_free(a, z);
        clef_arena_free(a, NULL);
        clef_arena_get_stats(a, &st);
        CHECK(st.cached_bytes == before);
        CHECK(clef_arena_alloc(a, SIZE_MAX / 2) == NULL);
        clef_arena_destroy(a);
    }
    {   /* the cap: what is held never passes it; a block that cannot fit is a mapping of its own,
         * given back when freed */
        clef_arena *a = clef_arena_create(128 * MB);
        CHECK(a != NULL);
        float *x = clef_arena_alloc(a, 15 * MB), *y = clef_arena_alloc(a, 15 * MB); /* 60 MiB + a page each: 62, then 60 more */
        clef_arena_get_stats(a, &st);
        CHECK(x && y && st.cached_blocks == 1 && st.held_bytes == 122 * MB);
        float *w = clef_arena_alloc(a, 10 * MB); /* 38 MiB more would pass the cap: its own mapping */
        clef_arena_get_stats(a, &st);
        CHECK(w && st.held_bytes == 122 * MB && st.live_bytes >= 160 * MB);
        clef_arena_free(a, w);
        clef_arena_get_stats(a, &st);
        CHECK(st.released == 1 && st.held_bytes == 122 * MB);
        clef_arena_free(a, x);
        float *v = clef_arena_alloc(a, 30 * MB); /* 120 MiB: x's 60 free, y in the way: its own mapping */
        clef_arena_get_stats(a, &st);
        CHECK(v && st.held_bytes == 122 * MB && st.released == 1);
        clef_arena_free(a, v);
        clef_arena_free(a, y);
        float *u = clef_arena_alloc(a, 30 * MB); /* x's and y's extents merged: it fits in the 122 MiB held */
        clef_arena_get_stats(a, &st);
        CHECK_MSG(u && st.cached_blocks == 1 && st.held_bytes == 122 * MB, "%zu chunks, %zu bytes",
                  st.cached_blocks, st.held_bytes);
        clef_arena_free(a, u);
        clef_arena_destroy(a);
    }
    {   /* forwards of other shapes after a larger one fit in what it left: nothing new is mapped
         * (with blocks cached whole by size class, each new shape made new blocks) */
        clef_arena *a = clef_arena_create(256 * MB);
        CHECK(a != NULL);
        size_t shape[5][3] = {{4 * MB, 2 * MB, MB}, {MB, MB, MB}, {3 * MB / 4, 2 * MB, MB / 2},
                              {MB / 4 + 1, MB / 3, 3 * MB}, {4 * MB, MB / 2, MB / 2}};
        size_t misses_after_first = 0, held_after_first = 0;
        for (int f = 0; f < 5; f++) {
            float *live[3];
            for (int i = 0; i < 3; i++) {
                live[i] = clef_arena_alloc(a, shape[f][i]);
                CHECK(live[i] != NULL);
                if (live[i]) live[i][shape[f][i] - 1] = 1.0f;
            }
            for (int i = 0; i < 3; i++) clef_arena_free(a, live[i]);
            clef_arena_get_stats(a, &st);
            if (f == 0) {
                misses_after_first = st.misses;
                held_after_first = st.held_bytes;
            }
        }
        CHECK_MSG(st.misses == misses_after_first && st.held_bytes == held_after_first,
                  "%zu misses, %zu bytes held after the first forward; %zu, %zu after all", misses_after_first,
                  held_after_first, st.misses, st.held_bytes);
        clef_arena_destroy(a);
    }
    {   /* cap 0: nothing is kept */
        clef_arena *a = clef_arena_create(0);
        float *p = clef_arena_alloc(a, 2 * MB);
        CHECK(p != NULL);
        clef_arena_free(a, p);
        clef_arena_get_stats(a, &st);
        CHECK(st.cached_blocks == 0 && st.held_bytes == 0 && st.released == 1 && st.live_bytes == 0);
        clef_arena_destroy(a);
    }
    {   /* concurrent alloc/free from several threads */
        clef_arena *a = clef_arena_create(40 * MB);
        int started = 0, bad = run_threads(hammer, a, 4, &started);
        CHECK(started == 4);
        CHECK(bad == 0);
        clef_arena_get_stats(a, &st);
        CHECK(st.held_bytes <= 40 * MB && st.live_bytes == 0);
        clef_arena_destroy(a);
    }
    /* poison mode: every block handed out, fresh or reused, small or large, is NaN */
    {
        clef_arena *p = clef_arena_create((size_t)64 << 20);
        CHECK(p != NULL);
        clef_arena_set_poison(p, 1);
        int all_nan = 1;
        size_t sizes[4] = {10, 300000, 300000, 1000};
        for (int r = 0; r < 4; r++) {
            float *b = clef_arena_alloc(p, sizes[r]);
            CHECK(b != NULL);
            if (!b) break;
            uint32_t u;
            for (size_t i2 = 0; i2 < sizes[r]; i2++) {
                memcpy(&u, &b[i2], sizeof u);
                all_nan &= u == CLEF_ARENA_POISON_BITS && b[i2] != b[i2];
            }
            memset(b, 0, sizes[r] * sizeof *b); /* written; the next hand-out of this block is NaN again */
            clef_arena_free(p, b);
        }
        clef_arena_stats ps;
        clef_arena_get_stats(p, &ps);
        CHECK_MSG(all_nan, "every float of every block handed out is the poison NaN");
        CHECK_MSG(ps.hits >= 1, "the large block was reused (%zu hits)", ps.hits);
        clef_arena_destroy(p);
    }
    /* kept blocks (ops->alloc_kept: the state cache's states) never come from the held chunks, so
     * a long-lived one cannot split a chunk the forwards share; poisoned like the others */
    {
        clef_arena *p = clef_arena_create((size_t)64 << 20);
        CHECK(p != NULL);
        clef_arena_set_poison(p, 1);
        float *act = clef_arena_alloc(p, 3 * MB / 4); /* one chunk held, this block live in it */
        clef_arena_stats before, after;
        clef_arena_get_stats(p, &before);
        size_t n = 2 * MB / 4;
        float *kept = clef_arena_alloc_kept(p, n); /* would fit in the chunk's free space */
        CHECK(kept != NULL && act != NULL);
        clef_arena_get_stats(p, &after);
        CHECK_MSG(after.held_bytes == before.held_bytes && after.live_bytes == before.live_bytes && after.hits == before.hits,
                  "a kept block is not carved from the pool (held %zu -> %zu, live %zu -> %zu)", before.held_bytes,
                  after.held_bytes, before.live_bytes, after.live_bytes);
        CHECK(kept == NULL || ((uintptr_t)kept % 64) == 0);
        int nan = 1;
        for (size_t i2 = 0; kept && i2 < n; i2 += 4096) nan &= kept[i2] != kept[i2];
        CHECK_MSG(nan, "a kept block is poisoned too");
        clef_arena_free(p, act);
        clef_arena_free(p, kept); /* the same free for both kinds */
        clef_arena_get_stats(p, &after);
        CHECK(after.live_bytes == 0);
        clef_arena_destroy(p);
    }
    return TEST_END();
}
