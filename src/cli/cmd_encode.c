/* clef encode --model DIR --request F|- [--max-length N]
 * Prints the encoded record: {"input_ids":[...],"questions":[{"question_id","question_type",
 * "question_span","option_spans","option_ids"},...]} (plus "images" when the request has some), or
 * {"error":{"type","message"}} with exit status 1. Reads only DIR/tokenizer.json. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "cli/cmds.h"
#include "cli/read_input.h"
#include "decision/encode.h"
#include "decision/request.h"
#include "decision/response.h"
#include "base/json.h"
#include "text/tokenizer.h"

static int fail(const clef_err *e) {
    clef_buf b;
    clef_buf_init(&b);
    clef_error_render(&b, e);
    if (b.data) printf("%s\n", b.data);
    clef_buf_free(&b);
    return 1;
}

int cmd_encode(int argc, char **argv) {
    const char *model = NULL, *request = NULL;
    size_t max_length = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "--request") && i + 1 < argc) request = argv[++i];
        else if (!strcmp(argv[i], "--max-length") && i + 1 < argc) max_length = strtoull(argv[++i], NULL, 10);
        else {
            fprintf(stderr, "usage: clef encode --model DIR --request F|- [--max-length N]\n");
            return 2;
        }
    }
    if (!model || !request) {
        fprintf(stderr, "usage: clef encode --model DIR --request F|- [--max-length N]\n");
        return 2;
    }
    clef_err err;
    clef_err_clear(&err);
    size_t len;
    char *text = cli_read_all(request, CLI_MAX_INPUT_BYTES, &len);
    if (!text) {
        clef_err_set(&err, CLEF_E_IO, "cannot read %s", request);
        return fail(&err);
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", model);
    int rc = 1;
    json_doc *doc = NULL;
    clef_tokenizer *tok = NULL;
    clef_request req;
    memset(&req, 0, sizeof req);
    clef_record rec;
    memset(&rec, 0, sizeof rec);
    doc = json_parse(text, len, NULL, &err);
    if (!doc) goto out;
    if (clef_request_parse(json_doc_root(doc), &req, &err)) goto out;
    tok = clef_tokenizer_load(path, CLEF_SPLIT_FROM_FILE, &err);
    if (!tok) goto out;
    clef_image_opts io;
    clef_image_opts_default(&io);
    io.allow_paths = 1; /* the CLI may read image files */
    clef_encode_opts eo = {.max_length = max_length, .image = &io};
    if (clef_encode_record(tok, &req, &eo, &rec, &err)) goto out;
    clef_buf b;
    clef_buf_init(&b);
    if (clef_record_render(&b, &rec)) {
        clef_err_set(&err, CLEF_E_OOM, "out of memory");
        clef_buf_free(&b);
        goto out;
    }
    fwrite(b.data, 1, b.len, stdout);
    fputc('\n', stdout);
    clef_buf_free(&b);
    rc = 0;
out:
    clef_record_free(&rec);
    clef_request_free(&req);
    if (tok) clef_tokenizer_free(tok);
    if (doc) json_doc_free(doc);
    free(text);
    return rc ? fail(&err) : 0;
}
