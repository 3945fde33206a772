/* The HTTP server (see server.h and docs/serving.md): its lifecycle (start, attach, drain,
 * shutdown), the log, and routing (on_request -> route_request). Its other files:
 * server_internal.h (the request and the server), server_answer.c, server_pages.c (the GETs),
 * server_decide.c (the POST path).
 *
 * Threads: the guard (http_guard.c) accepts connections and holds each until its request head has
 * arrived and passed the strict checks, then hands it to MHD. MHD's polling threads (a pool of
 * http_threads) read bodies and write answers; the prepare pool (workq.c) runs clef_job_prepare
 * (parse, tokenize, decode images) so that /health and /metrics never wait behind it; the
 * scheduler's one worker runs clef_run_batch. A POST is suspended (MHD_suspend_connection) from
 * its complete body until it has been prepared, queued and run (or refused), and resumed by
 * whichever thread finished with it; MHD then calls the handler again, which queues the answer.
 * Keep-alive: the guard keeps the client's socket and relays it to MHD over a socketpair, checking
 * every request head on the way (http_guard.h); an answer says Connection: close (clef_srv_must_close)
 * when keep-alive is off, on the connection's last allowed request, during shutdown, when the client
 * asked for it (or is HTTP/1.0 without keep-alive), and when a body is left unread. */
#include "serve/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/err.h"
#include "serve/http_extras.h"
#include "serve/host_check.h"
#include "serve/http_guard.h"
#include "serve/log_text.h"
#include "serve/metrics.h"
#include "serve/playground.h"
#include "serve/request_id.h"
#include "serve/scheduler.h"
#include "serve/workq.h"
#include "base/json.h"
#include "serve/server_internal.h"

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int log_text; /* clef_log_set_text: the human format (log_text.h) instead of JSON */

void clef_log_set_text(int on) { atomic_store(&log_text, on); }

/* ---------- small helpers ---------- */

static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A line too long for the buffer is not cut (that would break its JSON): it says so instead. */
static void log_v(const char *level, const char *fmt, va_list ap) {
    char buf[4096];
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    if (n < 0) return;
    if ((size_t)n >= sizeof buf) n = snprintf(buf, sizeof buf, "\"event\":\"log\",\"message\":\"line too long\"");
    char text[4352];
    const int as_text = atomic_load(&log_text);
    if (as_text) clef_log_text_render(text, sizeof text, wall_now(), level, buf, (size_t)n);
    pthread_mutex_lock(&log_mu);
    if (as_text) fputs(text, stderr);
    else fprintf(stderr, "{\"ts\":%.3f,\"level\":\"%s\",%.*s}\n", wall_now(), level, n, buf);
    fflush(stderr);
    pthread_mutex_unlock(&log_mu);
}

void clef_log_line(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    log_v("info", fmt, ap);
    va_end(ap);
}

void clef_log_linel(const char *level, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    log_v(level, fmt, ap);
    va_end(ap);
}

void clef_log_fatal(const char *msg) {
    clef_buf b;
    clef_buf_init(&b);
    clef_json_render_string_utf8(&b, msg, strlen(msg));
    clef_log_linel("fatal", "\"event\":\"fatal\",\"message\":%s", b.oom ? "\"out of memory\"" : b.data);
    clef_buf_free(&b);
}

static void mhd_logger(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    /* the guard relays each connection over a socketpair: TCP options do not apply to it */
    if (!strncmp(msg, "Setting TCP_", 12) || !strncmp(msg, "Failed to push the data", 23)) return;
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r')) n--;
    clef_buf b;
    clef_buf_init(&b);
    clef_json_render_string_utf8(&b, msg, n);
    if (!b.oom) clef_log_linel("warn", "\"event\":\"http\",\"message\":%s", b.data);
    clef_buf_free(&b);
}

