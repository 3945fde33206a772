/* The CPU backend's buffer cache (src/compute/cpu/cpu_arena.c): reuse, size classes, the cap,
 * small blocks, and concurrent use. */
#include <pthread.h>
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
        clef_arena *a = clef_arena_create(64 * MB);
        CHECK(a != NULL);
        /* a large block comes back for the same request, and for a slightly smaller one */
        float *p = clef_arena_alloc(a, 2 * MB);
        CHECK(p && ((uintptr_t)p & 63) == 0);
        p[0] = 1.0f;
        p[2 * MB - 1] = 2.0f;
        clef_arena_free(a, p);
        clef_arena_get_stats(a, &st);
        CHECK(st.cached_blocks == 1 && st.cached_bytes >= 8 * MB && st.misses == 1);
        float *p2 = clef_arena_alloc(a, 2 * MB);
        CHECK(p2 == p);
        clef_arena_free(a, p2);
        float *p3 = clef_arena_alloc(a, 2 * MB - 1000);
        CHECK(p3 == p);
        /* a much smaller request takes the cached block too (its pages are resident anyway) */
        clef_arena_free(a, p3);
        float *s = clef_arena_alloc(a, MB / 2);
        CHECK(s == p);
        clef_arena_get_stats(a, &st);
        CHECK(st.hits == 3 && st.misses == 1 && st.cached_blocks == 0);
        CHECK(st.live_bytes >= 8 * MB && st.peak_live_bytes == st.live_bytes);
        clef_arena_free(a, s);
        /* two blocks alive at once are distinct; the smallest fitting one is chosen */
        float *b1 = clef_arena_alloc(a, 2 * MB), *b2 = clef_arena_alloc(a, MB / 2);
        CHECK(b1 == p && b2 && b2 != b1);
        clef_arena_free(a, b1);
        clef_arena_free(a, b2);
        float *sm = clef_arena_alloc(a, MB / 2);
        CHECK(sm == b2);
        clef_arena_free(a, sm);
        clef_arena_get_stats(a, &st);
        CHECK(st.live_bytes == 0 && st.peak_live_bytes > 8 * MB);
        /* over the cap, the oldest blocks are released */
        float *big[5];
        for (int i = 0; i < 5; i++) big[i] = clef_arena_alloc(a, 4 * MB); /* 16 MiB each */
        for (int i = 0; i < 5; i++) clef_arena_free(a, big[i]);
        clef_arena_get_stats(a, &st);
        CHECK_MSG(st.cached_bytes <= 64 * MB, "cached %zu", st.cached_bytes);
        CHECK(st.released >= 2);
        float *again = clef_arena_alloc(a, 4 * MB);
        CHECK(again == big[4] || again == big[3] || again == big[2] || again == big[1]);
        clef_arena_free(a, again);
        /* small blocks: aligned, not cached */
        float *t = clef_arena_alloc(a, 10), *z = clef_arena_alloc(a, 0);
        CHECK(t && z && ((uintptr_t)t & 63) == 0 && ((uintptr_t)z & 63) == 0);
        size_t before = st.cached_blocks;
        clef_arena_free(a, t);
        clef_arena_free(a, z);
        clef_arena_free(a, NULL);
        clef_arena_get_stats(a, &st);
        CHECK(st.cached_blocks == before);
        CHECK(clef_arena_alloc(a, SIZE_MAX / 2) == NULL);
        clef_arena_destroy(a);
    }
    {   /* forwards of other shapes after a larger one reuse its blocks: nothing new is mapped, the
         * cache does not grow (it did, by a block per shape, while blocks over twice a request
         * were refused) */
        clef_arena *a = clef_arena_create(256 * MB);
        CHECK(a != NULL);
        size_t shape[4][3] = {{4 * MB, 2 * MB, MB}, {MB, MB, MB}, {3 * MB / 4, 2 * MB, MB / 2}, {MB / 4 + 1, MB / 3, 3 * MB}};
        size_t misses_after_first = 0, bytes_after_first = 0;
        for (int f = 0; f < 4; f++) {
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
                bytes_after_first = st.cached_bytes;
            }
        }
        CHECK_MSG(st.misses == misses_after_first && st.cached_bytes == bytes_after_first,
                  "%zu misses, %zu bytes cached after the first forward; %zu, %zu after all", misses_after_first,
                  bytes_after_first, st.misses, st.cached_bytes);
        clef_arena_destroy(a);
    }
    {   /* cap 0: nothing is kept */
        clef_arena *a = clef_arena_create(0);
        float *p = clef_arena_alloc(a, 2 * MB);
        CHECK(p != NULL);
        clef_arena_free(a, p);
        clef_arena_get_stats(a, &st);
        CHECK(st.cached_blocks == 0 && st.cached_bytes == 0 && st.released == 1);
        clef_arena_destroy(a);
    }
    {   /* concurrent alloc/free from several threads */
        clef_arena *a = clef_arena_create(40 * MB);
        pthread_t th[4];
        int started = 0;
        for (int i = 0; i < 4; i++) started += pthread_create(&th[i], NULL, hammer, a) == 0;
        CHECK(started == 4);
        int bad = 0;
        for (int i = 0; i < started; i++) {
            void *r = NULL;
            pthread_join(th[i], &r);
            bad += r != NULL;
        }
        CHECK(bad == 0);
        clef_arena_get_stats(a, &st);
        CHECK(st.cached_bytes <= 40 * MB && st.hits > 0);
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
    return TEST_END();
}
