#include "model/safetensors.h"

#include <stdlib.h>
#include <string.h>

#include "base/mapfile.h"
#include "base/json.h"

struct clef_st_file {
    clef_mapfile map;           /* zeroed when parsed from caller-owned bytes */
    const unsigned char *bytes;
    size_t len;
    char *label;
    size_t n;
    clef_tensor *t;             /* header order */
    const clef_tensor **by_name; /* sorted by name */
    size_t n_meta;
    char **meta;                /* 2 * n_meta: key, value */
};

static const struct { const char *name; int dtype; size_t size; } dtypes[] = {
    {"BOOL", CLEF_ST_BOOL, 1},       {"U8", CLEF_ST_U8, 1},         {"I8", CLEF_ST_I8, 1},
    {"F8_E4M3", CLEF_ST_F8_E4M3, 1}, {"F8_E5M2", CLEF_ST_F8_E5M2, 1}, {"F8_E8M0", CLEF_ST_F8_E8M0, 1},
    {"I16", CLEF_ST_I16, 2},         {"U16", CLEF_ST_U16, 2},       {"F16", CLEF_ST_F16, 2},
    {"BF16", CLEF_ST_BF16, 2},       {"I32", CLEF_ST_I32, 4},       {"U32", CLEF_ST_U32, 4},
    {"F32", CLEF_ST_F32, 4},         {"I64", CLEF_ST_I64, 8},       {"U64", CLEF_ST_U64, 8},
    {"F64", CLEF_ST_F64, 8},
};
#define N_DTYPES (sizeof dtypes / sizeof dtypes[0])

size_t clef_dtype_size(int dtype) {
    for (size_t i = 0; i < N_DTYPES; i++)
        if (dtypes[i].dtype == dtype) return dtypes[i].size;
    return 0;
}

const char *clef_dtype_name(int dtype) {
    for (size_t i = 0; i < N_DTYPES; i++)
        if (dtypes[i].dtype == dtype) return dtypes[i].name;
    return "?";
}

int clef_dtype_from_name(const char *s, size_t len) {
    for (size_t i = 0; i < N_DTYPES; i++)
        if (strlen(dtypes[i].name) == len && memcmp(dtypes[i].name, s, len) == 0) return dtypes[i].dtype;
    return 0;
}

/* A JSON integer as a non-negative int64: 0 ok, -1 not an integer, -2 negative, -3 too large. */
static int json_nonneg_i64(const json_value *v, int64_t *out) {
    if (!v || v->kind != JSON_INT) return -1;
    const char *d = v->u.integer.digits;
    size_t n = v->u.integer.len;
    if (n == 0) return -1;
    if (d[0] == '-') return -2;
    uint64_t x = 0;
    for (size_t i = 0; i < n; i++) {
        if (d[i] < '0' || d[i] > '9') return -1;
        if (x > ((uint64_t)INT64_MAX - (uint64_t)(d[i] - '0')) / 10) return -3;
        x = x * 10 + (uint64_t)(d[i] - '0');
    }
    *out = (int64_t)x;
    return 0;
}

