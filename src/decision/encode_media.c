/* The media of encode_record (encode.h): the images' and videos' entries read, costed, prepared and
 * laid out as pads in the prompt's prefix, as the processor does (its order of steps and of errors).
 * encode.c calls these between the state and the schema. */
#include "decision/encode_media.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bufpool.h"
#include "decision/encode_piece.h"

static int default_media(void *ctx, size_t index, const json_value *entry, const clef_image_opts *o, clef_image *out,
                         clef_err *err) {
    (void)ctx;
    if (entry->kind != JSON_STRING)
        return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA,
                            "images[%zu]: an image must be a string (a data: URL or base64), not %s", index,
                            clef_py_type_name(entry));
    return clef_image_prepare(entry->u.string.s, entry->u.string.len, o, out, err);
}

/* Entry k failed in the media step. The processor decodes every entry before it resizes any, so when
 * entry k itself decodes (its failure came later: its aspect ratio, say), the first later entry that
 * fails to decode is what the reference reports (measured: tests/fixtures/images "aspect_then_bad").
 * Error path only; the pixels decoded here are freed at once. Non-string entries end the search
 * (default_media refuses them in order, as before). */
static void first_decoder_failure(const json_value *const *entries, size_t k, size_t n, const clef_image_opts *o,
                                  clef_err *err) {
    clef_err e;
    clef_err_clear(&e);
    if (entries[k]->kind != JSON_STRING ||
        clef_image_decodes(entries[k]->u.string.s, entries[k]->u.string.len, o, &e))
        return; /* entry k's own failure is a fetch or decoder failure: the first one */
    for (size_t j = k + 1; j < n; j++) {
        if (entries[j]->kind != JSON_STRING) return;
        if (clef_image_decodes(entries[j]->u.string.s, entries[j]->u.string.len, o, &e)) {
            *err = e;
            return;
        }
    }
}

static int kw_int(const json_value *v, const char *name, int64_t *out, clef_err *err) {
    if (v->kind == JSON_INT) {
        char *end;
        long long x = strtoll(v->u.integer.digits, &end, 10);
        if (*end == '\0' && x > 0 && v->u.integer.len < 19) {
            *out = x;
            return 0;
        }
    } else if (v->kind == JSON_FLOAT && v->u.number > 0 && v->u.number < 9.0e18 &&
               v->u.number == (double)(int64_t)v->u.number) {
        *out = (int64_t)v->u.number;
        return 0;
    }
    return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "media_kwargs.%s must be a positive integer", name);
}

/* list(request.get(x) or []) for images: the entries as JSON values (synthesized ones in `own`). */
int clef_encode_media_list(const json_value *v, const char *name, json_doc *own, const json_value ***items,
                           size_t *n, clef_err *err) {
    *items = NULL;
    *n = 0;
    if (!clef_json_truthy(v)) return 0;
    if (v->kind == JSON_ARRAY) {
        *n = v->u.array.n;
        *items = malloc(*n * sizeof **items);
        if (!*items) return clef_err_set(err, CLEF_E_OOM, "out of memory");
        for (size_t i = 0; i < *n; i++) (*items)[i] = v->u.array.items[i];
        return 0;
    }
    if (v->kind == JSON_OBJECT || v->kind == JSON_STRING) {
        /* Python iterates a dict's keys and a string's characters; none of these is an image */
        return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "%s must be a list, not %s", name, clef_py_type_name(v));
    }
    (void)own;
    return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "'%s' object is not iterable", clef_py_type_name(v));
}

/* ---- videos ---- */

/* A `videos` entry that is not a string, refused before any entry is decoded. As the first entry, what
 * the reference raises (transformers' make_batched_videos on the value; measured: tests/fixtures/video
 * "requests" int_entry, none_entry, dict_entry: IndexError, KeyError 0). After a string entry the
 * reference raises a bare StopIteration (good_then_int): refused with ours. A list holding one string is
 * that string (the reference answers [[x]] as [x]: nested_list); other lists are refused with ours. */
