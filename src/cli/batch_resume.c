/* clef batch's resume decision: see batch_resume.h and the header of cmd_batch.c. */
#include "cli/batch_resume.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "base/json.h"
#include "base/sha256.h"

/* 0: not an answer line; 1: an answer; 2: an error line ({"error": ...}). */
static int answer_kind(const char *line, size_t len) {
    clef_err e;
    clef_err_clear(&e);
    json_doc *d = clef_json_parse(line, len, NULL, &e);
    if (!d) return 0;
    const json_value *root = clef_json_doc_root(d);
    int kind = 0;
    if (root && root->kind == JSON_OBJECT) {
        if (clef_json_object_get(root, "error")) kind = 2;
        else if (clef_json_object_get(root, "answers") && clef_json_object_get(root, "model")) kind = 1;
    }
    clef_json_doc_free(d);
    return kind;
}

int batch_is_answer(const char *line, size_t len) { return answer_kind(line, len) != 0; }

static void refuse(batch_decision *d, const batch_resume_in *in, const char *why) {
    snprintf(d->msg, sizeof d->msg, "%s: %s; nothing was changed. Use --restart to overwrite it, or another OUT",
             in->out_path, why);
    d->action = BATCH_REFUSE;
}

/* OUT's complete lines, each an answer no longer than line_max, read with pread (the offset is not
 * moved); the bytes before `limit` hashed into sha: the count of complete lines before limit, whether
 * limit is at a line's end (or 0). 0; 1 when a line is not an answer (d->msg set); -1 read error or
 * out of memory (d->msg set). */
static int scan_out(const batch_resume_in *in, batch_decision *d, uint64_t limit, clef_sha256 *sha, uint64_t *lines,
                    uint64_t *errors, int *at_line_end) {
    enum { CHUNK = 1 << 16 };
    char *buf = malloc(CHUNK);
    char *line = NULL;
    size_t cap = 0, len = 0; /* the line being read: len bytes seen, kept while len <= line_max */
    int too_long = 0, rc = 0;
    uint64_t off = 0, n = 0, before_limit = 0, errors_before_limit = 0;
    int kind = 0;
    char why[200];
    *at_line_end = limit == 0;
    if (!buf) {
        refuse(d, in, "out of memory");
        return -1;
    }
    for (;;) {
        ssize_t got = pread(in->out_fd, buf, CHUNK, (off_t)off);
        if (got < 0) {
            if (errno == EINTR) continue;
            snprintf(why, sizeof why, "cannot read it back: %s", strerror(errno));
            refuse(d, in, why);
            rc = -1;
            break;
        }
        if (got == 0) break; /* what follows the last '\n' (if anything) is the torn last line */
        if (off < limit) clef_sha256_update(sha, buf, (size_t)(limit - off < (uint64_t)got ? limit - off : (uint64_t)got));
        const char *p = buf, *e = buf + got;
        while (p < e) {
            const char *nl = memchr(p, '\n', (size_t)(e - p));
            size_t take = nl ? (size_t)(nl - p) : (size_t)(e - p);
            if (!too_long && len + take > in->line_max) too_long = 1;
            if (!too_long) {
                if (len + take + 1 > cap) { /* never NULL once a line is read */
                    size_t nc = cap ? cap : 4096;
                    while (nc < len + take + 1) nc *= 2;
                    char *q = realloc(line, nc);
                    if (!q) {
                        refuse(d, in, "out of memory");
                        rc = -1;
                        goto out;
                    }
                    line = q;
                    cap = nc;
                }
                memcpy(line + len, p, take);
            }
            len += take;
            p += take;
            if (!nl) break;
            p++; /* the '\n' */
            if (too_long || !(kind = answer_kind(line, len))) {
                snprintf(why, sizeof why, "line %llu is not an answer clef batch writes", (unsigned long long)(n + 1));
                refuse(d, in, why);
                rc = 1;
                goto out;
            }
            n++;
            uint64_t end = off + (uint64_t)(p - buf);
            if (end <= limit) {
                before_limit = n;
                errors_before_limit += kind == 2;
            }
            if (end == limit) *at_line_end = 1;
            len = 0;
            too_long = 0;
        }
        off += (uint64_t)got;
    }
out:
    free(buf);
    free(line);
    if (rc) return rc;
    *lines = before_limit;
    *errors = errors_before_limit;
    return 0;
}

