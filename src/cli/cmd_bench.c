/* clef bench: times the packed forward that `clef batch` and `clef serve` run (clef_bench_run,
 * include/clef.h: the group function of clef_run_batch, without the state cache), on R records of N
 * synthetic token ids (--tokens: no request, no tokenizer) or of one request (--request: its encoded
 * record, through clef_job_prepare). One JSON line per run and a summary line (medians) per token
 * count, on stdout:
 *   {"kind":"run","tokens":N,"records":R,"threads":T,"rep":i,"seconds_text":s,"tokens_per_s":N*R/s,
 *    "seconds_head":h,"peak_rss_mb":m}
 *   {"kind":"summary","tokens":N,"records":R,"threads":T,"repeat":K,"median_seconds_text":...,
 *    "median_tokens_per_s":...,"median_seconds_head":...,"open_seconds":o,"peak_rss_mb":m}
 * With --request the summary ends with "answers_sha256": the SHA-256 of the R answers of the last
 * run, each followed by a newline (what `clef batch` writes for R lines of that request).
 * The ids cycle through a fixed list of 38 common ids (an English sentence in the Qwen3.5
 * vocabulary), so every run sees the same input. peak_rss_mb is getrusage(RUSAGE_SELF).ru_maxrss:
 * the process's high-water mark so far (mapped weight pages that were touched count). Before any
 * count, one untimed --prime forward pages the weights in. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "base/clock.h"
#include "base/sha256.h"
#include "clef.h"
#include "cli/cli_opts.h"
#include "cli/cmds.h"
#include "cli/read_input.h"

#define MAX_COUNTS 16
#define MAX_TOKENS 262144
#define N_COMMON (sizeof common_ids / sizeof common_ids[0])

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

/* --tokens: up to MAX_COUNTS counts in [3, MAX_TOKENS]; their number, or -1. */
static int parse_counts(const char *arg, long *counts) {
    int n = 0;
    const char *p = arg;
    while (*p && n < MAX_COUNTS) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 3 || v > MAX_TOKENS || (*end && *end != ',')) return -1;
        counts[n++] = v;
        p = *end ? end + 1 : end;
    }
    return *p || n == 0 ? -1 : n;
}

static void free_jobs(clef_job **jobs, int n) {
    for (int i = 0; i < n; i++) clef_job_free(jobs[i]);
    free(jobs);
}

/* `records` jobs: of the request body when there is one, else of n synthetic ids. NULL with a
 * message on stderr. */
static clef_job **make_jobs(clef_engine *e, const char *body, size_t body_len, size_t n, int records) {
    clef_job **jobs = calloc((size_t)records, sizeof *jobs);
    int32_t *ids = body ? NULL : malloc(n * sizeof *ids);
    if (!jobs || (!body && !ids)) {
        fprintf(stderr, "clef: out of memory\n");
        free(jobs);
        free(ids);
        return NULL;
    }
    for (size_t i = 0; !body && i < n; i++) ids[i] = common_ids[i % N_COMMON];
    char err[1200];
    for (int r = 0; r < records; r++) {
        if (body) {
            clef_result res;
            jobs[r] = clef_job_prepare(e, body, body_len, &res);
            if (!jobs[r]) fprintf(stderr, "clef: the request: %.*s\n", (int)res.body_len, res.body ? res.body : "");
            if (!jobs[r]) clef_result_free(&res);
        } else {
            jobs[r] = clef_bench_job(e, ids, n, err, sizeof err);
            if (!jobs[r]) fprintf(stderr, "clef: %s\n", err);
        }
        if (!jobs[r]) {
            free_jobs(jobs, r);
            free(ids);
            return NULL;
        }
    }
    free(ids);
    return jobs;
}

/* The SHA-256 of the jobs' answers from their last run, each followed by a newline; the jobs are
 * finished (freed). 0, or -1 with a message on stderr. */
static int answers_sha256(clef_job **jobs, int records, char hex[65]) {
    clef_sha256 s;
    clef_sha256_init(&s);
    int rc = 0;
    for (int r = 0; r < records; r++) {
        clef_result res;
        clef_job_finish(jobs[r], &res);
        jobs[r] = NULL;
        if (!res.body) { fprintf(stderr, "clef: no answer for record %d\n", r); rc = -1; }
        else {
            clef_sha256_update(&s, res.body, res.body_len);
            clef_sha256_update(&s, "\n", 1);
        }
        clef_result_free(&res);
    }
    uint8_t d[32];
    clef_sha256_final(&s, d);
    clef_sha256_to_hex(d, hex);
    return rc;
}

typedef struct {
    int repeat, warmup, records, threads;
    double open_s;
} bench_plan;

/* Warm-up and timed runs of one set of jobs (one token count), each run's line and the summary
 * line. Returns 0, 1 (a run failed) or 3 (out of memory). */
