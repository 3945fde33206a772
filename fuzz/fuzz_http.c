// libFuzzer target over the HTTP request path of `clef serve`, in-process: a real server (the guard,
// libmicrohttpd, the handlers, the prepare pool) listens on a loopback port inside the fuzzer's
// process, and every input is sent to it as the raw bytes of one connection (then the write side is
// closed and the answers read until the server closes). Also, the guard's pure head check and chunk
// walker run on the input directly. These must hold, or the target aborts:
//   - the server answers or closes within 5 s (no hang past its short timeouts; $CLEF_FUZZ_HANG_S sets
//     another limit, for runs at low priority on a loaded machine, where a valid request on the tiny
//     model can wait longer than that for a CPU); on a hang every thread's stack is printed (gdb
//     attached to the process) before the abort: what each of the server's threads waits on;
//   - an input may hold several requests (keep-alive, pipelining): what comes back is a sequence of
//     answers, each starting with "HTTP/1.1 NNN ", one status line in its head, framed by its
//     Content-Length (1xx, 204, 304 and answers to HEAD have no body), then the next answer or the
//     end; nothing in between (no interleaving) and nothing after the last;
//   - /health still answers 200 or 503 after every input (the server is alive and not locked out).
// Without $CLEF_FUZZ_MODEL the model routes answer 503 NotReady (fast: the HTTP side only); with
// CLEF_FUZZ_MODEL=models/tiny the tiny model is attached and valid requests run. Not part of the
// default build; tests/parity/test_fuzz_http_corpus.sh builds it and replays fuzz/corpus/http.
//
//   make build/gen/serve/web_assets.h
//   clang -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined -Iinclude -Isrc -Ibuild/gen \
//     $(pkg-config --cflags oniguruma libutf8proc libmicrohttpd libpng) fuzz/fuzz_http.c \
//     $(find src -name '*.c' -not -path 'src/cli/*' -not -path 'src/compute/cuda/*') \
//     $(pkg-config --libs oniguruma libutf8proc libmicrohttpd libpng libjpeg libwebp libwebpdemux libgif zlib \
//       libavformat libavcodec libswscale libavutil) \
//     -lm -pthread -o build/fuzz_http
//   mkdir -p build/fuzz-http && cp fuzz/corpus/http/* build/fuzz-http/
//   build/fuzz_http -max_len=65536 -max_total_time=600 -rss_limit_mb=4096 build/fuzz-http

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "clef.h"
#include "serve/http_guard.h"
#include "serve/server.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static clef_server *g_srv;
static int g_port;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    signal(SIGPIPE, SIG_IGN);
    clef_server_config c;
    clef_server_config_default(&c);
    c.port = 0;
    c.log_requests = 0;
    c.max_body = 1 << 16;
    c.max_header = 8192;
    c.io_timeout_s = 2;
    c.header_timeout_s = 1;
    c.body_timeout_s = 2;
    c.cors_origin = "http://fuzz.example";
    c.allowed_hosts = "x,localhost,.fuzz.example"; /* the corpus's "Host: x" reaches the routes; others the 421 */
    c.gzip_min = 64;
    char err[512];
    g_srv = clef_server_start(&c, err, sizeof err);
    if (!g_srv) {
        fprintf(stderr, "fuzz_http: %s\n", err);
        abort();
    }
    g_port = clef_server_port(g_srv);
    const char *model = getenv("CLEF_FUZZ_MODEL");
    if (model && *model) {
        clef_options o;
        clef_options_default(&o);
        o.model_dir = model;
        o.threads = 1;
        clef_engine *e = clef_open(&o, err, sizeof err);
        if (!e || clef_server_attach(g_srv, e) != 0) {
            fprintf(stderr, "fuzz_http: cannot attach %s: %s\n", model, err);
            abort();
        }
    }
    return 0;
}

/* One connection: send, half-close, read to the end (at most cap bytes kept). Returns bytes read,
 * or -1 when the server neither answered nor closed within limit_s. */
static long exchange(const uint8_t *data, size_t n, char *out, size_t cap, double limit_s) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) abort();
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)g_port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) abort();
    double t_end = now_s() + limit_s;
    size_t sent = 0;
    while (sent < n) { /* the server may answer and close early: a failed send ends the sending */
        ssize_t w = send(fd, data + sent, n - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) sent += (size_t)w;
        else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct pollfd p = {fd, POLLOUT, 0};
            if (poll(&p, 1, 50) < 0 || now_s() > t_end) break;
        } else break;
    }
    shutdown(fd, SHUT_WR);
    size_t got = 0;
    long rc = 0;
    for (;;) {
        double left = t_end - now_s();
        if (left <= 0) {
            rc = -1;
            break;
        }
        struct pollfd p = {fd, POLLIN, 0};
        int pr = poll(&p, 1, (int)(left * 1000) + 1);
        if (pr <= 0) continue;
        char buf[4096];
        ssize_t r = recv(fd, buf, sizeof buf, 0);
        if (r <= 0) break; /* closed (or reset) */
        size_t k = (size_t)r < cap - got ? (size_t)r : cap - got;
        memcpy(out + got, buf, k);
        got += k;
    }
    close(fd);
    return rc < 0 ? -1 : (long)got;
}

