/* Activation buffers of the CPU backend (ops->alloc / ops->free), kept for reuse.
 *
 * A forward allocates a few buffers of T x width floats per op and layer and frees them at the
 * end; fresh large allocations are new anonymous mappings, so every forward paid for page faults
 * and the kernel's clearing of every page it wrote (~3% of a 2,048-token prefill). So large
 * blocks are carved from chunks the arena holds, and a steady stream of forwards maps no new
 * memory and keeps a flat resident set.
 *
 * - Large blocks (>= CLEF_ARENA_MIN_BYTES) are whole pages carved from chunks (>= 8 MiB each,
 *   or the block's size rounded to 2 MiB): the smallest free extent that holds the block, at its
 *   start; a freed block's extent merges with its free neighbours, so when a forward ends every
 *   chunk is one free extent again and the next forward, of any shape no larger, fits in what is
 *   held. A block that fits nowhere gets a new chunk into which every wholly free chunk is folded
 *   (released, its size added), so the chunks become few and large instead of one per new
 *   block size. Before (blocks of fixed size classes, cached whole), forwards of new shapes kept
 *   needing new blocks beside the cached ones: a 10-minute soak on tiny held 190 MB cached for
 *   forwards that never had more than 94 MB in use at once (docs/reliability.md "The soak").
 * - The chunks hold at most `cap` bytes (a new chunk whose folded size would pass it is just the
 *   block's size); a block that still does not fit is a mapping of its own, given back when
 *   freed. What is held never shrinks while under the cap (folding moves bytes, it frees none).
 * - Small blocks go straight to malloc (glibc reuses them without clearing).
 * - Reused memory is NOT cleared: callers never relied on zeroed buffers (posix_memalign never
 *   promised it); the poison mode below is how a test holds them to that.
 * - Thread-safe (one mutex; a handful of calls per op).
 * (Transparent huge pages for the blocks made the first forward slower:
 * docs/rejected-experiments.md.) */
#ifndef CLEF_COMPUTE_CPU_ARENA_H
#define CLEF_COMPUTE_CPU_ARENA_H

#include <stddef.h>

#define CLEF_ARENA_MIN_BYTES ((size_t)1 << 20)
#define CLEF_ARENA_CAP_DEFAULT ((size_t)1 << 30)
/* The smallest chunk: small enough that touching it whole costs a one-shot run little (a chunk
 * is cleared once when made; 64 MiB chunks made the allocation-failure sweep, an engine per
 * step, minutes slower), large enough that a forward's small blocks share a few chunks. */
#define CLEF_ARENA_CHUNK_MIN ((size_t)8 << 20)

typedef struct clef_arena clef_arena;

/* NULL when out of memory. cap: most bytes of chunks held (0: hold none; every large block is
 * its own mapping). */
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
    size_t held_bytes;                  /* bytes of the chunks held */
    size_t cached_bytes, cached_blocks; /* free bytes inside them; the number of chunks */
    size_t hits, misses, released;      /* large requests served from held chunks / not; chunks and own mappings given back */
    size_t live_bytes, peak_live_bytes; /* large blocks handed out now / at most at once so far */
} clef_arena_stats;
void clef_arena_get_stats(clef_arena *a, clef_arena_stats *st);

#endif
