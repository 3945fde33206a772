/* The guard's table of libmicrohttpd's socket ends it relays: fd -> the number of the client
 * connection's requests that came before this end (clef_guard_base). Thread-safe.
 *
 * An fd number is reused as soon as it is closed, and libmicrohttpd closes its end before the
 * guard lets go of the entry (the guard sees the EOF later). So an entry is added with a serial:
 * adding an fd already present replaces its entry (the old end is closed: its number now names the
 * new one), and a delete removes the entry only while the serial is still the one it was given. */
#ifndef CLEF_SERVE_HANDOFF_TABLE_H
#define CLEF_SERVE_HANDOFF_TABLE_H

#include <pthread.h>
#include <stddef.h>

typedef struct {
    pthread_mutex_t mu;
    struct clef_handoff { int fd; unsigned base; unsigned long long serial; } *h;
    size_t n, cap;
    unsigned long long next; /* the last serial given */
} clef_handoff_table;

void clef_handoff_init(clef_handoff_table *t);
void clef_handoff_free(clef_handoff_table *t);
/* Adds (or replaces) fd's entry; 0 and *serial set, -1 out of memory (the table unchanged). */
int clef_handoff_add(clef_handoff_table *t, int fd, unsigned base, unsigned long long *serial);
/* Removes fd's entry if it is still the one `serial` names. */
void clef_handoff_del(clef_handoff_table *t, int fd, unsigned long long serial);
/* fd's base: 0 found, -1 not. */
int clef_handoff_base(clef_handoff_table *t, int fd, unsigned *base);

#endif
