/* clef serve: the HTTP server (src/serve/server.c) around one engine. docs/serving.md has the
 * flags, routes and statuses. */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cmds.h"
#include "base/bufpool.h"
#include "base/question_type.h"
#include "cli/cli_opts.h"
#include "clef.h"
#include "serve/host_check.h"
#include "serve/scheduler.h"
#include "serve/server.h"

/* The warm-up request: one yes/no question (its type's name from base/question_type.h). */
#define WARMUP_FMT                                                                                                     \
    "{\"model\":\"clef-flash\",\"state\":\"warm-up\",\"questions\":{\"ready\":{\"type\":\"%s\","                    \
    "\"instructions\":\"Is the server ready?\"}}}"

/* --api-key-file: the first line, without its newline; 1 when it holds a key. */
static int read_key_file(const char *path, char *out, size_t cap) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int ok = fgets(out, (int)cap, f) != NULL;
    fclose(f);
    if (!ok) return 0;
    out[strcspn(out, "\r\n")] = 0;
    return out[0] != 0;
}

/* Signals: blocked in every thread; one thread waits for them. While the model loads (phase 0)
 * a signal ends the process at once (the load cannot be interrupted: a slow disk or a FIFO named
 * tokenizer.json would hold it for ever), with a log line and exit code 128 + the signal; once
 * serving, it starts the graceful shutdown on the main thread. */
static sigset_t sig_set;
static atomic_int sig_phase;
static atomic_int sig_got;
static sem_t sig_sem;

static void *signal_main(void *arg) {
    (void)arg;
    for (;;) { /* every signal: the first starts the stop, a second cuts --drain-delay short */
        int sig = 0;
        if (sigwait(&sig_set, &sig) != 0) continue;
        const char *name = sig == SIGTERM ? "SIGTERM" : "SIGINT";
        if (atomic_load(&sig_phase) == 0) {
            clef_log_linel("warn", "\"event\":\"signal\",\"signal\":\"%s\",\"phase\":\"loading\",\"exit\":%d", name,
                           128 + sig);
            _exit(128 + sig);
        }
        atomic_store(&sig_got, sig);
        sem_post(&sig_sem);
    }
    return NULL;
}

/* Waits until `until` (CLOCK_REALTIME, sem_timedwait's clock) or the next signal. 1: a signal came. */
static int wait_or_signal(double seconds) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double t = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9 + seconds;
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    for (;;) {
        if (sem_timedwait(&sig_sem, &ts) == 0) return 1;
        if (errno == ETIMEDOUT) return 0;
    }
}

/* What the command line asked for: the server's config, the engine's options, and the flags that
 * become either. */
typedef struct serve_args {
    clef_server_config sc;
    clef_options o;
    int max_connections, timeout, quiet;
    int max_pending, client_share, ka_requests;
    double batch_wait_ms, drain_delay;
    size_t request_pool, pixel_budget;
    const char *key_file;
    int log_format;
} serve_args;

