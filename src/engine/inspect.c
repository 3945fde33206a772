/* The entries of clef.h that run the host pipeline without an engine: clef_encode_request (`clef
 * encode`, `clef respond --model`) and clef_state_key (`clef state-key`, clef.state_key in Python).
 * They run the functions clef_job_prepare runs (engine/host.h) with the limits clef_open would set
 * from the same options, and read only the tokenizer (no weights). */
#include "clef.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/buf.h"
#include "decision/response.h"
#include "engine/engine_internal.h"
#include "engine/host.h"
#include "engine/state_key.h"

/* ---- the tokenizer, kept between calls
 * `clef state-key` keys one request per input line and a Python client one per call; reading the
 * 248,320-token tokenizer.json takes ~0.25 s each time. So the last one read is kept (for the life
 * of the process) and used again while the folder, the split variant and the file (device, inode,
 * size, mtime) are the same; a call on another one replaces it, freed when its last user is done.
 * Tokenizers are read-only once loaded (an engine's serves every prepare thread). */
typedef struct shared_tok {
    clef_tokenizer *tok;
    char *dir;
    int split;
    struct stat st;
    int users; /* calls holding it, plus 1 while it is the kept one */
} shared_tok;

static pthread_mutex_t tok_mu = PTHREAD_MUTEX_INITIALIZER;
static shared_tok *kept_tok;

/* fork(): tok_mu is taken before it and handed back on both sides, so a child never finds it held by
 * a thread that did not come along */
static void tok_fork_prepare(void) { pthread_mutex_lock(&tok_mu); }
static void tok_fork_release(void) { pthread_mutex_unlock(&tok_mu); }
static pthread_once_t tok_fork_once = PTHREAD_ONCE_INIT;
static void tok_fork_register(void) { pthread_atfork(tok_fork_prepare, tok_fork_release, tok_fork_release); }

