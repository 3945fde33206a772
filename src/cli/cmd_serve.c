/* clef serve: the HTTP server (src/serve/server.c) around one engine. docs/serving.md has the
 * flags, routes and statuses. */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cmds.h"
#include "cli/cli_opts.h"
#include "clef.h"
#include "serve/scheduler.h"
#include "serve/server.h"

static const char WARMUP[] =
    "{\"model\":\"clef-flash\",\"state\":\"warm-up\",\"questions\":{\"ready\":{\"type\":\"noul\","
    "\"instructions\":\"Is the server ready?\"}}}";

static void serve_usage(FILE *f) {
    fprintf(f,
            "usage: clef serve --model DIR [options]\n"
            "  --host ADDR            listen address (default 127.0.0.1)\n"
            "  --port N               port (default 8080; 0 = any free port, printed in the 'listening' log line)\n"
            "  --threads N            compute threads (default: all cores)\n"
            "  --http-threads N       HTTP threads, which also parse and tokenize (default 2)\n"
            "  --max-body BYTES       request body cap, 413 above (default 16M)\n"
            "  --max-header BYTES     per-connection memory for request line + headers (default 32K)\n"
            "  --max-connections N    open connections (default 256)\n"
            "  --timeout S            idle / slow-client timeout in seconds (default 30)\n"
            "  --deadline S           most seconds a request waits in the queue, 503 after (default 60; 0 = none)\n"
            "  --queue N              queued requests before 429 (default 256)\n"
            "  --max-tokens N         refuse requests over N tokens with 413 (default 0 = only the engine's budget)\n"
            "  --max-length N         the engine's token budget per request (default 16384, the reference's)\n"
            "  --batch-tokens N       token budget of one forward (default 8192)\n"
            "  --max-batch N          most requests in one forward (default 32)\n"
            "  --model-id NAME        the id /v1/models reports (default clef-flash)\n"
            "  --text-only            do not load the vision tower\n"
            "  --quiet                no per-request log lines\n"
            "  --no-ui                no web playground at / (then / is 404)\n");
}

