// libFuzzer target over `clef batch`'s resume decision (src/cli/batch_resume.c, the code cmd_batch.c
// runs): each input describes the files a run meets, they are made in a temporary folder, and the
// decision is taken and carried out on them as the CLI does (batch_record_read, batch_count_lines,
// batch_record_render, batch_resume_decide, batch_resume_apply). The input, read front to back:
//   byte 0, settings: bit 0 --restart; bit 1 a small cap on OUT's lines (the next byte B: 2B+1 bytes,
//     else BATCH_OUT_LINE_MAX); bits 2-3 OUT is its own file (0, 3), a hard link to IN (1), a symlink
//     to IN (2); bit 4 IN is a pipe; bits 5-7 the record OUT.clef-batch: 0 absent, 1 this run's
//     identity vouching for all of OUT's complete lines, 7 for its first M (M from the bytes after
//     OUT's end mark), 2 the record of 1 with one byte changed, 3 the bytes after OUT's end mark, 4
//     empty, 5 the record of 1 with a byte more, 6 the identity of other settings with the state of 1;
//   then IN: a byte N (N & 7 lines; 0x80: the last without '\n'), N bytes choosing each line (a valid
//     request for models/tiny, invalid ones, or raw bytes from the input);
//   then OUT, a program of bytes until 0xFF or the end: answer lines, error lines, junk lines, raw
//     bytes, newlines, long lines, NULs and invalid UTF-8, a torn answer (see out_op).
// These must hold, or the target aborts:
//   - OUT being IN (hard link, symlink) is refused, and IN keeps every byte whatever was decided;
//   - a resume only without --restart, from a file IN, with the record's identity this run's and its
//     state the true lines, bytes and sha256 of a prefix of OUT (modes 1 and 7), and every complete
//     line (no longer than the cap) an answer object ({"model","answers"} or {"error"}, checked here
//     apart from the code under test); conversely, such an OUT is resumed, not refused;
//   - the cut is exactly at the end of the prefix the record vouches for, keeps its lines (no more
//     than IN's), the decision's hash is that prefix's, and after it OUT holds exactly those bytes and
//     its offset is at their end;
//   - a refusal changes nothing; its message is one non-empty line that renders as a JSON string of
//     valid UTF-8 which parses back;
//   - --restart empties OUT, a fresh OUT stays empty; and ASan/UBSan/LeakSanitizer find nothing.
// $CLEF_FUZZ_BATCH_TRACE=1 prints each decision. Not part of the default build;
// tests/parity/test_fuzz_batch_corpus.sh builds it and replays fuzz/corpus/batch. Build and run (from
// the repository root):
//
//   clang -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -g -O1 -fsanitize=fuzzer,address,undefined \
//     -fno-sanitize-recover=undefined -Iinclude -Isrc fuzz/fuzz_batch.c src/cli/batch_resume.c src/base/buf.c \
//     src/base/err.c src/base/json.c src/base/json_render.c src/base/sha256.c src/base/utf8.c src/base/pyfmt.c -lm -o build/fuzz_batch
//   mkdir -p build/fuzz-batch && cp fuzz/corpus/batch/* build/fuzz-batch/
//   build/fuzz_batch -max_len=16384 -max_total_time=600 -rss_limit_mb=2048 build/fuzz-batch
//
// The second mode, -DCLEF_FUZZ_BATCH_RUN (see run_one at the end: the whole verb, cmd_batch, in-process
// on $CLEF_FUZZ_MODEL, models/tiny by default; each input run, rerun and resumed as a run killed
// after its record vouched for K lines and while it wrote more: IN keeps every byte, OUT holds one
// answer per IN line, the rerun changes nothing, the resume ends with the uninterrupted run's OUT, an
// OUT cut below what its record vouches for is refused unchanged; a hard link to IN as OUT is refused
// with --restart). Slow (the weights are
// loaded for every run: seconds an input); its inputs are fuzz/corpus/batch-run:
//
//   make build/gen/serve/web_assets.h
//   clang -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
//     -DCLEF_FUZZ_BATCH_RUN -Iinclude -Isrc -Ibuild/gen $(pkg-config --cflags oniguruma libutf8proc libmicrohttpd libpng) \
//     fuzz/fuzz_batch.c src/cli/batch_resume.c src/cli/cmd_batch.c src/cli/cli_opts.c \
//     $(find src -name '*.c' -not -path 'src/cli/*' -not -path 'src/compute/cuda/*') \
//     $(pkg-config --libs oniguruma libutf8proc libmicrohttpd libpng libjpeg libwebp libwebpdemux libgif zlib \
//       libavformat libavcodec libswscale libavutil) -lm -pthread -o build/fuzz_batch_run
//   mkdir -p build/fuzz-batch-run && cp fuzz/corpus/batch-run/* build/fuzz-batch-run/
//   CLEF_FUZZ_MODEL=models/tiny build/fuzz_batch_run -max_len=256 -max_total_time=600 -rss_limit_mb=4096 build/fuzz-batch-run

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/json.h"
#include "base/sha256.h"
#include "base/utf8.h"
#include "cli/batch_resume.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char g_dir[512], g_in[600], g_out[600], g_rec[600];
static int g_trace; /* $CLEF_FUZZ_BATCH_TRACE: each decision on stderr */
#ifdef CLEF_FUZZ_BATCH_RUN
#include "cli/cmds.h"
static const char *g_model; /* $CLEF_FUZZ_MODEL, models/tiny by default */
#endif

