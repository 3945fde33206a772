/* Small pieces of the server's HTTP behaviour kept out of server.c: gzip of an answer, the API key
 * check, Accept-Encoding and Content-Encoding parsing, the CORS origin rule, and JSON-escaped log field rendering. */
#ifndef CLEF_SERVE_HTTP_EXTRAS_H
#define CLEF_SERVE_HTTP_EXTRAS_H

#include <stddef.h>

#include "base/buf.h"

/* 1 when the Accept-Encoding value accepts gzip (a "gzip" or "*" coding whose q is not 0). */
int clef_accepts_gzip(const char *accept_encoding);
/* 1 when a request's Content-Encoding value leaves the body as it is: absent, empty, or only
 * "identity" codings (any case). A body in any other coding (gzip, deflate, br, ...) is refused. */
int clef_identity_coding(const char *content_encoding);
/* gzip (zlib, level 6) of in[0..n) into out (reset first). 0 on success. */
int clef_gzip(const void *in, size_t n, clef_buf *out);
/* Checks an Authorization header against the key: "Bearer KEY". Constant time in the key's length
 * and the header's (every byte compared). 1 when it matches. */
int clef_bearer_ok(const char *authorization, const char *key);
/* --cors-origin's rule, for the server's answers and the guard's: 1 when `allowed` (an origin, or
 * "*" for any; NULL: CORS off) lets the request's Origin value origin[0..len) in. */
int clef_cors_allows(const char *allowed, const char *origin, size_t len);
/* The answer headers a page may read, on every answer to an allowed origin. */
#define CLEF_CORS_EXPOSE "X-Request-Id, Retry-After, X-Clef-State-Key, Clef-Warning"

#endif
