/* Loading a tokenizer from tokenizer.json (tokenizer.h; the encoding: tokenizer.c): the model's
 * vocab and merges resolved to id tables once, the added tokens, the normalizer and the
 * pre-tokenizer checked against the one configuration this tokenizer implements. */
#include "text/tokenizer.h"

#include <oniguruma.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/bpe.h"
#include "base/json.h"
#include "base/utf8.h"
#include "text/tokenizer_internal.h"

static atomic_uint gen_counter;

/* ---------------------------------------------------------------- GPT-2 byte <-> unicode */

/* The code point GPT-2's bytes_to_unicode gives byte b: printable Latin-1 bytes map to themselves,
 * the other 68 to U+0100.. in byte order. */
static uint32_t byte_char(unsigned b) {
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) return b;
    unsigned k = 0;
    for (unsigned x = 0; x < b; x++)
        if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255))) k++;
    return 256 + k;
}

/* ---------------------------------------------------------------- load-time string table */

typedef struct str_slot {
    const char *s;
    size_t len;
    int32_t id; /* -1 = empty */
} str_slot;

typedef struct str_map {
    str_slot *slots;
    size_t mask;
} str_map;

static uint64_t str_hash(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h ^ (h >> 31);
}

static int str_map_init(str_map *m, size_t n) {
    size_t cap = 16;
    while (cap < 2 * n + 2) cap *= 2;
    m->slots = malloc(cap * sizeof *m->slots);
    if (!m->slots) return -1;
    for (size_t i = 0; i < cap; i++) m->slots[i].id = -1;
    m->mask = cap - 1;
    return 0;
}

/* Insert or overwrite (a JSON object with a repeated key keeps the last value). */
static void str_map_put(str_map *m, const char *s, size_t n, int32_t id) {
    size_t i = (size_t)str_hash(s, n) & m->mask;
    while (m->slots[i].id >= 0) {
        if (m->slots[i].len == n && memcmp(m->slots[i].s, s, n) == 0) break;
        i = (i + 1) & m->mask;
    }
    m->slots[i].s = s;
    m->slots[i].len = n;
    m->slots[i].id = id;
}

static int32_t str_map_get(const str_map *m, const char *s, size_t n) {
    size_t i = (size_t)str_hash(s, n) & m->mask;
    while (m->slots[i].id >= 0) {
        if (m->slots[i].len == n && memcmp(m->slots[i].s, s, n) == 0) return m->slots[i].id;
        i = (i + 1) & m->mask;
    }
    return -1;
}

/* ---------------------------------------------------------------- JSON helpers */

static int json_is_str(const json_value *v, const char *s) {
    return v && v->kind == JSON_STRING && v->u.string.len == strlen(s) && memcmp(v->u.string.s, s, v->u.string.len) == 0;
}

static int json_is_null(const json_value *v) { return !v || v->kind == JSON_NULL; }

/* 1 true, 0 false or absent (HF's serde default for these flags), -1 not a boolean */
static int json_flag(const json_value *obj, const char *key) {
    const json_value *v = clef_json_object_get(obj, key);
    if (!v || v->kind == JSON_FALSE) return 0;
    if (v->kind == JSON_TRUE) return 1;
    return -1;
}

/* A non-negative JSON integer that fits int32, or -1. */
static int32_t json_id(const json_value *v) {
    if (!v || v->kind != JSON_INT) return -1;
    const char *d = v->u.integer.digits;
    size_t n = v->u.integer.len;
    if (n == 0 || n > 10 || d[0] == '-') return -1;
    int64_t x = 0;
    for (size_t i = 0; i < n; i++) {
        if (d[i] < '0' || d[i] > '9') return -1;
        x = x * 10 + (d[i] - '0');
    }
    return x > INT32_MAX ? -1 : (int32_t)x;
}

/* ---------------------------------------------------------------- loading */

void clef_tokenizer_free(clef_tokenizer *t) {
    if (!t) return;
    clef_tokenizer_release_tls();
    clef_bpe_pairs_free(&t->pairs);
    for (size_t i = 0; i < t->n_added; i++) free(t->added[i].s);
    free(t->added);
    free(t->by_first);
    if (t->re) onig_free(t->re);
    free(t);
}

