/* clef — the public API. Drivers (CLI, server, benchmarks, fuzzers) include only this header.
 *
 * An engine holds one loaded model (memory-mapped weights, tokenizer, thread pool). A request is the
 * raw body bytes of a SystemOne request ({model, state, questions, ...}); the answer is always a
 * body: the response JSON, or {"error":{"type","message"}} with the HTTP status a server should use.
 *
 * Two ways to run requests:
 *   - clef_decide(): one request, synchronously (CLI, tests);
 *   - clef_job_prepare() / clef_run_batch() / clef_job_finish(): the host side (parse, validate,
 *     tokenize, decode images) on any thread, then several jobs packed into one forward on the
 *     model thread, then the response. A job's numbers do not depend on which other jobs share
 *     its batch, nor on whether its state came from the state cache.
 * The engine is not reentrant for clef_run_batch / clef_decide: one model thread at a time.
 * clef_job_prepare and clef_job_finish may run on other threads concurrently.
 *
 * fork(): a CPU engine opened before a fork works in the child (its weights shared copy-on-write; its
 * thread pool's helpers, which stay in the parent, are started again at the child's first forward),
 * provided no other thread was inside a call on that engine when the fork happened (the Python
 * package sees to that: docs/python.md "Processes"). A CUDA engine does not survive a fork. */
#ifndef CLEF_H
#define CLEF_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CLEF_VERSION "0.1.0"

/* Marks the public API: libclef.so and the installed libclef.a export these and nothing else
 * (the library is compiled with -fvisibility=hidden). Every function declared here carries it. */
#if defined(__GNUC__)
#define CLEF_API __attribute__((visibility("default")))
#else
#define CLEF_API
#endif

typedef struct clef_engine clef_engine;
typedef struct clef_job clef_job;

typedef struct clef_options {
    const char *model_dir;     /* release-layout folder */
    int threads;               /* compute threads; 0 = all online cores */
    int split_variant;         /* 0 = the regex in tokenizer.json, 1 = Qwen2, 2 = Qwen3.5 \p{M} */
    int max_length;            /* token budget per request; 0 = the reference's (clef_options_default's) */
    int image_tile;            /* 0 = native grid (reference), 256 or 448 = fixed tile (ours) */
    int allow_image_paths;     /* accept local file paths as images (CLI only) */
    size_t max_image_bytes;    /* 0 = default (16 MiB) */
    int64_t max_image_pixels;  /* decoded width*height cap; 0 = default (64 Mpx) */
    size_t max_images;         /* images per request; 0 = as many as can fit max_length (max_length / 3) */
    int text_only;             /* do not bind the vision tower */
    /* Compute backend: CLEF_DEVICE_AUTO (0: the CUDA backend when this build has it and a GPU is
     * present, else the CPU; $CLEF_DEVICE = cpu|cuda overrides auto), CLEF_DEVICE_CPU, or
     * CLEF_DEVICE_CUDA (an error when the build or the machine has none). docs/cuda.md. */
    int device;
    /* CLEF_PRECISION_FP32 (0: the exact path, the default), CLEF_PRECISION_FAST (two bf16 terms per
     * activation), CLEF_PRECISION_BF16 (one bf16 term) or CLEF_PRECISION_INT8 (CPU only: int8
     * weights quantized per output row at open, activations per token, integer dot products).
     * docs/precision.md. A precision the backend has no kernel for on this machine runs fp32 and
     * says so in clef_engine_note (the CPU's fast and bf16 today). $CLEF_PRECISION =
     * fp32|fast|bf16|int8 applies when device is auto. */
    int precision;
    int gpu;                   /* CUDA device index (0 = the first) */
    /* 1 when the engine will answer one request and close (clef decide): open then skips work
     * that pays only over many forwards — the CPU backend's packing of the Linear weights for the
     * AMX kernel (docs/performance.md "Weights packed at load": +0.5-1 s of open on real4 against
     * ~10% per forward). The answers are the same bits either way. */
    int single_request;
    /* The state cache (docs/serving.md "State cache"): MiB of saved record states, so requests on a
     * state already seen resume after it instead of recomputing it (the same bits either way).
     * clef_options_default sets CLEF_STATE_CACHE_MB_DEFAULT; 0 turns it off. Ignored with
     * single_request and on backends that cannot resume (CUDA for now). */
    size_t state_cache_mb;
    /* Called while weights are bound / touched: done and total in arbitrary units. */
    void (*progress)(void *ctx, uint64_t done, uint64_t total);
    void *progress_ctx;
    /* 1: refuse (422 StrictRefused) what is otherwise answered with a warning (clef_result.warnings:
     * an unknown key, a state cut to max_length) and a question whose answer would be NaN (an empty
     * question span). docs/errors.md "Warnings and strict mode". */
    int strict;
} clef_options;