#define CHECK(c)                                                                                  \
    do {                                                                                          \
        if (!(c)) {                                                                               \
            fprintf(stderr, "fuzz_batch: invariant broken at %s:%d: %s\n", __FILE__, __LINE__, #c); \
            abort();                                                                              \
        }                                                                                         \
    } while (0)

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    g_trace = getenv("CLEF_FUZZ_BATCH_TRACE") != NULL;
    const char *t = getenv("TMPDIR");
    struct stat st;
    if (!t || !*t) t = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp";
    snprintf(g_dir, sizeof g_dir, "%s/fuzz-batch-XXXXXX", t);
    if (!mkdtemp(g_dir)) {
        perror("fuzz_batch: mkdtemp");
        exit(1);
    }
#ifdef CLEF_FUZZ_BATCH_RUN
    g_model = getenv("CLEF_FUZZ_MODEL");
    if (!g_model || !*g_model) g_model = "models/tiny";
#endif
    snprintf(g_in, sizeof g_in, "%s/in.jsonl", g_dir);
    snprintf(g_out, sizeof g_out, "%s/out.jsonl", g_dir);
    snprintf(g_rec, sizeof g_rec, "%s/out.jsonl.clef-batch", g_dir);
    return 0;
}

static void cleanup_files(void) {
    unlink(g_in);
    unlink(g_out);
    unlink(g_rec);
}

__attribute__((destructor)) static void remove_dir(void) {
    if (!g_dir[0]) return;
    cleanup_files();
    rmdir(g_dir);
}

typedef struct {
    const uint8_t *p;
    size_t n, i;
} cursor;

static int more(const cursor *c) { return c->i < c->n; }
static unsigned next(cursor *c) { return c->i < c->n ? c->p[c->i++] : 0; }

static void put(clef_buf *b, const void *p, size_t n) {
    clef_buf_put(b, p, n);
    CHECK(!b->oom);
}
static void puts_(clef_buf *b, const char *s) { put(b, s, strlen(s)); }

static const char *const IN_LINES[] = {
    ("{\"model\":\"clef-flash\",\"state\":\"line 0 is warm\",\"questions\":{\"hot\":{\"type\":\"noul\","
     "\"instructions\":\"Is it hot?\"}}}"),
    "{\"model\":\"clef-flash\",\"state\":\"it is cold\",\"questions\":{\"q\":{\"type\":\"noul\"}}}",
    "{\"model\":\"clef-flash\",\"state\":\"\",\"questions\":{}}",
    "{\"model\":\"clef-flash\"",
    "not json",
    "",
    "{\"state\":\"\\u00e9\xc3\xa9\",\"questions\":{\"q\":{\"type\":\"noul\"}}}",
};
#define N_IN_LINES (sizeof IN_LINES / sizeof IN_LINES[0])