static int load_added(clef_tokenizer *t, const json_value *arr, clef_err *err) {
    if (json_is_null(arr)) return 0;
    if (arr->kind != JSON_ARRAY) return clef_err_set(err, CLEF_E_BAD_MODEL, "tokenizer.json: added_tokens is not a list");
    size_t n = arr->u.array.n;
    if (n > 65535) return clef_err_set(err, CLEF_E_BAD_MODEL, "tokenizer.json: too many added tokens (%zu)", n);
    t->added = calloc(n ? n : 1, sizeof *t->added);
    t->by_first = calloc(n ? n : 1, sizeof *t->by_first);
    if (!t->added || !t->by_first) return clef_err_set(err, CLEF_E_OOM, "out of memory loading added tokens");
    for (size_t i = 0; i < n; i++) {
        const json_value *a = arr->u.array.items[i];
        const json_value *content = clef_json_object_get(a, "content");
        int32_t id = json_id(clef_json_object_get(a, "id"));
        if (a->kind != JSON_OBJECT || !content || content->kind != JSON_STRING || id < 0)
            return clef_err_set(err, CLEF_E_BAD_MODEL, "tokenizer.json: added_tokens[%zu] lacks a string content or an id", i);
        if (content->u.string.len == 0)
            return clef_err_set(err, CLEF_E_BAD_MODEL, "tokenizer.json: added_tokens[%zu] has empty content", i);
        if (!utf8_valid(content->u.string.s, content->u.string.len))
            return clef_err_set(err, CLEF_E_BAD_MODEL, "tokenizer.json: added_tokens[%zu] content is not valid UTF-8", i);
        static const char *const unsupported[] = {"single_word", "lstrip", "rstrip", "normalized"};
        for (size_t k = 0; k < 4; k++) {
            int f = json_flag(a, unsupported[k]);
            if (f != 0)
                return clef_err_set(err, CLEF_E_BAD_MODEL,
                                    "tokenizer.json: added token '%.*s' has %s=%s; only false is supported",
                                    (int)(content->u.string.len > 64 ? 64 : content->u.string.len),
                                    content->u.string.s, unsupported[k], f > 0 ? "true" : "a non-boolean");
        }
        int sp = json_flag(a, "special");
        added_tok *d = &t->added[i];
        d->s = malloc(content->u.string.len + 1);
        if (!d->s) return clef_err_set(err, CLEF_E_OOM, "out of memory loading added tokens");
        memcpy(d->s, content->u.string.s, content->u.string.len);
        d->s[content->u.string.len] = '\0';
        d->len = content->u.string.len;
        d->id = id;
        d->special = sp > 0;
        t->n_added++;
        if ((size_t)id + 1 > t->n_ids) t->n_ids = (size_t)id + 1;
        for (size_t j = 0; j < i; j++)
            if (t->added[j].len == d->len && memcmp(t->added[j].s, d->s, d->len) == 0)
                return clef_err_set(err, CLEF_E_BAD_MODEL, "tokenizer.json: added token '%s' is listed twice", d->s);
    }
    /* index by first byte, longest first (leftmost-longest matching) */
    size_t count[256] = {0};
    for (size_t i = 0; i < t->n_added; i++) count[(unsigned char)t->added[i].s[0]]++;
    t->first_start[0] = 0;
    for (int b = 0; b < 256; b++) t->first_start[b + 1] = (uint16_t)(t->first_start[b] + count[b]);
    size_t fill[256];
    for (int b = 0; b < 256; b++) fill[b] = t->first_start[b];
    for (size_t i = 0; i < t->n_added; i++) t->by_first[fill[(unsigned char)t->added[i].s[0]]++] = (uint16_t)i;
    for (int b = 0; b < 256; b++) { /* insertion sort by length, descending */
        for (size_t i = (size_t)t->first_start[b] + 1; i < t->first_start[b + 1]; i++) {
            uint16_t x = t->by_first[i];
            size_t j = i;
            while (j > t->first_start[b] && t->added[t->by_first[j - 1]].len < t->added[x].len) {
                t->by_first[j] = t->by_first[j - 1];
                j--;
            }
            t->by_first[j] = x;
        }
    }
    t->single_first = -1;
    int distinct = 0;
    for (int b = 0; b < 256; b++)
        if (count[b]) { distinct++; t->single_first = b; }
    if (distinct != 1) t->single_first = -1;
    return 0;
}