void clef_server_config_default(clef_server_config *c) {
    memset(c, 0, sizeof *c);
    c->host = CLEF_SERVE_HOST_DEFAULT;
    c->port = 8080;
    c->http_threads = 2;
    c->max_body = CLEF_SERVE_MAX_BODY_DEFAULT;
    c->max_header = 32u << 10;
    c->max_connections = 256;
    c->io_timeout_s = CLEF_SERVE_IO_TIMEOUT_DEFAULT;
    c->deadline_s = 60;
    c->queue_len = CLEF_SCHED_QUEUE_LEN_DEFAULT;
    c->max_tokens = 0;
    c->batch_tokens = CLEF_SCHED_BATCH_TOKENS_DEFAULT;
    c->max_batch = CLEF_SCHED_MAX_BATCH_DEFAULT;
    c->batch_wait_s = 0.05;
    c->model_id = CLEF_SERVE_MODEL_ID_DEFAULT;
    c->log_requests = 1;
    c->header_timeout_s = CLEF_GUARD_HEADER_TIMEOUT_DEFAULT;
    c->body_timeout_s = 60;
    c->max_pending = 0; /* 4 x max_connections */
    c->client_share = 64;
    c->prepare_threads = 0; /* http_threads */
    c->keepalive_timeout_s = 5;
    c->keepalive_requests = CLEF_GUARD_KEEPALIVE_REQUESTS_DEFAULT;
    c->gzip_min = 1024;
}

/* ---------- routing ---------- */

/* 1 when the comma-separated header value v holds the token tok (any case). */
static int has_token(const char *v, const char *tok) {
    size_t tl = strlen(tok);
    while (v && *v) {
        while (*v == ' ' || *v == '\t' || *v == ',') v++;
        const char *e = v;
        while (*e && *e != ',') e++;
        const char *t = e;
        while (t > v && (t[-1] == ' ' || t[-1] == '\t')) t--;
        if ((size_t)(t - v) == tl && !strncasecmp(v, tok, tl)) return 1;
        v = e;
    }
    return 0;
}

static const char *known_route(const char *url) {
    static const char *const routes[] = {ROUTE_DECIDE, "/health", "/livez", "/readyz", "/metrics", "/v1/models",
                                         "/openapi.json"};
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (!strcmp(url, routes[i])) return routes[i];
    return NULL;
}

/* Routes an orchestrator's probes call with whatever Host it likes (a pod's address). */
static int probe_route(const char *route) {
    return !strcmp(route, "/health") || !strcmp(route, "/livez") || !strcmp(route, "/readyz");
}

static int open_route(const char *route) { return probe_route(route) || !strcmp(route, "/metrics"); }

/* The request's id (the client's X-Request-Id when sane), its address, gzip and CORS. */
static void request_meta(clef_server *s, req *r) {
    struct MHD_Connection *c = r->conn;
    const char *cid = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Request-Id");
    if (clef_request_id_sane(cid)) snprintf(r->id, sizeof r->id, "%s", cid);
    else clef_request_id_new(r->id);
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    clef_sockaddr_text(ci ? ci->client_addr : NULL, r->client, sizeof r->client);
    r->gzip_ok = clef_accepts_gzip(MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT_ENCODING));
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    r->cors = clef_cors_allows(s->cfg.cors_origin, origin, origin ? strlen(origin) : 0);
}