static const char *const ANSWERS[] = {
    "{\"model\":\"clef-flash\",\"answers\":{\"hot\":{\"answer\":\"no\",\"p\":0.5}},\"input_tokens\":12}",
    "{\"model\":\"m\",\"answers\":{}}",
    "{\"answers\":[],\"model\":null}",
    " {\"model\":\"clef-flash\",\"answers\":1} ",
};
static const char *const ERRORS[] = {
    "{\"error\":{\"type\":\"RequestTooLong\",\"message\":\"line 2 is 3000 bytes; the limit is 2048 bytes (--max-line)\"}}",
    "{\"error\":{\"type\":\"InvalidRequest\",\"message\":\"bad\"}}",
    "{\"error\":null}",
};
static const char *const NEAR[] = {
    "{\"junk\":1}", "{\"model\":\"clef-flash\"}", "{\"answers\":{}}", "[1]", "\"error\"", "{\"error\":1,}",
    "{\"model\":\"m\",\"answers\":{}", "{\"err\\u006fr\":1}", "{\"error\":\"\xff\"}", "null",
};
#define N_OF(a) (sizeof a / sizeof a[0])

/* One step of OUT's program; 0 when OUT is finished. */
static int out_op(cursor *c, clef_buf *out) {
    unsigned op = next(c);
    if (op == 0xFF) return 0;
    unsigned k = op / 10;
    switch (op % 10) {
    case 0: puts_(out, ANSWERS[k % N_OF(ANSWERS)]), puts_(out, "\n"); break;
    case 1: puts_(out, ERRORS[k % N_OF(ERRORS)]), puts_(out, "\n"); break;
    case 2: puts_(out, NEAR[k % N_OF(NEAR)]), puts_(out, "\n"); break;
    case 3: { /* raw bytes from the input */
        size_t n = next(c);
        if (n > c->n - c->i) n = c->n - c->i;
        put(out, c->p + c->i, n);
        c->i += n;
        break;
    }
    case 4: puts_(out, "\n"); break;
    case 5: { /* a long answer line: 8B bytes of padding */
        size_t n = (size_t)next(c) * 8;
        puts_(out, "{\"model\":\"m\",\"answers\":{},\"pad\":\"");
        for (size_t i = 0; i < n; i++) put(out, "a", 1);
        puts_(out, "\"}\n");
        break;
    }
    case 6: put(out, "\0\xff\xc3(\xed\xa0\x80", 7); break; /* NUL, invalid UTF-8, a surrogate */
    case 7: { /* a torn answer: a prefix of one, no '\n' */
        const char *a = ANSWERS[k % N_OF(ANSWERS)];
        size_t n = next(c) % (strlen(a) + 1);
        put(out, a, n);
        break;
    }
    case 8: puts_(out, "\r\n"); break;
    case 9: { /* the same answer line k times */
        for (unsigned i = 0; i < k % 8 + 1; i++) puts_(out, ANSWERS[0]), puts_(out, "\n");
        break;
    }
    }
    return 1;
}

static int write_file(const char *path, const void *p, size_t n) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    const char *q = p;
    while (n) {
        ssize_t w = write(fd, q, n);
        if (w < 0) {
            close(fd);
            return -1;
        }
        q += w;
        n -= (size_t)w;
    }
    return close(fd);
}

/* The whole file at path, into b (reset first). */
static void read_file(const char *path, clef_buf *b) {
    clef_buf_reset(b);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    CHECK(fd >= 0);
    char tmp[8192];
    for (;;) {
        ssize_t r = read(fd, tmp, sizeof tmp);
        CHECK(r >= 0);
        if (r == 0) break;
        put(b, tmp, (size_t)r);
    }
    close(fd);
}

/* The oracle, apart from batch_is_answer: 1 for a JSON object with "model" and "answers", 2 for one
 * with "error" (an error line), else 0. */
