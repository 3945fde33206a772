/* The guard's strict request-head check (clef_guard_check_head, src/serve/http_guard.c), the request
 * id rules, the bearer compare and Accept-Encoding parsing: pure functions, no sockets. */
#include <stdlib.h>
#include <string.h>

#include "serve/http_extras.h"
#include "serve/http_guard.h"
#include "serve/request_id.h"
#include "test.h"

static int head(const char *s, int *status, const char **type) {
    size_t hl = 0;
    char msg[256];
    *status = -1;
    *type = NULL;
    return clef_guard_check_head(s, strlen(s), 8192, 1000, &hl, status, type, msg, sizeof msg);
}

#define PASS(s) do { int st_; const char *ty_; CHECK_MSG(head(s, &st_, &ty_) == 0, "%s", s); } while (0)
#define WAIT(s) do { int st_; const char *ty_; CHECK_MSG(head(s, &st_, &ty_) == 1, "%s", s); } while (0)
#define REFUSE(s, want) do { int st_; const char *ty_; int rc_ = head(s, &st_, &ty_); \
    CHECK_MSG(rc_ == -1 && st_ == (want), "%s: rc %d status %d", s, rc_, st_); } while (0)

int main(void) {
    PASS("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    PASS("GET /health HTTP/1.0\r\n\r\n");
    PASS("\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n");
    PASS("POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\n\r\n{}");
    PASS("POST /v1/systemone HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n");
    PASS("POST /v1/systemone HTTP/1.1\r\nContent-Length:   7  \r\n\r\n");
    PASS("OPTIONS /v1/systemone HTTP/1.1\r\nOrigin: http://a\r\n\r\n");
    WAIT("GET /health HTT");
    WAIT("GET /health HTTP/1.1\r\nHost: x\r\n");
    WAIT("P");
    /* garbage and TLS: closed without an answer */
    REFUSE("\x16\x03\x01\x02\x00", 0);
    REFUSE("\x80\x01", 0);
    REFUSE(" GET / HTTP/1.1\r\n\r\n", 0);
    /* request line */
    REFUSE("GARBAGE\r\n\r\n", 400);
    REFUSE("X\",\"event\":\"forged /nope HTTP/1.1\r\n\r\n", 400);
    REFUSE("GET /a b HTTP/1.1\r\n\r\n", 400);
    REFUSE("GET / HTTP/2.0\r\n\r\n", 505);
    REFUSE("GET / HTTP/1.1\n\n", 400);
    REFUSE("GET / HTTP/1.1\r\nHost: x\nX: y\r\n\r\n", 400);
    REFUSE("GET / HTTP/1.1\r\nX: a\x01b\r\n\r\n", 400);
    /* headers */
    REFUSE("POST / HTTP/1.1\r\nContent-Length : 5\r\n\r\nhello", 400);
    REFUSE("GET / HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n", 400);
    REFUSE("GET / HTTP/1.1\r\n: x\r\n\r\n", 400);
    REFUSE("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400);
    /* framing */
    REFUSE("POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 501);
    REFUSE("POST / HTTP/1.1\r\nTransfer-Encoding: identity\r\n\r\n", 501);
    REFUSE("POST / HTTP/1.1\r\nTransfer-Encoding: chunked, identity\r\n\r\n", 501);
    REFUSE("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 400);
    REFUSE("POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", 400);
    REFUSE("POST / HTTP/1.1\r\nHost: x\r\n\r\n{}", 411);
    REFUSE("PUT / HTTP/1.1\r\n\r\n", 411);
    REFUSE("POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400);
    REFUSE("POST / HTTP/1.1\r\nContent-Length: +5\r\n\r\n", 400);
    REFUSE("POST / HTTP/1.1\r\nContent-Length: 0x10\r\n\r\n", 400);
    REFUSE("POST / HTTP/1.1\r\nContent-Length: 5, 5\r\n\r\n", 400);
    REFUSE("POST / HTTP/1.1\r\nContent-Length: 100000000000000000000000\r\n\r\n", 400);
    REFUSE("POST / HTTP/1.1\r\nContent-Length:\r\n\r\n", 400);
    REFUSE("POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", 400);
    REFUSE("POST / HTTP/1.1\r\nContent-Length: 1001\r\n\r\n", 413);
    REFUSE("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400);
    {
        char *big = malloc(12000);
        strcpy(big, "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;");
        size_t n = strlen(big);
        memset(big + n, 'a', 5000);
        big[n + 5000] = 0;
        REFUSE(big, 400);
        strcpy(big, "GET / HTTP/1.1\r\nX: ");
        n = strlen(big);
        memset(big + n, 'a', 9000);
        big[n + 9000] = 0;
        REFUSE(big, 431);
        free(big);
    }
    /* request ids */
    char id[33], id2[33];
    clef_request_id_new(id);
    clef_request_id_new(id2);
    CHECK(strlen(id) == 32 && strcmp(id, id2) != 0);
    CHECK(clef_request_id_sane(id));
    CHECK(clef_request_id_sane("client-id_1.2:3"));
    CHECK(!clef_request_id_sane(""));
    CHECK(!clef_request_id_sane("a\",\"event\":\"x"));
    CHECK(!clef_request_id_sane("a b"));
    char long_id[80];
    memset(long_id, 'a', 65);
    long_id[65] = 0;
    CHECK(!clef_request_id_sane(long_id));
    long_id[64] = 0;
    CHECK(clef_request_id_sane(long_id));
    /* bearer */
    CHECK(clef_bearer_ok("Bearer k3y", "k3y"));
    CHECK(clef_bearer_ok("bearer k3y", "k3y"));
    CHECK(!clef_bearer_ok("Bearer k3", "k3y"));
    CHECK(!clef_bearer_ok("Bearer k3yy", "k3y"));
    CHECK(!clef_bearer_ok("Basic k3y", "k3y"));
    CHECK(!clef_bearer_ok(NULL, "k3y"));
    /* Accept-Encoding */
    CHECK(clef_accepts_gzip("gzip"));
    CHECK(clef_accepts_gzip("deflate, gzip;q=0.5"));
    CHECK(clef_accepts_gzip("*"));
    CHECK(!clef_accepts_gzip("gzip;q=0"));
    CHECK(!clef_accepts_gzip("identity"));
    CHECK(!clef_accepts_gzip("xgzip"));
    CHECK(!clef_accepts_gzip(NULL));
    return TEST_END();
}
