/* A growable byte buffer (for rendering JSON, building responses) and a growable int32 vector (for
 * token ids). Allocation failure is sticky: after one, every append is a no-op that returns -1 and
 * `oom` stays set, so a caller may append many pieces and check once. */
#ifndef CLEF_BASE_BUF_H
#define CLEF_BASE_BUF_H

#include <stddef.h>
#include <stdint.h>

typedef struct clef_buf {
    char *data; /* always NUL-terminated after a successful append (len excludes the NUL) */
    size_t len, cap;
    int oom;
} clef_buf;

void clef_buf_init(clef_buf *b);
void clef_buf_free(clef_buf *b);
void clef_buf_reset(clef_buf *b); /* len = 0, keeps the allocation */
int clef_buf_reserve(clef_buf *b, size_t extra);
int clef_buf_put(clef_buf *b, const void *p, size_t n);
int clef_buf_putc(clef_buf *b, int c);
int clef_buf_puts(clef_buf *b, const char *s);
int clef_buf_printf(clef_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Hands the bytes to the caller (who frees them) and leaves b empty. Never NULL unless oom. */
char *clef_buf_take(clef_buf *b, size_t *len);

typedef struct clef_ids {
    int32_t *v;
    size_t n, cap;
    int oom;
} clef_ids;

void clef_ids_init(clef_ids *a);
void clef_ids_free(clef_ids *a);
int clef_ids_push(clef_ids *a, int32_t x);
int clef_ids_append(clef_ids *a, const int32_t *x, size_t n);

#endif