/* The flags (docs/cli.md has the same table) into a; CLI_CONTINUE, or the exit status. */
static int serve_parse(int argc, char **argv, serve_args *a) {
    clef_server_config_default(&a->sc);
    clef_options_default(&a->o);
    a->max_connections = (int)a->sc.max_connections, a->timeout = (int)a->sc.io_timeout_s, a->quiet = 0;
    a->max_pending = 0, a->client_share = (int)a->sc.client_share, a->ka_requests = (int)a->sc.keepalive_requests;
    a->batch_wait_ms = a->sc.batch_wait_s * 1e3, a->drain_delay = 0;
    a->request_pool = (size_t)256 << 20, a->pixel_budget = (size_t)64 << 20;
    a->key_file = NULL;
    a->log_format = 0;
    static const char *const log_format_choices[] = {"auto", "text", "json", NULL};
    /* one line per flag, in the order of the old usage text (docs/cli.md has the same table) */
    const cli_opt opts[] = {
        CLI_OPT_MODEL(&a->o.model_dir),
        {.name = "--host", .env = "CLEF_HOST", .group = "network", .kind = CLI_STR, .dst = &a->sc.host, .arg = "ADDR", .help = "listen address"},
        {.name = "--port", .short_name = 'p', .env = "CLEF_PORT", .group = "network", .kind = CLI_INT, .dst = &a->sc.port, .arg = "N", .lo = 0, .hi = 65535,
         .help = "port; 0 = any free port, printed in the 'listening' log line"},
        CLI_OPT_THREADS(&a->o.threads),
        CLI_OPT_DEVICE(&a->o.device),
        CLI_OPT_PRECISION(&a->o.precision),
        CLI_OPT_GPU(&a->o.gpu),
        {.name = "--http-threads", .group = "device", .kind = CLI_INT, .dst = &a->sc.http_threads, .arg = "N", .lo = 1, .hi = 256,
         .help = "HTTP threads: bodies in, answers out (--prepare-threads tokenize)"},
        {.name = "--max-body", .group = "limits", .kind = CLI_SIZE, .dst = &a->sc.max_body, .arg = "BYTES", .lo = 1, .hi = 17179869184.0,
         .help = "request body cap, 413 above"},
        {.name = "--max-header", .group = "limits", .kind = CLI_SIZE, .dst = &a->sc.max_header, .arg = "BYTES", .lo = 1024, .hi = 16777216,
         .help = "per-connection memory for the request line and headers"},
        {.name = "--max-connections", .group = "limits", .kind = CLI_INT, .dst = &a->max_connections, .arg = "N", .lo = 1, .hi = 65536,
         .help = "open connections"},
        {.name = "--timeout", .group = "limits", .kind = CLI_INT, .dst = &a->timeout, .arg = "SECONDS", .lo = 1, .hi = 86400,
         .help = "idle / slow-client timeout in seconds"},
        {.name = "--deadline", .group = "limits", .kind = CLI_DOUBLE, .dst = &a->sc.deadline_s, .arg = "SECONDS", .lo = 0, .hi = 86400,
         .help = "most seconds a request waits in the queue, 503 after; 0 = none"},
        {.name = "--queue", .group = "limits", .kind = CLI_SIZE, .dst = &a->sc.queue_len, .arg = "N", .lo = 1, .hi = 1048576,
         .help = "queued requests before 429"},
        {.name = "--max-tokens", .group = "limits", .kind = CLI_SIZE, .dst = &a->sc.max_tokens, .arg = "N", .lo = 0, .hi = 1073741824,
         .help = "refuse requests over N tokens with 413; 0 = only the engine's budget"},
        CLI_OPT_MAX_LENGTH(&a->o.max_length),
        {.name = "--batch-tokens", .group = "limits", .kind = CLI_SIZE, .dst = &a->sc.batch_tokens, .arg = "N", .lo = 1, .hi = 1073741824,
         .help = "token budget of one forward"},
        {.name = "--max-batch", .group = "limits", .kind = CLI_SIZE, .dst = &a->sc.max_batch, .arg = "N", .lo = 1, .hi = 512,
         .help = "most requests in one forward"},
        {.name = "--batch-wait-ms", .group = "limits", .kind = CLI_DOUBLE, .dst = &a->batch_wait_ms, .arg = "MS", .lo = 0, .hi = 10000,
         .help = "a forward not full waits for more requests up to MS, and up to 3% of the previous forward; 0 = never"},
        {.name = "--model-id", .group = "model", .kind = CLI_STR, .dst = &a->sc.model_id, .arg = "NAME",
         .help = "the id /v1/models reports"},
        CLI_OPT_TILE(&a->o.image_tile),
        CLI_OPT_TEXT_ONLY(&a->o.text_only),
        CLI_OPT_STRICT(&a->o.strict),
        CLI_OPT_STATE_CACHE(&a->o.state_cache_mb),
        {.name = "--request-pool", .group = "limits", .kind = CLI_SIZE, .dst = &a->request_pool, .arg = "BYTES", .lo = 0,
         .hi = 1099511627776.0,
         .help = "memory kept for reuse by images' pixel arrays (flat RSS under load); 0 = none"},
        {.name = "--pixel-budget", .group = "limits", .kind = CLI_SIZE, .dst = &a->pixel_budget, .arg = "BYTES", .lo = 0,
         .hi = 1099511627776.0,
         .help = "images' pixel arrays held at once; past it a request with images waits (up to --deadline, then 503); 0 = none"},
        {.name = "--log-format", .group = "logging", .kind = CLI_ENUM, .dst = &a->log_format, .arg = "auto|text|json",
         .choices = log_format_choices,
         .help = "log lines for people (text) or machines (json, one object a line); auto = text on a terminal"},
        {.name = "--quiet", .group = "logging", .kind = CLI_FLAG, .dst = &a->quiet, .help = "no per-request log lines"},
        {.name = "--no-ui", .group = "network", .kind = CLI_FLAG, .dst = &a->sc.no_ui, .help = "no web playground at / (then / is 404)"},
        /* hostile clients and access (docs/reliability.md, docs/serving.md) */
        {.name = "--header-timeout", .group = "limits", .kind = CLI_DOUBLE, .dst = &a->sc.header_timeout_s, .arg = "SECONDS", .lo = 0.1,
         .hi = 3600, .help = "from connect to a complete request head, else closed"},
        {.name = "--body-timeout", .group = "limits", .kind = CLI_DOUBLE, .dst = &a->sc.body_timeout_s, .arg = "SECONDS", .lo = 0,
         .hi = 86400, .help = "from the head to a complete body, else closed; 0 = none"},
        {.name = "--max-pending", .group = "limits", .kind = CLI_INT, .dst = &a->max_pending, .arg = "N", .lo = 0, .hi = 1048576,
         .help = "connections still sending their request head; 0 = 4 x --max-connections"},
        {.name = "--client-share", .group = "limits", .kind = CLI_INT, .dst = &a->client_share, .arg = "N", .lo = 1, .hi = 1048576,
         .help = "of those, per client address; a new one closes that address's oldest"},
        {.name = "--keepalive-timeout", .group = "limits", .kind = CLI_DOUBLE, .dst = &a->sc.keepalive_timeout_s, .arg = "SECONDS", .lo = 0,
         .hi = 3600, .help = "an idle connection between requests is closed after this; 0 = one request per connection"},
        {.name = "--keepalive-requests", .group = "limits", .kind = CLI_INT, .dst = &a->ka_requests, .arg = "N", .lo = 1, .hi = 1048576,
         .help = "requests per connection; the answer to the last says Connection: close"},
        {.name = "--drain-delay", .group = "network", .kind = CLI_DOUBLE, .dst = &a->drain_delay, .arg = "SECONDS", .lo = 0, .hi = 3600,
         .help = "on SIGTERM, /readyz turns 503 while requests are still answered this long, then the listener closes"},
        {.name = "--prepare-threads", .group = "device", .kind = CLI_INT, .dst = &a->sc.prepare_threads, .arg = "N", .lo = 0, .hi = 256,
         .help = "threads that parse, tokenize and decode images; 0 = --http-threads"},
        {.name = "--api-key", .env = "CLEF_API_KEY", .group = "network", .kind = CLI_STR, .dst = &a->sc.api_key, .arg = "KEY",
         .help = "require Authorization: Bearer KEY (401 without); see --auth-all"},
        {.name = "--api-key-file", .group = "network", .kind = CLI_STR, .dst = &a->key_file, .arg = "PATH",
         .help = "the same, the key read from the file's first line"},
        {.name = "--auth-all", .group = "network", .kind = CLI_FLAG, .dst = &a->sc.auth_all,
         .help = "/health and /metrics need the key too (default: open)"},
        {.name = "--cors-origin", .group = "network", .kind = CLI_STR, .dst = &a->sc.cors_origin, .arg = "ORIGIN",
         .help = "answer CORS preflights and add CORS headers for ORIGIN (or *); default off"},
        {.name = "--allowed-hosts", .group = "network", .kind = CLI_STR, .dst = &a->sc.allowed_hosts, .arg = "LIST",
         .help = "Host values answered, else 421: names, addresses, .domain, * (default: loopback names when --host is loopback, else any)"},
        {.name = "--gzip-min", .group = "network", .kind = CLI_SIZE, .dst = &a->sc.gzip_min, .arg = "BYTES", .lo = 0, .hi = 17179869184.0,
         .help = "gzip answers of at least BYTES when the client accepts gzip; 0 = never"},
        CLI_OPT_END,
    };
    const cli_cmd cmd = {.verb = "serve", .usage = "--model DIR [options]", .opts = opts,
                         .about = "Routes, statuses and the log format: docs/serving.md.\n"};
    int st = cli_parse(&cmd, argc, argv);
    if (st != CLI_CONTINUE) return st;
    clef_log_set_text(a->log_format == 1 || (a->log_format == 0 && isatty(2)));
    a->sc.max_connections = (unsigned)a->max_connections;
    a->sc.io_timeout_s = (unsigned)a->timeout;
    if (a->quiet) a->sc.log_requests = 0;
    a->sc.max_pending = (unsigned)a->max_pending;
    a->sc.client_share = (unsigned)a->client_share;
    a->sc.batch_wait_s = a->batch_wait_ms * 1e-3;
    a->sc.keepalive_requests = (unsigned)a->ka_requests;
    const char *sd = getenv("CLEF_SERVE_TEST_SUBMIT_DELAY_MS"); /* test hook: server.h */
    if (sd) {
        long ms = strtol(sd, NULL, 10);
        if (ms > 0 && ms <= 10000) a->sc.test_submit_delay_ms = (unsigned)ms;
    }
    return CLI_CONTINUE;
}

