#include "base/buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void clef_buf_init(clef_buf *b) { memset(b, 0, sizeof *b); }

void clef_buf_free(clef_buf *b) {
    free(b->data);
    memset(b, 0, sizeof *b);
}

void clef_buf_reset(clef_buf *b) {
    b->len = 0;
    if (b->data) b->data[0] = '\0';
}

int clef_buf_reserve(clef_buf *b, size_t extra) {
    if (b->oom) return -1;
    if (extra > SIZE_MAX / 2 - b->len - 1) { b->oom = 1; return -1; }
    size_t need = b->len + extra + 1;
    if (need <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need) cap *= 2;
    char *p = realloc(b->data, cap);
    if (!p) { b->oom = 1; return -1; }
    b->data = p;
    b->cap = cap;
    return 0;
}

int clef_buf_put(clef_buf *b, const void *p, size_t n) {
    if (clef_buf_reserve(b, n)) return -1;
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int clef_buf_putc(clef_buf *b, int c) {
    char ch = (char)c;
    return clef_buf_put(b, &ch, 1);
}

int clef_buf_puts(clef_buf *b, const char *s) { return clef_buf_put(b, s, strlen(s)); }

int clef_buf_printf(clef_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || clef_buf_reserve(b, (size_t)n)) { b->oom = 1; return -1; }
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

char *clef_buf_take(clef_buf *b, size_t *len) {
    if (b->oom) { clef_buf_free(b); return NULL; }
    if (!b->data && clef_buf_reserve(b, 0)) return NULL;
    char *p = b->data;
    if (len) *len = b->len;
    memset(b, 0, sizeof *b);
    return p;
}

void clef_ids_init(clef_ids *a) { memset(a, 0, sizeof *a); }

void clef_ids_free(clef_ids *a) {
    free(a->v);
    memset(a, 0, sizeof *a);
}

int clef_ids_append(clef_ids *a, const int32_t *x, size_t n) {
    if (a->oom) return -1;
    if (n > (SIZE_MAX / sizeof(int32_t)) / 2 - a->n) { a->oom = 1; return -1; }
    if (a->n + n > a->cap) {
        size_t cap = a->cap ? a->cap : 64;
        while (cap < a->n + n) cap *= 2;
        int32_t *p = realloc(a->v, cap * sizeof *p);
        if (!p) { a->oom = 1; return -1; }
        a->v = p;
        a->cap = cap;
    }
    if (n) memcpy(a->v + a->n, x, n * sizeof *x);
    a->n += n;
    return 0;
}

int clef_ids_push(clef_ids *a, int32_t x) { return clef_ids_append(a, &x, 1); }