static int oracle_answer(const char *s, size_t len) {
    clef_err e;
    clef_err_clear(&e);
    json_doc *d = clef_json_parse(s, len, NULL, &e);
    if (!d) return 0;
    const json_value *v = clef_json_doc_root(d);
    int ok = 0;
    if (v && v->kind == JSON_OBJECT) {
        int model = clef_json_object_getn(v, "model", 5) != NULL, answers = clef_json_object_getn(v, "answers", 7) != NULL,
            error = clef_json_object_getn(v, "error", 5) != NULL;
        ok = error ? 2 : model && answers;
    }
    clef_json_doc_free(d);
    return ok;
}

static void check_message(const char *msg) {
    size_t n = strlen(msg);
    CHECK(n > 0);
    CHECK(!memchr(msg, '\n', n));
    clef_buf j;
    clef_buf_init(&j);
    CHECK(clef_json_render_string_utf8(&j, msg, n) == 0 && !j.oom);
    CHECK(utf8_valid(j.data, j.len));
    clef_err e;
    clef_err_clear(&e);
    json_doc *d = clef_json_parse(j.data, j.len, NULL, &e);
    CHECK(d);
    const json_value *v = clef_json_doc_root(d);
    CHECK(v && v->kind == JSON_STRING);
    clef_json_doc_free(d);
    clef_buf_free(&j);
}