static int video_entry_type(const json_value **e, size_t k, clef_err *err) {
    if ((*e)->kind == JSON_ARRAY && (*e)->u.array.n == 1 && (*e)->u.array.items[0]->kind == JSON_STRING)
        *e = (*e)->u.array.items[0];
    if ((*e)->kind == JSON_STRING) return 0;
    if (k == 0 && (*e)->kind == JSON_OBJECT) return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "0");
    if (k == 0 && (*e)->kind != JSON_ARRAY)
        return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "list index out of range");
    return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA,
                        "videos[%zu]: a video must be a string (a data: URL or base64), not %s", k,
                        clef_py_type_name(*e));
}

/* A failure of the processor's resize step (smart_resize), which the reference reaches only after it
 * decoded and sampled every video. */
static int video_later_step(const clef_err *e) {
    return e->type && !strcmp(e->type, CLEF_E_UNSUPPORTED_MEDIA) &&
           (!strncmp(e->msg, "t:", 2) || !strncmp(e->msg, "absolute aspect ratio", 21));
}

/* Decodes every video (request order), then lays out their frame groups after the images' pads in
 * `prefix`, each as its own clef_enc_image of grid (1, h, w) (encode.h). */
int clef_encode_videos(const clef_tokenizer *tok, const json_value **entries, size_t n,
                         const clef_encode_opts *opts, size_t media_budget, clef_record *out, clef_ids *prefix,
                         size_t *features, clef_err *err) {
    clef_video_opts vo;
    if (opts && opts->video) {
        vo = *opts->video;
    } else {
        clef_video_opts_default(&vo);
        vo.allow_paths = opts && opts->image ? opts->image->allow_paths : 0;
    }
    int32_t vs = clef_tokenizer_added_id(tok, "<|vision_start|>");
    int32_t pad = clef_tokenizer_added_id(tok, "<|video_pad|>");
    int32_t ve = clef_tokenizer_added_id(tok, "<|vision_end|>");
    if (vs < 0 || pad < 0 || ve < 0)
        return clef_err_set(err, CLEF_E_BAD_MODEL, "the tokenizer has no <|vision_start|>/<|video_pad|>/<|vision_end|>");
    for (size_t k = 0; k < n; k++)
        if (video_entry_type(&entries[k], k, err)) return -1;
    const int merge = vo.merge_size > 0 ? vo.merge_size : 2;
    clef_video *v = calloc(n, sizeof *v);
    if (!v) return clef_err_set(err, CLEF_E_OOM, "out of memory");
    int rc = -1;
    size_t groups = 0, tokens = 0;
    /* ours: the video tokens of the whole request, within what the images left of max_length */
    const size_t budget = vo.max_tokens < media_budget ? vo.max_tokens : media_budget;
    for (size_t k = 0; k < n; k++) {
        if (opts && opts->stop && opts->stop(opts->stop_ctx)) {
            clef_err_set(err, CLEF_E_DEADLINE, "the engine stopped preparing requests (shutting down)");
            goto done;
        }
        clef_video_opts o = vo;
        o.max_tokens = budget - tokens;
        const json_value *e = entries[k];
        if (clef_video_prepare(e->u.string.s, e->u.string.len, &o, &v[k], err)) {
            if (video_later_step(err)) {
                /* a later entry's fetch or decoder failure is what the reference reports */
                for (size_t j = k + 1; j < n; j++) {
                    clef_video t;
                    clef_err e2;
                    clef_err_clear(&e2);
                    if (clef_video_prepare(entries[j]->u.string.s, entries[j]->u.string.len, &vo, &t, &e2)) {
                        if (!video_later_step(&e2)) {
                            *err = e2;
                            break;
                        }
                    } else {
                        clef_video_free(&t);
                    }
                }
            }
            goto done;
        }
        if (v[k].grid_h % merge || v[k].grid_w % merge || v[k].grid_t <= 0) {
            clef_err_set(err, CLEF_E_INTERNAL, "videos[%zu]: grid %dx%dx%d", k, v[k].grid_t, v[k].grid_h, v[k].grid_w);
            goto done;
        }
        groups += (size_t)v[k].grid_t;
        tokens += v[k].n_patches / ((size_t)merge * merge);
    }
    clef_enc_image *im = realloc(out->images, (out->n_images + groups) * sizeof *im);
    if (!im) {
        clef_err_set(err, CLEF_E_OOM, "out of memory");
        goto done;
    }
    out->images = im;
    memset(im + out->n_images, 0, groups * sizeof *im);
    for (size_t k = 0; k < n; k++) {
        const clef_video *x = &v[k];
        const size_t per = (size_t)x->grid_h * x->grid_w, mpad = per / ((size_t)merge * merge);
        clef_ids_push(prefix, vs);
        for (int g = 0; g < x->grid_t; g++) {
            char ts[64];
            if (clef_video_timestamp_text(x->timestamps[g], ts, sizeof ts) < 0) {
                clef_err_set(err, CLEF_E_INTERNAL, "video timestamp %g", x->timestamps[g]);
                goto done;
            }
            if (clef_encode_piece(tok, ts, strlen(ts), prefix, err)) goto done;
            clef_ids_push(prefix, vs);
            clef_enc_image *f = &out->images[out->n_images];
            f->video = 1;
            f->video_index = k;
            f->group = (size_t)g;
            f->video_grid_t = x->grid_t;
            f->image.grid_t = 1;
            f->image.grid_h = x->grid_h;
            f->image.grid_w = x->grid_w;
            f->image.n_images = 1;
            f->image.n_patches = per;
            f->image.patch_dim = x->patch_dim;
            f->image.pixel_values = clef_bufpool_alloc(clef_bufpool_process(), per * x->patch_dim * sizeof(float));
            if (!f->image.pixel_values) {
                clef_err_set(err, CLEF_E_OOM, "out of memory for video frame group pixels");
                goto done;
            }
            memcpy(f->image.pixel_values, x->pixel_values + (size_t)g * per * x->patch_dim,
                   per * x->patch_dim * sizeof(float));
            out->n_images++;
            f->pad_start = prefix->n;
            f->n_pad = mpad;
            for (size_t p = 0; p < mpad; p++) clef_ids_push(prefix, pad);
            clef_ids_push(prefix, ve);
            *features += mpad;
        }
        clef_ids_push(prefix, ve);
        out->n_videos++;
    }
    if (prefix->oom) {
        clef_err_set(err, CLEF_E_OOM, "out of memory");
        goto done;
    }
    rc = 0;
done:
    for (size_t k = 0; k < n; k++) clef_video_free(&v[k]);
    free(v);
    return rc;
}

