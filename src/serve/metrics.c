/* Prometheus metrics (see metrics.h). */
#include "serve/metrics.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "base/bufpool.h"
#include "clef.h"
#include "serve/scheduler.h" /* clef_now */

#define MAX_SERIES 96
#define OCCUPANCY_STALE_S 10.0 /* clef_batch_occupancy reads 0 once no forward ran for this long */

typedef struct {
    const double *le;
    size_t nb;
    unsigned long long *counts; /* nb + 1 (the last is +Inf) */
    double sum;
    unsigned long long n;
} histo;

static const double LAT_LE[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
static const double SIZE_LE[] = {1, 2, 4, 8, 16, 32, 64, 128, 256};
static const double TOK_LE[] = {16, 64, 256, 1024, 4096, 8192, 16384, 32768, 65536};

typedef struct {
    char path[32];
    int status;
    char outcome[48];
    unsigned long long n;
} series;

struct clef_metrics {
    pthread_mutex_t mu;
    series s[MAX_SERIES];
    size_t ns;
    unsigned long long tokens_total, batches_total, batch_jobs_total;
    histo req_latency, queue_wait, compute, batch_size, batch_tokens, req_tokens;
    size_t limit_tokens, limit_jobs; /* --batch-tokens, --max-batch (0: not attached yet) */
    double last_occupancy, last_batch_t; /* the last forward's fill, and when it ended (clef_now) */
    unsigned long long counts_store[6][16];
};

static void histo_init(histo *h, const double *le, size_t nb, unsigned long long *store) {
    h->le = le;
    h->nb = nb;
    h->counts = store;
}

static void histo_add(histo *h, double v) {
    size_t i = 0;
    while (i < h->nb && v > h->le[i]) i++;
    h->counts[i]++;
    h->sum += v;
    h->n++;
}

clef_metrics *clef_metrics_create(void) {
    clef_metrics *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    pthread_mutex_init(&m->mu, NULL);
    histo_init(&m->req_latency, LAT_LE, sizeof LAT_LE / sizeof LAT_LE[0], m->counts_store[0]);
    histo_init(&m->queue_wait, LAT_LE, sizeof LAT_LE / sizeof LAT_LE[0], m->counts_store[1]);
    histo_init(&m->compute, LAT_LE, sizeof LAT_LE / sizeof LAT_LE[0], m->counts_store[2]);
    histo_init(&m->batch_size, SIZE_LE, sizeof SIZE_LE / sizeof SIZE_LE[0], m->counts_store[3]);
    histo_init(&m->batch_tokens, TOK_LE, sizeof TOK_LE / sizeof TOK_LE[0], m->counts_store[4]);
    histo_init(&m->req_tokens, TOK_LE, sizeof TOK_LE / sizeof TOK_LE[0], m->counts_store[5]);
    return m;
}

void clef_metrics_free(clef_metrics *m) {
    if (!m) return;
    pthread_mutex_destroy(&m->mu);
    free(m);
}

static void copy_label(char *dst, size_t cap, const char *src) {
    /* label values here are identifiers; keep [A-Za-z0-9_/.-] only */
    size_t j = 0;
    for (size_t i = 0; src && src[i] && j + 1 < cap; i++) {
        char c = src[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                 c == '/' || c == '.' || c == '-';
        dst[j++] = ok ? c : '_';
    }
    dst[j] = 0;
}

void clef_metrics_request(clef_metrics *m, const char *path, int status, const char *outcome, int tokens,
                          double total_s, double queue_s) {
    if (!m) return;
    char p[32], o[48];
    copy_label(p, sizeof p, path);
    copy_label(o, sizeof o, outcome ? outcome : "ok");
    pthread_mutex_lock(&m->mu);
    size_t i;
    for (i = 0; i < m->ns; i++)
        if (m->s[i].status == status && !strcmp(m->s[i].path, p) && !strcmp(m->s[i].outcome, o)) break;
    if (i == m->ns && m->ns < MAX_SERIES) {
        m->s[i].status = status;
        memcpy(m->s[i].path, p, sizeof p);
        memcpy(m->s[i].outcome, o, sizeof o);
        m->ns++;
    }
    if (i < m->ns) m->s[i].n++;
    if (tokens > 0) {
        m->tokens_total += (unsigned long long)tokens;
        histo_add(&m->req_tokens, tokens);
    }
    if (!strcmp(p, "/v1/systemone")) histo_add(&m->req_latency, total_s);
    if (queue_s >= 0) histo_add(&m->queue_wait, queue_s);
    pthread_mutex_unlock(&m->mu);
}

void clef_metrics_batch(clef_metrics *m, size_t n, size_t tokens, double compute_s) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    m->batches_total++;
    m->batch_jobs_total += n;
    histo_add(&m->batch_size, (double)n);
    histo_add(&m->batch_tokens, (double)tokens);
    histo_add(&m->compute, compute_s);
    /* how full the forward was by the limit that binds: tokens of --batch-tokens or jobs of
     * --max-batch (above 1 when one request alone is over --batch-tokens: it runs alone) */
    double occ = 0;
    if (m->limit_tokens) occ = (double)tokens / (double)m->limit_tokens;
    if (m->limit_jobs && (double)n / (double)m->limit_jobs > occ) occ = (double)n / (double)m->limit_jobs;
    m->last_occupancy = occ;
    m->last_batch_t = clef_now();
    pthread_mutex_unlock(&m->mu);
}

void clef_metrics_batch_limits(clef_metrics *m, size_t batch_tokens, size_t max_batch) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    m->limit_tokens = batch_tokens;
    m->limit_jobs = max_batch;
    pthread_mutex_unlock(&m->mu);
}

