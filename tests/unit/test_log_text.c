/* clef serve's human log format (src/serve/log_text.c): the listening line, fields as key=value,
 * strings quoted only when they must be, nested values kept, hostile input and small buffers. */
#include <string.h>

#include "serve/log_text.h"
#include "test.h"

static const char *render(char *out, size_t cap, const char *level, const char *fields) {
    clef_log_text_render(out, cap, 3661.5, level, fields, strlen(fields)); /* 01:01:01 UTC */
    return out;
}

int main(void) {
    char b[512];
    CHECK_STR(render(b, sizeof b, "info", "\"event\":\"listening\",\"host\":\"127.0.0.1\",\"port\":8080"),
              "01:01:01 info  listening on http://127.0.0.1:8080\n");
    CHECK_STR(render(b, sizeof b, "info", "\"event\":\"listening\",\"host\":\"::1\",\"port\":0"),
              "01:01:01 info  listening on http://[::1]:0\n");
    CHECK_STR(render(b, sizeof b, "warn",
                     "\"event\":\"request\",\"method\":\"POST\",\"path\":\"/v1/decide\",\"status\":200,\"ms\":39.1,"
                     "\"ua\":\"curl 8.0\",\"q\":{\"a\":[1,2],\"b\":\"x,y\"}"),
              "01:01:01 warn  request method=POST path=/v1/decide status=200 ms=39.1 ua=\"curl 8.0\" "
              "q={\"a\":[1,2],\"b\":\"x,y\"}\n");
    CHECK_STR(render(b, sizeof b, "fatal", "\"event\":\"fatal\",\"message\":\"a \\\"quoted\\\" word\""),
              "01:01:01 fatal fatal message=\"a \\\"quoted\\\" word\"\n");
    CHECK_STR(render(b, sizeof b, "info", "not json at all"), "01:01:01 info   not json at all\n");
    CHECK_STR(render(b, sizeof b, "info", "\"event\":\"x\",\"k\""), "01:01:01 info  x \"k\"\n");
    CHECK_STR(render(b, sizeof b, "info", "\"event\":\"x\",\"s\":\"unterminated"), "01:01:01 info  x s=\"unterminated\n");
    /* a small buffer: cut with "...", terminated, never past cap */
    char small[24];
    memset(small, 'Z', sizeof small);
    size_t n = clef_log_text_render(small, sizeof small, 0, "info", "\"event\":\"request\",\"path\":\"/a/long/path\"", 40);
    CHECK(n < sizeof small && small[n] == 0 && strstr(small, "...") != NULL);
    CHECK(clef_log_text_render(small, 0, 0, "info", "", 0) == 0);
    CHECK(clef_log_text_render(small, 1, 0, "info", "", 0) == 0 && small[0] == 0);
    return TEST_END();
}
