/* The option parser, value checks and the progress bar (see cli_opts.h). */
#include "cli/cli_opts.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/knobs.h"
#include "clef.h"
#include "serve/scheduler.h"

const char *const cli_device_choices[] = {"auto", "cpu", "cuda", NULL};
const char *const cli_precision_choices[] = {"fp32", "fast", "bf16", "int8", NULL}; /* CLEF_PRECISION_* order */
const char *const cli_split_choices[] = {"file", "qwen2", "qwen35", NULL};
const char *const cli_tile_choices[] = {"0", "256", "448", NULL};
const int cli_tile_values[] = {0, 256, 448};
const char *const cli_groups[] = {"model", "device", "limits", "network", "logging", NULL};

int cli_int(const char *s, int lo, int hi, int *out) {
    if (!s || !*s) return 0;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return 0;
    *out = (int)v;
    return 1;
}

int cli_size(const char *s, size_t lo, size_t hi, size_t *out) {
    if (!s || *s < '0' || *s > '9') return 0;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s) return 0;
    unsigned long long mul = 1;
    if (*end == 'k' || *end == 'K') mul = 1ull << 10, end++;
    else if (*end == 'm' || *end == 'M') mul = 1ull << 20, end++;
    else if (*end == 'g' || *end == 'G') mul = 1ull << 30, end++;
    if (*end) return 0;
    if (v > (unsigned long long)hi / mul) return 0;
    v *= mul;
    if (v < lo || v > hi) return 0;
    *out = (size_t)v;
    return 1;
}

int cli_double(const char *s, double lo, double hi, double *out) {
    if (!s || !*s) return 0;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v) || !(v >= lo && v <= hi)) return 0;
    *out = v;
    return 1;
}

int cli_set_value(const cli_opt *o, const char *v, char *why, size_t why_len) {
    switch (o->kind) {
    case CLI_FLAG:
        *(int *)o->dst = 1;
        return 0;
    case CLI_STR:
    case CLI_FILE:
        if (!*v) {
            snprintf(why, why_len, "an empty value is not a %s", o->kind == CLI_FILE ? "file name" : "value");
            return -1;
        }
        *(const char **)o->dst = v;
        return 0;
    case CLI_INT:
        if (cli_int(v, (int)o->lo, (int)o->hi, o->dst)) return 0;
        snprintf(why, why_len, "'%s' is not an integer in [%.0f, %.0f]", v, o->lo, o->hi);
        return -1;
    case CLI_SIZE:
        if (cli_size(v, (size_t)o->lo, (size_t)o->hi, o->dst)) return 0;
        snprintf(why, why_len, "'%s' is not a whole number (optionally with K, M or G) in [%.0f, %.0f]", v, o->lo,
                 o->hi);
        return -1;
    case CLI_DOUBLE:
        if (cli_double(v, o->lo, o->hi, o->dst)) return 0;
        snprintf(why, why_len, "'%s' is not a number in [%g, %g]", v, o->lo, o->hi);
        return -1;
    case CLI_ENUM:
        for (int i = 0; o->choices[i]; i++)
            if (!strcmp(v, o->choices[i])) {
                *(int *)o->dst = o->values ? o->values[i] : i;
                return 0;
            }
        {
            int n = snprintf(why, why_len, "'%s' is not one of", v);
            for (int i = 0; o->choices[i] && n > 0 && (size_t)n < why_len; i++)
                n += snprintf(why + n, why_len - (size_t)n, "%s %s", i ? "," : "", o->choices[i]);
        }
        return -1;
    }
    snprintf(why, why_len, "internal: unknown option kind");
    return -1;
}

static int in_group(const cli_opt *o, const char *group) {
    if (!group) { /* the last heading: what no known group holds */
        for (int g = 0; cli_groups[g]; g++)
            if (o->group && !strcmp(o->group, cli_groups[g])) return 0;
        return 1;
    }
    return o->group && !strcmp(o->group, group);
}

/* A byte count with the largest of K, M, G (powers of 1024, as cli_size reads them) that divides it. */
static void format_bytes(size_t v, char *out, size_t cap) {
    static const char units[] = "GMK";
    for (int u = 0; u < 3; u++) {
        size_t unit = (size_t)1 << (10 * (3 - u));
        if (v && v % unit == 0) {
            snprintf(out, cap, "%zu%c", v / unit, units[u]);
            return;
        }
    }
    snprintf(out, cap, "%zu", v);
}

