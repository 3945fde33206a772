/* Batch invariance and the state cache, driven through the public API (tests/parity/test_packed.py).
 *
 *   pack_tool --model DIR [--threads N] [--seed S] [--max-batch B] [--rounds R] [--cache-mb M] FILE...
 *
 * Each FILE holds one request body. Three engines on the same model:
 *   alone:  state cache off; every request decided by itself — the reference bytes;
 *   packed: state cache off; R rounds of random groups of 1..B requests (random companions, repeats
 *           allowed) through clef_job_prepare / clef_run_batch / clef_job_finish;
 *   cached: state cache of M MiB (default 1024); the same random groups (so a group mixes hits and
 *           misses once states repeat), then every request twice more by itself (a miss or a hit,
 *           then a hit).
 * Every answer must equal the alone bytes (body, status and error name). Prints one line per
 * mismatch (at most 10), then a summary with the cache's counters; exits 0 when all equal, 1 when
 * any differs, 2 on a usage or open error. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clef.h"

typedef struct {
    char *body;
    size_t len;
    char *name;
} req_t;

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    size_t r;
    while (b && (r = fread(b + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) {
            char *nb = realloc(b, cap *= 2);
            if (!nb) { free(b); b = NULL; }
            else b = nb;
        }
    }
    fclose(f);
    if (b) *len = n;
    return b;
}

static uint64_t rng_state = 88172645463325252ull;
static uint64_t rnd(void) { /* xorshift64: the same groups for the same seed everywhere */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static clef_engine *open_engine(const char *model, int threads, size_t cache_mb) {
    clef_options o;
    clef_options_default(&o);
    o.model_dir = model;
    o.threads = threads;
    o.state_cache_mb = cache_mb;
    char err[512];
    clef_engine *e = clef_open(&o, err, sizeof err);
    if (!e) fprintf(stderr, "pack_tool: %s\n", err);
    return e;
}

static int mismatches;

static void compare(const char *what, const req_t *r, const clef_result *want, const clef_result *got) {
    int same = want->body_len == got->body_len && memcmp(want->body, got->body, got->body_len) == 0 &&
               want->http_status == got->http_status &&
               ((!want->error_type && !got->error_type) ||
                (want->error_type && got->error_type && !strcmp(want->error_type, got->error_type)));
    if (same) return;
    if (++mismatches <= 10)
        printf("MISMATCH %s %s:\n  alone: %.*s\n  got:   %.*s\n", what, r->name, (int)(want->body_len > 400 ? 400 : want->body_len),
               want->body, (int)(got->body_len > 400 ? 400 : got->body_len), got->body);
}

/* One group through the batch path; results compared with the alone answers. */
static void run_group(clef_engine *e, const char *what, req_t *rs, const clef_result *alone, const size_t *idx, size_t n) {
    clef_job **jobs = calloc(n, sizeof *jobs);
    clef_result *res = calloc(n, sizeof *res);
    size_t *who = calloc(n, sizeof *who);
    size_t m = 0;
    if (!jobs || !res || !who) { fprintf(stderr, "pack_tool: out of memory\n"); exit(2); }
    for (size_t i = 0; i < n; i++) {
        clef_result pre = {0};
        clef_job *j = clef_job_prepare(e, rs[idx[i]].body, rs[idx[i]].len, &pre);
        if (!j) {
            compare(what, &rs[idx[i]], &alone[idx[i]], &pre);
            clef_result_free(&pre);
            continue;
        }
        who[m] = idx[i];
        jobs[m++] = j;
    }
    clef_run_batch(e, jobs, m);
    for (size_t i = 0; i < m; i++) {
        clef_job_finish(jobs[i], &res[i]);
        compare(what, &rs[who[i]], &alone[who[i]], &res[i]);
        clef_result_free(&res[i]);
    }
    free(jobs);
    free(res);
    free(who);
}