static void histo_render(clef_buf *b, const char *name, const char *help, const histo *h) {
    clef_buf_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    unsigned long long cum = 0;
    for (size_t i = 0; i < h->nb; i++) {
        cum += h->counts[i];
        clef_buf_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, h->le[i], cum);
    }
    cum += h->counts[h->nb];
    clef_buf_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.9g\n%s_count %llu\n", name, cum, name, h->sum, name,
                    h->n);
}

void clef_metrics_render(clef_metrics *m, clef_buf *b, size_t queue_depth, size_t queue_cap, long inflight,
                         int ready) {
    pthread_mutex_lock(&m->mu);
    clef_buf_printf(b, "# HELP clef_build_info Build information.\n# TYPE clef_build_info gauge\n"
                       "clef_build_info{version=\"%s\"} 1\n", CLEF_VERSION);
    clef_buf_printf(b, "# HELP clef_ready 1 once the model is loaded and warmed up, 0 before, while draining and shutting down.\n"
                       "# TYPE clef_ready gauge\nclef_ready %d\n", ready);
    clef_buf_printf(b, "# HELP clef_requests_total Answered requests by route, status and outcome (ok or the error type).\n"
                       "# TYPE clef_requests_total counter\n");
    for (size_t i = 0; i < m->ns; i++)
        clef_buf_printf(b, "clef_requests_total{path=\"%s\",status=\"%d\",outcome=\"%s\"} %llu\n", m->s[i].path,
                        m->s[i].status, m->s[i].outcome, m->s[i].n);
    clef_buf_printf(b, "# HELP clef_queue_depth Prepared requests waiting for the model.\n# TYPE clef_queue_depth gauge\n"
                       "clef_queue_depth %zu\n", queue_depth);
    clef_buf_printf(b, "# HELP clef_queue_capacity Most requests the queue holds before answering 429.\n"
                       "# TYPE clef_queue_capacity gauge\nclef_queue_capacity %zu\n", queue_cap);
    clef_buf_printf(b, "# HELP clef_requests_in_flight Requests received and not yet answered.\n"
                       "# TYPE clef_requests_in_flight gauge\nclef_requests_in_flight %ld\n", inflight);
    clef_buf_printf(b, "# HELP clef_input_tokens_total Input tokens of the requests that were answered.\n"
                       "# TYPE clef_input_tokens_total counter\nclef_input_tokens_total %llu\n", m->tokens_total);
    clef_buf_printf(b, "# HELP clef_batches_total Forward passes run.\n# TYPE clef_batches_total counter\n"
                       "clef_batches_total %llu\n", m->batches_total);
    clef_buf_printf(b, "# HELP clef_batch_jobs_total Jobs run in forward passes.\n# TYPE clef_batch_jobs_total counter\n"
                       "clef_batch_jobs_total %llu\n", m->batch_jobs_total);
    double occ = m->last_batch_t > 0 && clef_now() - m->last_batch_t <= OCCUPANCY_STALE_S ? m->last_occupancy : 0;
    clef_buf_printf(b, "# HELP clef_batch_occupancy How full the last forward was: the larger of its tokens / --batch-tokens "
                       "and its jobs / --max-batch; 0 when none ran in the last %g s.\n"
                       "# TYPE clef_batch_occupancy gauge\nclef_batch_occupancy %.6g\n", OCCUPANCY_STALE_S, occ);
    clef_buf_printf(b, "# HELP clef_batch_tokens_limit Token budget of one forward (--batch-tokens).\n"
                       "# TYPE clef_batch_tokens_limit gauge\nclef_batch_tokens_limit %zu\n", m->limit_tokens);
    clef_buf_printf(b, "# HELP clef_batch_jobs_limit Most requests in one forward (--max-batch).\n"
                       "# TYPE clef_batch_jobs_limit gauge\nclef_batch_jobs_limit %zu\n", m->limit_jobs);
    histo_render(b, "clef_request_duration_seconds", "Time from the request's arrival to its answer (POST /v1/systemone).",
                 &m->req_latency);
    histo_render(b, "clef_queue_wait_seconds", "Time a prepared request waited for the model.", &m->queue_wait);
    histo_render(b, "clef_batch_compute_seconds", "Time of one forward pass (clef_run_batch).", &m->compute);
    histo_render(b, "clef_batch_size", "Jobs per forward pass.", &m->batch_size);
    histo_render(b, "clef_batch_tokens", "Tokens per forward pass.", &m->batch_tokens);
    histo_render(b, "clef_request_tokens", "Input tokens per answered request.", &m->req_tokens);
    pthread_mutex_unlock(&m->mu);
}

