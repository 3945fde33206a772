/* The guard in front of libmicrohttpd (see http_guard.h for what and why). */
#include "serve/http_guard.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/json.h"
#include "serve/handoff_table.h"
#include "serve/http_extras.h"
#include "serve/request_id.h"

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

static double mono_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void clef_sockaddr_text(const struct sockaddr *sa, char *out, size_t len) {
    if (!len) return;
    snprintf(out, len, "?");
    if (!sa) return;
    if (sa->sa_family == AF_INET) inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, out, (socklen_t)len);
    else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
        if (IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr)) inet_ntop(AF_INET, &s6->sin6_addr.s6_addr[12], out, (socklen_t)len);
        else inet_ntop(AF_INET6, &s6->sin6_addr, out, (socklen_t)len);
    }
}

/* ---------- the thread ---------- */

static int gb_reserve(gbuf *b, size_t need, int past_max) {
    if (b->cap >= need) return 0;
    if (!past_max && need > b->max) return -1;
    size_t nc = b->cap ? b->cap : 4096;
    while (nc < need) nc *= 2;
    if (!past_max && nc > b->max) nc = b->max;
    char *d = realloc(b->d, nc);
    if (!d) return -1;
    b->d = d;
    b->cap = nc;
    return 0;
}

static void gb_drop(gbuf *b, size_t k) {
    memmove(b->d, b->d + k, b->len - k);
    b->len -= k;
}

static unsigned max_requests(const clef_guard *g) {
    if (g->cfg.keepalive_timeout_s <= 0) return 1;
    return g->cfg.keepalive_requests ? g->cfg.keepalive_requests : 1000;
}

/* Waiting for a head (the first, a later one, or idle between them), or lingering after its last
 * answer: what --max-pending and --client-share count (so that refused clients that keep sending
 * hold a bounded number of sockets). A connection with a request at libmicrohttpd is not. */
static int pending(const conn *c) { return c->draining || (c->nans == c->nreq && c->phase == P_HEAD); }

static size_t find(clef_guard *g, const conn *c) {
    for (size_t i = 0; i < g->np; i++)
        if (g->p[i] == c) return i;
    return (size_t)-1;
}

static size_t linger_max(const clef_guard *g) {
    return g->cfg.max_body > LINGER_MIN_BYTES ? g->cfg.max_body : LINGER_MIN_BYTES;
}

static conn *g_dead; /* only the guard's thread touches it: freed after each batch of events */

int clef_guard_base(clef_guard *g, int mhd_fd, unsigned *base) {
    return g ? clef_handoff_base(&g->hand, mhd_fd, base) : -1;
}

static void drop_mfd(clef_guard *g, conn *c) {
    if (c->mfd < 0) return;
    if (c->hfd >= 0) clef_handoff_del(&g->hand, c->hfd, c->hser); /* a no-op once the number is reused */
    c->hfd = -1;
    if (c->ev_m) epoll_ctl(g->ep, EPOLL_CTL_DEL, c->mfd, NULL);
    close(c->mfd);
    c->mfd = -1;
    c->ev_m = 0;
}

