/* The host pipeline of one request (engine/host.h): what the engine's forward path and the
 * inspection verbs share, so both apply the same limits and refusals. */
#include "engine/host.h"

#include <string.h>

#include "base/buf.h"
#include "decision/lint.h"

void clef_host_image_opts(const clef_options *o, clef_image_opts *io) {
    clef_image_opts_default(io);
    io->tile = o->image_tile;
    io->allow_paths = o->allow_image_paths; /* local files only when the caller asks (--allow-image-paths) */
    if (o->max_image_bytes) io->max_bytes = o->max_image_bytes;
    if (o->max_image_pixels) io->max_source_pixels = o->max_image_pixels;
    io->max_images = o->max_images; /* 0: as many as can fit the token budget (encode.c) */
}

clef_tokenizer *clef_host_tokenizer(const clef_options *o, clef_err *err) {
    clef_buf path;
    clef_buf_init(&path);
    clef_buf_printf(&path, "%s/tokenizer.json", o->model_dir);
    if (path.oom) {
        clef_buf_free(&path);
        clef_err_set(err, CLEF_E_OOM, "out of memory");
        return NULL;
    }
    clef_tokenizer *tok = clef_tokenizer_load(path.data, (clef_split_variant)o->split_variant, err);
    clef_buf_free(&path);
    return tok;
}

int clef_host_parse(const char *body, size_t len, json_doc **doc, clef_request *req, clef_err *err) {
    json_limits lim = {0}; /* the JSON module's defaults: the body's size is bounded by the driver */
    *doc = clef_json_parse(body, len, &lim, err);
    if (!*doc) return -1;
    return clef_request_parse(clef_json_doc_root(*doc), req, err);
}

int clef_host_encode(const clef_tokenizer *tok, const clef_image_opts *io, int max_length,
                     int (*stop)(void *ctx), void *stop_ctx, const clef_request *req, clef_record *rec,
                     clef_err *err) {
    clef_encode_opts eo;
    memset(&eo, 0, sizeof eo);
    eo.max_length = max_length > 0 ? (size_t)max_length : 0; /* 0: CLEF_MAX_LENGTH_DEFAULT */
    eo.image = io;
    eo.stop = stop;
    eo.stop_ctx = stop_ctx;
    return clef_encode_record(tok, req, &eo, rec, err);
}

int clef_host_notes(const clef_request *req, const clef_record *rec, int max_length, clef_buf *notes) {
    int lines = clef_request_lint(req->root, notes);
    if (lines < 0) return -1;
    if (rec->state_kept < rec->state_total) {
        clef_buf_printf(notes, "state cut to %zu tokens (it has %zu; the limit is %d tokens per request)\n",
                        rec->state_kept, rec->state_total, max_length > 0 ? max_length : CLEF_MAX_LENGTH_DEFAULT);
        lines++;
    }
    return notes->oom ? -1 : lines;
}

int clef_host_explain(const json_value *root, const clef_err *err, clef_buf *notes) {
    return root ? clef_request_explain(root, err, notes) : 0;
}
