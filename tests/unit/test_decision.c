/* Unit tests of src/decision: request checks and typing, encode_record (needs models/tiny's real
 * tokenizer.json; those cases are skipped without it), the response (softmax, answers, rounding,
 * printing). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "decision/encode.h"
#include "decision/encode_piece.h"
#include "decision/request.h"
#include "decision/response.h"
#include "test.h"
#include "base/json.h"

static json_doc *parse(const char *s) {
    clef_err e;
    clef_err_clear(&e);
    json_doc *d = clef_json_parse(s, strlen(s), NULL, &e);
    if (!d) fprintf(stderr, "parse failed: %s %s\n  in %s\n", e.type, e.msg, s);
    return d;
}

/* Parses a request; returns the error type (NULL on success) and copies the message. */
static const char *req_err(const char *s, char *msg) {
    json_doc *d = parse(s);
    if (!d) return "unparsable";
    clef_request r;
    clef_err e;
    clef_err_clear(&e);
    int rc = clef_request_parse(clef_json_doc_root(d), &r, &e);
    if (!rc) rc = clef_request_check_criteria(&r, &e);
    clef_request_free(&r);
    clef_json_doc_free(d);
    if (msg) strcpy(msg, rc ? e.msg : "");
    return rc ? e.type : NULL;
}

#define CHECK_ERR(req, type, message) do { char m_[1100]; const char *t_ = req_err(req, m_); \
    CHECK_STR(t_ ? t_ : "(ok)", type); CHECK_STR(m_, message); } while (0)

static void test_checks(void) {
    const char *Q = "\"questions\":{\"q\":{\"type\":\"noul\"}}";
    char buf[512];
    CHECK_ERR("[1]", "BadJson", "'list' object has no attribute 'get'");
    CHECK_ERR("null", "BadJson", "'NoneType' object has no attribute 'get'");
    snprintf(buf, sizeof buf, "{\"state\":1,%s}", Q);
    CHECK_ERR(buf, "MissingModelOrState", "model and state are required");
    snprintf(buf, sizeof buf, "{\"model\":1,\"state\":1,%s}", Q);
    CHECK_ERR(buf, "MissingModelOrState", "model and state are required");
    snprintf(buf, sizeof buf, "{\"model\":\"m\",%s}", Q);
    CHECK_ERR(buf, "MissingModelOrState", "model and state are required");
    CHECK_ERR("{\"model\":\"m\",\"state\":null,\"questions\":{}}", "NoQuestions", "at least one question is required");
    CHECK_ERR("{\"model\":\"m\",\"state\":null,\"questions\":[1]}", "NoQuestions", "at least one question is required");
    CHECK_ERR("{\"model\":\"m\",\"state\":null}", "NoQuestions", "at least one question is required");
    CHECK_ERR("{\"model\":\"\",\"state\":null,\"questions\":{\"q\":\"x\"}}", "BadQuestion",
              "'str' object has no attribute 'get'");
    CHECK_ERR("{\"model\":\"\",\"state\":null,\"questions\":{\"q\":{\"type\":\"Noul\"}}}", "BadQuestionType",
              "q: type must be noul, choice, or score");
    CHECK_ERR("{\"model\":\"\",\"state\":null,\"questions\":{\"q\":{}}}", "BadQuestionType",
              "q: type must be noul, choice, or score");
    CHECK_ERR("{\"model\":\"\",\"state\":null,\"questions\":{\"q\":{\"type\":[\"noul\"]}}}", "BadQuestionType",
              "unhashable type: 'list'");
    /* interleaved: q1's criteria before q2's type */
    CHECK_ERR("{\"model\":\"\",\"state\":0,\"questions\":{\"a\":{\"type\":\"noul\"},\"b\":{\"type\":\"choice\","
              "\"criteria\":{}},\"c\":{\"type\":\"x\"}}}",
              "EmptyCriteria", "b: criteria must not be empty");
    CHECK_ERR("{\"model\":\"\",\"state\":0,\"questions\":{\"s\":{\"type\":\"score\",\"criteria\":\"\"}}}",
              "EmptyCriteria", "s: criteria must not be empty");
    /* checks 3/4 of every question come before any BadCriteria */
    CHECK_ERR("{\"model\":\"\",\"state\":0,\"questions\":{\"a\":{\"type\":\"choice\",\"criteria\":[1]},\"b\":"
              "{\"type\":\"score\"}}}",
              "EmptyCriteria", "b: criteria must not be empty");
    CHECK_ERR("{\"model\":\"\",\"state\":0,\"questions\":{\"a\":{\"type\":\"choice\",\"criteria\":[1]}}}",
              "BadCriteria", "'list' object has no attribute 'items'");
    CHECK_ERR("{\"model\":\"\",\"state\":0,\"questions\":{\"a\":{\"type\":\"choice\",\"criteria\":true}}}",
              "BadCriteria", "'bool' object has no attribute 'items'");
    CHECK_ERR("{\"model\":\"\",\"state\":0,\"questions\":{\"a\":{\"type\":\"score\",\"criteria\":5}}}", "BadCriteria",
              "'int' object is not iterable");
    CHECK_ERR("{\"model\":\"\",\"state\":0,\"questions\":{\"a\":{\"type\":\"noul\",\"criteria\":\"abc\"}}}",
              "BadCriteria", "dictionary update sequence element #0 has length 1; 2 is required");
    CHECK_ERR("{\"model\":\"\",\"state\":0,\"questions\":{\"a\":{\"type\":\"noul\",\"criteria\":1.5}}}",
              "BadCriteria", "'float' object is not iterable");
    CHECK_ERR("{\"model\":\"\",\"state\":0,\"questions\":{\"a\":{\"type\":\"noul\",\"criteria\":[[\"true\",\"x\"],"
              "\"ab\",7]}}}",
              "BadCriteria", "cannot convert dictionary update sequence element #2 to a sequence");
    CHECK_ERR("{\"model\":\"\",\"state\":0,\"questions\":{\"a\":{\"type\":\"noul\",\"criteria\":[\"abc\"]}}}",
              "BadCriteria", "dictionary update sequence element #0 has length 3; 2 is required");
    CHECK_ERR("{\"model\":\"\",\"state\":0,\"questions\":{\"a\":{\"type\":\"noul\",\"criteria\":[[[1],2]]}}}",
              "BadCriteria", "unhashable type: 'list'");
    CHECK_ERR("{\"model\":\"\",\"state\":0,\"questions\":{\"a\":{\"type\":\"noul\",\"criteria\":[\"\\u00e9x\"]}}}",
              "(ok)", "");
}