void clef_metrics_render_cache(clef_buf *b, const clef_cache_info *ci) {
    clef_buf_printf(b, "# HELP clef_state_cache_hits_total Requests that resumed from a saved state.\n"
                       "# TYPE clef_state_cache_hits_total counter\nclef_state_cache_hits_total %llu\n",
                    (unsigned long long)ci->hits);
    clef_buf_printf(b, "# HELP clef_state_cache_misses_total Cacheable requests whose state was not saved yet.\n"
                       "# TYPE clef_state_cache_misses_total counter\nclef_state_cache_misses_total %llu\n",
                    (unsigned long long)ci->misses);
    clef_buf_printf(b, "# HELP clef_state_cache_evictions_total Saved states dropped to stay under the bound.\n"
                       "# TYPE clef_state_cache_evictions_total counter\nclef_state_cache_evictions_total %llu\n",
                    (unsigned long long)ci->evictions);
    clef_buf_printf(b, "# HELP clef_state_cache_tokens_reused_total Prompt tokens not recomputed thanks to hits.\n"
                       "# TYPE clef_state_cache_tokens_reused_total counter\nclef_state_cache_tokens_reused_total %llu\n",
                    (unsigned long long)ci->tokens_reused);
    clef_buf_printf(b, "# HELP clef_state_cache_bytes Bytes of saved states held now.\n"
                       "# TYPE clef_state_cache_bytes gauge\nclef_state_cache_bytes %zu\n", ci->bytes);
    clef_buf_printf(b, "# HELP clef_state_cache_entries Saved states held now.\n"
                       "# TYPE clef_state_cache_entries gauge\nclef_state_cache_entries %zu\n", ci->entries);
    clef_buf_printf(b, "# HELP clef_state_cache_limit_bytes The cache's bound (0: off).\n"
                       "# TYPE clef_state_cache_limit_bytes gauge\nclef_state_cache_limit_bytes %zu\n", ci->limit);
}

/* Bytes resident now, from /proc/self/statm (0 where there is none). */
static size_t resident_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    unsigned long long size = 0, rss = 0;
    int n = fscanf(f, "%llu %llu", &size, &rss);
    fclose(f);
    long page = sysconf(_SC_PAGESIZE);
    return n == 2 && page > 0 ? (size_t)(rss * (unsigned long long)page) : 0;
}

/* One unlabelled series with its HELP and TYPE lines. */
static void series1(clef_buf *b, const char *name, const char *type, const char *help, unsigned long long v) {
    clef_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", name, help, name, type, name, v);
}

