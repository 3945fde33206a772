/* JSON with CPython semantics (json.loads / json.dumps). See json.h and contract.md §5.
 *
 * Parsing follows CPython 3.12's C scanner (Modules/_json.c) step by step, so that a document is
 * accepted exactly when json.loads accepts it and errors name the same place with the same words
 * ("Expecting value: line 1 column 5 (char 4)"; positions count code points, as Python's str does).
 * All nodes, strings and arrays of a document live in one arena; objects and arrays are collected on
 * scratch stacks while parsing and copied into the arena, exact-sized, when they close.
 * Rendering (json.dumps): json_render.c. */
#include "base/json.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/pyfmt.h"
#include "base/utf8.h"

/* ---- arena ---- */

typedef struct chunk {
    struct chunk *next;
    size_t used, cap;
    max_align_t data[]; /* cap bytes */
} chunk;

struct json_doc {
    chunk *head;
    size_t next_cap;
    json_value *root;
};

#define ARENA_MIN_CHUNK ((size_t)64 * 1024)
#define ARENA_MAX_CHUNK ((size_t)8 * 1024 * 1024)

static void *arena_alloc(json_doc *d, size_t n) {
    if (n > SIZE_MAX / 2) return NULL;
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    chunk *c = d->head;
    if (c && c->cap - c->used >= n) {
        void *p = (char *)c->data + c->used;
        c->used += n;
        return p;
    }
    size_t cap = d->next_cap;
    if (n > cap / 4) {
        /* a big block gets a chunk of its own, behind the current one so its free space stays usable */
        chunk *big = malloc(sizeof(chunk) + n);
        if (!big) return NULL;
        big->used = big->cap = n;
        if (c) { big->next = c->next; c->next = big; }
        else { big->next = NULL; d->head = big; }
        return big->data;
    }
    chunk *nc = malloc(sizeof(chunk) + cap);
    if (!nc) return NULL;
    nc->cap = cap;
    nc->used = n;
    nc->next = c;
    d->head = nc;
    if (d->next_cap < ARENA_MAX_CHUNK) d->next_cap *= 2;
    return nc->data;
}

json_doc *clef_json_doc_new(void) {
    json_doc *d = calloc(1, sizeof *d);
    if (d) d->next_cap = ARENA_MIN_CHUNK;
    return d;
}

void clef_json_doc_free(json_doc *d) {
    if (!d) return;
    chunk *c = d->head;
    while (c) {
        chunk *n = c->next;
        free(c);
        c = n;
    }
    free(d);
}

json_value *clef_json_doc_root(json_doc *d) { return d ? d->root : NULL; }
void clef_json_doc_set_root(json_doc *d, json_value *v) { if (d) d->root = v; }

static json_value *new_value(json_doc *d, json_kind k) {
    json_value *v = arena_alloc(d, sizeof *v);
    if (v) {
        memset(v, 0, sizeof *v);
        v->kind = k;
    }
    return v;
}

static char *arena_strdup(json_doc *d, const char *s, size_t len) {
    if (len == SIZE_MAX) return NULL;
    char *p = arena_alloc(d, len + 1);
    if (!p) return NULL;
    if (len) memcpy(p, s, len);
    p[len] = '\0';
    return p;
}

/* ---- builders ---- */

json_value *clef_json_new_null(json_doc *d) { return new_value(d, JSON_NULL); }
json_value *clef_json_new_bool(json_doc *d, int b) { return new_value(d, b ? JSON_TRUE : JSON_FALSE); }

json_value *clef_json_new_int(json_doc *d, long long x) {
    char buf[32];
    int n = snprintf(buf, sizeof buf, "%lld", x);
    json_value *v = new_value(d, JSON_INT);
    if (!v) return NULL;
    v->u.integer.digits = arena_strdup(d, buf, (size_t)n);
    v->u.integer.len = (size_t)n;
    return v->u.integer.digits ? v : NULL;
}

json_value *clef_json_new_float(json_doc *d, double x) {
    json_value *v = new_value(d, JSON_FLOAT);
    if (v) v->u.number = x;
    return v;
}