static void test_options(void) {
    json_doc *d = parse("{\"model\":\"m\",\"state\":null,\"raw\":true,\"questions\":{"
                        "\"c\":{\"type\":\"choice\",\"criteria\":{\"b\":1,\"a\":null,\"\\u00e9\":2,\"Z\":3,\"10\":4,"
                        "\"9\":5,\"\":6}},"
                        "\"n\":{\"type\":\"noul\",\"instructions\":0,\"criteria\":{\"false\":null,\"x\":1}},"
                        "\"p\":{\"type\":\"noul\",\"instructions\":\"\",\"criteria\":[[\"true\",\"yes\"],\"tr\","
                        "{\"false\":0,\"nope\":0}]},"
                        "\"s\":{\"type\":\"score\",\"instructions\":null,\"criteria\":{\"lo\":1,\"hi\":2}},"
                        "\"t\":{\"type\":\"score\",\"instructions\":\" \",\"criteria\":\"x\\u00e9\"}}}");
    clef_request r;
    clef_err e;
    clef_err_clear(&e);
    CHECK(d && clef_request_parse(clef_json_doc_root(d), &r, &e) == 0);
    if (!d || e.type) return;
    CHECK(r.raw == 1);
    CHECK(r.n_questions == 5);
    const clef_question *c = &r.questions[0];
    const char *want[] = {"", "10", "9", "Z", "a", "b", "\xc3\xa9"};
    CHECK(c->n_options == 7);
    for (size_t i = 0; i < 7 && i < c->n_options; i++) CHECK_STR(c->options[i].id, want[i]);
    /* listing = request order b, a, é, Z, 10, 9, "" as indices into the sorted options */
    size_t lst[] = {5, 4, 6, 3, 1, 2, 0};
    for (size_t i = 0; i < 7; i++) CHECK(c->listing[i] == lst[i]);
    CHECK(c->options[4].description == NULL); /* "a": null */
    CHECK(c->instructions->kind == JSON_STRING && !strcmp(c->instructions->u.string.s, "c"));
    const clef_question *n = &r.questions[1];
    CHECK(n->n_options == 2 && !strcmp(n->options[0].id, "true") && !strcmp(n->options[1].id, "false"));
    CHECK(n->options[0].description && n->options[0].description->kind == JSON_STRING &&
          !strcmp(n->options[0].description->u.string.s, "The proposition is true or the answer is yes."));
    CHECK(n->options[1].description == NULL);
    CHECK(n->instructions->kind == JSON_INT); /* 0 is kept, not replaced by the id */
    const clef_question *p = &r.questions[2];
    CHECK(p->instructions->kind == JSON_STRING && !strcmp(p->instructions->u.string.s, "p"));
    CHECK(p->options[0].description && !strcmp(p->options[0].description->u.string.s, "yes"));
    CHECK(p->options[1].description && !strcmp(p->options[1].description->u.string.s, "nope"));
    const clef_question *s = &r.questions[3];
    CHECK(s->n_options == 2 && !strcmp(s->options[1].id, "1"));
    CHECK(s->legend[0]->kind == JSON_STRING && !strcmp(s->legend[0]->u.string.s, "lo"));
    CHECK(s->instructions->kind == JSON_STRING && !strcmp(s->instructions->u.string.s, "s"));
    const clef_question *t = &r.questions[4];
    CHECK(t->n_options == 2 && !strcmp(t->legend[1]->u.string.s, "\xc3\xa9"));
    CHECK(!strcmp(t->instructions->u.string.s, " "));
    clef_request_free(&r);
    clef_json_doc_free(d);
}