#define CLEF_STATE_CACHE_MB_DEFAULT 1024

enum { CLEF_DEVICE_AUTO = 0, CLEF_DEVICE_CPU = 1, CLEF_DEVICE_CUDA = 2 };
enum {
    CLEF_PRECISION_FP32 = 0,
    CLEF_PRECISION_FAST = 1,
    CLEF_PRECISION_BF16 = 2, /* one bf16 term per activation (CUDA) */
    CLEF_PRECISION_INT8 = 3  /* int8 weights and activations, exact integer sums (CPU) */
};

CLEF_API void clef_options_default(clef_options *o);

/* The batch path's defaults, for a driver that packs requests into clef_run_batch itself (the Python
 * package's Engine.decide_many, clef.ray): the values `clef serve` and `clef batch` start from, so a
 * driver writes none of its own. Set by clef_batch_options_default; fields may be added at the end. */
typedef struct clef_batch_options {
    size_t batch_tokens; /* tokens in one packed forward (--batch-tokens) */
    size_t max_batch;    /* requests in one packed forward (--max-batch) */
    size_t queue_len;    /* requests waiting for the model thread (serve's --queue) */
    size_t max_body;     /* bytes of one request body: serve's --max-body, batch's --max-line */
} clef_batch_options;

CLEF_API void clef_batch_options_default(clef_batch_options *o);

/* What this build can run on this machine, as lines "backends: ...", "cpu features: ...",
 * "cpu gemm kernel: ..." (NUL-terminated, cut to len). */
CLEF_API void clef_build_info(char *buf, size_t len);

/* The backend an open engine computes with: "cpu" (fp32), "cpu-int8", "cuda" (fp32), "cuda-fast"
 * or "cuda-bf16". */
CLEF_API const char *clef_engine_backend(const clef_engine *e);
/* One line when the engine runs something other than what the options asked (e.g. "--precision
 * fast has no CPU kernel here ...; running fp32 (exact)") or an option has no effect on the backend
 * that runs ("--gpu 1 has no effect on the CPU backend ..."), "; " between parts; NULL otherwise.
 * Valid while e is open. */
CLEF_API const char *clef_engine_note(const clef_engine *e);
/* Bytes the backend holds in its own form of the weights, made at open (the CPU's AMX-packed
 * Linear weights; 0 when nothing was prepared, e.g. with single_request). */
CLEF_API size_t clef_engine_prepared_bytes(const clef_engine *e);

/* The state cache's counters (all 0 when it is off). */
typedef struct clef_cache_info {
    uint64_t hits, misses;      /* lookups of cacheable requests */
    uint64_t inserts, evictions;
    uint64_t tokens_reused;     /* prompt tokens not recomputed thanks to hits */
    size_t bytes, entries;      /* held now */
    size_t limit;               /* the bound in bytes (0: off) */
} clef_cache_info;
CLEF_API void clef_engine_cache_info(const clef_engine *e, clef_cache_info *out);

