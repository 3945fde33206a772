/* Option parsing and the progress bar (see cli_opts.h). */
#include "cli/cli_opts.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "serve/scheduler.h"

int cli_int(const char *s, int lo, int hi, int *out) {
    if (!s || !*s) return 0;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return 0;
    *out = (int)v;
    return 1;
}

int cli_size(const char *s, size_t lo, size_t hi, size_t *out) {
    if (!s || !*s || *s == '-') return 0;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s) return 0;
    unsigned long long mul = 1;
    if (*end == 'k' || *end == 'K') mul = 1ull << 10, end++;
    else if (*end == 'm' || *end == 'M') mul = 1ull << 20, end++;
    else if (*end == 'g' || *end == 'G') mul = 1ull << 30, end++;
    if (*end) return 0;
    if (v > (unsigned long long)hi / mul) return 0;
    v *= mul;
    if (v < lo || v > hi) return 0;
    *out = (size_t)v;
    return 1;
}

int cli_double(const char *s, double lo, double hi, double *out) {
    if (!s || !*s) return 0;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !(v >= lo && v <= hi)) return 0;
    *out = v;
    return 1;
}

void cli_progress_init(cli_progress *p, const char *label) {
    p->label = label;
    p->tty = isatty(2);
    p->t0 = clef_now();
    p->last = 0;
    p->drawn = 0;
}

void cli_progress_draw(cli_progress *p, uint64_t done, uint64_t total, const char *extra, int force) {
    if (!p->tty) return;
    double now = clef_now();
    if (!force && now - p->last < 0.1) return;
    p->last = now;
    double frac = total ? (double)done / (double)total : 0;
    if (frac > 1) frac = 1;
    char bar[31];
    int fill = (int)(frac * 30);
    for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '.';
    bar[30] = 0;
    fprintf(stderr, "\r%s [%s] %5.1f%%%s%s\033[K", p->label, bar, frac * 100, extra ? "  " : "", extra ? extra : "");
    fflush(stderr);
    p->drawn = 1;
}

void cli_progress_end(cli_progress *p) {
    if (p->tty && p->drawn) {
        fputc('\n', stderr);
        fflush(stderr);
    }
    p->drawn = 0;
}

void cli_progress_cb(void *ctx, uint64_t done, uint64_t total) {
    cli_progress_draw(ctx, done, total, NULL, done >= total);
}