static int same_file(const struct stat *a, const struct stat *b) {
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

static void shared_drop(shared_tok *s) { /* tok_mu held */
    if (--s->users > 0) return;
    clef_tokenizer_free(s->tok);
    free(s->dir);
    free(s);
}

static void tokenizer_release(shared_tok *s) {
    if (!s) return;
    pthread_mutex_lock(&tok_mu);
    shared_drop(s);
    pthread_mutex_unlock(&tok_mu);
}

static shared_tok *tokenizer_acquire(const clef_options *o, clef_err *err) {
    clef_buf path;
    clef_buf_init(&path);
    clef_buf_printf(&path, "%s/tokenizer.json", o->model_dir);
    if (path.oom) {
        clef_buf_free(&path);
        clef_err_set(err, CLEF_E_OOM, "out of memory");
        return NULL;
    }
    pthread_once(&tok_fork_once, tok_fork_register);
    struct stat st;
    int have_st = stat(path.data, &st) == 0;
    clef_buf_free(&path);
    pthread_mutex_lock(&tok_mu);
    shared_tok *s = kept_tok;
    if (s && have_st && s->split == o->split_variant && !strcmp(s->dir, o->model_dir) && same_file(&s->st, &st)) {
        s->users++;
        pthread_mutex_unlock(&tok_mu);
        return s;
    }
    pthread_mutex_unlock(&tok_mu);
    /* read outside the lock (the load reports a missing or bad file itself) */
    s = calloc(1, sizeof *s);
    if (!s || !(s->dir = strdup(o->model_dir))) {
        free(s);
        clef_err_set(err, CLEF_E_OOM, "out of memory");
        return NULL;
    }
    s->tok = clef_host_tokenizer(o, err);
    if (!s->tok) {
        free(s->dir);
        free(s);
        return NULL;
    }
    s->split = o->split_variant;
    s->st = st;
    s->users = 1;
    if (have_st) { /* keep it */
        pthread_mutex_lock(&tok_mu);
        if (kept_tok) shared_drop(kept_tok);
        kept_tok = s;
        s->users++;
        pthread_mutex_unlock(&tok_mu);
    }
    return s;
}

/* ---- the host pipeline without an engine */

typedef struct {
    json_doc *doc;
    clef_request req;
    clef_record rec;
    shared_tok *tok;
} inspected;

/* Parses, validates and encodes body as clef_job_prepare does. Returns 0, or -1 with *err set; free
 * *x with inspected_free either way. With notes (may be NULL): the warning lines clef_job_prepare
 * gives, for an answer or for a refusal. */
static int inspect(const clef_options *o, const char *body, size_t len, inspected *x, clef_buf *notes,
                   clef_err *err) {
    memset(x, 0, sizeof *x);
    /* the request is checked before the tokenizer is read: a bad body is refused as the engine refuses it */
    if (clef_host_parse(body, len, &x->doc, &x->req, err)) {
        if (notes && clef_host_explain(x->doc ? clef_json_doc_root(x->doc) : NULL, err, notes) < 0) clef_buf_free(notes);
        return -1;
    }
    if (!o->model_dir) {
        clef_err_set(err, CLEF_E_BAD_MODEL, "no model folder given (--model DIR)");
        return -1;
    }
    x->tok = tokenizer_acquire(o, err);
    if (!x->tok) return -1;
    clef_image_opts io;
    clef_host_image_opts(o, &io);
    if (clef_host_encode(x->tok->tok, &io, o->max_length, NULL, NULL, &x->req, &x->rec, err)) {
        if (notes && clef_host_explain(x->req.root, err, notes) < 0) clef_buf_free(notes);
        return -1;
    }
    if (notes && clef_host_notes(&x->req, &x->rec, o->max_length, notes) < 0) clef_buf_free(notes);
    return 0;
}

static void inspected_free(inspected *x) {
    clef_record_free(&x->rec);
    clef_request_free(&x->req);
    tokenizer_release(x->tok);
    clef_json_doc_free(x->doc);
}

int clef_encode_request(const clef_options *o, const char *body, size_t len, clef_result *out) {
    clef_err err;
    clef_err_clear(&err);
    clef_options dflt;
    if (!o) {
        clef_options_default(&dflt);
        o = &dflt;
    }
    inspected x;
    clef_buf b, notes;
    clef_buf_init(&b);
    clef_buf_init(&notes);
    int rc = -1;
    if (inspect(o, body, len, &x, &notes, &err)) goto out;
    if (clef_record_render(&b, &x.rec)) {
        clef_err_set(&err, CLEF_E_OOM, "out of memory");
        goto out;
    }
    memset(out, 0, sizeof *out);
    out->body = clef_buf_take(&b, &out->body_len);
    if (!out->body) {
        clef_err_set(&err, CLEF_E_OOM, "out of memory");
        goto out;
    }
    out->http_status = 200;
    out->input_tokens = (int)x.rec.n_ids;
    rc = 0;
out:
    if (rc) clef_engine_error_result(&err, 0, out); /* as clef_job_prepare: refused before the forward */
    if (notes.len && !notes.oom) { /* the warnings clef_decide gives (none when out of memory) */
        size_t n;
        out->warnings = clef_buf_take(&notes, &n);
    }
    clef_buf_free(&notes);
    clef_buf_free(&b);
    inspected_free(&x);
    return rc;
}

int clef_state_key(const clef_options *o, const char *body, size_t len, clef_result *out) {
    clef_err err;
    clef_err_clear(&err);
    clef_options dflt;
    if (!o) {
        clef_options_default(&dflt);
        o = &dflt;
    }
    inspected x;
    uint8_t *hashes = NULL;
    int rc = -1;
    if (inspect(o, body, len, &x, NULL, &err)) goto out;
    if (x.rec.n_images && !(hashes = malloc(32 * x.rec.n_images))) {
        clef_err_set(&err, CLEF_E_OOM, "out of memory");
        goto out;
    }
    if (clef_record_media_hashes(&x.rec, hashes)) {
        clef_err_set(&err, CLEF_E_INTERNAL, "a media entry has no pixel values");
        goto out;
    }
    memset(out, 0, sizeof *out);
    out->body = malloc(CLEF_STATE_KEY_LEN + 1);
    if (!out->body) {
        clef_err_set(&err, CLEF_E_OOM, "out of memory");
        goto out;
    }
    clef_record_state_key(&x.rec, hashes, out->body);
    out->body_len = CLEF_STATE_KEY_LEN;
    out->http_status = 200;
    out->input_tokens = (int)x.rec.n_ids;
    rc = 0;
out:
    if (rc) clef_engine_error_result(&err, 0, out);
    free(hashes);
    inspected_free(&x);
    return rc;
}