static int load_normalizer(clef_tokenizer *t, const json_value *n, clef_err *err) {
    if (json_is_null(n)) { t->nfc = 0; return 0; }
    if (n->kind == JSON_OBJECT && json_is_str(clef_json_object_get(n, "type"), "NFC")) { t->nfc = 1; return 0; }
    const json_value *ty = clef_json_object_get(n, "type");
    return clef_err_set(err, CLEF_E_BAD_MODEL, "tokenizer.json: normalizer %.*s is not supported (only NFC or none)",
                        ty && ty->kind == JSON_STRING ? (int)(ty->u.string.len > 64 ? 64 : ty->u.string.len) : 9,
                        ty && ty->kind == JSON_STRING ? ty->u.string.s : "(no type)");
}

static int load_pre_tokenizer(clef_tokenizer *t, const json_value *p, clef_split_variant v, clef_err *err) {
    const char *bad = NULL;
    const json_value *pattern = NULL;
    if (!p || p->kind != JSON_OBJECT || !json_is_str(clef_json_object_get(p, "type"), "Sequence")) {
        bad = "it is not a Sequence";
    } else {
        const json_value *seq = clef_json_object_get(p, "pretokenizers");
        if (!seq || seq->kind != JSON_ARRAY || seq->u.array.n != 2) {
            bad = "it is not a Sequence of [Split, ByteLevel]";
        } else {
            const json_value *sp = seq->u.array.items[0], *bl = seq->u.array.items[1];
            const json_value *pat = clef_json_object_get(sp, "pattern");
            if (!json_is_str(clef_json_object_get(sp, "type"), "Split")) bad = "its first step is not Split";
            else if (!json_is_str(clef_json_object_get(sp, "behavior"), "Isolated")) bad = "its Split behavior is not Isolated";
            else if (json_flag(sp, "invert") != 0) bad = "its Split has invert=true";
            else if (!pat || !(pattern = clef_json_object_get(pat, "Regex")) || pattern->kind != JSON_STRING)
                bad = "its Split pattern is not a Regex";
            else if (!json_is_str(clef_json_object_get(bl, "type"), "ByteLevel")) bad = "its second step is not ByteLevel";
            else if (json_flag(bl, "add_prefix_space") != 0) bad = "its ByteLevel has add_prefix_space=true";
            else if (json_flag(bl, "use_regex") != 0) bad = "its ByteLevel has use_regex=true";
        }
    }
    if (bad)
        return clef_err_set(err, CLEF_E_BAD_MODEL,
                            "tokenizer.json: pre_tokenizer not supported: %s (expected Sequence[Split(Regex, "
                            "Isolated), ByteLevel(add_prefix_space=false, use_regex=false)])", bad);
    clef_split_variant file_v;
    if (pattern->u.string.len == strlen(QWEN2_SPLIT) && memcmp(pattern->u.string.s, QWEN2_SPLIT, pattern->u.string.len) == 0)
        file_v = CLEF_SPLIT_QWEN2;
    else if (pattern->u.string.len == strlen(QWEN35_SPLIT) && memcmp(pattern->u.string.s, QWEN35_SPLIT, pattern->u.string.len) == 0)
        file_v = CLEF_SPLIT_QWEN35;
    else
        file_v = CLEF_SPLIT_FROM_FILE; /* unknown */
    if (v == CLEF_SPLIT_FROM_FILE) {
        if (file_v == CLEF_SPLIT_FROM_FILE)
            return clef_err_set(err, CLEF_E_BAD_MODEL,
                                "tokenizer.json: the Split regex is neither the Qwen2 nor the Qwen3.5 (\\p{M}) "
                                "pattern; force one (--split qwen2|qwen35) to use this file");
        v = file_v;
    }
    t->variant = v;
    const char *re = v == CLEF_SPLIT_QWEN2 ? QWEN2_SPLIT : QWEN35_SPLIT;
    return clef_tokenizer_compile_split(t, re, err);
}

