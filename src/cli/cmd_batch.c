/* clef batch: one request per line of IN.jsonl (or stdin), one answer (response or error body) per
 * line of OUT.jsonl, in the same order, batched like the server (clef_sched_pick). Resumable: the
 * complete lines already in OUT are kept and their requests skipped, a partial last line is cut
 * away. Each line is written whole and the file is fdatasync'ed after every batch, so a crash loses
 * at most the batch being written (whose partial tail the next run cuts). docs/serving.md.
 *
 * Never losing input (SQLite's habits): IN is opened read-only and never written; OUT is refused
 * when it is IN (same st_dev/st_ino: paths, symlinks, hard links). One run at a time on an OUT: the
 * run holds an exclusive flock on OUT itself (not on the record, which is replaced by rename) from
 * before it reads OUT to its exit, and a second run on the same file (any name) refuses at once. A
 * record OUT.clef-batch (batch_resume.h: IN's SHA-256 and the settings that change answers, then
 * the lines, bytes and SHA-256 of OUT's prefix it vouches for; written to a temporary file unique to
 * the run, fsync'ed and renamed before OUT's first line and after every synced batch) decides a
 * resume: an OUT that is not empty is resumed only when the record's identity is this run's, OUT's
 * first bytes hash to the record's and each complete line is an answer ({"model","answers",...} or
 * {"error"}); any other OUT is refused, not taken as finished work (--restart overwrites it). At the
 * end OUT is synced and read back: its size, lines and hash must be what the run wrote, else exit 3.
 * A line over
 * --max-line bytes is not held: it gets an error line (RequestTooLong) and the run goes on. The
 * decision on OUT (fresh, restart, resume after K lines cut at byte X, refuse) is batch_resume.c's,
 * fuzzed by fuzz/fuzz_batch.c. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/json.h"
#include "clef.h"
#include "cli/batch_resume.h"
#include "cli/cmds.h"
#include "cli/cli_opts.h"
#include "serve/scheduler.h"
#include "serve/server.h" /* CLEF_SERVE_MAX_BODY_DEFAULT */

typedef struct {
    clef_job *job;   /* NULL once answered */
    clef_result res; /* valid when done */
    int done;
    uint64_t lineno; /* its line in IN */
} entry;

/* The requests answered with warnings (clef_result.warnings): a count, and the first few lines
 * kept for the summary (the progress line shows the count). */
#define WARNINGS_SHOWN 3
typedef struct {
    uint64_t requests;
    size_t shown;
    char line[WARNINGS_SHOWN][300];
} warning_tally;

static void tally_warnings(warning_tally *t, uint64_t lineno, const char *w) {
    t->requests++;
    for (const char *nl; t->shown < WARNINGS_SHOWN && (nl = strchr(w, '\n')); w = nl + 1)
        snprintf(t->line[t->shown++], sizeof t->line[0], "line %llu: %.*s", (unsigned long long)lineno,
                 (int)(nl - w), w);
}

/* A first line that is "{" or "[" alone: IN is one pretty-printed JSON document, not JSONL. */
static int looks_pretty_printed(const char *line, size_t len) {
    size_t i = 0, n = len;
    while (i < n && strchr(" \t\r", line[i])) i++;
    while (n > i && strchr(" \t\r\n", line[n - 1])) n--;
    return n - i == 1 && (line[i] == '{' || line[i] == '[');
}

static volatile sig_atomic_t stop_flag;
static void on_stop(int sig) {
    (void)sig;
    stop_flag = 1;
}

static int write_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Lines from a file descriptor with a cap on a line's length, which getline() does not have: a
 * longer line is read to its end without being kept (too_long set, len = the bytes it had). */
typedef struct {
    int fd;
    char buf[1 << 16];
    size_t pos, end;
    int eof, error;
    uint64_t offset;          /* bytes consumed so far (up to the end of the last line returned) */
} line_reader;

static void reader_init(line_reader *r, int fd) {
    memset(r, 0, sizeof *r);
    r->fd = fd;
}

/* 1: a line in *line (len bytes, without its '\n'; NUL-terminated unless too_long); 0: end of
 * input; -1: read error or out of memory (errno). */
