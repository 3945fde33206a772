/* The state cache (see state_cache.h). */
#include "engine/state_cache.h"

#include <stdlib.h>
#include <string.h>

static void stats_lock(clef_state_cache *c) { pthread_mutex_lock(&c->mu); }
static void stats_unlock(clef_state_cache *c) { pthread_mutex_unlock(&c->mu); }

clef_state_cache *clef_cache_create(clef_ops *ops, const clef_config *cfg, size_t head_width, size_t limit_bytes) {
    if (limit_bytes == 0 || !ops->can_resume) return NULL;
    clef_state_cache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    if (pthread_mutex_init(&c->mu, NULL) != 0) {
        free(c);
        return NULL;
    }
    c->ops = ops;
    c->cfg = cfg;
    c->head_width = head_width;
    c->limit = limit_bytes;
    c->stats.limit = limit_bytes;
    return c;
}

static void entry_free(clef_state_cache *c, clef_cache_entry *e) {
    if (!e) return;
    int L = c->cfg->text.num_hidden_layers;
    float **arrs[4] = {e->st.conv, e->st.rec, e->st.k, e->st.v};
    for (int a = 0; a < 4; a++) {
        if (!arrs[a]) continue;
        for (int l = 0; l < L; l++) c->ops->free(c->ops, arrs[a][l]);
        free(arrs[a]);
    }
    c->ops->free(c->ops, e->mem);
    free(e->ids);
    free(e->img_hash);
    free(e);
}

static void unlink_entry(clef_state_cache *c, clef_cache_entry *e) {
    if (e->prev) e->prev->next = e->next; else c->head = e->next;
    if (e->next) e->next->prev = e->prev; else c->tail = e->prev;
    e->prev = e->next = NULL;
    e->inserted = 0;
    stats_lock(c);
    c->stats.bytes -= e->bytes;
    c->stats.entries--;
    stats_unlock(c);
}

static void push_front(clef_state_cache *c, clef_cache_entry *e) {
    e->prev = NULL;
    e->next = c->head;
    if (c->head) c->head->prev = e; else c->tail = e;
    c->head = e;
}

