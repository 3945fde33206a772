/* clef encode --model DIR [--request F|-] [--max-length N] [--tile 0|256|448] [--allow-image-paths]
 * Prints the encoded record: {"input_ids":[...],"questions":[{"question_id","question_type",
 * "question_span","option_spans","option_ids"},...]} (plus "images" when the request has some), or
 * {"error":{"type","message"}} with exit status 1. Reads only DIR/tokenizer.json. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "cli/cli_opts.h"
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
    const char *model = NULL, *request = "-";
    int max_length = 16384, tile = 0, allow_paths = 0;
    const cli_opt opts[] = {
        CLI_OPT_MODEL(&model),
        {.name = "--request", .kind = CLI_FILE, .dst = &request, .arg = "F|-", .def = "-",
         .help = "the request JSON file; - = stdin"},
        CLI_OPT_MAX_LENGTH(&max_length),
        CLI_OPT_TILE(&tile),
        CLI_OPT_ALLOW_PATHS(&allow_paths),
        CLI_OPT_END,
    };
    const cli_cmd cmd = {.verb = "encode", .usage = "--model DIR [--request F|-] [options]", .opts = opts,
                         .about = "Prints {\"input_ids\",\"questions\":[...]} (the encoded record) or {\"error\":{...}} with exit\n"
                                  "1. Reads only DIR/tokenizer.json.\n"};
    int st = cli_parse(&cmd, argc, argv);
    if (st != CLI_CONTINUE) return st;
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
    doc = clef_json_parse(text, len, NULL, &err);
    if (!doc) goto out;
    if (clef_request_parse(clef_json_doc_root(doc), &req, &err)) goto out;
    tok = clef_tokenizer_load(path, CLEF_SPLIT_FROM_FILE, &err);
    if (!tok) goto out;
    clef_image_opts io;
    clef_image_opts_default(&io);
    io.allow_paths = allow_paths; /* local files only when asked (--allow-image-paths) */
    io.tile = tile;
    clef_encode_opts eo = {.max_length = (size_t)max_length, .image = &io};
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
    if (doc) clef_json_doc_free(doc);
    free(text);
    return rc ? fail(&err) : 0;
}