json_value *clef_json_new_string(json_doc *d, const char *s, size_t len) {
    json_value *v = new_value(d, JSON_STRING);
    if (!v) return NULL;
    v->u.string.s = arena_strdup(d, s, len);
    v->u.string.len = len;
    return v->u.string.s ? v : NULL;
}

json_value *clef_json_new_array(json_doc *d) { return new_value(d, JSON_ARRAY); }
json_value *clef_json_new_object(json_doc *d) { return new_value(d, JSON_OBJECT); }

int clef_json_array_push(json_doc *d, json_value *arr, json_value *item) {
    if (!arr || arr->kind != JSON_ARRAY || !item) return -1;
    if (arr->u.array.n == arr->u.array.cap) {
        size_t cap = arr->u.array.cap ? arr->u.array.cap * 2 : 4;
        json_value **p = arena_alloc(d, cap * sizeof *p);
        if (!p) return -1;
        if (arr->u.array.n) memcpy(p, arr->u.array.items, arr->u.array.n * sizeof *p);
        arr->u.array.items = p;
        arr->u.array.cap = cap;
    }
    arr->u.array.items[arr->u.array.n++] = item;
    return 0;
}

int clef_json_object_set(json_doc *d, json_value *obj, const char *key, size_t key_len, json_value *val) {
    if (!obj || obj->kind != JSON_OBJECT || !val || (!key && key_len)) return -1;
    for (size_t i = 0; i < obj->u.object.n; i++) {
        json_member *m = &obj->u.object.members[i];
        if (m->key_len == key_len && memcmp(m->key, key, key_len) == 0) {
            m->val = val;
            return 0;
        }
    }
    if (obj->u.object.n == obj->u.object.cap) {
        size_t cap = obj->u.object.cap ? obj->u.object.cap * 2 : 4;
        json_member *p = arena_alloc(d, cap * sizeof *p);
        if (!p) return -1;
        if (obj->u.object.n) memcpy(p, obj->u.object.members, obj->u.object.n * sizeof *p);
        obj->u.object.members = p;
        obj->u.object.cap = cap;
    }
    char *k = arena_strdup(d, key ? key : "", key_len);
    if (!k) return -1;
    json_member *m = &obj->u.object.members[obj->u.object.n++];
    m->key = k;
    m->key_len = key_len;
    m->val = val;
    return 0;
}

/* ---- lookups ---- */

json_value *clef_json_object_getn(const json_value *obj, const char *key, size_t key_len) {
    if (!obj || obj->kind != JSON_OBJECT || (!key && key_len)) return NULL;
    for (size_t i = 0; i < obj->u.object.n; i++) {
        const json_member *m = &obj->u.object.members[i];
        if (m->key_len == key_len && (key_len == 0 || memcmp(m->key, key, key_len) == 0)) return m->val;
    }
    return NULL;
}

json_value *clef_json_object_get(const json_value *obj, const char *key) {
    return key ? clef_json_object_getn(obj, key, strlen(key)) : NULL;
}

static int bytes_have_surrogate(const char *s, size_t len) {
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i + 1 < len; i++)
        if (p[i] == 0xED && p[i + 1] >= 0xA0) return 1;
    return 0;
}

int clef_json_has_lone_surrogate(const json_value *v) {
    if (!v) return 0;
    switch (v->kind) {
    case JSON_STRING: return bytes_have_surrogate(v->u.string.s, v->u.string.len);
    case JSON_ARRAY:
        for (size_t i = 0; i < v->u.array.n; i++)
            if (clef_json_has_lone_surrogate(v->u.array.items[i])) return 1;
        return 0;
    case JSON_OBJECT:
        for (size_t i = 0; i < v->u.object.n; i++) {
            const json_member *m = &v->u.object.members[i];
            if (bytes_have_surrogate(m->key, m->key_len) || clef_json_has_lone_surrogate(m->val)) return 1;
        }
        return 0;
    default: return 0;
    }
}

int clef_json_truthy(const json_value *v) {
    if (!v) return 0;
    switch (v->kind) {
    case JSON_NULL:
    case JSON_FALSE: return 0;
    case JSON_TRUE: return 1;
    case JSON_INT: return !(v->u.integer.len == 1 && v->u.integer.digits[0] == '0');
    case JSON_FLOAT: return v->u.number != 0.0; /* NaN != 0 is true: NaN is truthy */
    case JSON_STRING: return v->u.string.len != 0;
    case JSON_ARRAY: return v->u.array.n != 0;
    case JSON_OBJECT: return v->u.object.n != 0;
    }
    return 0;
}

