/* SHA-256 (FIPS 180-4), for fixture hashes (pixel_values_sha256) and file checks. */
#ifndef CLEF_BASE_SHA256_H
#define CLEF_BASE_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct clef_sha256 {
    uint32_t h[8];
    uint64_t nbytes;
    uint8_t buf[64];
    size_t nbuf;
} clef_sha256;

void clef_sha256_init(clef_sha256 *s);
void clef_sha256_update(clef_sha256 *s, const void *data, size_t n);
void clef_sha256_final(clef_sha256 *s, uint8_t out[32]);
/* One call: the digest as 64 lowercase hex characters plus NUL. */
void clef_sha256_hex(const void *data, size_t n, char out[65]);
void clef_sha256_to_hex(const uint8_t d[32], char out[65]);

#endif