/* Closes the connection (logs why when it saw bytes or answered); its memory goes at the batch's end. */
static void conn_close(clef_guard *g, conn *c, int status, const char *why, const char *message) {
    if (why && g->cfg.refused && (c->seen || status)) {
        clef_guard_refusal r = {.status = status, .type = why, .message = message, .client = c->addr,
                                .bytes_in = c->seen};
        g->cfg.refused(g->cfg.ctx, &r);
    }
    size_t i = find(g, c);
    if (i != (size_t)-1) g->p[i] = g->p[--g->np];
    epoll_ctl(g->ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    drop_mfd(g, c);
    free(c->in.d);
    free(c->out.d);
    c->in.d = c->out.d = NULL;
    c->fd = -1;
    c->dead = 1;
    c->next_dead = g_dead;
    g_dead = c;
}

static void free_dead(void) {
    while (g_dead) {
        conn *c = g_dead;
        g_dead = c->next_dead;
        free(c);
    }
}

/* Appends one JSON error answer (Connection: close) to the connection's output and logs it. */
static void queue_answer(clef_guard *g, conn *c, int status, const char *type, const char *message,
                         const char *method, size_t method_len) {
    static const struct { int st; const char *reason; } reasons[] = {
        {400, "Bad Request"}, {408, "Request Timeout"}, {411, "Length Required"}, {413, "Content Too Large"},
        {431, "Request Header Fields Too Large"}, {501, "Not Implemented"}, {505, "HTTP Version Not Supported"}};
    const char *reason = "Error";
    for (size_t k = 0; k < sizeof reasons / sizeof reasons[0]; k++)
        if (reasons[k].st == status) reason = reasons[k].reason;
    char id[33];
    clef_request_id_new(id);
    clef_buf body, out;
    clef_buf_init(&body);
    clef_buf_init(&out);
    clef_buf_puts(&body, "{\"error\":{\"type\":");
    clef_json_render_string_utf8(&body, type, strlen(type));
    clef_buf_puts(&body, ",\"message\":");
    clef_json_render_string_utf8(&body, message, strlen(message));
    clef_buf_puts(&body, "}}");
    clef_buf_printf(&out, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nX-Request-Id: %s\r\nConnection: close\r\n",
                    status, reason, id);
    if (c->ref_cors) /* as the server's own answers (server.c): a browser shows the error, not a CORS failure */
        clef_buf_printf(&out, "Access-Control-Allow-Origin: %s\r\nAccess-Control-Expose-Headers: " CLEF_CORS_EXPOSE
                              "\r\nVary: Origin\r\n", g->cfg.cors_origin);
    clef_buf_printf(&out, "Content-Length: %zu\r\n\r\n", body.len);
    clef_buf_put(&out, body.data, body.len);
    size_t queued = 0; /* the body's bytes, as the server logs its own answers' */
    if (!out.oom && !body.oom && gb_reserve(&c->out, c->out.len + out.len, 1) == 0) {
        memcpy(c->out.d + c->out.len, out.data, out.len);
        c->out.len += out.len;
        queued = body.len;
    }
    clef_buf_free(&body);
    clef_buf_free(&out);
    if (g->cfg.refused) {
        clef_guard_refusal r = {.status = status, .type = type, .message = message, .method = method,
                                .method_len = method_len, .client = c->addr, .id = id, .bytes_in = c->seen,
                                .bytes_out = queued};
        g->cfg.refused(g->cfg.ctx, &r);
    }
}

/* Stop forwarding: once `need` answers went out, answer with status (0: just close) and close. */
static void refuse_at(conn *c, unsigned need, int status, const char *type, const char *msg, const char *method,
                      size_t ml) {
    c->refusing = 1;
    c->need = need;
    c->ref_status = status;
    c->ref_type = type;
    snprintf(c->ref_msg, sizeof c->ref_msg, "%s", msg ? msg : "");
    if (ml > 32) ml = 32;
    if (method) memcpy(c->ref_method, method, ml);
    c->ref_method[ml] = 0;
    c->ref_ml = method ? ml : 0;
    c->ref_cors = 0;
}

/* A fresh socketpair for the request just walked (the first, or the first after an idle time):
 * an idle connection holds none of libmicrohttpd's --max-connections. */
static int handoff(clef_guard *g, conn *c) {
    int sp[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sp) != 0) return -1;
    if (clef_handoff_add(&g->hand, sp[1], c->nreq - 1, &c->hser) != 0) {
        close(sp[0]);
        close(sp[1]);
        return -1;
    }
    c->mfd = sp[0];
    c->hfd = sp[1];
    c->ev_m = 0;
    /* libmicrohttpd takes sp[1] (and closes it, whatever happens); it sees the client's address */
    if (g->cfg.handoff(g->cfg.ctx, sp[1], (struct sockaddr *)&c->sa, c->sl) != 0) {
        drop_mfd(g, c);
        return -1;
    }
    return 0;
}