static int time_jobs(clef_engine *e, clef_job **jobs, const bench_plan *bp, int with_answers) {
    const int repeat = bp->repeat, records = bp->records;
    const size_t n = clef_job_tokens(jobs[0]);
    double *st = malloc((size_t)repeat * sizeof *st), *sh = malloc((size_t)repeat * sizeof *sh);
    double *tps = malloc((size_t)repeat * sizeof *tps);
    int rc = 0;
    char err[1200];
    if (!st || !sh || !tps) {
        fprintf(stderr, "clef: out of memory\n");
        rc = 3;
    }
    for (int r = -bp->warmup; rc == 0 && r < repeat; r++) {
        double s_text = 0, s_head = 0;
        if (clef_bench_run(e, jobs, (size_t)records, &s_text, &s_head, err, sizeof err)) {
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
               n, records, bp->threads, r, s_text, tps[r], s_head, peak_rss_mb());
        fflush(stdout);
    }
    char hex[65] = "";
    if (rc == 0 && with_answers && answers_sha256(jobs, records, hex)) rc = 1;
    if (rc == 0) {
        printf("{\"kind\":\"summary\",\"tokens\":%zu,\"records\":%d,\"threads\":%d,\"repeat\":%d,"
               "\"median_seconds_text\":%.4f,\"median_tokens_per_s\":%.2f,\"median_seconds_head\":%.4f,"
               "\"open_seconds\":%.3f,\"peak_rss_mb\":%.0f",
               n, records, bp->threads, repeat, median(st, repeat), median(tps, repeat), median(sh, repeat),
               bp->open_s, peak_rss_mb());
        if (with_answers) printf(",\"answers_sha256\":\"%s\"", hex);
        printf("}\n");
    }
    fflush(stdout);
    free(st);
    free(sh);
    free(tps);
    return rc;
}

/* The untimed --prime forward: one record of n synthetic ids. 0, or 1 with a message on stderr. */
static int prime_forward(clef_engine *e, size_t n) {
    char err[1200];
    double a, b;
    clef_job **jobs = make_jobs(e, NULL, 0, n, 1);
    if (!jobs) return 1;
    int rc = clef_bench_run(e, jobs, 1, &a, &b, err, sizeof err);
    if (rc) fprintf(stderr, "clef: %s\n", err);
    free_jobs(jobs, 1);
    return rc ? 1 : 0;
}

int cmd_bench(int argc, char **argv) {
    clef_options o;
    clef_options_default(&o);
    const char *tokens_arg = NULL, *request = NULL;
    int repeat = 3, warmup = 0, prime = 32, records = 1;
    const cli_opt opts[] = {
        CLI_OPTS_ENGINE(&o),
        {.name = "--tokens", .kind = CLI_STR, .dst = &tokens_arg, .arg = "N[,N...]",
         .help = "token counts to time, comma-separated (each in [3, 262144], at most 16); or --request"},
        {.name = "--request", .kind = CLI_FILE, .dst = &request, .arg = "F|-",
         .help = "time this request's record instead (- = stdin); the summary adds answers_sha256"},
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
    const cli_cmd cmd = {.verb = "bench", .usage = "--model DIR (--tokens N[,N...] | --request F|-) [options]",
                         .opts = opts,
                         .about = "Prints one JSON line per run and a median summary line per count (stdout).\n"};
    int parsed = cli_parse(&cmd, argc, argv);
    if (parsed != CLI_CONTINUE) return parsed;
    long counts[MAX_COUNTS];
    int n_counts = 1;
    if (!tokens_arg == !request) {
        fprintf(stderr, "clef bench: give one of --tokens and --request\n");
        return 2;
    }
    if (tokens_arg && (n_counts = parse_counts(tokens_arg, counts)) < 0) {
        fprintf(stderr, "clef bench: --tokens: '%s' is not a list of up to %d counts in [3, %d]\n", tokens_arg,
                MAX_COUNTS, MAX_TOKENS);
        return 2;
    }
    if (prime == 1 || prime == 2) {
        fprintf(stderr, "clef bench: --prime: '%d' is not 0 or an integer in [3, 4096]\n", prime);
        return 2;
    }
    size_t body_len = 0;
    char *body = request ? cli_read_all(request, CLI_MAX_INPUT_BYTES, &body_len) : NULL;
    if (request && !body) return 2;
    o.text_only = !request; /* synthetic ids never need the vision tower */

    char err[1200];
    double t0 = clef_now();
    clef_engine *e = clef_open(&o, err, sizeof err);
    const bench_plan bp = {repeat, warmup, records, o.threads, clef_now() - t0};
    if (!e) {
        fprintf(stderr, "clef: %s\n", err);
        free(body);
        return 3;
    }
    cli_engine_note("bench", e);
    int rc = prime ? prime_forward(e, (size_t)prime) : 0;
    for (int c = 0; c < n_counts && rc == 0; c++) {
        clef_job **jobs = make_jobs(e, body, body_len, body ? 0 : (size_t)counts[c], records);
        if (!jobs) { rc = 1; break; }
        rc = time_jobs(e, jobs, &bp, body != NULL);
        free_jobs(jobs, records); /* those answers_sha256 finished are NULL */
    }
    clef_close(e);
    free(body);
    return rc;
}
