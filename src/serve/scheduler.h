/* The serving scheduler: producers (HTTP threads, the batch command) submit prepared items; one
 * worker thread takes batches of them and hands each batch to a run callback (which runs the model
 * and answers). It knows nothing about the engine: an item is a token count, an arrival time and
 * an optional deadline, so the policy can be tested without a model.
 *
 * Policy (clef_sched_pick): FIFO with a token budget. The oldest queued item always joins the
 * next batch (alone if it exceeds the budget by itself); then younger items are added in arrival
 * order when they still fit the remaining budget and the batch has room (max_batch), and items
 * that do not fit are skipped over and stay queued. Every round takes the oldest item, so an item
 * with k items ahead of it runs within k+1 rounds (no starvation), and a long request delays
 * shorter ones by at most one round. Items whose deadline has passed are expired (not run) when
 * the worker next looks at the queue.
 *
 * Gathering (gather_s > 0): when the queue holds fewer items than the previous batch had, and the
 * batch is not full, the worker waits for more, the oldest item at most min(gather_s,
 * CLEF_SCHED_GATHER_FRACTION of the previous batch's run time) after it was queued. Clients that
 * all got their answers from one forward come back together, a few milliseconds apart; without
 * the wait the first of them to be prepared runs alone and the rest wait a whole forward for the
 * next one (measured: 16 clients on the tiny model gave batches of 2-14). A lone client never
 * waits (its previous batch was itself); the wait, scaled by the forward's own time, is a small
 * fixed share of a request's latency whatever the model or the device. */
#ifndef CLEF_SERVE_SCHEDULER_H
#define CLEF_SERVE_SCHEDULER_H

#include <stddef.h>

#include "base/clock.h" /* clef_now: the clock of enqueued and deadline */

typedef struct clef_sched_item {
    struct clef_sched_item *next; /* owned by the scheduler while queued */
    size_t tokens;                /* what this item adds to a batch */
    double enqueued;              /* clef_now() at submit (set by clef_sched_submit) */
    double deadline;              /* clef_now() value after which it is expired; 0 = none */
} clef_sched_item;

/* The defaults of the forward's sizing, one home for `clef serve` (clef_server_config_default),
 * `clef batch` and the scheduler's own fallbacks; --help prints them from there. */
#define CLEF_SCHED_BATCH_TOKENS_DEFAULT ((size_t)8192)
#define CLEF_SCHED_MAX_BATCH_DEFAULT ((size_t)32)
#define CLEF_SCHED_QUEUE_LEN_DEFAULT ((size_t)256)

typedef struct clef_sched_config {
    size_t batch_tokens; /* token budget of one batch (0 = CLEF_SCHED_BATCH_TOKENS_DEFAULT) */
    size_t max_batch;    /* most items in one batch (0 = CLEF_SCHED_MAX_BATCH_DEFAULT) */
    size_t queue_len;    /* most items queued (0 = CLEF_SCHED_QUEUE_LEN_DEFAULT) */
    double gather_s;     /* most seconds a batch that is not full waits for more items (0 = none) */
} clef_sched_config;

/* run: called on the worker thread with n >= 1 items, oldest first; the items are no longer
 * queued. expire: called on the worker thread for an item whose deadline passed. */
typedef void (*clef_sched_run_fn)(void *ctx, clef_sched_item **items, size_t n);
typedef void (*clef_sched_expire_fn)(void *ctx, clef_sched_item *it);

typedef struct clef_sched clef_sched;

/* Starts the worker thread. NULL when memory or a thread cannot be had. */
clef_sched *clef_sched_create(const clef_sched_config *cfg, clef_sched_run_fn run,
                              clef_sched_expire_fn expire, void *ctx);
/* 0: queued. -1: the queue is full. -2: the scheduler is stopping. */
int clef_sched_submit(clef_sched *s, clef_sched_item *it);
size_t clef_sched_depth(clef_sched *s);
/* Refuses new items, runs everything still queued, joins the worker and frees the scheduler. */
void clef_sched_stop(clef_sched *s);

/* The batch policy as a pure function: tokens[0..n) in arrival order; writes the chosen indices
 * (ascending, always starting with 0 when n > 0) into out and returns how many. */
size_t clef_sched_pick(const size_t *tokens, size_t n, size_t budget, size_t max_batch, size_t *out);

/* The share of the previous batch's run time a batch that is not full may wait (gathering). */
#define CLEF_SCHED_GATHER_FRACTION 0.03

#endif
