/* Allocation-failure sweep over whole requests (issue #20 item 4; SQLite's malloc test in spirit).
 *
 * This program is linked with -Wl,--wrap=malloc,... (Makefile: ALLOC_WRAP; mmap and mprotect too:
 * the buffer pools' ranges), so every allocation of
 * libclef.a's code goes through the counters below; an armed hook fails the N-th allocation after
 * arming (one shot: the allocations after it succeed, as when memory comes back). On models/tiny,
 * with one engine (clef_open once, 1 thread so the order of allocations is fixed, the state cache
 * on), each scenario is run once to record its answers, count its allocations A and note each
 * one's site (the return address into libclef.a, glibc's backtrace). Failing every N in 1..A
 * costs a whole request per N (~30 min on a 2-core AVX2 machine: too long for CI), and most N
 * repeat a site already failed (the same allocation in the next layer, the next chunk); so the
 * sweep fails the first and the last allocation of every site: every site is failed, at the
 * start and at the end of its loop (-DPATH_DEPTH=2 or more tells sites apart by their callers
 * too). Under ASan, where a run is slower, ~60 N spread evenly over the run. CLEF_ALLOC_STRIDE=k
 * fails every k-th N instead (1: every N, the exhaustive sweep); CLEF_ALLOC_ONLY=name runs one
 * scenario; CLEF_ALLOC_PLAN=1 prints the runs each would make. With the N-th allocation failing,
 *  - every answer is the recorded one or a clean OutOfMemory body (HTTP 500) — never a crash, an
 *    InternalError or another refusal;
 *  - the hook really failed an allocation (N was reached);
 *  - the same scenario run right after, unarmed, answers byte-equal to the recorded answers (the
 *    engine, its arena and its state cache are still sound).
 * The state cache is emptied before every run (so misses, reservations, snapshots and hits happen
 * in every run). Under ASan LeakSanitizer checks each scenario's sweep for leaks
 * (__lsan_do_recoverable_leak_check) and the whole program at exit.
 *
 * Scenarios: a text request (three question types); an image request (PNG, the vision tower); two
 * requests on one long state (a miss that snapshots, then a hit that resumes); a packed batch of
 * three jobs in one clef_run_batch (the long state, the text request, the image request: a failed
 * group is rerun one job at a time).
 * Exit 0 pass, 1 fail, 77 skip (models/tiny missing). */
#include <errno.h>
#include <execinfo.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "clef.h"
#include "engine/engine_internal.h"
#include "engine/state_cache.h"
#include "test.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#define UNDER_ASAN 1
#else
#define UNDER_ASAN 0
#endif

/* ---------------------------------------------------------------- the hook */

static int g_armed;        /* count and maybe fail while set */
static long g_count;       /* allocations since arming */
static long g_fail_at;     /* the one to fail (0: none) */
static long g_failed;      /* allocations failed since arming */

void *__real_malloc(size_t n);
void *__real_calloc(size_t m, size_t n);
void *__real_realloc(void *p, size_t n);
int __real_posix_memalign(void **p, size_t a, size_t n);
void *__real_aligned_alloc(size_t a, size_t n);
char *__real_strdup(const char *s);
void *__real_mmap(void *a, size_t n, int prot, int flags, int fd, off_t off);
int __real_mprotect(void *a, size_t n, int prot);

/* While recording, the call path of allocation n goes to g_path[n-1] (the counting run only: it is
 * 1 thread, so no lock): a hash of the allocation's site in libclef.a and PATH_DEPTH - 1 callers
 * above it. backtrace() unwinds by DWARF, so it works without frame pointers; its own first use
 * loads libgcc through libc's malloc, not this hook (--wrap binds only our objects). The hook's
 * frames are not inlined, so the site is always frame 3 (record_path, hook_fails, __wrap_*). */
#ifndef PATH_DEPTH
#define PATH_DEPTH 1
#endif
#define PATH_SKIP 3
#define PATH_MAX_ALLOCS 65536
static uint64_t g_path[PATH_MAX_ALLOCS];
static int g_recording;

__attribute__((noinline)) static void record_path(long n) {
    if (n > PATH_MAX_ALLOCS) return;
    void *frames[PATH_SKIP + PATH_DEPTH];
    int k = backtrace(frames, PATH_SKIP + PATH_DEPTH);
    uint64_t h = 1469598103934665603ull; /* FNV-1a over the return addresses */
    for (int i = PATH_SKIP; i < k; i++) {
        h ^= (uint64_t)(uintptr_t)frames[i];
        h *= 1099511628211ull;
    }
    g_path[n - 1] = h;
}

