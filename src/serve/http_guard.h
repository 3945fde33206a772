/* The guard in front of libmicrohttpd (docs/reliability.md): one thread owns the listening socket,
 * accepts every connection and holds it until the request head (request line + headers) has
 * arrived, reading it with MSG_PEEK so that the bytes stay in the socket for libmicrohttpd. A
 * head that passes the strict checks below is handed over (MHD_add_connection); one that does not
 * is answered here (one JSON error, Connection: close) and the connection closed.
 *
 * Why in front and not inside: libmicrohttpd 0.9.75 (Debian 12) answers some malformed heads
 * itself with a broken response (a bad Content-Length value: its status line and headers written
 * twice), takes "Content-Length : 69" as an unknown header (the body then reads as the next
 * request), waits for a Transfer-Encoding it does not know until the idle timeout, and counts a
 * slow client's every byte as activity, so a client that never finishes its head holds one of
 * --max-connections for ever. None of that can be refused from its callbacks.
 *
 * Bounded here: the head's bytes (max_header, 431), its time (header_timeout_s, then closed), the
 * connections still sending their head (max_pending; and per client address client_share: a new
 * connection over either closes the oldest such connection), and garbage (a first byte that cannot
 * start an HTTP method, e.g. a TLS ClientHello, is closed at once).
 *
 * Also here: a watch list of connections whose body is being received, each with a deadline; the
 * guard's thread shuts down the socket of any past its deadline (libmicrohttpd then closes it). */
#ifndef CLEF_SERVE_HTTP_GUARD_H
#define CLEF_SERVE_HTTP_GUARD_H

#include <stddef.h>
#include <sys/socket.h>

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

typedef struct clef_guard_config {
    int listen_fd;
    size_t max_header;        /* the head's bytes (431 over) */
    size_t max_body;          /* a Content-Length over this: 413 at once */
    double header_timeout_s;  /* from accept to a complete head */
    unsigned max_pending;     /* connections still sending their head */
    unsigned client_share;    /* of those, per client address */
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

/* The strict head check as a pure function (for the tests and the fuzzer): data[0..n) is what has
 * arrived. Returns 0: the head is complete and passes (*head_len set); 1: incomplete, wait for more;
 * -1: refuse (*status: 0 = close without an answer; else the status; *type and *msg describe it). */
int clef_guard_check_head(const char *data, size_t n, size_t max_header, size_t max_body, size_t *head_len,
                          int *status, const char **type, char *msg, size_t msg_len);

/* Renders a sockaddr as text ("127.0.0.1", "::1"); "?" when it cannot. */
void clef_sockaddr_text(const struct sockaddr *sa, char *out, size_t len);

#endif
