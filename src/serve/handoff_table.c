/* fd -> base with serials; see handoff_table.h. A linear scan: the table holds one entry per
 * connection with a request at libmicrohttpd (at most --max-connections). */
#include "serve/handoff_table.h"

#include <stdlib.h>

void clef_handoff_init(clef_handoff_table *t) {
    pthread_mutex_init(&t->mu, NULL);
    t->h = NULL;
    t->n = t->cap = 0;
    t->next = 0;
}

void clef_handoff_free(clef_handoff_table *t) {
    free(t->h);
    t->h = NULL;
    t->n = t->cap = 0;
    pthread_mutex_destroy(&t->mu);
}

static size_t find(const clef_handoff_table *t, int fd) {
    for (size_t i = 0; i < t->n; i++)
        if (t->h[i].fd == fd) return i;
    return (size_t)-1;
}

int clef_handoff_add(clef_handoff_table *t, int fd, unsigned base, unsigned long long *serial) {
    pthread_mutex_lock(&t->mu);
    size_t i = find(t, fd);
    if (i == (size_t)-1) {
        if (t->n == t->cap) {
            size_t nc = t->cap ? t->cap * 2 : 64;
            struct clef_handoff *nh = realloc(t->h, nc * sizeof *nh);
            if (!nh) {
                pthread_mutex_unlock(&t->mu);
                return -1;
            }
            t->h = nh;
            t->cap = nc;
        }
        i = t->n++;
    }
    t->h[i] = (struct clef_handoff){fd, base, ++t->next};
    *serial = t->next;
    pthread_mutex_unlock(&t->mu);
    return 0;
}

void clef_handoff_del(clef_handoff_table *t, int fd, unsigned long long serial) {
    pthread_mutex_lock(&t->mu);
    size_t i = find(t, fd);
    if (i != (size_t)-1 && t->h[i].serial == serial) t->h[i] = t->h[--t->n];
    pthread_mutex_unlock(&t->mu);
}

int clef_handoff_base(clef_handoff_table *t, int fd, unsigned *base) {
    pthread_mutex_lock(&t->mu);
    size_t i = find(t, fd);
    if (i != (size_t)-1) *base = t->h[i].base;
    pthread_mutex_unlock(&t->mu);
    return i != (size_t)-1 ? 0 : -1;
}