static int decide_one(const uint8_t *data, size_t size) {
    cursor c = {data, size, 0};
    unsigned s = next(&c);
    int restart = s & 1, pipe_in = (s >> 4) & 1, out_kind = (s >> 2) & 3, rec_mode = (s >> 5) & 7;
    size_t line_max = BATCH_OUT_LINE_MAX;
    if (s & 2) line_max = (size_t)next(&c) * 2 + 1;

    clef_buf in, out, raw_rec, want, rec, after;
    clef_buf_init(&in);
    clef_buf_init(&out);
    clef_buf_init(&raw_rec);
    clef_buf_init(&want);
    clef_buf_init(&rec);
    clef_buf_init(&after);

    /* IN */
    unsigned nin = next(&c);
    for (unsigned i = 0; i < (nin & 7); i++) {
        unsigned ch = next(&c);
        if (ch >= 0xF0) {
            size_t n = ch & 15;
            if (n > c.n - c.i) n = c.n - c.i;
            put(&in, c.p + c.i, n);
            c.i += n;
        } else {
            puts_(&in, IN_LINES[ch % N_IN_LINES]);
        }
        if (!((nin & 0x80) && i + 1 == (nin & 7))) puts_(&in, "\n");
    }
    /* OUT, then the raw record */
    while (more(&c) && out_op(&c, &out)) {
    }
    if (more(&c)) put(&raw_rec, c.p + c.i, c.n - c.i);

    cleanup_files();
    CHECK(write_file(g_in, in.data ? in.data : "", in.len) == 0);
    if (out_kind == 1) CHECK(link(g_in, g_out) == 0);
    else if (out_kind == 2) CHECK(symlink(g_in, g_out) == 0);
    else CHECK(write_file(g_out, out.data ? out.data : "", out.len) == 0);
    const clef_buf *out_before = out_kind == 1 || out_kind == 2 ? &in : &out;

    /* the run's side, as cmd_batch.c does it */
    int in_fd = open(g_in, O_RDONLY | O_CLOEXEC);
    CHECK(in_fd >= 0);
    struct stat in_st, out_st;
    CHECK(fstat(in_fd, &in_st) == 0);
    uint64_t in_lines = 0;
    char hex[65];
    CHECK(batch_count_lines(in_fd, &in_lines, hex) == 0);
    CHECK(batch_record_render(&want, pipe_in ? NULL : hex, 512, 448, "default", 0, 0, "f32") == 0);

    /* OUT's complete lines (answers or not): the prefix a record of mode 1 (all) or 7 (the first M)
     * vouches for */
    const char *ob = out_before->data ? out_before->data : "";
    size_t olen = out_before->len;
    uint64_t all_lines = 0;
    for (size_t a = 0; a < olen; a++) all_lines += ob[a] == '\n';
    uint64_t m = rec_mode == 7 && raw_rec.len ? (unsigned char)raw_rec.data[0] % (all_lines + 1) : all_lines;
    size_t m_end = 0;
    for (uint64_t k = 0; k < m; k++) m_end = (size_t)((const char *)memchr(ob + m_end, '\n', olen - m_end) - ob) + 1;
    char m_hex[65];
    clef_sha256_hex(ob, m_end, m_hex);
    clef_buf state, t;
    clef_buf_init(&state);
    clef_buf_init(&t);
    CHECK(batch_state_render(&state, m, m_end, m_hex) == 0);
    switch (rec_mode) {
    case 0: break;
    case 1: case 7: put(&t, want.data, want.len), put(&t, state.data, state.len); break;
    case 2: {
        put(&t, want.data, want.len), put(&t, state.data, state.len);
        size_t at = raw_rec.len ? (size_t)(unsigned char)raw_rec.data[0] % t.len : t.len / 2;
        t.data[at] ^= (char)(raw_rec.len > 1 && raw_rec.data[1] ? raw_rec.data[1] : 1);
        break;
    }
    case 3: put(&t, raw_rec.data ? raw_rec.data : "", raw_rec.len); break;
    case 4: break;
    case 5: put(&t, want.data, want.len), put(&t, state.data, state.len), puts_(&t, raw_rec.len ? "x" : "\n"); break;
    case 6:
        CHECK(batch_record_render(&t, pipe_in ? NULL : hex, 9000, 448, "default", 0, 0, "f32") == 0);
        put(&t, state.data, state.len);
        break;
    }
    if (rec_mode != 0) CHECK(write_file(g_rec, t.data ? t.data : "", t.len) == 0);
    clef_buf_free(&state);
    clef_buf_free(&t);

    int out_fd = open(g_out, O_RDWR | O_CLOEXEC);
    CHECK(out_fd >= 0);
    CHECK(fstat(out_fd, &out_st) == 0);
    int same = in_st.st_dev == out_st.st_dev && in_st.st_ino == out_st.st_ino;
    CHECK(same == (out_kind == 1 || out_kind == 2));
    CHECK((uint64_t)out_st.st_size == out_before->len);
    int had_rec = 0;
    if (!restart && out_st.st_size > 0) {
        had_rec = batch_record_read(g_rec, &rec);
        CHECK(had_rec >= 0);
    }
    batch_resume_in bi = {
        .in_path = g_in, .out_path = g_out, .rec_path = g_rec,
        .in_dev = in_st.st_dev, .in_ino = in_st.st_ino, .out_dev = out_st.st_dev, .out_ino = out_st.st_ino,
        .restart = restart, .in_is_pipe = pipe_in, .in_lines = in_lines,
        .out_fd = out_fd, .out_size = (uint64_t)out_st.st_size,
        .rec = rec.len ? rec.data : NULL, .rec_len = rec.len,
        .want = want.data, .want_len = want.len, .line_max = line_max,
    };
    batch_decision *d = malloc(sizeof *d);
    CHECK(d);
    batch_resume_decide(&bi, d);
    if (g_trace)
        fprintf(stderr, "fuzz_batch: %s have=%llu cut_at=%llu of %llu %s\n",
                (const char *[]){"fresh", "restart", "resume", "refuse"}[d->action & 3], (unsigned long long)d->have,
                (unsigned long long)d->cut_at, (unsigned long long)out_st.st_size, d->msg);

    /* the state, judged here apart from the code under test */
    int rec_match = rec_mode == 1 || rec_mode == 7; /* this run's identity and OUT's true prefix */
    int all_answers = 1;
    for (size_t a = 0; a < olen;) {
        const char *nl = memchr(ob + a, '\n', olen - a);
        if (!nl) break;
        size_t l = (size_t)(nl - (ob + a));
        if (l > line_max || !oracle_answer(ob + a, l)) {
            all_answers = 0;
            break;
        }
        a += l + 1;
    }

    if (same) CHECK(d->action == BATCH_REFUSE && strstr(d->msg, "same file"));
    switch (d->action) {
    case BATCH_FRESH: CHECK(!same && !restart && olen == 0); break;
    case BATCH_RESTART: CHECK(!same && restart); break;
    case BATCH_RESUME: {
        CHECK(!same && !restart && !pipe_in && olen > 0 && rec_match);
        CHECK(d->cut_at <= olen);
        CHECK(d->cut_at == 0 || ob[d->cut_at - 1] == '\n');
        uint64_t nls = 0;
        for (size_t a = 0; a < d->cut_at; a++) nls += ob[a] == '\n';
        CHECK(nls == d->have && d->have <= in_lines);
        CHECK(all_answers && d->have == m && d->cut_at == m_end);
        clef_sha256 cp = d->out_sha;
        uint8_t dg[32];
        char dhex[65];
        clef_sha256_final(&cp, dg);
        clef_sha256_to_hex(dg, dhex);
        CHECK(!strcmp(dhex, m_hex));
        break;
    }
    case BATCH_REFUSE: check_message(d->msg); break;
    default: CHECK(0);
    }
    /* a state that must be resumed */
    if (!same && !restart && !pipe_in && olen > 0 && rec_match && all_answers && m <= in_lines)
        CHECK(d->action == BATCH_RESUME);
    /* restart, resp. an empty OUT, never refused unless OUT is IN */
    if (!same && restart) CHECK(d->action == BATCH_RESTART);
    if (!same && !restart && olen == 0) CHECK(d->action == BATCH_FRESH);

    /* carried out as cmd_batch.c does (on whatever was decided: OUT is opened read-write even when it
     * is IN, so a wrong decision would cut IN) */
    CHECK(batch_resume_apply(out_fd, d) == 0);
    off_t pos = lseek(out_fd, 0, SEEK_CUR);
    read_file(g_in, &after);
    CHECK(after.len == in.len && (in.len == 0 || !memcmp(after.data, in.data, in.len)));
    read_file(g_out, &after);
    switch (d->action) {
    case BATCH_FRESH:
    case BATCH_RESTART: CHECK(after.len == 0 && pos == 0); break;
    case BATCH_RESUME:
        CHECK(after.len == d->cut_at && (after.len == 0 || !memcmp(after.data, ob, after.len)));
        CHECK(pos == (off_t)d->cut_at);
        break;
    case BATCH_REFUSE: CHECK(after.len == olen && (olen == 0 || !memcmp(after.data, ob, olen))); break;
    }

    free(d);
    close(out_fd);
    close(in_fd);
    cleanup_files();
    clef_buf_free(&in);
    clef_buf_free(&out);
    clef_buf_free(&raw_rec);
    clef_buf_free(&want);
    clef_buf_free(&rec);
    clef_buf_free(&after);
    return 0;
}

