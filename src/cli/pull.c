/* The release downloader (see pull.h). HTTP is libcurl's; this file only decides what to ask for,
 * where the bytes go and whether they are right. */
#include "cli/pull.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "base/json.h"
#include "base/sha256.h"
#include "cli/cli_opts.h"
#include "base/clock.h"

#define PULL_MAX_FILE_BYTES ((uint64_t)1 << 42) /* 4 TiB: a bound on what a manifest may claim */
#define PULL_MAX_FILES 4096

/* ---- manifest ---- */

static int name_ok(const char *s, size_t n) {
    if (n == 0 || n >= sizeof((pull_file *)0)->name || s[0] == '.') return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
              c == '-'))
            return 0;
    }
    return 1;
}

static int copy_str(char *dst, size_t cap, const json_value *v, const char *what, clef_err *err) {
    if (!v) return 0;
    if (v->kind != JSON_STRING || v->u.string.len >= cap || memchr(v->u.string.s, 0, v->u.string.len))
        return clef_err_set(err, PULL_E_MANIFEST, "manifest: \"%s\" must be a string under %zu bytes", what, cap);
    memcpy(dst, v->u.string.s, v->u.string.len + 1);
    return 0;
}

int pull_manifest_parse(const char *text, size_t len, pull_manifest *m, clef_err *err) {
    memset(m, 0, sizeof *m);
    clef_err jerr = {0};
    json_limits lim = {.max_bytes = (size_t)64 << 20, .max_depth = 16};
    json_doc *d = clef_json_parse(text, len, &lim, &jerr);
    if (!d) return clef_err_set(err, PULL_E_MANIFEST, "manifest is not JSON: %s", jerr.msg);
    const json_value *root = clef_json_doc_root(d), *files = clef_json_object_get(root, "files");
    int rc = -1;
    if (!root || root->kind != JSON_OBJECT) {
        clef_err_set(err, PULL_E_MANIFEST, "manifest: the top level must be an object");
        goto done;
    }
    if (copy_str(m->repository, sizeof m->repository, clef_json_object_get(root, "repository"), "repository", err) ||
        copy_str(m->revision, sizeof m->revision, clef_json_object_get(root, "revision"), "revision", err))
        goto done;
    if (!files || files->kind != JSON_OBJECT || files->u.object.n == 0 || files->u.object.n > PULL_MAX_FILES) {
        clef_err_set(err, PULL_E_MANIFEST, "manifest: \"files\" must be an object of 1 to %d entries", PULL_MAX_FILES);
        goto done;
    }
    m->files = calloc(files->u.object.n, sizeof *m->files);
    if (!m->files) {
        clef_err_set(err, CLEF_E_OOM, "out of memory reading the manifest");
        goto done;
    }
    for (size_t i = 0; i < files->u.object.n; i++) {
        const json_member *mem = &files->u.object.members[i];
        pull_file *f = &m->files[i];
        if (!name_ok(mem->key, mem->key_len)) {
            clef_err_set(err, PULL_E_MANIFEST,
                         "manifest: file name \"%.60s\" is not a plain name ([A-Za-z0-9._-], not starting with '.')",
                         mem->key);
            goto done;
        }
        memcpy(f->name, mem->key, mem->key_len + 1);
        const json_value *b = clef_json_object_get(mem->val, "bytes"), *h = clef_json_object_get(mem->val, "sha256");
        char *end = NULL;
        errno = 0;
        unsigned long long nb = b && b->kind == JSON_INT && b->u.integer.digits[0] != '-'
                                    ? strtoull(b->u.integer.digits, &end, 10)
                                    : 0;
        if (!end || *end || errno || nb > PULL_MAX_FILE_BYTES) {
            clef_err_set(err, PULL_E_MANIFEST, "manifest: %s: \"bytes\" must be an integer in [0, 2^42]", f->name);
            goto done;
        }
        f->bytes = nb;
        if (!h || h->kind != JSON_STRING || h->u.string.len != 64) {
            clef_err_set(err, PULL_E_MANIFEST, "manifest: %s: \"sha256\" must be 64 hex digits", f->name);
            goto done;
        }
        for (int k = 0; k < 64; k++) {
            char c = h->u.string.s[k];
            if (c >= 'A' && c <= 'F') c = (char)(c - 'A' + 'a');
            if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
                clef_err_set(err, PULL_E_MANIFEST, "manifest: %s: \"sha256\" must be 64 hex digits", f->name);
                goto done;
            }
            f->sha256[k] = c;
        }
        f->sha256[64] = 0;
        m->n++;
    }
    rc = 0;