/* A hang's evidence: every thread's stack (gdb attached to this process), before the abort. */
static void dump_threads(void) {
    char cmd[160];
    snprintf(cmd, sizeof cmd, "gdb -p %d -batch -nx -ex 'thread apply all bt' >&2 2>/dev/null", (int)getpid());
    if (system(cmd) != 0) fprintf(stderr, "fuzz_http: gdb could not dump the threads\n");
}

static int status_line(const char *p, size_t n) {
    return n >= 13 && !memcmp(p, "HTTP/1.1 ", 9) && p[9] >= '1' && p[9] <= '5' && p[10] >= '0' && p[10] <= '9' &&
           p[11] >= '0' && p[11] <= '9' && p[12] == ' ';
}

static void bad_answer(const char *why, const char *out, long n, size_t in_n) {
    fprintf(stderr, "fuzz_http: %s (%ld bytes answered to a %zu-byte input):\n%.*s\n", why, n, in_n,
            (int)(n > 600 ? 600 : n), out);
    abort();
}

/* The answers, one after the other; a truncated last one only when the buffer (cap) filled. */
static void check_answer(const char *out, long n, size_t cap, const uint8_t *in, size_t in_n) {
    size_t at = 0, len = (size_t)(n > 0 ? n : 0);
    while (at < len) {
        const char *p = out + at;
        size_t left = len - at;
        if (!status_line(p, left)) bad_answer("an answer does not start with one well-formed status line", out, n, in_n);
        const char *end = memmem(p, left, "\r\n\r\n", 4);
        if (!end) {
            if (len == cap) return;
            bad_answer("an answer's head does not end", out, n, in_n);
        }
        size_t hl = (size_t)(end + 4 - p);
        if (memmem(p + 1, hl - 1, "\nHTTP/1.", 8)) bad_answer("a second status line in an answer's head", out, n, in_n);
        int st = (p[9] - '0') * 100 + (p[10] - '0') * 10 + (p[11] - '0');
        const char *cl = memmem(p, hl, "Content-Length: ", 16);
        long body = cl ? strtol(cl + 16, NULL, 10) : -1;
        if (st < 200 || st == 204 || st == 304) body = 0;
        /* an answer to a HEAD (the input holds one): no body, then the next answer or the end */
        if (body > 0 && memmem(in, in_n, "HEAD", 4) && (left == hl || (left - hl >= 7 && !memcmp(p + hl, "HTTP/1.", 7))))
            body = 0;
        if (body < 0) return; /* no length: the rest is its body (until the close) */
        if ((size_t)body > left - hl) {
            if (len == cap) return;
            bad_answer("an answer shorter than its Content-Length", out, n, in_n);
        }
        at += hl + (size_t)body;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* the pure head check */
    size_t hl = 0;
    int st = 0;
    const char *ty = NULL;
    char msg[256];
    int rc = clef_guard_check_head((const char *)data, size, 8192, 1 << 16, &hl, &st, &ty, msg, sizeof msg);
    if (rc == 0 && (hl == 0 || hl > size)) abort();
    if (rc < 0 && (!ty || !msg[0])) abort();
    /* the chunk walker over what follows a passed head (or the whole input), in two pieces */
    {
        clef_chunk_state cs;
        memset(&cs, 0, sizeof cs);
        size_t off = rc == 0 ? hl : 0, half = (size - off) / 2, used = 0;
        int cr = clef_guard_chunk_walk(&cs, (const char *)data + off, half, 1024, &used, msg, sizeof msg);
        if (cr < -1 || cr > 1 || used > half || (cr < 0 && !msg[0])) abort();
        if (cr == 0) {
            cr = clef_guard_chunk_walk(&cs, (const char *)data + off + half, size - off - half, 1024, &used, msg, sizeof msg);
            if (cr < -1 || cr > 1 || used > size - off - half) abort();
        }
    }
    /* through the server */
    static char out[1 << 16];
    static double hang_s;
    if (hang_s == 0) {
        const char *h = getenv("CLEF_FUZZ_HANG_S");
        hang_s = h && atof(h) >= 1 ? atof(h) : 5.0;
    }
    long n = exchange(data, size, out, sizeof out, hang_s);
    if (n < 0) {
        fprintf(stderr, "fuzz_http: no answer and no close within %.0f s for a %zu-byte input\n", hang_s, size);
        dump_threads();
        abort();
    }
    check_answer(out, n, sizeof out, data, size);
    static const uint8_t health[] = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    n = exchange(health, sizeof health - 1, out, sizeof out, hang_s);
    if (n < 13 || (memcmp(out, "HTTP/1.1 200 ", 13) && memcmp(out, "HTTP/1.1 503 ", 13))) {
        fprintf(stderr, "fuzz_http: /health did not answer after a %zu-byte input\n", size);
        if (n < 0) dump_threads();
        abort();
    }
    return 0;
}
