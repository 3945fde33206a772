/* The state cache: records that share a prompt prefix (the same state asked other questions) resume
 * from the saved state of the first one instead of recomputing it.
 *
 * The prompt is PREFIX + MEDIA + STATE + SCHEMA + SUFFIX (contract.md §4), so requests on the same
 * state share every token up to the state's end. An entry holds a record's state after its first
 * `rows` tokens — rows the largest multiple of the delta rule's chunk (64) at or before the state's
 * end, so a record resuming there chunks its rest exactly as the uninterrupted run does and gets
 * the same bits (model/forward.h clef_text_state): per layer the conv window and delta-rule state or
 * the attention keys and values, plus the head's memory rows.
 *
 * Key: the token ids [0, rows) compared in full, and the SHA-256 of every image's grid and decoded
 * pixels (an image's pad ids are the same for every image). Bounded by bytes: inserting evicts the
 * least recently used entries that no running batch holds; an entry that does not fit is not kept.
 * Used by the model thread only (clef_run_batch); the counters may be read from any thread. */
#ifndef CLEF_ENGINE_STATE_CACHE_H
#define CLEF_ENGINE_STATE_CACHE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "compute/ops.h"
#include "model/config.h"
#include "model/forward.h"

typedef struct clef_cache_entry {
    int32_t *ids;            /* [rows] */
    uint8_t *img_hash;       /* [n_images][32] */
    size_t n_images;
    uint64_t key;            /* a digest of ids and image hashes, to skip most comparisons */
    clef_text_state st;      /* st.rows = rows */
    float *mem;              /* device [rows, head width]: the head's memory rows */
    size_t bytes;            /* device bytes held */
    int pins;                /* batches using it now (never evicted while > 0) */
    int inserted;            /* in the cache's list (else a pending snapshot) */
    struct clef_cache_entry *prev, *next; /* LRU list, most recent first */
} clef_cache_entry;

typedef struct clef_cache_stats {
    uint64_t hits, misses, inserts, evictions;
    uint64_t tokens_reused;  /* rows not recomputed thanks to hits */
    size_t bytes, entries, limit;
} clef_cache_stats;

typedef struct clef_state_cache {
    clef_ops *ops;
    const clef_config *cfg;
    size_t head_width;
    size_t limit;                  /* bytes */
    size_t pending;                /* bytes of reserved entries not yet published */
    clef_cache_entry *head, *tail; /* LRU */
    pthread_mutex_t mu;            /* guards stats (the list belongs to the model thread) */
    clef_cache_stats stats;
} clef_state_cache;

/* limit_bytes 0: no cache (returns NULL without error). NULL on OOM too: callers run uncached. */
clef_state_cache *clef_cache_create(clef_ops *ops, const clef_config *cfg, size_t head_width, size_t limit_bytes);
void clef_cache_destroy(clef_state_cache *c);

/* The digest of a key (ids [0, rows) and image hashes). */
uint64_t clef_cache_key(const int32_t *ids, size_t rows, const uint8_t *img_hash, size_t n_images);

/* The entry for this key, pinned, or NULL (a miss). Counts a hit or a miss. */
clef_cache_entry *clef_cache_lookup(clef_state_cache *c, const int32_t *ids, size_t rows, const uint8_t *img_hash,
                                    size_t n_images);

/* A new pending entry with its device buffers, pinned, or NULL when it cannot fit under the limit
 * (after evicting unpinned entries) or memory runs out. */
clef_cache_entry *clef_cache_reserve(clef_state_cache *c, const int32_t *ids, size_t rows, const uint8_t *img_hash,
                                     size_t n_images);

/* Makes a filled pending entry findable (dropped instead when an equal one got there first). */
void clef_cache_publish(clef_state_cache *c, clef_cache_entry *e);
/* Unpins an entry; a pending one (its forward failed, or never published) is freed. */
void clef_cache_release(clef_state_cache *c, clef_cache_entry *e);

void clef_cache_add_reused(clef_state_cache *c, size_t rows);
void clef_cache_get_stats(clef_state_cache *c, clef_cache_stats *out);

#endif
