/* encode_record in C: see encode.h and contract.md §4. */
#include "decision/encode.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bufpool.h"
#include "decision/encode_media.h"
#include "decision/encode_piece.h"

static const char SYSTEM_PROMPT[] =
    "Read the complete state and schema. Decide every field jointly. Each answer must be exactly one of "
    "that field's allowed options.";

static const char SUFFIX[] = "\n<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nJOINT SCHEMA DECISIONS:";

static int piece_buf(const clef_tokenizer *tok, clef_buf *b, clef_ids *ids, clef_err *err) {
    if (b->oom) return clef_err_set(err, CLEF_E_OOM, "out of memory while encoding");
    return clef_encode_piece(tok, b->data ? b->data : "", b->len, ids, err);
}

static int piece_str(const clef_tokenizer *tok, const char *s, clef_ids *ids, clef_err *err) {
    return clef_encode_piece(tok, s, strlen(s), ids, err);
}

void clef_record_free(clef_record *r) {
    if (!r) return;
    free(r->input_ids);
    if (r->questions)
        for (size_t i = 0; i < r->n_questions; i++) free(r->questions[i].option_spans);
    free(r->questions);
    if (r->images)
        for (size_t i = 0; i < r->n_images; i++) clef_image_free(&r->images[i].image);
    free(r->images);
    memset(r, 0, sizeof *r);
}

/* The schema, question by question: each question's header, instructions (its span), then
 * question_options() (the criteria's error, if any), then each option (its span). b is scratch. */
static int encode_schema(const clef_tokenizer *tok, const clef_request *req, clef_record *out, clef_ids *schema,
                         clef_buf *b, clef_err *err) {
    if (piece_str(tok, "\n\nSCHEMA FIELDS:\n", schema, err)) return -1;
    for (size_t i = 0; i < req->n_questions; i++) {
        const clef_question *q = &req->questions[i];
        clef_enc_question *eq = &out->questions[i];
        eq->id = q->id;
        eq->id_len = q->id_len;
        eq->type = (int)q->type;
        clef_buf_reset(b);
        clef_buf_printf(b, "\nFIELD %zu\nID: ", i + 1);
        clef_buf_put(b, q->id, q->id_len);
        clef_buf_printf(b, "\nTYPE: %s\nINSTRUCTION: ", q->type_name);
        if (piece_buf(tok, b, schema, err)) return -1;
        eq->span.start = schema->n;
        clef_buf_reset(b);
        if (clef_json_render_py(b, q->instructions)) return clef_err_set(err, CLEF_E_OOM, "out of memory");
        if (piece_buf(tok, b, schema, err)) return -1;
        eq->span.end = schema->n;
        if (piece_str(tok, "\nALLOWED OPTIONS:\n", schema, err)) return -1;
        /* question_options(question) runs here in the reference */
        if (q->crit_err_type) return clef_err_set(err, q->crit_err_type, "%s", q->crit_err_msg);
        eq->n_options = q->n_options;
        eq->options = q->options;
        eq->option_spans = calloc(q->n_options ? q->n_options : 1, sizeof *eq->option_spans);
        if (!eq->option_spans) return clef_err_set(err, CLEF_E_OOM, "out of memory");
        for (size_t j = 0; j < q->n_options; j++) {
            const clef_option *o = &q->options[j];
            char lab[48];
            snprintf(lab, sizeof lab, "OPTION %zu: ", j + 1);
            if (piece_str(tok, lab, schema, err)) return -1;
            eq->option_spans[j].start = schema->n;
            /* render({"option_id": id[, "description": d]}): sorted keys, description first */
            clef_buf_reset(b);
            clef_buf_putc(b, '{');
            if (o->description) {
                clef_buf_puts(b, "\"description\":");
                if (clef_json_render(b, o->description, 1)) b->oom = 1;
                clef_buf_putc(b, ',');
            }
            clef_buf_puts(b, "\"option_id\":");
            clef_json_render_string(b, o->id, o->id_len);
            clef_buf_putc(b, '}');
            if (piece_buf(tok, b, schema, err)) return -1;
            eq->option_spans[j].end = schema->n;
            if (piece_str(tok, "\n", schema, err)) return -1;
        }
        if (piece_str(tok, "END FIELD\n", schema, err)) return -1;
    }
    return 0;
}