/* The record's state line (what follows the identity): parsed, and 0 only when it is exactly the line
 * batch_state_render writes for the values it names. */
static int parse_state(const char *s, size_t n, uint64_t *lines, uint64_t *bytes, char hex[65]) {
    clef_err e;
    clef_err_clear(&e);
    if (n == 0 || s[n - 1] != '\n') return -1;
    json_doc *doc = clef_json_parse(s, n - 1, NULL, &e);
    if (!doc) return -1;
    const json_value *root = clef_json_doc_root(doc);
    const json_value *l = root ? clef_json_object_get(root, "out_lines") : NULL,
                     *b = root ? clef_json_object_get(root, "out_bytes") : NULL,
                     *h = root ? clef_json_object_get(root, "out_sha256") : NULL;
    int rc = -1;
    if (l && b && h && l->kind == JSON_INT && b->kind == JSON_INT && h->kind == JSON_STRING && h->u.string.len == 64 &&
        l->u.integer.digits[0] != '-' && b->u.integer.digits[0] != '-' && l->u.integer.len <= 19 &&
        b->u.integer.len <= 19) {
        *lines = strtoull(l->u.integer.digits, NULL, 10);
        *bytes = strtoull(b->u.integer.digits, NULL, 10);
        memcpy(hex, h->u.string.s, 64);
        hex[64] = 0;
        clef_buf again;
        clef_buf_init(&again);
        if (batch_state_render(&again, *lines, *bytes, hex) == 0 && again.len == n && !memcmp(again.data, s, n)) rc = 0;
        clef_buf_free(&again);
    }
    clef_json_doc_free(doc);
    return rc;
}

void batch_resume_decide(const batch_resume_in *in, batch_decision *d) {
    memset(d, 0, sizeof *d);
    clef_sha256_init(&d->out_sha);
    if (in->in_dev == in->out_dev && in->in_ino == in->out_ino) {
        snprintf(d->msg, sizeof d->msg, "%s and %s are the same file: the answers would overwrite the requests",
                 in->in_path, in->out_path);
        d->action = BATCH_REFUSE;
        return;
    }
    if (in->restart) {
        d->action = BATCH_RESTART;
        return;
    }
    if (in->out_size == 0) {
        d->action = BATCH_FRESH;
        return;
    }
    /* an OUT with something in it: resumed only when it is this IN's, with these settings, and its
     * first bytes are the ones the record vouches for */
    const char *why = NULL;
    uint64_t rec_lines = 0, rec_bytes = 0;
    char rec_hex[65];
    if (!in->rec || !in->rec_len) why = "it has no record ";
    else if (in->in_is_pipe) why = "IN is read from a pipe, which cannot be checked against the record ";
    else if (in->rec_len < in->want_len || memcmp(in->rec, in->want, in->want_len))
        why = "its record differs (another IN, or other settings, or an older clef's record) ";
    else if (parse_state(in->rec + in->want_len, in->rec_len - in->want_len, &rec_lines, &rec_bytes, rec_hex))
        why = "its record names no state of OUT it vouches for ";
    if (why) {
        snprintf(d->msg, sizeof d->msg,
                 "%s holds %lld bytes that are not answers to %s: %s%s%s; nothing was changed. Use --restart to "
                 "overwrite it, or another OUT",
                 in->out_path, (long long)in->out_size, in->in_path, why, in->rec && in->rec_len ? "in " : "",
                 in->rec_path);
        d->action = BATCH_REFUSE;
        return;
    }
    if (rec_bytes > in->out_size) {
        snprintf(d->msg, sizeof d->msg,
                 "%s: %s vouches for its first %llu bytes but it holds %llu: it was cut or replaced by something "
                 "other than clef batch; nothing was changed. Use --restart to overwrite it, or another OUT",
                 in->out_path, in->rec_path, (unsigned long long)rec_bytes, (unsigned long long)in->out_size);
        d->action = BATCH_REFUSE;
        return;
    }
    clef_sha256 sha;
    clef_sha256_init(&sha);
    uint64_t have = 0;
    int at_line_end = 0;
    uint64_t errors = 0;
    int rc = scan_out(in, d, rec_bytes, &sha, &have, &errors, &at_line_end);
    if (rc) return; /* refused, d->msg says why */
    clef_sha256 copy = sha;
    uint8_t dg[32];
    char hex[65];
    clef_sha256_final(&copy, dg);
    clef_sha256_to_hex(dg, hex);
    if (!at_line_end || have != rec_lines || strcmp(hex, rec_hex)) {
        snprintf(d->msg, sizeof d->msg,
                 "%s: its first %llu bytes are not the %llu answers %s vouches for (changed since it was written); "
                 "nothing was changed. Use --restart to overwrite it, or another OUT",
                 in->out_path, (unsigned long long)rec_bytes, (unsigned long long)rec_lines, in->rec_path);
        d->action = BATCH_REFUSE;
        return;
    }
    if (have > in->in_lines) {
        snprintf(d->msg, sizeof d->msg, "%s has %llu lines but %s only %llu: not its output (use --restart)",
                 in->out_path, (unsigned long long)have, in->in_path, (unsigned long long)in->in_lines);
        d->action = BATCH_REFUSE;
        return;
    }
    d->action = BATCH_RESUME;
    d->have = have;
    d->errors = errors;
    d->cut_at = rec_bytes;
    d->out_sha = sha;
    return;
}

