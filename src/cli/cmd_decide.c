/* clef decide: answer one request with the model; prints the response JSON (the bytes the server
 * sends) or {"error":{...}} and exits non-zero. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clef.h"
#include "cli/cli_opts.h"
#include "cli/cmds.h"
#include "cli/read_input.h"

int cmd_decide(int argc, char **argv) {
    clef_options o;
    clef_options_default(&o);
    o.single_request = 1; /* one forward: no weight packing at open (clef.h) */
    const char *request = "-", *dump = NULL;
    const cli_opt opts[] = {
        CLI_OPTS_ENGINE(&o),
        {.name = "--request", .kind = CLI_FILE, .dst = &request, .arg = "F|-",
         .help = "the request JSON file; - = stdin"},
        CLI_OPT_MAX_LENGTH(&o.max_length),
        CLI_OPT_SPLIT(&o.split_variant),
        CLI_OPT_TILE(&o.image_tile),
        CLI_OPT_ALLOW_PATHS(&o.allow_image_paths),
        CLI_OPT_TEXT_ONLY(&o.text_only),
        CLI_OPT_STRICT(&o.strict),
        {.name = "--dump-layers", .kind = CLI_STR, .dst = &dump, .arg = "DIR",
         .help = "debugging: write each layer's hidden rows as raw float32 files into DIR"},
        CLI_OPT_END,
    };
    const cli_cmd cmd = {.verb = "decide", .usage = "--model DIR [--request F|-] [options]", .opts = opts,
                         .about = "Prints the response JSON (the bytes the server sends) or {\"error\":{...}} with exit 1.\n"};
    int st = cli_parse(&cmd, argc, argv);
    if (st != CLI_CONTINUE) return st;

    size_t len = 0;
    char *body = cli_read_all(request, CLI_MAX_INPUT_BYTES, &len);
    if (!body) return 2;
    char err[1200];
    clef_engine *e = clef_open(&o, err, sizeof err);
    if (!e) {
        fprintf(stderr, "clef: %s\n", err);
        free(body);
        return 3;
    }
    cli_engine_note("decide", e);
    if (dump) clef_set_dump_dir(e, dump);
    clef_result r;
    int rc = clef_decide(e, body, len, &r);
    cli_print_warnings(r.warnings);
    if (r.body) {
        fwrite(r.body, 1, r.body_len, stdout);
        fputc('\n', stdout);
    }
    clef_result_free(&r);
    clef_close(e);
    free(body);
    return rc ? 1 : 0;
}
