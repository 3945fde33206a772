/* The guard in front of libmicrohttpd (see http_guard.h for what and why). */
#include "serve/http_guard.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
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
#include "serve/request_id.h"

#define CHUNK_LINE_MAX 4096 /* a chunk-size line with its extensions (nginx: a few KB, HAProxy the buffer) */
#define DRAIN_S 2.0         /* after an answer, read and drop what the client still sends, then close */

typedef struct pend {
    int fd;
    struct sockaddr_storage sa;
    socklen_t sl;
    char addr[64];
    double t0;
    int draining;
    size_t seen; /* bytes peeked (the most so far) */
} pend;

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
    pend **p;
    size_t np, cap;
    watch *w;
    size_t nw, wcap;
    char *peek;
    size_t peek_cap;
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

/* ---------- the strict head check ---------- */

static int tchar(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

static int refuse(int st, const char *ty, int *status, const char **type, char *msg, size_t msg_len,
                  const char *fmt, ...) __attribute__((format(printf, 7, 8)));
static int refuse(int st, const char *ty, int *status, const char **type, char *msg, size_t msg_len,
                  const char *fmt, ...) {
    *status = st;
    *type = ty;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, msg_len, fmt, ap);
    va_end(ap);
    return -1;
}

#define REFUSE(st, ty, ...) return refuse(st, ty, status, type, msg, msg_len, __VA_ARGS__)

static int ieq(const char *a, size_t n, const char *lit) { return strlen(lit) == n && !strncasecmp(a, lit, n); }

static void trim(const char **v, size_t *n) {
    while (*n && ((*v)[0] == ' ' || (*v)[0] == '\t')) (*v)++, (*n)--;
    while (*n && ((*v)[*n - 1] == ' ' || (*v)[*n - 1] == '\t')) (*n)--;
}