void clef_cache_destroy(clef_state_cache *c) {
    if (!c) return;
    while (c->head) {
        clef_cache_entry *e = c->head;
        unlink_entry(c, e);
        entry_free(c, e);
    }
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* FNV-1a over the bytes; only a filter: every hit compares the ids and hashes in full. */
uint64_t clef_cache_key(const int32_t *ids, size_t rows, const uint8_t *img_hash, size_t n_images) {
    uint64_t h = 1469598103934665603ull;
    const uint8_t *p = (const uint8_t *)ids;
    for (size_t i = 0; i < rows * sizeof(int32_t); i++) h = (h ^ p[i]) * 1099511628211ull;
    for (size_t i = 0; i < n_images * 32; i++) h = (h ^ img_hash[i]) * 1099511628211ull;
    return (h ^ rows) * 1099511628211ull;
}

static int same_key(const clef_cache_entry *e, uint64_t key, const int32_t *ids, size_t rows, const uint8_t *img_hash,
                    size_t n_images) {
    return e->key == key && e->st.rows == rows && e->n_images == n_images &&
           memcmp(e->ids, ids, rows * sizeof(int32_t)) == 0 &&
           (n_images == 0 || memcmp(e->img_hash, img_hash, n_images * 32) == 0);
}

clef_cache_entry *clef_cache_lookup(clef_state_cache *c, const int32_t *ids, size_t rows, const uint8_t *img_hash,
                                    size_t n_images) {
    uint64_t key = clef_cache_key(ids, rows, img_hash, n_images);
    clef_cache_entry *e = c->head;
    while (e && !same_key(e, key, ids, rows, img_hash, n_images)) e = e->next;
    stats_lock(c);
    if (e) c->stats.hits++; else c->stats.misses++;
    stats_unlock(c);
    if (!e) return NULL;
    e->pins++;
    if (c->head != e) { /* most recently used first */
        if (e->prev) e->prev->next = e->next;
        if (e->next) e->next->prev = e->prev; else c->tail = e->prev;
        push_front(c, e);
    }
    return e;
}

/* Floats per layer of a saved state: a DeltaNet layer's conv window and delta-rule state, an
 * attention layer's key (or value) row. */
typedef struct {
    size_t conv, rec, kvd;
} state_sizes;

static state_sizes sizes_of(const clef_text_config *tc) {
    size_t Kd = (size_t)tc->linear_num_key_heads * (size_t)tc->linear_key_head_dim;
    size_t Vd = (size_t)tc->linear_num_value_heads * (size_t)tc->linear_value_head_dim;
    state_sizes z;
    z.conv = ((size_t)tc->linear_conv_kernel_dim - 1) * (2 * Kd + Vd);
    z.rec = (size_t)tc->linear_num_value_heads * (size_t)tc->linear_key_head_dim * (size_t)tc->linear_value_head_dim;
    z.kvd = (size_t)tc->num_key_value_heads * (size_t)tc->head_dim;
    return z;
}

/* Device bytes of an entry of `rows` rows. */
static size_t entry_bytes(const clef_state_cache *c, size_t rows) {
    const clef_text_config *tc = &c->cfg->text;
    state_sizes z = sizes_of(tc);
    size_t conv = z.conv, rec = z.rec, kvd = z.kvd;
    size_t floats = rows * c->head_width;
    for (int l = 0; l < tc->num_hidden_layers; l++)
        floats += tc->layer_types[l] == CLEF_LAYER_FULL ? 2 * rows * kvd : conv + rec;
    return floats * sizeof(float);
}

clef_cache_entry *clef_cache_reserve(clef_state_cache *c, const int32_t *ids, size_t rows, const uint8_t *img_hash,
                                     size_t n_images) {
    const clef_text_config *tc = &c->cfg->text;
    size_t bytes = entry_bytes(c, rows);
    if (bytes > c->limit) return NULL;
    size_t held;
    stats_lock(c);
    held = c->stats.bytes + c->pending;
    stats_unlock(c);
    /* make room: least recently used first, never an entry a batch holds */
    for (clef_cache_entry *e = c->tail; e && held + bytes > c->limit;) {
        clef_cache_entry *prev = e->prev;
        if (e->pins == 0) {
            held -= e->bytes;
            unlink_entry(c, e);
            entry_free(c, e);
            stats_lock(c);
            c->stats.evictions++;
            stats_unlock(c);
        }
        e = prev;
    }
    if (held + bytes > c->limit) return NULL;

    clef_cache_entry *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    int L = tc->num_hidden_layers, ok = 1;
    e->ids = malloc((rows ? rows : 1) * sizeof(int32_t));
    e->img_hash = malloc(n_images ? n_images * 32 : 1);
    e->st.conv = calloc((size_t)L, sizeof(float *));
    e->st.rec = calloc((size_t)L, sizeof(float *));
    e->st.k = calloc((size_t)L, sizeof(float *));
    e->st.v = calloc((size_t)L, sizeof(float *));
    if (!e->ids || !e->img_hash || !e->st.conv || !e->st.rec || !e->st.k || !e->st.v) ok = 0;
    state_sizes z = sizes_of(tc);
    size_t conv = z.conv, rec = z.rec, kvd = z.kvd;
    for (int l = 0; ok && l < L; l++) {
        if (tc->layer_types[l] == CLEF_LAYER_FULL) {
            e->st.k[l] = clef_ops_alloc_kept(c->ops, rows * kvd);
            e->st.v[l] = clef_ops_alloc_kept(c->ops, rows * kvd);
            ok = e->st.k[l] && e->st.v[l];
        } else {
            e->st.conv[l] = clef_ops_alloc_kept(c->ops, conv ? conv : 1);
            e->st.rec[l] = clef_ops_alloc_kept(c->ops, rec);
            ok = e->st.conv[l] && e->st.rec[l];
        }
    }
    if (ok) ok = (e->mem = clef_ops_alloc_kept(c->ops, rows * c->head_width)) != NULL;
    if (!ok) {
        entry_free(c, e);
        return NULL;
    }
    memcpy(e->ids, ids, rows * sizeof(int32_t));
    if (n_images) memcpy(e->img_hash, img_hash, n_images * 32);
    e->n_images = n_images;
    e->st.rows = rows;
    e->key = clef_cache_key(ids, rows, img_hash, n_images);
    e->bytes = bytes;
    e->pins = 1;
    c->pending += bytes;
    return e;
}

void clef_cache_publish(clef_state_cache *c, clef_cache_entry *e) {
    if (e->inserted) return;
    for (clef_cache_entry *o = c->head; o; o = o->next)
        if (same_key(o, e->key, e->ids, e->st.rows, e->img_hash, e->n_images)) return; /* freed at release */
    /* room was made at reserve; entries published since may need more */
    size_t held;
    stats_lock(c);
    held = c->stats.bytes;
    stats_unlock(c);
    for (clef_cache_entry *o = c->tail; o && held + e->bytes > c->limit;) {
        clef_cache_entry *prev = o->prev;
        if (o->pins == 0) {
            held -= o->bytes;
            unlink_entry(c, o);
            entry_free(c, o);
            stats_lock(c);
            c->stats.evictions++;
            stats_unlock(c);
        }
        o = prev;
    }
    if (held + e->bytes > c->limit) return;
    push_front(c, e);
    e->inserted = 1;
    c->pending -= e->bytes;
    stats_lock(c);
    c->stats.bytes += e->bytes;
    c->stats.entries++;
    c->stats.inserts++;
    stats_unlock(c);
}

void clef_cache_release(clef_state_cache *c, clef_cache_entry *e) {
    if (!e) return;
    if (e->pins > 0) e->pins--;
    if (!e->inserted && e->pins == 0) {
        c->pending -= e->bytes;
        entry_free(c, e);
    }
}

void clef_cache_add_reused(clef_state_cache *c, size_t rows) {
    stats_lock(c);
    c->stats.tokens_reused += rows;
    stats_unlock(c);
}

void clef_cache_get_stats(clef_state_cache *c, clef_cache_stats *out) {
    if (!c) {
        memset(out, 0, sizeof *out);
        return;
    }
    stats_lock(c);
    *out = c->stats;
    stats_unlock(c);
}
