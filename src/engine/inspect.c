/* The inspection entry of clef.h (clef_encode_request): the host pipeline alone, for `clef encode`
 * and `clef respond --model`. It runs the functions clef_job_prepare runs (engine/host.h) with the
 * limits clef_open would set from the same options, and reads only the tokenizer (no weights). */
#include "clef.h"

#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "decision/response.h"
#include "engine/engine_internal.h"
#include "engine/host.h"

int clef_encode_request(const clef_options *o, const char *body, size_t len, clef_result *out) {
    clef_err err;
    clef_err_clear(&err);
    clef_options dflt;
    if (!o) {
        clef_options_default(&dflt);
        o = &dflt;
    }
    json_doc *doc = NULL;
    clef_request req;
    memset(&req, 0, sizeof req);
    clef_record rec;
    memset(&rec, 0, sizeof rec);
    clef_tokenizer *tok = NULL;
    clef_buf b;
    clef_buf_init(&b);
    int rc = -1;
    /* the request is checked before the tokenizer is read: a bad body is refused as the engine refuses it */
    if (clef_host_parse(body, len, &doc, &req, &err)) goto out;
    if (!o->model_dir) {
        clef_err_set(&err, CLEF_E_BAD_MODEL, "no model folder given (--model DIR)");
        goto out;
    }
    tok = clef_host_tokenizer(o, &err);
    if (!tok) goto out;
    clef_image_opts io;
    clef_host_image_opts(o, &io);
    if (clef_host_encode(tok, &io, o->max_length, NULL, NULL, &req, &rec, &err)) goto out;
    if (clef_record_render(&b, &rec)) {
        clef_err_set(&err, CLEF_E_OOM, "out of memory");
        goto out;
    }
    memset(out, 0, sizeof *out);
    out->body = clef_buf_take(&b, &out->body_len);
    if (!out->body) {
        clef_err_set(&err, CLEF_E_OOM, "out of memory");
        goto out;
    }
    out->http_status = 200;
    out->input_tokens = (int)rec.n_ids;
    rc = 0;
out:
    if (rc) clef_engine_error_result(&err, 0, out); /* as clef_job_prepare: refused before the forward */
    clef_buf_free(&b);
    clef_record_free(&rec);
    clef_request_free(&req);
    clef_tokenizer_free(tok);
    clef_json_doc_free(doc);
    return rc;
}
