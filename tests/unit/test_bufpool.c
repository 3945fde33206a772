/* The buffer pool (src/base/bufpool.c; the CPU backend's cache on it: test_arena): reuse across
 * sizes, growth with headroom, folding, the cap, plain and own allocations when the pool cannot
 * serve (small, no pool, over the cap, out of memory), concurrent use, the process pool.
 * Linked with -Wl,--wrap=posix_memalign (Makefile) so that a test can fail the pool's allocations. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "base/bufpool.h"
#include "test.h"

#define KB ((size_t)1 << 10)
#define MB ((size_t)1 << 20)
#define MIN CLEF_BUFPOOL_REQUEST_MIN

int __real_posix_memalign(void **p, size_t align, size_t n);
static int fail_next; /* the next N posix_memalign calls fail */
int __wrap_posix_memalign(void **p, size_t align, size_t n) {
    if (fail_next > 0) {
        fail_next--;
        return ENOMEM;
    }
    return __real_posix_memalign(p, align, n);
}

static clef_bufpool_stats stats(clef_bufpool *p) {
    clef_bufpool_stats st;
    clef_bufpool_get_stats(p, &st);
    return st;
}

static void *hammer(void *arg) { /* alloc/write/check/free of varied sizes; non-NULL on a bad block */
    clef_bufpool *p = arg;
    uint32_t x = (uint32_t)(uintptr_t)&p; /* differs per thread */
    for (int i = 0; i < 2000; i++) {
        x = x * 1664525u + 1013904223u;
        size_t n = 100 * KB + (x >> 8) % (3 * MB);
        unsigned char *a = clef_bufpool_alloc(p, n), *b = clef_bufpool_alloc(p, n / 2 + 1);
        if (!a || !b || ((uintptr_t)a & 63) || ((uintptr_t)b & 63)) return p;
        unsigned char tag = (unsigned char)i;
        a[0] = a[n - 1] = tag;
        b[0] = b[n / 2] = (unsigned char)~tag;
        if (a[0] != tag || a[n - 1] != tag || b[0] != (unsigned char)~tag || b[n / 2] != (unsigned char)~tag) return p;
        clef_bufpool_free(b);
        clef_bufpool_free(a);
    }
    return NULL;
}

