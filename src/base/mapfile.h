/* A read-only, private memory mapping of a whole regular file (no copy: pages are faulted in from
 * the page cache on first touch). Errors are values (IoError naming the path). */
#ifndef CLEF_BASE_MAPFILE_H
#define CLEF_BASE_MAPFILE_H

#include <stddef.h>

#include "base/err.h"

typedef struct clef_mapfile {
    const unsigned char *data; /* NULL when size == 0 */
    size_t size;
} clef_mapfile;

/* Maps `path` (must be a regular file) with PROT_READ, MAP_PRIVATE. On failure returns -1, leaves
 * *m zeroed and sets err (IoError). */
int clef_mapfile_open(clef_mapfile *m, const char *path, clef_err *err);
/* Releases this process's pages of the whole pages inside [p, p + n) (which must lie in the
 * mapping), madvise(MADV_DONTNEED): RSS drops, and the next read of those bytes faults them back
 * in from the page cache (or the disk), unchanged — the mapping is a read-only MAP_PRIVATE map of
 * a file, so no page can hold private (written) data that this would discard. The partial pages
 * at both ends stay (they may hold other tensors). Returns the bytes released (0 when none, or on
 * an error: nothing is lost then, the pages simply stay). */
size_t clef_mapfile_release(const clef_mapfile *m, const void *p, size_t n);
/* Unmaps; safe on a zeroed or already-closed mapping. */
void clef_mapfile_close(clef_mapfile *m);

#endif