int clef_guard_check_head(const char *data, size_t n, size_t max_header, size_t max_body, size_t *head_len,
                          int *status, const char **type, char *msg, size_t msg_len) {
    const unsigned char *d = (const unsigned char *)data;
    if (n == 0) return 1;
    size_t at = 0;
    /* RFC 9112 2.2: a server SHOULD ignore at least one empty line before the request line */
    while (at + 1 < n && at < 4 && d[at] == '\r' && d[at + 1] == '\n') at += 2;
    if (at < n && !tchar(d[at])) REFUSE(0, "garbage", "the first byte 0x%02x cannot start an HTTP request", d[at]);
    size_t lim = n < max_header ? n : max_header;
    /* every byte so far: CR only before LF, no LF without CR, no control character but HT */
    size_t end = 0; /* index just past the empty line, once seen */
    for (size_t i = at; i < lim; i++) {
        unsigned char c = d[i];
        if (c == '\n') {
            if (i == 0 || d[i - 1] != '\r') REFUSE(400, "BadRequest", "a line of the head ends in LF without CR");
            if (i >= 3 && d[i - 2] == '\n' && d[i - 3] == '\r') {
                end = i + 1;
                break;
            }
        } else if (c == '\r') {
            if (i + 1 < lim && d[i + 1] != '\n') REFUSE(400, "BadRequest", "a CR in the head not followed by LF");
        } else if ((c < 0x20 && c != '\t') || c == 0x7f) {
            REFUSE(400, "BadRequest", "control character 0x%02x in the request head", c);
        }
    }
    /* the request line, as soon as it is complete */
    const char *line = data + at;
    const char *eol = memchr(line, '\n', lim - at);
    if (eol) {
        size_t ll = (size_t)(eol - line) - 1; /* without CR */
        size_t m = 0;
        while (m < ll && tchar((unsigned char)line[m])) m++;
        if (m == 0 || m >= ll || line[m] != ' ') REFUSE(400, "BadRequest", "malformed request line");
        if (m > 32) REFUSE(501, "NotImplemented", "method too long");
        size_t t0 = m + 1, t = t0;
        while (t < ll && line[t] != ' ') t++;
        if (t == t0 || t >= ll) REFUSE(400, "BadRequest", "malformed request line");
        const char *ver = line + t + 1;
        size_t vl = ll - t - 1;
        if (!(vl == 8 && (!memcmp(ver, "HTTP/1.1", 8) || !memcmp(ver, "HTTP/1.0", 8)))) {
            if (vl >= 5 && !memcmp(ver, "HTTP/", 5)) REFUSE(505, "HTTPVersionNotSupported", "only HTTP/1.0 and HTTP/1.1");
            REFUSE(400, "BadRequest", "malformed request line");
        }
    }
    if (!end) {
        if (n >= max_header)
            REFUSE(431, "RequestHeaderFieldsTooLarge", "the request head is over %zu bytes", max_header);
        return 1;
    }
    /* the header lines */
    const char *method = line;
    size_t method_len = 0;
    while (tchar((unsigned char)method[method_len])) method_len++;
    int n_cl = 0, n_te = 0, n_host = 0;
    unsigned long long cl = 0;
    const char *p = eol + 1, *stop = data + end - 2; /* stop: the empty line's CR */
    while (p < stop) {
        const char *le = memchr(p, '\r', (size_t)(stop - p));
        if (!le) le = stop;
        size_t L = (size_t)(le - p);
        if (p[0] == ' ' || p[0] == '\t') REFUSE(400, "BadRequest", "obsolete line folding in a header");
        size_t k = 0;
        while (k < L && tchar((unsigned char)p[k])) k++;
        if (k == L || p[k] != ':') {
            if (k < L && (p[k] == ' ' || p[k] == '\t'))
                REFUSE(400, "BadRequest", "whitespace between a header name and its colon");
            REFUSE(400, "BadRequest", "malformed header line");
        }
        if (k == 0) REFUSE(400, "BadRequest", "empty header name");
        const char *v = p + k + 1;
        size_t vn = L - k - 1;
        trim(&v, &vn);
        if (ieq(p, k, "Content-Length")) {
            if (++n_cl > 1) REFUSE(400, "BadRequest", "more than one Content-Length header");
            if (vn == 0 || vn > 19) REFUSE(400, "BadRequest", "bad Content-Length value");
            for (size_t i = 0; i < vn; i++) {
                if (v[i] < '0' || v[i] > '9') REFUSE(400, "BadRequest", "bad Content-Length value");
                cl = cl * 10 + (unsigned)(v[i] - '0');
            }
        } else if (ieq(p, k, "Transfer-Encoding")) {
            if (++n_te > 1) REFUSE(400, "BadRequest", "more than one Transfer-Encoding header");
            if (!ieq(v, vn, "chunked"))
                REFUSE(501, "NotImplemented", "Transfer-Encoding %.*s is not supported (only chunked)",
                       (int)(vn > 64 ? 64 : vn), v);
        } else if (ieq(p, k, "Host")) {
            if (++n_host > 1) REFUSE(400, "BadRequest", "more than one Host header");
        }
        p = le + 2;
    }
    if (n_cl && n_te) REFUSE(400, "BadRequest", "both Content-Length and Transfer-Encoding");
    if (n_cl && cl > max_body)
        REFUSE(413, "RequestTooLong", "body is %llu bytes; the limit is %zu bytes", cl, max_body);
    int body_method = ieq(method, method_len, "POST") || ieq(method, method_len, "PUT") ||
                      ieq(method, method_len, "PATCH");
    if (body_method && !n_cl && !n_te)
        REFUSE(411, "LengthRequired", "a %.*s needs Content-Length or Transfer-Encoding: chunked", (int)method_len,
               method);
    if (n_te) { /* the first chunk-size line, as far as it has arrived */
        size_t b = end, i = b;
        while (i < n && i - b <= CHUNK_LINE_MAX && d[i] != '\n') i++;
        if (i - b > CHUNK_LINE_MAX) REFUSE(400, "BadRequest", "chunk-size line over %d bytes", CHUNK_LINE_MAX);
        if (b < n) {
            size_t h = b;
            while (h < i && ((d[h] >= '0' && d[h] <= '9') || ((d[h] | 32) >= 'a' && (d[h] | 32) <= 'f'))) h++;
            if (h == b || h - b > 16) REFUSE(400, "BadRequest", "bad chunk size");
        }
    }
    *head_len = end;
    return 0;
}

/* ---------- the thread ---------- */

static void pend_close(clef_guard *g, size_t i, int status, const char *why, const char *message) {
    pend *q = g->p[i];
    if (why && g->cfg.refused && (q->seen || status)) {
        clef_guard_refusal r = {.status = status, .type = why, .message = message, .client = q->addr,
                                .bytes_in = q->seen};
        g->cfg.refused(g->cfg.ctx, &r);
    }
    epoll_ctl(g->ep, EPOLL_CTL_DEL, q->fd, NULL);
    close(q->fd);
    free(q);
    g->p[i] = g->p[--g->np];
}

static size_t find(clef_guard *g, const pend *q) {
    for (size_t i = 0; i < g->np; i++)
        if (g->p[i] == q) return i;
    return (size_t)-1;
}

