#include "base/mapfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int clef_mapfile_open(clef_mapfile *m, const char *path, clef_err *err) {
    m->data = NULL;
    m->size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return clef_err_set(err, CLEF_E_IO, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return clef_err_set(err, CLEF_E_IO, "cannot stat %s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return clef_err_set(err, CLEF_E_IO, "%s is not a regular file", path);
    }
    if (st.st_size < 0 || (uint64_t)st.st_size > (uint64_t)SIZE_MAX) {
        close(fd);
        return clef_err_set(err, CLEF_E_IO, "%s: size out of range", path);
    }
    size_t size = (size_t)st.st_size;
    if (size == 0) {
        close(fd);
        return 0;
    }
    void *p = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED) return clef_err_set(err, CLEF_E_IO, "cannot map %s: %s", path, strerror(e));
    m->data = p;
    m->size = size;
    return 0;
}

size_t clef_mapfile_release(const clef_mapfile *m, const void *p, size_t n) {
    if (!m || !m->data || !p || n == 0) return 0;
    uintptr_t base = (uintptr_t)m->data, a = (uintptr_t)p;
    if (a < base || a - base > m->size || n > m->size - (a - base)) return 0;
    long ps = sysconf(_SC_PAGESIZE);
    if (ps <= 0) return 0;
    uintptr_t pg = (uintptr_t)ps;
    uintptr_t lo = (a + pg - 1) / pg * pg, hi = (a + n) / pg * pg;
    if (hi <= lo) return 0;
    if (madvise((void *)lo, hi - lo, MADV_DONTNEED) != 0) return 0;
    return hi - lo;
}

void clef_mapfile_close(clef_mapfile *m) {
    if (!m) return;
    if (m->data && m->size) munmap((void *)m->data, m->size);
    m->data = NULL;
    m->size = 0;
}