int cmd_serve(int argc, char **argv) {
    clef_server_config sc;
    clef_server_config_default(&sc);
    clef_options o;
    clef_options_default(&o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int ok = 1;
#define NEED() do { if (!v) { fprintf(stderr, "clef serve: %s needs a value\n", a); return 2; } i++; } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            serve_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--model")) { NEED(); o.model_dir = v; }
        else if (!strcmp(a, "--host")) { NEED(); sc.host = v; }
        else if (!strcmp(a, "--port")) { NEED(); ok = cli_int(v, 0, 65535, &sc.port); }
        else if (!strcmp(a, "--threads")) { NEED(); ok = cli_int(v, 0, 4096, &o.threads); }
        else if (!strcmp(a, "--http-threads")) { NEED(); ok = cli_int(v, 1, 256, &sc.http_threads); }
        else if (!strcmp(a, "--max-body")) { NEED(); ok = cli_size(v, 1, (size_t)1 << 34, &sc.max_body); }
        else if (!strcmp(a, "--max-header")) { NEED(); ok = cli_size(v, 1024, (size_t)1 << 24, &sc.max_header); }
        else if (!strcmp(a, "--max-connections")) { NEED(); int n; ok = cli_int(v, 1, 65536, &n); sc.max_connections = (unsigned)n; }
        else if (!strcmp(a, "--timeout")) { NEED(); int n; ok = cli_int(v, 1, 86400, &n); sc.io_timeout_s = (unsigned)n; }
        else if (!strcmp(a, "--deadline")) { NEED(); ok = cli_double(v, 0, 86400, &sc.deadline_s); }
        else if (!strcmp(a, "--queue")) { NEED(); ok = cli_size(v, 1, 1 << 20, &sc.queue_len); }
        else if (!strcmp(a, "--max-tokens")) { NEED(); ok = cli_size(v, 0, (size_t)1 << 30, &sc.max_tokens); }
        else if (!strcmp(a, "--max-length")) { NEED(); ok = cli_int(v, 1, 1 << 24, &o.max_length); }
        else if (!strcmp(a, "--batch-tokens")) { NEED(); ok = cli_size(v, 1, (size_t)1 << 30, &sc.batch_tokens); }
        else if (!strcmp(a, "--max-batch")) { NEED(); ok = cli_size(v, 1, 512, &sc.max_batch); }
        else if (!strcmp(a, "--model-id")) { NEED(); sc.model_id = v; }
        else if (!strcmp(a, "--text-only")) o.text_only = 1;
        else if (!strcmp(a, "--quiet")) sc.log_requests = 0;
        else if (!strcmp(a, "--no-ui")) sc.no_ui = 1;
        else {
            fprintf(stderr, "clef serve: unknown option '%s'\n", a);
            serve_usage(stderr);
            return 2;
        }
#undef NEED
        if (!ok) {
            fprintf(stderr, "clef serve: bad value for %s: '%s'\n", a, v);
            return 2;
        }
    }
    if (!o.model_dir) {
        fprintf(stderr, "clef serve: --model DIR is required\n");
        return 2;
    }

    /* Steady memory: large buffers (bodies, decoded images) go back to the system when freed
     * instead of raising glibc's dynamic mmap threshold and staying in the heap. */
    mallopt(M_MMAP_THRESHOLD, 128 * 1024);
    mallopt(M_TRIM_THRESHOLD, 1024 * 1024);
    /* Every thread started from here on inherits this mask; the main thread waits for them. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    char err[1024];
    clef_server *srv = clef_server_start(&sc, err, sizeof err);
    if (!srv) {
        fprintf(stderr, "clef serve: %s\n", err);
        return 1;
    }
    clef_log_line("\"event\":\"listening\",\"host\":\"%s\",\"port\":%d", sc.host, clef_server_port(srv));

    /* Test hook: hold the loading phase open so tests can see the 503 NotReady answers a real
     * 18 GB load gives for tens of seconds (the tiny test model loads in milliseconds). */
    const char *hold = getenv("CLEF_SERVE_TEST_LOAD_DELAY_MS");
    if (hold) {
        long ms = strtol(hold, NULL, 10);
        if (ms > 0 && ms <= 60000) usleep((useconds_t)ms * 1000);
    }

    cli_progress bar;
    cli_progress_init(&bar, "loading weights");
    o.progress = cli_progress_cb;
    o.progress_ctx = &bar;
    double t0 = clef_now();
    clef_engine *e = clef_open(&o, err, sizeof err);
    cli_progress_end(&bar);
    if (!e) {
        clef_server_shutdown(srv);
        fprintf(stderr, "clef serve: %s\n", err);
        return 1;
    }
    double t1 = clef_now();
    clef_result wr;
    memset(&wr, 0, sizeof wr);
    int wrc = clef_decide(e, WARMUP, sizeof WARMUP - 1, &wr);
    double t2 = clef_now();
    if (wrc != 0) {
        clef_server_shutdown(srv);
        clef_close(e);
        fprintf(stderr, "clef serve: the warm-up request failed: %.*s\n", (int)wr.body_len, wr.body ? wr.body : "");
        clef_result_free(&wr);
        return 1;
    }
    clef_result_free(&wr);
    if (clef_server_attach(srv, e) != 0) {
        fprintf(stderr, "clef serve: cannot start the scheduler thread\n");
        clef_server_shutdown(srv);
        clef_close(e);
        return 1;
    }
    /* prepared_mb: the backend's own copy of the weights made at open (the CPU's AMX-packed Linear
     * weights; load_ms includes making it) */
    clef_log_line("\"event\":\"ready\",\"load_ms\":%.1f,\"warmup_ms\":%.1f,\"prepared_mb\":%.1f,"
                  "\"batch_tokens\":%zu,\"max_batch\":%zu,\"queue\":%zu",
                  (t1 - t0) * 1e3, (t2 - t1) * 1e3, (double)clef_engine_prepared_bytes(e) / 1048576.0,
                  sc.batch_tokens, sc.max_batch, sc.queue_len);

    int sig = 0;
    while (sigwait(&set, &sig) != 0) {
    }
    clef_log_line("\"event\":\"signal\",\"signal\":\"%s\"", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    clef_server_shutdown(srv);
    clef_close(e);
    return 0;
}
