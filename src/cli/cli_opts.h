/* The clef command's option parser (one for every verb), value checks and a progress bar.
 *
 * A verb describes its options in a table and calls cli_parse once:
 *
 *     clef_options o;
 *     clef_options_default(&o);
 *     const char *request = "-";
 *     const cli_opt opts[] = {
 *         CLI_OPTS_ENGINE(&o),                                   // --model --threads --device ...
 *         {.name = "--request", .kind = CLI_FILE, .dst = &request, .arg = "F",
 *          .help = "the request JSON file"},
 *         CLI_OPT_END,
 *     };
 *     const cli_cmd cmd = {.verb = "decide", .usage = "--model DIR [options]", .opts = opts};
 *     int st = cli_parse(&cmd, argc, argv);
 *     if (st != CLI_CONTINUE) return st;   // 0 after --help, 2 after an error (message printed)
 *
 * What cli_parse does, the same for every verb:
 * - `--name VALUE` and `--name=VALUE`, `-x VALUE` for an option with a short_name; flags (CLI_FLAG)
 *   take no value. `-h`/`--help` print the usage and the table, grouped by topic (cli_groups), to
 *   stdout and return 0. A lone `-` is a positional argument (stdin or stdout).
 * - every value is checked against its kind and range; a bad one prints one line
 *   "clef VERB: --threads: 'abc' is not an integer in [0, 4096]" on stderr and returns 2; so do an
 *   unknown option ("unknown option '--x'"), a missing value, a missing required option and a
 *   wrong number of positional arguments.
 * - an option with .env (its environment mirror, all listed in docs/cli.md) takes that variable's
 *   value when the command line does not give the option; the value is checked the same way and an
 *   error names the variable.
 * - the help line of an option shows its argument, meaning, default and mirror; docs/cli.md holds
 *   the same table and tests/parity/test_cli.py checks that they agree.
 * - the default --help shows is the value *dst holds when cli_parse is called (cli_format_default),
 *   never a second copy of it: a default is written once, where the verb (or the init function it
 *   calls: clef_options_default, clef_server_config_default) sets it; a default two files need is a
 *   named constant (clef.h, serve/scheduler.h, serve/server.h). tests/parity/test_option_defaults.py
 *   fails on a default written as a literal a second time.
 * Flags shared between verbs are defined once below (CLI_OPT_THREADS, ...): use those, so that a
 * flag means the same thing, with the same range, in every verb. */
#ifndef CLEF_CLI_CLI_OPTS_H
#define CLEF_CLI_CLI_OPTS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum {
    CLI_FLAG = 1, /* no value: *(int *)dst = 1 */
    CLI_STR,      /* *(const char **)dst = the value (not copied: argv or environ) */
    CLI_FILE,     /* like CLI_STR, a file to read; "-" means stdin (say so in .help) */
    CLI_INT,      /* *(int *)dst, a decimal integer in [lo, hi] */
    CLI_SIZE,     /* *(size_t *)dst, bytes or a count, optional K/M/G suffix (powers of 1024), in [lo, hi] */
    CLI_DOUBLE,   /* *(double *)dst, a finite number in [lo, hi] */
    CLI_ENUM,     /* *(int *)dst = values[i] (or i when values is NULL) for the value == choices[i] */
} cli_kind;

typedef struct cli_opt {
    const char *name;              /* "--threads"; NULL ends the table */
    char short_name;               /* 't' for -t, or 0 (only for the common flags: docs/cli.md) */
    const char *group;             /* the --help heading: one of cli_groups, or NULL ("options") */
    cli_kind kind;
    void *dst;                     /* see cli_kind */
    const char *arg;               /* the value's name in the help ("N", "DIR"); unused for CLI_FLAG */
    const char *help;              /* one line */
    int no_default;                /* 1: --help shows no default (*dst means "not given", e.g. -1) */
    double lo, hi;                 /* CLI_INT, CLI_SIZE, CLI_DOUBLE: the accepted range */
    const char *const *choices;    /* CLI_ENUM: NULL-terminated names */
    const int *values;             /* CLI_ENUM: the value stored for each name (NULL: the index) */
    const char *env;               /* the environment mirror, or NULL (docs/cli.md lists every one) */
    int required;                  /* 1: the verb fails without it */
    int *seen;                     /* when non-NULL: set to 1 when the option was given (argv or env) */
} cli_opt;

