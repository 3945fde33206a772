/* See http_extras.h. */
#include "serve/http_extras.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

int clef_accepts_gzip(const char *ae) {
    if (!ae) return 0;
    const char *p = ae;
    while (*p) {
        while (*p == ' ' || *p == '\t' || *p == ',') p++;
        const char *tok = p;
        while (*p && *p != ',' && *p != ';' && *p != ' ' && *p != '\t') p++;
        size_t tl = (size_t)(p - tok);
        double q = 1.0;
        while (*p && *p != ',') { /* parameters: only q matters */
            while (*p == ' ' || *p == '\t' || *p == ';') p++;
            if ((p[0] == 'q' || p[0] == 'Q') && p[1] == '=') q = strtod(p + 2, NULL);
            while (*p && *p != ';' && *p != ',') p++;
        }
        if (((tl == 4 && !strncasecmp(tok, "gzip", 4)) || (tl == 1 && tok[0] == '*')) && q > 0) return 1;
    }
    return 0;
}

int clef_identity_coding(const char *ce) {
    for (const char *p = ce; p && *p;) {
        while (*p == ' ' || *p == '\t' || *p == ',') p++;
        const char *tok = p;
        while (*p && *p != ',') p++;
        const char *end = p;
        while (end > tok && (end[-1] == ' ' || end[-1] == '\t')) end--;
        if (end > tok && !((size_t)(end - tok) == 8 && !strncasecmp(tok, "identity", 8))) return 0;
    }
    return 1;
}

int clef_gzip(const void *in, size_t n, clef_buf *out) {
    clef_buf_reset(out);
    z_stream z;
    memset(&z, 0, sizeof z);
    if (deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) return -1;
    uLong bound = deflateBound(&z, (uLong)n);
    if (clef_buf_reserve(out, (size_t)bound + 1) != 0) {
        deflateEnd(&z);
        return -1;
    }
    z.next_in = (Bytef *)(uintptr_t)in;
    z.avail_in = (uInt)n;
    z.next_out = (Bytef *)out->data;
    z.avail_out = (uInt)bound;
    int rc = deflate(&z, Z_FINISH);
    size_t produced = (size_t)z.total_out;
    deflateEnd(&z);
    if (rc != Z_STREAM_END) return -1;
    out->len = produced;
    return 0;
}

int clef_bearer_ok(const char *h, const char *key) {
    if (!h || !key) return 0;
    if (strncasecmp(h, "Bearer ", 7)) return 0;
    const unsigned char *a = (const unsigned char *)h + 7, *b = (const unsigned char *)key;
    size_t la = strlen((const char *)a), lb = strlen((const char *)b);
    /* every byte of the longer one is visited; a differing length still costs the same */
    size_t n = la > lb ? la : lb;
    unsigned diff = (unsigned)(la ^ lb);
    for (size_t i = 0; i < n; i++) {
        unsigned char x = i < la ? a[i] : 0, y = i < lb ? b[i] : 0;
        diff |= (unsigned)(x ^ y);
    }
    return diff == 0;
}

int clef_cors_allows(const char *allowed, const char *origin, size_t len) {
    if (!allowed || !origin) return 0;
    if (!strcmp(allowed, "*")) return 1;
    return strlen(allowed) == len && memcmp(allowed, origin, len) == 0;
}
