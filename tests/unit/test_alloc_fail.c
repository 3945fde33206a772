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
 *    InternalError or another refusal; once a request has answered OutOfMemory the armed run ends
 *    (the requests after it in a scenario, or a packed scenario's batch when preparing answered it,
 *    are not run: they would be unarmed runs, and the checks below cover what comes next);
 *  - the hook really failed an allocation (N was reached);
 *  - the engine is at rest as after an unarmed run: the state cache holds no pin or reservation,
 *    its list and counters agree, and each entry is byte-equal to one the unarmed run left (every
 *    byte a later hit would read: ids, image hashes, each layer's state, the head's rows); with
 *    the cache emptied, glibc's bytes in use are no more than after the unarmed run (exact to the
 *    byte: the test runs itself with glibc's per-thread cache off; under ASan LeakSanitizer
 *    instead) and no activation block is still handed out.
 *  - after every RERUN_EVERY-th N (8) and the last, the same scenario run right after, unarmed, on
 *    the cache the armed run left, answers byte-equal to the recorded answers.
 * Why the byte-equal rerun is not after every N (it was; it was half the time): what a failed run
 * can leave for the next request is the state cache's entries, memory it kept or lost, and
 * memory it wrote that it should not have. The first two are checked after every N, entry by
 * entry and byte by byte (a rerun read only the entries its requests hit, and saw no leak); a
 * wrong write that outlives the run still shows in the next rerun (at most 7 N later; its message
 * names the range of N) or in any armed run in between that answers, and under ASan at once. The state cache is emptied before every run (so misses, reservations, snapshots
 * and hits happen in every run). Under ASan LeakSanitizer checks each scenario's sweep for leaks
 * (__lsan_do_recoverable_leak_check) and the whole program at exit. Each scenario prints its
 * plan's size and its wall and CPU seconds (the CPU ones mean something on a shared machine).
 *
 * Scenarios: a text request (three question types); an image request (PNG, the vision tower); two
 * requests on one long state (a miss that snapshots, then a hit that resumes); a packed batch of
 * two jobs in one clef_run_batch (the long state, the image request: a failed group is rerun one
 * job at a time). The packed batch had the text request as a third job: without it the batch
 * reaches the same sites (the same set of call-path hashes, 98) at a third less time.
 * Exit 0 pass, 1 fail, 77 skip (models/tiny missing). */
#include <errno.h>
#include <execinfo.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

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
    int asked[MAXR];         /* 0: left unasked (run's stop_once_answered) */
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

static int is_oom(const answers *a, int i) { return a->type[i] && !strcmp(a->type[i], "OutOfMemory"); }

static void keep(answers *a, int i, clef_result *r) {
    a->asked[i] = 1;
    a->body[i] = r->body;
    a->type[i] = r->error_type;
    a->status[i] = r->http_status;
    r->body = NULL;
}

/* Runs the scenario's requests into a. stop_once_answered (armed runs): once a request has answered
 * OutOfMemory the run ends there: the requests after it are left unasked (a->asked[i] 0), and a packed
 * scenario whose preparing answered it frees its prepared jobs instead of running them. */
static void run(clef_engine *e, const scenario *s, answers *a, int stop_once_answered) {
    memset(a, 0, sizeof *a);
    if (!s->packed) {
        for (int i = 0; i < s->n; i++) {
            if (stop_once_answered && i > 0 && is_oom(a, i - 1)) return;
            clef_result r;
            clef_decide(e, s->req[i], strlen(s->req[i]), &r);
            keep(a, i, &r);
        }
        return;
    }
    clef_job *jobs[MAXR];
    int nj = 0, slot[MAXR], answered = 0;
    for (int i = 0; i < s->n; i++) {
        clef_result r;
        memset(&r, 0, sizeof r);
        clef_job *j = clef_job_prepare(e, s->req[i], strlen(s->req[i]), &r);
        if (j) { slot[nj] = i; jobs[nj++] = j; }
        else keep(a, i, &r), answered |= is_oom(a, i);
    }
    if (stop_once_answered && answered) {
        for (int k = 0; k < nj; k++) clef_job_free(jobs[k]);
        return;
    }
    if (nj) clef_run_batch(e, jobs, (size_t)nj);
    for (int k = 0; k < nj; k++) {
        clef_result r;
        clef_job_finish(jobs[k], &r);
        keep(a, slot[k], &r);
    }
}

