/* The server's insides, shared by its files (not part of server.h's interface):
 *   server.c          lifecycle (start, attach, drain, shutdown), logging, routing (on_request)
 *   server_answer.c   how an answer goes out (headers, gzip, errors, keep-alive, CORS preflight)
 *   server_pages.c    the GET pages (/health, /livez, /readyz, /metrics, /v1/models, /openapi.json)
 *   server_decide.c   the POST /v1/systemone path: header checks, body, prepare, queue, forward, answer
 * A request is a `req` (one per HTTP request, the scheduler's item first); its `state` says how far
 * it got (R_*), read by whichever thread resumes its connection. */
#ifndef CLEF_SERVE_SERVER_INTERNAL_H
#define CLEF_SERVE_SERVER_INTERNAL_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include "base/buf.h"
#include "serve/host_check.h"
#include "serve/http_guard.h"
#include "serve/metrics.h"
#include "serve/request_id.h"
#include "serve/scheduler.h"
#include "serve/server.h"
#include "serve/workq.h"

#define ROUTE_DECIDE "/v1/systemone"

enum { R_NEW, R_UPLOAD, R_PREPARING, R_PREP_FAILED, R_TOO_MANY, R_QUEUED, R_RAN, R_EXPIRED, R_REJECTED, R_ANSWERED };

typedef struct req {
    clef_sched_item item; /* first: the scheduler hands this back */
    struct clef_server *srv;
    struct MHD_Connection *conn;
    char id[CLEF_REQUEST_ID_MAX + 1];
    char client[64];
    int gzip_ok, cors;  /* the client takes gzip; its Origin is the allowed one */
    int watched;        /* on the guard's body-deadline list */
    size_t bytes_out;
    const char *route;
    const char *method;
    int decide; /* POST /v1/systemone with a body to read */
    clef_buf body;
    size_t body_bytes; /* bytes received (also past the cap) */
    int too_big;
    clef_job *job;
    char state_key[CLEF_STATE_KEY_LEN + 1]; /* the routing key, once prepared ("" before) */
    int tokens;
    size_t cached_tokens; /* prompt tokens the state cache supplied */
    atomic_int state;
    int reject_status;
    clef_result res;
    int have_res;
    int status;
    char outcome[48];
    double t0, t_queued, t_run, t_ran, compute_s;
    int batch_n;
    int receiving; /* counted in srv->receiving: accepted, not yet queued or answered */
    int too_many_limit;
    unsigned nth;      /* this request's number on its connection (1 = the first) */
    int client_close;  /* the client said Connection: close, or HTTP/1.0 without keep-alive */
    int body_pending;  /* a body was announced and has not been read whole */
    int deferred;      /* no body: routed on the next call (on_request) */
    int coded_body;    /* refused for its Content-Encoding: the answer says Accept-Encoding: identity */
} req;

struct clef_server {
    clef_server_config cfg;
    struct MHD_Daemon *d;
    clef_guard *guard;
    clef_workq *prep;
    char backend[16];
    atomic_long dropped; /* requests closed without an answer once shutdown began */
    int listen_fd;
    int port;
    char host[128];
    const char *allowed_hosts; /* the Host values answered (host_check.h); NULL: any */
    char allowed_default[sizeof CLEF_LOOPBACK_HOSTS + 130]; /* on loopback: its names and the bound address */
    clef_engine *engine;
    clef_sched *sched;
    clef_metrics *metrics;
    pthread_rwlock_t gate; /* submit (read) vs. shutdown (write) */
    atomic_int ready;
    atomic_int draining; /* --drain-delay: /readyz 503, answers say Connection: close, requests still taken */
    atomic_int shutting;
    atomic_long live; /* request structs alive */
    atomic_long receiving; /* requests past their headers, not yet queued or answered */
};

/* The connection's socket (MHD's end of the guard's socketpair), -1 when unknown. */
static inline int conn_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? (int)ci->connect_fd : -1;
}

/* Off the guard's body-deadline list (clef_guard_watch), once. */
static inline void unwatch(req *r) {
    if (r->watched) {
        r->watched = 0;
        clef_guard_unwatch(r->srv->guard, r);
    }
}

/* No longer counted in srv->receiving (shutdown waits for that count), once. */
static inline void uncount(req *r) {
    if (r->receiving) {
        r->receiving = 0;
        atomic_fetch_sub(&r->srv->receiving, 1);
    }
}

/* server_answer.c */
/* Whether this answer ends its connection (then it says Connection: close and MHD closes). */
int clef_srv_must_close(const req *r);
enum MHD_Result clef_srv_send_bytes(req *r, int status, const char *ctype, const char *body, size_t len);
/* The message may quote what the client sent (a path, a Content-Type), which need not be UTF-8:
 * clef_json_render_string_utf8 keeps the body valid UTF-8 JSON all the same. */
enum MHD_Result clef_srv_send_error(req *r, int status, const char *type, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
enum MHD_Result clef_srv_send_result(req *r);
/* A CORS preflight (OPTIONS with Origin, --cors-origin set): 204 with the allowed methods and
 * headers for the allowed origin, 403 for another. */
enum MHD_Result clef_srv_answer_preflight(clef_server *s, req *r);

/* server_pages.c: a GET (or HEAD) of a known route other than ROUTE_DECIDE */
enum MHD_Result clef_srv_answer_get(clef_server *s, req *r, const char *url);

/* server_decide.c */
/* First call for a POST /v1/systemone: checks that need only the headers. */
enum MHD_Result clef_srv_decide_headers(clef_server *s, req *r);
/* The body is complete: hand it to the prepare pool (suspending the connection). */
enum MHD_Result clef_srv_decide_body(clef_server *s, req *r);
/* Every later call for the POST: a piece of body, its end, or the connection resumed with a result. */
enum MHD_Result clef_srv_decide_continue(clef_server *s, req *r, const char *upload_data, size_t *upload_data_size);
/* The prepare pool's function (workq.h), and the scheduler's run and expiry callbacks (scheduler.h). */
void clef_srv_prepare_one(void *ctx, void *item);
void clef_srv_run_batch(void *ctx, clef_sched_item **items, size_t n);
void clef_srv_expire_one(void *ctx, clef_sched_item *it);

#endif
