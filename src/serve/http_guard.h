/* The guard in front of libmicrohttpd (docs/reliability.md): one thread owns the listening socket,
 * accepts every connection and keeps the client's socket for the connection's whole life. At the
 * first request head that passes the strict checks below it gives libmicrohttpd one end of a
 * socketpair (MHD_add_connection, with the client's address) and relays bytes both ways (epoll,
 * non-blocking, bounded buffers, a side is not read while its peer's buffer is full). Client to
 * server it walks the framing itself: every request head is checked before it is forwarded, then
 * exactly its body (Content-Length bytes, or the chunks, each chunk-size line checked), then the
 * next head waits for the same checks and deadlines. Server to client it walks the answers (status
 * line, Content-Length) so that it knows when each ends. A head that does not pass is answered
 * here (one JSON error, Connection: close) once libmicrohttpd's answers to the requests before it
 * have gone out whole, and the connection is closed.
 *
 * Why a relay (and not MSG_PEEK, then the socket itself to libmicrohttpd, as before keep-alive):
 * once libmicrohttpd owns the socket it reads the next request head itself, unchecked; keeping the
 * socket is the only way every request on a kept-alive connection passes the same checks.
 *
 * Why in front and not inside: libmicrohttpd 0.9.75 (Debian 12) answers some malformed heads
 * itself with a broken response (a bad Content-Length value: its status line and headers written
 * twice), takes "Content-Length : 69" as an unknown header (the body then reads as the next
 * request), waits for a Transfer-Encoding it does not know until the idle timeout, and counts a
 * slow client's every byte as activity, so a client that never finishes its head holds one of
 * --max-connections for ever. None of that can be refused from its callbacks.
 *
 * Bounded here: each head's bytes (max_header, 431), its time (header_timeout_s from accept, or
 * from a later head's first byte; then 408 or closed), an idle connection between requests
 * (keepalive_timeout_s), requests per connection (keepalive_requests), the connections waiting for
 * a head, idle ones included (max_pending; and per client address client_share: a new connection
 * over either closes the oldest such connection), every chunk-size line (4096 bytes) and the
 * trailers (max_header), and garbage (a first byte that cannot start an HTTP method, e.g. a TLS
 * ClientHello, is closed at once). An idle connection holds no socketpair: libmicrohttpd's
 * --max-connections counts only connections with a request at it.
 *
 * Also here: a watch list of connections whose body is being received, each with a deadline; the
 * guard's thread shuts down the socket of any past its deadline (libmicrohttpd then closes it). */
#ifndef CLEF_SERVE_HTTP_GUARD_H
#define CLEF_SERVE_HTTP_GUARD_H

#include <stddef.h>
#include <sys/socket.h>

#include "serve/http_parse.h"

typedef struct clef_guard clef_guard;

/* What the guard found wrong with a head: the status and error type it answered with. */
typedef struct clef_guard_refusal {
    int status;            /* 0: closed without an answer (garbage, a timeout, an eviction) */
    const char *type;      /* error type ("BadRequest", "LengthRequired", ...) or the close reason */
    const char *message;   /* for the answer and the log */
    const char *method;    /* the request line's method when one was read, else NULL (not NUL-safe: use method_len) */
    size_t method_len;
    const char *client;    /* the client address as text */
    const char *id;        /* the X-Request-Id of the answer, or NULL (closed without one) */
    size_t bytes_in;       /* bytes seen */
    size_t bytes_out;      /* bytes of the answer written */
} clef_guard_refusal;

/* The defaults of --header-timeout and --keepalive-requests (clef_server_config_default), also
 * the guard's own when its config leaves them 0. */
#define CLEF_GUARD_HEADER_TIMEOUT_DEFAULT 10.0
#define CLEF_GUARD_KEEPALIVE_REQUESTS_DEFAULT 1000u

typedef struct clef_guard_config {
    int listen_fd;
    size_t max_header;        /* the head's bytes (431 over) */
    size_t max_body;          /* a Content-Length over this: 413 at once */
    double header_timeout_s;  /* from accept to a complete head (0 = CLEF_GUARD_HEADER_TIMEOUT_DEFAULT) */
    unsigned max_pending;     /* connections still sending their head */
    unsigned client_share;    /* of those, per client address */
    double keepalive_timeout_s; /* an idle connection between requests is closed after this; 0 = one request per connection */
    unsigned keepalive_requests;/* requests per connection (the server's answer to the last says close;
                                   0 = CLEF_GUARD_KEEPALIVE_REQUESTS_DEFAULT) */
    const char *cors_origin;  /* --cors-origin (NULL: none): the guard's own answers carry CORS headers too */
    /* hands a connection whose head passed to libmicrohttpd; the guard no longer owns fd */
    int (*handoff)(void *ctx, int fd, const struct sockaddr *sa, socklen_t sl);
    /* a connection the guard answered or closed (for the log and the metrics) */
    void (*refused)(void *ctx, const clef_guard_refusal *r);
    void *ctx;
} clef_guard_config;

/* Starts the guard's thread. NULL with a message in err when it cannot. */
clef_guard *clef_guard_start(const clef_guard_config *c, char *err, size_t err_len);
/* Stops accepting (closes the listening socket) and closes every connection still in its head. */
void clef_guard_quiesce(clef_guard *g);
/* Stops the thread and frees the guard (after quiesce, or alone). */
void clef_guard_stop(clef_guard *g);

/* The watch list: key identifies the watcher (a request), fd its socket. */
void clef_guard_watch(clef_guard *g, const void *key, int fd, double deadline);
void clef_guard_unwatch(clef_guard *g, const void *key);
/* Shuts down every watched socket now; returns how many. */
int clef_guard_cut_all(clef_guard *g);

/* Connections accepted so far (for /metrics). */
unsigned long clef_guard_accepted(clef_guard *g);
/* For libmicrohttpd's end mhd_fd of a relayed connection: how many requests of the client's
 * connection came before those this end carries (the guard hands a fresh socketpair over after
 * each idle time). 0 found, -1 not (the guard has let go of it). */
int clef_guard_base(clef_guard *g, int mhd_fd, unsigned *base);

/* Renders a sockaddr as text ("127.0.0.1", "::1"); "?" when it cannot. */
void clef_sockaddr_text(const struct sockaddr *sa, char *out, size_t len);

#endif