static int load_model(clef_tokenizer *t, const json_value *m, clef_err *err) {
    if (!m || m->kind != JSON_OBJECT) return clef_err_set(err, CLEF_E_BAD_MODEL, "tokenizer.json: no model");
    const json_value *ty = clef_json_object_get(m, "type");
    if (ty && !json_is_str(ty, "BPE")) return clef_err_set(err, CLEF_E_BAD_MODEL, "tokenizer.json: the model is not BPE");
    if (!json_is_null(clef_json_object_get(m, "dropout")))
        return clef_err_set(err, CLEF_E_BAD_MODEL, "tokenizer.json: BPE dropout is not supported");
    if (!json_is_null(clef_json_object_get(m, "unk_token")))
        return clef_err_set(err, CLEF_E_BAD_MODEL, "tokenizer.json: a BPE unk_token is not supported");
    static const char *const empty_keys[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int k = 0; k < 2; k++) {
        const json_value *x = clef_json_object_get(m, empty_keys[k]);
        if (!json_is_null(x) && !json_is_str(x, ""))
            return clef_err_set(err, CLEF_E_BAD_MODEL, "tokenizer.json: BPE %s is not supported", empty_keys[k]);
    }
    if (json_flag(m, "byte_fallback") != 0)
        return clef_err_set(err, CLEF_E_BAD_MODEL, "tokenizer.json: BPE byte_fallback is not supported");
    if (json_flag(m, "ignore_merges") != 0)
        return clef_err_set(err, CLEF_E_BAD_MODEL, "tokenizer.json: BPE ignore_merges is not supported");
    const json_value *vocab = clef_json_object_get(m, "vocab"), *merges = clef_json_object_get(m, "merges");
    if (!vocab || vocab->kind != JSON_OBJECT || !merges || merges->kind != JSON_ARRAY)
        return clef_err_set(err, CLEF_E_BAD_MODEL, "tokenizer.json: the BPE model lacks a vocab object or a merges list");

    str_map map;
    size_t nv = vocab->u.object.n;
    if (str_map_init(&map, nv)) return clef_err_set(err, CLEF_E_OOM, "out of memory loading the vocabulary");
    int rc = -1;
    char *cat = NULL;
    size_t cat_cap = 0;
    for (size_t i = 0; i < nv; i++) {
        const json_member *mb = &vocab->u.object.members[i];
        int32_t id = json_id(mb->val);
        if (id < 0) {
            clef_err_set(err, CLEF_E_BAD_MODEL, "tokenizer.json: vocab entry %zu has no valid id", i);
            goto done;
        }
        str_map_put(&map, mb->key, mb->key_len, id);
        if ((size_t)id + 1 > t->n_ids) t->n_ids = (size_t)id + 1;
    }
    for (unsigned b = 0; b < 256; b++) {
        char u[4];
        int n = clef_utf8_encode(byte_char(b), u);
        t->byte_id[b] = str_map_get(&map, u, (size_t)n);
        if (t->byte_id[b] < 0) {
            clef_err_set(err, CLEF_E_BAD_MODEL, "tokenizer.json: the vocab lacks the byte-level symbol of byte 0x%02X", b);
            goto done;
        }
    }
    size_t nm = merges->u.array.n;
    if (nm >= BPE_NO_RANK) {
        clef_err_set(err, CLEF_E_BAD_MODEL, "tokenizer.json: too many merges");
        goto done;
    }
    if (clef_bpe_pairs_init(&t->pairs, nm)) {
        clef_err_set(err, CLEF_E_OOM, "out of memory loading merges");
        goto done;
    }
    for (size_t i = 0; i < nm; i++) {
        const json_value *x = merges->u.array.items[i];
        const char *a, *b;
        size_t al, bl;
        if (x->kind == JSON_ARRAY && x->u.array.n == 2 && x->u.array.items[0]->kind == JSON_STRING &&
            x->u.array.items[1]->kind == JSON_STRING) {
            a = x->u.array.items[0]->u.string.s;
            al = x->u.array.items[0]->u.string.len;
            b = x->u.array.items[1]->u.string.s;
            bl = x->u.array.items[1]->u.string.len;
        } else if (x->kind == JSON_STRING) { /* "a b": exactly two parts split on ' ' */
            const char *s = x->u.string.s;
            size_t n = x->u.string.len;
            const char *sp = memchr(s, ' ', n);
            if (!sp || memchr(sp + 1, ' ', n - (size_t)(sp + 1 - s))) {
                clef_err_set(err, CLEF_E_BAD_MODEL, "tokenizer.json: merge %zu is not \"a b\"", i);
                goto done;
            }
            a = s;
            al = (size_t)(sp - s);
            b = sp + 1;
            bl = n - al - 1;
        } else {
            clef_err_set(err, CLEF_E_BAD_MODEL, "tokenizer.json: merge %zu is neither [a, b] nor \"a b\"", i);
            goto done;
        }
        if (al + bl > cat_cap) {
            cat_cap = 2 * (al + bl) + 64;
            char *c = realloc(cat, cat_cap);
            if (!c) {
                clef_err_set(err, CLEF_E_OOM, "out of memory loading merges");
                goto done;
            }
            cat = c;
        }
        memcpy(cat, a, al);
        memcpy(cat + al, b, bl);
        int32_t ia = str_map_get(&map, a, al), ib = str_map_get(&map, b, bl), ic = str_map_get(&map, cat, al + bl);
        if (ia < 0 || ib < 0 || ic < 0) {
            clef_err_set(err, CLEF_E_BAD_MODEL, "tokenizer.json: merge %zu (%.*s %.*s) uses a token not in the vocab", i,
                         (int)(al > 64 ? 64 : al), a, (int)(bl > 64 ? 64 : bl), b);
            goto done;
        }
        clef_bpe_pairs_put(&t->pairs, (uint32_t)ia, (uint32_t)ib, (uint32_t)i, ic);
    }
    rc = 0;
done:
    free(cat);
    free(map.slots);
    return rc;
}

