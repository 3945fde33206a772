/* clef bench: times the text forward and the joint head on N synthetic token ids (no request, no
 * tokenizer), through clef_bench_forward (include/clef.h). One JSON line per run and a summary line
 * (medians) per token count, on stdout:
 *   {"kind":"run","tokens":N,"threads":T,"rep":i,"seconds_text":s,"tokens_per_s":N/s,
 *    "seconds_head":h,"peak_rss_mb":m}
 *   {"kind":"summary","tokens":N,"threads":T,"repeat":R,"median_seconds_text":...,
 *    "median_tokens_per_s":...,"median_seconds_head":...,"open_seconds":o,"peak_rss_mb":m}
 * The ids cycle through a fixed list of 38 common ids (an English sentence in the Qwen3.5
 * vocabulary), so every run sees the same input. peak_rss_mb is getrusage(RUSAGE_SELF).ru_maxrss:
 * the process's high-water mark so far (mapped weight pages that were touched count). Before any
 * count, one untimed --prime forward pages the weights in. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "clef.h"
#include "cli/cli_opts.h"
#include "cli/cmds.h"
#include "base/clock.h"

#define MAX_COUNTS 16
#define MAX_TOKENS 262144

/* "The customer asked whether the order had shipped, and the agent replied that it would arrive on
 * Monday. Is the answer helpful and polite? Please rate the reply from 0 to 4." */
static const int32_t common_ids[] = {760,  5813, 4439,  3315, 279,   1906, 995,   26380, 11,  321,
                                     279,  8057, 19386, 421,  424,   1000, 16821, 383,   6796, 13,
                                     2091, 279,  4087,  10631, 321,  46193, 30,   5044,  4238, 279,
                                     9559, 494,  220,   15,    310,   220,   19,   13};

static double peak_rss_mb(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return -1;
    return (double)ru.ru_maxrss / 1024.0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int cmd_bench(int argc, char **argv) {
    clef_options o;
    clef_options_default(&o);
    o.text_only = 1;
    const char *tokens_arg = NULL;
    int repeat = 3, warmup = 0, prime = 32, records = 1;
    const cli_opt opts[] = {
        CLI_OPTS_ENGINE(&o),
        {.name = "--tokens", .kind = CLI_STR, .dst = &tokens_arg, .arg = "N[,N...]", .required = 1,
         .help = "token counts to time, comma-separated (each in [3, 262144], at most 16)"},
        {.name = "--repeat", .kind = CLI_INT, .dst = &repeat, .arg = "R", .lo = 1, .hi = 1000,
         .help = "timed runs per count"},
        {.name = "--warmup", .kind = CLI_INT, .dst = &warmup, .arg = "W", .lo = 0, .hi = 1000,
         .help = "untimed runs per count first"},
        {.name = "--records", .kind = CLI_INT, .dst = &records, .arg = "R", .lo = 1, .hi = 4096,
         .help = "records of N tokens packed into each forward (tokens_per_s counts them all)"},
        {.name = "--prime", .kind = CLI_INT, .dst = &prime, .arg = "N", .lo = 0, .hi = 4096,
         .help = "one untimed N-token forward after loading (pages the weights in); 0 = none, else >= 3"},
        CLI_OPT_END,
    };
    const cli_cmd cmd = {.verb = "bench", .usage = "--model DIR --tokens N[,N...] [options]", .opts = opts,
                         .about = "Prints one JSON line per run and a median summary line per count (stdout).\n"};
    int parsed = cli_parse(&cmd, argc, argv);
    if (parsed != CLI_CONTINUE) return parsed;
    long counts[MAX_COUNTS];
    int n_counts = 0;
    {
        const char *p = tokens_arg;
        while (*p && n_counts < MAX_COUNTS) {
            char *end;
            long v = strtol(p, &end, 10);
            if (end == p || v < 3 || v > MAX_TOKENS || (*end && *end != ',')) { n_counts = -1; break; }
            counts[n_counts++] = v;
            p = *end ? end + 1 : end;
        }
        if (n_counts >= 0 && *p) n_counts = -1;
    }
    if (n_counts <= 0) {
        fprintf(stderr, "clef bench: --tokens: '%s' is not a list of up to %d counts in [3, %d]\n", tokens_arg,
                MAX_COUNTS, MAX_TOKENS);
        return 2;
    }
    if (prime == 1 || prime == 2) {
        fprintf(stderr, "clef bench: --prime: '%d' is not 0 or an integer in [3, 4096]\n", prime);
        return 2;
    }

    char err[1200];
    double t0 = clef_now();
    clef_engine *e = clef_open(&o, err, sizeof err);
    double open_s = clef_now() - t0;
    if (!e) {
        fprintf(stderr, "clef: %s\n", err);
        return 3;
    }
    cli_engine_note("bench", e);
    int rc = 0;
    if (prime) {
        int32_t pids[4096];
        double a, b;
        for (int i = 0; i < prime; i++) pids[i] = common_ids[i % (int)(sizeof common_ids / sizeof common_ids[0])];
        if (clef_bench_forward(e, pids, (size_t)prime, &a, &b, err, sizeof err)) {
            fprintf(stderr, "clef: %s\n", err);
            rc = 1;
        }
    }
    for (int c = 0; c < n_counts && rc == 0; c++) {
        size_t n = (size_t)counts[c];
        int32_t *ids = malloc(n * sizeof *ids);
        double *st = malloc((size_t)repeat * sizeof *st), *sh = malloc((size_t)repeat * sizeof *sh);
        double *tps = malloc((size_t)repeat * sizeof *tps);
        if (!ids || !st || !sh || !tps) {
            fprintf(stderr, "clef: out of memory\n");
            rc = 3;
        }
        for (size_t i = 0; rc == 0 && i < n; i++) ids[i] = common_ids[i % (sizeof common_ids / sizeof common_ids[0])];
        for (int r = -warmup; rc == 0 && r < repeat; r++) {
            double s_text = 0, s_head = 0;
            if (clef_bench_forward_batch(e, ids, n, (size_t)records, &s_text, &s_head, err, sizeof err)) {
                fprintf(stderr, "clef: %s\n", err);
                rc = 1;
                break;
            }
            if (r < 0) continue;
            st[r] = s_text;
            sh[r] = s_head;
            tps[r] = s_text > 0 ? (double)n * records / s_text : 0;
            printf("{\"kind\":\"run\",\"tokens\":%zu,\"records\":%d,\"threads\":%d,\"rep\":%d,\"seconds_text\":%.4f,"
                   "\"tokens_per_s\":%.2f,\"seconds_head\":%.4f,\"peak_rss_mb\":%.0f}\n",
                   n, records, o.threads, r, s_text, tps[r], s_head, peak_rss_mb());
            fflush(stdout);
        }
        if (rc == 0)
            printf("{\"kind\":\"summary\",\"tokens\":%zu,\"records\":%d,\"threads\":%d,\"repeat\":%d,\"median_seconds_text\":%.4f,"
                   "\"median_tokens_per_s\":%.2f,\"median_seconds_head\":%.4f,\"open_seconds\":%.3f,"
                   "\"peak_rss_mb\":%.0f}\n",
                   n, records, o.threads, repeat, median(st, repeat), median(tps, repeat), median(sh, repeat), open_s,
                   peak_rss_mb());
        fflush(stdout);
        free(ids);
        free(st);
        free(sh);
        free(tps);
    }
    clef_close(e);
    return rc;
}