/* The length check (SchemaTooLong), the state's truncation, the spans moved to their place after
 * the state, and the ids: prefix + kept state + schema + suffix. */
static int assemble_ids(const clef_ids *prefix, const clef_ids *state, const clef_ids *schema, const clef_ids *suffix,
                        size_t max_length, clef_record *out, clef_err *err) {
    size_t fixed = prefix->n + schema->n + suffix->n;
    if (fixed > max_length)
        return clef_err_set(err, CLEF_E_SCHEMA_TOO_LONG, "schema requires %zu tokens before state; maximum is %zu",
                            fixed, max_length);
    size_t kept = state->n < max_length - fixed ? state->n : max_length - fixed;
    out->state_kept = kept;
    out->schema_offset = prefix->n + kept;
    for (size_t i = 0; i < out->n_questions; i++) {
        clef_enc_question *eq = &out->questions[i];
        eq->span.start += out->schema_offset;
        eq->span.end += out->schema_offset;
        for (size_t j = 0; j < eq->n_options; j++) {
            eq->option_spans[j].start += out->schema_offset;
            eq->option_spans[j].end += out->schema_offset;
        }
    }
    out->n_ids = fixed + kept;
    out->input_ids = malloc(out->n_ids * sizeof *out->input_ids);
    if (!out->input_ids) return clef_err_set(err, CLEF_E_OOM, "out of memory");
    int32_t *p = out->input_ids;
    memcpy(p, prefix->v, prefix->n * sizeof *p), p += prefix->n;
    if (kept) memcpy(p, state->v, kept * sizeof *p), p += kept;
    memcpy(p, schema->v, schema->n * sizeof *p), p += schema->n;
    memcpy(p, suffix->v, suffix->n * sizeof *p);
    return 0;
}

/* Ours, after every check of the reference: the media token counts (the reference's model forward
 * raises these), the model name (encoding the reference's response fails), an animated GIF whose
 * count literal <|image_pad|> tokens make up. */
static int check_after_reference(const clef_tokenizer *tok, const clef_request *req, const clef_record *out,
                                 const clef_image_count *ic, size_t video_features, clef_err *err) {
    if (out->n_real_images) {
        int32_t pad = clef_tokenizer_added_id(tok, "<|image_pad|>");
        size_t have = 0;
        for (size_t k = 0; k < out->n_ids; k++) have += out->input_ids[k] == pad;
        if (have != ic->features)
            /* the reference's model forward raises this ValueError (measured: tests/fixtures/tiny e045,
             * tests/fixtures/images/index.json "requests") */
            return clef_err_set(err, CLEF_E_MEDIA_TOKEN_MISMATCH,
                                "Image features and image tokens do not match, tokens: %zu, features: %zu", have,
                                ic->features);
    }
    if (out->n_videos) {
        int32_t pad = clef_tokenizer_added_id(tok, "<|video_pad|>");
        size_t have = 0;
        for (size_t k = 0; k < out->n_ids; k++) have += out->input_ids[k] == pad;
        if (have != video_features)
            /* the reference's forward, after the image check (measured: tests/fixtures/video "requests",
             * video_pads_in_state) */
            return clef_err_set(err, CLEF_E_MEDIA_TOKEN_MISMATCH,
                                "Video features and video tokens do not match, tokens: %zu, features: %zu", have,
                                video_features);
    }
    /* the reference answers, and encoding its response fails */
    if (clef_check_surrogates(req->model, req->model_len, err)) return -1;
    if (ic->several)
        /* Literal <|image_pad|> tokens in the text make up the count: the reference's forward scatters
         * the frames' features over them and answers (measured: index.json "requests",
         * gif_alone_pads_balanced). We place each image at its own placeholder only. */
        return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA,
                            "literal <|image_pad|> tokens in the text stand in for image features of an animated "
                            "GIF (%zu image tokens); this engine places image features only at their own placeholders",
                            ic->features);
    return 0;
}