/* Routes a request once its head is known (see on_request for when). */
static enum MHD_Result route_request(clef_server *s, req *r, const char *url, const char *method) {
    struct MHD_Connection *conn = r->conn;
    const char *route = known_route(url);
    r->route = route ? route : "other";
    int get = !strcmp(method, MHD_HTTP_METHOD_GET) || !strcmp(method, MHD_HTTP_METHOD_HEAD);
    if (!(route && probe_route(route))) { /* --allowed-hosts (host_check.h); the probes answer any Host */
        const char *host = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
        if (!clef_host_allowed(s->allowed_hosts, host))
            return clef_srv_send_error(r, 421, "MisdirectedRequest", "this server does not answer for Host %s (--allowed-hosts)",
                                       host);
    }
    if (!strcmp(method, MHD_HTTP_METHOD_OPTIONS) && s->cfg.cors_origin &&
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin"))
        return clef_srv_answer_preflight(s, r);
    const clef_asset *ui = route || s->cfg.no_ui ? NULL : clef_playground_find(url);
    /* --api-key: every route but the open ones (/health, /metrics unless --auth-all, and the
     * playground's static files, which hold no data: its requests need the key) */
    int open = !s->cfg.auth_all && (ui || (route && open_route(route)));
    if (s->cfg.api_key && !open &&
        !clef_bearer_ok(MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION),
                        s->cfg.api_key))
        return clef_srv_send_error(r, 401, "Unauthorized", "this server needs Authorization: Bearer <key> (--api-key)");
    if (ui) { /* the web playground (playground.c, web/) */
        r->route = ui->path;
        if (!get) return clef_srv_send_error(r, 405, "MethodNotAllowed", "%s takes GET, not %s", ui->path, method);
        snprintf(r->outcome, sizeof r->outcome, "ok");
        r->status = 200;
        r->bytes_out = strcmp(method, MHD_HTTP_METHOD_HEAD) ? ui->len : 0;
        atomic_store(&r->state, R_ANSWERED);
        return clef_playground_send(conn, ui, "X-Request-Id", r->id, clef_srv_must_close(r));
    }
    if (!route) return clef_srv_send_error(r, 404, "NotFound", "no route %s", url);
    if (route == known_route(ROUTE_DECIDE)) {
        if (strcmp(method, MHD_HTTP_METHOD_POST))
            return clef_srv_send_error(r, 405, "MethodNotAllowed", "%s takes POST, not %s", ROUTE_DECIDE, method);
        return clef_srv_decide_headers(s, r);
    }
    if (!get) return clef_srv_send_error(r, 405, "MethodNotAllowed", "%s takes GET, not %s", route, method);
    return clef_srv_answer_get(s, r, url);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
    clef_server *s = cls;
    req *r = *con_cls;
    if (!r) {
        r = calloc(1, sizeof *r);
        if (!r) return MHD_NO;
        r->srv = s;
        r->conn = conn;
        r->t0 = clef_now();
        r->method = method;
        clef_buf_init(&r->body);
        atomic_init(&r->state, R_NEW);
        atomic_fetch_add(&s->live, 1);
        *con_cls = r;
        request_meta(s, r);
        const union MHD_ConnectionInfo *sci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        unsigned *count = sci ? sci->socket_context : NULL, base = 0;
        /* the guard hands over a fresh socketpair after each idle time: base counts the requests before */
        r->nth = count && clef_guard_base(s->guard, conn_fd(conn), &base) == 0 ? base + ++*count : 0; /* 0: unknown: close */
        const char *cv = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONNECTION);
        r->client_close = has_token(cv, "close") || (!strcmp(version, MHD_HTTP_VERSION_1_0) && !has_token(cv, "keep-alive"));
        const char *rcl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        r->body_pending = (rcl && strtoull(rcl, NULL, 10) > 0) ||
                          MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
        /* libmicrohttpd 0.9.75 closes a connection whose answer is queued in this first call (it
         * will not read past a head it answered "early"), so a request without a body is answered
         * in the next call, which comes at once; one with a body is routed now (what it is
         * refused for here, before its body, closes the connection anyway: clef_srv_must_close) */
        if (!r->body_pending) {
            r->deferred = 1;
            return MHD_YES;
        }
        return route_request(s, r, url, method);
    }
    if (r->deferred) {
        r->deferred = 0;
        enum MHD_Result rc = route_request(s, r, url, method);
        if (atomic_load(&r->state) == R_UPLOAD) return clef_srv_decide_body(s, r); /* an empty body: complete */
        return rc;
    }
    if (!r->decide) { /* already answered (e.g. a body sent to a GET route): swallow it */
        *upload_data_size = 0;
        return MHD_YES;
    }
    return clef_srv_decide_continue(s, r, upload_data, upload_data_size);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    (void)conn;
    clef_server *s = cls;
    req *r = *con_cls;
    if (!r) return;
    *con_cls = NULL;
    if (r->job) clef_job_free(r->job);
    unwatch(r);
    uncount(r);
    if (r->status == 0 && atomic_load(&s->shutting)) atomic_fetch_add(&s->dropped, 1);
    double t_end = clef_now();
    double queue_s = r->t_queued > 0 && r->t_run > 0 ? r->t_run - r->t_queued : -1;
    const char *outcome = r->outcome[0] ? r->outcome : "closed";
    clef_metrics_request(s->metrics, r->route, r->status, outcome, r->status == 200 ? r->tokens : 0,
                         t_end - r->t0, queue_s);
    if (s->cfg.log_requests) {
        static const char *const why[] = {"ok", "error", "timeout", "shutdown", "read_error", "client_abort"};
        const char *term = (unsigned)toe < sizeof why / sizeof why[0] ? why[toe] : "other";
        /* every field from outside (method, outcome, id, address) is rendered as a JSON string */
        clef_buf m, o;
        clef_buf_init(&m);
        clef_buf_init(&o);
        const char *meth = r->method ? r->method : "?";
        clef_json_render_string_utf8(&m, meth, strlen(meth));
        clef_json_render_string_utf8(&o, outcome, strlen(outcome));
        clef_buf w; /* ,"warnings":"line\n..." when the answer came with Clef-Warning lines */
        clef_buf_init(&w);
        if (r->have_res && r->res.warnings) { /* whole lines within 1,500 bytes: the log line holds 4 KiB */
            size_t wl = strlen(r->res.warnings);
            const char *cut = wl > 1500 ? memrchr(r->res.warnings, '\n', 1500) : NULL;
            if (cut) wl = (size_t)(cut - r->res.warnings) + 1;
            clef_buf_puts(&w, ",\"warnings\":");
            clef_json_render_string_utf8(&w, r->res.warnings, wl > 1500 ? 0 : wl);
        }
        const char *level = r->status == 0 || r->status >= 500 ? "warn" : "info";
        if (!m.oom && !o.oom && !w.oom)
            clef_log_linel(level,
                           "\"event\":\"request\",\"id\":\"%s\",\"client\":\"%s\",\"method\":%s,\"path\":\"%s\","
                           "\"status\":%d,\"outcome\":%s,\"tokens\":%d,\"bytes_in\":%zu,\"bytes_out\":%zu,"
                           "\"queue_ms\":%.3f,\"compute_ms\":%.3f,\"batch\":%d,\"cached_tokens\":%zu,\"total_ms\":%.3f,"
                           "\"connection\":\"%s\",\"backend\":\"%s\"%s",
                           r->id, r->client, m.data, r->route, r->status, o.data, r->tokens, r->body_bytes,
                           r->bytes_out, queue_s >= 0 ? queue_s * 1e3 : 0.0, r->compute_s * 1e3, r->batch_n,
                           r->cached_tokens, (t_end - r->t0) * 1e3, term, s->backend[0] ? s->backend : "none",
                           w.data ? w.data : "");
        clef_buf_free(&w);
        clef_buf_free(&m);
        clef_buf_free(&o);
    }
    if (r->have_res) clef_result_free(&r->res);
    clef_buf_free(&r->body);
    free(r);
    atomic_fetch_sub(&s->live, 1);
}

