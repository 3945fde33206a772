/* Activation buffers of the CPU backend (ops->alloc / ops->free), kept for reuse.
 *
 * A forward allocates a few buffers of T x width floats per op and layer and frees them at the
 * end; fresh large allocations are new anonymous mappings, so every forward paid for page faults
 * and the kernel's clearing of every page it wrote (~3% of a 2,048-token prefill). Freed large
 * blocks are kept in a cache and handed out again for requests of the same size class, so a
 * steady stream of forwards maps no new memory.
 *
 * - Large blocks (>= CLEF_ARENA_MIN_BYTES) are rounded up to a size class (3 significant bits,
 *   <= 12.5% of virtual slack, never written) and cached on free; a request takes the smallest
 *   cached block that fits, however much larger: a cached block's pages are resident either way,
 *   and refusing a block as too large only made a new one beside it (with a "at most half
 *   unused" rule, a 10-minute soak held 190 MB cached for forwards that never had more than
 *   94 MB live at once; now what is kept converges to the largest forward's blocks). (Transparent huge pages for the blocks
 *   made the first forward slower: docs/rejected-experiments.md.)
 * - The cache holds at most `cap` bytes; over it, the least recently freed blocks are released.
 * - Small blocks go straight to malloc (glibc reuses them without clearing).
 * - Reused memory is NOT cleared: callers never relied on zeroed buffers (posix_memalign never
 *   promised it); the poison mode below is how a test holds them to that.
 * - Thread-safe (one mutex; a handful of calls per op). */
#ifndef CLEF_COMPUTE_CPU_ARENA_H
#define CLEF_COMPUTE_CPU_ARENA_H

#include <stddef.h>

#define CLEF_ARENA_MIN_BYTES ((size_t)1 << 20)
#define CLEF_ARENA_CAP_DEFAULT ((size_t)1 << 30)

typedef struct clef_arena clef_arena;

/* NULL when out of memory. cap: most bytes kept cached (0: cache nothing). */
clef_arena *clef_arena_create(size_t cap);
/* Poison mode (CLEF_ARENA_POISON=1, docs/knobs.md): from now on every block clef_arena_alloc hands
 * out, fresh or reused, small or large, has its n floats set to CLEF_ARENA_POISON_BITS (a quiet NaN),
 * so a read of a value no op wrote shows in the answer. */
#define CLEF_ARENA_POISON_BITS 0x7fc0deadu
void clef_arena_set_poison(clef_arena *a, int on);
/* Releases the cached blocks; blocks still handed out must be freed before. */
void clef_arena_destroy(clef_arena *a);
/* n floats, 64-byte aligned; NULL when out of memory (or n absurdly large). */
float *clef_arena_alloc(clef_arena *a, size_t n);
void clef_arena_free(clef_arena *a, float *p); /* NULL ok */

typedef struct {
    size_t cached_bytes, cached_blocks; /* now in the cache */
    size_t hits, misses, released;      /* large requests served from the cache / fresh; blocks released */
    size_t live_bytes, peak_live_bytes; /* large blocks handed out now / at most at once so far */
} clef_arena_stats;
void clef_arena_get_stats(clef_arena *a, clef_arena_stats *st);

#endif
