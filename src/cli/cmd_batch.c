/* clef batch: one request per line of IN.jsonl, one answer (response or error body) per line of
 * OUT.jsonl, in the same order, batched like the server (clef_sched_pick). Resumable: the complete
 * lines already in OUT are kept and their requests skipped, a partial last line is cut away. Each
 * line is written whole and the file is fdatasync'ed after every batch, so a crash loses at most
 * the batch being written (whose partial tail the next run cuts). docs/serving.md. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clef.h"
#include "cli/cmds.h"
#include "cli/cli_opts.h"
#include "serve/scheduler.h"

typedef struct {
    clef_job *job;   /* NULL once answered */
    clef_result res; /* valid when done */
    int done;
} entry;

static volatile sig_atomic_t stop_flag;
static void on_stop(int sig) {
    (void)sig;
    stop_flag = 1;
}

static void batch_usage(FILE *f) {
    fprintf(f,
            "usage: clef batch --model DIR [options] IN.jsonl OUT.jsonl\n"
            "  --threads N        compute threads (default: all cores)\n"
            "  --batch-tokens N   token budget of one forward (default 8192)\n"
            "  --max-batch N      most requests in one forward (default 32)\n"
            "  --state-cache-mb N MiB of saved states for requests on a state already seen (default 1024; 0: off)\n"
            "  --max-length N     the engine's token budget per request (default 16384)\n"
            "  --text-only        do not load the vision tower\n"
            "  --restart          ignore OUT's contents and start over\n"
            "Lines already complete in OUT are skipped (resume); a partial last line is removed.\n");
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

/* Counts complete lines in OUT and cuts anything after the last newline. */
static int scan_out(int fd, uint64_t *lines) {
    char buf[1 << 16];
    uint64_t n = 0;
    off_t pos = 0, last_nl_end = 0;
    for (;;) {
        ssize_t r = read(fd, buf, sizeof buf);
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (r == 0) break;
        for (ssize_t i = 0; i < r; i++)
            if (buf[i] == '\n') {
                n++;
                last_nl_end = pos + i + 1;
            }
        pos += r;
    }
    if (pos != last_nl_end && ftruncate(fd, last_nl_end) != 0) return -1;
    if (lseek(fd, last_nl_end, SEEK_SET) < 0) return -1;
    *lines = n;
    return 0;
}

static uint64_t count_lines(FILE *f) {
    char buf[1 << 16];
    uint64_t n = 0;
    size_t r;
    int last = '\n';
    while ((r = fread(buf, 1, sizeof buf, f)) > 0) {
        for (size_t i = 0; i < r; i++)
            if (buf[i] == '\n') n++;
        last = buf[r - 1];
    }
    if (last != '\n') n++;
    rewind(f);
    return n;
}

static void fmt_eta(char *out, size_t cap, double s) {
    if (!(s >= 0) || s > 360000) snprintf(out, cap, "--");
    else if (s >= 3600) snprintf(out, cap, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
    else if (s >= 60) snprintf(out, cap, "%dm%02ds", (int)(s / 60), (int)s % 60);
    else snprintf(out, cap, "%ds", (int)s);
}

int cmd_batch(int argc, char **argv) {
    clef_options o;
    clef_options_default(&o);
    size_t batch_tokens = 8192, max_batch = 32;
    const char *in_path = NULL, *out_path = NULL;
    int restart = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int ok = 1;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            batch_usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--text-only")) { o.text_only = 1; continue; }
        if (!strcmp(a, "--restart")) { restart = 1; continue; }
        if (a[0] == '-' && a[1] == '-') {
            if (!v) {
                fprintf(stderr, "clef batch: %s needs a value\n", a);
                return 2;
            }
            i++;
            if (!strcmp(a, "--model")) o.model_dir = v;
            else if (!strcmp(a, "--threads")) ok = cli_int(v, 0, 4096, &o.threads);
            else if (!strcmp(a, "--batch-tokens")) ok = cli_size(v, 1, (size_t)1 << 30, &batch_tokens);
            else if (!strcmp(a, "--max-batch")) ok = cli_size(v, 1, 512, &max_batch);
            else if (!strcmp(a, "--state-cache-mb")) ok = cli_size(v, 0, (size_t)1 << 30, &o.state_cache_mb);
            else if (!strcmp(a, "--max-length")) ok = cli_int(v, 1, 1 << 24, &o.max_length);
            else {
                fprintf(stderr, "clef batch: unknown option '%s'\n", a);
                batch_usage(stderr);
                return 2;
            }
            if (!ok) {
                fprintf(stderr, "clef batch: bad value for %s: '%s'\n", a, v);
                return 2;
            }
        } else if (!in_path) in_path = a;
        else if (!out_path) out_path = a;
        else {
            batch_usage(stderr);
            return 2;
        }
    }
    if (!o.model_dir || !in_path || !out_path) {
        batch_usage(stderr);
        return 2;
    }
    FILE *in = fopen(in_path, "rb");
    if (!in) {
        fprintf(stderr, "clef batch: cannot read %s: %s\n", in_path, strerror(errno));
        return 2;
    }
    int out = open(out_path, O_RDWR | O_CREAT | O_CLOEXEC | (restart ? O_TRUNC : 0), 0644);
    if (out < 0) {
        fprintf(stderr, "clef batch: cannot open %s: %s\n", out_path, strerror(errno));
        fclose(in);
        return 2;
    }
    uint64_t have = 0;
    if (scan_out(out, &have) != 0) {
        fprintf(stderr, "clef batch: cannot read back %s: %s\n", out_path, strerror(errno));
        fclose(in);
        close(out);
        return 2;
    }
    uint64_t total = count_lines(in);
    if (have > total) {
        fprintf(stderr, "clef batch: %s has %llu lines but %s only %llu: not its output (use --restart)\n", out_path,
                (unsigned long long)have, in_path, (unsigned long long)total);
        fclose(in);
        close(out);
        return 2;
    }

    char err[1200];
    cli_progress bar;
    cli_progress_init(&bar, "loading weights");
    o.progress = cli_progress_cb;
    o.progress_ctx = &bar;
    clef_engine *e = clef_open(&o, err, sizeof err);
    cli_progress_end(&bar);
    if (!e) {
        fprintf(stderr, "clef batch: %s\n", err);
        fclose(in);
        close(out);
        return 3;
    }
    signal(SIGINT, on_stop);
    signal(SIGTERM, on_stop);

    size_t window = max_batch * 4;
    entry *win = calloc(window, sizeof *win);
    size_t *tok = malloc(window * sizeof *tok), *idx = malloc(window * sizeof *idx), *map = malloc(window * sizeof *map);
    clef_job **jobs = malloc(window * sizeof *jobs);
    if (!win || !tok || !idx || !map || !jobs) {
        fprintf(stderr, "clef batch: out of memory\n");
        return 3;
    }
    size_t head = 0, n = 0; /* ring: win[(head + i) % window], i < n */
    char *line = NULL;
    size_t line_cap = 0;
    uint64_t lineno = 0, written = have, errors = 0, tokens = 0;
    int eof = 0, rc = 0;
    double t0 = clef_now();
    cli_progress_init(&bar, "requests");
    while (lineno < have) { /* skip what OUT already holds */
        if (getline(&line, &line_cap, in) < 0) break;
        lineno++;
    }
    for (;;) {
        while (!eof && !stop_flag && n < window) {
            ssize_t len = getline(&line, &line_cap, in);
            if (len < 0) {
                eof = 1;
                break;
            }
            lineno++;
            if (len > 0 && line[len - 1] == '\n') len--;
            entry *en = &win[(head + n) % window];
            memset(en, 0, sizeof *en);
            en->job = clef_job_prepare(e, line, (size_t)len, &en->res);
            en->done = en->job == NULL;
            n++;
        }
        /* write the answered prefix, in order */
        int wrote = 0;
        while (n && win[head].done) {
            entry *en = &win[head];
            if (en->res.error_type) errors++;
            else tokens += (uint64_t)(en->res.input_tokens > 0 ? en->res.input_tokens : 0);
            int bad = !en->res.body || write_all(out, en->res.body, en->res.body_len) != 0 || write_all(out, "\n", 1) != 0;
            clef_result_free(&en->res);
            en->done = 0;
            head = (head + 1) % window;
            n--;
            if (bad) {
                fprintf(stderr, "\nclef batch: cannot write %s: %s\n", out_path, strerror(errno));
                rc = 3;
                goto done;
            }
            written++;
            wrote = 1;
        }
        if (wrote) {
            fdatasync(out);
            double dt = clef_now() - t0;
            uint64_t run = written - have;
            char extra[160], eta[32];
            fmt_eta(eta, sizeof eta, run ? (double)(total - written) * dt / (double)run : -1);
            snprintf(extra, sizeof extra, "%llu/%llu  %.1f rec/s  %.0f tok/s  ETA %s", (unsigned long long)written,
                     (unsigned long long)total, dt > 0 ? run / dt : 0, dt > 0 ? tokens / dt : 0, eta);
            cli_progress_draw(&bar, written, total, extra, written == total);
        }
        if (stop_flag) break;
        if (n == 0 && eof) break;
        /* one forward over the pending jobs, chosen like the server chooses */
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
            entry *en = &win[(head + i) % window];
            if (!en->done) {
                map[m] = (head + i) % window;
                tok[m] = clef_job_tokens(en->job);
                m++;
            }
        }
        if (m == 0) continue;
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
done:
    cli_progress_end(&bar);
    for (size_t i = 0; i < n; i++) { /* interrupted: drop what was not written */
        entry *en = &win[(head + i) % window];
        if (en->job) clef_job_free(en->job);
        else if (en->done) clef_result_free(&en->res);
    }
    fdatasync(out);
    double dt = clef_now() - t0;
    fprintf(stderr,
            "{\"event\":\"batch\",\"written\":%llu,\"skipped\":%llu,\"total\":%llu,\"errors\":%llu,\"tokens\":%llu,"
            "\"seconds\":%.3f,\"interrupted\":%s}\n",
            (unsigned long long)(written - have), (unsigned long long)have, (unsigned long long)total,
            (unsigned long long)errors, (unsigned long long)tokens, dt, stop_flag ? "true" : "false");
    if (!rc && stop_flag) rc = 130;
    free(line);
    free(win);
    free(tok);
    free(idx);
    free(map);
    free(jobs);
    clef_close(e);
    fclose(in);
    close(out);
    return rc;
}