/* Each MHD connection (one per client connection: the guard relays it) counts its requests. */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
    (void)cls;
    (void)conn;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        *socket_context = calloc(1, sizeof(unsigned)); /* NULL: its first answer closes it */
    } else {
        free(*socket_context);
        *socket_context = NULL;
    }
}

/* ---------- life cycle ---------- */

static int open_listener(const char *host, int port, int *out_port, char *err, size_t err_len) {
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int gr = getaddrinfo(host, ps, &hints, &res);
    if (gr != 0 || !res) {
        snprintf(err, err_len, "cannot resolve host '%s': %s", host, gai_strerror(gr));
        return -1;
    }
    int fd = socket(res->ai_family, res->ai_socktype | SOCK_CLOEXEC, res->ai_protocol);
    if (fd < 0) {
        snprintf(err, err_len, "cannot open a socket: %s", strerror(errno));
        freeaddrinfo(res);
        return -1;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, res->ai_addr, res->ai_addrlen) != 0 || listen(fd, 128) != 0) {
        snprintf(err, err_len, "cannot listen on %s:%d: %s", host, port, strerror(errno));
        close(fd);
        freeaddrinfo(res);
        return -1;
    }
    freeaddrinfo(res);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    *out_port = port;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET) *out_port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        else if (ss.ss_family == AF_INET6) *out_port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    }
    return fd;
}

/* ---------- the guard's callbacks ---------- */

static int guard_handoff(void *ctx, int fd, const struct sockaddr *sa, socklen_t sl) {
    clef_server *s = ctx;
    /* MHD closes fd whatever happens (at --max-connections too) */
    if (MHD_add_connection(s->d, fd, sa, sl) != MHD_YES) {
        char a[64];
        clef_sockaddr_text(sa, a, sizeof a);
        clef_log_linel("warn", "\"event\":\"http\",\"client\":\"%s\",\"message\":\"connection refused: over "
                               "--max-connections or out of memory\"", a);
        return -1;
    }
    return 0;
}

