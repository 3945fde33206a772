/* libFuzzer target for src/base/json.c and json_render.c: any input must parse or fail cleanly (no
 * crash, no leak, no UB), and an accepted document must be a fixed point of render: parse -> render -> parse -> render
 * gives the same bytes the second time (sorted and unsorted; a document with lone surrogates renders
 * to WTF-8, which is not UTF-8, so for those only determinism is checked). Not part of the default
 * build.
 *
 *   clang -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined -Isrc \
 *     fuzz/fuzz_json.c src/base/json.c src/base/json_render.c src/base/pyfmt.c src/base/utf8.c src/base/buf.c src/base/err.c \
 *     -lm -o /tmp/fuzz_json
 *   mkdir -p /tmp/fuzz_json_corpus && /tmp/fuzz_json -max_total_time=120 -max_len=4096 /tmp/fuzz_json_corpus
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "base/utf8.h"

static void render_twice(const json_value *root, int sort) {
    clef_buf a, b;
    clef_buf_init(&a);
    clef_buf_init(&b);
    if (clef_json_render(&a, root, sort)) abort();
    if (clef_json_has_lone_surrogate(root)) {
        /* the output holds WTF-8 surrogates, which are not UTF-8 (Python could not encode that str
         * either): it cannot be parsed back; check that rendering is deterministic instead */
        if (clef_json_render(&b, root, sort) || a.len != b.len || memcmp(a.data, b.data, a.len) != 0) abort();
        clef_buf_free(&a);
        clef_buf_free(&b);
        return;
    }
    clef_err err;
    json_doc *d2 = clef_json_parse(a.data, a.len, NULL, &err);
    if (!d2) {
        fprintf(stderr, "rendered output does not parse: %s\n%.*s\n", err.msg, (int)a.len, a.data);
        abort();
    }
    if (clef_json_render(&b, clef_json_doc_root(d2), sort)) abort();
    if (a.len != b.len || memcmp(a.data, b.data, a.len) != 0) {
        fprintf(stderr, "render not stable:\n%.*s\n%.*s\n", (int)a.len, a.data, (int)b.len, b.data);
        abort();
    }
    /* clef_json_has_lone_surrogate and truthiness must agree across the round trip */
    if (clef_json_has_lone_surrogate(root) != clef_json_has_lone_surrogate(clef_json_doc_root(d2))) abort();
    if (clef_json_truthy(root) != clef_json_truthy(clef_json_doc_root(d2))) abort();
    clef_json_doc_free(d2);
    clef_buf_free(&a);
    clef_buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    clef_err err;
    json_limits lim = {1 << 20, 64};
    json_doc *d = clef_json_parse((const char *)data, size, &lim, &err);
    if (!d) {
        if (!err.type) abort(); /* a failure always names its type */
        if (strcmp(err.type, CLEF_E_INVALID_UTF8) == 0 && utf8_valid((const char *)data, size)) abort();
        return 0;
    }
    if (!utf8_valid((const char *)data, size)) abort(); /* accepted bytes are UTF-8 */
    render_twice(clef_json_doc_root(d), 1);
    render_twice(clef_json_doc_root(d), 0);
    clef_json_doc_free(d);
    return 0;
}