int batch_resume_apply(int out_fd, const batch_decision *d) {
    if (d->action == BATCH_RESTART) return ftruncate(out_fd, 0) == 0 && lseek(out_fd, 0, SEEK_SET) >= 0 ? 0 : -1;
    if (d->action != BATCH_RESUME) return 0;
    struct stat st;
    if (fstat(out_fd, &st) != 0) return -1;
    if ((uint64_t)st.st_size != d->cut_at && ftruncate(out_fd, (off_t)d->cut_at) != 0) return -1;
    return lseek(out_fd, (off_t)d->cut_at, SEEK_SET) < 0 ? -1 : 0;
}

int batch_count_lines(int fd, uint64_t *lines, char hex[65]) {
    char *buf = malloc(1 << 16);
    if (!buf) return -1;
    clef_sha256 sha;
    clef_sha256_init(&sha);
    uint64_t n = 0;
    int last = '\n';
    for (;;) {
        ssize_t r = read(fd, buf, 1 << 16);
        if (r < 0) {
            if (errno == EINTR) continue;
            free(buf);
            return -1;
        }
        if (r == 0) break;
        clef_sha256_update(&sha, buf, (size_t)r);
        for (const char *p = buf, *e = buf + r; (p = memchr(p, '\n', (size_t)(e - p))); p++) n++;
        last = buf[r - 1];
    }
    free(buf);
    if (last != '\n') n++;
    uint8_t dg[32];
    clef_sha256_final(&sha, dg);
    clef_sha256_to_hex(dg, hex);
    *lines = n;
    return lseek(fd, 0, SEEK_SET) < 0 ? -1 : 0;
}

int batch_record_render(clef_buf *b, const char *in_hex, int max_length, int tile, const char *split, int text_only,
                        int allow_image_paths, const char *precision) {
    clef_buf_printf(b, "{\"clef_batch\":2,\"input_sha256\":");
    if (in_hex) clef_buf_printf(b, "\"%s\"", in_hex);
    else clef_buf_puts(b, "null");
    clef_buf_printf(b, ",\"max_length\":%d,\"tile\":%d,\"split\":\"%s\",\"text_only\":%s,\"allow_image_paths\":%s,"
                       "\"precision\":\"%s\"}\n",
                    max_length, tile, split, text_only ? "true" : "false", allow_image_paths ? "true" : "false",
                    precision);
    return b->oom ? -1 : 0;
}

int batch_state_render(clef_buf *b, uint64_t lines, uint64_t bytes, const char *hex) {
    clef_buf_printf(b, "{\"out_lines\":%llu,\"out_bytes\":%llu,\"out_sha256\":\"%.64s\"}\n", (unsigned long long)lines,
                    (unsigned long long)bytes, hex);
    return b->oom ? -1 : 0;
}

int batch_record_read(const char *path, clef_buf *b) {
    int rfd = open(path, O_RDONLY | O_CLOEXEC);
    if (rfd < 0) return 0;
    char buf[BATCH_RECORD_MAX];
    ssize_t r = read(rfd, buf, sizeof buf);
    close(rfd);
    if (r <= 0) return 0;
    if (clef_buf_put(b, buf, (size_t)r) != 0 || b->oom) return -1;
    return 1;
}