done:
    clef_json_doc_free(d);
    if (rc) pull_manifest_free(m);
    return rc;
}

void pull_manifest_free(pull_manifest *m) {
    free(m->files);
    m->files = NULL;
    m->n = 0;
}

/* ---- paths and local files ---- */

static int paths(const pull_opts *o, const pull_file *f, char *final, char *part, clef_err *err) {
    int a = snprintf(final, PATH_MAX, "%s/%s", o->dir, f->name);
    int b = snprintf(part, PATH_MAX, "%s/.%s.part", o->dir, f->name);
    if (a < 0 || b < 0 || a >= PATH_MAX || b >= PATH_MAX)
        return clef_err_set(err, CLEF_E_IO, "%s/%s: path too long", o->dir, f->name);
    return 0;
}

static int io_error(clef_err *err, int e, const char *what, const char *path) {
    if (e == ENOSPC || e == EDQUOT)
        return clef_err_set(err, PULL_E_DISK_FULL, "no space left on the device %s %s (%s)", what, path, strerror(e));
    return clef_err_set(err, CLEF_E_IO, "%s %s: %s", what, path, strerror(e));
}

/* Adds the first n bytes of fd's file (read from offset 0) to s. */
static int hash_fd(int fd, uint64_t n, clef_sha256 *s, const char *path, clef_err *err) {
    static char buf[1 << 20];
    uint64_t off = 0;
    while (off < n) {
        size_t want = n - off < sizeof buf ? (size_t)(n - off) : sizeof buf;
        ssize_t r = pread(fd, buf, want, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return io_error(err, errno, "reading", path);
        if (r == 0) return clef_err_set(err, CLEF_E_IO, "reading %s: shorter than expected", path);
        clef_sha256_update(s, buf, (size_t)r);
        off += (uint64_t)r;
    }
    return 0;
}

/* 1 when path is itself (not through a symbolic link) a regular file of f's size and sha256; 0 when
 * not; -1 on a read error. */
static int file_verified(const char *path, const pull_file *f, clef_err *err) {
    struct stat st, fst;
    if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != f->bytes) return 0;
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return errno == ELOOP || errno == ENXIO ? 0 : io_error(err, errno, "opening", path);
    if (fstat(fd, &fst) != 0 || !S_ISREG(fst.st_mode) || fst.st_dev != st.st_dev || fst.st_ino != st.st_ino ||
        (uint64_t)fst.st_size != f->bytes) {
        close(fd);
        return 0; /* replaced between the two looks: not the file that was checked */
    }
    clef_sha256 s;
    clef_sha256_init(&s);
    int rc = hash_fd(fd, f->bytes, &s, path, err);
    close(fd);
    if (rc) return -1;
    uint8_t d[32];
    char hex[65];
    clef_sha256_final(&s, d);
    clef_sha256_to_hex(d, hex);
    return strcmp(hex, f->sha256) == 0;
}