/* Walks what arrived from the client: heads checked, bodies framed, in[0..fwd) grows. 0: closed. */
static int walk(clef_guard *g, conn *c, double now) {
    while (!c->refusing && !c->closing && !c->draining) {
        size_t avail = c->in.len - c->fwd;
        const char *p = avail ? c->in.d + c->fwd : NULL; /* in.d is NULL while the connection idles */
        if (c->phase == P_LENGTH) {
            size_t k = (unsigned long long)avail < c->rem ? avail : (size_t)c->rem;
            c->fwd += k;
            c->rem -= k;
            if (c->rem) break; /* everything received is forwarded */
            c->phase = P_HEAD;
            continue;
        }
        if (c->phase == P_CHUNKED) {
            if (!avail) break;
            size_t used = 0;
            char msg[256];
            int rc = clef_guard_chunk_walk(&c->ck, p, avail, g->cfg.max_header, &used, msg, sizeof msg);
            if (rc < 0) { /* the request at libmicrohttpd will not complete: it is closed after the answers before it */
                refuse_at(c, c->nreq - 1, 400, "BadRequest", msg, NULL, 0);
                break;
            }
            c->fwd += used;
            if (rc == 1) {
                c->phase = P_HEAD;
                continue;
            }
            break; /* the walker wants more (an unfinished line stays unconsumed) */
        }
        /* P_HEAD */
        c->blocked = 0;
        if (!avail) break;
        if (!c->head_started) {
            c->head_started = 1;
            c->t0 = now;
            c->seen = 0;
        }
        if (avail > c->seen) c->seen = avail;
        if (g->quiesced || c->m_eof || c->nreq >= max_requests(g)) break; /* not forwarded: the connection closes after its answers */
        if (c->nreq - c->nans >= PIPE_MAX) {
            c->blocked = 1;
            break;
        }
        size_t hl = 0;
        int status = 0;
        const char *type = NULL;
        char msg[256];
        int rc = clef_guard_check_head(p, avail, g->cfg.max_header, g->cfg.max_body, &hl, &status, &type, msg,
                                       sizeof msg);
        if (rc == 1) {
            if (c->cin_eof)
                refuse_at(c, c->nreq, 0, "client_closed", "the client closed its side before its request head was complete",
                          NULL, 0);
            break;
        }
        size_t ml = clef_http_method_len(p, avail);
        if (rc < 0) {
            refuse_at(c, c->nreq, status, type, msg, status ? p : NULL, ml);
            c->ref_cors = status && clef_guard_head_origin(p, avail < g->cfg.max_header ? avail : g->cfg.max_header,
                                                           g->cfg.cors_origin);
            break;
        }
        unsigned long long cl = 0;
        int kind = clef_guard_head_body(p, hl, &cl);
        if (ml == 4 && !strncasecmp(p, "HEAD", 4)) c->headq |= 1u << (c->nreq - c->nans);
        c->fwd += hl;
        c->nreq++;
        c->head_started = 0;
        c->seen = 0;
        c->phase = kind == 2 ? P_CHUNKED : kind == 1 && cl ? P_LENGTH : P_HEAD;
        c->rem = cl;
        memset(&c->ck, 0, sizeof c->ck);
        if (c->mfd < 0 && (c->m_eof || handoff(g, c) != 0)) {
            conn_close(g, c, 0, NULL, NULL); /* the server logged a refused hand-over */
            return 0;
        }
    }
    /* within a body, everything walkable is walked; after the client's end no more comes, so the
     * request can never complete (else libmicrohttpd would hold it to the body deadline) */
    if (c->phase != P_HEAD && c->cin_eof && !c->refusing && !c->closing && !c->draining)
        refuse_at(c, c->nreq - 1, 0, "client_closed", "the client closed within a body", NULL, 0);
    return 1;
}