/* Ours, before any entry is decoded: every image entry costed from its header (clef_image_probe_entry),
 * with running totals of the request's decoded pixels, image tokens and the prompt they make. Returns
 * 0 when the request is within its budget: the entries are then processed as the reference does (its
 * order of errors exactly), which holds at most max_length tokens of pixel arrays. Returns 1 when it
 * can never fit: out->images then holds every entry's grid from its header, no pixel array is built,
 * and the caller lays the prompt out from those grids, so the reference's own error (a later entry's
 * patchify failure, SchemaTooLong with its count, MediaTokenMismatch) is still what the request gets,
 * without the work. -1: refused here (the entries' count or decoded pixels over our caps; an entry's
 * fetch or header failure, or its aspect ratio, when the entries before it are already over the
 * budget: the reference would have reported it before its SchemaTooLong). */
static int cost_images(const json_value **entries, size_t n, const clef_image_opts *io, size_t fixed_now,
                       size_t max_length, const clef_encode_opts *opts, clef_record *out, clef_err *err) {
    size_t max_images = io->max_images ? io->max_images : max_length / CLEF_IMAGE_MIN_TOKENS_PER_IMAGE;
    if (max_images < 1) max_images = 1;
    if (n > max_images && io->max_images)
        return clef_err_set(err, CLEF_E_LIMIT, "the request has %zu images; the limit is %zu", n, max_images);
    if (n > max_images)
        return clef_err_set(err, CLEF_E_LIMIT,
                            "the request has %zu images; the limit is %zu (each image takes at least %d of the %zu "
                            "tokens)",
                            n, max_images, CLEF_IMAGE_MIN_TOKENS_PER_IMAGE, max_length);
    const int64_t max_pixels = io->max_source_pixels > 0 && io->max_source_pixels < INT64_MAX / CLEF_IMAGE_REQUEST_PIXELS_FACTOR
                                   ? io->max_source_pixels * CLEF_IMAGE_REQUEST_PIXELS_FACTOR
                                   : INT64_MAX;
    const int merge = io->merge_size > 0 ? io->merge_size : 2;
    clef_image_probe *pr = calloc(n, sizeof *pr);
    if (!pr) return clef_err_set(err, CLEF_E_OOM, "out of memory");
    int rc = -1;
    size_t stop = n, aspect = n; /* the first entry that fails at its fetch/header, at its processing */
    clef_err stop_err, aspect_err;
    clef_err_clear(&stop_err);
    clef_err_clear(&aspect_err);
    int64_t pixels = 0;
    for (size_t k = 0; k < n; k++) {
        if (opts && opts->stop && opts->stop(opts->stop_ctx)) {
            clef_err_set(err, CLEF_E_DEADLINE, "the engine stopped preparing requests (shutting down)");
            goto done;
        }
        if (entries[k]->kind != JSON_STRING) {
            stop = k;
            default_media(NULL, k, entries[k], io, NULL, &stop_err);
            break;
        }
        clef_err e;
        clef_err_clear(&e);
        int r = clef_image_probe_entry(entries[k]->u.string.s, entries[k]->u.string.len, io, &pr[k], &e);
        if (r == -1 && e.type && !strcmp(e.type, CLEF_E_OOM)) { /* reported, never absorbed by a retry */
            *err = e;
            goto done;
        }
        if (r == -1) {
            stop = k;
            stop_err = e;
            break;
        }
        if (r == -2) {
            if (aspect == n) aspect = k, aspect_err = e;
            memset(&pr[k], 0, sizeof pr[k]);
            continue;
        }
        pixels += pr[k].pixels;
        if (pixels > max_pixels) {
            clef_err_set(err, CLEF_E_LIMIT,
                         "the request's images decode to over %lld pixels (images[0..%zu]); the limit is %lld",
                         (long long)max_pixels, k, (long long)max_pixels);
            goto done;
        }
    }
    /* The prompt's image tokens as the processor lays them out (clef_encode_images below: with an animated
     * GIF first, placeholder k takes processor image k's tokens), and the tokens of the pixel arrays
     * the entries would hold (an animated GIF's frames hold none: such a request is always refused). */
    size_t prompt = fixed_now, arrays = 0, k = 0;
    const int gif_first = stop > 0 && pr[0].n_frames > 1;
    for (size_t j = 0; j < stop; j++) {
        size_t m = gif_first ? (pr[j].n_frames > 1 ? (size_t)pr[j].n_frames : CLEF_DECODED_CHANNELS) : 1;
        for (size_t r = 0; r < m && k < stop; r++, k++) prompt += pr[j].tokens;
        if (pr[j].n_frames == 1) arrays += pr[j].tokens;
    }
    if (prompt <= max_length && arrays <= max_length) {
        rc = 0; /* within the budget: the reference's path */
        goto done;
    }
    if (stop < n) {
        *err = stop_err;
        goto done;
    }
    if (aspect < n) {
        *err = aspect_err;
        goto done;
    }
    for (size_t j = 0; j < n; j++) {
        clef_image *im = &out->images[j].image;
        im->grid_t = 1;
        im->grid_h = pr[j].grid_h;
        im->grid_w = pr[j].grid_w;
        im->n_images = pr[j].n_frames;
        im->patch_dim = (size_t)3 * io->temporal_patch_size * io->patch_size * io->patch_size;
        im->n_patches = (size_t)pr[j].n_frames * (size_t)pr[j].grid_h * (size_t)pr[j].grid_w;
        im->pixel_values = NULL;
        if (pr[j].grid_h % merge || pr[j].grid_w % merge) {
            clef_err_set(err, CLEF_E_INTERNAL, "images[%zu]: bad grid %dx%d", j, pr[j].grid_h, pr[j].grid_w);
            goto done;
        }
    }
    rc = 1;
done:
    free(pr);
    return rc;
}

