/* The host pipeline: one request's body to its encoded record (parse, validate, tokenize, images and
 * videos, encode_record), with the limits and options a clef_options gives. The one assembly of it:
 * clef_job_prepare (engine.c) and the inspection entry clef_encode_request (inspect.c) both run these
 * functions, so `clef encode` accepts and refuses exactly what `clef decide` does. */
#ifndef CLEF_ENGINE_HOST_H
#define CLEF_ENGINE_HOST_H

#include <stddef.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/json.h"
#include "clef.h"
#include "decision/encode.h"
#include "decision/request.h"
#include "text/tokenizer.h"

/* The image (and video) options of an engine opened with o: the image module's defaults (limits
 * included) unless o sets its own; local paths only with o->allow_image_paths. */
void clef_host_image_opts(const clef_options *o, clef_image_opts *io);

/* DIR/tokenizer.json with o's split variant; NULL with *err set. */
clef_tokenizer *clef_host_tokenizer(const clef_options *o, clef_err *err);

/* Step 1: the body's JSON into *doc and the request into *req (which points into *doc). On failure
 * returns -1 with *err set; *doc and *req are the caller's to free either way. */
int clef_host_parse(const char *body, size_t len, json_doc **doc, clef_request *req, clef_err *err);

/* Step 2: the parsed request encoded into *rec within o's token budget (0: the default). stop (may
 * be NULL) is asked before each image and video entry: non-zero ends the encoding with
 * DeadlineExceeded (clef_engine_stop_preparing). */
int clef_host_encode(const clef_tokenizer *tok, const clef_image_opts *io, int max_length,
                     int (*stop)(void *ctx), void *stop_ctx, const clef_request *req, clef_record *rec,
                     clef_err *err);

/* Step 3, once step 2 encoded the request: a warning line each (appended to notes) for what the
 * reference accepts without a word: keys it never reads (decision/lint.h) and a state cut to fit
 * max_length (0: the default). Returns the number of lines added, -1 out of memory. */
int clef_host_notes(const clef_request *req, const clef_record *rec, int max_length, clef_buf *notes);

/* After step 1 or 2 refused the request with err: the line saying where and what was expected
 * (clef_request_explain) when the reference's message does not; root is the parsed body (NULL when
 * it did not parse). Returns the number of lines added, -1 out of memory. */
int clef_host_explain(const json_value *root, const clef_err *err, clef_buf *notes);

#endif