#ifdef CLEF_FUZZ_BATCH_RUN
/* The second mode (built with -DCLEF_FUZZ_BATCH_RUN): the whole verb, cmd_batch, in-process on the
 * model $CLEF_FUZZ_MODEL (models/tiny) over temporary files. Input: byte 0, settings (bit 0
 * --max-line 1024; bits 1-2 --max-batch 1, 2, 4 or 32; bit 3 also a run with OUT a hard link to IN
 * and --restart); byte 1 N (N & 7 lines; 0x80: the last without '\n'); N bytes choosing each line
 * (RUN_LINES, or raw bytes from the input); then two bytes X: where OUT is cut before the resume. */

static const char *const RUN_LINES[] = {
    ("{\"model\":\"clef-flash\",\"state\":\"line 0 is warm\",\"questions\":{\"hot\":{\"type\":\"noul\","
     "\"instructions\":\"Is it hot?\"}}}"),
    "{\"model\":\"clef-flash\",\"state\":\"it is cold\",\"questions\":{\"q\":{\"type\":\"noul\"}}}",
    "{\"model\":\"clef-flash\",\"state\":\"\\u00e9t\xc3\xa9\",\"questions\":{\"a\":{\"type\":\"noul\"},\"b\":{\"type\":\"noul\"}}}",
    "{\"model\":\"clef-flash\",\"state\":\"x\",\"questions\":{}}",
    "{\"model\":\"clef-flash\"",
    "not json",
    "",
    "{\"model\":\"clef-flash\",\"state\":\"\xff\",\"questions\":{\"q\":{\"type\":\"noul\"}}}",
    "[]",
    "LONG", /* a valid request of 1500 bytes: over --max-line 1024 */
};
#define N_RUN_LINES (sizeof RUN_LINES / sizeof RUN_LINES[0])

