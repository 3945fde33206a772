/* Byte-level BPE merging over token ids (internal to the tokenizer; spec: tokenizer.md §5).
 *
 * The pair table maps (left id, right id) -> (rank, merged id), the rank being the merge's position
 * in tokenizer.json's merge list. Merging applies the lowest rank first and, among equal ranks (the
 * same pair at several places), the leftmost first: HF tokenizers' Word::merge_all orders its
 * queue by (rank, position). Two implementations give identical results: a scan (small words) and
 * a heap over a linked list (long words); clef_bpe_merge picks one by length. */
#ifndef CLEF_TEXT_BPE_H
#define CLEF_TEXT_BPE_H

#include <stddef.h>
#include <stdint.h>

#define BPE_NO_RANK UINT32_MAX

typedef struct bpe_slot {
    uint32_t a, b;   /* the pair (ids) */
    uint32_t rank;   /* BPE_NO_RANK = empty slot */
    int32_t merged;  /* id of the concatenation */
} bpe_slot;

typedef struct bpe_pairs {
    bpe_slot *slots;
    size_t mask;     /* slot count - 1 (a power of two) */
    size_t n;        /* pairs stored */
    size_t replaced; /* puts that overwrote an existing pair (duplicate merges) */
} bpe_pairs;

/* Room for `expected` pairs (load factor <= 1/2). Returns -1 when out of memory. */
int clef_bpe_pairs_init(bpe_pairs *p, size_t expected);
void clef_bpe_pairs_free(bpe_pairs *p);
/* Stores the pair; a pair already present is overwritten (HF collects the merge list into a
 * HashMap, so a later duplicate wins) and counted in `replaced`. */
void clef_bpe_pairs_put(bpe_pairs *p, uint32_t a, uint32_t b, uint32_t rank, int32_t merged);

static inline uint64_t bpe_hash_(uint32_t a, uint32_t b) {
    uint64_t k = ((uint64_t)a << 32) | b;
    k *= 0x9E3779B97F4A7C15ull;
    return k ^ (k >> 29);
}

/* The slot of (a, b), or NULL. */
static inline const bpe_slot *bpe_pairs_get(const bpe_pairs *p, uint32_t a, uint32_t b) {
    size_t i = (size_t)bpe_hash_(a, b) & p->mask;
    for (;;) {
        const bpe_slot *s = &p->slots[i];
        if (s->rank == BPE_NO_RANK) return NULL;
        if (s->a == a && s->b == b) return s;
        i = (i + 1) & p->mask;
    }
}

/* A small direct-mapped memo of recent pair lookups (hits and misses), per thread: text repeats
 * pairs (the bytes of the same characters, frequent words), and the full table is too large for
 * the CPU caches. */
#define BPE_MEMO_BITS 12
typedef struct bpe_memo {
    uint32_t a, b;   /* a = UINT32_MAX: empty */
    uint32_t rank;   /* BPE_NO_RANK: no such pair */
    int32_t merged;
} bpe_memo;

/* Scratch space for merging (one per thread / call); grows on demand. */
typedef struct bpe_work {
    bpe_memo *memo;            /* 1 << BPE_MEMO_BITS entries, or NULL */
    const bpe_pairs *memo_for; /* the table the memo caches */
    uint64_t *rm;     /* scan: pair (i, i+1) as rank << 32 | merged id (all ones: no merge) */
    int32_t *prev, *next;
    uint64_t *heap;
    size_t cap, heap_cap;
} bpe_work;

void clef_bpe_work_free(bpe_work *w);

/* Words of at most this many initial symbols use the scan; longer ones the heap. */
#define BPE_SCAN_MAX 64

/* Merges ids[0..n) in place; returns the new count, or (size_t)-1 when out of memory. */
size_t clef_bpe_merge(const bpe_pairs *p, int32_t *ids, size_t n, bpe_work *w);
size_t clef_bpe_merge_scan(const bpe_pairs *p, int32_t *ids, size_t n, bpe_work *w);
size_t clef_bpe_merge_heap(const bpe_pairs *p, int32_t *ids, size_t n, bpe_work *w);

#endif
