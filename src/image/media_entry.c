/* The media-entry reader (media_entry.h): the steps are one, the words are the kind's. */
#include "image/media_entry.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "image/image_internal.h"

static int starts(const char *s, size_t n, const char *pre) {
    size_t k = strlen(pre);
    return n >= k && !memcmp(s, pre, k);
}

/* An entry that is not base64 and reads like a path: no whitespace, and a '.' (never in base64: a
 * leading '/' alone is not enough, JPEG's base64 starts with "/9j/") or a leading '~'. Only used to
 * word the refusal. */
static int looks_like_path(const char *s, size_t len) {
    if (len == 0 || len >= 4096) return 0;
    int dot = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= ' ' || c == 0x7f) return 0;
        if (c == '.') dot = 1;
    }
    return dot || s[0] == '~';
}

static int read_path(const char *path, const clef_media_kind *kind, clef_media_fault_at *at, uint8_t **bytes,
                     size_t *n, clef_err *err) {
    at->path = path;
    FILE *f = fopen(path, "rb");
    if (!f) {
        at->errnum = errno;
        return kind->refuse(err, CLEF_MEDIA_FILE_OPEN, at);
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 0) {
        fclose(f);
        return kind->refuse(err, CLEF_MEDIA_FILE_STAT, at);
    }
    if ((uint64_t)st.st_size > (uint64_t)at->limit) {
        fclose(f);
        at->size = (long long)st.st_size;
        return kind->refuse(err, CLEF_MEDIA_FILE_LIMIT, at);
    }
    size_t sz = (size_t)st.st_size;
    uint8_t *b = malloc(sz ? sz : 1);
    if (!b) {
        fclose(f);
        return kind->refuse(err, CLEF_MEDIA_FILE_OOM, at);
    }
    size_t got = fread(b, 1, sz, f);
    fclose(f);
    if (got != sz) {
        free(b);
        return kind->refuse(err, CLEF_MEDIA_FILE_SHORT, at);
    }
    *bytes = b;
    *n = sz;
    return 0;
}

static int takes_data_type(const clef_media_kind *kind, const char *entry, size_t len) {
    for (const char *const *t = kind->data_types; *t; t++)
        if (starts(entry, len, *t)) return 1;
    return 0;
}

int clef_media_entry_bytes(const char *entry, size_t len, const clef_media_kind *kind, int allow_paths,
                           size_t max_bytes, uint8_t **bytes, size_t *n, clef_err *err) {
    *bytes = NULL;
    *n = 0;
    clef_media_fault_at at = {.entry = entry, .len = len, .limit = max_bytes};
    if (!entry || len == 0) return kind->refuse(err, CLEF_MEDIA_EMPTY, &at);
    if (starts(entry, len, "http://") || starts(entry, len, "https://"))
        return kind->refuse(err, CLEF_MEDIA_URL, &at);
    if (allow_paths && len < 4096 && !memchr(entry, 0, len)) {
        char path[4096];
        memcpy(path, entry, len);
        path[len] = 0;
        struct stat st;
        int found = stat(path, &st) == 0;
        if (found && S_ISREG(st.st_mode)) return read_path(path, kind, &at, bytes, n, err);
        /* paths are allowed and this one reads as a path: say what is wrong with the file, rather than
         * that it is not base64 */
        if (kind->path_words && !starts(entry, len, "data:") && looks_like_path(entry, len))
            return kind->refuse(err, found ? CLEF_MEDIA_PATH_IRREGULAR : CLEF_MEDIA_PATH_MISSING, &at);
    }
    const char *b64 = entry;
    size_t blen = len;
    if (starts(entry, len, "data:")) {
        if (!takes_data_type(kind, entry, len)) return kind->refuse(err, CLEF_MEDIA_DATA_TYPE, &at);
        const char *comma = memchr(entry, ',', len);
        if (!comma) return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "data: URL without a comma");
        b64 = comma + 1;
        blen = len - (size_t)(b64 - entry);
        if (kind->data_stops_at_second_comma) {
            const char *c2 = memchr(b64, ',', blen);
            if (c2) blen = (size_t)(c2 - b64);
        }
    }
    size_t cap = clef_base64_max_decoded(blen);
    if (cap > max_bytes) cap = max_bytes;
    uint8_t *out = malloc(cap ? cap : 1);
    if (!out) return clef_err_set(err, CLEF_E_OOM, "out of memory decoding base64");
    long got = clef_base64_decode(b64, blen, out, cap, err);
    if (got < 0) {
        free(out);
        if (kind->path_words && b64 == entry && looks_like_path(entry, len)) /* a clearer word than "invalid base64" */
            return kind->refuse(err, CLEF_MEDIA_PATH_NOT_BASE64, &at);
        return kind->refuse(err, err && err->type && !strcmp(err->type, CLEF_E_LIMIT) ? CLEF_MEDIA_BASE64_LIMIT
                                                                                     : CLEF_MEDIA_BASE64, &at);
    }
    if (got == 0) {
        free(out);
        return kind->refuse(err, CLEF_MEDIA_DECODES_EMPTY, &at);
    }
    *bytes = out;
    *n = (size_t)got;
    return 0;
}
