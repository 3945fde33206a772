/* The guard's HTTP/1.1 parsers, pure functions over bytes (no sockets, no state outside their
 * arguments), for the guard's relay (http_guard.c), the unit tests and the fuzzer: the strict
 * request-head check, what a head says about its body, the chunked-body walker and the walker of
 * libmicrohttpd's answers. Why strict, and what each refuses: docs/reliability.md. */
#ifndef CLEF_SERVE_HTTP_PARSE_H
#define CLEF_SERVE_HTTP_PARSE_H

#include <stddef.h>

/* The strict head check as a pure function (for the tests and the fuzzer): data[0..n) is what has
 * arrived. Returns 0: the head is complete and passes (*head_len set); 1: incomplete, wait for more;
 * -1: refuse (*status: 0 = close without an answer; else the status; *type and *msg describe it). */
int clef_guard_check_head(const char *data, size_t n, size_t max_header, size_t max_body, size_t *head_len,
                          int *status, const char **type, char *msg, size_t msg_len);

/* What a passed head says about its body: 0 none, 1 Content-Length (*cl), 2 chunked. head[0..n) is
 * a head clef_guard_check_head passed (n = its head_len). */
int clef_guard_head_body(const char *head, size_t n, unsigned long long *cl);

/* 1 when head[0..n) (a request head, maybe incomplete or refused: only its whole lines count) has an
 * Origin field that `allowed` (--cors-origin: an origin, or "*" for any) lets in; 0 otherwise or
 * when allowed is NULL. The first Origin field decides. */
int clef_guard_head_origin(const char *head, size_t n, const char *allowed);

/* A chunked body, walked as it arrives. Zero it before the body's first byte. */
typedef struct clef_chunk_state {
    int st;
    size_t line;              /* bytes of the current line */
    unsigned digits;          /* hex digits of the current size */
    int ext;                  /* past them, in the extensions */
    unsigned long long rem;   /* data bytes left in the current chunk */
    size_t trailers;          /* trailer bytes so far */
} clef_chunk_state;
#define CLEF_CHUNK_LINE_MAX 4096 /* a chunk-size line with its extensions; a trailer line */
/* data[0..n) follows what was walked before. Returns 1: the body ended (*used: bytes of data that
 * belong to it); 0: all n belong to it, more to come; -1: refuse with 400 (msg says why). Strict:
 * HEX[;ext]CRLF (1-16 digits, ext printable, the line at most CLEF_CHUNK_LINE_MAX), data, CRLF;
 * trailers "name:value" CRLF, at most max_trailer bytes. */
int clef_guard_chunk_walk(clef_chunk_state *s, const char *data, size_t n, size_t max_trailer, size_t *used,
                          char *msg, size_t msg_len);

/* libmicrohttpd's answers, walked as they pass (to know where each ends). Zero it at the start. */
typedef struct clef_resp_state {
    int st;                 /* 0 head, 1 body, 2 until close */
    int line_no;
    char line[96];          /* the current line's first bytes */
    size_t ll;              /* the current line's length */
    int status;
    int close;              /* the answer being walked says Connection: close */
    int ended_close;        /* the answer that just ended did */
    long long clen;         /* -1 until a Content-Length */
    unsigned long long rem;
    size_t head_bytes;
} clef_resp_state;
/* data[0..n) follows what was walked before; no_body: the answer being walked is to a HEAD.
 * Returns 1: a final answer (not 1xx) ended (*used: its bytes in data); 0: all n consumed; -1: not
 * an answer libmicrohttpd writes (a head over 64 KiB, no status line). */
int clef_guard_resp_walk(clef_resp_state *s, const char *data, size_t n, int no_body, size_t *used);

/* The length of the token (RFC 9110 tchar) that starts p[0..n), at most 32: a request's method. */
size_t clef_http_method_len(const char *p, size_t n);

#endif