/* cmd_batch with these options on g_in, out (--allow-errors unless `strict`); its stderr (progress,
 * the event line) to /dev/null. */
static int run_batch_as(const char *out, const char *max_line, const char *max_batch, int restart, int strict) {
    char *argv[16];
    int argc = 0;
    argv[argc++] = "batch";
    argv[argc++] = "--model";
    argv[argc++] = (char *)g_model;
    argv[argc++] = "--threads";
    argv[argc++] = "1";
    argv[argc++] = "--max-batch";
    argv[argc++] = (char *)max_batch;
    if (max_line) argv[argc++] = "--max-line", argv[argc++] = (char *)max_line;
    if (restart) argv[argc++] = "--restart";
    if (!strict) argv[argc++] = "--allow-errors";
    argv[argc++] = g_in;
    argv[argc++] = (char *)out;
    argv[argc] = NULL;
    fflush(stderr);
    int saved = dup(2), null = open("/dev/null", O_WRONLY | O_CLOEXEC);
    CHECK(saved >= 0 && null >= 0);
    dup2(null, 2);
    close(null);
    int rc = cmd_batch(argc, argv);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    return rc;
}

static int run_batch(const char *out, const char *max_line, const char *max_batch, int restart) {
    return run_batch_as(out, max_line, max_batch, restart, 0);
}