int clef_encode_record(const clef_tokenizer *tok, const clef_request *req, const clef_encode_opts *opts,
                       clef_record *out, clef_err *err) {
    memset(out, 0, sizeof *out);
    size_t max_length = opts && opts->max_length ? opts->max_length : CLEF_MAX_LENGTH_DEFAULT;
    clef_ids schema, prefix, suffix, state;
    clef_ids_init(&schema);
    clef_ids_init(&prefix);
    clef_ids_init(&suffix);
    clef_ids_init(&state);
    clef_buf b;
    clef_buf_init(&b);
    const json_value **entries = NULL, **ventries = NULL;
    size_t n_entries = 0, n_ventries = 0;
    size_t video_features = 0; /* <|video_pad|> ids the media block holds: what the forward compares */
    clef_image_count ic = {0, 0};
    int rc = -1;

    out->n_questions = req->n_questions;
    out->questions = calloc(req->n_questions ? req->n_questions : 1, sizeof *out->questions);
    if (!out->questions) {
        clef_err_set(err, CLEF_E_OOM, "out of memory");
        goto done;
    }

    /* ---- schema, question by question ---- */
    if (encode_schema(tok, req, out, &schema, &b, err)) goto done;

    /* ---- prefix and suffix ---- */
    clef_buf_reset(&b);
    clef_buf_puts(&b, "<|im_start|>system\n");
    clef_buf_puts(&b, SYSTEM_PROMPT);
    clef_buf_puts(&b, "<|im_end|>\n<|im_start|>user\nSTATE:\n");
    if (piece_buf(tok, &b, &prefix, err)) goto done;
    if (piece_str(tok, SUFFIX, &suffix, err)) goto done;
    out->token_offset = prefix.n;

    /* ---- media ---- */
    if (clef_encode_media_list(req->images, "images", req->own, &entries, &n_entries, err)) goto done;
    if (clef_encode_media_list(req->videos, "videos", req->own, &ventries, &n_ventries, err)) goto done;
    /* Admission to the request pool's budget (`clef serve --pixel-budget`), once, before the first
     * pixel array: bufpool.h says why here and only once */
    if ((n_entries || n_ventries) && clef_bufpool_admit(clef_bufpool_process()) != 0) {
        clef_err_set(err, CLEF_E_DEADLINE,
                     "the request waited longer than --deadline for memory for its images (--pixel-budget)");
        goto done;
    }
    if (n_entries || n_ventries) {
        out->images = calloc(n_entries ? n_entries : 1, sizeof *out->images);
        if (!out->images) {
            clef_err_set(err, CLEF_E_OOM, "out of memory");
            goto done;
        }
    }
    /* unpaid: the images are over the budget (cost_images): their grids only, no pixel arrays; 2: their
     * `unpushed` tokens (pads and delimiters) are counted, not in `prefix` */
    int unpaid = 0;
    size_t unpushed = 0;
    if (n_entries && clef_encode_images(tok, req, opts, entries, n_entries, max_length, schema.n + suffix.n, out, &prefix,
                                   &ic, &unpaid, &unpushed, err))
        goto done;
    out->n_real_images = out->n_images;
    /* the videos get what the images left of max_length (ours; their own cap besides); over a budget
     * the images already passed, they are not decoded */
    size_t media_tokens = 0;
    for (size_t k = 0; k < out->n_images; k++) media_tokens += 2 + out->images[k].n_pad;
    size_t video_budget = unpaid || media_tokens >= max_length ? 0 : max_length - media_tokens;
    if (n_ventries && !unpaid &&
        clef_encode_videos(tok, ventries, n_ventries, opts, video_budget, out, &prefix, &video_features, err))
        goto done;
    if (n_entries || n_ventries) {
        if (piece_str(tok, "\n", &prefix, err)) goto done;
        if (prefix.oom) {
            clef_err_set(err, CLEF_E_OOM, "out of memory");
            goto done;
        }
    }
    out->state_start = prefix.n;

    /* ---- state ---- */
    clef_buf_reset(&b);
    if (clef_json_render_py(&b, req->state) || b.oom) {
        clef_err_set(err, CLEF_E_OOM, "out of memory");
        goto done;
    }
    if (piece_buf(tok, &b, &state, err)) goto done;
    out->state_total = state.n;

    /* ---- length check and truncation, the ids ---- */
    if (unpaid == 2) { /* assemble_ids' error, on the counted prefix */
        clef_err_set(err, CLEF_E_SCHEMA_TOO_LONG, "schema requires %zu tokens before state; maximum is %zu",
                     prefix.n + unpushed + schema.n + suffix.n, max_length);
        goto done;
    }
    if (assemble_ids(&prefix, &state, &schema, &suffix, max_length, out, err)) goto done;

    /* ---- ours, after the reference's checks ---- */
    if (check_after_reference(tok, req, out, &ic, video_features, err)) goto done;
    if (unpaid) { /* cost_images found them over the budget: one of the checks above must have refused */
        clef_err_set(err, CLEF_E_INTERNAL, "images over the request's budget were not refused");
        goto done;
    }
    rc = 0;
done:
    free(entries);
    free(ventries);
    clef_buf_free(&b);
    clef_ids_free(&schema);
    clef_ids_free(&prefix);
    clef_ids_free(&suffix);
    clef_ids_free(&state);
    if (rc) clef_record_free(out);
    return rc;
}

