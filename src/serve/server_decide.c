/* The POST /v1/systemone path (server_internal.h; docs/architecture.md "One POST, socket to
 * socket", steps 4-8): the header checks (Content-Type, Content-Encoding, Content-Length against
 * --max-body), the body's collection and its deadline, the prepare pool (clef_job_prepare, the
 * token limit, the submit to the scheduler), the scheduler's run and expiry callbacks, and the
 * answer once the connection is resumed. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include "base/buf.h"
#include "base/err.h"
#include "serve/http_extras.h"
#include "serve/metrics.h"
#include "serve/server_internal.h"

typedef struct {
    int n;
} hdr_count;

static enum MHD_Result count_cl(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    (void)value;
    if (key && !strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH)) ((hdr_count *)cls)->n++;
    return MHD_YES;
}

static int json_content_type(const char *ct) {
    if (!ct) return 0;
    while (*ct == ' ' || *ct == '\t') ct++;
    size_t n = strlen("application/json");
    if (strncasecmp(ct, "application/json", n)) return 0;
    char c = ct[n];
    return c == 0 || c == ';' || c == ' ' || c == '\t';
}

static enum MHD_Result decide_checks(clef_server *s, req *r);

/* First call for a POST /v1/systemone: checks that need only the headers. A request that gets
 * past them is counted until it is queued or answered, and shutdown waits for those. */
enum MHD_Result clef_srv_decide_headers(clef_server *s, req *r) {
    /* count first, then look: shutdown either sees this request or this request sees shutdown */
    r->receiving = 1;
    atomic_fetch_add(&s->receiving, 1);
    if (atomic_load(&s->shutting)) {
        uncount(r);
        return clef_srv_send_error(r, 503, "ShuttingDown", "the server is shutting down");
    }
    if (!atomic_load(&s->ready)) {
        uncount(r);
        return clef_srv_send_error(r, 503, "NotReady", "the model is still loading");
    }
    enum MHD_Result rc = decide_checks(s, r);
    if (atomic_load(&r->state) == R_ANSWERED) uncount(r);
    return rc;
}

static enum MHD_Result decide_checks(clef_server *s, req *r) {
    struct MHD_Connection *c = r->conn;
    const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
    if (!json_content_type(ct))
        return clef_srv_send_error(r, 415, "UnsupportedMediaType", "Content-Type must be application/json, not %s",
                                   ct ? ct : "missing");
    const char *ce = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_ENCODING);
    if (!clef_identity_coding(ce)) { /* the engine would read the compressed bytes as JSON text */
        r->coded_body = 1;
        return clef_srv_send_error(r, 415, "UnsupportedMediaType",
                                   "Content-Encoding %s is not supported: send the body uncompressed (identity)", ce);
    }
    hdr_count hc = {0};
    MHD_get_connection_values(c, MHD_HEADER_KIND, count_cl, &hc);
    if (hc.n > 1) return clef_srv_send_error(r, 400, "BadRequest", "more than one Content-Length header");
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl && MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING))
        return clef_srv_send_error(r, 400, "BadRequest", "both Content-Length and Transfer-Encoding");
    if (cl) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(cl, &end, 10);
        if (errno || end == cl) return clef_srv_send_error(r, 400, "BadRequest", "bad Content-Length");
        if (v > s->cfg.max_body)
            return clef_srv_send_error(r, 413, "RequestTooLong", "body is %llu bytes; the limit is %zu bytes", v,
                                       s->cfg.max_body);
        if (clef_buf_reserve(&r->body, (size_t)v + 1) != 0)
            return clef_srv_send_error(r, 500, "OutOfMemory", "cannot hold the body");
    }
    r->decide = 1;
    atomic_store(&r->state, R_UPLOAD);
    /* the body's own deadline: a client that sends a byte now and then keeps MHD's idle timer
     * alive for ever; the guard's thread shuts the socket down at this deadline (0: none, but
     * listed all the same, so that shutdown can cut it off) */
    r->watched = 1;
    clef_guard_watch(s->guard, r, conn_fd(c), s->cfg.body_timeout_s > 0 ? clef_now() + s->cfg.body_timeout_s : 0);
    return MHD_YES;
}

/* On a prepare thread, the connection suspended: prepare, then queue (the connection stays
 * suspended until its batch ran) or resume it with what went wrong. */