/* Answers with one JSON error and Connection: close, then drains. */
static void answer(clef_guard *g, size_t i, int status, const char *type, const char *message, const char *method,
                   size_t method_len) {
    pend *q = g->p[i];
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
    clef_buf_printf(&out,
                    "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nX-Request-Id: %s\r\nConnection: close\r\n"
                    "Content-Length: %zu\r\n\r\n",
                    status, reason, id, body.len);
    clef_buf_put(&out, body.data, body.len);
    size_t sent = 0;
    if (!out.oom && !body.oom) {
        ssize_t w = send(q->fd, out.data, out.len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) sent = (size_t)w;
    }
    clef_buf_free(&body);
    clef_buf_free(&out);
    if (g->cfg.refused) {
        clef_guard_refusal r = {.status = status, .type = type, .message = message, .method = method,
                                .method_len = method_len, .client = q->addr, .id = id, .bytes_in = q->seen,
                                .bytes_out = sent};
        g->cfg.refused(g->cfg.ctx, &r);
    }
    shutdown(q->fd, SHUT_WR);
    q->draining = 1;
    q->t0 = mono_now(); /* the drain's clock */
    char sink[4096];
    for (;;) {
        ssize_t r = recv(q->fd, sink, sizeof sink, MSG_DONTWAIT);
        if (r > 0) continue;
        if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) pend_close(g, i, 0, NULL, NULL);
        break;
    }
}

static void on_readable(clef_guard *g, pend *q, unsigned events) {
    size_t i = find(g, q);
    if (i == (size_t)-1) return;
    if (q->draining) {
        char sink[4096];
        for (;;) {
            ssize_t r = recv(q->fd, sink, sizeof sink, MSG_DONTWAIT);
            if (r > 0) continue;
            if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) pend_close(g, i, 0, NULL, NULL);
            return;
        }
    }
    ssize_t r = recv(q->fd, g->peek, g->peek_cap, MSG_PEEK | MSG_DONTWAIT);
    if (r == 0) {
        pend_close(g, i, 0, "client_closed", "the client closed before its request head was complete");
        return;
    }
    if (r < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            pend_close(g, i, 0, "read_error", "read error before the request head was complete");
        return;
    }
    if ((size_t)r > q->seen) q->seen = (size_t)r;
    size_t head_len = 0;
    int status = 0;
    const char *type = NULL;
    char msg[256];
    int rc = clef_guard_check_head(g->peek, (size_t)r, g->cfg.max_header, g->cfg.max_body, &head_len, &status, &type,
                                   msg, sizeof msg);
    if (rc == 1) {
        /* the client has finished sending (FIN) without completing its head: it never will */
        if (events & (EPOLLRDHUP | EPOLLHUP))
            pend_close(g, i, 0, "client_closed", "the client closed its side before its request head was complete");
        return;
    }
    if (rc < 0) {
        if (status == 0) {
            pend_close(g, i, 0, type, msg);
            return;
        }
        size_t ml = 0;
        while (ml < (size_t)r && ml < 32 && tchar((unsigned char)g->peek[ml])) ml++;
        char method[33];
        memcpy(method, g->peek, ml);
        method[ml] = 0;
        answer(g, i, status, type, msg, method, ml);
        return;
    }
    /* passed: libmicrohttpd takes it (and closes it, whatever happens) */
    epoll_ctl(g->ep, EPOLL_CTL_DEL, q->fd, NULL);
    int fd = q->fd;
    struct sockaddr_storage sa = q->sa;
    socklen_t sl = q->sl;
    free(q);
    g->p[i] = g->p[--g->np];
    g->cfg.handoff(g->cfg.ctx, fd, (struct sockaddr *)&sa, sl);
}

static void evict_for(clef_guard *g, const char *addr) {
    size_t same = 0, oldest_same = (size_t)-1, oldest = (size_t)-1;
    for (size_t i = 0; i < g->np; i++) {
        if (!strcmp(g->p[i]->addr, addr)) {
            same++;
            if (oldest_same == (size_t)-1 || g->p[i]->t0 < g->p[oldest_same]->t0) oldest_same = i;
        }
        if (oldest == (size_t)-1 || g->p[i]->t0 < g->p[oldest]->t0) oldest = i;
    }
    if (g->cfg.client_share && same >= g->cfg.client_share)
        pend_close(g, oldest_same, 0, "evicted",
                   "closed for a newer connection from the same address (over --client-share)");
    else if (g->np >= g->cfg.max_pending)
        pend_close(g, oldest, 0, "evicted", "closed for a newer connection (over the pending-head limit)");
}