uint64_t pull_bytes_needed(const pull_opts *o, const pull_file *f) {
    char final[PATH_MAX], part[PATH_MAX];
    if (paths(o, f, final, part, NULL)) return f->bytes;
    struct stat st;
    if (lstat(final, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size == f->bytes) return 0;
    if (lstat(part, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size <= f->bytes)
        return f->bytes - (uint64_t)st.st_size;
    return f->bytes;
}

int64_t pull_free_bytes(const char *dir) {
    struct statvfs v;
    if (statvfs(dir, &v) != 0) return -1;
    unsigned long long n = (unsigned long long)v.f_bavail * v.f_frsize;
    return n > INT64_MAX ? INT64_MAX : (int64_t)n;
}

/* ---- what a remote sends, printed ---- */

/* src's first n bytes as printable ASCII for a message: bytes 0x20-0x7e kept (a backslash doubled),
 * \n \r \t and every other byte (ESC, other controls, non-ASCII) written as escapes, so that no byte a
 * server chose reaches the terminal as a control; cut to cap - 1 characters ("..." when cut). */
static void printable(char *dst, size_t cap, const char *src, size_t n) {
    size_t o = 0;
    int cut = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)src[i];
        char e[8];
        if (c >= 0x20 && c < 0x7f && c != '\\') e[0] = (char)c, e[1] = 0;
        else if (c == '\\') snprintf(e, sizeof e, "\\\\");
        else if (c == '\n') snprintf(e, sizeof e, "\\n");
        else if (c == '\r') snprintf(e, sizeof e, "\\r");
        else if (c == '\t') snprintf(e, sizeof e, "\\t");
        else snprintf(e, sizeof e, "\\x%02x", c);
        size_t l = strlen(e);
        if (o + l + 4 > cap) {
            cut = 1;
            break;
        }
        memcpy(dst + o, e, l);
        o += l;
    }
    if (cut) memcpy(dst + o, "...", 3), o += 3;
    dst[o] = 0;
}

/* ---- the .part file ---- */

static const char *kind_of(mode_t m) {
    return S_ISLNK(m) ? "a symbolic link" : S_ISFIFO(m) ? "a FIFO" : S_ISCHR(m) ? "a character device" : S_ISBLK(m) ? "a block device"
         : S_ISSOCK(m) ? "a socket" : S_ISDIR(m) ? "a folder" : "not a regular file";
}

static int unsafe(clef_err *err, const char *path, const char *what) {
    return clef_err_set(err, PULL_E_UNSAFE,
                        "%s is %s, not a partial download clef pull made: nothing was written to it; remove it and run "
                        "clef pull again", path, what);
}

/* Opens the .part for appending: created here (O_EXCL), or one left by an earlier run that is a
 * regular file of this user with one link, opened without following a link and checked again on
 * the opened descriptor; locked (flock) so that two pulls into one folder do not write it at once.
 * Returns the descriptor, or -1 with err (UnsafePath for anything else at that name). */
static int part_open(const char *part, clef_err *err) {
    int fd = open(part, O_RDWR | O_APPEND | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0 && errno != EEXIST) return io_error(err, errno, "creating", part), -1;
    if (fd < 0) {
        struct stat ls;
        if (lstat(part, &ls) != 0) return io_error(err, errno, "reading", part), -1;
        if (!S_ISREG(ls.st_mode)) return unsafe(err, part, kind_of(ls.st_mode)), -1;
        /* O_NONBLOCK: were it swapped for a FIFO or a device since, the open does not wait on it */
        fd = open(part, O_RDWR | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0) {
            if (errno == ELOOP) return unsafe(err, part, "a symbolic link"), -1;
            if (errno == ENXIO) return unsafe(err, part, "a FIFO"), -1;
            return io_error(err, errno, "opening", part), -1;
        }
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return io_error(err, e, "reading", part), -1;
    }
    char why[96] = "";
    if (!S_ISREG(st.st_mode)) snprintf(why, sizeof why, "%s", kind_of(st.st_mode));
    else if (st.st_uid != geteuid()) snprintf(why, sizeof why, "a file of another user (uid %ld)", (long)st.st_uid);
    else if (st.st_nlink != 1)
        snprintf(why, sizeof why, "a file with %ld names (a hard link to a file elsewhere)", (long)st.st_nlink);
    if (why[0]) {
        close(fd);
        return unsafe(err, part, why), -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0 || flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        close(fd);
        if (e == EWOULDBLOCK)
            return clef_err_set(err, PULL_E_UNSAFE, "%s is being written by another clef pull into the same folder",
                                part), -1;
        return io_error(err, e, "locking", part), -1;
    }
    return fd;
}