int main(void) {
    {   /* reuse: a freed block's memory serves the next request, of any size that fits; blocks of
         * different sizes share one chunk (size classes would each hold their own) */
        clef_bufpool *p = clef_bufpool_create(64 * MB, MIN);
        CHECK(p != NULL);
        unsigned char *a = clef_bufpool_alloc(p, 1 * MB);
        CHECK(a && ((uintptr_t)a & 63) == 0);
        a[0] = 1;
        a[MB - 1] = 2;
        clef_bufpool_free(a);
        clef_bufpool_stats st = stats(p);
        CHECK_MSG(st.chunks == 1 && st.held_bytes == CLEF_BUFPOOL_CHUNK_MIN && st.free_bytes == st.held_bytes &&
                      st.misses == 1 && st.live_bytes == 0,
                  "%zu chunks, %zu held, %zu free, %zu misses", st.chunks, st.held_bytes, st.free_bytes, st.misses);
        unsigned char *b = clef_bufpool_alloc(p, 1 * MB), *c = NULL, *d = NULL;
        CHECK(b == a);
        clef_bufpool_free(b);
        c = clef_bufpool_alloc(p, 300 * KB);
        d = clef_bufpool_alloc(p, 3 * MB);
        CHECK(c == a && d && d >= c + 300 * KB);
        st = stats(p);
        CHECK(st.hits == 3 && st.misses == 1 && st.chunks == 1 && st.held_bytes == CLEF_BUFPOOL_CHUNK_MIN);
        CHECK(st.live_bytes >= 3 * MB + 300 * KB && st.live_bytes < 3 * MB + 300 * KB + 3 * 4096);
        unsigned char *s = clef_bufpool_alloc(p, 1000); /* under min_bytes: plain, not counted */
        CHECK(s && ((uintptr_t)s & 63) == 0 && stats(p).live_bytes == st.live_bytes && stats(p).hits == 3);
        clef_bufpool_free(s);
        clef_bufpool_free(c);
        clef_bufpool_free(d);
        clef_bufpool_free(NULL);
        unsigned char *z = clef_bufpool_alloc(p, 0); /* 0 bytes: a valid pointer */
        CHECK(z != NULL);
        clef_bufpool_free(z);
        st = stats(p);
        CHECK(st.free_bytes == st.held_bytes && st.live_bytes == 0 && st.peak_live_bytes >= 3 * MB + 300 * KB);
        CHECK(clef_bufpool_alloc(p, SIZE_MAX - 8) == NULL);
        clef_bufpool_destroy(p);
    }
    {   /* growth: a new chunk is at least half of what stays held (headroom), so the next need that
         * is a little larger fits; a block larger than every free extent folds the wholly free chunks in */
        clef_bufpool *p = clef_bufpool_create(512 * MB, MIN);
        void *x = clef_bufpool_alloc(p, 20 * MB), *y = clef_bufpool_alloc(p, 20 * MB); /* 22 MiB chunks */
        clef_bufpool_stats st = stats(p);
        CHECK_MSG(x && y && st.chunks == 2 && st.held_bytes == 44 * MB, "%zu chunks, %zu held", st.chunks, st.held_bytes);
        void *z = clef_bufpool_alloc(p, 4 * MB); /* a 22-MiB chunk, half of the 44 held, not an 8-MiB one */
        st = stats(p);
        CHECK_MSG(z && st.chunks == 3 && st.held_bytes == 66 * MB, "%zu chunks, %zu held", st.chunks, st.held_bytes);
        void *w = clef_bufpool_alloc(p, 16 * MB); /* fits beside z */
        st = stats(p);
        CHECK(w && st.chunks == 3 && st.held_bytes == 66 * MB && st.misses == 3);
        clef_bufpool_free(w);
        clef_bufpool_free(z);
        clef_bufpool_free(y);
        void *big = clef_bufpool_alloc(p, 100 * MB); /* two chunks wholly free: folded into its chunk */
        st = stats(p);
        CHECK_MSG(big && st.chunks == 2 && st.held_bytes == 22 * MB + 146 * MB && st.released == 2,
                  "%zu chunks, %zu held, %zu released", st.chunks, st.held_bytes, st.released);
        clef_bufpool_free(big);
        clef_bufpool_free(x);
        clef_bufpool_destroy(p);
    }
    {   /* the cap: chunks never pass it (the headroom is dropped first); a block that still does not
         * fit is a mapping of its own, given back when freed */
        clef_bufpool *p = clef_bufpool_create(50 * MB, MIN);
        void *a = clef_bufpool_alloc(p, 20 * MB), *b = clef_bufpool_alloc(p, 4 * MB);
        clef_bufpool_stats st = stats(p);
        CHECK_MSG(a && b && st.held_bytes == 22 * MB + 12 * MB, "held %zu", st.held_bytes); /* 4 MiB with headroom: 12 */
        void *c = clef_bufpool_alloc(p, 14 * MB); /* with headroom 18 MiB would pass the cap; its own 16 fit */
        st = stats(p);
        CHECK_MSG(c && st.held_bytes == 50 * MB && st.own == 0, "held %zu own %zu", st.held_bytes, st.own);
        void *d = clef_bufpool_alloc(p, 10 * MB); /* no room: its own mapping */
        st = stats(p);
        CHECK(d && st.own == 1 && st.held_bytes == 50 * MB && st.live_bytes >= 48 * MB);
        clef_bufpool_free(d);
        st = stats(p);
        CHECK(st.released == 1 && st.held_bytes == 50 * MB);
        clef_bufpool_free(a);
        clef_bufpool_free(b);
        clef_bufpool_free(c);
        clef_bufpool_destroy(p);
    }
    {   /* no pool, and cap 0: plain blocks / own mappings, freed the same way */
        void *a = clef_bufpool_alloc(NULL, 4 * MB);
        CHECK(a != NULL);
        clef_bufpool_free(a);
        clef_bufpool *p = clef_bufpool_create(0, MIN);
        void *b = clef_bufpool_alloc(p, 4 * MB);
        clef_bufpool_stats st = stats(p);
        CHECK(b && st.held_bytes == 0 && st.own == 1);
        clef_bufpool_free(b);
        CHECK(stats(p).released == 1 && stats(p).live_bytes == 0);
        clef_bufpool_destroy(p);
        CHECK(clef_bufpool_alloc(NULL, SIZE_MAX - 8) == NULL);
    }
    {   /* out of memory: no chunk can be made, so a mapping of its own (nothing held for it); both
         * failing is NULL; the pool is sound after */
        clef_bufpool *p = clef_bufpool_create(64 * MB, MIN);
        fail_next = 1;
        void *a = clef_bufpool_alloc(p, 1 * MB);
        clef_bufpool_stats st = stats(p);
        CHECK_MSG(a && st.own == 1 && st.held_bytes == 0 && st.chunks == 0, "own %zu held %zu", st.own, st.held_bytes);
        clef_bufpool_free(a);
        fail_next = 2;
        CHECK(clef_bufpool_alloc(p, 1 * MB) == NULL);
        st = stats(p);
        CHECK(st.held_bytes == 0 && st.live_bytes == 0);
        void *b = clef_bufpool_alloc(p, 1 * MB);
        CHECK(b && stats(p).chunks == 1);
        clef_bufpool_free(b);
        clef_bufpool_destroy(p);
    }
    {   /* concurrent use from several threads under a cap some requests pass */
        clef_bufpool *p = clef_bufpool_create(24 * MB, MIN);
        int started = 0, bad = run_threads(hammer, p, 4, &started);
        CHECK(started == 4);
        CHECK(bad == 0);
        clef_bufpool_stats st = stats(p);
        CHECK_MSG(st.live_bytes == 0 && st.held_bytes <= 24 * MB && st.hits > st.misses && st.free_bytes == st.held_bytes,
                  "live %zu held %zu hits %zu misses %zu", st.live_bytes, st.held_bytes, st.hits, st.misses);
        clef_bufpool_destroy(p);
    }
    {   /* the process pool: NULL until set; a block goes back to its own pool */
        CHECK(clef_bufpool_process() == NULL);
        clef_bufpool *p = clef_bufpool_create(16 * MB, MIN);
        clef_bufpool_set_process(p);
        CHECK(clef_bufpool_process() == p);
        void *a = clef_bufpool_alloc(clef_bufpool_process(), 300 * KB);
        CHECK(a && stats(p).chunks == 1);
        clef_bufpool_set_process(NULL);
        clef_bufpool_free(a);
        CHECK(stats(p).live_bytes == 0 && stats(p).chunks == 1);
        clef_bufpool_destroy(p);
    }
    return TEST_END();
}
