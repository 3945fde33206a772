/* clef encode --model DIR [--request F|-] [--max-length N] [--tile 0|256|448] [--allow-image-paths]
 * Prints the encoded record: {"input_ids":[...],"questions":[{"question_id","question_type",
 * "question_span","option_spans","option_ids"},...]} (plus "images" when the request has some), or
 * {"error":{"type","message"}} with exit status 1. Reads only DIR/tokenizer.json. An inspection verb
 * on clef.h's clef_encode_request: the engine's own host pipeline, with the limits `clef decide` has. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/json.h"
#include "clef.h"
#include "cli/cli_opts.h"
#include "cli/cmds.h"
#include "cli/read_input.h"

/* {"error":{"type":...,"message":...}} on stdout, exit status 1: the body clef_encode_request gives
 * for its own failures, here for the one step before it (reading the request). The same bytes as
 * decision/response.c's clef_error_render. */
static int fail(const clef_err *e) {
    clef_buf b;
    clef_buf_init(&b);
    clef_json_render_error(&b, e->type, e->msg);
    if (b.data && !b.oom) printf("%s\n", b.data);
    clef_buf_free(&b);
    return 1;
}

int cmd_encode(int argc, char **argv) {
    clef_options o;
    clef_options_default(&o);
    const char *request = "-";
    const cli_opt opts[] = {
        CLI_OPT_MODEL(&o.model_dir),
        {.name = "--request", .kind = CLI_FILE, .dst = &request, .arg = "F|-",
         .help = "the request JSON file; - = stdin"},
        CLI_OPT_MAX_LENGTH(&o.max_length),
        CLI_OPT_TILE(&o.image_tile),
        CLI_OPT_ALLOW_PATHS(&o.allow_image_paths), /* local files only when asked */
        CLI_OPT_END,
    };
    const cli_cmd cmd = {.verb = "encode", .usage = "--model DIR [--request F|-] [options]", .opts = opts,
                         .about = "Prints {\"input_ids\",\"questions\":[...]} (the encoded record) or {\"error\":{...}} with exit\n"
                                  "1. Reads only DIR/tokenizer.json.\n"};
    int st = cli_parse(&cmd, argc, argv);
    if (st != CLI_CONTINUE) return st;
    size_t len;
    char *text = cli_read_all(request, CLI_MAX_INPUT_BYTES, &len);
    if (!text) {
        clef_err err;
        clef_err_clear(&err);
        clef_err_set(&err, CLEF_E_IO, "cannot read %s", request);
        return fail(&err);
    }
    clef_result r;
    int rc = clef_encode_request(&o, text, len, &r);
    free(text);
    cli_print_warnings(r.warnings); /* as clef decide */
    if (r.body) {
        fwrite(r.body, 1, r.body_len, stdout);
        fputc('\n', stdout);
    }
    clef_result_free(&r);
    return rc ? 1 : 0;
}