static void set_masks(clef_guard *g, conn *c) {
    unsigned want = 0;
    if (c->draining) want = EPOLLIN;
    else {
        if (!c->cin_eof && !c->refusing && !c->closing && c->in.len < c->in.max) want |= EPOLLIN;
        if (c->out.len) want |= EPOLLOUT;
    }
    if (want != c->ev_c) {
        struct epoll_event ev = {.events = want, .data.ptr = &c->sc};
        epoll_ctl(g->ep, EPOLL_CTL_MOD, c->fd, &ev);
        c->ev_c = want;
    }
    if (c->mfd < 0) return;
    unsigned wm = (c->out.len < c->out.max ? EPOLLIN : 0) | (c->fwd ? EPOLLOUT : 0);
    if (wm == c->ev_m) return;
    struct epoll_event ev = {.events = wm, .data.ptr = &c->sm};
    if (!wm) epoll_ctl(g->ep, EPOLL_CTL_DEL, c->mfd, NULL); /* not even HUP: nothing to do with it until out drains */
    else epoll_ctl(g->ep, c->ev_m ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, c->mfd, &ev);
    c->ev_m = wm;
}

/* Moves what can move, both ways, and decides what is next. 0: the connection was closed. */
static int pump(clef_guard *g, conn *c, unsigned evc) {
    double now = mono_now();
    if (c->draining) {
        static char sink[64u << 10]; /* only the guard's thread runs pump */
        size_t step = 0;
        for (;;) {
            ssize_t r = recv(c->fd, sink, sizeof sink, MSG_DONTWAIT);
            if (r > 0) {
                c->drained += (size_t)r;
                c->drain_last = now;
                if (c->drained > linger_max(g)) break; /* past the bound: closed (a reset, if it goes on) */
                if ((step += (size_t)r) < LINGER_STEP) continue;
                set_masks(g, c); /* more on the next event (the mask may still be a refusal's, without EPOLLIN) */
                return 1;
            }
            if (r < 0 && errno == EINTR) continue;
            if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && !(evc & (EPOLLHUP | EPOLLERR))) {
                set_masks(g, c);
                return 1;
            }
            break; /* the client closed (or reset) */
        }
        conn_close(g, c, 0, NULL, NULL);
        return 0;
    }
    if (evc & (EPOLLHUP | EPOLLERR)) { /* the client is gone both ways (a reset) */
        conn_close(g, c, 0, pending(c) && c->head_started ? "client_closed" : NULL,
                   "the client reset the connection");
        return 0;
    }
    /* the client's bytes */
    while (!c->cin_eof && !c->refusing && !c->closing && c->in.len < c->in.max) {
        size_t want = c->in.len + 16384 < c->in.max ? c->in.len + 16384 : c->in.max;
        if (gb_reserve(&c->in, want, 0) != 0) {
            conn_close(g, c, 0, "out_of_memory", "no memory for the connection's buffer");
            return 0;
        }
        ssize_t r = recv(c->fd, c->in.d + c->in.len, c->in.cap - c->in.len, MSG_DONTWAIT);
        if (r > 0) c->in.len += (size_t)r;
        else if (r == 0) c->cin_eof = 1;
        else if (errno == EINTR) continue;
        else if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        else {
            conn_close(g, c, 0, pending(c) && c->head_started ? "read_error" : NULL, "read error");
            return 0;
        }
    }
    /* A head held back by the pipeline limit (c->blocked) goes on once answers make room; no event
     * may follow the one that brought those answers, so the walk runs again here until it is not
     * held or no answer came (without this, 33 pipelined requests stalled after 32 answers). */
