/* One connection through the guard (http_guard_internal.h; the guard itself: http_guard.c): its
 * buffers, the walk of what the client sends (heads checked, bodies framed), the hand-off to
 * libmicrohttpd, the relay both ways (clef_guard_pump), the guard's own answers and refusals, and
 * the lingering close. Only the guard's thread runs this. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/json.h"
#include "serve/http_extras.h"
#include "serve/http_guard_internal.h"
#include "serve/request_id.h"

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
    return g->cfg.keepalive_requests ? g->cfg.keepalive_requests : CLEF_GUARD_KEEPALIVE_REQUESTS_DEFAULT;
}

static size_t find(clef_guard *g, const conn *c) {
    for (size_t i = 0; i < g->np; i++)
        if (g->p[i] == c) return i;
    return (size_t)-1;
}

static size_t linger_max(const clef_guard *g) {
    return g->cfg.max_body > LINGER_MIN_BYTES ? g->cfg.max_body : LINGER_MIN_BYTES;
}

static conn *g_dead; /* only the guard's thread touches it: freed after each batch of events */

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
void clef_guard_conn_close(clef_guard *g, conn *c, int status, const char *why, const char *message) {
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

void clef_guard_free_dead(void) {
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
    clef_json_render_error(&body, type, message);
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
void clef_guard_refuse_at(conn *c, unsigned need, int status, const char *type, const char *msg, const char *method,
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
                clef_guard_refuse_at(c, c->nreq - 1, 400, "BadRequest", msg, NULL, 0);
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
                clef_guard_refuse_at(c, c->nreq, 0, "client_closed", "the client closed its side before its request head was complete",
                          NULL, 0);
            break;
        }
        size_t ml = clef_http_method_len(p, avail);
        if (rc < 0) {
            clef_guard_refuse_at(c, c->nreq, status, type, msg, status ? p : NULL, ml);
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
            clef_guard_conn_close(g, c, 0, NULL, NULL); /* the server logged a refused hand-over */
            return 0;
        }
    }
    /* within a body, everything walkable is walked; after the client's end no more comes, so the
     * request can never complete (else libmicrohttpd would hold it to the body deadline) */
    if (c->phase != P_HEAD && c->cin_eof && !c->refusing && !c->closing && !c->draining)
        clef_guard_refuse_at(c, c->nreq - 1, 0, "client_closed", "the client closed within a body", NULL, 0);
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

/* Lingering (c->draining): what the client still sends is read and dropped, LINGER_STEP per event,
 * until it closes or linger_max bytes went. 0: the connection was closed. */
static int drain_client(clef_guard *g, conn *c, unsigned evc, double now) {
    static char sink[64u << 10]; /* only the guard's thread runs clef_guard_pump */
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
    clef_guard_conn_close(g, c, 0, NULL, NULL);
    return 0;
}

/* The client's bytes, into c->in while there is room. 0: the connection was closed. */
static int read_client(clef_guard *g, conn *c) {
    while (!c->cin_eof && !c->refusing && !c->closing && c->in.len < c->in.max) {
        size_t want = c->in.len + 16384 < c->in.max ? c->in.len + 16384 : c->in.max;
        if (gb_reserve(&c->in, want, 0) != 0) {
            clef_guard_conn_close(g, c, 0, "out_of_memory", "no memory for the connection's buffer");
            return 0;
        }
        ssize_t r = recv(c->fd, c->in.d + c->in.len, c->in.cap - c->in.len, MSG_DONTWAIT);
        if (r > 0) c->in.len += (size_t)r;
        else if (r == 0) c->cin_eof = 1;
        else if (errno == EINTR) continue;
        else if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        else {
            clef_guard_conn_close(g, c, 0, pending(c) && c->head_started ? "read_error" : NULL, "read error");
            return 0;
        }
    }
    return 1;
}

/* To libmicrohttpd: what is walked (also when refusing: what was walked before the refused part goes). */
static void forward_walked(conn *c) {
    while (c->mfd >= 0 && c->fwd) {
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
            if (!c->refusing) clef_guard_refuse_at(c, UINT32_MAX, 0, NULL, NULL, NULL, 0);
            break;
        }
    }
}