/* Memory the engine holds beside the weights, for /metrics. The buffer fields are the backend's
 * activation buffers (CPU: the blocks of 1 MiB and more; CLEF_CPU_CACHE_MB bounds the cached
 * ones); all 0 for a backend that does not report them. */
typedef struct clef_memory_info {
    size_t buffer_held_bytes;                       /* kept for activations, in use or free */
    size_t buffer_cache_bytes, buffer_cache_blocks; /* the free part of it; the pieces it is held in */
    size_t buffer_live_bytes, buffer_peak_bytes;    /* in use now / at most at once so far */
    uint64_t buffer_hits, buffer_misses, buffer_released;
    size_t prepared_bytes;                          /* clef_engine_prepared_bytes */
} clef_memory_info;
CLEF_API void clef_engine_memory_info(const clef_engine *e, clef_memory_info *out);

/* Opens the model folder. On failure returns NULL and writes one clear line into err. */
CLEF_API clef_engine *clef_open(const clef_options *o, char *err, size_t err_len);
CLEF_API void clef_close(clef_engine *e);

typedef struct clef_result {
    char *body;             /* malloc'd response or error JSON (no trailing newline); free with clef_result_free */
    size_t body_len;
    const char *error_type; /* NULL on success, else the error name ("NoQuestions", "BadJson", ...) */
    int http_status;        /* 200, 400, 413, 422, 500 */
    int input_tokens;       /* tokens of the encoded request (0 when refused before encoding) */
    /* NULL, or malloc'd lines each ending in '\n' (printable ASCII): what the answer's bytes do not
     * say (an unknown key, the state cut to max_length) or, beside a refusal whose message is the
     * reference's, where and what was expected. Freed by clef_result_free. docs/errors.md "Warnings". */
    char *warnings;
} clef_result;

CLEF_API void clef_result_free(clef_result *r);

/* One request, synchronously. Returns 0 when a response was produced, -1 when the body is an error. */
CLEF_API int clef_decide(clef_engine *e, const char *body, size_t len, clef_result *out);

/* Host side of one request. Returns a job ready to run, or NULL with *out filled (an error body). */
CLEF_API clef_job *clef_job_prepare(clef_engine *e, const char *body, size_t len, clef_result *out);
CLEF_API size_t clef_job_tokens(const clef_job *j); /* tokens this job adds to a batch */
/* Runs the model for n prepared jobs in one packed forward (each job a segment of its own: the
 * answers are the bits each job gets alone). Per-job failures are recorded in the job. */
CLEF_API int clef_run_batch(clef_engine *e, clef_job *const *jobs, size_t n);
/* Leading prompt tokens the last clef_run_batch took from the state cache (0: none). */
CLEF_API size_t clef_job_cached_tokens(const clef_job *j);
/* Builds the job's response (or error) into *out and frees the job. */
CLEF_API void clef_job_finish(clef_job *j, clef_result *out);
/* Frees a prepared job that will not run (shutdown, deadline). */
CLEF_API void clef_job_free(clef_job *j);
/* For a shutdown's budget: clef_job_prepare calls still preparing `seconds` from now (0 or less: at
 * once) stop before their next image or video entry and fail with DeadlineExceeded (503), as do later
 * calls with media. For good: the engine is closing. Safe from any thread. */
CLEF_API void clef_engine_stop_preparing(clef_engine *e, double seconds);

/* Inspection (`clef encode`, `clef respond --model`; docs/development.md "Drivers and the inspection
 * verbs"): the host side of clef_job_prepare alone, without an engine: the body parsed, validated,
 * tokenized with o->model_dir/tokenizer.json (the only file read), its images and videos prepared and
 * the record encoded, with the limits and options clef_open takes from o (max_length, image_tile,
 * allow_image_paths, max_image_bytes, max_image_pixels, max_images, split_variant; NULL = clef_options_default).
 * On success *out's body is the encoded record as JSON, {"input_ids":[...],"questions":[{"question_id",
 * "question_type","question_span","option_spans","option_ids"},...]} (plus "images" / "videos" when the
 * request has some), and input_tokens its length; returns 0. Else the error body clef_job_prepare
 * would give, and -1. Either way out->warnings holds the lines clef_decide would give (NULL when
 * none). Free *out with clef_result_free. */
