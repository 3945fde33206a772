/* What the state cache keys a record by, and the routing key made from it (clef.h clef_state_key;
 * docs/serving.md "The routing key"). Both are computed here and only here, so that two records the
 * cache can serve from one entry always get the same routing key:
 *
 *   cache key   = (ids[0, rows), the SHA-256 of every media entry), rows = clef_record_cache_rows
 *   routing key = SHA-256("clef-state-key/v1\0" || u64 B || ids[0, B) || u64 n || hash_0 .. hash_n-1)
 *                 as 64 lowercase hex digits, B = rows when the record is cacheable, else its whole
 *                 state (PREFIX + MEDIA + STATE: schema_offset ids)
 *
 * Integers little-endian (ids as int32); a media hash is the SHA-256 of one entry of rec->images (an
 * image, or one frame group of a video): its grid (t, h, w) as three int32 and its pixel values as
 * float32, the processor's output. */
#ifndef CLEF_ENGINE_STATE_KEY_H
#define CLEF_ENGINE_STATE_KEY_H

#include <stddef.h>
#include <stdint.h>

#include "decision/encode.h"

/* The tag hashed first: a new definition gets a new tag, so keys of two definitions never meet. */
#define CLEF_STATE_KEY_TAG "clef-state-key/v1"

/* The leading ids whose state the cache keeps: the last multiple of the delta rule's chunk (64) at
 * or before the state's end; 0 (not cacheable) when that is 0 or a media entry's pads end after it
 * (a resumed record never runs the vision tower). */
size_t clef_record_cache_rows(const clef_record *r);

/* The SHA-256 of each of rec->images into out[32 * n_images]. -1 when an entry has no pixel values
 * (injected grids in tests). */
int clef_record_media_hashes(const clef_record *r, uint8_t *out);

/* The routing key of r (hashes: clef_record_media_hashes' output; NULL when r has no media) as 64
 * hex digits and a NUL. */
void clef_record_state_key(const clef_record *r, const uint8_t *hashes, char out[65]);

#endif
