/* The guard's insides, shared by http_guard.c (the thread: accept, deadlines, start and stop, the
 * body-deadline list) and http_guard_conn.c (one connection: walk, hand-off, relay, refusals,
 * lingering close). Not part of http_guard.h's interface. */
#ifndef CLEF_SERVE_HTTP_GUARD_INTERNAL_H
#define CLEF_SERVE_HTTP_GUARD_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/socket.h>
#include <time.h>

#include "serve/handoff_table.h"
#include "serve/http_guard.h"
#include "serve/http_parse.h"

#define CHUNK_LINE_MAX CLEF_CHUNK_LINE_MAX /* nginx: a few KB, HAProxy the buffer */
/* Lingering close (nginx's lingering_close): a connection that ends while the client may still be
 * sending (a refusal from the head alone, before its body) gets its answers, then shutdown(SHUT_WR),
 * then what the client still sends is read and dropped until it closes, so that the answer is not
 * lost to a reset (a proxy that is still writing the body would answer 502 instead). Bounded like
 * nginx's lingering_time / lingering_timeout, and in bytes: */
#define LINGER_TOTAL_S 30.0          /* from the shutdown on */
#define LINGER_IDLE_S 5.0            /* without a byte from the client */
#define LINGER_MIN_BYTES (64u << 20) /* dropped at most: this or --max-body, whichever is more */
#define LINGER_STEP (256u << 10)     /* read per event, so that one fast sender does not hold the thread */
#define OUT_MAX (64u << 10) /* bytes of libmicrohttpd's answers held for a slow client */
#define PIPE_MAX 32         /* requests forwarded and not yet answered, per connection */

/* A growable buffer with a ceiling. */
typedef struct gbuf {
    char *d;
    size_t len, cap, max;
} gbuf;

typedef struct conn conn;
typedef struct side {
    conn *c;
    int m; /* 0: the client's socket, 1: libmicrohttpd's end */
} side;

enum { P_HEAD, P_LENGTH, P_CHUNKED };

struct conn {
    int fd;   /* the client */
    int mfd;  /* the guard's end of the socketpair; -1 while no request is at libmicrohttpd */
    int hfd;  /* libmicrohttpd's end of it (its number, for clef_guard_base) */
    unsigned long long hser; /* hfd's entry in the hand-off table */
    side sc, sm;
    unsigned ev_c, ev_m; /* the epoll masks now set (ev_m: 0 = not in the set) */
    struct sockaddr_storage sa;
    socklen_t sl;
    char addr[64];
    double t0;       /* the current clock: accept, the first byte of a later head, or the start of idleness */
    int head_started;/* t0 is the current head's (its deadline runs) */
    int phase;
    unsigned long long rem; /* P_LENGTH: body bytes left */
    clef_chunk_state ck;
    gbuf in;         /* from the client: in[0..fwd) walked, to libmicrohttpd; the rest not yet */
    size_t fwd;
    gbuf out;        /* to the client */
    clef_resp_state rs;
    unsigned nreq, nans; /* requests forwarded, answers walked */
    uint32_t headq;  /* bit k: the (nans+k)-th answer is to a HEAD */
    int cin_eof;     /* the client finished sending */
    int m_eof;       /* libmicrohttpd closed its end (or it broke, or its last answer said close) */
    int refusing;    /* forward nothing more; once need answers went out, answer (ref_status) and close */
    unsigned need;
    int ref_status;
    const char *ref_type;
    char ref_msg[256];
    char ref_method[33];
    size_t ref_ml;
    int ref_cors;  /* the refused head came from the --cors-origin origin */
    int closing;     /* write out, then shut down and drain */
    int draining;    /* lingering: shut down for writing, reading and dropping (t0: since when) */
    size_t drained;  /* bytes dropped while draining */
    double drain_last; /* the last byte dropped (or the shutdown) */
    size_t seen;     /* bytes of the current head seen */
    int blocked;     /* a complete head waits for the pipeline to have room */
    int dead;        /* closed: later events of the same batch skip it */
    conn *next_dead;
};

typedef struct watch {
    const void *key;
    int fd;
    double deadline;
} watch;

struct clef_guard {
    clef_guard_config cfg;
    pthread_t th;
    int ep, evfd;
    int listen_fd; /* -1 once quiesced */
    pthread_mutex_t mu; /* the watch list and the quiesce/stop flags */
    int quiesce, stop;
    int quiesced;  /* the thread has seen quiesce */
    conn **p;
    size_t np, cap;
    watch *w;
    size_t nw, wcap;
    atomic_ulong accepted;
    clef_handoff_table hand; /* libmicrohttpd's ends now relayed: fd -> base (its own lock) */
};

static inline double mono_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Waiting for a head (the first, a later one, or idle between them), or lingering after its last
 * answer: what --max-pending and --client-share count (so that refused clients that keep sending
 * hold a bounded number of sockets). A connection with a request at libmicrohttpd is not. */
static inline int pending(const conn *c) { return c->draining || (c->nans == c->nreq && c->phase == P_HEAD); }

/* http_guard_conn.c, run by the guard's thread (http_guard.c) */
/* Closes the connection (logs why when it saw bytes or answered); its memory goes at the batch's end. */
void clef_guard_conn_close(clef_guard *g, conn *c, int status, const char *why, const char *message);
/* Frees the connections closed since the last call (after each batch of events). */
void clef_guard_free_dead(void);
/* Stop forwarding: once `need` answers went out, answer with status (0: just close) and close. */
void clef_guard_refuse_at(conn *c, unsigned need, int status, const char *type, const char *msg, const char *method,
                          size_t ml);
/* Moves what can move, both ways, and decides what is next. 0: the connection was closed. */
int clef_guard_pump(clef_guard *g, conn *c, unsigned evc);

#endif
