/* The systemone() response from per-question logits (spec: ../shared/spec/contract.md §7, §8):
 * an fp32 softmax per question, typed answers with the reference's key order, round(x, 4), usage;
 * printed as json.dumps(resp, ensure_ascii=False, separators=(",", ":")) would print it (no
 * sort_keys; NaN as NaN). Our extension: a request with top-level "raw": true gets, in every answer,
 * a last key "raw" = {option_id: unrounded probability} in head order (the float32 value widened to
 * double, printed as repr). Without it the bytes are exactly the reference's. */
#ifndef CLEF_DECISION_RESPONSE_H
#define CLEF_DECISION_RESPONSE_H

#include <stddef.h>

#include "base/buf.h"
#include "base/err.h"
#include "decision/request.h"

/* torch's fp32 softmax over one question's logits, as closely as C can follow it: max, expf(x - max)
 * in float, the sum of the exps over 8 float lanes folded pairwise, one reciprocal, products.
 * A NaN logit makes every probability NaN. Measured against the author's recorded probs: see
 * tests/parity/test_author_fixture.py (equal bits for most questions, within 2 ulp otherwise). */
void clef_softmax_f32(const float *logits, size_t n, float *probs);

/* Appends the response JSON. `logits` holds, question after question in request order, each
 * question's n_options logits in head order (n_logits must equal the sum). input_tokens is the
 * encoded record's length. Returns -1 with err set (InternalError on a count mismatch, OutOfMemory),
 * or when a question has a deferred BadCriteria (then the request cannot have been encoded). */
int clef_response_render(clef_buf *out, const clef_request *req, const float *logits, size_t n_logits,
                         size_t input_tokens, clef_err *err);

/* The same from probabilities already computed (for the model path that runs its own softmax). */
int clef_response_render_probs(clef_buf *out, const clef_request *req, const float *probs, size_t n_probs,
                               size_t input_tokens, clef_err *err);

/* {"error":{"type":"...","message":"..."}} */
int clef_error_render(clef_buf *out, const clef_err *e);

/* The HTTP status we answer an error with (docs/errors.md): 400 bad JSON / UTF-8, 413 too long,
 * 422 contract refusals, 500 internal / out of memory, 503 model not loaded. */
int clef_error_http_status(const char *type);

#endif