void clef_srv_prepare_one(void *ctx, void *item) {
    clef_server *s = ctx;
    req *r = item;
    clef_job *job = clef_job_prepare(s->engine, r->body.data ? r->body.data : "", r->body.len, &r->res);
    clef_buf_free(&r->body);
    if (!job) {
        r->have_res = 1;
        atomic_store(&r->state, R_PREP_FAILED);
        uncount(r);
        MHD_resume_connection(r->conn);
        return;
    }
    if (clef_job_state_key(job, r->state_key, sizeof r->state_key)) r->state_key[0] = '\0';
    size_t tokens = clef_job_tokens(job);
    r->tokens = (int)tokens;
    if (s->cfg.max_tokens && tokens > s->cfg.max_tokens) {
        clef_job_free(job);
        atomic_store(&r->state, R_TOO_MANY);
        uncount(r);
        MHD_resume_connection(r->conn);
        return;
    }
    r->job = job;
    r->item.tokens = tokens;
    r->item.deadline = s->cfg.deadline_s > 0 ? clef_now() + s->cfg.deadline_s : 0;
    r->t_queued = clef_now();
    atomic_store(&r->state, R_QUEUED);
    pthread_rwlock_rdlock(&s->gate);
    /* r is the batch's once submitted: it may be answered, and freed by the connection's end, before
     * this thread runs another line, so it is uncounted first (inside the gate: a shutdown waiting for
     * the count to reach 0 cannot close the scheduler between the two) and not touched after a
     * successful submit (fuzz_http found the use after free) */
    uncount(r);
    int rc = s->sched ? clef_sched_submit(s->sched, &r->item) : -2;
    pthread_rwlock_unlock(&s->gate);
    if (s->cfg.test_submit_delay_ms) /* test hook (server.h): the batch answers first */
        nanosleep(&(struct timespec){s->cfg.test_submit_delay_ms / 1000, (long)(s->cfg.test_submit_delay_ms % 1000) * 1000000L},
                  NULL);
    if (rc != 0) {
        clef_job_free(r->job);
        r->job = NULL;
        r->reject_status = rc == -1 ? 429 : 503;
        atomic_store(&r->state, R_REJECTED);
        MHD_resume_connection(r->conn);
    }
}

/* The body is complete: hand it to the prepare pool (suspending the connection). Requests whose
 * headers came before a shutdown still run. */
enum MHD_Result clef_srv_decide_body(clef_server *s, req *r) {
    unwatch(r);
    if (r->too_big) {
        uncount(r);
        return clef_srv_send_error(r, 413, "RequestTooLong", "body is over %zu bytes; the limit is %zu bytes",
                                   s->cfg.max_body, s->cfg.max_body);
    }
    atomic_store(&r->state, R_PREPARING);
    MHD_suspend_connection(r->conn);
    int rc = s->prep ? clef_workq_push(s->prep, r) : -2;
    if (rc != 0) {
        clef_buf_free(&r->body);
        uncount(r);
        r->reject_status = rc == -1 ? 429 : 503;
        atomic_store(&r->state, R_REJECTED);
        MHD_resume_connection(r->conn);
    }
    return MHD_YES;
}

/* A body past the cap: answer 413 on the socket and close it. libmicrohttpd 0.9.75 cannot queue an
 * answer while a body is still arriving (MHD_queue_response refuses it), and reading the rest of
 * a chunked body to answer afterwards would let a client push without end; so the answer is
 * written here (MHD writes nothing during an upload) and MHD_NO makes MHD close the connection. */
