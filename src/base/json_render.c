/* JSON rendering with CPython's json.dumps semantics (json.h): strings escaped as ensure_ascii
 * does, floats as repr, keys sorted by code point when asked. Parsing: json.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "base/pyfmt.h"
#include "base/utf8.h"

/* The bytes of s, escaped as clef_json_render_string does, without the quotes. */
static int render_escaped(clef_buf *out, const char *s, size_t len) {
    static const char hex[] = "0123456789abcdef";
    const unsigned char *u = (const unsigned char *)s;
    if (clef_buf_reserve(out, len + 2)) return -1;
    size_t run = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = u[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        if (i > run) clef_buf_put(out, s + run, i - run);
        run = i + 1;
        char e[6] = {'\\', 0, 0, 0, 0, 0};
        int n = 2;
        switch (c) {
        case '"': e[1] = '"'; break;
        case '\\': e[1] = '\\'; break;
        case '\n': e[1] = 'n'; break;
        case '\r': e[1] = 'r'; break;
        case '\t': e[1] = 't'; break;
        case '\b': e[1] = 'b'; break;
        case '\f': e[1] = 'f'; break;
        default:
            e[1] = 'u'; e[2] = '0'; e[3] = '0'; e[4] = hex[c >> 4]; e[5] = hex[c & 15];
            n = 6;
        }
        clef_buf_put(out, e, (size_t)n);
    }
    if (len > run) clef_buf_put(out, s + run, len - run);
    return out->oom ? -1 : 0;
}

int clef_json_render_string(clef_buf *out, const char *s, size_t len) {
    clef_buf_putc(out, '"');
    render_escaped(out, s, len);
    return clef_buf_putc(out, '"');
}

int clef_json_render_string_utf8(clef_buf *out, const char *s, size_t len) {
    static const char hex[] = "0123456789abcdef";
    size_t i = 0;
    if (clef_buf_putc(out, '"')) return -1;
    while (i < len) {
        /* the longest valid run, escaped as clef_json_render_string does */
        size_t run = clef_utf8_valid_prefix(s + i, len - i);
        if (run) {
            if (render_escaped(out, s + i, run)) return -1;
            i += run;
            continue;
        }
        uint32_t cp;
        int k = clef_utf8_decode_wtf8(s + i, len - i, &cp);
        if (k == 3 && utf8_is_surrogate(cp)) {
            char e[6] = {'\\', 'u', hex[cp >> 12], hex[(cp >> 8) & 15], hex[(cp >> 4) & 15], hex[cp & 15]};
            clef_buf_put(out, e, sizeof e);
            i += 3;
        } else {
            clef_buf_put(out, "\xef\xbf\xbd", 3); /* U+FFFD for one invalid byte */
            i += 1;
        }
    }
    return clef_buf_putc(out, '"');
}

/* Python orders str keys by code point. UTF-8 byte order is code point order, and so is the
 * generalized form we keep lone surrogates in (U+D800..DFFF as ED A0..BF xx sorts after U+D7FF =
 * ED 9F BF and before U+E000 = EE 80 80 and every 4-byte sequence), so memcmp, then length, is exact. */
static int key_cmp(const void *a, const void *b) {
    const json_member *x = *(const json_member *const *)a, *y = *(const json_member *const *)b;
    size_t n = x->key_len < y->key_len ? x->key_len : y->key_len;
    int c = n ? memcmp(x->key, y->key, n) : 0;
    if (c) return c;
    return (x->key_len > y->key_len) - (x->key_len < y->key_len);
}

static int render_float(clef_buf *out, double x) {
    if (isnan(x)) return clef_buf_put(out, "NaN", 3);
    if (isinf(x)) return x < 0 ? clef_buf_put(out, "-Infinity", 9) : clef_buf_put(out, "Infinity", 8);
    char buf[40];
    int n = clef_py_repr_double(x, buf);
    return clef_buf_put(out, buf, (size_t)n);
}

int clef_json_render(clef_buf *out, const json_value *v, int sort_keys) {
    if (!v) return clef_buf_put(out, "null", 4);
    switch (v->kind) {
    case JSON_NULL: return clef_buf_put(out, "null", 4);
    case JSON_FALSE: return clef_buf_put(out, "false", 5);
    case JSON_TRUE: return clef_buf_put(out, "true", 4);
    case JSON_INT: return clef_buf_put(out, v->u.integer.digits, v->u.integer.len);
    case JSON_FLOAT: return render_float(out, v->u.number);
    case JSON_STRING: return clef_json_render_string(out, v->u.string.s, v->u.string.len);
    case JSON_ARRAY:
        clef_buf_putc(out, '[');
        for (size_t i = 0; i < v->u.array.n; i++) {
            if (i) clef_buf_putc(out, ',');
            if (clef_json_render(out, v->u.array.items[i], sort_keys)) return -1;
        }
        return clef_buf_putc(out, ']');
    case JSON_OBJECT: {
        size_t n = v->u.object.n;
        const json_member *small[16];
        const json_member **order = NULL;
        if (sort_keys && n > 1) {
            order = n <= 16 ? small : malloc(n * sizeof *order);
            if (!order) { out->oom = 1; return -1; }
            for (size_t i = 0; i < n; i++) order[i] = &v->u.object.members[i];
            qsort(order, n, sizeof *order, key_cmp);
        }
        int rc = clef_buf_putc(out, '{');
        for (size_t i = 0; i < n && rc == 0; i++) {
            const json_member *m = order ? order[i] : &v->u.object.members[i];
            if (i) clef_buf_putc(out, ',');
            clef_json_render_string(out, m->key, m->key_len);
            clef_buf_putc(out, ':');
            rc = clef_json_render(out, m->val, sort_keys);
        }
        if (order && order != small) free(order);
        if (rc) return -1;
        return clef_buf_putc(out, '}');
    }
    }
    return -1;
}

int clef_json_render_py(clef_buf *out, const json_value *v) {
    if (v && v->kind == JSON_STRING) return clef_buf_put(out, v->u.string.s, v->u.string.len);
    return clef_json_render(out, v, 1);
}

int clef_json_render_error(clef_buf *out, const char *type, const char *msg) {
    clef_buf_puts(out, "{\"error\":{\"type\":");
    clef_json_render_string_utf8(out, type, strlen(type));
    clef_buf_puts(out, ",\"message\":");
    clef_json_render_string_utf8(out, msg, strlen(msg));
    clef_buf_puts(out, "}}");
    return out->oom ? -1 : 0;
}