static int reader_next(line_reader *r, char **line, size_t *cap, size_t max, size_t *len, int *too_long) {
    size_t n = 0;
    int any = 0;
    *too_long = 0;
    for (;;) {
        if (r->pos == r->end) {
            if (r->eof) break;
            ssize_t got = read(r->fd, r->buf, sizeof r->buf);
            if (got < 0) {
                if (errno == EINTR) continue;
                r->error = 1;
                return -1;
            }
            if (got == 0) {
                r->eof = 1;
                break;
            }
            r->pos = 0;
            r->end = (size_t)got;
        }
        any = 1;
        const char *p = r->buf + r->pos;
        size_t avail = r->end - r->pos;
        const char *nl = memchr(p, '\n', avail);
        size_t take = nl ? (size_t)(nl - p) : avail;
        if (!*too_long && n + take > max) *too_long = 1;
        if (!*too_long) {
            if (n + take + 1 > *cap) {
                size_t nc = *cap ? *cap : 4096;
                while (nc < n + take + 1) nc *= 2;
                char *q = realloc(*line, nc);
                if (!q) return -1;
                *line = q;
                *cap = nc;
            }
            memcpy(*line + n, p, take);
        }
        n += take;
        r->pos += take + (nl ? 1 : 0);
        r->offset += take + (nl ? 1 : 0);
        if (nl) break;
    }
    if (!any) return 0;
    if (!*too_long) (*line)[n] = '\0';
    *len = n;
    return 1;
}

/* Writes the record next to OUT: a temporary file unique to this run (pid and random, O_EXCL, never
 * a link followed), fsync, rename, fsync of the folder. */
static int write_record(const char *rec_path, const clef_buf *b) {
    char tmp[4200];
    int fd = -1;
    for (int tries = 0; fd < 0 && tries < 8; tries++) {
        uint32_t rnd = 0;
        if (getrandom(&rnd, sizeof rnd, GRND_NONBLOCK) != (ssize_t)sizeof rnd) rnd = (uint32_t)(clef_now() * 1e9);
        if (snprintf(tmp, sizeof tmp, "%s.tmp-%ld-%08x", rec_path, (long)getpid(), rnd) >= (int)sizeof tmp) {
            errno = ENAMETOOLONG;
            return -1;
        }
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0 && errno != EEXIST) return -1;
    }
    if (fd < 0) return -1;
    if (write_all(fd, b->data, b->len) != 0 || fsync(fd) != 0) {
        int e = errno;
        close(fd);
        unlink(tmp);
        errno = e;
        return -1;
    }
    close(fd);
    if (rename(tmp, rec_path) != 0) {
        int e = errno;
        unlink(tmp);
        errno = e;
        return -1;
    }
    char dir[4200];
    snprintf(dir, sizeof dir, "%s", rec_path);
    char *slash = strrchr(dir, '/');
    if (slash) *(slash == dir ? slash + 1 : slash) = '\0';
    else snprintf(dir, sizeof dir, ".");
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return 0;
}

/* The error line for a request line over --max-line. */
static int too_long_result(clef_result *res, uint64_t lineno, size_t len, size_t max) {
    char msg[200];
    snprintf(msg, sizeof msg, "line %llu is %zu bytes; the limit is %zu bytes (--max-line)", (unsigned long long)lineno,
             len, max);
    clef_buf b;
    clef_buf_init(&b);
    clef_buf_puts(&b, "{\"error\":{\"type\":\"RequestTooLong\",\"message\":");
    clef_json_render_string_utf8(&b, msg, strlen(msg));
    clef_buf_puts(&b, "}}");
    if (b.oom) {
        clef_buf_free(&b);
        return -1;
    }
    memset(res, 0, sizeof *res);
    res->body = clef_buf_take(&b, &res->body_len);
    res->error_type = "RequestTooLong";
    res->http_status = 413;
    return res->body ? 0 : -1;
}

