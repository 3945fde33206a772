/* Parity with the reference on the tiny checkpoint: tests/fixtures/tiny/index.json + data.bin
 * (tools/reference/make_fixtures.py: the author's fp32 code, torch 2.9.0, transformers 5.17.0).
 * For every request the reference answered:
 *  - every decoder layer's output rows and the final-norm rows (the stored rows: all or a sample)
 *    within 1e-5 relative L2 of the reference (the rotary inv_freq taken from the fixture bits);
 *  - the head on our hidden rows (end to end), per option, against the fp32 reference p32 and the
 *    float64 oracle p64 (tests/fixtures/tiny64, tools/reference/make_fixtures64.py: the same
 *    reference code run in float64): |p - p32| <= 1e-6 + |p32 - p64| (equal to the reference within
 *    the reference's own fp32 rounding) and, on the parity path (CLEF_LINEAR=double: every Linear
 *    accumulated in double; tests/parity/test_tiny_parity_double.sh runs it), |p - p64| <= 1e-6.
 *    The default path (fp32 FMA GEMM, src/compute/cpu/gemm.c) is a faster path in issue 8's sense:
 *    its |p - p64| is reported and bounded by 1e-4; logits reported. With images the
 *    forward above is fed the fp32 reference's merger rows, so |p - p64| is checked on a second
 *    forward fed the float64 oracle's merger rows (both runs then share their inputs). The float64
 *    fixture is committed: missing, it fails the test;
 *  - NaN where the reference gives NaN (an empty question span, contract.md §3.2);
 *  - where the fixture holds every final-norm row: the head on the REFERENCE rows (head alone),
 *    max |dp| <= 1e-6.
 * Requests with images use the recorded merger rows as replacement rows and the recorded 3-D
 * positions (when the fixture holds every merger row). Requests over 5000 tokens run only with
 * CLEF_PARITY_LONG=1 (the plain CPU attention is O(T^2) in double: minutes for 16k tokens).
 * The last line reports the worst values. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/cpu/cpu_ops.h"
#include "decision/response.h"
#include "model/head.h"
#include "model/text.h"
#include "model/weights.h"
#include "test.h"
#include "base/json.h"

/* |p - p64| bound: 1e-6 on the parity path (CLEF_LINEAR=double), 1e-4 on the default fp32-GEMM path
 * (issue 8's bound for faster paths; the measured value is printed). */
static double p64_bound(void) {
    const char *e = getenv("CLEF_LINEAR");
    return e && !strcmp(e, "double") ? 1e-6 : 1e-4;
}

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc((size_t)n + 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) { free(p); p = NULL; }
    fclose(f);
    if (p) { p[n] = 0; *len = (size_t)n; }
    return p;
}

static long jint(const json_value *v) {
    if (!v) return -1;
    if (v->kind == JSON_INT) return strtol(v->u.integer.digits, NULL, 10);
    if (v->kind == JSON_FLOAT) return (long)v->u.number;
    return -1;
}
static const json_value *jget(const json_value *o, const char *k) { return clef_json_object_get(o, k); }
static size_t jlen(const json_value *a) { return a && a->kind == JSON_ARRAY ? a->u.array.n : 0; }
static const json_value *jat(const json_value *a, size_t i) { return a->u.array.items[i]; }

/* A stored array: data pointer, total floats, rows (NULL = all) */
typedef struct {
    const float *p;
    size_t nfloats;
    const json_value *rows; /* array of row indices, or NULL for "all" */
} arr_t;

static int get_arr(const json_value *ref, const char *bin, size_t binlen, arr_t *a) {
    if (!ref) return -1;
    long off = jint(jget(ref, "off"));
    const json_value *shape = jget(ref, "shape");
    size_t n = 1;
    for (size_t i = 0; i < jlen(shape); i++) n *= (size_t)jint(jat(shape, i));
    if (off < 0 || (size_t)off + n * 4 > binlen) return -1;
    a->p = (const float *)(bin + off);
    a->nfloats = n;
    const json_value *rows = jget(ref, "rows");
    a->rows = rows && rows->kind == JSON_ARRAY ? rows : NULL;
    return 0;
}

