/* Unknown keys and plain-words explanations of the reference's refusals (lint.h). */
#include "decision/lint.h"

#include <string.h>

#include "decision/request.h"

static const char *const TOP_KEYS[] = {"model", "state", "questions", "images", "videos", "media_kwargs", "raw"};
static const char *const QUESTION_KEYS[] = {"type", "instructions", "criteria"};

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))
#define KEY_SHOWN 64 /* bytes of a key quoted in a line */

void clef_pointer_put(clef_buf *out, const char *key, size_t key_len) {
    static const char hex[] = "0123456789abcdef";
    clef_buf_putc(out, '/');
    size_t n = key_len < KEY_SHOWN ? key_len : KEY_SHOWN;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)key[i];
        if (c == '~') clef_buf_puts(out, "~0");
        else if (c == '/') clef_buf_puts(out, "~1");
        else if (c >= 0x20 && c < 0x7f && c != '\\') clef_buf_putc(out, c);
        else {
            char esc[4] = {'\\', 'x', hex[c >> 4], hex[c & 15]};
            clef_buf_put(out, esc, 4);
        }
    }
    if (n < key_len) clef_buf_puts(out, "...");
}

/* Edit distance over bytes counting a swap of two neighbours as one edit ("modle" is 1 from
 * "model"; optimal string alignment). Keys longer than 32 bytes are never near a known one. */
