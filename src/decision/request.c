/* Request checks and typing: the author's systemone() checks and question_options(), in C.
 * See request.h for the order of the checks and docs/errors.md for the messages. */
#include "decision/request.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"

static const char DEFAULT_T[] = "The proposition is true or the answer is yes.";
static const char DEFAULT_F[] = "The proposition is false or the answer is no.";

const char *clef_py_type_name(const json_value *v) {
    if (!v) return "NoneType";
    switch (v->kind) {
    case JSON_NULL: return "NoneType";
    case JSON_FALSE:
    case JSON_TRUE: return "bool";
    case JSON_INT: return "int";
    case JSON_FLOAT: return "float";
    case JSON_STRING: return "str";
    case JSON_ARRAY: return "list";
    case JSON_OBJECT: return "dict";
    }
    return "object";
}

/* "{id}{suffix}" with the id's raw bytes (it may hold NUL bytes; the message is cut at the buffer's
 * size like every clef_err message). */
static int err_id(clef_err *err, const char *type, const char *id, size_t id_len, const char *suffix) {
    if (!err) return -1;
    err->type = type;
    size_t cap = sizeof err->msg - 1, n = id_len < cap ? id_len : cap;
    memcpy(err->msg, id, n);
    size_t sl = strlen(suffix);
    if (sl > cap - n) sl = cap - n;
    memcpy(err->msg + n, suffix, sl);
    err->msg[n + sl] = '\0';
    return -1;
}

static int oom(clef_err *err) { return clef_err_set(err, CLEF_E_OOM, "out of memory while reading the request"); }

static int key_is(const char *k, size_t n, const char *lit) { return n == strlen(lit) && memcmp(k, lit, n) == 0; }