/* A float64 array of tests/fixtures/tiny64 (data.bin is little-endian float64) */
typedef struct {
    const double *p;
    size_t n;
    const json_value *rows; /* array of row indices, or NULL for "all" */
} arr64_t;

static int get_arr64(const json_value *ref, const char *bin, size_t binlen, arr64_t *a) {
    if (!ref) return -1;
    long off = jint(jget(ref, "off"));
    const json_value *shape = jget(ref, "shape");
    size_t n = 1;
    for (size_t i = 0; i < jlen(shape); i++) n *= (size_t)jint(jat(shape, i));
    if (off < 0 || off % 8 || (size_t)off + n * 8 > binlen) return -1;
    a->p = (const double *)(bin + off);
    a->n = n;
    const json_value *rows = jget(ref, "rows");
    a->rows = rows && rows->kind == JSON_ARRAY ? rows : NULL;
    return 0;
}

/* relative L2 of our [T, D] rows against a float64 array (its rows) */
static double rel_l2_rows64(const float *ours, size_t T, size_t D, const arr64_t *a) {
    double num = 0, den = 0;
    size_t nr = a->rows ? jlen(a->rows) : T;
    if (nr * D != a->n) return INFINITY;
    for (size_t r = 0; r < nr; r++) {
        size_t row = a->rows ? (size_t)jint(jat(a->rows, r)) : r;
        if (row >= T) return INFINITY;
        for (size_t d = 0; d < D; d++) {
            double x = ours[row * D + d], y = a->p[r * D + d];
            num += (x - y) * (x - y);
            den += y * y;
        }
    }
    return sqrt(num / (den > 0 ? den : 1));
}

/* relative L2 of our [T, D] rows (selected by a->rows) against the stored array */
static double rel_l2_rows(const float *ours, size_t T, size_t D, const arr_t *a) {
    double num = 0, den = 0;
    size_t nr = a->rows ? jlen(a->rows) : T;
    if (nr * D != a->nfloats) return INFINITY;
    for (size_t r = 0; r < nr; r++) {
        size_t row = a->rows ? (size_t)jint(jat(a->rows, r)) : r;
        if (row >= T) return INFINITY;
        for (size_t d = 0; d < D; d++) {
            double x = ours[row * D + d], y = a->p[r * D + d];
            num += (x - y) * (x - y);
            den += y * y;
        }
    }
    return sqrt(num / (den > 0 ? den : 1));
}

typedef struct { float **rows; int nl; } cap_t;
static void cap_fn(void *user, int layer, const float *rows, size_t T, size_t D) {
    cap_t *c = user;
    int i = layer == CLEF_LAYER_FINAL_NORM ? c->nl : layer;
    if (i < 0 || i > c->nl) return;
    free(c->rows[i]);
    c->rows[i] = malloc(T * D * sizeof(float));
    if (c->rows[i]) memcpy(c->rows[i], rows, T * D * sizeof(float));
}