/* ---------------------------------------------------------------- the plan */

static int is_clean_oom(const answers *a, int i) {
    return is_oom(a, i) && a->status[i] == 500 && a->body[i] &&
           strstr(a->body[i], "{\"error\":{\"type\":\"OutOfMemory\",\"message\":\"") == a->body[i];
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static double cpu_now(void) { /* the machine may be shared: CPU seconds say what the test costs */
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
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

/* ---------------------------------------------------------------- the engine at rest */

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 1099511628211ull;
    return h;
}

/* Every byte a hit on cache entry x would read (the CPU backend's buffers are host memory): its
 * ids, image hashes, each layer's saved state and the head's memory rows. */
static uint64_t entry_digest(const clef_engine *e, const clef_cache_entry *x) {
    const clef_text_config *tc = &e->mf->cfg.text;
    size_t kd = (size_t)tc->linear_num_key_heads * (size_t)tc->linear_key_head_dim;
    size_t vd = (size_t)tc->linear_num_value_heads * (size_t)tc->linear_value_head_dim;
    size_t conv = ((size_t)tc->linear_conv_kernel_dim - 1) * (2 * kd + vd);
    size_t rec = (size_t)tc->linear_num_value_heads * (size_t)tc->linear_key_head_dim * (size_t)tc->linear_value_head_dim;
    size_t kvd = (size_t)tc->num_key_value_heads * (size_t)tc->head_dim, rows = x->st.rows;
    uint64_t h = fnv(1469598103934665603ull, &rows, sizeof rows);
    h = fnv(h, x->ids, rows * sizeof *x->ids);
    h = fnv(h, x->img_hash, x->n_images * 32);
    for (int l = 0; l < tc->num_hidden_layers; l++) {
        if (tc->layer_types[l] == CLEF_LAYER_FULL) {
            h = fnv(h, x->st.k[l], rows * kvd * sizeof(float));
            h = fnv(h, x->st.v[l], rows * kvd * sizeof(float));
        } else {
            h = fnv(h, x->st.conv[l], conv * sizeof(float));
            h = fnv(h, x->st.rec[l], rec * sizeof(float));
        }
    }
    return fnv(h, x->mem, rows * (size_t)e->mf->head_cfg.width * sizeof(float));
}

/* What an unarmed run leaves: the state cache's entries (digests), and the memory the engine holds
 * once its cache is emptied (glibc's bytes in use, the backend's live activation blocks). */
#define MAX_ENTRIES 16
typedef struct {
    uint64_t digest[MAX_ENTRIES];
    int n;
    size_t heap, live;
} at_rest;

/* glibc's bytes in use (all its arenas). Exact only without its per-thread cache, whose freed
 * chunks mallinfo2 counts as in use: main runs the test again with that cache off
 * (without_tcache). 0 when that did not happen, and under ASan (its own allocator; LeakSanitizer
 * checks there). */
static size_t heap_in_use(void) {
    if (UNDER_ASAN || !getenv("CLEF_ALLOC_NO_TCACHE")) return 0;
    struct mallinfo2 m = mallinfo2();
    return m.uordblks + m.hblkhd;
}

static void without_tcache(char **argv) {
    if (UNDER_ASAN || getenv("CLEF_ALLOC_NO_TCACHE")) return;
    const char *t = getenv("GLIBC_TUNABLES");
    char v[2048];
    snprintf(v, sizeof v, "%s%sglibc.malloc.tcache_count=0", t ? t : "", t && *t ? ":" : "");
    setenv("GLIBC_TUNABLES", v, 1);
    setenv("CLEF_ALLOC_NO_TCACHE", "1", 1);
    execv("/proc/self/exe", argv);
    unsetenv("CLEF_ALLOC_NO_TCACHE"); /* exec failed: go on without the heap measure */
    fprintf(stderr, "note: could not run again without glibc's tcache; the heap is not measured\n");
}

static size_t live_blocks(clef_engine *e) {
    clef_ops_buffers b = {0};
    if (e->ops->buffer_stats) e->ops->buffer_stats(e->ops, &b);
    return b.live_bytes;
}

/* The cache's entries into r (after an unarmed run). */
static void note_entries(clef_engine *e, at_rest *r) {
    r->n = 0;
    for (clef_cache_entry *x = e->cache->head; x && r->n < MAX_ENTRIES; x = x->next) r->digest[r->n++] = entry_digest(e, x);
}

/* 1 when the state cache is sound after an armed run: no pin or reservation left, its list and
 * counters agree, and every entry is byte-equal to one the unarmed run left (an entry may be
 * missing: a failure may keep it out, never make it different). Else prints why and returns 0. */
static int cache_sound(clef_engine *e, const at_rest *want, const char *name, long N) {
    clef_state_cache *c = e->cache;
    size_t bytes = 0, entries = 0;
    int ok = 1;
    if (c->pending != 0) fprintf(stderr, "%s N=%ld: %zu bytes of cache reservations left\n", name, N, c->pending), ok = 0;
    for (clef_cache_entry *x = c->head, *prev = NULL; x; prev = x, x = x->next) {
        bytes += x->bytes, entries++;
        if (x->pins || !x->inserted || x->prev != prev || (!x->next && c->tail != x)) {
            fprintf(stderr, "%s N=%ld: cache entry %zu: %d pins, inserted %d, links %s\n", name, N, entries, x->pins,
                    x->inserted, x->prev != prev ? "broken" : "ok");
            ok = 0;
            continue;
        }
        uint64_t d = entry_digest(e, x);
        int found = 0;
        for (int i = 0; i < want->n; i++) found |= want->digest[i] == d;
        if (!found) fprintf(stderr, "%s N=%ld: cache entry %zu (%zu rows) differs from the unarmed run's\n", name, N, entries, x->st.rows), ok = 0;
    }
    clef_cache_stats st;
    clef_cache_get_stats(c, &st);
    if (st.bytes != bytes || st.entries != entries) {
        fprintf(stderr, "%s N=%ld: cache counts %zu bytes in %zu entries, its list %zu in %zu\n", name, N, st.bytes, st.entries, bytes, entries);
        ok = 0;
    }
    return ok;
}

/* 1 when the engine, its cache emptied, holds no more than it held after the unarmed run: a failed
 * run freed all it took (glibc's heap, to the byte; under ASan LeakSanitizer checks this) and gave
 * back every activation block. (Less is allowed: a buffer grown on demand may be smaller for a while
 * after a run that stopped early.) */
static int memory_sound(clef_engine *e, const at_rest *want, const char *name, long N) {
    size_t heap = heap_in_use(), live = live_blocks(e);
    if (heap <= want->heap && live == want->live) return 1;
    fprintf(stderr, "%s N=%ld: at rest the engine holds %zu heap bytes (%+lld) and %zu bytes of activation blocks (%+lld)\n",
            name, N, heap, (long long)heap - (long long)want->heap, live, (long long)live - (long long)want->live);
    return 0;
}

/* ---------------------------------------------------------------- the sweep */

/* The unarmed byte-equal rerun comes after every RERUN_EVERY-th armed run and after the last. */
#ifndef RERUN_EVERY
#define RERUN_EVERY 8
#endif

/* 1 when every answer in a is the recorded one (or, armed, a clean OutOfMemory; the requests after
 * one left unasked). Else prints why. */
static int answers_ok(const scenario *s, const answers *a, int armed, long N, const char *what) {
    int ok = 1, answered_oom = 0;
    for (int i = 0; i < s->n; i++) answered_oom |= armed && is_clean_oom(a, i);
    for (int i = 0; i < s->n; i++) {
        if (!a->asked[i] && answered_oom) continue;
        if (a->body[i] && s->want[i] && !strcmp(a->body[i], s->want[i])) continue;
        if (armed && is_clean_oom(a, i)) continue;
        ok = 0;
        fprintf(stderr, "%s N=%ld request %d%s: %s (HTTP %d): %.300s\n", s->name, N, i, what,
                a->type[i] ? a->type[i] : a->asked[i] ? "success" : "unasked", a->status[i], a->body[i] ? a->body[i] : "(no body)");
    }
    return ok;
}

static void sweep(clef_engine *e, scenario *s, const at_rest *want, const long *picks, long npicks, const char *how) {
    double t0 = now(), c0 = cpu_now();
    long ooms = 0, absorbed = 0, reruns = 0, bad = 0, since = picks[0];
    for (long k = 0; k < npicks; k++) {
        long N = picks[k];
        answers a;
        reset_cache(e);
        int ok = memory_sound(e, want, s->name, N); /* what the run before this one left */
        arm(N);
        run(e, s, &a, 1);
        disarm();
        if (g_failed != 1) fprintf(stderr, "%s N=%ld: %ld allocations failed (expected 1; %ld made)\n", s->name, N, g_failed, g_count), ok = 0;
        ok &= answers_ok(s, &a, 1, N, "");
        int any_oom = 0;
        for (int i = 0; i < s->n; i++) any_oom |= is_clean_oom(&a, i);
        if (any_oom) ooms++;
        else absorbed++;
        answers_free(&a);
        ok &= cache_sound(e, want, s->name, N);
        if (k % RERUN_EVERY == RERUN_EVERY - 1 || k == npicks - 1) { /* the next requests, unarmed: the recorded answers */
            answers again;
            char what[96];
            snprintf(what, sizeof what, " (the unarmed run after N=%ld..%ld)", since, N);
            run(e, s, &again, 0);
            ok &= answers_ok(s, &again, 0, N, what);
            since = k + 1 < npicks ? picks[k + 1] : N;
            answers_free(&again);
            reruns++;
        }
        CHECK_MSG(ok, "%s: allocation %ld failed", s->name, N);
        if (!ok && ++bad >= 5) break; /* enough to debug */
    }
    reset_cache(e);
    CHECK_MSG(memory_sound(e, want, s->name, 0), "%s: the memory held after the last run", s->name);
#if UNDER_ASAN
    CHECK_MSG(__lsan_do_recoverable_leak_check() == 0, "%s: LeakSanitizer found leaks (above)", s->name);
#endif
    printf("%-12s %6ld allocations, %5ld runs (%s): %ld answered OutOfMemory, %ld absorbed; %ld unarmed reruns (%.1f s, %.1f s CPU)\n",
           s->name, s->allocs, npicks, how, ooms, absorbed, reruns, now() - t0, cpu_now() - c0);
}

int main(int argc, char **argv) {
    (void)argc;
    without_tcache(argv);
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
        {.name = "packed", .packed = 1, .n = 2, .req = {longreq[2], image}},
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
            run(e, s, &a, 0);
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
        at_rest want;
        note_entries(e, &want);
        if (s->n > 1) CHECK_MSG(want.n > 0, "%s: the long state left a state cache entry", s->name);
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
        else {
            reset_cache(e);
            want.heap = heap_in_use();
            want.live = live_blocks(e);
            sweep(e, s, &want, picks, npicks, how);
        }
        free(picks);
    }
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < sc[k].n; i++) free(sc[k].want[i]);
    clef_close(e);
    free(text);
    free(image);
    return TEST_END();
}