/* 1 when path names, itself, the file open at fd. */
static int names_fd(const char *path, int fd) {
    struct stat a, b;
    return lstat(path, &a) == 0 && fstat(fd, &b) == 0 && S_ISREG(a.st_mode) && a.st_dev == b.st_dev &&
           a.st_ino == b.st_ino;
}

/* ---- one transfer ---- */

typedef struct xfer {
    const pull_opts *o;
    const pull_file *f;
    const char *part;
    CURL *curl;
    int fd;             /* the .part (part_open), open for the whole of pull_file_get */
    uint64_t have;      /* bytes in the .part, all hashed into sha */
    clef_sha256 sha;
    int started;        /* the first body byte of the final response was seen */
    long status;
    int write_errno;    /* set when a write failed: the transfer was aborted for it */
    int too_long;       /* the server sent more than f->bytes */
    char body[200];     /* the start of an error response, for the message */
    size_t body_len;
    cli_progress bar;
    char label[200];
    double t0, last_line;
    uint64_t at_start;  /* have when this transfer began (for the rate) */
    int last_decile;
} xfer;

static void show(xfer *x, int force) {
    const pull_file *f = x->f;
    double el = clef_now() - x->t0;
    double rate = el > 0 ? (double)(x->have - x->at_start) / el : 0;
    if (x->bar.tty) {
        char extra[96];
        snprintf(extra, sizeof extra, "%.1f/%.1f MB  %.1f MB/s", (double)x->have / 1e6, (double)f->bytes / 1e6,
                 rate / 1e6);
        cli_progress_draw(&x->bar, x->have, f->bytes, extra, force);
    } else if (x->o->log && f->bytes >= ((uint64_t)16 << 20)) {
        int decile = (int)(x->have * 10 / f->bytes);
        if (decile > x->last_decile && decile < 10) {
            x->last_decile = decile;
            fprintf(x->o->log, "pull: %s: %d%% (%.1f of %.1f MB, %.1f MB/s)\n", f->name, decile * 10,
                    (double)x->have / 1e6, (double)f->bytes / 1e6, rate / 1e6);
            fflush(x->o->log);
        }
    }
}

static size_t on_body(char *p, size_t size, size_t nmemb, void *ctx) {
    xfer *x = ctx;
    size_t n = size * nmemb;
    if (!x->started) {
        x->started = 1;
        curl_easy_getinfo(x->curl, CURLINFO_RESPONSE_CODE, &x->status);
        if (x->status == 200 && x->have > 0) {
            /* the server ignored the Range: the body starts at byte 0 */
            if (ftruncate(x->fd, 0) != 0) {
                x->write_errno = errno;
                return 0;
            }
            x->have = x->at_start = 0;
            clef_sha256_init(&x->sha);
        }
    }
    if (x->status != 200 && x->status != 206) { /* an error page: keep its start for the message */
        size_t k = sizeof x->body - 1 - x->body_len;
        if (k > n) k = n;
        memcpy(x->body + x->body_len, p, k);
        x->body_len += k;
        x->body[x->body_len] = 0;
        return n;
    }
    if (n > x->f->bytes - x->have) {
        x->too_long = 1;
        return 0;
    }
    for (size_t off = 0; off < n;) {
        ssize_t w = write(x->fd, p + off, n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            x->write_errno = w < 0 ? errno : EIO;
            return 0;
        }
        off += (size_t)w;
    }
    clef_sha256_update(&x->sha, p, n);
    x->have += n;
    show(x, 0);
    return n;
}

/* What a transfer's end means: 0 when the whole file came; else the error (write, size, network,
 * HTTP status), with *retry = 1 when another attempt may succeed. */