/* The image options for this request: opts' (or the defaults) with media_kwargs' min_pixels and
 * max_pixels (both, or neither: one alone has no effect in the processor). 0, or -1 with *err set. */
static int image_opts_for(const clef_request *req, const clef_encode_opts *opts, clef_image_opts *io, clef_err *err) {
    if (opts && opts->image) *io = *opts->image;
    else clef_image_opts_default(io);
    const json_value *kw = req->media_kwargs;
    if (clef_json_truthy(kw)) {
        if (kw->kind != JSON_OBJECT)
            return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "media_kwargs must be an object, not %s",
                                clef_py_type_name(kw));
        const json_value *mn = clef_json_object_get(kw, "min_pixels"), *mx = clef_json_object_get(kw, "max_pixels");
        if (mn && mx) {
            int64_t a, c;
            if (kw_int(mn, "min_pixels", &a, err) || kw_int(mx, "max_pixels", &c, err)) return -1;
            io->min_pixels = a;
            io->max_pixels = c;
        }
    }
    io->all_images = 2; /* an animated GIF: every frame's grid (no pixels: such a request is refused) */
    return 0;
}

/* Every entry through the media function, in order (the processor decodes all of them, then resizes,
 * then patchifies): each one's grid and pad count. 0, or -1 with *err set (the reference's error). */