static char *respond(const char *req, const float *v, size_t n, int probs) {
    json_doc *d = parse(req);
    clef_request r;
    clef_err e;
    clef_err_clear(&e);
    char *out = NULL;
    if (d && !clef_request_parse(clef_json_doc_root(d), &r, &e)) {
        clef_buf b;
        clef_buf_init(&b);
        int rc = probs ? clef_response_render_probs(&b, &r, v, n, 7, &e) : clef_response_render(&b, &r, v, n, 7, &e);
        if (!rc) out = clef_buf_take(&b, NULL);
        else fprintf(stderr, "respond: %s %s\n", e.type, e.msg);
        clef_buf_free(&b);
        clef_request_free(&r);
    }
    if (d) clef_json_doc_free(d);
    return out;
}

static void test_response(void) {
    /* tie -> first in request order (head order is a, b) */
    float lg[] = {0.5f, 0.5f};
    char *o = respond("{\"model\":\"m\",\"state\":1,\"questions\":{\"q\":{\"type\":\"choice\",\"criteria\":"
                      "{\"b\":null,\"a\":null}}}}",
                      lg, 2, 0);
    CHECK_STR(o, "{\"model\":\"m\",\"answers\":{\"q\":{\"type\":\"choice\",\"choice\":\"b\",\"confidence\":0.5,"
                 "\"probabilities\":{\"b\":0.5,\"a\":0.5}}},\"usage\":{\"input_tokens\":7,\"output_tokens\":0}}");
    free(o);
    /* rounding of float32 values: 0.03125 -> 0.0312 (tie to even on the exact value),
     * float32(0.00015) -> 0.0002, float32(0.99995) -> 0.9999, 1 -> 1.0 */
    float pr[] = {0.03125f, 0.96875f, 0.00015f, 0.99985f, 0.99995f, 0.00005f, 1.0f};
    o = respond("{\"model\":\"m\",\"state\":1,\"questions\":{\"a\":{\"type\":\"noul\"},\"b\":{\"type\":\"noul\"},"
                "\"c\":{\"type\":\"noul\"},\"d\":{\"type\":\"choice\",\"criteria\":{\"x\":0}}}}",
                pr, 7, 1);
    CHECK_STR(o, "{\"model\":\"m\",\"answers\":{\"a\":{\"type\":\"noul\",\"noul\":0.0312},\"b\":{\"type\":\"noul\","
                 "\"noul\":0.0002},\"c\":{\"type\":\"noul\",\"noul\":0.9999},\"d\":{\"type\":\"choice\",\"choice\":"
                 "\"x\",\"confidence\":1.0,\"probabilities\":{\"x\":1.0}}},\"usage\":{\"input_tokens\":7,"
                 "\"output_tokens\":0}}");
    free(o);
    /* score: Neumaier sum of k * p, max p, legend keeps raw items (insertion order inside objects) */
    float ps[] = {0.1f, 0.2f, 0.7f};
    o = respond("{\"model\":\"m\",\"state\":1,\"questions\":{\"s\":{\"type\":\"score\",\"criteria\":"
                "[\"lo\",null,{\"z\":1,\"a\":[1.5,\"\\u00e9\"]}]}}}",
                ps, 3, 1);
    CHECK_STR(o, "{\"model\":\"m\",\"answers\":{\"s\":{\"type\":\"score\",\"score\":1.6,\"confidence\":0.7,"
                 "\"legend\":{\"0\":\"lo\",\"1\":null,\"2\":{\"z\":1,\"a\":[1.5,\"\xc3\xa9\"]}},\"probabilities\":"
                 "{\"0\":0.1,\"1\":0.2,\"2\":0.7}}},\"usage\":{\"input_tokens\":7,\"output_tokens\":0}}");
    free(o);
    /* NaN logits (the empty question span case): NaN everywhere, first option chosen */
    float nanv[] = {NAN, NAN, NAN, NAN};
    o = respond("{\"model\":\"m\",\"state\":1,\"questions\":{\"\":{\"type\":\"choice\",\"criteria\":{\"y\":0,"
                "\"x\":0}},\"n\":{\"type\":\"noul\"}}}",
                nanv, 4, 0);
    CHECK_STR(o, "{\"model\":\"m\",\"answers\":{\"\":{\"type\":\"choice\",\"choice\":\"y\",\"confidence\":NaN,"
                 "\"probabilities\":{\"y\":NaN,\"x\":NaN}},\"n\":{\"type\":\"noul\",\"noul\":NaN}},\"usage\":"
                 "{\"input_tokens\":7,\"output_tokens\":0}}");
    free(o);
    /* raw: unrounded float32 values in head order, last key */
    float pq[] = {0.25f, 0.75f};
    o = respond("{\"model\":\"m\",\"state\":1,\"raw\":true,\"questions\":{\"q\":{\"type\":\"choice\",\"criteria\":"
                "{\"b\":0,\"a\":0}}}}",
                pq, 2, 1);
    CHECK_STR(o, "{\"model\":\"m\",\"answers\":{\"q\":{\"type\":\"choice\",\"choice\":\"b\",\"confidence\":0.75,"
                 "\"probabilities\":{\"b\":0.75,\"a\":0.25},\"raw\":{\"a\":0.25,\"b\":0.75}}},\"usage\":"
                 "{\"input_tokens\":7,\"output_tokens\":0}}");
    free(o);
    /* wrong logit count */
    CHECK(respond("{\"model\":\"m\",\"state\":1,\"questions\":{\"n\":{\"type\":\"noul\"}}}", pq, 1, 0) == NULL);
    /* softmax */
    float x[3] = {1.0f, 2.0f, 3.0f}, p[3];
    clef_softmax_f32(x, 3, p);
    CHECK(fabsf(p[0] - 0.09003057f) < 1e-7f && fabsf(p[2] - 0.66524096f) < 1e-7f);
    float big[2] = {1000.0f, 1000.0f};
    clef_softmax_f32(big, 2, p);
    CHECK(p[0] == 0.5f && p[1] == 0.5f);
    /* error rendering */
    clef_err e;
    clef_err_set(&e, "NoQuestions", "at least one \"question\" is required");
    clef_buf b;
    clef_buf_init(&b);
    clef_error_render(&b, &e);
    CHECK_STR(b.data, "{\"error\":{\"type\":\"NoQuestions\",\"message\":\"at least one \\\"question\\\" is required\"}}");
    clef_buf_free(&b);
    /* a message quoting an id with a lone surrogate (kept as WTF-8 bytes) still renders valid UTF-8:
     * the surrogate as its \\u escape (found by fuzz/fuzz_request.c: the raw bytes went out) */
    clef_buf_init(&b);
    clef_err_set(&e, "BadQuestionType", "%s: type must be noul, choice, or score", "\xed\xa0\x80");
    clef_error_render(&b, &e);
    CHECK_STR(b.data, "{\"error\":{\"type\":\"BadQuestionType\",\"message\":\"\\ud800: type must be noul, choice, or score\"}}");
    clef_buf_free(&b);
    /* a message truncated to fit ends on a character boundary: a character straddling the end is
     * dropped whole; one that ends exactly there is kept */
    char longid[2048];
    memset(longid, 'a', sizeof longid);
    longid[sizeof longid - 1] = 0;
    const size_t end = sizeof e.msg - 1; /* bytes that fit */
    memcpy(longid + end - 1, "\xc3\xa9", 2); /* U+00E9 with its 2nd byte cut off */
    clef_err_set(&e, "BadQuestion", "%s", longid);
    CHECK(strlen(e.msg) == end - 1);
    memcpy(longid + end - 2, "\xe2\x80\xa9", 3); /* U+2029, 2 of its 3 bytes fit */
    clef_err_set(&e, "BadQuestion", "%s", longid);
    CHECK(strlen(e.msg) == end - 2);
    memset(longid, 'a', 2000);
    memcpy(longid + end - 2, "\xc3\xa9", 2); /* ends exactly at the limit */
    clef_err_set(&e, "BadQuestion", "%s", longid);
    CHECK(strlen(e.msg) == end && (unsigned char)e.msg[end - 1] == 0xa9);
    CHECK(clef_error_http_status("BadJson") == 400 && clef_error_http_status("EmptyCriteria") == 422 &&
          clef_error_http_status("SchemaTooLong") == 413 && clef_error_http_status("RequestTooLong") == 413);
}