relay:
    if (!walk(g, c, now)) return 0;
    unsigned nans_before = c->nans;
    /* to libmicrohttpd: what is walked */
    while (c->mfd >= 0 && c->fwd) { /* also when refusing: what was walked before the refused part goes */
        ssize_t w = send(c->mfd, c->in.d, c->fwd, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            gb_drop(&c->in, (size_t)w);
            c->fwd -= (size_t)w;
        } else if (w < 0 && errno == EINTR) {
            continue;
        } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            break;
        } else { /* libmicrohttpd closed (after an answer that closes, or an error): what it wrote still comes */
            gb_drop(&c->in, c->fwd);
            c->fwd = 0;
            if (!c->refusing) refuse_at(c, UINT32_MAX, 0, NULL, NULL, NULL, 0);
            break;
        }
    }
    /* from libmicrohttpd: its answers, walked so that it is known where each ends */
    while (c->mfd >= 0 && c->out.len < c->out.max) {
        if (gb_reserve(&c->out, c->out.len + 16384 < c->out.max ? c->out.len + 16384 : c->out.max, 0) != 0) {
            conn_close(g, c, 0, "out_of_memory", "no memory for the connection's buffer");
            return 0;
        }
        ssize_t r = recv(c->mfd, c->out.d + c->out.len, c->out.cap - c->out.len, MSG_DONTWAIT);
        if (r > 0) {
            size_t at = c->out.len;
            c->out.len += (size_t)r;
            while (at < c->out.len) {
                size_t used = 0;
                int rc = clef_guard_resp_walk(&c->rs, c->out.d + at, c->out.len - at, (int)(c->headq & 1), &used);
                if (rc < 0) { /* cannot happen with libmicrohttpd's answers: pass the rest, then close */
                    c->rs.st = 2;
                    refuse_at(c, UINT32_MAX, 0, NULL, NULL, NULL, 0);
                    break;
                }
                at += used;
                if (rc == 0) break;
                c->nans++;
                c->headq >>= 1;
                if (c->rs.ended_close) c->m_eof = 1; /* no request after it goes to libmicrohttpd */
                if (c->nans == c->nreq && !c->head_started) c->t0 = now; /* idle from here */
            }
        } else if (r < 0 && errno == EINTR) {
            continue;
        } else if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            break;
        } else { /* closed by libmicrohttpd */
            drop_mfd(g, c);
            c->m_eof = 1;
        }
    }
    if (c->blocked && c->nans != nans_before && c->nreq - c->nans < PIPE_MAX) goto relay;
    /* every answer out of libmicrohttpd and no request there: let go of its connection (the next
     * head gets a fresh one), so that an idle keep-alive connection holds no --max-connections */
    if (c->mfd >= 0 && !c->refusing && !c->closing && c->nans == c->nreq && c->phase == P_HEAD && !c->fwd &&
        c->rs.st == 0 && c->rs.head_bytes == 0) {
        drop_mfd(g, c);
        if (!c->out.len) { /* and of its buffers while they are empty: an idle connection is a small struct */
            free(c->out.d);
            c->out.d = NULL;
            c->out.cap = 0;
        }
        if (!c->in.len) {
            free(c->in.d);
            c->in.d = NULL;
            c->in.cap = 0;
        }
    }
    /* to the client */
    while (c->out.len) {
        ssize_t w = send(c->fd, c->out.d, c->out.len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            gb_drop(&c->out, (size_t)w);
            if (!c->head_started && c->nans == c->nreq) c->t0 = now;
        } else if (w < 0 && errno == EINTR) {
            continue;
        } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            break;
        } else {
            conn_close(g, c, 0, NULL, NULL);
            return 0;
        }
    }
    /* what next */
    if (!c->closing && c->refusing && !c->out.len && (c->nans >= c->need || c->mfd < 0)) {
        drop_mfd(g, c);
        if (c->ref_status && c->nans >= c->need) {
            queue_answer(g, c, c->ref_status, c->ref_type, c->ref_msg, c->ref_ml ? c->ref_method : NULL, c->ref_ml);
            c->closing = 1;
            return pump(g, c, 0);
        }
        if (c->ref_type) { /* a close of the guard's own (a timeout, the client gone, garbage): at once */
            conn_close(g, c, 0, c->ref_type, c->ref_msg);
            return 0;
        }
        c->closing = 1; /* libmicrohttpd ended it (an answer from the head, a body over the cap): linger */
    }
    if (!c->closing && !c->refusing && pending(c) && c->fwd == 0 && !c->out.len &&
        ((c->m_eof) || (c->cin_eof && c->in.len == 0) || (g->quiesced))) {
        /* libmicrohttpd closed after its last answer, the client is done, or shutdown: close */
        drop_mfd(g, c);
        if (c->nreq == 0 && !c->m_eof) {
            conn_close(g, c, 0, c->seen && !g->quiesced ? "client_closed" : NULL, "closed before its request head was complete");
            return 0;
        }
        c->closing = 1;
    }
    if (!c->closing && !c->refusing && c->m_eof && !c->out.len) c->closing = 1; /* within a request: closed by it */
    if (c->closing && !c->out.len && !c->draining) {
        drop_mfd(g, c);
        shutdown(c->fd, SHUT_WR);
        c->draining = 1;
        c->t0 = c->drain_last = now; /* the drain's clocks */
        free(c->in.d);
        c->in.d = NULL;
        c->in.len = c->in.cap = c->fwd = 0;
        return pump(g, c, 0);
    }
    set_masks(g, c);
    return 1;
}

