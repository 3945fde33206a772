/* json_bridge: batch front end to the JSON and pyfmt code for tests/parity/test_json_cpython.py.
 *
 *   json_bridge MODE < lines > lines      (one result line per input line)
 *
 * Modes and their input lines:
 *   render           a JSON document -> json.dumps(json.loads(doc), sort_keys=True) (compact, raw UTF-8)
 *   render-unsorted  the same without sort_keys
 *   repr             a double as 16 hex digits (its IEEE bits) -> repr(x)
 *   round            "BITS NDIGITS" -> repr(round(x, ndigits))
 *   sum              "BITS BITS ..." (possibly empty) -> repr(sum(xs))
 * In the render modes a line starting with "#hex:" carries the document's bytes hex-encoded (for
 * documents with newlines or invalid UTF-8). Failures print {"error":{"type":T,"message":M}}. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/json.h"
#include "base/pyfmt.h"

static int hexdig(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static double bits_to_double(const char *s, char **end) {
    uint64_t u = strtoull(s, end, 16);
    double x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static void put_error(clef_buf *out, const char *type, const char *msg) {
    clef_buf_puts(out, "{\"error\":{\"type\":");
    clef_json_render_string(out, type, strlen(type));
    clef_buf_puts(out, ",\"message\":");
    clef_json_render_string(out, msg, strlen(msg));
    clef_buf_puts(out, "}}");
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: json_bridge render|render-unsorted|repr|round|sum < lines\n");
        return 2;
    }
    const char *mode = argv[1];
    int m_render = strcmp(mode, "render") == 0, m_unsorted = strcmp(mode, "render-unsorted") == 0;
    int m_repr = strcmp(mode, "repr") == 0, m_round = strcmp(mode, "round") == 0;
    int m_sum = strcmp(mode, "sum") == 0;
    if (!(m_render || m_unsorted || m_repr || m_round || m_sum)) {
        fprintf(stderr, "json_bridge: unknown mode %s\n", mode);
        return 2;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    clef_buf out, doc;
    clef_buf_init(&out);
    clef_buf_init(&doc);
    double *xs = NULL;
    size_t xcap = 0;
    while ((got = getline(&line, &cap, stdin)) >= 0) {
        size_t len = (size_t)got;
        if (len && line[len - 1] == '\n') line[--len] = '\0';
        clef_buf_reset(&out);
        char num[40];
        if (m_render || m_unsorted) {
            const char *text = line;
            size_t tlen = len;
            if (len >= 5 && memcmp(line, "#hex:", 5) == 0) {
                clef_buf_reset(&doc);
                for (size_t i = 5; i + 1 < len; i += 2)
                    clef_buf_putc(&doc, hexdig(line[i]) * 16 + hexdig(line[i + 1]));
                text = doc.data ? doc.data : "";
                tlen = doc.len;
            }
            clef_err err;
            json_doc *d = clef_json_parse(text, tlen, NULL, &err);
            if (!d) put_error(&out, err.type, err.msg);
            else {
                clef_json_render(&out, clef_json_doc_root(d), m_render);
                clef_json_doc_free(d);
            }
        } else if (m_repr) {
            clef_py_repr_double(bits_to_double(line, NULL), num);
            clef_buf_puts(&out, num);
        } else if (m_round) {
            char *end;
            double x = bits_to_double(line, &end);
            int nd = (int)strtol(end, NULL, 10);
            clef_py_repr_double(clef_py_round(x, nd), num);
            clef_buf_puts(&out, num);
        } else {
            size_t n = 0;
            char *q = line;
            for (;;) {
                while (*q == ' ') q++;
                if (!*q) break;
                if (n == xcap) {
                    xcap = xcap ? xcap * 2 : 64;
                    double *nx = realloc(xs, xcap * sizeof *nx);
                    if (!nx) { fprintf(stderr, "out of memory\n"); return 1; }
                    xs = nx;
                }
                xs[n++] = bits_to_double(q, &q);
            }
            clef_py_repr_double(clef_py_sum(xs, n), num);
            clef_buf_puts(&out, num);
        }
        if (out.oom) { fprintf(stderr, "out of memory\n"); return 1; }
        clef_buf_putc(&out, '\n');
        fwrite(out.data, 1, out.len, stdout);
    }
    free(line);
    free(xs);
    clef_buf_free(&out);
    clef_buf_free(&doc);
    return 0;
}