/* The flags' values checked together: the key file read, the key, the origin and the host list
 * well formed. 0, or the exit status (2). */
static int serve_check(serve_args *a) {
    static char key_buf[512];
    char err[1024];
    if (a->key_file) {
        if (!read_key_file(a->key_file, key_buf, sizeof key_buf)) {
            fprintf(stderr, "clef serve: --api-key-file %s: no key read (a missing file, or an empty first line)\n",
                    a->key_file);
            return 2;
        }
        a->sc.api_key = key_buf;
    }
    if ((a->sc.api_key && !a->sc.api_key[0]) || (a->sc.cors_origin && !a->sc.cors_origin[0])) {
        fprintf(stderr, "clef serve: --api-key and --cors-origin take a non-empty value\n");
        return 2;
    }
    if (clef_host_list_check(a->sc.allowed_hosts, err, sizeof err) != 0) {
        fprintf(stderr, "clef serve: %s\n", err);
        return 2;
    }
    for (const char *ch = a->sc.cors_origin; ch && *ch; ch++)
        if ((unsigned char)*ch <= 0x20 || (unsigned char)*ch >= 0x7f) { /* it goes into a response header as it is */
            fprintf(stderr, "clef serve: --cors-origin takes an origin (\"https://host[:port]\") or \"*\": no spaces or control characters\n");
            return 2;
        }
    return 0;
}