static void evict_for(clef_guard *g, const char *addr) {
    size_t same = 0, np = 0;
    conn *oldest_same = NULL, *oldest = NULL;
    for (size_t i = 0; i < g->np; i++) {
        conn *c = g->p[i];
        if (!pending(c)) continue;
        np++;
        if (!strcmp(c->addr, addr)) {
            same++;
            if (!oldest_same || c->t0 < oldest_same->t0) oldest_same = c;
        }
        if (!oldest || c->t0 < oldest->t0) oldest = c;
    }
    if (g->cfg.client_share && same >= g->cfg.client_share)
        conn_close(g, oldest_same, 0, "evicted", "closed for a newer connection from the same address (over --client-share)");
    else if (np >= g->cfg.max_pending && oldest)
        conn_close(g, oldest, 0, "evicted", "closed for a newer connection (over the pending-head limit)");
}

static void on_accept(clef_guard *g) {
    for (;;) {
        struct sockaddr_storage sa;
        socklen_t sl = sizeof sa;
        int fd = accept4(g->listen_fd, (struct sockaddr *)&sa, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) return; /* EAGAIN, or out of descriptors: try again on the next event */
        atomic_fetch_add(&g->accepted, 1);
        conn *c = calloc(1, sizeof *c);
        if (!c) {
            close(fd);
            continue;
        }
        c->fd = fd;
        c->mfd = -1;
        c->hfd = -1;
        c->sc = (side){c, 0};
        c->sm = (side){c, 1};
        c->sa = sa;
        c->sl = sl;
        c->t0 = mono_now();
        c->head_started = 1; /* the first head's deadline runs from accept */
        c->in.max = g->cfg.max_header + CHUNK_LINE_MAX + 8;
        if (c->in.max < (64u << 10)) c->in.max = 64u << 10;
        c->out.max = OUT_MAX;
        clef_sockaddr_text((struct sockaddr *)&sa, c->addr, sizeof c->addr);
        evict_for(g, c->addr);
        if (g->np == g->cap) {
            size_t nc = g->cap ? g->cap * 2 : 64;
            conn **np = realloc(g->p, nc * sizeof *np);
            if (!np) {
                close(fd);
                free(c);
                continue;
            }
            g->p = np;
            g->cap = nc;
        }
        c->ev_c = EPOLLIN;
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &c->sc};
        if (epoll_ctl(g->ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
            close(fd);
            free(c);
            continue;
        }
        g->p[g->np++] = c;
        pump(g, c, 0); /* the head may be there already */
    }
}

