/* JSON with Python semantics: parse as CPython's json.loads, render as json.dumps.
 *
 * Why hand-written: no maintained C JSON library reproduces CPython exactly (arbitrary-precision
 * integers kept as digits, NaN/Infinity literals, duplicate keys keeping the last value at the first
 * key's position, lone surrogate escapes, repr() float formatting, code-point key sorting).
 * Spec: ../shared/spec/contract.md §5.
 *
 * Memory: a parsed document owns all its nodes (one arena); free it with clef_json_doc_free. Values can
 * also be built by hand with json_new_* on a doc (for tests and for building responses). */
#ifndef CLEF_BASE_JSON_H
#define CLEF_BASE_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"

typedef enum {
    JSON_NULL,
    JSON_FALSE,
    JSON_TRUE,
    JSON_INT,    /* exact integer, kept as canonical decimal digits */
    JSON_FLOAT,  /* a double (from a literal with . e E, or NaN / Infinity / -Infinity) */
    JSON_STRING,
    JSON_ARRAY,
    JSON_OBJECT,
} json_kind;

typedef struct json_value json_value;

typedef struct json_member {
    const char *key; /* UTF-8 (WTF-8 for lone surrogates, see below), NUL-terminated, may hold NULs */
    size_t key_len;
    json_value *val;
} json_member;

struct json_value {
    json_kind kind;
    union {
        struct { const char *digits; size_t len; } integer; /* "-123", "0"; never "-0", no leading zeros */
        double number;
        struct { const char *s; size_t len; } string;       /* NUL-terminated, may contain NUL bytes */
        struct { json_value **items; size_t n, cap; } array;   /* cap: allocated slots (internal) */
        struct { json_member *members; size_t n, cap; } object; /* insertion order, duplicate keys
                                                                  merged; cap as for arrays */
    } u;
};

/* Strings: the bytes are UTF-8. A \uD800-\uDFFF escape that is not part of a valid pair is kept as its
 * 3-byte generalized-UTF-8 form (ED A0 80 .. ED BF BF), exactly one code point, so the value survives
 * rendering; clef_json_has_lone_surrogate() finds them (the tokenizer refuses them: LoneSurrogate). */

typedef struct json_limits {
    size_t max_bytes;  /* 0 = no limit of ours on the input size */
    int max_depth;     /* nesting depth of arrays/objects; 0 = default (CLEF_JSON_DEFAULT_DEPTH) */
} json_limits;

#define CLEF_JSON_DEFAULT_DEPTH 512
#define CLEF_JSON_MAX_INT_DIGITS 4300 /* CPython >= 3.11 int max str digits, enforced at parse time */

typedef struct json_doc json_doc;

/* Parses `len` bytes as json.loads would (after the bytes were decoded as UTF-8). On failure returns
 * NULL with err->type one of: InvalidUtf8 (the bytes are not UTF-8), BadJson (not JSON as
 * json.loads accepts it; the message says where, like Python's "Expecting value: line 1 column 5
 * (char 4)"), RequestTooLong (over our size or depth limit), OutOfMemory.
 * Messages are CPython 3.12's own text: JSONDecodeError's (positions in code points), the int digit
 * limit's ValueError, UnicodeDecodeError's for InvalidUtf8, "Unexpected UTF-8 BOM (decode using
 * utf-8-sig)" for a leading BOM (json.loads of a str refuses it). Checked against CPython by
 * tests/parity/test_json_cpython.py. Nesting deeper than max_depth is ours (Python would raise
 * RecursionError near 1000): RequestTooLong. Parsing recurses once per nesting level.
 * Thread-safe (no shared state). A 20 MB tokenizer.json parses in ~0.1-0.2 s. */
json_doc *clef_json_parse(const char *text, size_t len, const json_limits *lim, clef_err *err);
json_value *clef_json_doc_root(json_doc *d);
/* Makes v (built on d) the document's root (for documents built by hand). */
void clef_json_doc_set_root(json_doc *d, json_value *v);
void clef_json_doc_free(json_doc *d);

/* An empty document for building values by hand. */
json_doc *clef_json_doc_new(void);
json_value *clef_json_new_null(json_doc *d);
json_value *clef_json_new_bool(json_doc *d, int b);
json_value *clef_json_new_int(json_doc *d, long long v);
json_value *clef_json_new_float(json_doc *d, double v);
json_value *clef_json_new_string(json_doc *d, const char *s, size_t len);
json_value *clef_json_new_array(json_doc *d);
json_value *clef_json_new_object(json_doc *d);
/* Builders return NULL / -1 only when out of memory. */
int clef_json_array_push(json_doc *d, json_value *arr, json_value *item);
/* Sets key to val: replaces the value in place if the key exists (json.loads / dict semantics). */
int clef_json_object_set(json_doc *d, json_value *obj, const char *key, size_t key_len, json_value *val);

/* Lookup helpers. clef_json_object_get returns NULL when absent (or obj is not an object). */
json_value *clef_json_object_get(const json_value *obj, const char *key);
json_value *clef_json_object_getn(const json_value *obj, const char *key, size_t key_len);
int clef_json_has_lone_surrogate(const json_value *v); /* anywhere inside (keys included) */

/* Python truthiness: null, false, 0, 0.0, -0.0, "", [], {} are falsy (NaN is truthy). */
int clef_json_truthy(const json_value *v);

/* json.dumps(v, ensure_ascii=False, separators=(",", ":"), sort_keys=sort_keys, allow_nan=True):
 * floats as repr(), Infinity/-Infinity/NaN literals, only " \\ \n \r \t \b \f short escapes, other
 * controls < 0x20 as \u00xx (lowercase hex), everything else raw; keys sorted by code point when
 * sort_keys (recursively). Returns -1 only when out of memory. */
int clef_json_render(clef_buf *out, const json_value *v, int sort_keys);
/* Appends one JSON string literal for the given bytes, escaped as above. */
int clef_json_render_string(clef_buf *out, const char *s, size_t len);
/* The same, but the literal is always valid UTF-8, whatever the bytes: a lone surrogate (kept in its
 * 3-byte form, see above) becomes a \udxxx escape, as json.dumps with ensure_ascii=True writes it (a
 * client decodes the same string), and any other invalid byte U+FFFD. For text that is not known to
 * be UTF-8, such as error messages quoting a request's ids. */
int clef_json_render_string_utf8(clef_buf *out, const char *s, size_t len);

/* Appends the error body every refusal carries, {"error":{"type":TYPE,"message":MSG}} (both strings
 * as clef_json_render_string_utf8 renders them). Returns -1 when out ran out of memory. */
int clef_json_render_error(clef_buf *out, const char *type, const char *msg);

/* Python render() of the reference: a string as is (no quotes); anything else json.dumps with
 * sort_keys=True. */
int clef_json_render_py(clef_buf *out, const json_value *v);

#endif