/* Steady memory, and the signal thread (started before any other, so that every thread inherits
 * the blocked mask). 0, or 1 when the thread could not start. */
static int serve_signals(void) {
    /* Steady memory: large buffers (bodies, decoded images) go back to the system when freed
     * instead of raising glibc's dynamic mmap threshold and staying in the heap. */
    mallopt(M_MMAP_THRESHOLD, 128 * 1024);
    mallopt(M_TRIM_THRESHOLD, 1024 * 1024);
    /* Every thread started from here on inherits this mask; the main thread waits for them. */
    sigemptyset(&sig_set);
    sigaddset(&sig_set, SIGTERM);
    sigaddset(&sig_set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sig_set, NULL);
    signal(SIGPIPE, SIG_IGN);
    sem_init(&sig_sem, 0, 0);
    pthread_t sig_th;
    if (pthread_create(&sig_th, NULL, signal_main, NULL) != 0) {
        clef_log_fatal("clef serve: cannot start the signal thread");
        return 1;
    }
    pthread_detach(sig_th);
    return 0;
}

/* The model folder checked, then the listener up (answering 503 NotReady while the model loads). */
static clef_server *serve_listen(serve_args *a) {
    char err[1024];
    /* a model folder that is not there: one line, before anything listens */
    char cfg_path[4096];
    snprintf(cfg_path, sizeof cfg_path, "%s/config.json", a->o.model_dir);
    if (access(cfg_path, R_OK) != 0) {
        char line[8400];
        snprintf(line, sizeof line, "clef serve: cannot open the model folder %s: %s (%s)", a->o.model_dir,
                 strerror(errno), cfg_path);
        clef_log_fatal(line);
        return NULL;
    }
    clef_server *srv = clef_server_start(&a->sc, err, sizeof err);
    if (!srv) {
        char line[1100];
        snprintf(line, sizeof line, "clef serve: %s", err);
        clef_log_fatal(line);
        return NULL;
    }
    clef_log_line("\"event\":\"listening\",\"host\":\"%s\",\"port\":%d", a->sc.host, clef_server_port(srv));
    return srv;
}