__attribute__((noinline)) static int hook_fails(void) {
    if (!__atomic_load_n(&g_armed, __ATOMIC_RELAXED)) return 0;
    long n = __atomic_add_fetch(&g_count, 1, __ATOMIC_RELAXED);
    if (g_recording) record_path(n);
    if (n != g_fail_at) return 0;
    __atomic_add_fetch(&g_failed, 1, __ATOMIC_RELAXED);
    return 1;
}

void *__wrap_malloc(size_t n) { return hook_fails() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t m, size_t n) { return hook_fails() ? NULL : __real_calloc(m, n); }
void *__wrap_realloc(void *p, size_t n) { return hook_fails() ? NULL : __real_realloc(p, n); }
int __wrap_posix_memalign(void **p, size_t a, size_t n) { return hook_fails() ? ENOMEM : __real_posix_memalign(p, a, n); }
void *__wrap_aligned_alloc(size_t a, size_t n) { return hook_fails() ? NULL : __real_aligned_alloc(a, n); }
char *__wrap_strdup(const char *s) { return hook_fails() ? NULL : __real_strdup(s); }
/* the buffer pools' ranges: reserved (mmap) and grown (mprotect) */
void *__wrap_mmap(void *a, size_t n, int prot, int flags, int fd, off_t off) {
    if (!hook_fails()) return __real_mmap(a, n, prot, flags, fd, off);
    errno = ENOMEM;
    return MAP_FAILED;
}
int __wrap_mprotect(void *a, size_t n, int prot) {
    if (!hook_fails()) return __real_mprotect(a, n, prot);
    errno = ENOMEM;
    return -1;
}

static void arm(long fail_at) {
    g_count = 0;
    g_failed = 0;
    g_fail_at = fail_at;
    __atomic_store_n(&g_armed, 1, __ATOMIC_SEQ_CST);
}
static void disarm(void) { __atomic_store_n(&g_armed, 0, __ATOMIC_SEQ_CST); }

/* ---------------------------------------------------------------- requests */

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc((size_t)n + 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) { free(p); p = NULL; }
    fclose(f);
    if (p) p[n] = 0;
    return p;
}

#define MAXR 4
typedef struct {
    const char *name;
    int packed;              /* 1: one clef_run_batch over every request; 0: clef_decide each */
    int n;
    const char *req[MAXR];
    char *want[MAXR];        /* the recorded answers */
    long allocs;             /* allocations of one run */
} scenario;

typedef struct {
    char *body[MAXR];
    const char *type[MAXR];
    int status[MAXR];
} answers;

static void answers_free(answers *a) {
    for (int i = 0; i < MAXR; i++) free(a->body[i]);
    memset(a, 0, sizeof *a);
}

/* Empties the state cache (unarmed), so each run misses, snapshots and hits again. */
static void reset_cache(clef_engine *e) {
    if (!e->cache) return;
    size_t limit = e->cache->limit;
    clef_cache_destroy(e->cache);
    e->cache = clef_cache_create(e->ops, &e->mf->cfg, (size_t)e->mf->head_cfg.width, limit);
}

static void keep(answers *a, int i, clef_result *r) {
    a->body[i] = r->body;
    a->type[i] = r->error_type;
    a->status[i] = r->http_status;
    r->body = NULL;
}

static void run(clef_engine *e, const scenario *s, answers *a) {
    memset(a, 0, sizeof *a);
    if (!s->packed) {
        for (int i = 0; i < s->n; i++) {
            clef_result r;
            clef_decide(e, s->req[i], strlen(s->req[i]), &r);
            keep(a, i, &r);
        }
        return;
    }
    clef_job *jobs[MAXR];
    int nj = 0, slot[MAXR];
    for (int i = 0; i < s->n; i++) {
        clef_result r;
        memset(&r, 0, sizeof r);
        clef_job *j = clef_job_prepare(e, s->req[i], strlen(s->req[i]), &r);
        if (j) { slot[nj] = i; jobs[nj++] = j; }
        else keep(a, i, &r);
    }
    if (nj) clef_run_batch(e, jobs, (size_t)nj);
    for (int k = 0; k < nj; k++) {
        clef_result r;
        clef_job_finish(jobs[k], &r);
        keep(a, slot[k], &r);
    }
}

/* ---------------------------------------------------------------- the sweep */

