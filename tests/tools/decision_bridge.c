/* decision_bridge: batch front end to request/encode/response for the parity tests
 * (tests/parity/test_author_fixture.py, test_contract_errors.py). One process for many requests.
 *
 *   decision_bridge [--tokenizer PATH] < lines > lines      (one result line per input line)
 *
 * Input line: {"request": {...},
 *              "logits": [[...], ...]   optional: per question, head order -> a response
 *              "input_tokens": N        optional: usage (default: the encoded length)
 *              "grids": [[t,h,w], ...]  optional: injected image grids instead of decoding `images`
 *              "max_length": N,         optional (default 16384)
 *              "allow_paths": true}     optional: images and videos may be local paths
 * or {"request_hex": "<hex of the raw request bytes>", ...}: the bytes are parsed as a body would be
 * (InvalidUtf8, BadJson, ... from the parser).
 * Output line: {"encode": <clef encode output or {"error":...}>, "response": "<bytes>" | {"error":...}}
 * ("encode" is absent without --tokenizer; "response" absent without logits). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/err.h"
#include "decision/encode.h"
#include "decision/request.h"
#include "decision/response.h"
#include "base/json.h"
#include "base/pyfmt.h"
#include "text/tokenizer.h"

static int grid_media(void *ctx, size_t index, const json_value *entry, const clef_image_opts *o, clef_image *out,
                      clef_err *err) {
    (void)entry;
    (void)o;
    const json_value *grids = ctx;
    if (index >= grids->u.array.n) return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "no injected grid %zu", index);
    const json_value *g = grids->u.array.items[index];
    if (g->kind != JSON_ARRAY || g->u.array.n != 3) return clef_err_set(err, CLEF_E_INTERNAL, "bad grid");
    int v[3];
    for (int i = 0; i < 3; i++) {
        if (g->u.array.items[i]->kind != JSON_INT) return clef_err_set(err, CLEF_E_INTERNAL, "bad grid");
        v[i] = atoi(g->u.array.items[i]->u.integer.digits);
    }
    memset(out, 0, sizeof *out);
    out->grid_t = v[0], out->grid_h = v[1], out->grid_w = v[2];
    out->n_patches = (size_t)v[0] * (size_t)v[1] * (size_t)v[2];
    out->patch_dim = 1536;
    out->pixel_values = NULL;
    return 0;
}

static void put_err(clef_buf *o, const clef_err *e) { clef_error_render(o, e); }

static int hexv(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static void one(const clef_tokenizer *tok, const char *line, size_t len, clef_buf *o) {
    clef_err err;
    clef_err_clear(&err);
    json_doc *doc = clef_json_parse(line, len, NULL, &err);
    clef_buf_putc(o, '{');
    if (!doc) {
        clef_buf_puts(o, "\"encode\":");
        put_err(o, &err);
        clef_buf_putc(o, '}');
        return;
    }
    const json_value *root = clef_json_doc_root(doc);
    const json_value *rq = clef_json_object_get(root, "request");
    const json_value *lg = clef_json_object_get(root, "logits");
    const json_value *it = clef_json_object_get(root, "input_tokens");
    const json_value *grids = clef_json_object_get(root, "grids");
    const json_value *ml = clef_json_object_get(root, "max_length");
    const json_value *hx = clef_json_object_get(root, "request_hex");
    const json_value *ap = clef_json_object_get(root, "allow_paths");
    json_doc *rdoc = NULL;
    if (hx && hx->kind == JSON_STRING) {
        size_t n = hx->u.string.len / 2;
        char *raw = malloc(n + 1);
        for (size_t i = 0; raw && i < n; i++)
            raw[i] = (char)(hexv(hx->u.string.s[2 * i]) * 16 + hexv(hx->u.string.s[2 * i + 1]));
        rdoc = raw ? clef_json_parse(raw, n, NULL, &err) : NULL;
        free(raw);
        if (!rdoc) {
            clef_buf_puts(o, "\"encode\":");
            put_err(o, &err);
            clef_buf_putc(o, '}');
            clef_json_doc_free(doc);
            return;
        }
        rq = clef_json_doc_root(rdoc);
    }
    clef_request req;
    clef_record rec;
    memset(&rec, 0, sizeof rec);
    size_t n_ids = 0;
    int ok = 1;
    if (clef_request_parse(rq, &req, &err)) {
        ok = 0;
    } else if (tok) {
        clef_encode_opts eo = {0};
        clef_image_opts io;
        clef_image_opts_default(&io);
        if (ap && ap->kind == JSON_TRUE) {
            io.allow_paths = 1;
            eo.image = &io;
        }
        if (ml && ml->kind == JSON_INT) eo.max_length = strtoull(ml->u.integer.digits, NULL, 10);
        if (grids && grids->kind == JSON_ARRAY) eo.media = grid_media, eo.media_ctx = (void *)grids;
        if (clef_encode_record(tok, &req, &eo, &rec, &err)) ok = 0;
        else n_ids = rec.n_ids;
    } else if (clef_request_check_criteria(&req, &err)) {
        ok = 0;
    }
    if (tok || !ok) {
        clef_buf_puts(o, "\"encode\":");
        if (ok) clef_record_render(o, &rec);
        else put_err(o, &err);
    }
    if (ok && lg && lg->kind == JSON_ARRAY) {
        size_t total = 0, k = 0;
        for (size_t i = 0; i < lg->u.array.n; i++)
            if (lg->u.array.items[i]->kind == JSON_ARRAY) total += lg->u.array.items[i]->u.array.n;
        float *v = malloc((total ? total : 1) * sizeof *v);
        for (size_t i = 0; v && i < lg->u.array.n; i++) {
            const json_value *a = lg->u.array.items[i];
            for (size_t j = 0; a->kind == JSON_ARRAY && j < a->u.array.n; j++) {
                const json_value *x = a->u.array.items[j];
                v[k++] = x->kind == JSON_FLOAT ? (float)x->u.number
                         : x->kind == JSON_INT ? (float)clef_py_strtod(x->u.integer.digits, NULL)
                                               : 0.0f;
            }
        }
        if (it && it->kind == JSON_INT) n_ids = strtoull(it->u.integer.digits, NULL, 10);
        clef_buf r;
        clef_buf_init(&r);
        if (tok) clef_buf_putc(o, ',');
        clef_buf_puts(o, "\"response\":");
        if (v && !clef_response_render(&r, &req, v, k, n_ids, &err)) clef_json_render_string(o, r.data, r.len);
        else put_err(o, &err);
        clef_buf_free(&r);
        free(v);
    }
    clef_buf_putc(o, '}');
    clef_record_free(&rec);
    clef_request_free(&req);
    if (rdoc) clef_json_doc_free(rdoc);
    clef_json_doc_free(doc);
}

int main(int argc, char **argv) {
    const char *tpath = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc) tpath = argv[++i];
        else {
            fprintf(stderr, "usage: decision_bridge [--tokenizer PATH] < lines\n");
            return 2;
        }
    }
    clef_tokenizer *tok = NULL;
    if (tpath) {
        clef_err err;
        clef_err_clear(&err);
        tok = clef_tokenizer_load(tpath, CLEF_SPLIT_FROM_FILE, &err);
        if (!tok) {
            fprintf(stderr, "decision_bridge: %s: %s\n", err.type, err.msg);
            return 2;
        }
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    clef_buf o;
    clef_buf_init(&o);
    while ((n = getline(&line, &cap, stdin)) > 0) {
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) n--;
        clef_buf_reset(&o);
        one(tok, line, (size_t)n, &o);
        if (o.oom) {
            fprintf(stderr, "decision_bridge: out of memory\n");
            return 1;
        }
        fwrite(o.data, 1, o.len, stdout);
        fputc('\n', stdout);
        fflush(stdout);
    }
    free(line);
    clef_buf_free(&o);
    if (tok) clef_tokenizer_free(tok);
    return 0;
}
