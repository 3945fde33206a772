/* Large buffers kept for reuse: blocks carved from a range a pool holds, up to a cap.
 *
 * Fresh large allocations are new anonymous mappings (glibc maps blocks over its threshold; `clef
 * serve` sets it to 128 KiB), so memory that is allocated and freed again and again both costs
 * page faults and clearing each time and makes the resident set follow how much is in use at each
 * instant. A pool keeps what it has touched and hands it out again, so the resident set rises to
 * what the most demanding moment needed (at most the cap) and stays there. Two kinds of pool:
 * - the CPU backend's activation buffers (src/compute/cpu/cpu_arena.h, one pool per backend);
 * - request buffers: images' and videos' pixel arrays, which a prepared job holds until its
 *   forward, from the process pool below (`clef serve --request-pool`). Without it the 64-client
 *   soak on tiny swung by 40-60 MB within every minute with the images in flight
 *   (docs/reliability.md "The soak"); kept in glibc's heap instead they crept
 *   (docs/rejected-experiments.md).
 *
 * - Blocks of >= min_bytes are whole pages carved from one range of address space per pool,
 *   reserved for the whole cap at the first such block (PROT_NONE: no memory until used): the
 *   smallest free extent that holds the block, at its start; a freed block's extent merges with
 *   its free neighbours, so blocks of any mix of sizes share the held memory (size classes would
 *   each hold their own peak).
 * - A block that fits no free extent grows the range's usable part in place, by what is missing
 *   beyond the free extent at its end, in 2 MiB steps (8 MiB at least the first time). So a
 *   misfit costs a few MB, not a chunk of its own: separate chunks, even with headroom, stepped
 *   the soak's pools up by 30-40 MB at a single misfit (docs/reliability.md "The soak").
 * - The usable part is at most `cap` bytes (and at most the machine's memory); a block that
 *   still does not fit is a mapping of its own, given back when freed. What is held never
 *   shrinks.
 * - New pages are touched when the usable part grows: the page faults are paid once and the
 *   resident set is what is held from the start.
 * - Smaller blocks, blocks without a pool (p NULL) and blocks the pool cannot make are plain
 *   allocations (malloc): never an error; NULL only when the system has no memory.
 * - Reused memory is NOT cleared (malloc never promised it either).
 * - Thread-safe (one mutex).
 * Every block, pooled or plain, is freed with clef_bufpool_free: a 64-byte header before the data
 * (which is 64-byte aligned) says where it came from. (Written here rather than taken from an
 * allocator library because what it must do is narrow and exact: never give memory back while
 * under the cap, never clear or purge pages behind our back: jemalloc's and glibc's purging is
 * what made the resident set move.) */
#ifndef CLEF_BASE_BUFPOOL_H
#define CLEF_BASE_BUFPOOL_H

#include <stddef.h>

/* The first growth of a pool's range: small enough that touching it costs a one-shot run little
 * (64 MiB made the allocation-failure sweep, an engine per step, minutes slower), large enough
 * that small blocks do not grow it one by one. */
#define CLEF_BUFPOOL_GROW_MIN ((size_t)8 << 20)
/* min_bytes of the process pool for request buffers */
#define CLEF_BUFPOOL_REQUEST_MIN ((size_t)128 << 10)

typedef struct clef_bufpool clef_bufpool;

/* NULL when out of memory. cap: most bytes held (0: hold none: every block of >= min_bytes is a
 * mapping of its own). min_bytes: smaller blocks are plain allocations. */
clef_bufpool *clef_bufpool_create(size_t cap, size_t min_bytes);
/* Gives back the range; every block of the pool must have been freed before. NULL ok. */
void clef_bufpool_destroy(clef_bufpool *p);

/* A budget for the blocks in use at once (request buffers: `clef serve --pixel-budget`), kept by
 * admission rather than by failing allocations: a request calls clef_bufpool_admit once, before its
 * first block, and waits there while the pool's blocks in use (pooled or mapped on their own) reach
 * `budget`; a request admitted below it allocates all it needs. So what is in use stays under the
 * budget plus what the requests admitted at once add (as vLLM bounds its encoder cache), and a
 * request never waits while holding blocks (a holder waiting for others could wait for itself).
 * It also sets the range's first growth to min(budget, cap): the pool commits its budget at its
 * first block, so its resident set is at the level the budget allows from the first image on,
 * instead of stepping up whenever more requests than ever before are in flight (the AVX2 soak,
 * docs/reliability.md "The soak"). wait_s: most seconds a request waits, then admit fails; <= 0:
 * no deadline. budget 0: none (admission never waits). */
void clef_bufpool_set_budget(clef_bufpool *p, size_t budget, double wait_s);
/* 0: admitted (p NULL or no budget: at once); -1: waited wait_s and the pool is still at its budget. */
int clef_bufpool_admit(clef_bufpool *p);

/* n bytes, 64-byte aligned (from p, or plain when p is NULL); NULL only when out of memory (or n
 * absurdly large). */
void *clef_bufpool_alloc(clef_bufpool *p, size_t n);
/* A block of clef_bufpool_alloc, from any pool or none; NULL ok. */
void clef_bufpool_free(void *ptr);

typedef struct {
    size_t cap;
    size_t held_bytes;                  /* bytes of the range held (usable, touched) */
    size_t free_bytes, extents;         /* free bytes inside it; the free extents they are in */
    size_t hits, misses;                /* blocks of >= min_bytes served from what is held / not */
    size_t own;                         /* of the misses, blocks mapped on their own (over the cap) */
    size_t released;                    /* own mappings given back */
    size_t live_bytes, peak_live_bytes; /* blocks of >= min_bytes handed out now / at most at once so far */
    size_t budget;                      /* clef_bufpool_set_budget (0: none) */
    size_t admits, waited, timeouts;    /* clef_bufpool_admit calls; of them, those that waited / gave up */
} clef_bufpool_stats;
void clef_bufpool_get_stats(clef_bufpool *p, clef_bufpool_stats *st); /* all 0 for NULL */

/* The process's pool for request buffers (NULL: none, every buffer plain). Set it before the
 * threads that allocate start, and back to NULL before destroying it. */
clef_bufpool *clef_bufpool_process(void);
void clef_bufpool_set_process(clef_bufpool *p);

#endif
