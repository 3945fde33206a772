/* clef tokenize: token ids of text, as HF tokenizers' encode(text, add_special_tokens=False).
 *
 *   clef tokenize --model DIR (--text TEXT | --file F|- | --jsonl F|-) [--split file|qwen2|qwen35]
 *                 [--no-added-tokens] [--regex-only] [--bench N]
 *
 * --text / --file: the text (all bytes of F) is one piece; prints {"ids":[...]}.
 * --jsonl: every input line is one JSON string; prints one line per input line, {"ids":[...]} or
 *   {"error":{"type":...,"message":...}}, and goes on after an error (exit 0 unless I/O fails).
 * --split: force the split variant (default: the one tokenizer.json's pattern names).
 * --no-added-tokens: do not match added tokens (not the reference's behaviour; for fixtures that
 *   tokenize literal "<|im_start|>" as text).
 * --regex-only: split with Oniguruma only, without the ASCII fast path (for tests; same ids).
 * --bench N: tokenize the --text/--file text N times and print timings to stderr.
 * Reads only DIR/tokenizer.json. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/buf.h"
#include "base/err.h"
#include "cli/cli_opts.h"
#include "cli/cmds.h"
#include "base/json.h"
#include "text/tokenizer.h"
#include "base/clock.h"

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int read_all(FILE *f, char **data, size_t *len) {
    clef_buf b;
    clef_buf_init(&b);
    char tmp[65536];
    size_t r;
    while ((r = fread(tmp, 1, sizeof tmp, f)) > 0)
        if (clef_buf_put(&b, tmp, r)) break;
    if (ferror(f) || b.oom) {
        clef_buf_free(&b);
        return -1;
    }
    if (clef_buf_reserve(&b, 0)) return -1; /* data non-NULL even when empty */
    *data = clef_buf_take(&b, len);
    return *data ? 0 : -1;
}

static void put_ids(clef_buf *o, const clef_ids *ids) {
    clef_buf_puts(o, "{\"ids\":[");
    for (size_t i = 0; i < ids->n; i++) clef_buf_printf(o, i ? ",%d" : "%d", (int)ids->v[i]);
    clef_buf_puts(o, "]}\n");
}

static void put_error(clef_buf *o, const char *type, const char *msg) {
    clef_json_render_error(o, type, msg);
    clef_buf_puts(o, "\n");
}