int main(int argc, char **argv) {
    const char *model = NULL;
    int threads = 0, rounds = 4;
    size_t max_batch = 32, cache_mb = 1024;
    int nf = 0;
    char **files = calloc((size_t)argc, sizeof *files);
    if (!files) return 2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) rng_state ^= strtoull(argv[++i], NULL, 10) * 0x9E3779B97F4A7C15ull;
        else if (!strcmp(argv[i], "--max-batch") && i + 1 < argc) max_batch = (size_t)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--cache-mb") && i + 1 < argc) cache_mb = (size_t)atoll(argv[++i]);
        else files[nf++] = argv[i];
    }
    if (!model || nf == 0 || max_batch == 0) {
        fprintf(stderr, "usage: pack_tool --model DIR [--threads N] [--seed S] [--max-batch B] [--rounds R] [--cache-mb M] FILE...\n");
        return 2;
    }
    req_t *rs = calloc((size_t)nf, sizeof *rs);
    clef_result *alone = calloc((size_t)nf, sizeof *alone);
    if (!rs || !alone) return 2;
    for (int i = 0; i < nf; i++) {
        rs[i].name = files[i];
        rs[i].body = read_file(files[i], &rs[i].len);
        if (!rs[i].body) { fprintf(stderr, "pack_tool: cannot read %s\n", files[i]); return 2; }
    }

    clef_engine *ea = open_engine(model, threads, 0);
    if (!ea) return 2;
    for (int i = 0; i < nf; i++) clef_decide(ea, rs[i].body, rs[i].len, &alone[i]);
    clef_close(ea);

    /* the same random groups for both engines */
    size_t total = (size_t)rounds * (size_t)nf, ng = 0, *idx = malloc(total * sizeof *idx), *gs = malloc(total * sizeof *gs);
    if (!idx || !gs) return 2;
    for (size_t k = 0; k < total;) {
        size_t g = 1 + (size_t)(rnd() % max_batch);
        if (g > total - k) g = total - k;
        for (size_t t = 0; t < g; t++) idx[k + t] = (size_t)(rnd() % (uint64_t)nf);
        gs[ng++] = g;
        k += g;
    }
    size_t groups_multi = 0;
    for (size_t g = 0; g < ng; g++) groups_multi += gs[g] > 1;

    clef_engine *ep = open_engine(model, threads, 0);
    if (!ep) return 2;
    for (size_t g = 0, k = 0; g < ng; k += gs[g], g++) run_group(ep, "packed", rs, alone, idx + k, gs[g]);
    clef_close(ep);

    clef_engine *ec = open_engine(model, threads, cache_mb);
    if (!ec) return 2;
    for (size_t g = 0, k = 0; g < ng; k += gs[g], g++) run_group(ec, "packed+cache", rs, alone, idx + k, gs[g]);
    for (int i = 0; i < nf; i++)
        for (int rep = 0; rep < 2; rep++) {
            size_t one = (size_t)i;
            run_group(ec, rep ? "cached-again" : "cached", rs, alone, &one, 1);
        }
    clef_cache_info ci;
    clef_engine_cache_info(ec, &ci);
    clef_close(ec);

    printf("%d requests, %zu groups (%zu with company, up to %zu records): %d mismatches; cache: %llu hits, %llu misses, "
           "%llu tokens reused, %zu entries, %zu bytes (limit %zu), %llu evictions\n",
           nf, ng, groups_multi, max_batch, mismatches, (unsigned long long)ci.hits, (unsigned long long)ci.misses,
           (unsigned long long)ci.tokens_reused, ci.entries, ci.bytes, ci.limit, (unsigned long long)ci.evictions);
    for (int i = 0; i < nf; i++) {
        free(rs[i].body);
        clef_result_free(&alone[i]);
    }
    free(rs);
    free(alone);
    free(idx);
    free(gs);
    free(files);
    return mismatches ? 1 : 0;
}