int cli_format_default(const cli_opt *o, char *out, size_t cap) {
    if (o->kind == CLI_FLAG || o->required || o->no_default || !o->dst) return 0;
    switch (o->kind) {
    case CLI_STR:
    case CLI_FILE: {
        const char *v = *(const char *const *)o->dst;
        if (!v) return 0;
        snprintf(out, cap, "%s", v);
        return 1;
    }
    case CLI_INT:
        snprintf(out, cap, "%d", *(const int *)o->dst);
        return 1;
    case CLI_SIZE:
        if (o->arg && !strcmp(o->arg, "BYTES")) format_bytes(*(const size_t *)o->dst, out, cap);
        else snprintf(out, cap, "%zu", *(const size_t *)o->dst);
        return 1;
    case CLI_DOUBLE:
        snprintf(out, cap, "%g", *(const double *)o->dst);
        return 1;
    case CLI_ENUM:
        for (int i = 0; o->choices[i]; i++)
            if ((o->values ? o->values[i] : i) == *(const int *)o->dst) {
                snprintf(out, cap, "%s", o->choices[i]);
                return 1;
            }
        return 0;
    case CLI_FLAG:
        break;
    }
    return 0;
}

/* The defaults --help shows: one slot per option, taken before argv sets anything. */
#define CLI_MAX_OPTS 128
typedef char cli_defaults[CLI_MAX_OPTS][48];

static void take_defaults(const cli_cmd *c, cli_defaults d) {
    size_t k = 0;
    for (const cli_opt *o = c->opts; o && o->name && k < CLI_MAX_OPTS; o++, k++)
        if (!cli_format_default(o, d[k], sizeof d[k])) d[k][0] = 0;
}

static void print_opt(const cli_opt *o, const char *def, FILE *f) {
    char left[96];
    char shrt[8] = "    ";
    if (o->short_name) snprintf(shrt, sizeof shrt, "-%c, ", o->short_name);
    if (o->kind == CLI_FLAG) snprintf(left, sizeof left, "%s%s", shrt, o->name);
    else snprintf(left, sizeof left, "%s%s %s", shrt, o->name, o->arg ? o->arg : "VALUE");
    fprintf(f, "  %-30s  %s", left, o->help ? o->help : "");
    if (o->required) fprintf(f, " (required)");
    else if (*def) fprintf(f, " (default %s)", def);
    if (o->env) fprintf(f, " [env %s]", o->env);
    fputc('\n', f);
}

static void print_help(const cli_cmd *c, cli_defaults defs, FILE *f) {
    fprintf(f, "usage: clef %s %s\n", c->verb, c->usage ? c->usage : "[options]");
    size_t n_groups = 0;
    while (cli_groups[n_groups]) n_groups++;
    for (size_t g = 0; g <= n_groups; g++) { /* g == n_groups: the options of no group, and --help */
        const char *group = cli_groups[g];
        int any = !group;
        for (const cli_opt *o = c->opts; !any && o && o->name; o++) any = in_group(o, group);
        if (!any) continue;
        fprintf(f, "%s:\n", group ? group : "options");
        for (const cli_opt *o = c->opts; o && o->name && o - c->opts < CLI_MAX_OPTS; o++)
            if (in_group(o, group)) print_opt(o, defs[o - c->opts], f);
    }
    fprintf(f, "  %-30s  %s\n", "-h, --help", "this help (also: clef help VERB)");
    if (c->about) fprintf(f, "%s", c->about);
}

void cli_print_help(const cli_cmd *c, FILE *f) {
    cli_defaults defs;
    take_defaults(c, defs);
    print_help(c, defs, f);
}

static const cli_opt *find_opt(const cli_cmd *c, const char *name, size_t len) {
    for (const cli_opt *o = c->opts; o && o->name; o++)
        if (strlen(o->name) == len && !strncmp(o->name, name, len)) return o;
    if (len == 2 && name[0] == '-' && name[1] != '-') /* -m: the option whose short_name it is */
        for (const cli_opt *o = c->opts; o && o->name; o++)
            if (o->short_name && o->short_name == name[1]) return o;
    return NULL;
}

