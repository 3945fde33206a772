/* The state cache's key and the routing key (see state_key.h), and clef.h's clef_job_state_key
 * (clef_state_key, the same without an engine, is inspect.c's). */
#include "engine/state_key.h"

#include <stdlib.h>
#include <string.h>

#include "base/sha256.h"
#include "engine/engine_internal.h"
#include "model/forward.h"

size_t clef_record_cache_rows(const clef_record *r) {
    size_t rows = r->schema_offset / CLEF_DELTA_CHUNK * CLEF_DELTA_CHUNK;
    if (rows == 0 || rows >= r->n_ids) return 0;
    for (size_t k = 0; k < r->n_images; k++)
        if (r->images[k].pad_start + r->images[k].n_pad > rows) return 0;
    return rows;
}

int clef_record_media_hashes(const clef_record *r, uint8_t *out) {
    for (size_t k = 0; k < r->n_images; k++) {
        const clef_image *im = &r->images[k].image;
        if (!im->pixel_values) return -1;
        clef_sha256 c;
        clef_sha256_init(&c);
        int32_t grid[3] = {im->grid_t, im->grid_h, im->grid_w};
        clef_sha256_update(&c, grid, sizeof grid);
        clef_sha256_update(&c, im->pixel_values, im->n_patches * im->patch_dim * sizeof(float));
        clef_sha256_final(&c, out + 32 * k);
    }
    return 0;
}

static void put_u64(clef_sha256 *c, uint64_t v) {
    uint8_t b[8];
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
    clef_sha256_update(c, b, sizeof b);
}

void clef_record_state_key(const clef_record *r, const uint8_t *hashes, char out[65]) {
    size_t rows = clef_record_cache_rows(r);
    if (rows == 0) rows = r->schema_offset; /* no cacheable prefix: the whole state */
    clef_sha256 c;
    clef_sha256_init(&c);
    clef_sha256_update(&c, CLEF_STATE_KEY_TAG, sizeof CLEF_STATE_KEY_TAG); /* with its NUL */
    put_u64(&c, rows);
    uint8_t b[4 * 256];
    for (size_t i = 0; i < rows;) { /* ids as little-endian int32, 256 at a time */
        size_t n = rows - i < 256 ? rows - i : 256;
        for (size_t k = 0; k < n; k++) {
            uint32_t v = (uint32_t)r->input_ids[i + k];
            for (int s = 0; s < 4; s++) b[4 * k + (size_t)s] = (uint8_t)(v >> (8 * s));
        }
        clef_sha256_update(&c, b, 4 * n);
        i += n;
    }
    put_u64(&c, r->n_images);
    if (r->n_images) clef_sha256_update(&c, hashes, 32 * r->n_images);
    uint8_t d[32];
    clef_sha256_final(&c, d);
    clef_sha256_to_hex(d, out);
}

/* ---- the job's media hashes: computed once, for the key and the cache alike */

const uint8_t *clef_job_media_hashes(clef_job *j) {
    if (j->media_hash || j->rec.n_images == 0) return j->media_hash;
    uint8_t *h = malloc(32 * j->rec.n_images);
    if (!h) return NULL;
    if (clef_record_media_hashes(&j->rec, h)) {
        free(h);
        return NULL;
    }
    j->media_hash = h;
    return h;
}

/* ---- clef.h */

int clef_job_state_key(clef_job *j, char *key, size_t key_len) {
    if (!j || !key || key_len < CLEF_STATE_KEY_LEN + 1) return -1;
    const uint8_t *h = clef_job_media_hashes(j);
    if (j->rec.n_images && !h) return -1;
    clef_record_state_key(&j->rec, h, key);
    return 0;
}
