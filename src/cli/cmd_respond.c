/* clef respond [--request F|-] --logits F|- (--input-tokens N | --model DIR) [--tile T] [--allow-image-paths]
 * Prints the response the reference's systemone() would return for these logits. The logits file is
 * JSON: one array per question, in request order, holding that question's logits in head option order
 * (noul: true, false; choice: option ids sorted by code point; score: levels 0..n-1), e.g.
 * [[1.5, -0.25], [0.1, 0.2, 0.3]]. usage.input_tokens comes from --input-tokens, or from encoding the
 * request with DIR/tokenizer.json when --model is given. Errors: {"error":{...}}, exit status 1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "cli/cli_opts.h"
#include "cli/cmds.h"
#include "cli/read_input.h"
#include "base/json.h"
#include "base/pyfmt.h"
#include "clef.h"
#include "decision/request.h"
#include "decision/response.h"

static int fail(const clef_err *e) {
    clef_buf b;
    clef_buf_init(&b);
    clef_error_render(&b, e);
    if (b.data) printf("%s\n", b.data);
    clef_buf_free(&b);
    return 1;
}

/* [[x, ...], ...] -> one flat float array, checked against the request's option counts. */
static float *read_logits(const json_value *v, const clef_request *req, size_t *n, clef_err *err) {
    if (!v || v->kind != JSON_ARRAY || v->u.array.n != req->n_questions) {
        clef_err_set(err, CLEF_E_BAD_JSON, "logits: expected an array of %zu arrays (one per question)",
                     req->n_questions);
        return NULL;
    }
    size_t total = 0;
    for (size_t i = 0; i < req->n_questions; i++) total += req->questions[i].n_options;
    float *out = malloc((total ? total : 1) * sizeof *out);
    if (!out) {
        clef_err_set(err, CLEF_E_OOM, "out of memory");
        return NULL;
    }
    size_t k = 0;
    for (size_t i = 0; i < req->n_questions; i++) {
        const json_value *a = v->u.array.items[i];
        if (a->kind != JSON_ARRAY || a->u.array.n != req->questions[i].n_options) {
            clef_err_set(err, CLEF_E_BAD_JSON, "logits[%zu]: expected %zu numbers", i, req->questions[i].n_options);
            free(out);
            return NULL;
        }
        for (size_t j = 0; j < a->u.array.n; j++) {
            const json_value *x = a->u.array.items[j];
            if (x->kind == JSON_FLOAT) out[k++] = (float)x->u.number;
            else if (x->kind == JSON_INT) out[k++] = (float)clef_py_strtod(x->u.integer.digits, NULL);
            else {
                clef_err_set(err, CLEF_E_BAD_JSON, "logits[%zu][%zu]: not a number", i, j);
                free(out);
                return NULL;
            }
        }
    }
    *n = total;
    return out;
}

int cmd_respond(int argc, char **argv) {
    const char *request = "-", *logits = NULL, *model = NULL;
    int input_tokens = -1, tile = 0, allow_paths = 0;
    const cli_opt opts[] = {
        {.name = "--request", .kind = CLI_FILE, .dst = &request, .arg = "F|-",
         .help = "the request JSON file; - = stdin"},
        {.name = "--logits", .kind = CLI_FILE, .dst = &logits, .arg = "F|-", .required = 1,
         .help = "the logits JSON file ([[...] per question], head option order); - = stdin"},
        {.name = "--input-tokens", .kind = CLI_INT, .dst = &input_tokens, .arg = "N", .lo = 0, .hi = 16777216,
         .no_default = 1, .help = "usage.input_tokens (else counted by encoding the request with --model)"},
        {.name = "--model", .kind = CLI_STR, .dst = &model, .arg = "DIR",
         .help = "encode the request with DIR/tokenizer.json (checks it, counts input tokens)"},
        CLI_OPT_TILE(&tile),
        CLI_OPT_ALLOW_PATHS(&allow_paths),
        CLI_OPT_END,
    };
    const cli_cmd cmd = {.verb = "respond", .usage = "--logits F (--input-tokens N | --model DIR) [options]",
                         .opts = opts,
                         .about = "Prints the response the reference's systemone() returns for these logits, or\n"
                                  "{\"error\":{...}} with exit 1.\n"};
    int st = cli_parse(&cmd, argc, argv);
    if (st != CLI_CONTINUE) return st;
    if (input_tokens < 0 && !model) {
        fprintf(stderr, "clef respond: --input-tokens N or --model DIR is required (clef respond --help)\n");
        return 2;
    }
    if (!strcmp(request, "-") && !strcmp(logits, "-")) {
        fprintf(stderr, "clef respond: --request and --logits cannot both be stdin\n");
        return 2;
    }
    clef_err err;
    clef_err_clear(&err);
    size_t rlen = 0, llen = 0;
    char *rtext = cli_read_all(request, CLI_MAX_INPUT_BYTES, &rlen), *ltext = NULL;
    json_doc *rdoc = NULL, *ldoc = NULL;
    clef_request req;
    memset(&req, 0, sizeof req);
    float *lv = NULL;
    size_t nl = 0;
    int rc = 1, printed = 0; /* printed: the error body is out already (clef_encode_request's) */
    if (!rtext) {
        clef_err_set(&err, CLEF_E_IO, "cannot read %s", request);
        goto out;
    }
    rdoc = clef_json_parse(rtext, rlen, NULL, &err);
    if (!rdoc || clef_request_parse(clef_json_doc_root(rdoc), &req, &err)) goto out;
    if (model) {
        /* the engine's host pipeline (clef.h's inspection entry) checks the request and counts its tokens */
        clef_options o;
        clef_options_default(&o);
        o.model_dir = model;
        o.image_tile = tile;
        o.allow_image_paths = allow_paths; /* local files only when asked (--allow-image-paths) */
        clef_result enc;
        if (clef_encode_request(&o, rtext, rlen, &enc)) {
            if (enc.body) {
                fwrite(enc.body, 1, enc.body_len, stdout);
                fputc('\n', stdout);
            }
            clef_result_free(&enc);
            printed = 1;
            goto out;
        }
        if (input_tokens < 0) input_tokens = enc.input_tokens;
        clef_result_free(&enc);
    } else if (clef_request_check_criteria(&req, &err)) {
        goto out;
    }
    ltext = cli_read_all(logits, CLI_MAX_INPUT_BYTES, &llen);
    if (!ltext) {
        clef_err_set(&err, CLEF_E_IO, "cannot read %s", logits);
        goto out;
    }
    ldoc = clef_json_parse(ltext, llen, NULL, &err);
    if (!ldoc) goto out;
    lv = read_logits(clef_json_doc_root(ldoc), &req, &nl, &err);
    if (!lv) goto out;
    clef_buf b;
    clef_buf_init(&b);
    if (clef_response_render(&b, &req, lv, nl, (size_t)input_tokens, &err)) {
        clef_buf_free(&b);
        goto out;
    }
    fwrite(b.data, 1, b.len, stdout);
    fputc('\n', stdout);
    clef_buf_free(&b);
    rc = 0;
out:
    free(lv);
    clef_request_free(&req);
    if (ldoc) clef_json_doc_free(ldoc);
    if (rdoc) clef_json_doc_free(rdoc);
    free(ltext);
    free(rtext);
    return !rc ? 0 : printed ? 1 : fail(&err);
}