void clef_metrics_render_memory(clef_buf *b, const clef_memory_info *mi) {
    series1(b, "process_resident_memory_bytes", "gauge", "Resident memory of the process.", resident_bytes());
    series1(b, "clef_buffer_held_bytes", "gauge", "Memory the backend keeps for activation buffers, in use or free.",
            mi->buffer_held_bytes);
    series1(b, "clef_buffer_cache_bytes", "gauge", "Free memory the backend holds for the next forward's activations.",
            mi->buffer_cache_bytes);
    series1(b, "clef_buffer_cache_blocks", "gauge", "Free extents the buffer cache's free memory is in.", mi->buffer_cache_blocks);
    series1(b, "clef_buffer_live_bytes", "gauge", "Activation buffers in use by the forward running now.",
            mi->buffer_live_bytes);
    series1(b, "clef_buffer_peak_bytes", "gauge", "The most activation buffers in use at once so far.",
            mi->buffer_peak_bytes);
    clef_buf_printf(b, "# HELP clef_buffer_requests_total Activation buffer requests, by where they were served from.\n"
                       "# TYPE clef_buffer_requests_total counter\n"
                       "clef_buffer_requests_total{from=\"cache\"} %llu\nclef_buffer_requests_total{from=\"fresh\"} %llu\n",
                    (unsigned long long)mi->buffer_hits, (unsigned long long)mi->buffer_misses);
    series1(b, "clef_buffer_released_total", "counter", "Activation buffers given back to the system (blocks mapped on their own, over the cap).",
            mi->buffer_released);
    clef_bufpool_stats ps; /* the request-buffer pool (--request-pool; all 0 when off) */
    clef_bufpool_get_stats(clef_bufpool_process(), &ps);
    series1(b, "clef_request_pool_held_bytes", "gauge", "Memory the request-buffer pool keeps for images' pixel arrays, in use or free.",
            ps.held_bytes);
    series1(b, "clef_request_pool_live_bytes", "gauge", "Request buffers of the pool in use now.", ps.live_bytes);
    series1(b, "clef_request_pool_peak_bytes", "gauge", "The most request buffers of the pool in use at once so far.",
            ps.peak_live_bytes);
    series1(b, "clef_request_pool_limit_bytes", "gauge", "The pool's cap (--request-pool; 0: off).", ps.cap);
    clef_buf_printf(b, "# HELP clef_request_pool_requests_total Large request buffers, by where they came from: the held "
                       "range, the range grown for them, or a mapping of their own (over the cap).\n"
                       "# TYPE clef_request_pool_requests_total counter\n"
                       "clef_request_pool_requests_total{from=\"pool\"} %zu\nclef_request_pool_requests_total{from=\"new\"} %zu\n"
                       "clef_request_pool_requests_total{from=\"own\"} %zu\n",
                    ps.hits, ps.misses - ps.own, ps.own);
    series1(b, "clef_pixel_budget_bytes", "gauge", "Images' pixel arrays held at once before a request with images waits (--pixel-budget; 0: none).",
            ps.budget);
    clef_buf_printf(b, "# HELP clef_pixel_budget_admissions_total Requests with images admitted to the pixel budget: at once, "
                       "after a wait, or refused after waiting --deadline (503).\n"
                       "# TYPE clef_pixel_budget_admissions_total counter\n"
                       "clef_pixel_budget_admissions_total{outcome=\"at_once\"} %zu\n"
                       "clef_pixel_budget_admissions_total{outcome=\"waited\"} %zu\n"
                       "clef_pixel_budget_admissions_total{outcome=\"refused\"} %zu\n",
                    ps.admits - ps.waited, ps.waited - ps.timeouts, ps.timeouts);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
    struct mallinfo2 m = mallinfo2(); /* walks every malloc arena under its lock: a scrape, not a hot path */
    clef_buf_printf(b, "# HELP clef_malloc_bytes The C allocator's memory: in use, free inside its arenas, mapped for large blocks.\n"
                       "# TYPE clef_malloc_bytes gauge\nclef_malloc_bytes{kind=\"in_use\"} %zu\n"
                       "clef_malloc_bytes{kind=\"free\"} %zu\nclef_malloc_bytes{kind=\"mapped\"} %zu\n",
                    m.uordblks, m.fordblks, m.hblkhd);
#endif
}
