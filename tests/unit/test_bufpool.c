/* The request-buffer pool (src/base/bufpool.c): reuse, the cap, eviction, plain allocation when
 * the pool cannot serve (small, over the cap, no pool, out of memory), concurrent use.
 * Linked with -Wl,--wrap=posix_memalign (Makefile) so that a test can fail the pool's allocations. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "base/bufpool.h"
#include "test.h"

#define KB ((size_t)1 << 10)
#define MB ((size_t)1 << 20)

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

static void *hammer(void *arg) { /* alloc/write/check/free of varied sizes; non-NULL on a bad buffer */
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
    {   /* reuse: a freed buffer serves the next request of its class, and of a class up to 2x smaller */
        clef_bufpool *p = clef_bufpool_create(16 * MB);
        CHECK(p != NULL);
        unsigned char *a = clef_bufpool_alloc(p, 200 * KB);
        CHECK(a && ((uintptr_t)a & 63) == 0);
        a[0] = 1;
        a[200 * KB - 1] = 2;
        clef_bufpool_stats st = stats(p);
        CHECK_MSG(st.made == 1 && st.buffers == 1 && st.held_bytes >= 200 * KB && st.held_bytes <= 250 * KB &&
                      st.live_bytes == st.held_bytes,
                  "made %zu, %zu buffers, held %zu, live %zu", st.made, st.buffers, st.held_bytes, st.live_bytes);
        clef_bufpool_free(a);
        st = stats(p);
        CHECK(st.live_bytes == 0 && st.held_bytes >= 200 * KB);
        unsigned char *b = clef_bufpool_alloc(p, 200 * KB);
        CHECK(b == a);
        clef_bufpool_free(b);
        unsigned char *c = clef_bufpool_alloc(p, 130 * KB); /* a smaller class: the same buffer */
        CHECK(c == a);
        unsigned char *d = clef_bufpool_alloc(p, 200 * KB); /* the one free buffer is in use: a new one */
        CHECK(d && d != a);
        st = stats(p);
        CHECK_MSG(st.hits == 2 && st.made == 2 && st.buffers == 2 && st.plain == 0, "hits %zu made %zu", st.hits, st.made);
        clef_bufpool_free(c);
        clef_bufpool_free(d);
        unsigned char *f = clef_bufpool_alloc(p, 100 * KB); /* under CLEF_BUFPOOL_MIN: plain, not counted */
        CHECK(f && ((uintptr_t)f & 63) == 0);
        clef_bufpool_free(f);
        st = stats(p);
        CHECK(st.buffers == 2 && st.plain == 0 && st.hits == 2);
        /* a free buffer goes to a request of its class or one up to four classes (2x) below, never further */
        unsigned char *m = clef_bufpool_alloc(p, 1 * MB); /* the 1 MiB class */
        clef_bufpool_free(m);
        unsigned char *n4 = clef_bufpool_alloc(p, 400 * KB); /* 448 KiB: five classes below: a new buffer */
        unsigned char *n6 = clef_bufpool_alloc(p, 600 * KB); /* 640 KiB: four below: the 1 MiB one */
        CHECK(m && n4 && n6 && n4 != m && n6 == m);
        clef_bufpool_free(n4);
        clef_bufpool_free(n6);
        clef_bufpool_free(NULL);
        unsigned char *g = clef_bufpool_alloc(p, 0); /* 0 bytes: a valid pointer */
        CHECK(g != NULL);
        clef_bufpool_free(g);
        CHECK(stats(p).peak_live_bytes >= 2 * 200 * KB);
        clef_bufpool_destroy(p);
    }
    {   /* the cap: what is held never passes it; a buffer that would first evicts free ones (the
         * largest first); one that still cannot fit, or is larger than the cap, is plain */
        clef_bufpool *p = clef_bufpool_create(1 * MB);
        void *a = clef_bufpool_alloc(p, 600 * KB), *b = clef_bufpool_alloc(p, 600 * KB); /* 640 KiB each */
        clef_bufpool_stats st = stats(p);
        CHECK_MSG(a && b && st.made == 1 && st.plain == 1 && st.held_bytes == 640 * KB, "made %zu plain %zu held %zu",
                  st.made, st.plain, st.held_bytes);
        clef_bufpool_free(b); /* plain: given back, the pool unchanged */
        clef_bufpool_free(a);
        st = stats(p);
        CHECK(st.held_bytes == 640 * KB && st.buffers == 1 && st.live_bytes == 0);
        void *big = clef_bufpool_alloc(p, 2 * MB); /* over the cap: plain, and nothing evicted for it */
        st = stats(p);
        CHECK(big && st.plain == 2 && st.evicted == 0 && st.held_bytes == 640 * KB);
        clef_bufpool_free(big);
        void *c = clef_bufpool_alloc(p, 880 * KB); /* 896 KiB: no room beside the free 640 KiB one: evicted */
        st = stats(p);
        CHECK_MSG(c && st.evicted == 1 && st.held_bytes == 896 * KB && st.buffers == 1, "evicted %zu held %zu",
                  st.evicted, st.held_bytes);
        clef_bufpool_free(c);
        CHECK(stats(p).held_bytes <= 1 * MB);
        clef_bufpool_destroy(p);
    }
    {   /* no pool, and a pool of cap 0: every buffer plain, and freed the same way */
        void *a = clef_bufpool_alloc(NULL, 4 * MB);
        CHECK(a != NULL);
        clef_bufpool_free(a);
        clef_bufpool *p = clef_bufpool_create(0);
        void *b = clef_bufpool_alloc(p, 4 * MB);
        clef_bufpool_stats st = stats(p);
        CHECK(b && st.held_bytes == 0 && st.plain == 1);
        clef_bufpool_free(b);
        clef_bufpool_destroy(p);
        CHECK(clef_bufpool_alloc(NULL, SIZE_MAX - 8) == NULL);
    }
    {   /* out of memory: the pool cannot make its buffer, so a plain one (and nothing held for it);
         * both failing is NULL; the pool is sound after */
        clef_bufpool *p = clef_bufpool_create(16 * MB);
        fail_next = 1;
        void *a = clef_bufpool_alloc(p, 1 * MB);
        clef_bufpool_stats st = stats(p);
        CHECK_MSG(a && st.plain == 1 && st.made == 0 && st.held_bytes == 0 && st.buffers == 0,
                  "plain %zu made %zu held %zu", st.plain, st.made, st.held_bytes);
        clef_bufpool_free(a);
        fail_next = 2;
        CHECK(clef_bufpool_alloc(p, 1 * MB) == NULL);
        st = stats(p);
        CHECK(st.held_bytes == 0 && st.live_bytes == 0);
        void *b = clef_bufpool_alloc(p, 1 * MB);
        CHECK(b && stats(p).made == 1);
        clef_bufpool_free(b);
        clef_bufpool_destroy(p);
    }
    {   /* concurrent use from several threads under a cap some requests pass */
        clef_bufpool *p = clef_bufpool_create(24 * MB);
        pthread_t th[4];
        int started = 0;
        for (int i = 0; i < 4; i++) started += pthread_create(&th[i], NULL, hammer, p) == 0;
        CHECK(started == 4);
        int bad = 0;
        for (int i = 0; i < started; i++) {
            void *r = NULL;
            pthread_join(th[i], &r);
            bad += r != NULL;
        }
        CHECK(bad == 0);
        clef_bufpool_stats st = stats(p);
        CHECK_MSG(st.live_bytes == 0 && st.held_bytes <= 24 * MB && st.hits > st.made,
                  "live %zu held %zu hits %zu made %zu", st.live_bytes, st.held_bytes, st.hits, st.made);
        clef_bufpool_destroy(p);
    }
    {   /* the process pool: NULL until set */
        CHECK(clef_bufpool_process() == NULL);
        clef_bufpool *p = clef_bufpool_create(8 * MB);
        clef_bufpool_set_process(p);
        CHECK(clef_bufpool_process() == p);
        void *a = clef_bufpool_alloc(clef_bufpool_process(), 300 * KB);
        CHECK(a && stats(p).made == 1);
        clef_bufpool_set_process(NULL);
        clef_bufpool_free(a); /* back to its own pool */
        CHECK(stats(p).live_bytes == 0 && stats(p).buffers == 1);
        clef_bufpool_destroy(p);
    }
    return TEST_END();
}