static void guard_refused(void *ctx, const clef_guard_refusal *g) {
    clef_server *s = ctx;
    clef_metrics_request(s->metrics, "other", g->status, g->type, 0, 0, -1);
    if (!s->cfg.log_requests) return;
    clef_buf m, t, msg;
    clef_buf_init(&m);
    clef_buf_init(&t);
    clef_buf_init(&msg);
    if (g->method) clef_json_render_string_utf8(&m, g->method, g->method_len);
    else clef_buf_puts(&m, "null");
    clef_json_render_string_utf8(&t, g->type, strlen(g->type));
    clef_json_render_string_utf8(&msg, g->message ? g->message : "", g->message ? strlen(g->message) : 0);
    if (!m.oom && !t.oom && !msg.oom)
        clef_log_linel("warn",
                       "\"event\":\"request\",\"id\":\"%s\",\"client\":\"%s\",\"method\":%s,\"path\":\"other\","
                       "\"status\":%d,\"outcome\":%s,\"message\":%s,\"bytes_in\":%zu,\"bytes_out\":%zu,\"stage\":\"head\"",
                       g->id ? g->id : "", g->client, m.data, g->status, t.data, msg.data, g->bytes_in, g->bytes_out);
    clef_buf_free(&m);
    clef_buf_free(&t);
    clef_buf_free(&msg);
}

clef_server *clef_server_start(const clef_server_config *c, char *err, size_t err_len) {
    clef_server *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    s->cfg = *c;
    if (s->cfg.http_threads < 1) s->cfg.http_threads = 1;
    if (!s->cfg.queue_len) s->cfg.queue_len = CLEF_SCHED_QUEUE_LEN_DEFAULT;
    if (!s->cfg.model_id) s->cfg.model_id = CLEF_SERVE_MODEL_ID_DEFAULT;
    snprintf(s->host, sizeof s->host, "%s", c->host ? c->host : CLEF_SERVE_HOST_DEFAULT);
    s->cfg.host = s->host;
    if (clef_host_list_check(c->allowed_hosts, err, err_len) != 0) {
        free(s);
        return NULL;
    }
    s->allowed_hosts = c->allowed_hosts;
    if (!s->allowed_hosts && clef_host_is_loopback(s->host)) { /* the default: loopback names, and the address bound */
        snprintf(s->allowed_default, sizeof s->allowed_default, "%s,%s", CLEF_LOOPBACK_HOSTS, s->host);
        s->allowed_hosts = s->allowed_default;
    }
    pthread_rwlock_init(&s->gate, NULL);
    s->metrics = clef_metrics_create();
    if (!s->metrics) {
        snprintf(err, err_len, "out of memory");
        free(s);
        return NULL;
    }
    s->listen_fd = open_listener(s->host, c->port, &s->port, err, err_len);
    if (s->listen_fd < 0) {
        clef_metrics_free(s->metrics);
        free(s);
        return NULL;
    }
    /* the guard owns the listening socket and hands MHD connections whose head passed */
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG |
                     MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC;
    if (strchr(s->host, ':')) flags |= MHD_USE_IPv6;
    s->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s,
                            MHD_OPTION_EXTERNAL_LOGGER, mhd_logger, NULL,
                            MHD_OPTION_THREAD_POOL_SIZE, (unsigned)s->cfg.http_threads,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->cfg.max_connections,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->cfg.io_timeout_s,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)s->cfg.max_header,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                            MHD_OPTION_END);
    if (!s->d) {
        snprintf(err, err_len, "cannot start the HTTP server on %s:%d (libmicrohttpd refused the options)", s->host,
                 s->port);
        close(s->listen_fd);
        clef_metrics_free(s->metrics);
        free(s);
        return NULL;
    }
    clef_guard_config gc = {.listen_fd = s->listen_fd, .max_header = s->cfg.max_header, .max_body = s->cfg.max_body,
                            .header_timeout_s = s->cfg.header_timeout_s,
                            .max_pending = s->cfg.max_pending ? s->cfg.max_pending : 4 * s->cfg.max_connections,
                            .client_share = s->cfg.client_share,
                            .keepalive_timeout_s = s->cfg.keepalive_timeout_s,
                            .keepalive_requests = s->cfg.keepalive_requests, /* 0: the guard's default */
                            .cors_origin = s->cfg.cors_origin,
                            .handoff = guard_handoff, .refused = guard_refused, .ctx = s};
    s->guard = clef_guard_start(&gc, err, err_len);
    if (!s->guard) {
        MHD_stop_daemon(s->d);
        close(s->listen_fd);
        clef_metrics_free(s->metrics);
        free(s);
        return NULL;
    }
    return s;
}