clef_tokenizer *clef_tokenizer_load(const char *path, clef_split_variant v, clef_err *err) {
    if (v != CLEF_SPLIT_FROM_FILE && v != CLEF_SPLIT_QWEN2 && v != CLEF_SPLIT_QWEN35) {
        clef_err_set(err, CLEF_E_INTERNAL, "unknown split variant %d", (int)v);
        return NULL;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        clef_err_set(err, CLEF_E_IO, "cannot open %s", path);
        return NULL;
    }
    char *data = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            if (cap > ((size_t)1 << 31)) {
                fclose(f);
                free(data);
                clef_err_set(err, CLEF_E_BAD_MODEL, "%s is larger than 2 GiB", path);
                return NULL;
            }
            cap = cap ? 2 * cap : (32u << 20);
            char *d = realloc(data, cap);
            if (!d) {
                fclose(f);
                free(data);
                clef_err_set(err, CLEF_E_OOM, "out of memory reading %s", path);
                return NULL;
            }
            data = d;
        }
        size_t r = fread(data + len, 1, cap - len, f);
        len += r;
        if (r == 0) break;
    }
    int ferr = ferror(f);
    fclose(f);
    if (ferr) {
        free(data);
        clef_err_set(err, CLEF_E_IO, "cannot read %s", path);
        return NULL;
    }
    json_limits lim = {0, 0};
    clef_err jerr;
    clef_err_clear(&jerr);
    json_doc *doc = clef_json_parse(data, len, &lim, &jerr);
    free(data);
    if (!doc) {
        clef_err_set(err, (jerr.type && !strcmp(jerr.type, CLEF_E_OOM)) ? CLEF_E_OOM : CLEF_E_BAD_MODEL, "%s: %s", path, jerr.msg);
        return NULL;
    }
    clef_tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        clef_json_doc_free(doc);
        clef_err_set(err, CLEF_E_OOM, "out of memory loading %s", path);
        return NULL;
    }
    const json_value *root = clef_json_doc_root(doc);
    int rc = -1;
    if (!root || root->kind != JSON_OBJECT) {
        clef_err_set(err, CLEF_E_BAD_MODEL, "%s: not a JSON object", path);
        goto out;
    }
    if (!json_is_null(clef_json_object_get(root, "truncation")) || !json_is_null(clef_json_object_get(root, "padding"))) {
        clef_err_set(err, CLEF_E_BAD_MODEL, "%s: truncation/padding settings are not supported (they would change the ids)", path);
        goto out;
    }
    t->gen = atomic_fetch_add(&gen_counter, 1) + 1;
    if (t->gen == 0) t->gen = atomic_fetch_add(&gen_counter, 1) + 1;
    if (load_model(t, clef_json_object_get(root, "model"), err)) goto out;
    if (load_added(t, clef_json_object_get(root, "added_tokens"), err)) goto out;
    if (load_normalizer(t, clef_json_object_get(root, "normalizer"), err)) goto out;
    if (load_pre_tokenizer(t, clef_json_object_get(root, "pre_tokenizer"), v, err)) goto out;
    rc = 0;
out:
    clef_json_doc_free(doc);
    if (rc) {
        clef_tokenizer_free(t);
        return NULL;
    }
    return t;
}

int32_t clef_tokenizer_added_id(const clef_tokenizer *t, const char *content) {
    size_t n = strlen(content);
    for (size_t i = 0; i < t->n_added; i++)
        if (t->added[i].len == n && memcmp(t->added[i].s, content, n) == 0) return t->added[i].id;
    return -1;
}

size_t clef_tokenizer_vocab_size(const clef_tokenizer *t) { return t->n_ids; }

clef_split_variant clef_tokenizer_variant(const clef_tokenizer *t) { return t->variant; }