/* ---- encode (needs the real tokenizer) ---- */

/* the reference's text for a lone surrogate in tokenized text (HF tokenizer's TypeError) */
#define LONE "TextEncodeInput must be Union[TextInputSequence, Tuple[InputSequence, InputSequence]]"

static void test_surrogate_text(void) {
    clef_err e;
    clef_err_clear(&e);
    CHECK(clef_check_surrogates("ab", 2, &e) == 0 && e.type == NULL);
    CHECK(clef_check_surrogates("a\xc3\xa9\xed\xa0\x80\xed\xb0\x80x", 10, &e) == 1);
    CHECK_STR(e.msg, "'utf-8' codec can't encode characters in position 2-3: surrogates not allowed");
    CHECK(clef_check_surrogates("\xed\xbf\xbf", 3, &e) == 1);
    CHECK_STR(e.msg, "'utf-8' codec can't encode character '\\udfff' in position 0: surrogates not allowed");
}

static int enc(const clef_tokenizer *tok, const char *req, size_t max_length, clef_record *rec, clef_err *e) {
    json_doc *d = parse(req);
    clef_request r;
    clef_err_clear(e);
    int rc = -1;
    if (d && !clef_request_parse(clef_json_doc_root(d), &r, e)) {
        clef_encode_opts o = {.max_length = max_length};
        rc = clef_encode_record(tok, &r, &o, rec, e);
        clef_record_free(rec); /* borrows from r */
        clef_request_free(&r);
    }
    if (d) clef_json_doc_free(d);
    return rc;
}

