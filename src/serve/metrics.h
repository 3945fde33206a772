/* Prometheus metrics of the server: counters, gauges and histograms behind one mutex, rendered in
 * the text exposition format (version 0.0.4). Names are listed in docs/serving.md. */
#ifndef CLEF_SERVE_METRICS_H
#define CLEF_SERVE_METRICS_H

#include <stddef.h>

#include "base/buf.h"
#include "clef.h"

typedef struct clef_metrics clef_metrics;

clef_metrics *clef_metrics_create(void);
void clef_metrics_free(clef_metrics *m);

/* One answered request. outcome: "ok" or the error type; path: the route label (a static string).
 * queue_s / compute_s < 0 when the request never reached the model. */
void clef_metrics_request(clef_metrics *m, const char *path, int status, const char *outcome, int tokens,
                          double total_s, double queue_s);
/* One forward over n jobs holding `tokens` tokens. */
void clef_metrics_batch(clef_metrics *m, size_t n, size_t tokens, double compute_s);
/* The limits a forward's occupancy is measured against (--batch-tokens, --max-batch). */
void clef_metrics_batch_limits(clef_metrics *m, size_t batch_tokens, size_t max_batch);

/* Appends the exposition text. Gauges are passed in by the caller. */
void clef_metrics_render(clef_metrics *m, clef_buf *out, size_t queue_depth, size_t queue_cap, long inflight,
                         int ready);

/* The state cache's counters (clef_engine_cache_info) in the same text format. */
void clef_metrics_render_cache(clef_buf *out, const clef_cache_info *ci);

/* Process and engine memory (clef_engine_memory_info; the resident set; glibc's allocator). */
void clef_metrics_render_memory(clef_buf *out, const clef_memory_info *mi);

#endif