#define CLI_OPT_END {.name = NULL}

/* The --help headings, in the order printed; options without a group come last, under "options". */
extern const char *const cli_groups[];

typedef struct cli_cmd {
    const char *verb;   /* "decide" */
    const char *usage;  /* after "usage: clef VERB ": "--model DIR [options] IN.jsonl OUT.jsonl" */
    const char *about;  /* text printed after the options in --help (lines end with \n), or NULL */
    const cli_opt *opts;
    /* Positional arguments: stored in args[0..], their count in *n_args; the verb fails with fewer
     * than min_args or more than max_args (both 0: none accepted). */
    const char **args;
    int *n_args;
    int min_args, max_args;
} cli_cmd;

#define CLI_CONTINUE (-1)

/* Parses argv[1..argc) (argv[0] is the verb). Returns CLI_CONTINUE when the verb should run, or
 * the exit status it should return now: 0 after --help (printed to stdout), 2 after an error (one
 * line on stderr naming the option and the value). */
int cli_parse(const cli_cmd *c, int argc, char **argv);

/* Prints the usage and option table (what --help prints), each default as *dst holds it now. */
void cli_print_help(const cli_cmd *c, FILE *f);

/* The default --help shows for o, formatted from the value *dst holds now: a number as the kind
 * reads it (CLI_SIZE with .arg "BYTES": the largest of K, M, G that divides it exactly), a choice by
 * its name, a string as it is. 0 when none is shown (a flag, a required option, no_default, a NULL
 * string), else 1 with the text in out. */
int cli_format_default(const cli_opt *o, char *out, size_t cap);

/* Checks one value as the option's kind and range and stores it; 0 when good, else -1 with the
 * reason (e.g. "'abc' is not an integer in [0, 4096]") in why. */
int cli_set_value(const cli_opt *opt, const char *value, char *why, size_t why_len);

/* ---- flags shared by several verbs: one definition each ---- */

extern const char *const cli_device_choices[];    /* auto cpu cuda: CLEF_DEVICE_* */
extern const char *const cli_precision_choices[]; /* fp32 fast bf16 int8: CLEF_PRECISION_* */
extern const char *const cli_split_choices[];     /* file qwen2 qwen35: clef_options.split_variant */
extern const char *const cli_tile_choices[];      /* 0 256 448 */
extern const int cli_tile_values[];

#define CLI_OPT_MODEL(p)                                                                                   \
    {.name = "--model", .short_name = 'm', .group = "model", .kind = CLI_STR, .dst = (p), .arg = "DIR",    \
     .required = 1, .env = "CLEF_MODEL",                                                                   \
     .help = "the model folder (the release layout: config.json, shards, tokenizer.json, joint head)"}
#define CLI_OPT_THREADS(p)                                                                                 \
    {.name = "--threads", .short_name = 't', .group = "device", .kind = CLI_INT, .dst = (p), .arg = "N",   \
     .lo = 0, .hi = 4096, .env = "CLEF_THREADS",                                                           \
     .help = "compute threads; 0 = every online core"}
#define CLI_OPT_DEVICE(p)                                                                                  \
    {.name = "--device", .group = "device", .kind = CLI_ENUM, .dst = (p), .arg = "auto|cpu|cuda",          \
     .choices = cli_device_choices, .env = "CLEF_DEVICE",                                                  \
     .help = "compute backend; auto = CUDA when built with it and a GPU is present, else the CPU"}
#define CLI_OPT_PRECISION(p)                                                                               \
    {.name = "--precision", .group = "device", .kind = CLI_ENUM, .dst = (p), .arg = "fp32|fast|bf16|int8", \
     .choices = cli_precision_choices, .env = "CLEF_PRECISION",                                            \
     .help = "fp32 = exact; fast / bf16 = two / one bf16 terms (CUDA; the CPU runs fp32 and says so); int8 = CPU int8, refused until it passes its gate"}