/* Encodes and keeps the facts tests look at (the record borrows from the request, freed inside). */
typedef struct {
    size_t n_ids, kept, total, qs, qe, os0, oe0;
    int32_t first, last;
} facts;

static int enc_facts(const clef_tokenizer *tok, const char *req, size_t max_length, facts *f, clef_err *e) {
    json_doc *d = parse(req);
    clef_request r;
    clef_record rec;
    clef_err_clear(e);
    int rc = -1;
    memset(f, 0, sizeof *f);
    if (d && !clef_request_parse(clef_json_doc_root(d), &r, e)) {
        clef_encode_opts o = {.max_length = max_length};
        rc = clef_encode_record(tok, &r, &o, &rec, e);
        if (!rc) {
            f->n_ids = rec.n_ids, f->kept = rec.state_kept, f->total = rec.state_total;
            f->qs = rec.questions[0].span.start, f->qe = rec.questions[0].span.end;
            f->os0 = rec.questions[0].option_spans[0].start, f->oe0 = rec.questions[0].option_spans[0].end;
            f->first = rec.input_ids[0], f->last = rec.input_ids[rec.n_ids - 1];
            clef_record_free(&rec);
        }
        clef_request_free(&r);
    }
    if (d) clef_json_doc_free(d);
    return rc;
}