int clef_server_port(const clef_server *s) { return s->port; }

int clef_server_attach(clef_server *s, clef_engine *e) {
    clef_sched_config sc = {.batch_tokens = s->cfg.batch_tokens, .max_batch = s->cfg.max_batch,
                            .queue_len = s->cfg.queue_len, .gather_s = s->cfg.batch_wait_s};
    s->engine = e;
    snprintf(s->backend, sizeof s->backend, "%s", clef_engine_backend(e));
    s->sched = clef_sched_create(&sc, clef_srv_run_batch, clef_srv_expire_one, s);
    if (!s->sched) return -1;
    int pt = s->cfg.prepare_threads > 0 ? s->cfg.prepare_threads : s->cfg.http_threads;
    s->prep = clef_workq_create(pt, s->cfg.queue_len, clef_srv_prepare_one, s);
    if (!s->prep) {
        clef_sched_stop(s->sched);
        s->sched = NULL;
        return -1;
    }
    clef_metrics_batch_limits(s->metrics, s->cfg.batch_tokens, s->cfg.max_batch);
    atomic_store(&s->ready, 1);
    return 0;
}

void clef_server_drain(clef_server *s, double delay_s) {
    if (!s || atomic_exchange(&s->draining, 1)) return;
    clef_log_line("\"event\":\"draining\",\"drain_delay_s\":%g,\"in_flight\":%ld", delay_s,
                  (long)atomic_load(&s->live));
}

void clef_server_shutdown(clef_server *s) {
    if (!s) return;
    pthread_rwlock_wrlock(&s->gate);
    atomic_store(&s->shutting, 1);
    pthread_rwlock_unlock(&s->gate);
    clef_guard_quiesce(s->guard); /* no new connections; those still sending their head are closed */
    size_t queued = s->sched ? clef_sched_depth(s->sched) : 0;
    clef_log_line("\"event\":\"shutdown\",\"queued\":%zu,\"receiving\":%ld,\"in_flight\":%ld", queued,
                  (long)atomic_load(&s->receiving), (long)atomic_load(&s->live));
    /* One budget for the whole shutdown (--timeout): requests still being received or prepared
     * join the queue if their bodies arrive within it; what is still uploading then is cut off
     * (and counted as dropped). */
    double until = clef_now() + (s->cfg.io_timeout_s ? s->cfg.io_timeout_s : CLEF_SERVE_IO_TIMEOUT_DEFAULT);
    while (atomic_load(&s->receiving) > 0 && clef_now() < until) nanosleep(&(struct timespec){0, 2000000}, NULL);
    int cut = clef_guard_cut_all(s->guard);
    /* what is being prepared joins the queue, unless it is still preparing when the budget runs out:
     * then it stops at its next image or video (503) */
    clef_engine_stop_preparing(s->engine, until - clef_now());
    clef_workq_stop(s->prep);
    s->prep = NULL;
    pthread_rwlock_wrlock(&s->gate);
    clef_sched *sched = s->sched;
    s->sched = NULL; /* later submits are refused with 503 */
    pthread_rwlock_unlock(&s->gate);
    clef_sched_stop(sched); /* runs what is queued; every suspended connection is resumed */
    /* let the answers go out, within what is left of the budget (at least 1 s after the last batch) */
    if (until < clef_now() + 1) until = clef_now() + 1;
    while (atomic_load(&s->live) > 0 && clef_now() < until) nanosleep(&(struct timespec){0, 5000000}, NULL);
    long unanswered = (long)atomic_load(&s->live);
    MHD_stop_daemon(s->d); /* closes what is left: counted in dropped */
    clef_guard_stop(s->guard);
    clef_log_linel(atomic_load(&s->dropped) ? "warn" : "info",
                   "\"event\":\"stopped\",\"unanswered\":%ld,\"dropped\":%ld,\"cut_uploads\":%d", unanswered,
                   (long)atomic_load(&s->dropped), cut);
    clef_metrics_free(s->metrics);
    pthread_rwlock_destroy(&s->gate);
    free(s);
}