static void fmt_eta(char *out, size_t cap, double s) {
    if (!(s >= 0) || s > 360000) snprintf(out, cap, "--");
    else if (s >= 3600) snprintf(out, cap, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
    else if (s >= 60) snprintf(out, cap, "%dm%02ds", (int)(s / 60), (int)s % 60);
    else snprintf(out, cap, "%ds", (int)s);
}

/* IN and OUT of one run. */
typedef struct {
    const char *in_path, *out_path;
    char rec_path[4200]; /* OUT.clef-batch */
    int in_fd, out, from_stdin;
    int to_stdout;  /* OUT is -: answers to stdout, no record, no lock, no resume */
    struct stat in_st, out_st;
    uint64_t total; /* IN's lines (counted as read when IN is a pipe) */
    uint64_t have;  /* complete answer lines OUT already holds (resume) */
    uint64_t have_errors; /* how many of those are error lines */
    const clef_buf *want; /* the record's identity line (batch_record_render) */
    clef_sha256 out_sha;  /* OUT's bytes so far, hashed */
    uint64_t out_bytes;   /* OUT's size as this run wrote it */
} batch_files;

/* The record vouching for OUT as it is now: `lines` answers in f->out_bytes bytes hashing to
 * f->out_sha (synced before the call). 0, or -1 (errno). */
static int save_record(const batch_files *f, uint64_t lines) {
    clef_sha256 copy = f->out_sha;
    uint8_t dg[32];
    char hex[65];
    clef_sha256_final(&copy, dg);
    clef_sha256_to_hex(dg, hex);
    clef_buf b;
    clef_buf_init(&b);
    clef_buf_put(&b, f->want->data, f->want->len);
    if (batch_state_render(&b, lines, f->out_bytes, hex) != 0 || b.oom) {
        clef_buf_free(&b);
        errno = ENOMEM;
        return -1;
    }
    int rc = write_record(f->rec_path, &b);
    int e = errno;
    clef_buf_free(&b);
    errno = e;
    return rc;
}

/* OUT synced and read back from its descriptor: its size, lines and SHA-256 must be the `lines`
 * answers this run (and the resumed prefix) wrote. 0, or -1 with the reason printed. */
static int verify_out(const batch_files *f, uint64_t lines) {
    if (fdatasync(f->out) != 0) {
        fprintf(stderr, "clef batch: cannot sync %s: %s\n", f->out_path, strerror(errno));
        return -1;
    }
    struct stat st;
    uint64_t n = 0;
    char hex[65], want_hex[65];
    clef_sha256 copy = f->out_sha;
    uint8_t dg[32];
    clef_sha256_final(&copy, dg);
    clef_sha256_to_hex(dg, want_hex);
    if (fstat(f->out, &st) != 0 || lseek(f->out, 0, SEEK_SET) < 0 || batch_count_lines(f->out, &n, hex) != 0) {
        fprintf(stderr, "clef batch: cannot read %s back: %s\n", f->out_path, strerror(errno));
        return -1;
    }
    if ((uint64_t)st.st_size != f->out_bytes || n != lines || strcmp(hex, want_hex)) {
        fprintf(stderr,
                "clef batch: %s changed under this run: it holds %llu bytes in %llu lines, the run wrote %llu bytes in "
                "%llu answer lines; rerun with --restart\n",
                f->out_path, (unsigned long long)st.st_size, (unsigned long long)n, (unsigned long long)f->out_bytes,
                (unsigned long long)lines);
        return -1;
    }
    return 0;
}

static void close_files(batch_files *f) {
    if (!f->from_stdin || f->in_fd > 0) close(f->in_fd);
    if (!f->to_stdout) close(f->out);
}

/* Step 1: IN opened read-only, OUT opened, OUT (or its record) never IN under any name. Returns 0,
 * or 2 with the reason printed and nothing left open. */
static int open_files(batch_files *f) {
    clef_sha256_init(&f->out_sha);
    f->to_stdout = !strcmp(f->out_path, "-");
    if (snprintf(f->rec_path, sizeof f->rec_path, "%s.clef-batch", f->out_path) >= (int)sizeof f->rec_path) {
        fprintf(stderr, "clef batch: %s: the name is too long\n", f->out_path);
        return 2;
    }
    const char *in_path = f->in_path, *out_path = f->out_path;
    f->from_stdin = !strcmp(in_path, "-");
    f->in_fd = f->from_stdin ? 0 : open(in_path, O_RDONLY | O_CLOEXEC);
    struct stat st2;
    if (f->in_fd < 0 || fstat(f->in_fd, &f->in_st) != 0) {
        fprintf(stderr, "clef batch: cannot read %s: %s\n", in_path, strerror(errno));
        if (f->in_fd > 0) close(f->in_fd);
        return 2;
    }
    if (S_ISDIR(f->in_st.st_mode)) {
        fprintf(stderr, "clef batch: %s is a folder, not a JSONL file\n", in_path);
        close(f->in_fd);
        return 2;
    }
    if (f->to_stdout) { /* nothing to lock, resume or vouch for: the answers go down a stream */
        f->out = 1;
        return 0;
    }
    /* OUT (or its record) being IN under any name: refused before OUT is opened, and again on the
     * opened file (a name can change in between) */
    if ((stat(out_path, &st2) == 0 && st2.st_dev == f->in_st.st_dev && st2.st_ino == f->in_st.st_ino) ||
        (stat(f->rec_path, &st2) == 0 && st2.st_dev == f->in_st.st_dev && st2.st_ino == f->in_st.st_ino)) {
        fprintf(stderr, "clef batch: %s and %s are the same file: the answers would overwrite the requests\n", in_path,
                out_path);
        if (!f->from_stdin) close(f->in_fd);
        return 2;
    }
    f->out = open(out_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (f->out < 0 || fstat(f->out, &f->out_st) != 0) {
        fprintf(stderr, "clef batch: cannot open %s: %s\n", out_path, strerror(errno));
        if (!f->from_stdin) close(f->in_fd);
        if (f->out >= 0) close(f->out);
        return 2;
    }
    if (f->out_st.st_dev == f->in_st.st_dev && f->out_st.st_ino == f->in_st.st_ino) {
        fprintf(stderr, "clef batch: %s and %s are the same file: the answers would overwrite the requests\n", in_path,
                out_path);
        close_files(f);
        return 2;
    }
    /* one run at a time on this file, whatever its name: the lock is on OUT itself, which is never
     * renamed (the record is), and goes with the run's descriptor when it exits */
    if (flock(f->out, LOCK_EX | LOCK_NB) != 0) {
        if (errno == EWOULDBLOCK)
            fprintf(stderr, "clef batch: %s is in use by another clef batch run (it holds the lock on it); nothing "
                            "was changed\n", out_path);
        else
            fprintf(stderr, "clef batch: cannot lock %s: %s\n", out_path, strerror(errno));
        close_files(f);
        return 2;
    }
    return 0;
}

/* Step 2: IN's lines and hash, the record of this run (want), then the resume decision
 * (batch_resume.c): --restart empties OUT, a non-empty OUT is resumed only when its record matches
 * and its lines are answers (f->have; a torn last line cut), and a fresh OUT gets its record first.
 * Returns 0, or 2 with the reason printed. */
static int check_out(batch_files *f, const clef_options *o, int restart, clef_buf *want, clef_buf *have_rec) {
    const char *in_path = f->in_path, *out_path = f->out_path, *rec_path = f->rec_path;
    char in_hex[65];
    if (!f->from_stdin && S_ISREG(f->in_st.st_mode)) {
        if (batch_count_lines(f->in_fd, &f->total, in_hex) != 0) {
            fprintf(stderr, "clef batch: cannot read %s: %s\n", in_path, strerror(errno));
            return 2;
        }
    } else {
        f->from_stdin = 1; /* a pipe or device: read once, hashed as it goes, no resume */
    }
    if (f->to_stdout) return 0; /* no record, no resume */
    f->want = want;
    if (batch_record_render(want, f->from_stdin ? NULL : in_hex, o->max_length, o->image_tile,
                            cli_split_choices[o->split_variant], o->text_only, o->allow_image_paths,
                            cli_precision_choices[o->precision])) {
        fprintf(stderr, "clef batch: out of memory\n");
        return 2;
    }
    if (!restart && f->out_st.st_size > 0 && batch_record_read(rec_path, have_rec) < 0) {
        fprintf(stderr, "clef batch: out of memory\n");
        return 2;
    }
    batch_resume_in in = {
        .in_path = in_path, .out_path = out_path, .rec_path = rec_path,
        .in_dev = f->in_st.st_dev, .in_ino = f->in_st.st_ino, .out_dev = f->out_st.st_dev, .out_ino = f->out_st.st_ino,
        .restart = restart, .in_is_pipe = f->from_stdin, .in_lines = f->total,
        .out_fd = f->out, .out_size = (uint64_t)f->out_st.st_size,
        .rec = have_rec->len ? have_rec->data : NULL, .rec_len = have_rec->len,
        .want = want->data, .want_len = want->len, .line_max = BATCH_OUT_LINE_MAX,
    };
    batch_decision *d = malloc(sizeof *d);
    if (!d) {
        fprintf(stderr, "clef batch: out of memory\n");
        return 2;
    }
    batch_resume_decide(&in, d);
    int rc = 0;
    if (d->action == BATCH_REFUSE) {
        fprintf(stderr, "clef batch: %s\n", d->msg);
        rc = 2;
    } else if (batch_resume_apply(f->out, d) != 0) {
        if (d->action == BATCH_RESTART) fprintf(stderr, "clef batch: cannot empty %s: %s\n", out_path, strerror(errno));
        else fprintf(stderr, "clef batch: %s: cannot cut its torn last line: %s; nothing was changed. Use --restart to "
                             "overwrite it, or another OUT\n", out_path, strerror(errno));
        rc = 2;
    } else if (d->action == BATCH_RESUME) {
        f->have = d->have;
        f->have_errors = d->errors;
        f->out_sha = d->out_sha;
        f->out_bytes = d->cut_at;
    } else if (save_record(f, 0) != 0) { /* an empty OUT vouched for, before its first line */
        fprintf(stderr, "clef batch: cannot write %s: %s\n", rec_path, strerror(errno));
        rc = 2;
    }
    free(d);
    return rc;
}

/* One forward over the window's pending jobs, chosen like the server chooses (clef_sched_pick);
 * tok, idx, map and jobs are scratch of the window's size. */
static void forward_pending(clef_engine *e, entry *win, size_t window, size_t head, size_t n, size_t *tok, size_t *idx,
                            size_t *map, clef_job **jobs, size_t batch_tokens, size_t max_batch) {
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        entry *en = &win[(head + i) % window];
        if (!en->done) {
            map[m] = (head + i) % window;
            tok[m] = clef_job_tokens(en->job);
            m++;
        }
    }
    if (m == 0) return;
    size_t k = clef_sched_pick(tok, m, batch_tokens, max_batch, idx);
    for (size_t j = 0; j < k; j++) jobs[j] = win[map[idx[j]]].job;
    clef_run_batch(e, jobs, k);
    for (size_t j = 0; j < k; j++) {
        entry *en = &win[map[idx[j]]];
        clef_job_finish(en->job, &en->res);
        en->job = NULL;
        en->done = 1;
    }
}

/* The progress line: answers written of all, rates, ETA, requests warned. */
static void draw_progress(cli_progress *bar, const batch_files *f, uint64_t written, uint64_t have, uint64_t tokens,
                          const warning_tally *warned, double t0) {
    double dt = clef_now() - t0;
    uint64_t run = written - have;
    char extra[160], eta[32];
    fmt_eta(eta, sizeof eta, run ? (double)(f->total - written) * dt / (double)run : -1);
    int at = snprintf(extra, sizeof extra, "%llu/%llu  %.1f rec/s  %.0f tok/s  ETA %s",
                      (unsigned long long)written, (unsigned long long)f->total, dt > 0 ? run / dt : 0,
                      dt > 0 ? tokens / dt : 0, eta);
    if (warned->requests && at > 0 && (size_t)at < sizeof extra)
        snprintf(extra + at, sizeof extra - (size_t)at, "  %llu warned", (unsigned long long)warned->requests);
    cli_progress_draw(bar, written, f->total, extra, written == f->total);
}

/* OUT at the end: synced (after a failure), or read back and vouched for. The exit status so far,
 * 3 when OUT is not what the run wrote or its record cannot be written. */
static int close_out(const batch_files *f, int out, int rc, uint64_t written) {
    /* never an exit 0 with fewer answers in OUT than the event line reports */
    if (f->to_stdout) {
        /* a stream: nothing to sync or read back */
    } else if (rc) {
        fdatasync(out);
    } else if (verify_out(f, written) != 0) {
        rc = 3;
    } else if (save_record(f, written) != 0) {
        fprintf(stderr, "clef batch: cannot write %s: %s\n", f->rec_path, strerror(errno));
        rc = 3;
    }
    return rc;
}

/* The warnings kept, then the closing event line. */
static void print_summary(const batch_files *f, const warning_tally *warned, uint64_t written, uint64_t have,
                          uint64_t errors, uint64_t tokens, double dt) {
    for (size_t i = 0; i < warned->shown; i++) fprintf(stderr, "clef batch: warning: %s\n", warned->line[i]);
    if (warned->requests > warned->shown)
        fprintf(stderr, "clef batch: warning: ... %llu request(s) with warnings in all\n",
                (unsigned long long)warned->requests);
    fprintf(stderr,
            "{\"event\":\"batch\",\"written\":%llu,\"skipped\":%llu,\"total\":%llu,\"errors\":%llu,\"tokens\":%llu,"
            "\"warned\":%llu,\"seconds\":%.3f,\"interrupted\":%s}\n",
            (unsigned long long)(written - have), (unsigned long long)have, (unsigned long long)f->total,
            (unsigned long long)errors, (unsigned long long)tokens, (unsigned long long)warned->requests, dt,
            stop_flag ? "true" : "false");
}

/* Writes the window's answered prefix to OUT, in order (counting errors, tokens and warnings).
 * 0, or -1 when OUT cannot be written (said on stderr). */
static int write_prefix(batch_files *f, entry *win, size_t window, size_t *head, size_t *n, warning_tally *warned,
                        uint64_t *errors, uint64_t *tokens, uint64_t *written) {
    while (*n && win[*head].done) {
        entry *en = &win[*head];
        if (en->res.warnings) tally_warnings(warned, en->lineno, en->res.warnings);
        if (en->res.error_type) (*errors)++;
        else *tokens += (uint64_t)(en->res.input_tokens > 0 ? en->res.input_tokens : 0);
        int bad = !en->res.body || write_all(f->out, en->res.body, en->res.body_len) != 0 || write_all(f->out, "\n", 1) != 0;
        if (!bad) {
            clef_sha256_update(&f->out_sha, en->res.body, en->res.body_len);
            clef_sha256_update(&f->out_sha, "\n", 1);
            f->out_bytes += (uint64_t)en->res.body_len + 1;
        }
        clef_result_free(&en->res);
        en->done = 0;
        *head = (*head + 1) % window;
        (*n)--;
        if (bad) {
            fprintf(stderr, "\nclef batch: cannot write %s: %s\n", f->out_path, strerror(errno));
            return -1;
        }
        (*written)++;
    }
    return 0;
}

/* Step 3: the requests after the ones OUT holds, through a window of max_batch * 4 lines: read and
 * prepare, write the answered prefix in order (synced), run one forward over the pending jobs as the
 * server picks them; until IN ends or a signal. Prints the closing event line. Returns 0, 3 (a read,
 * write or memory failure) or 130 (interrupted). */
static int run_requests(clef_engine *e, batch_files *f, size_t batch_tokens, size_t max_batch, size_t max_line,
                        int allow_errors) {
    const char *in_path = f->in_path, *out_path = f->out_path;
    const int out = f->out, from_stdin = f->from_stdin;
    const uint64_t have = f->have;
    size_t window = max_batch * 4;
    entry *win = calloc(window, sizeof *win);
    size_t *tok = malloc(window * sizeof *tok), *idx = malloc(window * sizeof *idx), *map = malloc(window * sizeof *map);
    clef_job **jobs = malloc(window * sizeof *jobs);
    line_reader *rd = malloc(sizeof *rd);
    if (!win || !tok || !idx || !map || !jobs || !rd) {
        fprintf(stderr, "clef batch: out of memory\n");
        free(win), free(tok), free(idx), free(map), free(jobs), free(rd);
        return 3;
    }
    reader_init(rd, f->in_fd);
    size_t head = 0, n = 0; /* ring: win[(head + i) % window], i < n */
    char *line = NULL;
    size_t line_cap = 0, len = 0;
    uint64_t lineno = 0, written = have, errors = f->have_errors, tokens = 0; /* errors: OUT's, kept ones too */
    int eof = 0, too_long = 0, rc = 0;
    double t0 = clef_now();
    warning_tally warned = {0};
    cli_progress bar;
    cli_progress_init(&bar, "requests");
    while (lineno < have) { /* skip what OUT already holds */
        int got = reader_next(rd, &line, &line_cap, 0, &len, &too_long);
        if (got <= 0) break;
        lineno++;
    }
    for (;;) {
        while (!eof && !stop_flag && n < window) {
            int got = reader_next(rd, &line, &line_cap, max_line, &len, &too_long);
            if (got < 0) {
                fprintf(stderr, "\nclef batch: cannot read %s: %s\n", in_path, strerror(errno));
                rc = 3;
                goto done;
            }
            if (got == 0) {
                eof = 1;
                break;
            }
            lineno++;
            if (lineno == 1 && !too_long && looks_pretty_printed(line, len)) {
                fprintf(stderr, "clef batch: %s: line 1 is \"%c\" alone: this looks like one pretty-printed JSON "
                        "document, but clef batch reads JSONL (one request per line). Write one request per line "
                        "(e.g. jq -c . %s > requests.jsonl), or answer a single request with clef decide --request %s\n",
                        in_path, line[strspn(line, " \t\r")], in_path, in_path);
                rc = 2;
                goto done;
            }
            if (from_stdin) f->total = lineno;
            entry *en = &win[(head + n) % window];
            memset(en, 0, sizeof *en);
            en->lineno = lineno;
            if (too_long) {
                if (too_long_result(&en->res, lineno, len, max_line)) {
                    fprintf(stderr, "\nclef batch: out of memory\n");
                    rc = 3;
                    goto done;
                }
                en->job = NULL;
            } else {
                en->job = clef_job_prepare(e, line, len, &en->res);
            }
            en->done = en->job == NULL;
            n++;
        }
        /* write the answered prefix, in order */
        uint64_t before = written;
        if (write_prefix(f, win, window, &head, &n, &warned, &errors, &tokens, &written) != 0) {
            rc = 3;
            goto done;
        }
        int wrote = written != before;
        if (wrote) {
            if (!f->to_stdout && (fdatasync(out) != 0 || save_record(f, written) != 0)) { /* the answers durable, then vouched for */
                fprintf(stderr, "\nclef batch: cannot sync %s or write its record: %s\n", out_path, strerror(errno));
                rc = 3;
                goto done;
            }
            draw_progress(&bar, f, written, have, tokens, &warned, t0);
        }
        if (stop_flag) break;
        if (n == 0 && eof) break;
        forward_pending(e, win, window, head, n, tok, idx, map, jobs, batch_tokens, max_batch);
    }
done:
    cli_progress_end(&bar);
    for (size_t i = 0; i < n; i++) { /* interrupted: drop what was not written */
        entry *en = &win[(head + i) % window];
        if (en->job) clef_job_free(en->job);
        else if (en->done) clef_result_free(&en->res);
    }
    rc = close_out(f, out, rc, written);
    print_summary(f, &warned, written, have, errors, tokens, clef_now() - t0);
    if (!rc && stop_flag) rc = 130;
    if (!rc && errors && !allow_errors) {
        fprintf(stderr, "clef batch: %llu of the %llu answer lines in %s are errors (exit 1; --allow-errors: exit 0)\n",
                (unsigned long long)errors, (unsigned long long)written, f->to_stdout ? "stdout" : out_path);
        rc = 1;
    }
    free(line);
    free(win);
    free(tok);
    free(idx);
    free(map);
    free(jobs);
    free(rd);
    return rc;
}

int cmd_batch(int argc, char **argv) {
    clef_options o;
    clef_options_default(&o);
    /* serve's defaults: the same forward sizing, and a line as long as serve's --max-body */
    size_t batch_tokens = CLEF_SCHED_BATCH_TOKENS_DEFAULT, max_batch = CLEF_SCHED_MAX_BATCH_DEFAULT;
    size_t max_line = CLEF_SERVE_MAX_BODY_DEFAULT;
    const char *paths[2] = {NULL, NULL};
    int restart = 0, allow_errors = 0, n_paths = 0;
    const cli_opt opts[] = {
        CLI_OPTS_ENGINE(&o),
        {.name = "--batch-tokens", .kind = CLI_SIZE, .dst = &batch_tokens, .arg = "N", .lo = 1, .hi = 1073741824,
         .help = "token budget of one forward"},
        {.name = "--max-batch", .kind = CLI_SIZE, .dst = &max_batch, .arg = "N", .lo = 1, .hi = 512,
         .help = "most requests in one forward"},
        CLI_OPT_STATE_CACHE(&o.state_cache_mb),
        CLI_OPT_MAX_LENGTH(&o.max_length),
        {.name = "--max-line", .kind = CLI_SIZE, .dst = &max_line, .arg = "BYTES", .lo = 1024, .hi = 1073741824,
         .help = "longest request line (as serve's --max-body); a longer one gets a RequestTooLong error line"},
        CLI_OPT_SPLIT(&o.split_variant),
        CLI_OPT_TILE(&o.image_tile),
        CLI_OPT_ALLOW_PATHS(&o.allow_image_paths),
        CLI_OPT_TEXT_ONLY(&o.text_only),
        CLI_OPT_STRICT(&o.strict),
        {.name = "--restart", .kind = CLI_FLAG, .dst = &restart,
         .help = "discard OUT's contents (never IN's) and start over"},
        {.name = "--allow-errors", .kind = CLI_FLAG, .dst = &allow_errors,
         .help = "exit 0 even when OUT holds error lines (else exit 1)"},
        CLI_OPT_END,
    };
    const cli_cmd cmd = {
        .verb = "batch", .usage = "--model DIR [options] IN.jsonl|- OUT.jsonl|-", .opts = opts,
        .args = paths, .n_args = &n_paths, .min_args = 2, .max_args = 2,
        .about = "One answer line per request line, in order. The lines of OUT that OUT.clef-batch vouches for\n"
                 "(the same IN and settings, OUT's first bytes unchanged) are kept and their requests skipped\n"
                 "(resume); what follows them is removed and answered again. One run at a time per OUT (it is\n"
                 "locked; a second run refuses, exit 2). IN = - reads stdin (no resume). OUT may not be IN.\n"
                 "OUT = - writes the answers to stdout (no record, no lock, no resume). Exit 1 when OUT holds\n"
                 "error lines (the kept ones of a resume count), unless --allow-errors.\n"};
    int st = cli_parse(&cmd, argc, argv);
    if (st != CLI_CONTINUE) return st;

    batch_files f;
    memset(&f, 0, sizeof f);
    f.in_path = paths[0];
    f.out_path = paths[1];
    if (open_files(&f)) return 2; /* 1 */
    int rc = 2;
    clef_engine *e = NULL;
    clef_buf want, have_rec;
    clef_buf_init(&want);
    clef_buf_init(&have_rec);
    if (check_out(&f, &o, restart, &want, &have_rec)) goto early; /* 2 */

    char err[1200];
    cli_progress bar;
    cli_progress_init(&bar, "loading weights");
    o.progress = cli_progress_cb;
    o.progress_ctx = &bar;
    e = clef_open(&o, err, sizeof err);
    cli_progress_end(&bar);
    if (!e) {
        fprintf(stderr, "clef batch: %s\n", err);
        rc = 3;
        goto early;
    }
    cli_engine_note("batch", e);
    signal(SIGINT, on_stop);
    signal(SIGTERM, on_stop);
    rc = run_requests(e, &f, batch_tokens, max_batch, max_line, allow_errors); /* 3 */
early:
    if (e) clef_close(e);
    clef_buf_free(&want);
    clef_buf_free(&have_rec);
    close_files(&f);
    return rc;
}