static void on_accept(clef_guard *g) {
    for (;;) {
        struct sockaddr_storage sa;
        socklen_t sl = sizeof sa;
        int fd = accept4(g->listen_fd, (struct sockaddr *)&sa, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) return; /* EAGAIN, or out of descriptors: try again on the next event */
        pend *q = calloc(1, sizeof *q);
        if (!q) {
            close(fd);
            continue;
        }
        q->fd = fd;
        q->sa = sa;
        q->sl = sl;
        q->t0 = mono_now();
        clef_sockaddr_text((struct sockaddr *)&sa, q->addr, sizeof q->addr);
        evict_for(g, q->addr);
        if (g->np == g->cap) {
            size_t nc = g->cap ? g->cap * 2 : 64;
            pend **np = realloc(g->p, nc * sizeof *np);
            if (!np) {
                close(fd);
                free(q);
                continue;
            }
            g->p = np;
            g->cap = nc;
        }
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLET, .data.ptr = q};
        if (epoll_ctl(g->ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
            close(fd);
            free(q);
            continue;
        }
        g->p[g->np++] = q;
        on_readable(g, q, 0); /* the head may be there already */
    }
}

static void tick(clef_guard *g, double now) {
    for (size_t i = 0; i < g->np;) {
        pend *q = g->p[i];
        if (q->draining && now - q->t0 > DRAIN_S) {
            pend_close(g, i, 0, NULL, NULL);
        } else if (!q->draining && now - q->t0 > g->cfg.header_timeout_s) {
            if (q->seen) {
                char m[128];
                snprintf(m, sizeof m, "the request head did not arrive within %g s", g->cfg.header_timeout_s);
                answer(g, i, 408, "RequestTimeout", m, NULL, 0);
                if (i < g->np && g->p[i] == q) i++;
            } else {
                pend_close(g, i, 0, "header_timeout", "no request within the header timeout");
            }
        } else {
            i++;
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
    for (;;) {
        pthread_mutex_lock(&g->mu);
        int stop = g->stop, quiesce = g->quiesce;
        pthread_mutex_unlock(&g->mu);
        if (stop) break;
        if (quiesce && g->listen_fd >= 0) {
            epoll_ctl(g->ep, EPOLL_CTL_DEL, g->listen_fd, NULL);
            close(g->listen_fd);
            while (g->np) pend_close(g, g->np - 1, 0, NULL, NULL);
            pthread_mutex_lock(&g->mu);
            g->listen_fd = -1;
            pthread_mutex_unlock(&g->mu);
        }
        int n = epoll_wait(g->ep, evs, 64, 100);
        for (int k = 0; k < n; k++) {
            void *ptr = evs[k].data.ptr;
            if (ptr == (void *)g) {
                if (g->listen_fd >= 0) on_accept(g);
            } else if (ptr == (void *)&g->evfd) {
                uint64_t v;
                if (read(g->evfd, &v, sizeof v) < 0) { /* nothing to do */
                }
            } else {
                on_readable(g, ptr, evs[k].events);
            }
        }
        tick(g, mono_now());
    }
    while (g->np) pend_close(g, g->np - 1, 0, NULL, NULL);
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
    g->peek_cap = c->max_header + CHUNK_LINE_MAX + 8;
    g->peek = malloc(g->peek_cap);
    g->ep = epoll_create1(EPOLL_CLOEXEC);
    g->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    pthread_mutex_init(&g->mu, NULL);
    int fl = fcntl(g->listen_fd, F_GETFL);
    if (fl >= 0) fcntl(g->listen_fd, F_SETFL, fl | O_NONBLOCK);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = g};
    struct epoll_event ev2 = {.events = EPOLLIN, .data.ptr = &g->evfd};
    if (!g->peek || g->ep < 0 || g->evfd < 0 || epoll_ctl(g->ep, EPOLL_CTL_ADD, g->listen_fd, &ev) != 0 ||
        epoll_ctl(g->ep, EPOLL_CTL_ADD, g->evfd, &ev2) != 0 ||
        pthread_create(&g->th, NULL, guard_main, g) != 0) {
        snprintf(err, err_len, "cannot start the connection guard: %s", strerror(errno));
        if (g->ep >= 0) close(g->ep);
        if (g->evfd >= 0) close(g->evfd);
        pthread_mutex_destroy(&g->mu);
        free(g->peek);
        free(g);
        return NULL;
    }
    return g;
}

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
    free(g->p);
    free(g->w);
    free(g->peek);
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
