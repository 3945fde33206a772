// libFuzzer target over the whole host side of a request, as the server runs it before the model:
// body bytes -> JSON -> request checks -> encode_record (the real tokenizer: Oniguruma pre-split,
// NFC, BPE; images decoded and preprocessed with small limits) -> the response rendered from
// uniform logits, or the error body. Any input must be answered or refused cleanly (no crash, leak
// or UB), and these must hold, or the target aborts:
//   - a refusal is never InternalError, and its body is JSON;
//   - an accepted record: ids in the vocabulary, at most max_length of them; schema_offset =
//     state_start + state_kept; the spans in prompt order inside [schema_offset, n_ids) (each
//     question's, then its options', every option span non-empty); every image's pad run before
//     the state, all <|image_pad|> (a video's frame groups: <|video_pad|>); the record and the response
//     render, and the response is JSON.
// Half of the inputs (odd lengths) run with max_length 96, so truncation and SchemaTooLong get
// exercised. The tokenizer comes from $CLEF_FUZZ_TOKENIZER (default models/tiny/tokenizer.json:
// `make tiny` writes it; the release's tokenizer.json works too). Not part of the default build.
//
//   clang -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined -Iinclude -Isrc \
//     $(pkg-config --cflags oniguruma libutf8proc libpng libavformat) fuzz/fuzz_request.c src/decision/*.c \
//     src/text/*.c src/image/*.c src/video/*.c src/base/err.c src/base/buf.c src/base/bufpool.c src/base/sha256.c \
//     src/base/mapfile.c \
//     $(pkg-config --libs oniguruma libutf8proc libpng libjpeg libwebp libwebpdemux libgif libavformat libavcodec \
//       libswscale libavutil) -lm \
//     -o build/fuzz_request
//   mkdir -p build/fuzz-req && cp tests/corpus/requests/*.json build/fuzz-req/
//   build/fuzz_request -max_len=16384 -max_total_time=600 -rss_limit_mb=2048 build/fuzz-req

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/err.h"
#include "decision/encode.h"
#include "decision/request.h"
#include "decision/response.h"
#include "image/image.h"
#include "base/json.h"
#include "text/tokenizer.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static clef_tokenizer *g_tok;
static int32_t g_pad, g_vpad;
static size_t g_vocab;

#define CHECK(cond)                                                                 \
    do {                                                                            \
        if (!(cond)) {                                                              \
            fprintf(stderr, "fuzz_request: invariant failed: %s (line %d)\n", #cond, __LINE__); \
            abort();                                                                \
        }                                                                           \
    } while (0)

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *path = getenv("CLEF_FUZZ_TOKENIZER");
    if (!path) path = "models/tiny/tokenizer.json";
    clef_err err;
    clef_err_clear(&err);
    g_tok = clef_tokenizer_load(path, CLEF_SPLIT_FROM_FILE, &err);
    if (!g_tok) {
        fprintf(stderr, "fuzz_request: cannot load %s: %s: %s\n", path, err.type, err.msg);
        exit(1);
    }
    g_pad = clef_tokenizer_added_id(g_tok, "<|image_pad|>");
    g_vpad = clef_tokenizer_added_id(g_tok, "<|video_pad|>");
    g_vocab = clef_tokenizer_vocab_size(g_tok);
    return 0;
}

/* The body must be one JSON document (the server sends nothing else). */
static void check_json(const clef_buf *b) {
    clef_err e;
    clef_err_clear(&e);
    json_doc *d = clef_json_parse(b->data ? b->data : "", b->len, NULL, &e);
    CHECK(d != NULL);
    clef_json_doc_free(d);
}

static void check_record(const clef_record *r, size_t max_length) {
    CHECK(r->n_ids > 0 && r->n_ids <= max_length);
    for (size_t i = 0; i < r->n_ids; i++) CHECK(r->input_ids[i] >= 0 && (size_t)r->input_ids[i] < g_vocab);
    CHECK(r->state_start <= r->n_ids && r->state_kept <= r->state_total);
    CHECK(r->schema_offset == r->state_start + r->state_kept && r->schema_offset <= r->n_ids);
    /* prompt order: each question's span (empty only in the silent-NaN case, contract §3.2), then
     * its option spans in head order, each non-empty */
    size_t prev_end = r->schema_offset;
    for (size_t q = 0; q < r->n_questions; q++) {
        const clef_enc_question *eq = &r->questions[q];
        CHECK(eq->span.start >= prev_end && eq->span.start <= eq->span.end);
        CHECK(eq->n_options > 0);
        prev_end = eq->span.end;
        for (size_t o = 0; o < eq->n_options; o++) {
            const clef_span *s = &eq->option_spans[o];
            CHECK(s->start >= prev_end && s->start < s->end);
            prev_end = s->end;
        }
    }
    CHECK(prev_end <= r->n_ids);
    for (size_t k = 0; k < r->n_images; k++) {
        const clef_enc_image *im = &r->images[k];
        CHECK(im->pad_start + im->n_pad <= r->state_start);
        for (size_t p = 0; p < im->n_pad; p++) CHECK(r->input_ids[im->pad_start + p] == (im->video ? g_vpad : g_pad));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    clef_err err;
    clef_err_clear(&err);
    json_limits lim = {0};
    clef_request req;
    memset(&req, 0, sizeof req);
    clef_record rec;
    memset(&rec, 0, sizeof rec);
    clef_buf b;
    clef_buf_init(&b);
    float *logits = NULL;

    clef_image_opts io;
    clef_image_opts_default(&io);
    io.max_bytes = 1 << 20;
    io.max_source_pixels = 1 << 20; /* bounded work per input */
    io.max_pixels = 1 << 16;
    io.min_pixels = 1 << 10;
    clef_encode_opts eo = {.max_length = size % 2 ? 96 : 0, .image = &io};
    size_t max_length = size % 2 ? 96 : CLEF_MAX_LENGTH_DEFAULT;

    json_doc *doc = clef_json_parse((const char *)data, size, &lim, &err);
    if (!doc || clef_request_parse(clef_json_doc_root(doc), &req, &err) ||
        clef_encode_record(g_tok, &req, &eo, &rec, &err))
        goto refused;

    check_record(&rec, max_length);
    CHECK(clef_record_render(&b, &rec) == 0);
    check_json(&b);
    clef_buf_reset(&b);
    size_t n = 0;
    for (size_t q = 0; q < rec.n_questions; q++) n += rec.questions[q].n_options;
    logits = calloc(n ? n : 1, sizeof *logits);
    CHECK(logits != NULL);
    CHECK(clef_response_render(&b, &req, logits, n, rec.n_ids, &err) == 0);
    check_json(&b);
    goto done;

refused:
    CHECK(err.type != NULL && strcmp(err.type, CLEF_E_INTERNAL) != 0);
    clef_buf_reset(&b);
    CHECK(clef_error_render(&b, &err) == 0);
    check_json(&b);
    CHECK(clef_error_http_status(err.type) >= 400);

done:
    free(logits);
    clef_buf_free(&b);
    clef_record_free(&rec);
    clef_request_free(&req);
    clef_json_doc_free(doc);
    return 0;
}
