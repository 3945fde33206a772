/* The guard in front of libmicrohttpd (see http_guard.h for what and why): its thread (accept,
 * deadlines, start and stop) and the body-deadline list. One connection: http_guard_conn.c. */
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
#include "serve/http_guard_internal.h"
#include "serve/request_id.h"

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

int clef_guard_base(clef_guard *g, int mhd_fd, unsigned *base) {
    return g ? clef_handoff_base(&g->hand, mhd_fd, base) : -1;
}

/* ---------- the thread ---------- */

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
        clef_guard_conn_close(g, oldest_same, 0, "evicted", "closed for a newer connection from the same address (over --client-share)");
    else if (np >= g->cfg.max_pending && oldest)
        clef_guard_conn_close(g, oldest, 0, "evicted", "closed for a newer connection (over the pending-head limit)");
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
        clef_guard_pump(g, c, 0); /* the head may be there already */
    }
}

static void tick(clef_guard *g, double now) {
    for (size_t i = g->np; i-- > 0;) {
        if (i >= g->np) continue;
        conn *c = g->p[i];
        if (c->draining) {
            if (now - c->t0 > LINGER_TOTAL_S || now - c->drain_last > LINGER_IDLE_S) clef_guard_conn_close(g, c, 0, NULL, NULL);
        } else if (c->refusing || c->closing) {
            continue;
        } else if (c->phase == P_HEAD && c->head_started && !c->blocked && now - c->t0 > g->cfg.header_timeout_s) {
            if (c->seen) {
                char m[128];
                snprintf(m, sizeof m, "the request head did not arrive within %g s", g->cfg.header_timeout_s);
                clef_guard_refuse_at(c, c->nreq, 408, "RequestTimeout", m, NULL, 0);
            } else {
                clef_guard_refuse_at(c, c->nreq, 0, "header_timeout", "no request within the header timeout", NULL, 0);
            }
            clef_guard_pump(g, c, 0);
        } else if (g->cfg.keepalive_timeout_s > 0 && c->nreq && pending(c) && !c->head_started && !c->fwd &&
                   !c->out.len && now - c->t0 > g->cfg.keepalive_timeout_s) {
            clef_guard_conn_close(g, c, 0, NULL, NULL); /* idle past --keepalive-timeout */
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
                if (i < g->np && g->p[i]->draining) clef_guard_conn_close(g, g->p[i], 0, NULL, NULL);
            clef_guard_free_dead();
        }
        if (stop && (g->np == 0 || mono_now() > stop_until)) break;
        if ((quiesce || stop) && !g->quiesced) {
            if (g->listen_fd >= 0) {
                epoll_ctl(g->ep, EPOLL_CTL_DEL, g->listen_fd, NULL);
                close(g->listen_fd);
            }
            g->quiesced = 1;
            for (size_t i = g->np; i-- > 0;)
                if (i < g->np) clef_guard_pump(g, g->p[i], 0); /* those waiting for a head close now */
            clef_guard_free_dead();
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
                clef_guard_pump(g, c, sd->m ? 0 : evs[k].events);
            }
        }
        tick(g, mono_now());
        clef_guard_free_dead();
    }
    while (g->np) clef_guard_conn_close(g, g->p[g->np - 1], 0, NULL, NULL);
    clef_guard_free_dead();
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
    if (g->cfg.header_timeout_s <= 0) g->cfg.header_timeout_s = CLEF_GUARD_HEADER_TIMEOUT_DEFAULT;
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