/* ---- parser ---- */

typedef struct parser {
    const char *s;
    size_t len;
    json_doc *doc;
    clef_err *err;
    int max_depth;
    int failed;
    /* scratch stacks (objects and arrays being collected, innermost on top) */
    json_value **vals;
    size_t nvals, capvals;
    json_member *mems;
    size_t nmems, capmems;
} parser;

#define IS_WS(c) ((c) == ' ' || (c) == '\t' || (c) == '\n' || (c) == '\r')

/* JSONDecodeError's message: "<msg>: line L column C (char P)", positions in code points. */
static void fail_at(parser *p, const char *msg, size_t byte_pos) {
    if (p->failed) return;
    p->failed = 1;
    if (byte_pos > p->len) byte_pos = p->len;
    size_t chars = 0, line = 1, last_nl = (size_t)-1; /* char index of the last newline before pos */
    const unsigned char *u = (const unsigned char *)p->s;
    for (size_t i = 0; i < byte_pos; i++) {
        if ((u[i] & 0xC0) == 0x80) continue;
        if (u[i] == '\n') { line++; last_nl = chars; }
        chars++;
    }
    size_t col = last_nl == (size_t)-1 ? chars + 1 : chars - last_nl;
    clef_err_set(p->err, CLEF_E_BAD_JSON, "%s: line %zu column %zu (char %zu)", msg, line, col, chars);
}

static void fail_oom(parser *p) {
    if (p->failed) return;
    p->failed = 1;
    clef_err_set(p->err, CLEF_E_OOM, "out of memory while parsing JSON");
}

static json_value *parse_value(parser *p, size_t *pos, int depth);