static int transfer_outcome(const xfer *x, CURLcode cr, long status, const char *url, const char *host,
                            const char *errtext, const char *bodytext, int *retry, clef_err *err) {
    const pull_file *f = x->f;
    if (x->write_errno) return io_error(err, x->write_errno, "writing", x->part);
    if (x->too_long)
        return clef_err_set(err, PULL_E_SIZE, "%s: the server sent more than the manifest's %" PRIu64 " bytes (%s)",
                            f->name, f->bytes, url);
    switch (cr) {
    case CURLE_OK:
        break;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_CONNECT:
        /* retried only after this file already got bytes in this run (a network that came and went) */
        *retry = x->have > 0;
        return clef_err_set(err, PULL_E_NO_NETWORK, "cannot reach %s for %s: %s (no network? check HF_ENDPOINT)",
                            host, f->name, errtext[0] ? errtext : curl_easy_strerror(cr));
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
        *retry = 1;
        return clef_err_set(err, PULL_E_DROPPED,
                            "%s: the connection dropped at %" PRIu64 " of %" PRIu64 " bytes (%s); "
                            "the partial file %s is kept: run clef pull again to resume",
                            f->name, x->have, f->bytes, errtext[0] ? errtext : curl_easy_strerror(cr), x->part);
    case CURLE_TOO_MANY_REDIRECTS:
        return clef_err_set(err, PULL_E_HTTP, "%s: too many redirects from %s", f->name, url);
    default:
        return clef_err_set(err, PULL_E_NETWORK, "%s: %s (%s)", f->name, errtext[0] ? errtext : curl_easy_strerror(cr),
                            url);
    }
    if (status == 404)
        return clef_err_set(err, PULL_E_NOT_FOUND,
                            "%s: not found (HTTP 404) at %s: is the repository, revision and file name right?", f->name,
                            url);
    if (status == 401 || status == 403)
        return clef_err_set(err, PULL_E_UNAUTHORIZED,
                            "%s: HTTP %ld at %s: the repository needs a token (set HF_TOKEN) or the token has no "
                            "access",
                            f->name, status, url);
    if (status == 416) /* nothing at or after our offset: the server's file is not longer than the .part */
        return clef_err_set(err, PULL_E_SIZE, "%s: the server has no bytes after %" PRIu64 " (HTTP 416), the manifest "
                            "says %" PRIu64 " bytes (%s)", f->name, x->have, f->bytes, url);
    if (status != 200 && status != 206)
        return clef_err_set(err, PULL_E_HTTP, "%s: HTTP %ld at %s%s%s", f->name, status, url,
                            x->body_len ? ": " : "", bodytext);
    if (x->have != f->bytes)
        return clef_err_set(err, PULL_E_SIZE, "%s: the server's file ended at %" PRIu64 " bytes, the manifest says %"
                            PRIu64 " (%s)", f->name, x->have, f->bytes, url);
    return 0;
}

/* Returns 0 when the .part holds f->bytes bytes (hashed into x->sha); else -1 with err, and *retry = 1
 * when another attempt may succeed (a dropped connection). */