static void test_encode(const clef_tokenizer *tok) {
    const char *R = "{\"model\":\"m\",\"state\":\"one two three four five six seven eight nine ten\","
                    "\"questions\":{\"q\":{\"type\":\"noul\",\"instructions\":\"Is it?\"}}}";
    facts f;
    clef_err e;
    CHECK(enc_facts(tok, R, 0, &f, &e) == 0);
    size_t fixed = f.n_ids - f.total;
    CHECK(f.kept == f.total && f.total == 10);
    CHECK(f.first == 248045 && f.last == 25);
    CHECK(f.qs > 36 + 10 + 7 && f.qe > f.qs); /* the question span lies after state and header */
    /* the budget: state tail cut at max_length - fixed; fixed == max_length is allowed */
    facts g;
    CHECK(enc_facts(tok, R, fixed + 3, &g, &e) == 0);
    CHECK(g.n_ids == fixed + 3 && g.kept == 3 && g.total == 10);
    CHECK(g.qs == f.qs - 7 && g.qe == f.qe - 7 && g.os0 == f.os0 - 7);
    CHECK(enc_facts(tok, R, fixed, &g, &e) == 0);
    CHECK(g.n_ids == fixed && g.kept == 0);
    CHECK(enc_facts(tok, R, fixed - 1, &g, &e) == -1);
    CHECK_STR(e.type, "SchemaTooLong");
    char want[128];
    snprintf(want, sizeof want, "schema requires %zu tokens before state; maximum is %zu", fixed, fixed - 1);
    CHECK_STR(e.msg, want);
    /* empty question span: id "" and no instructions */
    CHECK(enc_facts(tok, "{\"model\":\"m\",\"state\":\"\",\"questions\":{\"\":{\"type\":\"noul\"}}}", 0, &g, &e) == 0);
    CHECK(g.qs == g.qe && g.total == 0);
    /* instructions 0 are rendered, not replaced: non-empty span */
    CHECK(enc_facts(tok, "{\"model\":\"m\",\"state\":\"\",\"questions\":{\"\":{\"type\":\"noul\",\"instructions\":0}}}",
                    0, &g, &e) == 0);
    CHECK(g.qe == g.qs + 1);
    /* order: a lone surrogate in q1's instructions comes before q1's bad criteria */
    clef_record rec;
    CHECK(enc(tok, "{\"model\":\"m\",\"state\":0,\"questions\":{\"a\":{\"type\":\"choice\",\"instructions\":"
                   "\"ab\\ud800\",\"criteria\":[1]}}}",
              0, &rec, &e) == -1);
    CHECK_STR(e.type, "LoneSurrogate");
    CHECK_STR(e.msg, LONE);
    /* ... and q1's bad criteria before a lone surrogate in q2's id */
    CHECK(enc(tok, "{\"model\":\"m\",\"state\":0,\"questions\":{\"a\":{\"type\":\"choice\",\"criteria\":\"x\"},"
                   "\"\\udc00\\udc01\":{\"type\":\"noul\"}}}",
              0, &rec, &e) == -1);
    CHECK_STR(e.type, "BadCriteria");
    CHECK(enc(tok, "{\"model\":\"m\",\"state\":0,\"questions\":{\"\\udc00\\udc01\":{\"type\":\"noul\"}}}", 0, &rec,
              &e) == -1);
    CHECK_STR(e.msg, LONE);
    /* bad criteria before SchemaTooLong; media before state; state surrogate before SchemaTooLong */
    CHECK(enc(tok, "{\"model\":\"m\",\"state\":0,\"questions\":{\"a\":{\"type\":\"noul\",\"criteria\":5}}}", 10, &rec,
              &e) == -1);
    CHECK_STR(e.type, "BadCriteria");
    CHECK(enc(tok, "{\"model\":\"m\",\"state\":\"\\ud800\",\"images\":[5],\"questions\":{\"a\":{\"type\":\"noul\"}}}",
              10, &rec, &e) == -1);
    CHECK_STR(e.type, "UnsupportedMedia");
    CHECK(enc(tok, "{\"model\":\"m\",\"state\":\"\\ud800\",\"videos\":[\"x\"],\"questions\":{\"a\":{\"type\":"
                   "\"noul\"}}}",
              0, &rec, &e) == -1);
    CHECK_STR(e.type, "UnsupportedMedia");
    CHECK(enc(tok, "{\"model\":\"m\",\"state\":{\"k\":\"\\ud800\"},\"questions\":{\"a\":{\"type\":\"noul\"}}}", 10,
              &rec, &e) == -1);
    CHECK_STR(e.type, "LoneSurrogate");
    CHECK_STR(e.msg, LONE);
    /* a literal <|image_pad|> without images is just a token; model with a lone surrogate is refused */
    CHECK(enc(tok, "{\"model\":\"m\",\"state\":\"<|image_pad|>\",\"questions\":{\"a\":{\"type\":\"noul\"}}}", 0, &rec,
              &e) == 0);
    CHECK(enc(tok, "{\"model\":\"x\\ud800\",\"state\":0,\"questions\":{\"a\":{\"type\":\"noul\"}}}", 0, &rec, &e) == -1);
    CHECK_STR(e.type, "LoneSurrogate");
    CHECK_STR(e.msg, "'utf-8' codec can't encode character '\\ud800' in position 1: surrogates not allowed");
}

