/* What engine.c (open, jobs, responses) and batch.c (the model for a batch of jobs) share. */
#ifndef CLEF_ENGINE_INTERNAL_H
#define CLEF_ENGINE_INTERNAL_H

#include <stdatomic.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/json.h"
#include "clef.h"
#include "compute/ops.h"
#include "decision/encode.h"
#include "decision/request.h"
#include "engine/state_cache.h"
#include "model/weights.h"
#include "text/tokenizer.h"

struct clef_engine {
    clef_options opts;
    char *model_dir;
    clef_model_files *mf;
    clef_tokenizer *tok;
    clef_ops *ops;
    clef_image_opts image_opts;
    char *dump_dir;
    clef_state_cache *cache; /* NULL: off (state_cache_mb 0, single_request, or a backend that cannot resume) */
    _Atomic int64_t stop_preparing_at; /* CLOCK_MONOTONIC ns; 0: never (clef_engine_stop_preparing) */
    const char *note;        /* clef_engine_note: note_buf's line, or NULL */
    char note_buf[256];      /* the backend's note, then the flags that have no effect on it */
    int precision;           /* the CLEF_PRECISION_* asked for (after $CLEF_PRECISION) */
};

struct clef_job {
    clef_engine *e;
    json_doc *doc;
    clef_request req;
    clef_record rec;
    float *logits;   /* all options of all questions, request order then head order */
    size_t n_logits;
    int ran;         /* the model ran for this job */
    size_t cached_tokens; /* leading tokens taken from the state cache in its last run */
    uint8_t *media_hash; /* [rec.n_images][32] once computed: clef_job_media_hashes */
    clef_err err;    /* a failure while running (err.type != NULL) */
    clef_buf notes;  /* warning lines for clef_result.warnings (decision/lint.h) */
};

/* Fills *out with the error body for err (engine.c; a static OutOfMemory body when rendering fails). */
void clef_engine_error_result(const clef_err *err, int input_tokens, clef_result *out);

/* The SHA-256 of each of the job's media entries (engine/state_key.h), computed at the first call
 * and kept: the routing key and the state cache use the same ones. NULL when the job has no media,
 * or on failure (out of memory; no pixel values). */
const uint8_t *clef_job_media_hashes(clef_job *j);

/* The model for jobs[0 .. n) in one packed forward (batch.c). Per-job failures go into the jobs. */
int clef_engine_run_packed(clef_engine *e, clef_job *const *jobs, size_t n);

/* The wall seconds of one group's parts (CLOCK_MONOTONIC). */
typedef struct clef_group_times {
    double seconds_text; /* the vision tower (images of jobs at position 0) and the text forward */
    double seconds_head; /* the joint head over every job */
} clef_group_times;

/* For benchmarks (engine/bench.c): jobs[0 .. n) as one group of clef_engine_run_packed (the same
 * packed forward and head), with the state cache left out, so every run computes every row, and
 * no one-at-a-time retry; *times is written when the forward ran. Per-job failures go into the
 * jobs; returns -1 when any job failed. */
int clef_engine_run_group_timed(clef_engine *e, clef_job *const *jobs, size_t n, clef_group_times *times);

#endif