static int prepare_entries(const json_value **entries, size_t n_entries, const clef_encode_opts *opts,
                           clef_image_opts *io, int merge, size_t max_length, clef_record *out, clef_image_count *ic,
                           clef_err *err) {
    clef_media_fn fn = opts && opts->media ? opts->media : default_media;
    void *ctx = opts && opts->media ? opts->media_ctx : NULL;
    for (size_t k = 0; k < n_entries; k++) {
        if (opts && opts->stop && opts->stop(opts->stop_ctx))
            return clef_err_set(err, CLEF_E_DEADLINE, "the engine stopped preparing requests (shutting down)");
        clef_enc_image *im = &out->images[k];
        /* A bound on this entry's target grid before it is resized, for a media function of a test
         * (cost_images has already found every entry within the budget): the whole budget, and never
         * less than the processor's default max_pixels gives (16384 tokens). Off after a
         * several-image entry, whose frames then take the placeholders. */
        io->max_tokens = ic->several ? 0 : max_length > CLEF_IMAGE_TOKENS_ALWAYS ? max_length : CLEF_IMAGE_TOKENS_ALWAYS;
        io->over_tokens = NULL;
        if (fn(ctx, k, entries[k], io, &im->image, err)) {
            if (fn == default_media) first_decoder_failure(entries, k, n_entries, io, err);
            return -1;
        }
        out->n_images = k + 1;
        int t = im->image.grid_t, h = im->image.grid_h, w = im->image.grid_w;
        if (t <= 0 || h <= 0 || w <= 0 || h % merge || w % merge)
            return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "images[%zu]: bad grid %dx%dx%d", k, t, h, w);
        im->n_pad = (size_t)t * (size_t)(h / merge) * (size_t)(w / merge);
        if (im->image.n_images > 1) ic->several = 1;
    }
    return 0;
}

/* The placeholders' token counts and the features they stand for. When the first entry is several
 * images (an animated GIF's frames, [F, 3, H, W]) the processor's make_flat_list_of_images splits the
 * first axis of every entry, so a later single image gives its 3 channel planes as 3 grey images of
 * its grid (measured: index.json "requests"): placeholder k gets the tokens of processor image k, the
 * features are every processor image's. 0, or -1 with *err set. */
