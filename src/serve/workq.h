/* A bounded work queue with a few threads: the server's prepare pool (parse, tokenize, decode
 * images), so that the HTTP threads only move bytes and /health, /metrics never wait behind a
 * large request's tokenization. */
#ifndef CLEF_SERVE_WORKQ_H
#define CLEF_SERVE_WORKQ_H

#include <stddef.h>

typedef struct clef_workq clef_workq;
typedef void (*clef_workq_fn)(void *ctx, void *item);

/* NULL when memory or threads cannot be had. */
clef_workq *clef_workq_create(int threads, size_t cap, clef_workq_fn fn, void *ctx);
/* 0: queued. -1: cap items are waiting. -2: stopping. */
int clef_workq_push(clef_workq *q, void *item);
/* Items waiting or running. */
size_t clef_workq_busy(clef_workq *q);
/* Runs what is queued, joins the threads, frees the queue. */
void clef_workq_stop(clef_workq *q);

#endif