static int run_jsonl(const clef_tokenizer *t, const char *path, unsigned flags) {
    int from_stdin = !strcmp(path, "-");
    FILE *in = from_stdin ? stdin : fopen(path, "rb");
    if (!in) {
        fprintf(stderr, "clef tokenize: cannot open %s\n", path);
        return 1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    size_t lineno = 0;
    clef_buf o;
    clef_buf_init(&o);
    clef_ids ids;
    clef_ids_init(&ids);
    int rc = 0;
    while ((n = getline(&line, &cap, in)) >= 0) {
        lineno++;
        size_t len = (size_t)n;
        if (len && line[len - 1] == '\n') len--;
        clef_buf_reset(&o);
        ids.n = 0;
        clef_err err;
        clef_err_clear(&err);
        json_doc *doc = clef_json_parse(line, len, NULL, &err);
        if (!doc) {
            char msg[1100];
            snprintf(msg, sizeof msg, "line %zu: %s", lineno, err.msg);
            put_error(&o, err.type ? err.type : CLEF_E_BAD_JSON, msg);
        } else {
            const json_value *v = clef_json_doc_root(doc);
            if (!v || v->kind != JSON_STRING) {
                char msg[64];
                snprintf(msg, sizeof msg, "line %zu: expected a JSON string", lineno);
                put_error(&o, CLEF_E_BAD_JSON, msg);
            } else if (clef_tokenize_ex(t, v->u.string.s, v->u.string.len, flags, &ids, &err)) {
                put_error(&o, err.type, err.msg);
            } else {
                put_ids(&o, &ids);
            }
            clef_json_doc_free(doc);
        }
        if (o.oom || fwrite(o.data, 1, o.len, stdout) != o.len) {
            rc = 1;
            break;
        }
        if (from_stdin) fflush(stdout);
    }
    if (ferror(in)) {
        fprintf(stderr, "clef tokenize: read error on %s\n", path);
        rc = 1;
    }
    if (!from_stdin) fclose(in);
    free(line);
    clef_buf_free(&o);
    clef_ids_free(&ids);
    if (fflush(stdout)) rc = 1;
    return rc;
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *text = NULL, *file = NULL, *jsonl = NULL;
    int split = 0, no_added = 0, regex_only = 0, bench = 0;
    const cli_opt opts[] = {
        CLI_OPT_MODEL(&model),
        {.name = "--text", .kind = CLI_STR, .dst = &text, .arg = "TEXT", .help = "the text to tokenize"},
        {.name = "--file", .kind = CLI_FILE, .dst = &file, .arg = "F|-", .help = "tokenize all bytes of F as one text; - = stdin"},
        {.name = "--jsonl", .kind = CLI_FILE, .dst = &jsonl, .arg = "F|-",
         .help = "one JSON string per line, one {\"ids\"} or {\"error\"} line out per line in; - = stdin"},
        CLI_OPT_SPLIT(&split),
        {.name = "--no-added-tokens", .kind = CLI_FLAG, .dst = &no_added,
         .help = "do not match added tokens (not the reference's behaviour; for fixtures)"},
        {.name = "--regex-only", .kind = CLI_FLAG, .dst = &regex_only,
         .help = "split with Oniguruma only, without the ASCII fast path (tests; same ids)"},
        {.name = "--bench", .kind = CLI_INT, .dst = &bench, .arg = "N", .lo = 0, .hi = 1000000,
         .help = "tokenize the --text/--file text N times and print timings to stderr"},
        CLI_OPT_END,
    };
    const cli_cmd cmd = {.verb = "tokenize", .usage = "--model DIR (--text TEXT | --file F|- | --jsonl F|-) [options]",
                         .opts = opts,
                         .about = "Prints {\"ids\":[...]}: HF tokenizers' encode(text, add_special_tokens=False).\n"
                                  "Reads only DIR/tokenizer.json.\n"};
    int st = cli_parse(&cmd, argc, argv);
    if (st != CLI_CONTINUE) return st;
    if ((!!text + !!file + !!jsonl) != 1) {
        fprintf(stderr, "clef tokenize: give exactly one of --text, --file and --jsonl (clef tokenize --help)\n");
        return 2;
    }
    if (bench && jsonl) {
        fprintf(stderr, "clef tokenize: --bench applies to --text or --file, not --jsonl\n");
        return 2;
    }
    clef_split_variant variant = split == 1 ? CLEF_SPLIT_QWEN2 : split == 2 ? CLEF_SPLIT_QWEN35 : CLEF_SPLIT_FROM_FILE;
    unsigned flags = (no_added ? CLEF_TOK_NO_ADDED : 0u) | (regex_only ? CLEF_TOK_REGEX_ONLY : 0u);

    clef_buf path;
    clef_buf_init(&path);
    clef_buf_printf(&path, "%s/tokenizer.json", model);
    if (path.oom) return 1;
    clef_err err;
    clef_err_clear(&err);
    double t0 = clef_now(), c0 = cpu_s();
    clef_tokenizer *t = clef_tokenizer_load(path.data, variant, &err);
    double t_load = clef_now() - t0, t_load_cpu = cpu_s() - c0;
    clef_buf_free(&path);
    if (!t) {
        fprintf(stderr, "clef tokenize: %s: %s\n", err.type, err.msg);
        return 1;
    }
    int rc = 0;
    if (jsonl) {
        rc = run_jsonl(t, jsonl, flags);
    } else {
        char *data = NULL;
        size_t len = 0;
        if (file) {
            int from_stdin = !strcmp(file, "-");
            FILE *f = from_stdin ? stdin : fopen(file, "rb");
            if (!f || read_all(f, &data, &len)) {
                fprintf(stderr, "clef tokenize: cannot read %s\n", file);
                if (f && !from_stdin) fclose(f);
                clef_tokenizer_free(t);
                return 1;
            }
            if (!from_stdin) fclose(f);
        }
        const char *s = file ? data : text;
        if (!file) len = strlen(text);
        clef_ids ids;
        clef_ids_init(&ids);
        clef_buf o;
        clef_buf_init(&o);
        double first = clef_now(), first_cpu = cpu_s();
        int trc = clef_tokenize_ex(t, s, len, flags, &ids, &err);
        first = clef_now() - first;
        first_cpu = cpu_s() - first_cpu;
        if (trc) {
            put_error(&o, err.type, err.msg);
            rc = 1;
        } else if (bench > 0) {
            /* best wall time and best CPU time of N runs (CPU time is steadier on a shared machine) */
            /* the first run above had cold caches (per-thread pretoken cache, pair memo) */
            double best = 1e30, best_cpu = 1e30;
            for (int k = 0; k < bench; k++) {
                ids.n = 0;
                double a = clef_now(), c = cpu_s();
                clef_tokenize_ex(t, s, len, flags, &ids, &err);
                double d = clef_now() - a, dc = cpu_s() - c;
                if (d < best) best = d;
                if (dc < best_cpu) best_cpu = dc;
            }
            fprintf(stderr,
                    "load %.1f ms (cpu %.1f ms); %zu bytes -> %zu tokens; first run: wall %.3f ms, cpu %.3f ms; "
                    "best of %d: wall %.3f ms, cpu %.3f ms (%.1f MB/s, %.2f M tokens/s by cpu time)\n",
                    t_load * 1e3, t_load_cpu * 1e3, len, ids.n, first * 1e3, first_cpu * 1e3, bench, best * 1e3,
                    best_cpu * 1e3,
                    (double)len / best_cpu / 1e6, (double)ids.n / best_cpu / 1e6);
            put_ids(&o, &ids);
        } else {
            put_ids(&o, &ids);
        }
        if (o.oom || fwrite(o.data, 1, o.len, stdout) != o.len || fflush(stdout)) rc = 1;
        clef_buf_free(&o);
        clef_ids_free(&ids);
        free(data);
    }
    clef_tokenizer_free(t);
    return rc;
}