int main(void) {
    const char *fdir = getenv("CLEF_TINY_FIXTURES") ? getenv("CLEF_TINY_FIXTURES") : "tests/fixtures/tiny";
    const char *mdir = getenv("CLEF_TINY") ? getenv("CLEF_TINY") : "models/tiny";
    char path[4096];
    size_t ilen = 0, blen = 0;
    snprintf(path, sizeof path, "%s/index.json", fdir);
    char *itext = slurp(path, &ilen);
    snprintf(path, sizeof path, "%s/data.bin", fdir);
    char *bin = slurp(path, &blen);
    if (!itext || !bin) { printf("skip: %s/index.json or data.bin missing\n", fdir); return 77; }
    /* the float64 oracle: committed, so its absence is a failure, not a skip */
    const char *f64dir = getenv("CLEF_TINY64_FIXTURES") ? getenv("CLEF_TINY64_FIXTURES") : "tests/fixtures/tiny64";
    size_t ilen64 = 0, blen64 = 0;
    snprintf(path, sizeof path, "%s/index.json", f64dir);
    char *itext64 = slurp(path, &ilen64);
    snprintf(path, sizeof path, "%s/data.bin", f64dir);
    char *bin64 = slurp(path, &blen64);
    CHECK_MSG(itext64 && bin64, "%s/index.json or data.bin missing (make_fixtures64.py)", f64dir);
    if (!itext64 || !bin64) return TEST_END();
    clef_err err = {0};
    clef_model_files *m = clef_model_open(mdir, &err);
    if (!m) { printf("skip: %s not loadable (%s); run make tiny\n", mdir, err.msg); return 77; }
    json_doc *doc = clef_json_parse(itext, ilen, NULL, &err);
    CHECK_MSG(doc != NULL, "index.json: %s", err.msg);
    if (!doc) return TEST_END();
    const json_value *root = clef_json_doc_root(doc);
    json_doc *doc64 = clef_json_parse(itext64, ilen64, NULL, &err);
    CHECK_MSG(doc64 != NULL, "%s/index.json: %s", f64dir, err.msg);
    if (!doc64) return TEST_END();
    const json_value *reqs64 = jget(clef_json_doc_root(doc64), "requests");
    CHECK_MSG(jlen(reqs64) == jlen(jget(root, "requests")), "%s: %zu requests, the fp32 fixture %zu", f64dir,
              jlen(reqs64), jlen(jget(root, "requests")));
    const int verbose = getenv("CLEF_PARITY_VERBOSE") != NULL;
    double worst_dp64 = 0, worst_dp3264 = 0, worst_final64 = 0, worst_excess = -INFINITY;
    char worst_dp64_name[256] = "";

    const size_t H = (size_t)m->cfg.text.hidden_size;
    const int nl = m->cfg.text.num_hidden_layers;
    /* rotary table from the reference's bits */
    const json_value *bits = jget(jget(jget(root, "rope"), "text_inv_freq"), "bits");
    size_t half = (size_t)m->cfg.text.rotary_dim / 2;
    CHECK_MSG(jlen(bits) == half, "text_inv_freq has %zu values, want %zu", jlen(bits), half);
    float inv[512], mine[512];
    int inv_same = 1;
    clef_text_inv_freq(&m->cfg.text, mine);
    for (size_t i = 0; i < half && i < jlen(bits); i++) {
        uint32_t u = (uint32_t)jint(jat(bits, i));
        memcpy(&inv[i], &u, 4);
        inv_same &= memcmp(&inv[i], &mine[i], 4) == 0;
    }
    printf("inv_freq: computed table %s the reference's bits\n", inv_same ? "equals" : "DIFFERS from");

    clef_ops *ops = clef_cpu_ops_create(0, NULL, &err);
    CHECK(ops != NULL);
    if (!ops) return TEST_END();
    /* as the engine does (AMX-packed Linear weights where they apply; the same bits: test_prepared) */
    printf("prepared weights: %d\n", clef_model_prepare(m, ops, CLEF_PREP_TEXT | CLEF_PREP_HEAD));
    const json_value *reqs = jget(root, "requests");
    double worst_layer = 0, worst_final = 0, worst_dp = 0, worst_dl = 0, worst_dp_head = 0, worst_dl_head = 0;
    int n_text = 0, n_head_only = 0, n_skipped = 0, n_long = 0, n_nan = 0;
    char worst_layer_name[256] = "", worst_dp_name[256] = "";
    for (size_t ri = 0; ri < jlen(reqs); ri++) {
        const json_value *r = jat(reqs, ri);
        if (!clef_json_truthy(jget(r, "ok"))) continue;
        const char *name = jget(r, "name") ? jget(r, "name")->u.string.s : "?";
        const json_value *r64 = ri < jlen(reqs64) ? jat(reqs64, ri) : NULL;
        const json_value *n64 = r64 ? jget(r64, "name") : NULL;
        CHECK_MSG(n64 && n64->kind == JSON_STRING && strcmp(n64->u.string.s, name) == 0 && clef_json_truthy(jget(r64, "ok")),
                  "%s: not request %zu of the float64 fixture", name, ri);
        if (!(n64 && n64->kind == JSON_STRING && strcmp(n64->u.string.s, name) == 0)) r64 = NULL;
        double req_dp32 = 0, req_dp64 = 0, req_d3264 = 0, req_final64 = NAN, req_dp64_r32 = 0, req_final64_r32 = NAN;
        const json_value *jids = jget(r, "input_ids");
        size_t T = jlen(jids);
        if (T > 5000 && !getenv("CLEF_PARITY_LONG")) { /* O(T^2) scalar attention: minutes */
            n_long++;
            continue;
        }
        int32_t *ids = malloc(T * sizeof(int32_t));
        for (size_t t = 0; t < T; t++) ids[t] = (int32_t)jint(jat(jids, t));
        clef_forward_in in;
        memset(&in, 0, sizeof in);
        in.ids = ids;
        in.n = T;
        in.inv_freq = half ? inv : NULL;
        int32_t *planes = NULL, *rpos = NULL;
        const json_value *media = jget(r, "media");
        if (media) {
            const json_value *pos = jget(media, "positions"), *merger = jget(media, "merger");
            arr_t mg;
            if (!pos || jlen(pos) != 3 || !merger || get_arr(merger, bin, blen, &mg) != 0 || mg.rows) {
                n_skipped++;
                printf("skip %s: media without every merger row\n", name);
                free(ids);
                continue;
            }
            planes = malloc(3 * T * sizeof(int32_t));
            for (int p = 0; p < 3; p++)
                for (size_t t = 0; t < T; t++) planes[p * T + t] = (int32_t)jint(jat(jat(pos, (size_t)p), t));
            for (int p = 0; p < 3; p++) in.pos[p] = planes + p * T;
            size_t nrep = mg.nfloats / H, k = 0;
            rpos = malloc((nrep ? nrep : 1) * sizeof(int32_t));
            for (size_t t = 0; t < T && k < nrep; t++)
                if (ids[t] == m->cfg.image_token_id) rpos[k++] = (int32_t)t;
            CHECK_MSG(k == nrep, "%s: %zu merger rows for %zu image pads", name, nrep, k);
            in.n_replace = k;
            in.replace_pos = rpos;
            in.replace_rows = mg.p;
        }
        float **caps = calloc((size_t)nl + 1, sizeof(float *));
        cap_t cap = {caps, nl};
        in.on_layer = cap_fn;
        in.on_layer_user = &cap;
        float *hid = malloc(T * H * sizeof(float));
        int rc = clef_text_forward(ops, &m->cfg, &m->text, &in, hid, &err);
        CHECK_MSG(rc == 0, "%s: forward failed: %s", name, err.msg);
        if (rc == 0) {
            n_text++;
            const json_value *layers = jget(r, "layers");
            CHECK_MSG(jlen(layers) == (size_t)nl, "%s: %zu layers stored", name, jlen(layers));
            for (int l = 0; l < nl && (size_t)l < jlen(layers); l++) {
                arr_t a;
                CHECK(get_arr(jat(layers, (size_t)l), bin, blen, &a) == 0);
                double e = rel_l2_rows(caps[l], T, H, &a);
                CHECK_MSG(e <= 1e-5, "%s layer %d: rel L2 %g", name, l, e);
                if (!(e <= worst_layer)) { worst_layer = e; snprintf(worst_layer_name, sizeof worst_layer_name, "%s layer %d", name, l); }
            }
            arr_t fa;
            CHECK(get_arr(jget(r, "final_norm"), bin, blen, &fa) == 0);
            double e = rel_l2_rows(hid, T, H, &fa);
            CHECK_MSG(e <= 1e-5, "%s final norm: rel L2 %g", name, e);
            if (!(e <= worst_final)) worst_final = e;
            arr64_t fa64;
            if (r64 && get_arr64(jget(r64, "final_norm"), bin64, blen64, &fa64) == 0) {
                req_final64 = rel_l2_rows64(hid, T, H, &fa64);
                if (!media && !(req_final64 <= worst_final64)) worst_final64 = req_final64;
            }

            /* head: on our rows, and on the reference rows when all are stored */
            const json_value *qsj = jget(r, "questions");
            int Q = (int)jlen(qsj);
            clef_head_question *qs = calloc((size_t)Q, sizeof *qs);
            int32_t **spans = calloc((size_t)Q, sizeof *spans);
            size_t NO = 0;
            for (int i = 0; i < Q; i++) {
                const json_value *q = jat(qsj, (size_t)i), *os = jget(q, "option_spans");
                qs[i].type = (int)jint(jget(q, "question_type"));
                qs[i].q_start = (int32_t)jint(jat(jget(q, "question_span"), 0));
                qs[i].q_end = (int32_t)jint(jat(jget(q, "question_span"), 1));
                qs[i].n_options = (int)jlen(os);
                spans[i] = malloc(2 * jlen(os) * sizeof(int32_t) + 1);
                for (size_t j = 0; j < jlen(os); j++) {
                    spans[i][2 * j] = (int32_t)jint(jat(jat(os, j), 0));
                    spans[i][2 * j + 1] = (int32_t)jint(jat(jat(os, j), 1));
                }
                qs[i].option_spans = spans[i];
                NO += jlen(os);
            }
            clef_head_in hin = {hid, T, ids, Q, qs, 0, NULL, NULL, 0};
            float *lg = malloc((NO + 1) * sizeof(float)), *pr = malloc((NO + 1) * sizeof(float));
            for (int pass = 0; pass < 2; pass++) {
                if (pass == 1) {
                    if (fa.rows) break;
                    hin.hidden = fa.p; /* the reference's final-norm rows */
                    n_head_only++;
                }
                rc = clef_head_forward(ops, &m->head_cfg, &m->head, &m->text.lm_head, &hin, lg, &err);
                CHECK_MSG(rc == 0, "%s: head failed: %s", name, err.msg);
                if (rc != 0) break;
                size_t o = 0;
                for (int i = 0; i < Q; i++) {
                    const json_value *q = jat(qsj, (size_t)i);
                    arr_t la, pa;
                    CHECK(get_arr(jget(q, "logits"), bin, blen, &la) == 0 && get_arr(jget(q, "probs"), bin, blen, &pa) == 0);
                    arr64_t pa64 = {NULL, 0, NULL};
                    const json_value *q64 = r64 ? jat(jget(r64, "questions"), (size_t)i) : NULL;
                    CHECK_MSG(q64 && get_arr64(jget(q64, "probs"), bin64, blen64, &pa64) == 0 &&
                              pa64.n == (size_t)qs[i].n_options, "%s q%d: no float64 probabilities", name, i);
                    clef_softmax_f32(lg + o, (size_t)qs[i].n_options, pr + o);
                    for (int j = 0; j < qs[i].n_options; j++) {
                        if (isnan(la.p[j]) || isnan(pa.p[j])) { /* the silent NaN case: NaN as the reference */
                            CHECK_MSG(isnan(lg[o + j]) && isnan(pr[o + j]), "%s q%d opt %d: reference NaN, ours %g", name, i, j, lg[o + j]);
                            n_nan++;
                            continue;
                        }
                        double dl = fabs((double)lg[o + j] - la.p[j]), dp = fabs((double)pr[o + j] - pa.p[j]);
                        if (pass == 0) {
                            if (!(dl <= worst_dl)) worst_dl = dl;
                            if (!(dp <= worst_dp)) { worst_dp = dp; snprintf(worst_dp_name, sizeof worst_dp_name, "%s q%d", name, i); }
                        } else {
                            if (!(dl <= worst_dl_head)) worst_dl_head = dl;
                            if (!(dp <= worst_dp_head)) worst_dp_head = dp;
                        }
                        if (pass == 1) { /* head alone, on the reference's rows: 1e-6 */
                            CHECK_MSG(dp <= 1e-6, "%s q%d opt %d (reference rows): |dp| %g", name, i, j, dp);
                            continue;
                        }
                        /* End to end: the fp32 reference rounds in its backbone too (its final norm
                         * is 2e-6..2e-5 rel L2 from the same code run in float64), and that reaches
                         * its probabilities. So p must equal p32 within 1e-6 plus the reference's own
                         * fp32 error |p32 - p64|, and p64 (the exact-arithmetic answer of the same
                         * code and inputs) within 1e-6. */
                        if (pa64.n != (size_t)qs[i].n_options) continue;
                        double p64 = pa64.p[j], d3264 = fabs((double)pa.p[j] - p64), dp64 = fabs((double)pr[o + j] - p64);
                        CHECK_MSG(dp <= 1e-6 + d3264, "%s q%d opt %d: |p - p32| %.3g > 1e-6 + |p32 - p64| (%.3g)", name, i, j, dp, d3264);
                        if (dp > req_dp32) req_dp32 = dp;
                        if (d3264 > req_d3264) req_d3264 = d3264;
                        if (dp - d3264 > worst_excess) worst_excess = dp - d3264;
                        if (!(d3264 <= worst_dp3264)) worst_dp3264 = d3264;
                        if (media) { /* fed the fp32 vision rows: |p - p64| on the second forward */
                            if (dp64 > req_dp64_r32) req_dp64_r32 = dp64;
                            continue;
                        }
                        CHECK_MSG(dp64 <= p64_bound(), "%s q%d opt %d: |p - p64| %.3g > %g", name, i, j, dp64, p64_bound());
                        if (dp64 > req_dp64) req_dp64 = dp64;
                        if (!(dp64 <= worst_dp64)) { worst_dp64 = dp64; snprintf(worst_dp64_name, sizeof worst_dp64_name, "%s q%d", name, i); }
                    }
                    o += (size_t)qs[i].n_options;
                }
            }
            /* images: a second forward fed the float64 oracle's merger rows (as float), against p64 */
            arr64_t mg64;
            const json_value *m64 = media && r64 ? jget(jget(r64, "media"), "merger") : NULL;
            if (media) {
                CHECK_MSG(m64 && get_arr64(m64, bin64, blen64, &mg64) == 0 && !mg64.rows && mg64.n == in.n_replace * H,
                          "%s: no float64 merger rows", name);
                req_final64_r32 = req_final64;
                req_final64 = NAN;
            }
            if (media && m64 && get_arr64(m64, bin64, blen64, &mg64) == 0 && !mg64.rows && mg64.n == in.n_replace * H) {
                float *rows64 = malloc(mg64.n * sizeof(float) + 1), *hid64 = malloc(T * H * sizeof(float));
                CHECK(rows64 && hid64);
                if (!rows64 || !hid64) { free(rows64); free(hid64); rows64 = hid64 = NULL; rc = -1; }
                for (size_t k = 0; rows64 && k < mg64.n; k++) rows64[k] = (float)mg64.p[k];
                clef_forward_in in64 = in;
                in64.replace_rows = rows64;
                in64.on_layer = NULL;
                in64.on_layer_user = NULL;
                if (rows64) {
                    rc = clef_text_forward(ops, &m->cfg, &m->text, &in64, hid64, &err);
                    CHECK_MSG(rc == 0, "%s: forward (float64 merger rows) failed: %s", name, err.msg);
                }
                arr64_t fn64;
                if (rc == 0 && get_arr64(jget(r64, "final_norm"), bin64, blen64, &fn64) == 0) {
                    req_final64 = rel_l2_rows64(hid64, T, H, &fn64);
                    if (!(req_final64 <= worst_final64)) worst_final64 = req_final64;
                }
                hin.hidden = hid64;
                if (rc == 0) {
                    rc = clef_head_forward(ops, &m->head_cfg, &m->head, &m->text.lm_head, &hin, lg, &err);
                    CHECK_MSG(rc == 0, "%s: head (float64 merger rows) failed: %s", name, err.msg);
                }
                for (int i = 0, o = 0; rc == 0 && i < Q; o += qs[i].n_options, i++) {
                    const json_value *q64 = jat(jget(r64, "questions"), (size_t)i);
                    arr64_t pa64;
                    if (get_arr64(jget(q64, "probs"), bin64, blen64, &pa64) != 0 || pa64.n != (size_t)qs[i].n_options) continue;
                    clef_softmax_f32(lg + o, (size_t)qs[i].n_options, pr + o);
                    for (int j = 0; j < qs[i].n_options; j++) {
                        if (isnan(pa64.p[j])) continue;
                        double dp64 = fabs((double)pr[o + j] - pa64.p[j]);
                        CHECK_MSG(dp64 <= p64_bound(), "%s q%d opt %d (float64 merger rows): |p - p64| %.3g > %g", name, i, j, dp64, p64_bound());
                        if (dp64 > req_dp64) req_dp64 = dp64;
                        if (!(dp64 <= worst_dp64)) { worst_dp64 = dp64; snprintf(worst_dp64_name, sizeof worst_dp64_name, "%s q%d", name, i); }
                    }
                }
                free(rows64);
                free(hid64);
            }
            for (int i = 0; i < Q; i++) free(spans[i]);
            free(spans); free(qs); free(lg); free(pr);
            if (verbose && media)
                printf("%-36s L=%-6zu |p32-p64| %.3e  |p-p64| %.3e  |p-p32| %.3e  final rel L2 vs f64 %.3e"
                       "  (fed the fp32 merger rows: |p-p64| %.3e, final %.3e)\n",
                       name, T, req_d3264, req_dp64, req_dp32, req_final64, req_dp64_r32, req_final64_r32);
            else if (verbose)
                printf("%-36s L=%-6zu |p32-p64| %.3e  |p-p64| %.3e  |p-p32| %.3e  final rel L2 vs f64 %.3e\n",
                       name, T, req_d3264, req_dp64, req_dp32, req_final64);
        }
        for (int l = 0; l <= nl; l++) free(caps[l]);
        free(caps); free(hid); free(ids); free(planes); free(rpos);
    }
    CHECK_MSG(n_text > 0, "no request was checked");
    printf("worst layer rel L2 %.3g (%s); worst final-norm rel L2 %.3g\n", worst_layer, worst_layer_name, worst_final);
    printf("end to end: max |dlogit| %.3g, max |dp| %.3g (%s); head alone (%d requests): max |dlogit| %.3g, max |dp| %.3g\n",
           worst_dl, worst_dp, worst_dp_name, n_head_only, worst_dl_head, worst_dp_head);
    printf("float64 oracle: max |p - p64| %.3g (%s), max |p32 - p64| %.3g, max (|p - p32| - |p32 - p64|) %.3g; "
           "final-norm rel L2 vs float64 %.3g\n", worst_dp64, worst_dp64_name, worst_dp3264, worst_excess, worst_final64);
    int rcode = TEST_END();
    printf("%d requests: layers %.2g, final %.2g, |dp| %.2g (head alone %.2g), %d NaN as ref, %d media + %d long (CLEF_PARITY_LONG=1) skipped\n",
           n_text, worst_layer, worst_final, worst_dp, worst_dp_head, n_nan, n_skipped, n_long);
    clef_json_doc_free(doc);
    clef_json_doc_free(doc64);
    free(itext);
    free(bin);
    free(itext64);
    free(bin64);
    ops->destroy(ops);
    clef_model_close(m);
    return rcode;
}
