/* clef state-key --model DIR [--request F|-] [--jsonl] [options]
 * Prints each request's routing key (clef.h clef_state_key; docs/serving.md "The routing key"): the
 * 64 hex digits `clef serve` echoes as X-Clef-State-Key. One request (the whole input, as `clef
 * encode` reads it): the key, or the error body with exit status 1. --jsonl: one output line per
 * input line, as `clef batch` reads IN (an empty line is a request, refused as BadJson; a line over
 * --max-line gets batch's RequestTooLong line): the key, or the request's error body; exit 0 once
 * every line has its line. Reads only DIR/tokenizer.json (read once). */
#include <errno.h>
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
#include "serve/server.h" /* CLEF_SERVE_MAX_BODY_DEFAULT: --max-line as batch's */

static void print_error(const char *type, const char *msg) {
    clef_buf b;
    clef_buf_init(&b);
    clef_json_render_error(&b, type, msg);
    if (b.data && !b.oom) printf("%s\n", b.data);
    clef_buf_free(&b);
}

/* The key or the error body of one request, on its own line. Returns 0 for a key. */
static int key_line(const clef_options *o, const char *body, size_t len) {
    clef_result r;
    int rc = clef_state_key(o, body, len, &r);
    if (r.body) {
        fwrite(r.body, 1, r.body_len, stdout);
        fputc('\n', stdout);
    }
    clef_result_free(&r);
    return rc;
}

/* The next line of f into *line (without its '\n', NUL-terminated) unless it is longer than max:
 * then it is read to its end without being kept (*too_long, *len its length). 1: a line; 0: end of
 * input; -1: read error or out of memory. */
static int next_line(FILE *f, char **line, size_t *cap, size_t max, size_t *len, int *too_long) {
    size_t n = 0;
    int c, any = 0;
    *too_long = 0;
    while ((c = getc_unlocked(f)) != EOF) {
        any = 1;
        if (c == '\n') break;
        if (n >= max) *too_long = 1;
        if (!*too_long) {
            if (n + 2 > *cap) {
                size_t nc = *cap ? *cap * 2 : 4096;
                char *p = realloc(*line, nc);
                if (!p) return -1;
                *line = p;
                *cap = nc;
            }
            (*line)[n] = (char)c;
        }
        n++;
    }
    if (ferror(f)) return -1;
    if (!any) return 0;
    if (!*too_long) (*line)[n] = '\0';
    *len = n;
    return 1;
}

static int run_jsonl(const clef_options *o, const char *path, size_t max_line) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) {
        fprintf(stderr, "clef state-key: cannot open %s: %s\n", path, strerror(errno));
        return 2;
    }
    char *line = NULL;
    size_t cap = 0, len = 0;
    unsigned long long lineno = 0;
    int too_long, got, rc = 0;
    while ((got = next_line(f, &line, &cap, max_line, &len, &too_long)) == 1) {
        lineno++;
        if (too_long) { /* the line clef batch writes for it */
            char msg[200];
            snprintf(msg, sizeof msg, "line %llu is %zu bytes; the limit is %zu bytes (--max-line)", lineno, len,
                     max_line);
            print_error("RequestTooLong", msg);
        } else {
            key_line(o, line ? line : "", len);
        }
        fflush(stdout); /* a reader on a pipe gets each key as it is made */
    }
    if (got < 0) {
        fprintf(stderr, "clef state-key: cannot read %s: %s\n", path, errno ? strerror(errno) : "out of memory");
        rc = 2;
    }
    free(line);
    if (f != stdin) fclose(f);
    return rc;
}

int cmd_state_key(int argc, char **argv) {
    clef_options o;
    clef_options_default(&o);
    const char *request = "-";
    int jsonl = 0;
    size_t max_line = CLEF_SERVE_MAX_BODY_DEFAULT; /* as batch's --max-line */
    const cli_opt opts[] = {
        CLI_OPT_MODEL(&o.model_dir),
        {.name = "--request", .kind = CLI_FILE, .dst = &request, .arg = "F|-",
         .help = "the request JSON file (with --jsonl: one request per line); - = stdin"},
        {.name = "--jsonl", .kind = CLI_FLAG, .dst = &jsonl,
         .help = "one request per line: one key (or error body) per line, in order"},
        {.name = "--max-line", .kind = CLI_SIZE, .dst = &max_line, .arg = "BYTES", .lo = 1024, .hi = 1073741824,
         .help = "with --jsonl: longest request line; a longer one gets a RequestTooLong error line"},
        CLI_OPT_MAX_LENGTH(&o.max_length),
        CLI_OPT_SPLIT(&o.split_variant),
        CLI_OPT_TILE(&o.image_tile),
        CLI_OPT_ALLOW_PATHS(&o.allow_image_paths),
        CLI_OPT_END,
    };
    const cli_cmd cmd = {.verb = "state-key", .usage = "--model DIR [--request F|-] [--jsonl] [options]", .opts = opts,
                         .about = "Prints the routing key (64 hex digits, what clef serve echoes as X-Clef-State-Key)\n"
                                  "or {\"error\":{...}} with exit 1. Use the options the server runs with. Reads\n"
                                  "only DIR/tokenizer.json.\n"};
    int st = cli_parse(&cmd, argc, argv);
    if (st != CLI_CONTINUE) return st;
    if (jsonl) return run_jsonl(&o, request, max_line);
    size_t len;
    char *text = cli_read_all(request, CLI_MAX_INPUT_BYTES, &len);
    if (!text) {
        char msg[600];
        snprintf(msg, sizeof msg, "cannot read %s", request);
        print_error(CLEF_E_IO, msg);
        return 1;
    }
    int rc = key_line(&o, text, len);
    free(text);
    return rc ? 1 : 0;
}