/* Injected media: entry k gets grid [1, h[k], w[k]] and n[k] processor images (> 1: an animated GIF's
 * frames, as the image module's all_images = 2 returns them); h[k] == 0 fails as a decoder would. */
typedef struct {
    int h[4], w[4], n[4];
    int saw_all_images; /* the opts.all_images encode_record asked for */
} fake_media;

static int fake_media_fn(void *ctx, size_t k, const json_value *entry, const clef_image_opts *o, clef_image *out,
                         clef_err *err) {
    (void)entry;
    fake_media *m = ctx;
    m->saw_all_images = o->all_images;
    memset(out, 0, sizeof *out);
    if (k >= 4 || m->h[k] == 0) return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "decoder: images[%zu]", k);
    out->grid_t = 1, out->grid_h = m->h[k], out->grid_w = m->w[k];
    out->n_images = m->n[k];
    out->patch_dim = 1536;
    out->n_patches = (size_t)(m->n[k] > 1 ? m->n[k] : 1) * (size_t)m->h[k] * (size_t)m->w[k];
    return 0;
}

static int enc_media(const clef_tokenizer *tok, const char *req, size_t max_length, fake_media *m, size_t *n_ids,
                     clef_err *e) {
    json_doc *d = parse(req);
    clef_request r;
    clef_record rec;
    clef_err_clear(e);
    int rc = -1;
    if (d && !clef_request_parse(clef_json_doc_root(d), &r, e)) {
        clef_encode_opts o = {.max_length = max_length, .media = fake_media_fn, .media_ctx = m};
        rc = clef_encode_record(tok, &r, &o, &rec, e);
        if (!rc) {
            *n_ids = rec.n_ids;
            clef_record_free(&rec);
        }
        clef_request_free(&r);
    }
    if (d) clef_json_doc_free(d);
    return rc;
}

/* Several processor images from one entry (an animated GIF), the rules measured on the reference
 * (tests/fixtures/images/index.json "requests"; compared there by tests/parity/test_image_requests.py):
 * first entry -> every entry's first axis flattened (a single image = 3 grey images of its grid),
 * placeholder k gets processor image k's tokens, MediaTokenMismatch over every image after the state
 * and length checks; a later entry -> the processor's patchify fails once every entry is decoded. */
