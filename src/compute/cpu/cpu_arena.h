/* Activation buffers of the CPU backend (ops->alloc / ops->free), kept for reuse.
 *
 * A forward allocates a few buffers of T x width floats per op and layer and frees them at the
 * end; fresh large allocations are new anonymous mappings, so every forward paid for page faults
 * and the kernel's clearing of every page it wrote (~3% of a 2,048-token prefill). So large
 * blocks come from a pool of base/bufpool.h (carved from one range grown in place, freed
 * extents merged, bounded by `cap`, touched once): a steady stream of
 * forwards maps no new memory and keeps a flat resident set. Before (blocks of fixed size
 * classes, cached whole), forwards of new shapes kept needing new blocks beside the cached ones:
 * a 10-minute soak on tiny held 190 MB cached for forwards that never had more than 94 MB in use
 * at once (docs/reliability.md "The soak").
 * - Small blocks (< CLEF_ARENA_MIN_BYTES) go straight to malloc (glibc reuses them without
 *   clearing).
 * - Reused memory is NOT cleared: callers never relied on zeroed buffers (posix_memalign never
 *   promised it); the poison mode below is how a test holds them to that.
 * - Thread-safe.
 * (Transparent huge pages for the blocks made the first forward slower:
 * docs/rejected-experiments.md.) */
#ifndef CLEF_COMPUTE_CPU_ARENA_H
#define CLEF_COMPUTE_CPU_ARENA_H

#include <stddef.h>

#include "base/bufpool.h"

#define CLEF_ARENA_MIN_BYTES ((size_t)1 << 20)
#define CLEF_ARENA_CAP_DEFAULT ((size_t)1 << 30)
#define CLEF_ARENA_GROW_MIN CLEF_BUFPOOL_GROW_MIN

typedef struct clef_arena clef_arena;

/* NULL when out of memory. cap: most bytes held (0: hold none; every large block is
 * its own mapping). */
clef_arena *clef_arena_create(size_t cap);
/* Poison mode (CLEF_ARENA_POISON=1, docs/knobs.md): from now on every block clef_arena_alloc hands
 * out, fresh or reused, small or large, has its n floats set to CLEF_ARENA_POISON_BITS (a quiet NaN),
 * so a read of a value no op wrote shows in the answer. */
#define CLEF_ARENA_POISON_BITS 0x7fc0deadu
void clef_arena_set_poison(clef_arena *a, int on);
/* Releases the held range; blocks still handed out must be freed before. */
void clef_arena_destroy(clef_arena *a);
/* n floats, 64-byte aligned; NULL when out of memory (or n absurdly large). */
float *clef_arena_alloc(clef_arena *a, size_t n);
/* The same, never from the held range: a plain allocation (glibc maps a large one on its own and
 * unmaps it when freed), for blocks that outlive a forward (ops->alloc_kept). Poisoned likewise. */
float *clef_arena_alloc_kept(clef_arena *a, size_t n);
void clef_arena_free(clef_arena *a, float *p); /* NULL ok; a block of either */

typedef struct {
    size_t held_bytes;                  /* bytes of the range held */
    size_t cached_bytes, cached_blocks; /* free bytes inside it; the free extents they are in */
    size_t hits, misses, released;      /* large requests served from what is held / not; own mappings given back */
    size_t live_bytes, peak_live_bytes; /* large blocks handed out now / at most at once so far */
} clef_arena_stats;
void clef_arena_get_stats(clef_arena *a, clef_arena_stats *st);

#endif
