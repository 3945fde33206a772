/* The buffer pool (src/base/bufpool.c; the CPU backend's cache on it: test_arena): reuse across
 * sizes, growth in place by what is missing, the cap, plain and own allocations when the pool
 * cannot serve (small, no pool, over the cap, out of memory), concurrent use, the process pool.
 * Linked with -Wl,--wrap=posix_memalign,--wrap=mmap,--wrap=mprotect (Makefile) so that a test can
 * fail the pool's allocations, its range's reservation and its growth. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <pthread.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "base/bufpool.h"
#include "test.h"

#define KB ((size_t)1 << 10)
#define MB ((size_t)1 << 20)
#define MIN CLEF_BUFPOOL_REQUEST_MIN

int __real_posix_memalign(void **p, size_t align, size_t n);
void *__real_mmap(void *a, size_t n, int prot, int flags, int fd, off_t off);
int __real_mprotect(void *a, size_t n, int prot);
static int fail_memalign, fail_mmap, fail_mprotect; /* the next N such calls fail */
static int fails(int *counter) {
    if (*counter <= 0) return 0;
    --*counter;
    errno = ENOMEM;
    return 1;
}
int __wrap_posix_memalign(void **p, size_t align, size_t n) {
    return fails(&fail_memalign) ? ENOMEM : __real_posix_memalign(p, align, n);
}
void *__wrap_mmap(void *a, size_t n, int prot, int flags, int fd, off_t off) {
    return fails(&fail_mmap) ? MAP_FAILED : __real_mmap(a, n, prot, flags, fd, off);
}
int __wrap_mprotect(void *a, size_t n, int prot) { return fails(&fail_mprotect) ? -1 : __real_mprotect(a, n, prot); }

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

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    void *block;
    unsigned delay_ms;
} late_free;
static void *free_later(void *arg) { /* frees a block after a delay: what a forward's end does */
    late_free *lf = arg;
    usleep(lf->delay_ms * 1000u);
    clef_bufpool_free(lf->block);
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
        CHECK_MSG(st.extents == 1 && st.held_bytes == CLEF_BUFPOOL_GROW_MIN && st.free_bytes == st.held_bytes &&
                      st.misses == 1 && st.live_bytes == 0,
                  "%zu extents, %zu held, %zu free, %zu misses", st.extents, st.held_bytes, st.free_bytes, st.misses);
        unsigned char *b = clef_bufpool_alloc(p, 1 * MB), *c = NULL, *d = NULL;
        CHECK(b == a);
        clef_bufpool_free(b);
        c = clef_bufpool_alloc(p, 300 * KB);
        d = clef_bufpool_alloc(p, 3 * MB);
        CHECK(c == a && d && d >= c + 300 * KB);
        st = stats(p);
        CHECK(st.hits == 3 && st.misses == 1 && st.extents == 1 && st.held_bytes == CLEF_BUFPOOL_GROW_MIN);
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
    {   /* growth in place: a block that fits no free extent extends the range by what the free
         * extent at its end lacks, in 2 MiB steps, right after what is held (the soak's pools
         * stepped by half of what they held with a chunk per misfit) */
        clef_bufpool *p = clef_bufpool_create(512 * MB, MIN);
        const size_t L20 = 20 * MB + 4 * KB; /* 20 MB and the header, in pages */
        char *x = clef_bufpool_alloc(p, 20 * MB), *y = clef_bufpool_alloc(p, 20 * MB);
        clef_bufpool_stats st = stats(p);
        CHECK_MSG(x && y && st.held_bytes == 42 * MB && st.extents == 1 && st.misses == 2,
                  "%zu held, %zu extents, %zu misses", st.held_bytes, st.extents, st.misses); /* 22, then 20 more */
        CHECK_MSG(y == x + L20, "y follows x in the range (%p, %p)", (void *)x, (void *)y);
        char *z = clef_bufpool_alloc(p, 4 * MB); /* 2 MiB - 8 KiB free at the end: 4 MiB more, not 22 */
        st = stats(p);
        CHECK_MSG(z == y + L20 && st.held_bytes == 46 * MB, "%zu held", st.held_bytes);
        clef_bufpool_free(x);
        char *w = clef_bufpool_alloc(p, 16 * MB); /* fits where x was */
        st = stats(p);
        CHECK(w == x && st.held_bytes == 46 * MB && st.misses == 3 && st.hits == 1 && st.extents == 2);
        clef_bufpool_free(w);
        clef_bufpool_free(z);
        clef_bufpool_free(y);
        st = stats(p);
        CHECK(st.extents == 1 && st.free_bytes == 46 * MB && st.live_bytes == 0);
        char *big = clef_bufpool_alloc(p, 100 * MB); /* all 46 free from the start: 56 MiB more */
        st = stats(p);
        CHECK_MSG(big == x && st.held_bytes == 102 * MB && st.released == 0, "%zu held", st.held_bytes);
        clef_bufpool_free(big);
        clef_bufpool_destroy(p);
    }
    {   /* the cap: the range never passes it (near it, a step is just what is missing); a block
         * that still does not fit is a mapping of its own, given back when freed */
        clef_bufpool *p = clef_bufpool_create(49 * MB, MIN);
        void *a = clef_bufpool_alloc(p, 20 * MB), *b = clef_bufpool_alloc(p, 4 * MB), *c = clef_bufpool_alloc(p, 20 * MB);
        clef_bufpool_stats st = stats(p);
        CHECK_MSG(a && b && c && st.held_bytes == 46 * MB && st.own == 0, "held %zu", st.held_bytes); /* 22 + 4 + 20 */
        void *d = clef_bufpool_alloc(p, 10 * MB); /* 8 MiB + 16 KiB missing: past the cap */
        st = stats(p);
        CHECK(d && st.own == 1 && st.held_bytes == 46 * MB && st.live_bytes >= 54 * MB);
        clef_bufpool_free(d);
        st = stats(p);
        CHECK(st.released == 1 && st.held_bytes == 46 * MB);
        void *e = clef_bufpool_alloc(p, 4 * MB); /* 2 MiB + 16 KiB missing: a 4-MiB step would pass 49 */
        st = stats(p);
        CHECK_MSG(e && st.own == 1 && st.held_bytes == 48 * MB + 16 * KB, "held %zu", st.held_bytes);
        clef_bufpool_free(a);
        clef_bufpool_free(b);
        clef_bufpool_free(c);
        clef_bufpool_free(e);
        clef_bufpool_destroy(p);
    }
    {   /* a cap past the machine's memory: the range is reserved for the memory only, and serves */
        clef_bufpool *p = clef_bufpool_create((size_t)1 << 62, MIN);
        void *a = clef_bufpool_alloc(p, 1 * MB);
        CHECK(a && stats(p).held_bytes == CLEF_BUFPOOL_GROW_MIN && stats(p).own == 0);
        clef_bufpool_free(a);
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
    {   /* out of memory: the range cannot be reserved, or cannot grow: a mapping of its own
         * (nothing held for it); that failing too is NULL; the pool is sound after */
        clef_bufpool *p = clef_bufpool_create(64 * MB, MIN);
        fail_mmap = 1;
        void *a = clef_bufpool_alloc(p, 1 * MB);
        clef_bufpool_stats st = stats(p);
        CHECK_MSG(a && st.own == 1 && st.held_bytes == 0 && st.extents == 0, "own %zu held %zu", st.own, st.held_bytes);
        clef_bufpool_free(a);
        fail_mprotect = 1;
        void *b = clef_bufpool_alloc(p, 1 * MB);
        st = stats(p);
        CHECK_MSG(b && st.own == 2 && st.held_bytes == 0, "own %zu held %zu", st.own, st.held_bytes);
        clef_bufpool_free(b);
        fail_mprotect = 1;
        fail_memalign = 1;
        CHECK(clef_bufpool_alloc(p, 1 * MB) == NULL);
        st = stats(p);
        CHECK(st.held_bytes == 0 && st.live_bytes == 0 && fail_mmap == 0 && fail_mprotect == 0 && fail_memalign == 0);
        void *c = clef_bufpool_alloc(p, 1 * MB);
        CHECK(c && stats(p).held_bytes == CLEF_BUFPOOL_GROW_MIN);
        clef_bufpool_free(c);
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
    {   /* the budget's admission: at once below it (and with no pool or no budget); a wait that a
         * free ends; a wait that times out; blocks mapped on their own count too */
        CHECK(clef_bufpool_admit(NULL) == 0);
        clef_bufpool *p = clef_bufpool_create(64 * MB, MIN);
        void *a = clef_bufpool_alloc(p, 3 * MB);
        CHECK(clef_bufpool_admit(p) == 0); /* no budget: never waits, whatever is in use (counted all the same) */
        clef_bufpool_set_budget(p, 4 * MB, 0.25);
        CHECK(clef_bufpool_admit(p) == 0); /* 3 MB in use, under 4 */
        void *b = clef_bufpool_alloc(p, 2 * MB); /* an admitted request takes what it needs: 5 MB now */
        clef_bufpool_stats st = stats(p);
        CHECK_MSG(st.budget == 4 * MB && st.admits == 2 && st.waited == 0 && st.live_bytes > 4 * MB,
                  "budget %zu admits %zu waited %zu live %zu", st.budget, st.admits, st.waited, st.live_bytes);
        double t0 = now_s();
        CHECK(clef_bufpool_admit(p) == -1); /* nothing freed: refused after wait_s */
        double waited = now_s() - t0;
        CHECK_MSG(waited >= 0.24 && waited < 5, "waited %.3f s", waited);
        st = stats(p);
        CHECK(st.admits == 3 && st.waited == 1 && st.timeouts == 1);
        /* a free that leaves it at the budget does not admit; the next one, under it, does */
        late_free lf = {b, 50};
        pthread_t th;
        CHECK(pthread_create(&th, NULL, free_later, &lf) == 0);
        clef_bufpool_set_budget(p, 4 * MB, 30); /* a long deadline: only the free can end the wait */
        t0 = now_s();
        CHECK(clef_bufpool_admit(p) == 0); /* 5 MB in use, then 3 MB after the free */
        waited = now_s() - t0;
        pthread_join(th, NULL);
        CHECK_MSG(waited >= 0.04 && waited < 5, "waited %.3f s for the free", waited);
        st = stats(p);
        CHECK(st.admits == 4 && st.waited == 2 && st.timeouts == 1);
        clef_bufpool_free(a);
        clef_bufpool_destroy(p);

        /* --request-pool 0: nothing held, but blocks still count for the budget */
        p = clef_bufpool_create(0, MIN);
        clef_bufpool_set_budget(p, 1 * MB, 0.05);
        a = clef_bufpool_alloc(p, 2 * MB);
        st = stats(p);
        CHECK(a && st.own == 1 && st.held_bytes == 0);
        CHECK(clef_bufpool_admit(p) == -1);
        late_free lf2 = {a, 50};
        clef_bufpool_set_budget(p, 1 * MB, 0); /* no deadline */
        CHECK(pthread_create(&th, NULL, free_later, &lf2) == 0);
        CHECK(clef_bufpool_admit(p) == 0);
        pthread_join(th, NULL);
        clef_bufpool_destroy(p);
    }
    {   /* the budget is the range's first growth (at most the cap): committed at the first block */
        clef_bufpool *p = clef_bufpool_create(64 * MB, MIN);
        clef_bufpool_set_budget(p, 19 * MB, 1);
        void *a = clef_bufpool_alloc(p, 300 * KB);
        CHECK_MSG(a && stats(p).held_bytes == 20 * MB, "held %zu", stats(p).held_bytes); /* 2 MiB steps */
        void *b = clef_bufpool_alloc(p, 15 * MB);
        CHECK(b && stats(p).held_bytes == 20 * MB && stats(p).misses == 1);
        clef_bufpool_free(a);
        clef_bufpool_free(b);
        clef_bufpool_destroy(p);
        p = clef_bufpool_create(10 * MB, MIN);
        clef_bufpool_set_budget(p, 64 * MB, 1);
        a = clef_bufpool_alloc(p, 300 * KB);
        CHECK_MSG(a && stats(p).held_bytes == 10 * MB, "held %zu", stats(p).held_bytes);
        clef_bufpool_free(a);
        clef_bufpool_destroy(p);
        p = clef_bufpool_create(64 * MB, MIN);
        clef_bufpool_set_budget(p, 1 * MB, 1); /* a small budget: the usual first growth */
        a = clef_bufpool_alloc(p, 300 * KB);
        CHECK(a && stats(p).held_bytes == CLEF_BUFPOOL_GROW_MIN);
        clef_bufpool_free(a);
        clef_bufpool_destroy(p);
    }
    {   /* the process pool: NULL until set; a block goes back to its own pool */
        CHECK(clef_bufpool_process() == NULL);
        clef_bufpool *p = clef_bufpool_create(16 * MB, MIN);
        clef_bufpool_set_process(p);
        CHECK(clef_bufpool_process() == p);
        void *a = clef_bufpool_alloc(clef_bufpool_process(), 300 * KB);
        CHECK(a && stats(p).held_bytes == CLEF_BUFPOOL_GROW_MIN);
        clef_bufpool_set_process(NULL);
        clef_bufpool_free(a);
        CHECK(stats(p).live_bytes == 0 && stats(p).held_bytes == CLEF_BUFPOOL_GROW_MIN);
        clef_bufpool_destroy(p);
    }
    return TEST_END();
}