static void tick(clef_guard *g, double now) {
    for (size_t i = g->np; i-- > 0;) {
        if (i >= g->np) continue;
        conn *c = g->p[i];
        if (c->draining) {
            if (now - c->t0 > LINGER_TOTAL_S || now - c->drain_last > LINGER_IDLE_S) conn_close(g, c, 0, NULL, NULL);
        } else if (c->refusing || c->closing) {
            continue;
        } else if (c->phase == P_HEAD && c->head_started && !c->blocked && now - c->t0 > g->cfg.header_timeout_s) {
            if (c->seen) {
                char m[128];
                snprintf(m, sizeof m, "the request head did not arrive within %g s", g->cfg.header_timeout_s);
                refuse_at(c, c->nreq, 408, "RequestTimeout", m, NULL, 0);
            } else {
                refuse_at(c, c->nreq, 0, "header_timeout", "no request within the header timeout", NULL, 0);
            }
            pump(g, c, 0);
        } else if (g->cfg.keepalive_timeout_s > 0 && c->nreq && pending(c) && !c->head_started && !c->fwd &&
                   !c->out.len && now - c->t0 > g->cfg.keepalive_timeout_s) {
            conn_close(g, c, 0, NULL, NULL); /* idle past --keepalive-timeout */
        }
    }
    pthread_mutex_lock(&g->mu);
    for (size_t i = 0; i < g->nw;) {
        if (g->w[i].deadline > 0 && now > g->w[i].deadline) {
            shutdown(g->w[i].fd, SHUT_RDWR);
            g->w[i] = g->w[--g->nw];
        } else {
            i++;
        }
    }
    pthread_mutex_unlock(&g->mu);
}

static void *guard_main(void *arg) {
    clef_guard *g = arg;
    struct epoll_event evs[64];
    double stop_until = 0;
    for (;;) {
        pthread_mutex_lock(&g->mu);
        int stop = g->stop, quiesce = g->quiesce;
        pthread_mutex_unlock(&g->mu);
        if (stop && stop_until == 0) stop_until = mono_now() + 1.0; /* the answers still in the buffers go out */
        if (stop && g->quiesced) { /* nothing more comes from libmicrohttpd: what only drains is closed */
            for (size_t i = g->np; i-- > 0;)
                if (i < g->np && g->p[i]->draining) conn_close(g, g->p[i], 0, NULL, NULL);
            free_dead();
        }
        if (stop && (g->np == 0 || mono_now() > stop_until)) break;
        if ((quiesce || stop) && !g->quiesced) {
            if (g->listen_fd >= 0) {
                epoll_ctl(g->ep, EPOLL_CTL_DEL, g->listen_fd, NULL);
                close(g->listen_fd);
            }
            g->quiesced = 1;
            for (size_t i = g->np; i-- > 0;)
                if (i < g->np) pump(g, g->p[i], 0); /* those waiting for a head close now */
            free_dead();
            pthread_mutex_lock(&g->mu);
            g->listen_fd = -1;
            pthread_mutex_unlock(&g->mu);
        }
        int n = epoll_wait(g->ep, evs, 64, stop ? 10 : 100);
        for (int k = 0; k < n; k++) {
            void *ptr = evs[k].data.ptr;
            if (ptr == (void *)g) {
                if (g->listen_fd >= 0) on_accept(g);
            } else if (ptr == (void *)&g->evfd) {
                uint64_t v;
                if (read(g->evfd, &v, sizeof v) < 0) { /* nothing to do */
                }
            } else {
                side *sd = ptr;
                conn *c = sd->c;
                if (c->dead) continue; /* closed earlier in this batch */
                pump(g, c, sd->m ? 0 : evs[k].events);
            }
        }
        tick(g, mono_now());
        free_dead();
    }
    while (g->np) conn_close(g, g->p[g->np - 1], 0, NULL, NULL);
    free_dead();
    return NULL;
}