int clef_record_render(clef_buf *o, const clef_record *r) {
    clef_buf_puts(o, "{\"input_ids\":[");
    for (size_t i = 0; i < r->n_ids; i++) clef_buf_printf(o, i ? ",%" PRId32 : "%" PRId32, r->input_ids[i]);
    clef_buf_puts(o, "],\"questions\":[");
    for (size_t i = 0; i < r->n_questions; i++) {
        const clef_enc_question *q = &r->questions[i];
        if (i) clef_buf_putc(o, ',');
        clef_buf_puts(o, "{\"question_id\":");
        clef_json_render_string(o, q->id, q->id_len);
        clef_buf_printf(o, ",\"question_type\":%d,\"question_span\":[%zu,%zu],\"option_spans\":[", q->type,
                        q->span.start, q->span.end);
        for (size_t j = 0; j < q->n_options; j++)
            clef_buf_printf(o, j ? ",[%zu,%zu]" : "[%zu,%zu]", q->option_spans[j].start, q->option_spans[j].end);
        clef_buf_puts(o, "],\"option_ids\":[");
        for (size_t j = 0; j < q->n_options; j++) {
            if (j) clef_buf_putc(o, ',');
            clef_json_render_string(o, q->options[j].id, q->options[j].id_len);
        }
        clef_buf_puts(o, "]}");
    }
    clef_buf_putc(o, ']');
    if (r->n_real_images) {
        clef_buf_puts(o, ",\"images\":[");
        for (size_t k = 0; k < r->n_real_images; k++) {
            const clef_enc_image *im = &r->images[k];
            clef_buf_printf(o, "%s{\"grid_thw\":[%d,%d,%d],\"pad_start\":%zu,\"n_pad\":%zu}", k ? "," : "",
                            im->image.grid_t, im->image.grid_h, im->image.grid_w, im->pad_start, im->n_pad);
        }
        clef_buf_putc(o, ']');
    }
    if (r->n_videos) {
        clef_buf_puts(o, ",\"videos\":[");
        for (size_t k = r->n_real_images; k < r->n_images; k++) {
            const clef_enc_image *im = &r->images[k];
            if (im->group == 0)
                clef_buf_printf(o, "%s{\"grid_thw\":[%d,%d,%d],\"groups\":[", k > r->n_real_images ? "]}," : "",
                                im->video_grid_t, im->image.grid_h, im->image.grid_w);
            clef_buf_printf(o, "%s{\"pad_start\":%zu,\"n_pad\":%zu}", im->group ? "," : "", im->pad_start, im->n_pad);
        }
        clef_buf_puts(o, "]}]");
    }
    clef_buf_putc(o, '}');
    return o->oom ? -1 : 0;
}