/* From libmicrohttpd: its answers, walked so that it is known where each ends. 0: the connection
 * was closed. */
static int read_answers(clef_guard *g, conn *c, double now) {
    while (c->mfd >= 0 && c->out.len < c->out.max) {
        if (gb_reserve(&c->out, c->out.len + 16384 < c->out.max ? c->out.len + 16384 : c->out.max, 0) != 0) {
            clef_guard_conn_close(g, c, 0, "out_of_memory", "no memory for the connection's buffer");
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
                    clef_guard_refuse_at(c, UINT32_MAX, 0, NULL, NULL, NULL, 0);
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
    return 1;
}

/* Every answer out of libmicrohttpd and no request there: let go of its connection (the next head
 * gets a fresh one), so that an idle keep-alive connection holds no --max-connections. */
static void release_idle(clef_guard *g, conn *c) {
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
}

/* To the client: what libmicrohttpd and the guard answered. 0: the connection was closed. */
static int write_client(clef_guard *g, conn *c, double now) {
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
            clef_guard_conn_close(g, c, 0, NULL, NULL);
            return 0;
        }
    }
    return 1;
}

/* Moves what can move, both ways, and decides what is next. 0: the connection was closed. */
int clef_guard_pump(clef_guard *g, conn *c, unsigned evc) {
    double now = mono_now();
    if (c->draining) return drain_client(g, c, evc, now);
    if (evc & (EPOLLHUP | EPOLLERR)) { /* the client is gone both ways (a reset) */
        clef_guard_conn_close(g, c, 0, pending(c) && c->head_started ? "client_closed" : NULL,
                   "the client reset the connection");
        return 0;
    }
    if (!read_client(g, c)) return 0;
    /* A head held back by the pipeline limit (c->blocked) goes on once answers make room; no event
     * may follow the one that brought those answers, so the walk runs again here until it is not
     * held or no answer came (without this, 33 pipelined requests stalled after 32 answers). */
relay:
    if (!walk(g, c, now)) return 0;
    unsigned nans_before = c->nans;
    forward_walked(c);
    if (!read_answers(g, c, now)) return 0;
    if (c->blocked && c->nans != nans_before && c->nreq - c->nans < PIPE_MAX) goto relay;
    release_idle(g, c);
    if (!write_client(g, c, now)) return 0;
    /* what next */
    if (!c->closing && c->refusing && !c->out.len && (c->nans >= c->need || c->mfd < 0)) {
        drop_mfd(g, c);
        if (c->ref_status && c->nans >= c->need) {
            queue_answer(g, c, c->ref_status, c->ref_type, c->ref_msg, c->ref_ml ? c->ref_method : NULL, c->ref_ml);
            c->closing = 1;
            return clef_guard_pump(g, c, 0);
        }
        if (c->ref_type) { /* a close of the guard's own (a timeout, the client gone, garbage): at once */
            clef_guard_conn_close(g, c, 0, c->ref_type, c->ref_msg);
            return 0;
        }
        c->closing = 1; /* libmicrohttpd ended it (an answer from the head, a body over the cap): linger */
    }
    if (!c->closing && !c->refusing && pending(c) && c->fwd == 0 && !c->out.len &&
        ((c->m_eof) || (c->cin_eof && c->in.len == 0) || (g->quiesced))) {
        /* libmicrohttpd closed after its last answer, the client is done, or shutdown: close */
        drop_mfd(g, c);
        if (c->nreq == 0 && !c->m_eof) {
            clef_guard_conn_close(g, c, 0, c->seen && !g->quiesced ? "client_closed" : NULL, "closed before its request head was complete");
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
        return clef_guard_pump(g, c, 0);
    }
    set_masks(g, c);
    return 1;
}
