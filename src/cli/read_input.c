#include "cli/read_input.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *cli_read_all(const char *path, size_t max_bytes, size_t *len) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) {
        fprintf(stderr, "clef: cannot open %s: %s\n", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n + 1 >= cap) {
            if (cap > max_bytes + 1) break;
            char *p = realloc(buf, cap * 2);
            if (!p) { free(buf); buf = NULL; break; }
            buf = p;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - 1 - n, f);
        n += got;
        if (got == 0) break;
    }
    int read_err = ferror(f);
    if (f != stdin) fclose(f);
    if (!buf) { fprintf(stderr, "clef: out of memory reading %s\n", path); return NULL; }
    if (read_err) { fprintf(stderr, "clef: error reading %s\n", path); free(buf); return NULL; }
    if (n > max_bytes) {
        fprintf(stderr, "clef: %s is larger than the limit of %zu bytes\n", path, max_bytes);
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}