static int transfer(xfer *x, int *retry, clef_err *err) {
    const pull_opts *o = x->o;
    const pull_file *f = x->f;
    *retry = 0;
    struct stat st;
    if (fstat(x->fd, &st) != 0) return io_error(err, errno, "reading", x->part);
    x->have = (uint64_t)st.st_size; /* what is on disk is hashed again, not what this run believes it wrote */
    clef_sha256_init(&x->sha);
    if (x->have > f->bytes) { /* longer than the file can be: start over */
        if (ftruncate(x->fd, 0) != 0) return io_error(err, errno, "truncating", x->part);
        x->have = 0;
    }
    if (x->have > 0 && hash_fd(x->fd, x->have, &x->sha, x->part, err)) return -1;
    if (x->have == f->bytes) return 0;

    char url[4096];
    const char *ep = o->endpoint;
    size_t el = strlen(ep);
    while (el > 0 && ep[el - 1] == '/') el--;
    int ul = snprintf(url, sizeof url, "%.*s/%s/resolve/%s/%s", (int)el, ep, o->repo, o->revision, f->name);
    if (ul < 0 || ul >= (int)sizeof url) {
        return clef_err_set(err, PULL_E_HTTP, "URL too long for %s", f->name);
    }
    CURL *c = curl_easy_init();
    if (!c) {
        return clef_err_set(err, CLEF_E_OOM, "curl_easy_init failed");
    }
    x->curl = c;
    struct curl_slist *hdr = NULL;
    char auth[1200];
    if (o->token && *o->token) {
        if (snprintf(auth, sizeof auth, "Authorization: Bearer %s", o->token) >= (int)sizeof auth) {
            curl_easy_cleanup(c);
            return clef_err_set(err, PULL_E_HTTP, "HF_TOKEN is too long");
        }
        struct curl_slist *h2 = curl_slist_append(hdr, auth);
        if (!h2) {
            curl_easy_cleanup(c);
            return clef_err_set(err, CLEF_E_OOM, "out of memory");
        }
        hdr = h2;
    }
    char range[64];
    snprintf(range, sizeof range, "%" PRIu64 "-", x->have);
    char errbuf[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
    /* custom Authorization headers are not sent to another host after a redirect (curl >= 7.58), and
     * CURLOPT_UNRESTRICTED_AUTH stays off: the hub's CDN URLs are signed and must not see the token */
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "clef/0.1.0 (+clef pull)");
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1024L); /* under 1 kB/s for 60 s: a stalled connection */
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, x);
    if (x->have > 0) curl_easy_setopt(c, CURLOPT_RANGE, range);

    x->started = 0;
    x->status = 0;
    x->write_errno = 0;
    x->too_long = 0;
    x->body_len = 0;
    x->body[0] = 0;
    x->t0 = clef_now();
    x->at_start = x->have;
    CURLcode cr = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    char host[256] = "";
    {
        const char *h = strstr(url, "://");
        h = h ? h + 3 : url;
        size_t hl = strcspn(h, "/");
        snprintf(host, sizeof host, "%.*s", (int)(hl < 200 ? hl : 200), h);
    }
    curl_slist_free_all(hdr);
    curl_easy_cleanup(c);
    x->curl = NULL;
    char errtext[2 * CURL_ERROR_SIZE], bodytext[160]; /* what the server chose, escaped for the terminal */
    printable(errtext, sizeof errtext, errbuf, strnlen(errbuf, sizeof errbuf));
    printable(bodytext, sizeof bodytext, x->body, x->body_len);
    if (fsync(x->fd) != 0 && !x->write_errno) x->write_errno = errno;
    show(x, 1);

    return transfer_outcome(x, cr, status, url, host, errtext, bodytext, retry, err);
}

/* The downloaded .part checked (the streamed hash, the bytes on disk read back, the size) and
 * renamed to its final name, safely (a name that changed under us is not followed). Closes x->fd.
 * 0, or -1 with err. */
static int verify_and_publish(const pull_opts *o, const pull_file *f, xfer *x, const char *final, const char *part,
                              clef_err *err) {
    uint8_t d[32];
    char hex[65], disk_hex[65];
    clef_sha256_final(&x->sha, d);
    clef_sha256_to_hex(d, hex);
    /* the file as it lies on disk (synced by transfer), read back through the same descriptor: what
     * the rename will publish, not the bytes as they streamed past */
    struct stat ps;
    clef_sha256 disk;
    clef_sha256_init(&disk);
    if (fstat(x->fd, &ps) != 0) {
        int e = errno;
        close(x->fd);
        return io_error(err, e, "reading", part);
    }
    if (hash_fd(x->fd, f->bytes, &disk, part, err) != 0) {
        close(x->fd);
        return -1;
    }
    clef_sha256_final(&disk, d);
    clef_sha256_to_hex(d, disk_hex);
    if (strcmp(hex, f->sha256) != 0 || strcmp(disk_hex, f->sha256) != 0 || (uint64_t)ps.st_size != f->bytes) {
        int removed = names_fd(part, x->fd) && unlink(part) == 0;
        close(x->fd);
        return clef_err_set(err, PULL_E_HASH,
                            "%s: sha256 %s (%s on disk, %" PRIu64 " bytes), the manifest says %s: the download is not "
                            "the release's file; %s",
                            f->name, hex, disk_hex, (uint64_t)ps.st_size, f->sha256,
                            removed ? "it was removed (nothing written under the final name)"
                                    : "remove the partial file by hand");
    }
    /* the name still the file checked, then renamed over whatever the final name was (a link there is
     * replaced, not followed), and the final name checked to be that file */
    if (!names_fd(part, x->fd)) {
        close(x->fd);
        return clef_err_set(err, PULL_E_UNSAFE, "%s was replaced while it was checked: nothing was renamed", part);
    }
    if (rename(part, final) != 0) {
        int e = errno;
        close(x->fd);
        return io_error(err, e, "renaming to", final);
    }
    if (!names_fd(final, x->fd)) {
        struct stat ls;
        if (lstat(final, &ls) == 0 && !S_ISREG(ls.st_mode)) unlink(final); /* never a link left as a release file */
        close(x->fd);
        return clef_err_set(err, PULL_E_UNSAFE, "%s was replaced right after the rename: it was removed", final);
    }
    close(x->fd);
    int dfd = open(o->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        (void)fsync(dfd); /* the rename itself durable; best effort (not every file system allows it) */
        close(dfd);
    }
    return 0;
}