int cmd_serve(int argc, char **argv) {
    char err[1024];
    serve_args a;
    int st = serve_parse(argc, argv, &a);
    if (st != CLI_CONTINUE) return st;
    st = serve_check(&a);
    if (st) return st;
    if (serve_signals() != 0) return 1;
    clef_server *srv = serve_listen(&a);
    if (!srv) return 1;

    /* Test hook: hold the loading phase open so tests can see the 503 NotReady answers a real
     * 18 GB load gives for tens of seconds (the tiny test model loads in milliseconds). */
    const char *hold = getenv("CLEF_SERVE_TEST_LOAD_DELAY_MS");
    if (hold) {
        long ms = strtol(hold, NULL, 10);
        if (ms > 0 && ms <= 60000) usleep((useconds_t)ms * 1000);
    }

    cli_progress bar;
    cli_progress_init(&bar, "loading weights");
    a.o.progress = cli_progress_cb;
    a.o.progress_ctx = &bar;
    double t0 = clef_now();
    clef_engine *e = clef_open(&a.o, err, sizeof err);
    cli_progress_end(&bar);
    if (!e) {
        char line[1100];
        snprintf(line, sizeof line, "clef serve: %s", err);
        clef_log_fatal(line);
        clef_server_shutdown(srv);
        return 1;
    }
    double t1 = clef_now();
    clef_result wr;
    memset(&wr, 0, sizeof wr);
    char warmup[sizeof WARMUP_FMT + 32];
    int wn = snprintf(warmup, sizeof warmup, WARMUP_FMT, clef_qtype_name(CLEF_Q_NOUL));
    int wrc = clef_decide(e, warmup, (size_t)wn, &wr);
    double t2 = clef_now();
    if (wrc != 0) {
        char line[1100];
        snprintf(line, sizeof line, "clef serve: the warm-up request failed: %.*s", (int)wr.body_len,
                 wr.body ? wr.body : "");
        clef_log_fatal(line);
        clef_server_shutdown(srv);
        clef_close(e);
        clef_result_free(&wr);
        return 1;
    }
    clef_result_free(&wr);
    /* Images' pixel arrays from a pool that keeps them (base/bufpool.h), under the pixel budget
     * (admission: a request with images waits while the arrays in use reach it; the pool commits
     * min(budget, cap) at its first array). --request-pool 0 keeps none, but still counts them for
     * the budget. Without a pool (both 0, or no memory for it) they are plain allocations. */
    clef_bufpool *pool = a.request_pool || a.pixel_budget ? clef_bufpool_create(a.request_pool, CLEF_BUFPOOL_REQUEST_MIN) : NULL;
    clef_bufpool_set_budget(pool, a.pixel_budget, a.sc.deadline_s);
    clef_bufpool_set_process(pool);
    if (clef_server_attach(srv, e) != 0) {
        clef_log_fatal("clef serve: cannot start the scheduler and prepare threads");
        clef_server_shutdown(srv);
        clef_close(e);
        clef_bufpool_set_process(NULL);
        clef_bufpool_destroy(pool);
        return 1;
    }
    clef_cache_info ci; /* the state cache's bound as the engine applies it (0: off) */
    clef_engine_cache_info(e, &ci);
    /* prepared_mb: the backend's own copy of the weights made at open (the CPU's AMX-packed Linear
     * weights; load_ms includes making it) */
    /* note: where the engine runs other than asked (clef_engine_note: a static line, no quotes) */
    const char *note = clef_engine_note(e);
    clef_log_line("\"event\":\"ready\",\"load_ms\":%.1f,\"warmup_ms\":%.1f,\"prepared_mb\":%.1f,"
                  "\"batch_tokens\":%zu,\"max_batch\":%zu,\"queue\":%zu,\"backend\":\"%s\",\"state_cache_mb\":%zu%s%s%s",
                  (t1 - t0) * 1e3, (t2 - t1) * 1e3, (double)clef_engine_prepared_bytes(e) / 1048576.0,
                  a.sc.batch_tokens, a.sc.max_batch, a.sc.queue_len, clef_engine_backend(e), ci.limit >> 20,
                  note ? ",\"note\":\"" : "", note ? note : "", note ? "\"" : "");

    atomic_store(&sig_phase, 1);
    while (sem_wait(&sig_sem) != 0) {
    }
    int sig = atomic_load(&sig_got);
    clef_log_line("\"event\":\"signal\",\"signal\":\"%s\"", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    if (a.drain_delay > 0) { /* a balancer sees /readyz fail and stops sending; what it still sends is answered */
        clef_server_drain(srv, a.drain_delay);
        if (wait_or_signal(a.drain_delay))
            clef_log_line("\"event\":\"signal\",\"signal\":\"%s\",\"message\":\"the drain delay is cut short\"",
                          atomic_load(&sig_got) == SIGTERM ? "SIGTERM" : "SIGINT");
    }
    clef_server_shutdown(srv);
    clef_close(e);
    clef_bufpool_set_process(NULL);
    clef_bufpool_destroy(pool);
    return 0;
}