int cli_parse(const cli_cmd *c, int argc, char **argv) {
    size_t n_opts = 0;
    for (const cli_opt *o = c->opts; o && o->name; o++) n_opts++;
    /* which options the command line gave (for the env mirrors and required ones) */
    unsigned char given[CLI_MAX_OPTS] = {0};
    if (n_opts > sizeof given) {
        fprintf(stderr, "clef %s: internal: too many options\n", c->verb);
        return 2;
    }
    /* --help shows the defaults as the verb set them, not as the options before it changed them */
    cli_defaults defs;
    take_defaults(c, defs);
    int n_pos = 0, only_pos = 0;
    char why[512];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (only_pos || a[0] != '-' || !strcmp(a, "-")) {
            if (n_pos >= c->max_args) {
                fprintf(stderr, "clef %s: unexpected argument '%s' (clef %s --help)\n", c->verb, a, c->verb);
                return 2;
            }
            c->args[n_pos++] = a;
            continue;
        }
        if (!strcmp(a, "--")) {
            only_pos = 1;
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            print_help(c, defs, stdout);
            return fflush(stdout) ? 1 : 0;
        }
        const char *eq = a[1] == '-' ? strchr(a, '=') : NULL;
        size_t name_len = eq ? (size_t)(eq - a) : strlen(a);
        const cli_opt *o = find_opt(c, a, name_len);
        if (!o) {
            fprintf(stderr, "clef %s: unknown option '%.*s' (clef %s --help lists them)\n", c->verb, (int)name_len, a,
                    c->verb);
            return 2;
        }
        const char *v;
        if (o->kind == CLI_FLAG) {
            if (eq) {
                fprintf(stderr, "clef %s: %s takes no value\n", c->verb, o->name);
                return 2;
            }
            v = "";
        } else if (eq) {
            v = eq + 1;
        } else if (i + 1 < argc) {
            v = argv[++i];
        } else {
            fprintf(stderr, "clef %s: %s needs a value (%s)\n", c->verb, o->name, o->arg ? o->arg : "VALUE");
            return 2;
        }
        if (cli_set_value(o, v, why, sizeof why)) {
            fprintf(stderr, "clef %s: %s: %s\n", c->verb, o->name, why);
            return 2;
        }
        given[o - c->opts] = 1;
        if (o->seen) *o->seen = 1;
    }
    for (size_t k = 0; k < n_opts; k++) {
        const cli_opt *o = &c->opts[k];
        if (given[k] || !o->env) continue;
        const char *v = clef_knob_getenv(o->env); /* CLEF_DEVICE, CLEF_PRECISION: registered knobs */
        if (!v || !*v) continue;
        if (cli_set_value(o, v, why, sizeof why)) {
            fprintf(stderr, "clef %s: %s (the environment's %s): %s\n", c->verb, o->env, o->name, why);
            return 2;
        }
        given[k] = 1;
        if (o->seen) *o->seen = 1;
    }
    for (size_t k = 0; k < n_opts; k++)
        if (c->opts[k].required && !given[k]) {
            fprintf(stderr, "clef %s: %s %s is required (clef %s --help)\n", c->verb, c->opts[k].name,
                    c->opts[k].arg ? c->opts[k].arg : "", c->verb);
            return 2;
        }
    if (n_pos < c->min_args) {
        fprintf(stderr, "clef %s: expected %s (clef %s --help)\n", c->verb, c->usage ? c->usage : "arguments", c->verb);
        return 2;
    }
    if (c->n_args) *c->n_args = n_pos;
    return CLI_CONTINUE;
}

void cli_progress_init(cli_progress *p, const char *label) {
    p->label = label;
    p->tty = isatty(2);
    p->t0 = clef_now();
    p->last = 0;
    p->drawn = 0;
}

void cli_progress_draw(cli_progress *p, uint64_t done, uint64_t total, const char *extra, int force) {
    if (!p->tty) return;
    double now = clef_now();
    if (!force && now - p->last < 0.1) return;
    p->last = now;
    double frac = total ? (double)done / (double)total : 0;
    if (frac > 1) frac = 1;
    char bar[31];
    int fill = (int)(frac * 30);
    for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '.';
    bar[30] = 0;
    fprintf(stderr, "\r%s [%s] %5.1f%%%s%s\033[K", p->label, bar, frac * 100, extra ? "  " : "", extra ? extra : "");
    fflush(stderr);
    p->drawn = 1;
}

void cli_progress_end(cli_progress *p) {
    if (p->tty && p->drawn) {
        fputc('\n', stderr);
        fflush(stderr);
    }
    p->drawn = 0;
}

void cli_progress_cb(void *ctx, uint64_t done, uint64_t total) {
    cli_progress_draw(ctx, done, total, NULL, done >= total);
}

void cli_engine_note(const char *verb, const clef_engine *e) {
    const char *n = clef_engine_note(e);
    if (n) fprintf(stderr, "clef %s: note: %s\n", verb, n);
}

void cli_print_warnings(const char *warnings) {
    for (const char *w = warnings; w && *w;) {
        const char *nl = strchr(w, '\n');
        int n = (int)(nl ? (size_t)(nl - w) : strlen(w));
        fprintf(stderr, "clef: warning: %.*s\n", n, w);
        w += n + (nl != NULL);
    }
}