int pull_file_get(const pull_opts *o, const pull_file *f, pull_stats *st, clef_err *err) {
    char final[PATH_MAX], part[PATH_MAX];
    if (paths(o, f, final, part, err)) return -1;
    FILE *log = o->log;
    struct stat sb;
    if (lstat(final, &sb) == 0) {
        int v = file_verified(final, f, err);
        if (v < 0) return -1;
        if (v) {
            if (log) fprintf(log, "pull: %s: present, size and sha256 verified\n", f->name);
            st->files_present++;
            return 0;
        }
        if (log)
            fprintf(log, "pull: %s: present but %s: fetching it again\n", f->name,
                    S_ISREG(sb.st_mode) ? "not the manifest's size and sha256"
                                        : "not a regular file (it is replaced, never followed)");
    }
    xfer x;
    memset(&x, 0, sizeof x);
    x.o = o;
    x.f = f;
    x.part = part;
    x.last_decile = 0;
    x.fd = part_open(part, err);
    if (x.fd < 0) return -1;
    snprintf(x.label, sizeof x.label, "%.120s", f->name);
    cli_progress_init(&x.bar, x.label);
    if (log && !x.bar.tty) {
        uint64_t need = pull_bytes_needed(o, f);
        if (need < f->bytes)
            fprintf(log, "pull: %s: resuming at %" PRIu64 " of %" PRIu64 " bytes\n", f->name, f->bytes - need, f->bytes);
        else
            fprintf(log, "pull: %s: fetching %" PRIu64 " bytes\n", f->name, f->bytes);
        fflush(log);
    }
    int attempt = 0;
    for (;;) {
        int retry = 0;
        uint64_t before = x.have;
        int rc = transfer(&x, &retry, err);
        if (x.have > before) st->bytes_fetched += x.have - before;
        if (rc == 0) break;
        cli_progress_end(&x.bar);
        if (!retry || attempt >= o->retries) {
            struct stat ps; /* an empty .part helps no later run: do not leave it behind */
            if (fstat(x.fd, &ps) == 0 && ps.st_size == 0 && names_fd(part, x.fd)) unlink(part);
            close(x.fd);
            return -1;
        }
        attempt++;
        unsigned delay_ms = attempt >= 6 ? 30000u : 500u << (attempt - 1);
        if (log) {
            fprintf(log, "pull: %s: %s; resuming in %.1f s (retry %d of %d)\n", f->name, err->type,
                    delay_ms / 1000.0, attempt, o->retries);
            fflush(log);
        }
        struct timespec ts = {delay_ms / 1000, (long)(delay_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        clef_err_clear(err);
    }
    cli_progress_end(&x.bar);
    if (verify_and_publish(o, f, &x, final, part, err) != 0) return -1;
    if (log) {
        fprintf(log, "pull: %s: %" PRIu64 " bytes, sha256 verified\n", f->name, f->bytes);
        fflush(log);
    }
    st->files_fetched++;
    return 0;
}

int pull_global_init(clef_err *err) {
    CURLcode c = curl_global_init(CURL_GLOBAL_DEFAULT);
    if (c != CURLE_OK) return clef_err_set(err, PULL_E_NETWORK, "curl_global_init: %s", curl_easy_strerror(c));
    return 0;
}

void pull_global_cleanup(void) { curl_global_cleanup(); }