static int run_one(const uint8_t *data, size_t size) {
    cursor c = {data, size, 0};
    unsigned s = next(&c);
    const char *max_line = s & 1 ? "1024" : NULL;
    const char *const batches[] = {"1", "2", "4", "32"};
    const char *max_batch = batches[(s >> 1) & 3];
    clef_buf in, first, after;
    clef_buf_init(&in);
    clef_buf_init(&first);
    clef_buf_init(&after);
    unsigned nin = next(&c);
    for (unsigned i = 0; i < (nin & 7); i++) {
        unsigned ch = next(&c);
        if (ch >= 0xF0) {
            size_t n = ch & 15;
            if (n > c.n - c.i) n = c.n - c.i;
            put(&in, c.p + c.i, n);
            c.i += n;
        } else if (!strcmp(RUN_LINES[ch % N_RUN_LINES], "LONG")) {
            puts_(&in, "{\"model\":\"clef-flash\",\"state\":\"");
            for (int k = 0; k < 1500; k++) put(&in, "w", 1);
            puts_(&in, "\",\"questions\":{\"q\":{\"type\":\"noul\"}}}");
        } else {
            puts_(&in, RUN_LINES[ch % N_RUN_LINES]);
        }
        if (!((nin & 0x80) && i + 1 == (nin & 7))) puts_(&in, "\n");
    }
    unsigned x = next(&c);
    x = x << 8 | next(&c);

    cleanup_files();
    CHECK(write_file(g_in, in.data ? in.data : "", in.len) == 0);
    int fd = open(g_in, O_RDONLY | O_CLOEXEC);
    CHECK(fd >= 0);
    uint64_t in_lines = 0;
    char hex[65];
    CHECK(batch_count_lines(fd, &in_lines, hex) == 0);
    close(fd);

    /* an uninterrupted run: one answer line per IN line, IN untouched; exit 1 when OUT holds error
     * lines (without --allow-errors), else 0 */
    int first_rc = run_batch_as(g_out, max_line, max_batch, 0, 1);
    CHECK(first_rc == 0 || first_rc == 1);
    read_file(g_in, &after);
    CHECK(after.len == in.len && (in.len == 0 || !memcmp(after.data, in.data, in.len)));
    read_file(g_out, &first);
    uint64_t lines = 0, errors = 0;
    for (size_t a = 0; a < first.len;) {
        const char *nl = memchr(first.data + a, '\n', first.len - a);
        CHECK(nl); /* OUT ends with '\n' */
        size_t l = (size_t)(nl - (first.data + a));
        int kind = oracle_answer(first.data + a, l);
        CHECK(kind);
        errors += kind == 2;
        lines++;
        a += l + 1;
    }
    CHECK(lines == in_lines);
    CHECK(first_rc == (errors > 0));
    /* a rerun: nothing to do, OUT unchanged; the kept error lines still count */
    CHECK(run_batch_as(g_out, max_line, max_batch, 0, 1) == (errors > 0));
    read_file(g_out, &after);
    CHECK(after.len == first.len && (first.len == 0 || !memcmp(after.data, first.data, first.len)));
    /* killed after its record vouched for the first K lines, while it wrote more (cut at byte X at or
     * after them): the resume ends with the same OUT */
    uint64_t k = lines ? x % (lines + 1) : 0;
    size_t k_end = 0;
    for (uint64_t i = 0; i < k; i++) k_end = (size_t)((const char *)memchr(first.data + k_end, '\n', first.len - k_end) - first.data) + 1;
    size_t cut = k_end + (size_t)(x >> 4) % (first.len - k_end + 1);
    clef_buf rec;
    clef_buf_init(&rec);
    read_file(g_rec, &rec);
    const char *nl = rec.len ? memchr(rec.data, '\n', rec.len) : NULL;
    CHECK(nl);
    rec.len = (size_t)(nl - rec.data) + 1; /* the identity line */
    char k_hex[65];
    clef_sha256_hex(first.data ? first.data : "", k_end, k_hex);
    CHECK(batch_state_render(&rec, k, k_end, k_hex) == 0);
    CHECK(write_file(g_rec, rec.data, rec.len) == 0);
    CHECK(truncate(g_out, (off_t)cut) == 0);
    CHECK(run_batch(g_out, max_line, max_batch, 0) == 0);
    read_file(g_out, &after);
    CHECK(after.len == first.len && (first.len == 0 || !memcmp(after.data, first.data, first.len)));
    read_file(g_in, &after);
    CHECK(after.len == in.len && (in.len == 0 || !memcmp(after.data, in.data, in.len)));
    /* cut below what its (rewritten, complete) record vouches for: refused, OUT unchanged */
    if (first.len > 1) { /* not to 0 bytes: an empty OUT is a fresh start */
        size_t below = 1 + (size_t)x % (first.len - 1);
        CHECK(truncate(g_out, (off_t)below) == 0);
        CHECK(run_batch(g_out, max_line, max_batch, 0) == 2);
        read_file(g_out, &after);
        CHECK(after.len == below && !memcmp(after.data, first.data, below));
    }
    clef_buf_free(&rec);
    if (s & 8) { /* OUT a hard link to IN, --restart: refused, IN keeps every byte */
        char link_path[700];
        snprintf(link_path, sizeof link_path, "%s/link.jsonl", g_dir);
        unlink(link_path);
        CHECK(link(g_in, link_path) == 0);
        CHECK(run_batch(link_path, max_line, max_batch, 1) == 2);
        read_file(g_in, &after);
        CHECK(after.len == in.len && (in.len == 0 || !memcmp(after.data, in.data, in.len)));
        unlink(link_path);
        char rec_path[720];
        snprintf(rec_path, sizeof rec_path, "%s.clef-batch", link_path);
        unlink(rec_path);
    }
    cleanup_files();
    clef_buf_free(&in);
    clef_buf_free(&first);
    clef_buf_free(&after);
    return 0;
}
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
#ifdef CLEF_FUZZ_BATCH_RUN
    (void)decide_one;
    return run_one(data, size);
#else
    return decide_one(data, size);
#endif
}