static int hexval(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Reads 4 hex digits at s[i..i+3] (the caller checked they exist). -1 when one is not hex. */
static long hex4(const unsigned char *s, size_t i) {
    long c = 0;
    for (int k = 0; k < 4; k++) {
        int h = hexval(s[i + (size_t)k]);
        if (h < 0) return -1;
        c = (c << 4) | h;
    }
    return c;
}

/* scanstring: *pos is the index just after the opening quote; on success *pos is just after the
 * closing quote and *out / *out_len hold the decoded bytes (in the arena, NUL-terminated). */
static int parse_string(parser *p, size_t *pos, const char **out, size_t *out_len) {
    const unsigned char *s = (const unsigned char *)p->s;
    size_t len = p->len, begin = *pos - 1, i = *pos;

    /* Pass 1: find the closing quote (skipping escaped characters), to size the output. Errors are
     * left to pass 2, which reports them in Python's order. */
    size_t j = i;
    int escapes = 0, clean = 0;
    while (j < len) {
        unsigned char c = s[j];
        if (c == '"') { clean = 1; break; }
        if (c < 0x20) break;
        if (c == '\\') { escapes = 1; j += 2; continue; }
        j++;
    }
    if (clean && !escapes) {
        char *d = arena_strdup(p->doc, (const char *)s + i, j - i);
        if (!d) { fail_oom(p); return -1; }
        *out = d;
        *out_len = j - i;
        *pos = j + 1;
        return 0;
    }
    /* Decoded output is never longer than the input it comes from (an escape of 6 bytes gives at most
     * 3, a pair of 12 gives 4). Bound by the rest of the document when pass 1 found no end. */
    size_t cap = (clean ? j : len) - i;
    char *d = arena_alloc(p->doc, cap + 1);
    if (!d) { fail_oom(p); return -1; }
    size_t n = 0;
    size_t end = i;
    for (;;) {
        size_t next = end;
        unsigned char c = 0;
        while (next < len) {
            c = s[next];
            if (c == '"' || c == '\\') break;
            if (c < 0x20) { fail_at(p, "Invalid control character at", next); return -1; }
            next++;
        }
        if (next >= len) { fail_at(p, "Unterminated string starting at", begin); return -1; }
        if (next > end) {
            if (n + (next - end) > cap) { fail_at(p, "Unterminated string starting at", begin); return -1; }
            memcpy(d + n, s + end, next - end);
            n += next - end;
        }
        next++;
        if (c == '"') { end = next; break; }
        if (next == len) { fail_at(p, "Unterminated string starting at", begin); return -1; }
        c = s[next];
        uint32_t cp;
        if (c != 'u') {
            end = next + 1;
            switch (c) {
            case '"': cp = '"'; break;
            case '\\': cp = '\\'; break;
            case '/': cp = '/'; break;
            case 'b': cp = '\b'; break;
            case 'f': cp = '\f'; break;
            case 'n': cp = '\n'; break;
            case 'r': cp = '\r'; break;
            case 't': cp = '\t'; break;
            default: fail_at(p, "Invalid \\escape", end - 2); return -1;
            }
        } else {
            next++;
            end = next + 4;
            if (end >= len) { fail_at(p, "Invalid \\uXXXX escape", next - 1); return -1; }
            long h = hex4(s, next);
            if (h < 0) { fail_at(p, "Invalid \\uXXXX escape", end - 5); return -1; }
            cp = (uint32_t)h;
            next = end;
            /* a high surrogate followed by \uXXXX: join when that is a low surrogate */
            if (cp >= 0xD800 && cp <= 0xDBFF && end + 6 < len && s[next] == '\\' && s[next + 1] == 'u') {
                end += 6;
                long h2 = hex4(s, next + 2);
                if (h2 < 0) { fail_at(p, "Invalid \\uXXXX escape", end - 5); return -1; }
                if (h2 >= 0xDC00 && h2 <= 0xDFFF)
                    cp = 0x10000 + (((cp - 0xD800) << 10) | ((uint32_t)h2 - 0xDC00));
                else
                    end -= 6;
            }
        }
        char tmp[4];
        int k = clef_utf8_encode(cp, tmp);
        if (n + (size_t)k > cap) { fail_at(p, "Unterminated string starting at", begin); return -1; }
        memcpy(d + n, tmp, (size_t)k);
        n += (size_t)k;
    }
    d[n] = '\0';
    *out = d;
    *out_len = n;
    *pos = end;
    return 0;
}

static json_value *parse_number(parser *p, size_t *pos) {
    const unsigned char *s = (const unsigned char *)p->s;
    size_t start = *pos, idx = start, end_idx = p->len - 1; /* len > 0 here */
    int is_float = 0;
    if (s[idx] == '-') {
        idx++;
        if (idx > end_idx) { fail_at(p, "Expecting value", start); return NULL; }
    }
    if (s[idx] >= '1' && s[idx] <= '9') {
        idx++;
        while (idx <= end_idx && s[idx] >= '0' && s[idx] <= '9') idx++;
    } else if (s[idx] == '0') {
        idx++;
    } else {
        fail_at(p, "Expecting value", start);
        return NULL;
    }
    size_t int_end = idx;
    if (idx < end_idx && s[idx] == '.' && s[idx + 1] >= '0' && s[idx + 1] <= '9') {
        is_float = 1;
        idx += 2;
        while (idx <= end_idx && s[idx] >= '0' && s[idx] <= '9') idx++;
    }
    if (idx < end_idx && (s[idx] == 'e' || s[idx] == 'E')) {
        size_t e_start = idx;
        idx++;
        if (idx < end_idx && (s[idx] == '-' || s[idx] == '+')) idx++;
        while (idx <= end_idx && s[idx] >= '0' && s[idx] <= '9') idx++;
        if (s[idx - 1] >= '0' && s[idx - 1] <= '9') is_float = 1;
        else idx = e_start;
    }
    *pos = idx;
    if (is_float) {
        /* a bounded, NUL-terminated copy for strtod */
        size_t n = idx - start;
        char small[128];
        char *buf = n < sizeof small ? small : malloc(n + 1);
        if (!buf) { fail_oom(p); return NULL; }
        memcpy(buf, s + start, n);
        buf[n] = '\0';
        double x = clef_py_strtod(buf, NULL);
        if (buf != small) free(buf);
        json_value *v = new_value(p->doc, JSON_FLOAT);
        if (!v) { fail_oom(p); return NULL; }
        v->u.number = x;
        return v;
    }
    int neg = s[start] == '-';
    size_t ndig = int_end - start - (size_t)neg;
    if (ndig > CLEF_JSON_MAX_INT_DIGITS) {
        /* Python's ValueError from int(): no position in the message */
        p->failed = 1;
        clef_err_set(p->err, CLEF_E_BAD_JSON,
                     "Exceeds the limit (%d digits) for integer string conversion: value has %zu digits; "
                     "use sys.set_int_max_str_digits() to increase the limit",
                     CLEF_JSON_MAX_INT_DIGITS, ndig);
        return NULL;
    }
    json_value *v = new_value(p->doc, JSON_INT);
    if (!v) { fail_oom(p); return NULL; }
    if (neg && ndig == 1 && s[start + 1] == '0') neg = 0, start++; /* -0 is the integer 0 */
    v->u.integer.digits = arena_strdup(p->doc, (const char *)s + start, int_end - start);
    v->u.integer.len = int_end - start;
    if (!v->u.integer.digits) { fail_oom(p); return NULL; }
    return v;
}

static int push_val(parser *p, json_value *v) {
    if (p->nvals == p->capvals) {
        size_t cap = p->capvals ? p->capvals * 2 : 256;
        json_value **q = realloc(p->vals, cap * sizeof *q);
        if (!q) return -1;
        p->vals = q;
        p->capvals = cap;
    }
    p->vals[p->nvals++] = v;
    return 0;
}

static json_value *parse_array(parser *p, size_t *pos, int depth) {
    const unsigned char *s = (const unsigned char *)p->s;
    size_t idx = *pos, end_idx = p->len - 1, base = p->nvals;
    json_value *arr = NULL;
    while (idx <= end_idx && IS_WS(s[idx])) idx++;
    if (idx > end_idx || s[idx] != ']') {
        for (;;) {
            json_value *v = parse_value(p, &idx, depth);
            if (!v) goto bail;
            if (push_val(p, v)) { fail_oom(p); goto bail; }
            while (idx <= end_idx && IS_WS(s[idx])) idx++;
            if (idx <= end_idx && s[idx] == ']') break;
            if (idx > end_idx || s[idx] != ',') { fail_at(p, "Expecting ',' delimiter", idx); goto bail; }
            idx++;
            while (idx <= end_idx && IS_WS(s[idx])) idx++;
        }
    }
    arr = new_value(p->doc, JSON_ARRAY);
    if (!arr) { fail_oom(p); goto bail; }
    size_t n = p->nvals - base;
    if (n) {
        arr->u.array.items = arena_alloc(p->doc, n * sizeof(json_value *));
        if (!arr->u.array.items) { fail_oom(p); arr = NULL; goto bail; }
        memcpy(arr->u.array.items, p->vals + base, n * sizeof(json_value *));
    }
    arr->u.array.n = arr->u.array.cap = n;
    *pos = idx + 1;
bail:
    p->nvals = base;
    return arr;
}

/* Duplicate-key index for one object being parsed: open addressing over member indices, built only
 * once an object has more than a few members (small objects are scanned linearly). */
typedef struct keyindex {
    uint32_t *slots; /* member index + 1; 0 = empty */
    size_t mask;
} keyindex;

static uint64_t key_hash(const char *k, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)k[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

#define LINEAR_KEYS 8

static int keyindex_rebuild(keyindex *ki, const json_member *m, size_t n) {
    size_t cap = 64;
    while (cap < n * 2 + 2) cap *= 2;
    uint32_t *slots = calloc(cap, sizeof *slots);
    if (!slots) return -1;
    free(ki->slots);
    ki->slots = slots;
    ki->mask = cap - 1;
    for (size_t i = 0; i < n; i++) {
        size_t h = (size_t)key_hash(m[i].key, m[i].key_len) & ki->mask;
        while (slots[h]) h = (h + 1) & ki->mask;
        slots[h] = (uint32_t)(i + 1);
    }
    return 0;
}

static json_value *parse_object(parser *p, size_t *pos, int depth) {
    const unsigned char *s = (const unsigned char *)p->s;
    size_t idx = *pos, end_idx = p->len - 1, base = p->nmems;
    json_value *obj = NULL;
    keyindex ki = {NULL, 0};
    while (idx <= end_idx && IS_WS(s[idx])) idx++;
    if (idx > end_idx || s[idx] != '}') {
        for (;;) {
            if (idx > end_idx || s[idx] != '"') {
                fail_at(p, "Expecting property name enclosed in double quotes", idx);
                goto bail;
            }
            const char *key;
            size_t key_len;
            idx++;
            if (parse_string(p, &idx, &key, &key_len)) goto bail;
            while (idx <= end_idx && IS_WS(s[idx])) idx++;
            if (idx > end_idx || s[idx] != ':') { fail_at(p, "Expecting ':' delimiter", idx); goto bail; }
            idx++;
            while (idx <= end_idx && IS_WS(s[idx])) idx++;
            json_value *v = parse_value(p, &idx, depth);
            if (!v) goto bail;

            /* dict semantics: an existing key keeps its position and takes the new value */
            json_member *m = p->mems ? p->mems + base : NULL;
            size_t n = p->nmems - base;
            size_t found = (size_t)-1;
            uint64_t h = 0;
            if (n <= LINEAR_KEYS) {
                for (size_t k = 0; k < n; k++)
                    if (m[k].key_len == key_len && memcmp(m[k].key, key, key_len) == 0) { found = k; break; }
            } else {
                if (!ki.slots && keyindex_rebuild(&ki, m, n)) { fail_oom(p); goto bail; }
                h = key_hash(key, key_len);
                for (size_t sl = (size_t)h & ki.mask; ki.slots[sl]; sl = (sl + 1) & ki.mask) {
                    size_t k = ki.slots[sl] - 1;
                    if (m[k].key_len == key_len && memcmp(m[k].key, key, key_len) == 0) { found = k; break; }
                }
            }
            if (found != (size_t)-1) {
                m[found].val = v;
            } else {
                if (n >= UINT32_MAX - 1) { fail_oom(p); goto bail; }
                if (p->nmems == p->capmems) {
                    size_t cap = p->capmems ? p->capmems * 2 : 256;
                    json_member *q = realloc(p->mems, cap * sizeof *q);
                    if (!q) { fail_oom(p); goto bail; }
                    p->mems = q;
                    p->capmems = cap;
                    m = p->mems + base;
                }
                m[n].key = key;
                m[n].key_len = key_len;
                m[n].val = v;
                p->nmems++;
                n++;
                if (ki.slots) {
                    if (n * 2 + 2 > ki.mask + 1) {
                        if (keyindex_rebuild(&ki, m, n)) { fail_oom(p); goto bail; }
                    } else {
                        size_t sl = (size_t)h & ki.mask;
                        while (ki.slots[sl]) sl = (sl + 1) & ki.mask;
                        ki.slots[sl] = (uint32_t)n;
                    }
                }
            }

            while (idx <= end_idx && IS_WS(s[idx])) idx++;
            if (idx <= end_idx && s[idx] == '}') break;
            if (idx > end_idx || s[idx] != ',') { fail_at(p, "Expecting ',' delimiter", idx); goto bail; }
            idx++;
            while (idx <= end_idx && IS_WS(s[idx])) idx++;
        }
    }
    obj = new_value(p->doc, JSON_OBJECT);
    if (!obj) { fail_oom(p); goto bail; }
    size_t n = p->nmems - base;
    if (n) {
        obj->u.object.members = arena_alloc(p->doc, n * sizeof(json_member));
        if (!obj->u.object.members) { fail_oom(p); obj = NULL; goto bail; }
        memcpy(obj->u.object.members, p->mems + base, n * sizeof(json_member));
    }
    obj->u.object.n = obj->u.object.cap = n;
    *pos = idx + 1;
bail:
    free(ki.slots);
    p->nmems = base;
    return obj;
}

static int match_lit(parser *p, size_t idx, const char *lit, size_t n) {
    return idx + n <= p->len && memcmp(p->s + idx, lit, n) == 0;
}

/* scan_once: one value at *pos (no leading whitespace skipped, as in CPython). */
static json_value *parse_value(parser *p, size_t *pos, int depth) {
    size_t idx = *pos;
    if (idx >= p->len) { fail_at(p, "Expecting value", idx); return NULL; }
    json_value *v;
    switch (p->s[idx]) {
    case '"': {
        const char *str;
        size_t n;
        idx++;
        if (parse_string(p, &idx, &str, &n)) return NULL;
        v = new_value(p->doc, JSON_STRING);
        if (!v) { fail_oom(p); return NULL; }
        v->u.string.s = str;
        v->u.string.len = n;
        *pos = idx;
        return v;
    }
    case '{':
    case '[':
        if (depth >= p->max_depth) {
            p->failed = 1;
            clef_err_set(p->err, CLEF_E_LIMIT, "JSON nesting is deeper than %d levels (at char %zu)",
                         p->max_depth, clef_utf8_count(p->s, idx));
            return NULL;
        }
        idx++;
        v = p->s[idx - 1] == '{' ? parse_object(p, &idx, depth + 1) : parse_array(p, &idx, depth + 1);
        if (v) *pos = idx;
        return v;
    case 'n':
        if (match_lit(p, idx, "null", 4)) { *pos = idx + 4; v = new_value(p->doc, JSON_NULL); goto done; }
        break;
    case 't':
        if (match_lit(p, idx, "true", 4)) { *pos = idx + 4; v = new_value(p->doc, JSON_TRUE); goto done; }
        break;
    case 'f':
        if (match_lit(p, idx, "false", 5)) { *pos = idx + 5; v = new_value(p->doc, JSON_FALSE); goto done; }
        break;
    case 'N':
        if (match_lit(p, idx, "NaN", 3)) { *pos = idx + 3; v = clef_json_new_float(p->doc, NAN); goto done; }
        break;
    case 'I':
        if (match_lit(p, idx, "Infinity", 8)) {
            *pos = idx + 8;
            v = clef_json_new_float(p->doc, INFINITY);
            goto done;
        }
        break;
    case '-':
        if (match_lit(p, idx, "-Infinity", 9)) {
            *pos = idx + 9;
            v = clef_json_new_float(p->doc, -INFINITY);
            goto done;
        }
        break;
    default: break;
    }
    return parse_number(p, pos);
done:
    if (!v) fail_oom(p);
    return v;
}

json_doc *clef_json_parse(const char *text, size_t len, const json_limits *lim, clef_err *err) {
    clef_err_clear(err);
    if (!text && len) { clef_err_set(err, CLEF_E_INTERNAL, "clef_json_parse: NULL text"); return NULL; }
    if (lim && lim->max_bytes && len > lim->max_bytes) {
        clef_err_set(err, CLEF_E_LIMIT, "JSON body is %zu bytes; the limit is %zu bytes", len, lim->max_bytes);
        return NULL;
    }
    size_t good = clef_utf8_valid_prefix(text, len);
    if (good != len) {
        char why[200];
        clef_utf8_error_message(text, len, good, why, sizeof why);
        clef_err_set(err, CLEF_E_INVALID_UTF8, "%s", why);
        return NULL;
    }
    parser p;
    memset(&p, 0, sizeof p);
    p.s = text;
    p.len = len;
    p.err = err;
    p.max_depth = lim && lim->max_depth > 0 ? lim->max_depth : CLEF_JSON_DEFAULT_DEPTH;
    p.doc = clef_json_doc_new();
    if (!p.doc) { clef_err_set(err, CLEF_E_OOM, "out of memory while parsing JSON"); return NULL; }

    json_value *root = NULL;
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) {
        fail_at(&p, "Unexpected UTF-8 BOM (decode using utf-8-sig)", 0);
    } else {
        size_t idx = 0;
        while (idx < len && IS_WS(text[idx])) idx++;
        root = parse_value(&p, &idx, 0);
        if (root) {
            while (idx < len && IS_WS(text[idx])) idx++;
            if (idx != len) {
                fail_at(&p, "Extra data", idx);
                root = NULL;
            }
        }
    }
    free(p.vals);
    free(p.mems);
    if (!root) {
        if (err && !err->type) clef_err_set(err, CLEF_E_INTERNAL, "JSON parse failed");
        clef_json_doc_free(p.doc);
        return NULL;
    }
    p.doc->root = root;
    return p.doc;
}