#define CLI_OPT_GPU(p)                                                                                     \
    {.name = "--gpu", .group = "device", .kind = CLI_INT, .dst = (p), .arg = "N", .lo = 0, .hi = 1023,     \
     .help = "CUDA device index"}
#define CLI_OPT_MAX_LENGTH(p)                                                                              \
    {.name = "--max-length", .group = "limits", .kind = CLI_INT, .dst = (p), .arg = "N", .lo = 1, .hi = 16777216,            \
     .help = "token budget per request; the default is the reference's"}
#define CLI_OPT_TILE(p)                                                                                    \
    {.name = "--tile", .group = "model", .kind = CLI_ENUM, .dst = (p), .arg = "0|256|448",                 \
     .choices = cli_tile_choices, .values = cli_tile_values,                                               \
     .help = "images: 0 = the processor's native grid (reference); 256 or 448 = a fixed tile"}
#define CLI_OPT_ALLOW_PATHS(p)                                                                             \
    {.name = "--allow-image-paths", .group = "model", .kind = CLI_FLAG, .dst = (p),                        \
     .help = "read `images` entries that are local file paths (off: data: URLs and base64 only)"}
#define CLI_OPT_STATE_CACHE(p)                                                                             \
    {.name = "--state-cache-mb", .group = "limits", .kind = CLI_SIZE, .dst = (p), .arg = "MIB", .lo = 0, .hi = 1073741824,    \
     .help = "MiB of saved states for requests on a state already seen; 0 = off"}
#define CLI_OPT_STRICT(p)                                                                                  \
    {.name = "--strict", .kind = CLI_FLAG, .dst = (p),                                                     \
     .help = "refuse (422 StrictRefused) unknown keys, a state over --max-length and answers that would be NaN"}
#define CLI_OPT_TEXT_ONLY(p)                                                                               \
    {.name = "--text-only", .group = "model", .kind = CLI_FLAG, .dst = (p), .help = "do not load the vision tower"}
#define CLI_OPT_SPLIT(p)                                                                                   \
    {.name = "--split", .group = "model", .kind = CLI_ENUM, .dst = (p), .arg = "file|qwen2|qwen35",        \
     .choices = cli_split_choices,                                                                         \
     .help = "pre-tokenizer split: the regex tokenizer.json names, or a forced variant"}
/* Prints "clef VERB: note: ..." on stderr when the engine runs other than asked (clef_engine_note). */
struct clef_engine;
void cli_engine_note(const char *verb, const struct clef_engine *e);

/* clef_result.warnings on stderr, one "clef: warning: LINE" each (docs/errors.md "Warnings"): what
 * the answer's bytes do not say; stdout stays the answer. warnings may be NULL. */
void cli_print_warnings(const char *warnings);

/* --model --threads --device --precision --gpu, into a clef_options: every verb that runs the model. */
#define CLI_OPTS_ENGINE(o)                                                                                 \
    CLI_OPT_MODEL(&(o)->model_dir), CLI_OPT_THREADS(&(o)->threads), CLI_OPT_DEVICE(&(o)->device),          \
        CLI_OPT_PRECISION(&(o)->precision), CLI_OPT_GPU(&(o)->gpu)

/* ---- value checks (used by cli_set_value; also for values that are not options) ---- */

/* Return 1 when s is a whole number (cli_size: with an optional K/M/G suffix, powers of 1024)
 * within [lo, hi], else 0. */
int cli_int(const char *s, int lo, int hi, int *out);
int cli_size(const char *s, size_t lo, size_t hi, size_t *out);
int cli_double(const char *s, double lo, double hi, double *out);

/* ---- progress ---- */

/* A one-line progress bar on stderr, drawn only when stderr is a terminal, at most ~10 times a
 * second. */
typedef struct cli_progress {
    const char *label;
    int tty;
    double t0, last;
    int drawn;
} cli_progress;

void cli_progress_init(cli_progress *p, const char *label);
/* done/total in any unit; extra: text after the percentage (may be NULL). */
void cli_progress_draw(cli_progress *p, uint64_t done, uint64_t total, const char *extra, int force);
void cli_progress_end(cli_progress *p);
/* For clef_options.progress: ctx is a cli_progress. */
void cli_progress_cb(void *ctx, uint64_t done, uint64_t total);

#endif