static int lay_out_placeholders(clef_record *out, size_t n_entries, clef_image_count *ic, clef_err *err) {
    if (out->images[0].image.n_images > 1) {
        size_t *placeholder = malloc(n_entries * sizeof *placeholder);
        if (!placeholder) return clef_err_set(err, CLEF_E_OOM, "out of memory");
        size_t k = 0;
        for (size_t j = 0; j < n_entries; j++) {
            const clef_enc_image *e = &out->images[j];
            size_t m = e->image.n_images > 1 ? (size_t)e->image.n_images : CLEF_DECODED_CHANNELS;
            ic->features += m * e->n_pad;
            for (size_t r = 0; r < m && k < n_entries; r++) placeholder[k++] = e->n_pad;
        }
        for (size_t j = 0; j < n_entries; j++) out->images[j].n_pad = placeholder[j];
        free(placeholder);
        return 0;
    }
    for (size_t k = 0; k < n_entries; k++) {
        if (out->images[k].image.n_images > 1)
            /* a [F, 3, H, W] entry after a single image reaches the processor's patchify as one 5-D
             * batch (measured: index.json "requests") */
            return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "too many values to unpack (expected 4)");
        ic->features += out->images[k].n_pad;
    }
    return 0;
}

int clef_encode_images(const clef_tokenizer *tok, const clef_request *req, const clef_encode_opts *opts,
                       const json_value **entries, size_t n_entries, size_t max_length, size_t fixed,
                       clef_record *out, clef_ids *prefix, clef_image_count *ic, int *unpaid, size_t *unpushed,
                       clef_err *err) {
    clef_image_opts io;
    if (image_opts_for(req, opts, &io, err)) return -1;
    int merge = io.merge_size > 0 ? io.merge_size : 2;
    int32_t vs = clef_tokenizer_added_id(tok, "<|vision_start|>");
    int32_t pad = clef_tokenizer_added_id(tok, "<|image_pad|>");
    int32_t ve = clef_tokenizer_added_id(tok, "<|vision_end|>");
    if (vs < 0 || pad < 0 || ve < 0)
        return clef_err_set(err, CLEF_E_BAD_MODEL, "the tokenizer has no <|vision_start|>/<|image_pad|>/<|vision_end|>");
    int over = 0;
    if (!(opts && opts->media)) { /* the image module's entries: costed from their headers first */
        over = cost_images(entries, n_entries, &io, prefix->n + fixed + 2 * n_entries, max_length, opts, out, err);
        if (over < 0) return -1;
    }
    if (over) { /* over the budget: the grids from the headers, no pixels */
        *unpaid = 1;
        out->n_images = n_entries;
        for (size_t k = 0; k < n_entries; k++) {
            clef_enc_image *im = &out->images[k];
            im->n_pad = (size_t)(im->image.grid_h / merge) * (size_t)(im->image.grid_w / merge);
            if (im->image.n_images > 1) ic->several = 1;
        }
    } else if (prepare_entries(entries, n_entries, opts, &io, merge, max_length, out, ic, err)) {
        return -1;
    }
    if (lay_out_placeholders(out, n_entries, ic, err)) return -1;
    if (*unpaid) {
        /* over the budget from the headers: a prefix that alone passes max_length is only counted (its
         * pads could be billions: min_pixels = max_pixels = 2^40), for the caller's SchemaTooLong */
        size_t media = 0;
        for (size_t k = 0; k < n_entries; k++) media += 2 + out->images[k].n_pad;
        if (prefix->n + media > max_length) {
            *unpaid = 2;
            *unpushed = media;
            return 0;
        }
    }
    for (size_t k = 0; k < n_entries; k++) {
        clef_enc_image *im = &out->images[k];
        clef_ids_push(prefix, vs);
        im->pad_start = prefix->n;
        for (size_t p = 0; p < im->n_pad; p++) clef_ids_push(prefix, pad);
        clef_ids_push(prefix, ve);
    }
    return 0;
}