static size_t edit_distance(const char *a, size_t na, const char *b, size_t nb) {
    size_t d[33][33];
    if (na > 32 || nb > 32) return (size_t)-1;
    for (size_t i = 0; i <= na; i++) d[i][0] = i;
    for (size_t j = 0; j <= nb; j++) d[0][j] = j;
    for (size_t i = 1; i <= na; i++)
        for (size_t j = 1; j <= nb; j++) {
            size_t best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[na][nb];
}

static int known(const char *k, size_t n, const char *const *keys, size_t n_keys) {
    for (size_t i = 0; i < n_keys; i++)
        if (strlen(keys[i]) == n && memcmp(keys[i], k, n) == 0) return 1;
    return 0;
}

/* One line for an unknown key at `prefix` + key: the nearest known key when it is close (at most a
 * third of its length away, and at most 3 edits), else the list of known keys. */
static void unknown_line(clef_buf *out, const clef_buf *prefix, const char *k, size_t n, const char *const *keys,
                         size_t n_keys) {
    size_t best = (size_t)-1, at = 0;
    for (size_t i = 0; i < n_keys; i++) {
        size_t d = edit_distance(k, n, keys[i], strlen(keys[i]));
        if (d < best) best = d, at = i;
    }
    size_t len = strlen(keys[at]);
    clef_buf_puts(out, "unknown key ");
    if (prefix->len) clef_buf_put(out, prefix->data, prefix->len);
    clef_pointer_put(out, k, n);
    if (best <= 3 && best * 3 <= (len > n ? len : n)) {
        clef_buf_printf(out, "; did you mean %s?\n", keys[at]);
    } else {
        clef_buf_puts(out, "; ignored (known keys:");
        for (size_t i = 0; i < n_keys; i++) clef_buf_printf(out, " %s", keys[i]);
        clef_buf_puts(out, ")\n");
    }
}

/* Lines written per request at most (each becomes an HTTP header); the rest are counted in one more. */
#define LINES_SHOWN 8

static void lint_object(const json_value *obj, const clef_buf *prefix, const char *const *keys, size_t n_keys,
                        clef_buf *out, size_t *found) {
    for (size_t i = 0; i < obj->u.object.n; i++) {
        const json_member *m = &obj->u.object.members[i];
        if (known(m->key, m->key_len, keys, n_keys)) continue;
        if (++*found <= LINES_SHOWN) unknown_line(out, prefix, m->key, m->key_len, keys, n_keys);
    }
}

int clef_request_lint(const json_value *root, clef_buf *out) {
    if (!root || root->kind != JSON_OBJECT) return 0;
    clef_buf prefix;
    clef_buf_init(&prefix);
    size_t found = 0;
    lint_object(root, &prefix, TOP_KEYS, N_OF(TOP_KEYS), out, &found);
    const json_value *qs = clef_json_object_get(root, "questions");
    if (qs && qs->kind == JSON_OBJECT) {
        for (size_t i = 0; i < qs->u.object.n; i++) {
            const json_member *m = &qs->u.object.members[i];
            if (m->val->kind != JSON_OBJECT) continue;
            clef_buf_reset(&prefix);
            clef_buf_puts(&prefix, "/questions");
            clef_pointer_put(&prefix, m->key, m->key_len);
            lint_object(m->val, &prefix, QUESTION_KEYS, N_OF(QUESTION_KEYS), out, &found);
        }
    }
    if (found > LINES_SHOWN) clef_buf_printf(out, "%zu more unknown keys\n", found - LINES_SHOWN);
    int lines = (int)(found < LINES_SHOWN + 1 ? found : LINES_SHOWN + 1);
    int oom = prefix.oom || out->oom;
    clef_buf_free(&prefix);
    return oom ? -1 : lines;
}

/* "a list", "an int", ... as a JSON client would name the value it sent. */
static const char *json_kind_name(const json_value *v) {
    switch (v->kind) {
    case JSON_NULL: return "null";
    case JSON_FALSE:
    case JSON_TRUE: return "a boolean";
    case JSON_INT:
    case JSON_FLOAT: return "a number";
    case JSON_STRING: return "a string";
    case JSON_ARRAY: return "a list";
    case JSON_OBJECT: return "an object";
    }
    return "a value";
}

int clef_request_explain(const json_value *root, const clef_err *err, clef_buf *out) {
    if (!root || !err || !err->type || root->kind != JSON_OBJECT) return 0;
    size_t before = out->len;
    if (!strcmp(err->type, CLEF_E_MISSING_MODEL_OR_STATE)) {
        const json_value *model = clef_json_object_get(root, "model");
        const json_value *state = clef_json_object_get(root, "state");
        if (!model) clef_buf_puts(out, "/model is missing (any string; it is echoed in the answer)\n");
        else if (model->kind != JSON_STRING)
            clef_buf_printf(out, "/model must be a string, got %s\n", json_kind_name(model));
        if (!state) clef_buf_puts(out, "/state is missing (the record to decide on: a string or any JSON value)\n");
    } else if (!strcmp(err->type, CLEF_E_NO_QUESTIONS)) {
        const json_value *qs = clef_json_object_get(root, "questions");
        if (!qs) clef_buf_puts(out, "/questions is missing; expected an object of id -> question\n");
        else if (qs->kind != JSON_OBJECT)
            clef_buf_printf(out, "/questions must be an object of id -> question, got %s\n", json_kind_name(qs));
        else clef_buf_puts(out, "/questions is empty; expected an object of id -> question\n");
    } else if (!strcmp(err->type, CLEF_E_BAD_QUESTION)) {
        const json_value *qs = clef_json_object_get(root, "questions");
        for (size_t i = 0; qs && qs->kind == JSON_OBJECT && i < qs->u.object.n; i++) {
            const json_member *m = &qs->u.object.members[i];
            if (m->val->kind == JSON_OBJECT) continue;
            clef_buf_puts(out, "/questions");
            clef_pointer_put(out, m->key, m->key_len);
            clef_buf_printf(out, " must be an object {\"type\": ..., \"instructions\": ..., \"criteria\": ...}, got %s\n",
                            json_kind_name(m->val));
            break;
        }
    } else if (!strcmp(err->type, CLEF_E_UNSUPPORTED_MEDIA) && !strcmp(err->msg, "'video_fps'")) {
        /* the reference's KeyError text when its decoder gets no frame rate: the file is no video */
        clef_buf_puts(out, "a /videos entry could not be opened as a video (a corrupt, truncated or non-video file); "
                           "'video_fps' is the reference's message for it\n");
    }
    if (out->oom) return -1;
    return out->len > before ? 1 : 0;
}