CLEF_API int clef_encode_request(const clef_options *o, const char *body, size_t len, clef_result *out);

/* The routing key (docs/serving.md "The routing key"): one value per state as the model sees it, so
 * that a gateway hashing on it sends the requests the state cache can share to one replica. Two
 * requests whose records the cache keys alike (the same token ids up to the last 64-aligned token of
 * the state, the same images and video frames) always get the same key; so do the same state asked
 * other questions. It is the SHA-256 of the tag "clef-state-key/v1", the state's token ids (PREFIX +
 * MEDIA + STATE up to that boundary, or the whole state when it has no cacheable prefix) and the
 * SHA-256 of every image's and video frame group's grid and pixels, as 64 lowercase hex digits. It
 * depends on the options that change the record (max_length, image_tile, split_variant): compute it
 * with the serving engine's.
 *
 * clef_state_key: from the tokenizer alone, as clef_encode_request (the same steps, refusals and
 * options; o->model_dir/tokenizer.json is the only file read, and kept for the next call on the same
 * file). On success *out's body is the key (CLEF_STATE_KEY_LEN characters, NUL-terminated) and
 * input_tokens the record's length; returns 0. Else the error body clef_job_prepare would give, and
 * -1. Free *out with clef_result_free. */
#define CLEF_STATE_KEY_LEN 64
CLEF_API int clef_state_key(const clef_options *o, const char *body, size_t len, clef_result *out);
/* The same key for a prepared job (what `clef serve` echoes as X-Clef-State-Key): key gets the 64 hex
 * digits and a NUL (key_len >= CLEF_STATE_KEY_LEN + 1). The media hashes are computed once per job
 * and shared with the state cache's lookup. Returns 0, or -1 (out of memory, key_len too small). Like
 * clef_job_prepare, it may run on any thread, not concurrently with a clef_run_batch holding j. */
CLEF_API int clef_job_state_key(clef_job *j, char *key, size_t key_len);

/* Debugging: when set, the next forwards write each layer's hidden rows as raw float32 files into
 * dir (NULL turns it off). */
CLEF_API void clef_set_dump_dir(clef_engine *e, const char *dir);

/* Benchmarking (`clef bench`). clef_bench_job: a job of the n token ids ids[0..n) (3 <= n <= 2^24; no
 * request, no tokenizer; positions 0..n-1) with a fixed synthetic schema (n >= 64: a noul, a choice
 * and a score question, each an 8-token question span followed by 2, 4 and 5 two-token options,
 * together the last 46 tokens; 3 <= n < 64: one choice question over [0, n-2) with two one-token
 * options). It has no request to answer: clef_job_finish gives an InternalError body; free it with
 * clef_job_free. NULL with a line in err (bad ids or n, out of memory). */
CLEF_API clef_job *clef_bench_job(clef_engine *e, const int32_t *ids, size_t n, char *err, size_t err_len);
/* Runs jobs[0..n) (1 <= n <= 4096; from clef_bench_job or clef_job_prepare) through the function that
 * clef_run_batch runs a group with: one packed forward (each job its own segment), the joint head once
 * over them all; with the state cache left out (every run computes every row) and no one-at-a-time
 * retry. Writes the wall seconds of the tower and the text forward, and of the head (CLOCK_MONOTONIC).
 * A job may be run again; clef_job_finish answers a prepared one from its last run. Returns 0, or -1
 * with a line in err (a job's failure). Not reentrant with clef_run_batch. */
CLEF_API int clef_bench_run(clef_engine *e, clef_job *const *jobs, size_t n, double *seconds_text,
                            double *seconds_head, char *err, size_t err_len);

#ifdef __cplusplus
}
#endif
#endif