clef_guard *clef_guard_start(const clef_guard_config *c, char *err, size_t err_len) {
    clef_guard *g = calloc(1, sizeof *g);
    if (!g) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    g->cfg = *c;
    if (!g->cfg.max_pending) g->cfg.max_pending = 1024;
    if (g->cfg.header_timeout_s <= 0) g->cfg.header_timeout_s = 10;
    g->listen_fd = c->listen_fd;
    atomic_init(&g->accepted, 0);
    g->ep = epoll_create1(EPOLL_CLOEXEC);
    g->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    pthread_mutex_init(&g->mu, NULL);
    clef_handoff_init(&g->hand);
    int fl = fcntl(g->listen_fd, F_GETFL);
    if (fl >= 0) fcntl(g->listen_fd, F_SETFL, fl | O_NONBLOCK);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = g};
    struct epoll_event ev2 = {.events = EPOLLIN, .data.ptr = &g->evfd};
    if (g->ep < 0 || g->evfd < 0 || epoll_ctl(g->ep, EPOLL_CTL_ADD, g->listen_fd, &ev) != 0 ||
        epoll_ctl(g->ep, EPOLL_CTL_ADD, g->evfd, &ev2) != 0 ||
        pthread_create(&g->th, NULL, guard_main, g) != 0) {
        snprintf(err, err_len, "cannot start the connection guard: %s", strerror(errno));
        if (g->ep >= 0) close(g->ep);
        if (g->evfd >= 0) close(g->evfd);
        pthread_mutex_destroy(&g->mu);
        clef_handoff_free(&g->hand);
        free(g);
        return NULL;
    }
    return g;
}

unsigned long clef_guard_accepted(clef_guard *g) { return g ? atomic_load(&g->accepted) : 0; }

static void wake(clef_guard *g) {
    uint64_t one = 1;
    if (write(g->evfd, &one, sizeof one) < 0) { /* the 100 ms poll picks it up anyway */
    }
}

void clef_guard_quiesce(clef_guard *g) {
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    g->quiesce = 1;
    pthread_mutex_unlock(&g->mu);
    wake(g);
    /* wait until the thread has closed the listener (bounded: it polls every 100 ms) */
    for (int i = 0; i < 100; i++) {
        pthread_mutex_lock(&g->mu);
        int done = g->listen_fd < 0;
        pthread_mutex_unlock(&g->mu);
        if (done) break;
        nanosleep(&(struct timespec){0, 10000000}, NULL);
    }
}

void clef_guard_stop(clef_guard *g) {
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    g->stop = 1;
    pthread_mutex_unlock(&g->mu);
    wake(g);
    pthread_join(g->th, NULL);
    if (g->listen_fd >= 0) close(g->listen_fd);
    close(g->ep);
    close(g->evfd);
    pthread_mutex_destroy(&g->mu);
    clef_handoff_free(&g->hand);
    free(g->p);
    free(g->w);
    free(g);
}

void clef_guard_watch(clef_guard *g, const void *key, int fd, double deadline) {
    if (!g || fd < 0) return;
    pthread_mutex_lock(&g->mu);
    if (g->nw == g->wcap) {
        size_t nc = g->wcap ? g->wcap * 2 : 64;
        watch *nw = realloc(g->w, nc * sizeof *nw);
        if (!nw) { /* unwatched: the idle timeout still bounds it */
            pthread_mutex_unlock(&g->mu);
            return;
        }
        g->w = nw;
        g->wcap = nc;
    }
    g->w[g->nw++] = (watch){key, fd, deadline};
    pthread_mutex_unlock(&g->mu);
}

void clef_guard_unwatch(clef_guard *g, const void *key) {
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    for (size_t i = 0; i < g->nw; i++)
        if (g->w[i].key == key) {
            g->w[i] = g->w[--g->nw];
            break;
        }
    pthread_mutex_unlock(&g->mu);
}

int clef_guard_cut_all(clef_guard *g) {
    if (!g) return 0;
    pthread_mutex_lock(&g->mu);
    int n = (int)g->nw;
    for (size_t i = 0; i < g->nw; i++) shutdown(g->w[i].fd, SHUT_RDWR);
    g->nw = 0;
    pthread_mutex_unlock(&g->mu);
    return n;
}