static char *dup_n(const char *s, size_t n) {
    char *p = malloc(n + 1);
    if (!p) return NULL;
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

static int cmp_by_name(const void *a, const void *b) {
    const clef_tensor *x = *(const clef_tensor *const *)a, *y = *(const clef_tensor *const *)b;
    return strcmp(x->name, y->name);
}

typedef struct { uint64_t begin, end; size_t idx; } extent;

static int cmp_extent(const void *a, const void *b) {
    const extent *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

void clef_st_close(clef_st_file *f) {
    if (!f) return;
    if (f->t)
        for (size_t i = 0; i < f->n; i++) free((char *)f->t[i].name);
    free(f->t);
    free(f->by_name);
    if (f->meta)
        for (size_t i = 0; i < 2 * f->n_meta; i++) free(f->meta[i]);
    free(f->meta);
    free(f->label);
    clef_mapfile_close(&f->map);
    free(f);
}

#define BAD(...) do { clef_err_set(err, CLEF_E_BAD_MODEL, __VA_ARGS__); goto fail; } while (0)
#define OOM() do { clef_err_set(err, CLEF_E_OOM, "out of memory reading %s", label); goto fail; } while (0)

static int parse_tensor(clef_st_file *f, clef_tensor *t, const char *name, const json_value *v,
                        const unsigned char *data, uint64_t data_len, extent *ex, clef_err *err) {
    const char *label = f->label;
    if (!v || v->kind != JSON_OBJECT)
        return clef_err_set(err, CLEF_E_BAD_MODEL, "%s: tensor '%.200s': entry is not a JSON object", label, name);
    const json_value *dt = clef_json_object_get(v, "dtype");
    const json_value *sh = clef_json_object_get(v, "shape");
    const json_value *of = clef_json_object_get(v, "data_offsets");
    if (!dt || dt->kind != JSON_STRING)
        return clef_err_set(err, CLEF_E_BAD_MODEL, "%s: tensor '%.200s': missing or non-string \"dtype\"", label, name);
    t->dtype = clef_dtype_from_name(dt->u.string.s, dt->u.string.len);
    if (!t->dtype)
        return clef_err_set(err, CLEF_E_BAD_MODEL, "%s: tensor '%.200s': unknown or unsupported dtype \"%.40s\"",
                            label, name, dt->u.string.s);
    if (!sh || sh->kind != JSON_ARRAY)
        return clef_err_set(err, CLEF_E_BAD_MODEL, "%s: tensor '%.200s': missing or non-array \"shape\"", label, name);
    if (sh->u.array.n > CLEF_MAX_DIMS)
        return clef_err_set(err, CLEF_E_BAD_MODEL, "%s: tensor '%.200s': %zu dimensions (at most %d supported)",
                            label, name, sh->u.array.n, CLEF_MAX_DIMS);
    t->ndim = (int)sh->u.array.n;
    int64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        int64_t x;
        int rc = json_nonneg_i64(sh->u.array.items[d], &x);
        if (rc == -1)
            return clef_err_set(err, CLEF_E_BAD_MODEL, "%s: tensor '%.200s': shape[%d] is not an integer", label, name, d);
        if (rc == -2)
            return clef_err_set(err, CLEF_E_BAD_MODEL, "%s: tensor '%.200s': shape[%d] is negative", label, name, d);
        if (rc == -3)
            return clef_err_set(err, CLEF_E_BAD_MODEL, "%s: tensor '%.200s': shape[%d] is too large", label, name, d);
        t->shape[d] = x;
        if (__builtin_mul_overflow(numel, x, &numel))
            return clef_err_set(err, CLEF_E_BAD_MODEL, "%s: tensor '%.200s': element count overflows", label, name);
    }
    int64_t nbytes;
    if (__builtin_mul_overflow(numel, (int64_t)clef_dtype_size(t->dtype), &nbytes))
        return clef_err_set(err, CLEF_E_BAD_MODEL, "%s: tensor '%.200s': byte size overflows", label, name);
    t->numel = numel;
    t->nbytes = (size_t)nbytes;
    if (!of || of->kind != JSON_ARRAY || of->u.array.n != 2)
        return clef_err_set(err, CLEF_E_BAD_MODEL, "%s: tensor '%.200s': \"data_offsets\" is not a [begin, end] pair",
                            label, name);
    int64_t b, e;
    if (json_nonneg_i64(of->u.array.items[0], &b) || json_nonneg_i64(of->u.array.items[1], &e))
        return clef_err_set(err, CLEF_E_BAD_MODEL,
                            "%s: tensor '%.200s': data_offsets must be non-negative integers", label, name);
    if (b > e)
        return clef_err_set(err, CLEF_E_BAD_MODEL, "%s: tensor '%.200s': data_offsets begin %lld > end %lld", label,
                            name, (long long)b, (long long)e);
    if ((uint64_t)e > data_len)
        return clef_err_set(err, CLEF_E_BAD_MODEL,
                            "%s: tensor '%.200s': data_offsets end %lld is past the end of the data (%llu bytes; "
                            "file truncated?)", label, name, (long long)e, (unsigned long long)data_len);
    if (e - b != nbytes)
        return clef_err_set(err, CLEF_E_BAD_MODEL,
                            "%s: tensor '%.200s': extent is %lld bytes but shape and dtype %s need %lld", label, name,
                            (long long)(e - b), clef_dtype_name(t->dtype), (long long)nbytes);
    t->data = nbytes ? (const void *)(data + b) : NULL;
    ex->begin = (uint64_t)b;
    ex->end = (uint64_t)e;
    return 0;
}

clef_st_file *clef_st_parse(const void *bytes, size_t len, const char *label_in, clef_err *err) {
    json_doc *doc = NULL;
    extent *ex = NULL;
    clef_st_file *f = calloc(1, sizeof *f);
    const char *label = label_in ? label_in : "safetensors";
    if (!f) {
        clef_err_set(err, CLEF_E_OOM, "out of memory reading %s", label);
        return NULL;
    }
    f->label = dup_n(label, strlen(label));
    if (!f->label) OOM();
    label = f->label;
    f->bytes = bytes;
    f->len = len;
    if (len < 8) BAD("%s: file is %zu bytes, too short for the 8-byte header length (truncated?)", label, len);
    const unsigned char *p = bytes;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | p[i];
    if (hlen > CLEF_ST_MAX_HEADER)
        BAD("%s: header length %llu exceeds the %u-byte limit", label, (unsigned long long)hlen, CLEF_ST_MAX_HEADER);
    if (hlen > len - 8)
        BAD("%s: header length %llu runs past the end of the file (%zu bytes; truncated?)", label,
            (unsigned long long)hlen, len);
    if (hlen < 2 || p[8] != '{') BAD("%s: header is not a JSON object", label);
    json_limits lim = {.max_bytes = (size_t)hlen, .max_depth = 16};
    clef_err jerr = {0};
    doc = clef_json_parse((const char *)p + 8, (size_t)hlen, &lim, &jerr);
    if (!doc) {
        if (jerr.type && strcmp(jerr.type, CLEF_E_OOM) == 0) OOM();
        BAD("%s: header is not valid JSON: %s", label, jerr.msg);
    }
    const json_value *root = clef_json_doc_root(doc);
    if (!root || root->kind != JSON_OBJECT) BAD("%s: header is not a JSON object", label);
    const unsigned char *data = p + 8 + hlen;
    uint64_t data_len = (uint64_t)len - 8 - hlen;

    size_t n_members = root->u.object.n;
    f->t = calloc(n_members ? n_members : 1, sizeof *f->t);
    ex = calloc(n_members ? n_members : 1, sizeof *ex);
    if (!f->t || !ex) OOM();
    for (size_t i = 0; i < n_members; i++) {
        const json_member *m = &root->u.object.members[i];
        if (m->key_len == 12 && memcmp(m->key, "__metadata__", 12) == 0) {
            const json_value *md = m->val;
            if (!md || md->kind != JSON_OBJECT) BAD("%s: \"__metadata__\" is not a JSON object", label);
            f->meta = calloc(2 * md->u.object.n + 1, sizeof *f->meta);
            if (!f->meta) OOM();
            for (size_t k = 0; k < md->u.object.n; k++) {
                const json_member *mm = &md->u.object.members[k];
                if (!mm->val || mm->val->kind != JSON_STRING)
                    BAD("%s: \"__metadata__\" value for '%.100s' is not a string", label, mm->key);
                f->meta[2 * k] = dup_n(mm->key, mm->key_len);
                f->meta[2 * k + 1] = dup_n(mm->val->u.string.s, mm->val->u.string.len);
                f->n_meta = k + 1;
                if (!f->meta[2 * k] || !f->meta[2 * k + 1]) OOM();
            }
            continue;
        }
        if (memchr(m->key, '\0', m->key_len)) BAD("%s: a tensor name contains a NUL byte", label);
        clef_tensor *t = &f->t[f->n];
        t->name = dup_n(m->key, m->key_len);
        if (!t->name) OOM();
        f->n++;
        if (parse_tensor(f, t, t->name, m->val, data, data_len, &ex[f->n - 1], err)) goto fail;
        ex[f->n - 1].idx = f->n - 1;
    }
    clef_json_doc_free(doc);
    doc = NULL;

    /* No two tensors may share a byte (empty tensors occupy none). */
    qsort(ex, f->n, sizeof *ex, cmp_extent);
    uint64_t prev_end = 0;
    size_t prev_idx = (size_t)-1;
    for (size_t i = 0; i < f->n; i++) {
        if (ex[i].begin == ex[i].end) continue;
        if (prev_idx != (size_t)-1 && ex[i].begin < prev_end)
            BAD("%s: tensors '%.200s' and '%.200s' overlap in the data area", label, f->t[prev_idx].name,
                f->t[ex[i].idx].name);
        prev_end = ex[i].end;
        prev_idx = ex[i].idx;
    }
    free(ex);
    ex = NULL;

    f->by_name = malloc((f->n ? f->n : 1) * sizeof *f->by_name);
    if (!f->by_name) OOM();
    for (size_t i = 0; i < f->n; i++) f->by_name[i] = &f->t[i];
    qsort(f->by_name, f->n, sizeof *f->by_name, cmp_by_name);
    for (size_t i = 1; i < f->n; i++)
        if (strcmp(f->by_name[i - 1]->name, f->by_name[i]->name) == 0)
            BAD("%s: tensor '%.200s' appears twice", label, f->by_name[i]->name);
    return f;
fail:
    clef_json_doc_free(doc);
    free(ex);
    clef_st_close(f);
    return NULL;
}

clef_st_file *clef_st_open(const char *path, clef_err *err) {
    clef_mapfile map;
    if (clef_mapfile_open(&map, path, err)) return NULL;
    clef_st_file *f = clef_st_parse(map.data, map.size, path, err);
    if (!f) {
        clef_mapfile_close(&map);
        return NULL;
    }
    f->map = map;
    return f;
}

size_t clef_st_count(const clef_st_file *f) { return f ? f->n : 0; }

const clef_tensor *clef_st_at(const clef_st_file *f, size_t i) { return f && i < f->n ? &f->t[i] : NULL; }

const clef_tensor *clef_st_find(const clef_st_file *f, const char *name) {
    if (!f || !name) return NULL;
    size_t lo = 0, hi = f->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const clef_tensor *t = f->by_name[mid];
        int c = strcmp(t->name, name);
        if (c == 0) return t;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

const char *clef_st_metadata(const clef_st_file *f, const char *key) {
    if (!f || !key) return NULL;
    for (size_t i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta[2 * i], key) == 0) return f->meta[2 * i + 1];
    return NULL;
}

const char *clef_st_label(const clef_st_file *f) { return f ? f->label : NULL; }

const void *clef_st_bytes(const clef_st_file *f, size_t *size) {
    if (size) *size = f ? f->len : 0;
    return f ? f->bytes : NULL;
}

size_t clef_st_release(const clef_st_file *f, const void *p, size_t n) {
    /* map.data is set only by clef_st_open: parsed caller bytes are left alone (see the header) */
    return f && f->map.data ? clef_mapfile_release(&f->map, p, n) : 0;
}
