#include "text/bpe.h"

#include <stdlib.h>
#include <string.h>

int clef_bpe_pairs_init(bpe_pairs *p, size_t expected) {
    memset(p, 0, sizeof *p);
    size_t cap = 16;
    while (cap < 2 * expected + 2) {
        if (cap > SIZE_MAX / 4 / sizeof(bpe_slot)) return -1;
        cap *= 2;
    }
    p->slots = malloc(cap * sizeof *p->slots);
    if (!p->slots) return -1;
    for (size_t i = 0; i < cap; i++) p->slots[i].rank = BPE_NO_RANK;
    p->mask = cap - 1;
    return 0;
}

void clef_bpe_pairs_free(bpe_pairs *p) {
    free(p->slots);
    memset(p, 0, sizeof *p);
}

void clef_bpe_pairs_put(bpe_pairs *p, uint32_t a, uint32_t b, uint32_t rank, int32_t merged) {
    size_t i = (size_t)bpe_hash_(a, b) & p->mask;
    for (;;) {
        bpe_slot *s = &p->slots[i];
        if (s->rank == BPE_NO_RANK) {
            s->a = a;
            s->b = b;
            s->rank = rank;
            s->merged = merged;
            p->n++;
            return;
        }
        if (s->a == a && s->b == b) {
            s->rank = rank;
            s->merged = merged;
            p->replaced++;
            return;
        }
        i = (i + 1) & p->mask;
    }
}

void clef_bpe_work_free(bpe_work *w) {
    free(w->memo);
    free(w->rm);
    free(w->prev);
    free(w->next);
    free(w->heap);
    memset(w, 0, sizeof *w);
}

static int work_reserve(bpe_work *w, size_t n) {
    if (n <= w->cap) return 0;
    size_t cap = w->cap ? w->cap : 64;
    while (cap < n) cap *= 2;
    uint64_t *r = realloc(w->rm, cap * sizeof *r);
    if (!r) return -1;
    w->rm = r;
    int32_t *pv = realloc(w->prev, cap * sizeof *pv);
    if (!pv) return -1;
    w->prev = pv;
    int32_t *nx = realloc(w->next, cap * sizeof *nx);
    if (!nx) return -1;
    w->next = nx;
    w->cap = cap;
    return 0;
}

/* Prepares the memo for table p (allocated on first use, cleared when the table changes); without
 * memory for it, lookups go to the table directly. */
static void memo_prepare(const bpe_pairs *p, bpe_work *w) {
    if (w->memo_for == p && w->memo) return;
    if (!w->memo) {
        w->memo = malloc(sizeof *w->memo << BPE_MEMO_BITS);
        if (!w->memo) return;
    }
    for (size_t i = 0; i < (size_t)1 << BPE_MEMO_BITS; i++) w->memo[i].a = UINT32_MAX;
    w->memo_for = p;
}

static inline void pair_at(const bpe_pairs *p, bpe_work *w, int32_t a, int32_t b, uint32_t *rank, int32_t *merged) {
    bpe_memo *m = NULL;
    if (w->memo) {
        uint32_t h = ((uint32_t)a * 0x9E3779B1u) ^ ((uint32_t)b * 0x85EBCA77u);
        m = &w->memo[h >> (32 - BPE_MEMO_BITS)];
        if (m->a == (uint32_t)a && m->b == (uint32_t)b) {
            *rank = m->rank;
            *merged = m->merged;
            return;
        }
    }
    const bpe_slot *s = bpe_pairs_get(p, (uint32_t)a, (uint32_t)b);
    if (s) {
        *rank = s->rank;
        *merged = s->merged;
    } else {
        *rank = BPE_NO_RANK;
        *merged = -1;
    }
    if (m) {
        m->a = (uint32_t)a;
        m->b = (uint32_t)b;
        m->rank = *rank;
        m->merged = *merged;
    }
}

/* Starts loading the table slots of all adjacent pairs of ids[0..n): the table is larger than the
 * CPU caches, and issuing the loads together overlaps their latency. */
static inline void prefetch_pairs(const bpe_pairs *p, const int32_t *ids, size_t n) {
    for (size_t i = 0; i + 1 < n; i++)
        __builtin_prefetch(&p->slots[(size_t)bpe_hash_((uint32_t)ids[i], (uint32_t)ids[i + 1]) & p->mask]);
}

static inline uint64_t pair_rm(const bpe_pairs *p, bpe_work *w, int32_t a, int32_t b) {
    uint32_t rank;
    int32_t merged;
    pair_at(p, w, a, b, &rank, &merged);
    return rank == BPE_NO_RANK ? UINT64_MAX : ((uint64_t)rank << 32) | (uint32_t)merged;
}