/* Records a BadCriteria for question q (deferred: encode_record raises it in schema order). */
static int crit_fail(clef_question *q, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int crit_fail(clef_question *q, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    q->crit_err_msg = strdup(tmp);
    if (!q->crit_err_msg) return -1;
    q->crit_err_type = CLEF_E_BAD_CRITERIA;
    return 0;
}

static const json_value *desc_of(const json_value *v) { return (v && v->kind != JSON_NULL) ? v : NULL; }

static int alloc_options(clef_question *q, size_t n) {
    q->n_options = n;
    q->options = calloc(n ? n : 1, sizeof *q->options);
    q->listing = calloc(n ? n : 1, sizeof *q->listing);
    if (!q->options || !q->listing) return -1;
    for (size_t i = 0; i < n; i++) q->listing[i] = i;
    return 0;
}

/* noul: {"true": T, "false": F}.update(criteria or {}), as dict.update does it. */
static int resolve_noul(json_doc *own, clef_question *q, const json_value *crit) {
    const json_value *dt = clef_json_new_string(own, DEFAULT_T, sizeof DEFAULT_T - 1);
    const json_value *df = clef_json_new_string(own, DEFAULT_F, sizeof DEFAULT_F - 1);
    if (!dt || !df) return -1;
    if (clef_json_truthy(crit)) {
        switch (crit->kind) {
        case JSON_OBJECT:
            for (size_t i = 0; i < crit->u.object.n; i++) {
                const json_member *m = &crit->u.object.members[i];
                if (key_is(m->key, m->key_len, "true")) dt = m->val;
                else if (key_is(m->key, m->key_len, "false")) df = m->val;
            }
            break;
        case JSON_ARRAY:
            for (size_t i = 0; i < crit->u.array.n; i++) {
                const json_value *e = crit->u.array.items[i];
                size_t len;
                const char *k = NULL;
                size_t klen = 0;
                const json_value *val = NULL;
                if (e->kind == JSON_STRING) {
                    len = clef_utf8_count(e->u.string.s, e->u.string.len);
                } else if (e->kind == JSON_ARRAY) {
                    len = e->u.array.n;
                    if (len == 2) {
                        const json_value *kv = e->u.array.items[0];
                        if (kv->kind == JSON_ARRAY || kv->kind == JSON_OBJECT)
                            return crit_fail(q, "unhashable type: '%s'", clef_py_type_name(kv));
                        if (kv->kind == JSON_STRING) k = kv->u.string.s, klen = kv->u.string.len;
                        val = e->u.array.items[1];
                    }
                } else if (e->kind == JSON_OBJECT) {
                    len = e->u.object.n; /* iterating a dict gives its keys */
                    if (len == 2) {
                        k = e->u.object.members[0].key, klen = e->u.object.members[0].key_len;
                        val = clef_json_new_string(own, e->u.object.members[1].key, e->u.object.members[1].key_len);
                        if (!val) return -1;
                    }
                } else {
                    return crit_fail(q, "cannot convert dictionary update sequence element #%zu to a sequence", i);
                }
                if (len != 2)
                    return crit_fail(q, "dictionary update sequence element #%zu has length %zu; 2 is required", i, len);
                /* a 2-character string sets a one-character key: never "true"/"false" */
                if (k && key_is(k, klen, "true")) dt = val;
                else if (k && key_is(k, klen, "false")) df = val;
            }
            break;
        case JSON_STRING: /* its elements are single characters */
            return crit_fail(q, "dictionary update sequence element #0 has length 1; 2 is required");
        default:
            return crit_fail(q, "'%s' object is not iterable", clef_py_type_name(crit));
        }
    }
    if (alloc_options(q, 2)) return -1;
    q->options[0] = (clef_option){"true", 4, desc_of(dt)};
    q->options[1] = (clef_option){"false", 5, desc_of(df)};
    return 0;
}

typedef struct {
    clef_option o;
    size_t orig;
} sort_item;

static int cmp_item(const void *a, const void *b) {
    const sort_item *x = a, *y = b;
    size_t n = x->o.id_len < y->o.id_len ? x->o.id_len : y->o.id_len;
    int c = memcmp(x->o.id, y->o.id, n);
    if (c) return c;
    if (x->o.id_len != y->o.id_len) return x->o.id_len < y->o.id_len ? -1 : 1;
    return x->orig < y->orig ? -1 : (x->orig > y->orig);
}

/* choice: sorted((str(key), value) for key, value in criteria.items()). UTF-8 byte order equals
 * code point order (also for the WTF-8 form of lone surrogates). */
static int resolve_choice(json_doc *own, clef_question *q, const json_value *crit) {
    (void)own;
    if (crit->kind != JSON_OBJECT)
        return crit_fail(q, "'%s' object has no attribute 'items'", clef_py_type_name(crit));
    size_t n = crit->u.object.n;
    if (alloc_options(q, n)) return -1;
    sort_item *it = malloc((n ? n : 1) * sizeof *it);
    if (!it) return -1;
    for (size_t i = 0; i < n; i++) {
        const json_member *m = &crit->u.object.members[i];
        it[i].o = (clef_option){m->key, m->key_len, desc_of(m->val)};
        it[i].orig = i;
    }
    qsort(it, n, sizeof *it, cmp_item);
    for (size_t j = 0; j < n; j++) {
        q->options[j] = it[j].o;
        q->listing[it[j].orig] = j;
    }
    free(it);
    return 0;
}

/* score: [(str(i), v) for i, v in enumerate(criteria)]; the legend keeps the items. */
static int resolve_score(json_doc *own, clef_question *q, const json_value *crit) {
    size_t n;
    switch (crit->kind) {
    case JSON_ARRAY: n = crit->u.array.n; break;
    case JSON_OBJECT: n = crit->u.object.n; break;
    case JSON_STRING: n = clef_utf8_count(crit->u.string.s, crit->u.string.len); break;
    default: return crit_fail(q, "'%s' object is not iterable", clef_py_type_name(crit));
    }
    if (alloc_options(q, n)) return -1;
    q->legend = calloc(n ? n : 1, sizeof *q->legend);
    if (!q->legend) return -1;
    const char *s = crit->kind == JSON_STRING ? crit->u.string.s : NULL;
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        const json_value *item;
        if (crit->kind == JSON_ARRAY) {
            item = crit->u.array.items[i];
        } else if (crit->kind == JSON_OBJECT) {
            item = clef_json_new_string(own, crit->u.object.members[i].key, crit->u.object.members[i].key_len);
        } else {
            uint32_t cp;
            int k = clef_utf8_decode_wtf8(s + off, crit->u.string.len - off, &cp);
            if (k <= 0) k = 1; /* cannot happen on parser output */
            item = clef_json_new_string(own, s + off, (size_t)k);
            off += (size_t)k;
        }
        if (!item) return -1;
        char num[32];
        int nl = snprintf(num, sizeof num, "%zu", i);
        const json_value *idv = clef_json_new_string(own, num, (size_t)nl);
        if (!idv) return -1;
        q->legend[i] = item;
        q->options[i] = (clef_option){idv->u.string.s, idv->u.string.len, desc_of(item)};
    }
    return 0;
}

/* The options of each type from its "criteria" (question_type.h: one resolve_<name> per row). */
#define RESOLVE_(ID, name, Title, criteria, shape, label, schema) [CLEF_Q_##ID] = resolve_##name,
static int (*const resolve[CLEF_QTYPE_COUNT])(json_doc *, clef_question *, const json_value *) = {
    CLEF_QUESTION_TYPES(RESOLVE_, CLEF_QT_NOSEP)};

