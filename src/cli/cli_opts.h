/* Small helpers shared by `clef serve` and `clef batch`: option values and a progress bar on a
 * terminal. */
#ifndef CLEF_CLI_CLI_OPTS_H
#define CLEF_CLI_CLI_OPTS_H

#include <stddef.h>
#include <stdint.h>

/* Return 1 when s is a whole number (cli_size: with an optional K/M/G suffix, powers of 1024)
 * within [lo, hi], else 0. */
int cli_int(const char *s, int lo, int hi, int *out);
int cli_size(const char *s, size_t lo, size_t hi, size_t *out);
int cli_double(const char *s, double lo, double hi, double *out);

/* A one-line progress bar on stderr, drawn only when stderr is a terminal, at most ~10 times a
 * second. */
typedef struct cli_progress {
    const char *label;
    int tty;
    double t0, last;
    int drawn;
} cli_progress;

void cli_progress_init(cli_progress *p, const char *label);
/* done/total in any unit; extra: text after the percentage (may be NULL). */
void cli_progress_draw(cli_progress *p, uint64_t done, uint64_t total, const char *extra, int force);
void cli_progress_end(cli_progress *p);
/* For clef_options.progress: ctx is a cli_progress. */
void cli_progress_cb(void *ctx, uint64_t done, uint64_t total);

#endif