static void test_several_images(const clef_tokenizer *tok) {
#define IMGS2(state) "{\"model\":\"m\",\"state\":" state ",\"images\":[\"a\",\"b\"],\"questions\":{\"q\":{\"type\":\"noul\"}}}"
    clef_err e;
    size_t n = 0;
    /* [3 frames of 28x40 (280 tokens), a single 32x32 (256)]: placeholders 280 + 280, features 3*280 + 3*256 */
    fake_media gif_first = {{28, 32}, {40, 32}, {3, 0}, -1};
    CHECK(enc_media(tok, IMGS2("\"x\""), 0, &gif_first, &n, &e) == -1);
    CHECK(gif_first.saw_all_images == 2);
    CHECK_STR(e.type, "MediaTokenMismatch");
    CHECK_STR(e.msg, "Image features and image tokens do not match, tokens: 560, features: 1608");
    /* the same prompt as two single images of 280 tokens each: the length check counts the placeholders */
    fake_media two = {{28, 28}, {40, 40}, {0, 0}, -1};
    CHECK(enc_media(tok, IMGS2("\"x\""), 0, &two, &n, &e) == 0);
    size_t fixed = n - 1; /* state "x" is one token */
    CHECK(enc_media(tok, IMGS2("\"x\""), fixed - 1, &gif_first, &n, &e) == -1);
    CHECK_STR(e.type, "SchemaTooLong");
    char want[200];
    snprintf(want, sizeof want, "schema requires %zu tokens before state; maximum is %zu", fixed, fixed - 1);
    CHECK_STR(e.msg, want);
    /* the state before the forward's count */
    CHECK(enc_media(tok, IMGS2("\"\\ud800\""), 0, &gif_first, &n, &e) == -1);
    CHECK_STR(e.type, "LoneSurrogate");
    CHECK_STR(e.msg, LONE);
    /* literal pads: 10 more tokens */
    CHECK(enc_media(tok, IMGS2("\"<|image_pad|><|image_pad|><|image_pad|><|image_pad|><|image_pad|>"
                               "<|image_pad|><|image_pad|><|image_pad|><|image_pad|><|image_pad|>\""),
                    0, &gif_first, &n, &e) == -1);
    CHECK_STR(e.msg, "Image features and image tokens do not match, tokens: 570, features: 1608");
    /* [2 frames of 4x4 (4 tokens)], literal pads making up the count: the reference answers, we refuse
     * (after a lone surrogate in model, which the reference's response would fail on) */
    fake_media small = {{4}, {4}, {2}, -1};
    const char *bal = "{\"model\":\"m\",\"state\":\"<|image_pad|><|image_pad|><|image_pad|><|image_pad|>\","
                      "\"images\":[\"a\"],\"questions\":{\"q\":{\"type\":\"noul\"}}}";
    CHECK(enc_media(tok, bal, 0, &small, &n, &e) == -1);
    CHECK_STR(e.type, "UnsupportedMedia");
    CHECK(strstr(e.msg, "literal <|image_pad|> tokens") == e.msg);
    CHECK(enc_media(tok, "{\"model\":\"\\ud800\",\"state\":\"<|image_pad|><|image_pad|><|image_pad|><|image_pad|>\","
                         "\"images\":[\"a\"],\"questions\":{\"q\":{\"type\":\"noul\"}}}",
                    0, &small, &n, &e) == -1);
    CHECK_STR(e.type, "LoneSurrogate");
    /* a later entry: UnsupportedMedia at the media step (before the state), once every entry is decoded */
    fake_media later = {{32, 28}, {32, 40}, {0, 3}, -1};
    CHECK(enc_media(tok, IMGS2("\"\\ud800\""), 0, &later, &n, &e) == -1);
    CHECK_STR(e.type, "UnsupportedMedia");
    CHECK_STR(e.msg, "too many values to unpack (expected 4)");
    fake_media later_bad = {{32, 28, 0}, {32, 40, 0}, {0, 3, 0}, -1};
    CHECK(enc_media(tok, "{\"model\":\"m\",\"state\":0,\"images\":[\"a\",\"b\",\"c\"],\"questions\":{\"q\":"
                         "{\"type\":\"noul\"}}}",
                    0, &later_bad, &n, &e) == -1);
    CHECK_STR(e.msg, "decoder: images[2]");
#undef IMGS2
}

int main(void) {
    test_checks();
    test_options();
    test_response();
    test_surrogate_text();
    const char *root = getenv("CLEF_ROOT");
    char path[4096];
    snprintf(path, sizeof path, "%s/models/tiny/tokenizer.json", root ? root : ".");
    if (access(path, R_OK) == 0) {
        clef_err e;
        clef_err_clear(&e);
        clef_tokenizer *tok = clef_tokenizer_load(path, CLEF_SPLIT_FROM_FILE, &e);
        CHECK_MSG(tok != NULL, "%s: %s", e.type, e.msg);
        if (tok) {
            test_encode(tok);
            test_several_images(tok);
            clef_tokenizer_free(tok);
        }
    } else {
        printf("note: no %s (make tiny): encode cases not run\n", path);
    }
    return TEST_END();
}