size_t clef_bpe_merge_scan(const bpe_pairs *p, int32_t *ids, size_t n, bpe_work *w) {
    if (n < 2) return n;
    if (work_reserve(w, n)) return (size_t)-1;
    memo_prepare(p, w);
    uint64_t *rm = w->rm;
    prefetch_pairs(p, ids, n);
    for (size_t i = 0; i + 1 < n; i++) rm[i] = pair_rm(p, w, ids[i], ids[i + 1]);
    while (n > 1) {
        /* lowest rank; equal values are the same pair, and strict < keeps the leftmost */
        size_t best = 0;
        uint64_t bv = rm[0];
        for (size_t i = 1; i + 1 < n; i++)
            if (rm[i] < bv) { bv = rm[i]; best = i; }
        if (bv == UINT64_MAX) break;
        ids[best] = (int32_t)(uint32_t)bv;
        /* drop symbol best+1 and pair best+1 */
        for (size_t i = best + 1; i + 1 < n; i++) ids[i] = ids[i + 1];
        for (size_t i = best + 1; i + 2 < n; i++) rm[i] = rm[i + 1];
        n--;
        if (best > 0) __builtin_prefetch(&p->slots[(size_t)bpe_hash_((uint32_t)ids[best - 1], (uint32_t)ids[best]) & p->mask]);
        if (best + 1 < n) __builtin_prefetch(&p->slots[(size_t)bpe_hash_((uint32_t)ids[best], (uint32_t)ids[best + 1]) & p->mask]);
        if (best > 0) rm[best - 1] = pair_rm(p, w, ids[best - 1], ids[best]);
        if (best + 1 < n) rm[best] = pair_rm(p, w, ids[best], ids[best + 1]);
    }
    return n;
}

/* Min-heap of (rank << 32 | position): lowest rank first, then leftmost. */
static void heap_push(uint64_t *h, size_t *len, uint64_t v) {
    size_t i = (*len)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (h[parent] <= v) break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = v;
}

static uint64_t heap_pop(uint64_t *h, size_t *len) {
    uint64_t top = h[0];
    uint64_t v = h[--(*len)];
    size_t n = *len, i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && h[c + 1] < h[c]) c++;
        if (v <= h[c]) break;
        h[i] = h[c];
        i = c;
    }
    if (n > 0) h[i] = v;
    return top;
}

size_t clef_bpe_merge_heap(const bpe_pairs *p, int32_t *ids, size_t n, bpe_work *w) {
    if (n < 2) return n;
    if (n > UINT32_MAX / 4) return (size_t)-1;
    if (work_reserve(w, n)) return (size_t)-1;
    size_t hcap = 3 * n; /* n-1 initial + at most 2 per merge */
    if (hcap > w->heap_cap) {
        uint64_t *h = realloc(w->heap, hcap * sizeof *h);
        if (!h) return (size_t)-1;
        w->heap = h;
        w->heap_cap = hcap;
    }
    int32_t *prev = w->prev, *next = w->next;
    uint64_t *heap = w->heap;
    size_t hl = 0;
    for (size_t i = 0; i < n; i++) {
        prev[i] = (int32_t)i - 1;
        next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    memo_prepare(p, w);
    prefetch_pairs(p, ids, n);
    uint32_t rk;
    int32_t mg;
    for (size_t i = 0; i + 1 < n; i++) {
        pair_at(p, w, ids[i], ids[i + 1], &rk, &mg);
        if (rk != BPE_NO_RANK) heap_push(heap, &hl, ((uint64_t)rk << 32) | i);
    }
    /* ids[i] = -1 marks a symbol merged into its left neighbour */
    while (hl > 0) {
        uint64_t top = heap_pop(heap, &hl);
        uint32_t rank = (uint32_t)(top >> 32);
        size_t pos = (size_t)(uint32_t)top;
        if (ids[pos] < 0) continue;
        int32_t nx = next[pos];
        if (nx < 0) continue;
        pair_at(p, w, ids[pos], ids[nx], &rk, &mg);
        if (rk != rank) continue; /* stale entry */
        ids[pos] = mg;
        ids[nx] = -1;
        next[pos] = next[nx];
        if (next[nx] >= 0) prev[next[nx]] = (int32_t)pos;
        if (prev[pos] >= 0) {
            size_t pv = (size_t)prev[pos];
            pair_at(p, w, ids[pv], ids[pos], &rk, &mg);
            if (rk != BPE_NO_RANK) heap_push(heap, &hl, ((uint64_t)rk << 32) | pv);
        }
        if (next[pos] >= 0) {
            pair_at(p, w, ids[pos], ids[next[pos]], &rk, &mg);
            if (rk != BPE_NO_RANK) heap_push(heap, &hl, ((uint64_t)rk << 32) | pos);
        }
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= 0) ids[m++] = ids[i];
    return m;
}

size_t clef_bpe_merge(const bpe_pairs *p, int32_t *ids, size_t n, bpe_work *w) {
    return n <= BPE_SCAN_MAX ? clef_bpe_merge_scan(p, ids, n, w) : clef_bpe_merge_heap(p, ids, n, w);
}