static int is_clean_oom(const answers *a, int i) {
    return a->type[i] && !strcmp(a->type[i], "OutOfMemory") && a->status[i] == 500 && a->body[i] &&
           strstr(a->body[i], "{\"error\":{\"type\":\"OutOfMemory\",\"message\":\"") == a->body[i];
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A set of call-path hashes (open addressing; 0 is taken as empty, a real 0 hash shares a slot). */
#define SET_SLOTS (2 * PATH_MAX_ALLOCS)
static uint64_t g_set[SET_SLOTS];
static unsigned char g_in[SET_SLOTS];

static int first_time(uint64_t key) { /* 1 the first time key is seen since the set was cleared */
    size_t i = (size_t)(key ^ (key >> 29)) % SET_SLOTS;
    while (g_in[i] && g_set[i] != key) i = (i + 1) % SET_SLOTS;
    if (g_in[i]) return 0;
    g_set[i] = key;
    g_in[i] = 1;
    return 1;
}

/* The N to fail, ascending, into picks (allocs entries): with stride k every k-th N (and N = 1);
 * else the first and the last allocation of every site (call path). Returns how many, and the
 * number of distinct sites in *paths. */
static long choose(long allocs, long stride, long *picks, long *paths) {
    long n = 0;
    *paths = 0;
    if (stride > 0) {
        for (long N = 1; N <= allocs; N += (N == 1 || stride == 1) ? 1 : stride) picks[n++] = N;
        return n;
    }
    unsigned char *pick = calloc((size_t)allocs + 1, 1);
    if (!pick) return 0;
    memset(g_in, 0, sizeof g_in);
    for (long N = 1; N <= allocs; N++) /* forward: the first of each site */
        if (first_time(g_path[N - 1])) pick[N] = 1, ++*paths;
    memset(g_in, 0, sizeof g_in);
    for (long N = allocs; N >= 1; N--) /* backward: the last of each site */
        if (first_time(g_path[N - 1])) pick[N] = 1;
    for (long N = 1; N <= allocs; N++)
        if (pick[N]) picks[n++] = N;
    free(pick);
    return n;
}

static void sweep(clef_engine *e, scenario *s, const long *picks, long npicks, const char *how) {
    double t0 = now();
    long tried = 0, ooms = 0, absorbed = 0, bad = 0;
    for (long k = 0; k < npicks; k++) {
        long N = picks[k];
        answers a, again;
        reset_cache(e);
        arm(N);
        run(e, s, &a);
        disarm();
        tried++;
        int any_oom = 0, ok = g_failed == 1;
        if (!ok) fprintf(stderr, "%s N=%ld: %ld allocations failed (expected 1; %ld made)\n", s->name, N, g_failed, g_count);
        for (int i = 0; i < s->n; i++) {
            if (a.body[i] && s->want[i] && !strcmp(a.body[i], s->want[i])) continue;
            if (is_clean_oom(&a, i)) { any_oom = 1; continue; }
            ok = 0;
            fprintf(stderr, "%s N=%ld request %d: %s (HTTP %d): %.300s\n", s->name, N, i,
                    a.type[i] ? a.type[i] : "success", a.status[i], a.body[i] ? a.body[i] : "(no body)");
        }
        if (any_oom) ooms++;
        else absorbed++;
        run(e, s, &again); /* the next requests, unarmed: the recorded answers */
        for (int i = 0; i < s->n; i++) {
            if (again.body[i] && s->want[i] && !strcmp(again.body[i], s->want[i])) continue;
            ok = 0;
            fprintf(stderr, "%s N=%ld request %d: the next run answered differently: %.300s\n", s->name, N, i,
                    again.body[i] ? again.body[i] : "(no body)");
        }
        answers_free(&a);
        answers_free(&again);
        CHECK_MSG(ok, "%s: allocation %ld failed", s->name, N);
        if (!ok && ++bad >= 5) break; /* enough to debug */
    }
#if UNDER_ASAN
    CHECK_MSG(__lsan_do_recoverable_leak_check() == 0, "%s: LeakSanitizer found leaks (above)", s->name);
#endif
    printf("%-12s %6ld allocations, %5ld runs (%s): %ld answered OutOfMemory, %ld absorbed (%.1f s)\n",
           s->name, s->allocs, tried, how, ooms, absorbed, now() - t0);
}

int main(void) {
    const char *dir = getenv("CLEF_TINY") ? getenv("CLEF_TINY") : "models/tiny";
    char path[1024];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "rb");
    if (!f) {
        printf("skip: no tiny model at %s (make tiny)\n", dir);
        return 77;
    }
    fclose(f);
    char *text = slurp("tests/corpus/requests/t001_basic.json");
    char *image = slurp("tests/corpus/requests/m002_small_100x80_png.json");
    if (!text || !image) {
        printf("missing corpus requests (run from the repository root)\n");
        return 1;
    }
    /* one long state (several delta-rule chunks), three question sets */
    static char state[8192];
    size_t off = 0;
    for (int i = 0; i < 8; i++)
        off += (size_t)snprintf(state + off, sizeof state - off, "The ticket %d says the printer on floor %d jams after %d pages. ",
                                i, i % 7, 10 + i);
    static const char *qs[3] = {
        "{\"urgent\":{\"type\":\"noul\",\"instructions\":\"Is this urgent?\"}}",
        "{\"team\":{\"type\":\"choice\",\"instructions\":\"Which team?\",\"criteria\":{\"hardware\":null,\"software\":null,\"facilities\":null}}}",
        "{\"sev\":{\"type\":\"score\",\"instructions\":\"How severe?\",\"criteria\":[\"low\",\"medium\",\"high\"]},\"reply\":{\"type\":\"noul\"}}",
    };
    static char longreq[3][12288];
    for (int i = 0; i < 3; i++)
        snprintf(longreq[i], sizeof longreq[i], "{\"model\":\"clef-flash\",\"state\":\"%s\",\"questions\":%s,\"raw\":true}", state, qs[i]);

    clef_options o;
    clef_options_default(&o);
    o.model_dir = dir;
    o.threads = 1;
    o.state_cache_mb = 64;
    char err[512];
    clef_engine *e = clef_open(&o, err, sizeof err);
    if (!e) {
        printf("clef_open: %s\n", err);
        return 1;
    }
    CHECK_MSG(e->cache != NULL, "the state cache is on");

    scenario sc[4] = {
        {.name = "text", .n = 1, .req = {text}},
        {.name = "image", .n = 1, .req = {image}},
        {.name = "state-cache", .n = 2, .req = {longreq[0], longreq[1]}},
        {.name = "packed", .packed = 1, .n = 3, .req = {longreq[2], text, image}},
    };
    const char *st = getenv("CLEF_ALLOC_STRIDE");
    long stride_env = st ? atol(st) : 0;
    const char *only = getenv("CLEF_ALLOC_ONLY"); /* one scenario by name (debugging) */
    for (int k = 0; k < 4; k++) {
        scenario *s = &sc[k];
        if (only && strcmp(only, s->name)) continue;
        answers a;
        for (int warm = 0; warm < 2; warm++) { /* count on the second run: the first makes lazy state */
            if (warm) answers_free(&a);
            reset_cache(e);
            g_recording = warm;
            arm(0);
            run(e, s, &a);
            disarm();
            g_recording = 0;
        }
        s->allocs = g_count;
        for (int i = 0; i < s->n; i++) {
            CHECK_MSG(a.type[i] == NULL && a.body[i], "%s: request %d answers: %s", s->name, i,
                      a.body[i] ? a.body[i] : "(no body)");
            s->want[i] = a.body[i];
            a.body[i] = NULL;
        }
        if (!strcmp(s->name, "state-cache")) { /* one miss that snapshots, then hits */
            clef_cache_info ci;
            clef_engine_cache_info(e, &ci);
            CHECK_MSG(ci.misses == 1 && ci.hits == 1 && ci.inserts == 1, "state cache: %llu misses, %llu hits, %llu inserts",
                      (unsigned long long)ci.misses, (unsigned long long)ci.hits, (unsigned long long)ci.inserts);
        }
        if (s->allocs == 0) { CHECK_MSG(0, "%s: no allocation counted (is the test linked with ALLOC_WRAP?)", s->name); continue; }
        if (s->allocs > PATH_MAX_ALLOCS) { CHECK_MSG(0, "%s: %ld allocations, more than the %d recorded", s->name, s->allocs, PATH_MAX_ALLOCS); continue; }
        long *picks = malloc((size_t)s->allocs * sizeof *picks), paths = 0;
        if (!picks) { CHECK_MSG(0, "out of memory"); continue; }
        /* under ASan ~60 points spread over the run */
        long stride = stride_env > 0 ? stride_env : UNDER_ASAN ? (s->allocs + 59) / 60 : 0;
        long npicks = choose(s->allocs, stride, picks, &paths);
        char how[64];
        if (stride > 0) snprintf(how, sizeof how, "every %ld-th", stride);
        else snprintf(how, sizeof how, "%ld sites, the first and last of each", paths);
        CHECK_MSG(npicks > 0, "%s: nothing to sweep", s->name);
        if (getenv("CLEF_ALLOC_PLAN")) printf("%-12s %6ld allocations, %5ld runs planned (%s)\n", s->name, s->allocs, npicks, how);
        else sweep(e, s, picks, npicks, how);
        free(picks);
    }
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < sc[k].n; i++) free(sc[k].want[i]);
    clef_close(e);
    free(text);
    free(image);
    return TEST_END();
}
