/* One reader for the media entries of a request (`images` and `videos`): an http(s) URL is refused (we
 * fetch nothing), a local path is read when the caller allows paths, a data: URL of an accepted type or
 * bare base64 is decoded under a byte limit. What differs between images and videos (they follow two
 * processors of the reference) is a clef_media_kind: the data: types each takes, two steps only the
 * image reader has, and the words of each refusal. */
#ifndef CLEF_MEDIA_ENTRY_H
#define CLEF_MEDIA_ENTRY_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

/* Why an entry is refused: the reader finds it, the kind words it. */
typedef enum {
    CLEF_MEDIA_EMPTY,           /* a zero-length entry */
    CLEF_MEDIA_URL,             /* http:// or https:// */
    CLEF_MEDIA_PATH_MISSING,    /* (path_words) reads as a path that names nothing */
    CLEF_MEDIA_PATH_IRREGULAR,  /* (path_words) reads as a path that names no regular file */
    CLEF_MEDIA_PATH_NOT_BASE64, /* (path_words) reads as a path, is no base64, and paths are off or it names nothing */
    CLEF_MEDIA_FILE_OPEN,       /* fopen failed (at->errnum) */
    CLEF_MEDIA_FILE_STAT,       /* fstat failed, or the file is not regular */
    CLEF_MEDIA_FILE_LIMIT,      /* the file is over the byte limit (at->size) */
    CLEF_MEDIA_FILE_OOM,        /* no memory for the file's bytes */
    CLEF_MEDIA_FILE_SHORT,      /* fewer bytes read than fstat said */
    CLEF_MEDIA_DATA_TYPE,       /* a data: URL of a type the kind does not take */
    CLEF_MEDIA_BASE64,          /* not base64: err holds clef_base64_decode's words */
    CLEF_MEDIA_BASE64_LIMIT,    /* decodes to over the byte limit: err holds clef_base64_decode's words */
    CLEF_MEDIA_DECODES_EMPTY,   /* base64 of no bytes */
} clef_media_fault;

/* What a refusal may name. */
typedef struct {
    const char *entry; /* the entry as sent (not NUL-terminated) */
    size_t len;
    const char *path; /* the file, for the CLEF_MEDIA_FILE_* faults */
    int errnum;       /* errno of CLEF_MEDIA_FILE_OPEN */
    long long size;   /* the file's size, for CLEF_MEDIA_FILE_LIMIT */
    size_t limit;     /* the byte limit */
} clef_media_fault_at;

typedef struct {
    const char *const *data_types;   /* the data: URL prefixes taken, NULL-terminated ("data:image/") */
    int path_words;                  /* an entry that reads as a path is refused as one (never as base64) */
    int data_stops_at_second_comma;  /* a data: URL's payload ends at a second comma */
    /* Sets err for the fault (err may already hold base64's words) and returns -1. */
    int (*refuse)(clef_err *err, clef_media_fault fault, const clef_media_fault_at *at);
} clef_media_kind;

/* The entry's bytes in *bytes (the caller frees it), at most max_bytes of them; 0, or -1 with err set
 * by the kind's refuse (or OutOfMemory, or "data: URL without a comma"). */
int clef_media_entry_bytes(const char *entry, size_t len, const clef_media_kind *kind, int allow_paths,
                           size_t max_bytes, uint8_t **bytes, size_t *n, clef_err *err);

#endif