void clef_request_free(clef_request *req) {
    if (!req) return;
    if (req->questions) {
        for (size_t i = 0; i < req->n_questions; i++) {
            clef_question *q = &req->questions[i];
            free(q->options);
            free(q->listing);
            free(q->legend);
            free(q->crit_err_msg);
        }
        free(req->questions);
    }
    if (req->own) clef_json_doc_free(req->own);
    memset(req, 0, sizeof *req);
}

int clef_request_parse(const json_value *root, clef_request *req, clef_err *err) {
    memset(req, 0, sizeof *req);
    req->root = root;
    /* 0: request.get(...) on a non-dict */
    if (!root || root->kind != JSON_OBJECT)
        return clef_err_set(err, CLEF_E_BAD_JSON, "'%s' object has no attribute 'get'", clef_py_type_name(root));
    const json_value *questions = clef_json_object_get(root, "questions");
    const json_value *model = clef_json_object_get(root, "model");
    const json_value *state = clef_json_object_get(root, "state");
    /* 1 */
    if (!model || model->kind != JSON_STRING || !state)
        return clef_err_set(err, CLEF_E_MISSING_MODEL_OR_STATE, "model and state are required");
    /* 2 */
    if (!questions || questions->kind != JSON_OBJECT || questions->u.object.n == 0)
        return clef_err_set(err, CLEF_E_NO_QUESTIONS, "at least one question is required");
    /* 3, 4: interleaved per question */
    size_t nq = questions->u.object.n;
    for (size_t i = 0; i < nq; i++) {
        const json_member *m = &questions->u.object.members[i];
        const json_value *q = m->val;
        if (q->kind != JSON_OBJECT)
            return clef_err_set(err, CLEF_E_BAD_QUESTION, "'%s' object has no attribute 'get'", clef_py_type_name(q));
        const json_value *t = clef_json_object_get(q, "type");
        if (t && (t->kind == JSON_ARRAY || t->kind == JSON_OBJECT))
            return clef_err_set(err, CLEF_E_BAD_QUESTION_TYPE, "unhashable type: '%s'", clef_py_type_name(t));
        clef_qtype type;
        if (!t || t->kind != JSON_STRING || clef_qtype_parse(t->u.string.s, t->u.string.len, &type)) {
            char msg[128] = ": type must be ";
            size_t at = strlen(msg);
            clef_qtype_list(msg + at, sizeof msg - at);
            return err_id(err, CLEF_E_BAD_QUESTION_TYPE, m->key, m->key_len, msg);
        }
        if (clef_qtype_needs_criteria(type) && !clef_json_truthy(clef_json_object_get(q, "criteria")))
            return err_id(err, CLEF_E_EMPTY_CRITERIA, m->key, m->key_len, ": criteria must not be empty");
    }

    req->model = model->u.string.s;
    req->model_len = model->u.string.len;
    req->state = state;
    req->images = clef_json_object_get(root, "images");
    req->videos = clef_json_object_get(root, "videos");
    req->media_kwargs = clef_json_object_get(root, "media_kwargs");
    const json_value *raw = clef_json_object_get(root, "raw");
    req->raw = raw && raw->kind == JSON_TRUE;
    req->own = clef_json_doc_new();
    req->questions = calloc(nq, sizeof *req->questions);
    if (!req->own || !req->questions) {
        clef_request_free(req);
        return oom(err);
    }
    req->n_questions = nq;
    for (size_t i = 0; i < nq; i++) {
        const json_member *m = &questions->u.object.members[i];
        const json_value *qv = m->val;
        clef_question *q = &req->questions[i];
        q->id = m->key;
        q->id_len = m->key_len;
        const json_value *t = clef_json_object_get(qv, "type");
        clef_qtype_parse(t->u.string.s, t->u.string.len, &q->type); /* checked above */
        q->type_name = clef_qtype_name(q->type);
        const json_value *ins = clef_json_object_get(qv, "instructions");
        if (!ins || ins->kind == JSON_NULL || (ins->kind == JSON_STRING && ins->u.string.len == 0)) {
            ins = clef_json_new_string(req->own, m->key, m->key_len);
            if (!ins) goto fail_oom;
        }
        q->instructions = ins;
        const json_value *crit = clef_json_object_get(qv, "criteria");
        if (resolve[q->type](req->own, q, crit)) goto fail_oom;
    }
    return 0;
fail_oom:
    clef_request_free(req);
    return oom(err);
}

int clef_request_check_criteria(const clef_request *req, clef_err *err) {
    for (size_t i = 0; i < req->n_questions; i++)
        if (req->questions[i].crit_err_type)
            return clef_err_set(err, req->questions[i].crit_err_type, "%s", req->questions[i].crit_err_msg);
    return 0;
}