static enum MHD_Result body_over_cap(clef_server *s, req *r) {
    unwatch(r);
    uncount(r);
    char body[200], head[400];
    int bl = snprintf(body, sizeof body,
                      "{\"error\":{\"type\":\"RequestTooLong\",\"message\":\"body is over %zu bytes; the limit is %zu bytes\"}}",
                      s->cfg.max_body, s->cfg.max_body);
    int hl = snprintf(head, sizeof head,
                      "HTTP/1.1 413 Content Too Large\r\nContent-Type: application/json\r\nX-Request-Id: %s\r\n"
                      "Connection: close\r\nContent-Length: %d\r\n\r\n",
                      r->id, bl);
    int fd = conn_fd(r->conn);
    if (fd >= 0 && hl > 0 && bl > 0 && (size_t)hl < sizeof head && (size_t)bl < sizeof body) {
        ssize_t w1 = send(fd, head, (size_t)hl, MSG_NOSIGNAL | MSG_DONTWAIT);
        ssize_t w2 = w1 == hl ? send(fd, body, (size_t)bl, MSG_NOSIGNAL | MSG_DONTWAIT) : 0;
        r->bytes_out = (size_t)(w2 > 0 ? w2 : 0);
        shutdown(fd, SHUT_WR);
    }
    r->status = 413;
    snprintf(r->outcome, sizeof r->outcome, "RequestTooLong");
    atomic_store(&r->state, R_ANSWERED);
    return MHD_NO;
}

/* Every later call of a POST whose headers passed: a piece of body (kept up to --max-body), the
 * body's end, or the connection resumed with what became of the request. */
enum MHD_Result clef_srv_decide_continue(clef_server *s, req *r, const char *upload_data, size_t *upload_data_size) {
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        r->body_bytes += n;
        *upload_data_size = 0;
        if (r->too_big) return MHD_NO;
        if (r->body_bytes > s->cfg.max_body || clef_buf_put(&r->body, upload_data, n) != 0) {
            r->too_big = 1;
            clef_buf_free(&r->body);
            return body_over_cap(s, r);
        }
        return MHD_YES;
    }
    switch (atomic_load(&r->state)) {
    case R_UPLOAD:
        r->body_pending = 0;
        return clef_srv_decide_body(s, r);
    case R_PREP_FAILED:
        return clef_srv_send_result(r);
    case R_TOO_MANY:
        return clef_srv_send_error(r, 413, "RequestTooLong", "request has %d tokens; this server accepts at most %zu",
                                   r->tokens, s->cfg.max_tokens);
    case R_RAN:
        r->cached_tokens = clef_job_cached_tokens(r->job);
        clef_job_finish(r->job, &r->res);
        r->job = NULL;
        r->have_res = 1;
        return clef_srv_send_result(r);
    case R_EXPIRED:
        return clef_srv_send_error(r, 503, CLEF_E_DEADLINE, "the request waited longer than %g s for the model",
                                   s->cfg.deadline_s);
    case R_REJECTED:
        if (r->reject_status == 429)
            return clef_srv_send_error(r, 429, "QueueFull", "the queue holds %zu requests; retry later", s->cfg.queue_len);
        return clef_srv_send_error(r, 503, "ShuttingDown", "the server is shutting down");
    default:
        return MHD_YES;
    }
}

/* ---------- the worker's callbacks ---------- */

void clef_srv_run_batch(void *ctx, clef_sched_item **items, size_t n) {
    clef_server *s = ctx;
    clef_job *jobs_small[64];
    clef_job **jobs = n <= 64 ? jobs_small : malloc(n * sizeof *jobs);
    double t0 = clef_now();
    size_t tokens = 0;
    if (jobs) {
        for (size_t i = 0; i < n; i++) {
            req *r = (req *)items[i];
            jobs[i] = r->job;
            r->t_run = t0;
            tokens += r->item.tokens;
        }
        clef_run_batch(s->engine, jobs, n);
    } else { /* no memory for the array: one by one */
        for (size_t i = 0; i < n; i++) {
            req *r = (req *)items[i];
            r->t_run = t0;
            tokens += r->item.tokens;
            clef_run_batch(s->engine, &r->job, 1);
        }
    }
    double t1 = clef_now();
    clef_metrics_batch(s->metrics, n, tokens, t1 - t0);
    for (size_t i = 0; i < n; i++) {
        req *r = (req *)items[i];
        r->t_ran = t1;
        r->compute_s = t1 - t0;
        r->batch_n = (int)n;
        atomic_store(&r->state, R_RAN);
        MHD_resume_connection(r->conn);
    }
    if (jobs != jobs_small) free(jobs);
}

void clef_srv_expire_one(void *ctx, clef_sched_item *it) {
    (void)ctx;
    req *r = (req *)it;
    clef_job_free(r->job);
    r->job = NULL;
    r->t_run = clef_now();
    atomic_store(&r->state, R_EXPIRED);
    MHD_resume_connection(r->conn);
}
