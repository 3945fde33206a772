/* clef_image_prepare: entry -> bytes -> RGB (8-bit, or 16-bit for a 16-bit PNG at the native grid; one
 * image per frame for an animated GIF there) -> (fixed tile: Pillow BICUBIC to tile x tile) ->
 * smart_resize -> torchvision-exact resize -> normalise + patchify. */
#include <stdlib.h>
#include <string.h>

#include "base/bufpool.h"
#include "image/image_internal.h"

void clef_image_opts_default(clef_image_opts *o) {
    memset(o, 0, sizeof *o);
    o->min_pixels = 65536;
    o->max_pixels = 16777216;
    o->tile = 0;
    o->allow_paths = 0;
    o->max_bytes = CLEF_IMAGE_DEFAULT_MAX_BYTES;
    o->max_source_pixels = CLEF_IMAGE_DEFAULT_MAX_SOURCE_PIXELS;
    o->patch_size = 16;
    o->temporal_patch_size = 2;
    o->merge_size = 2;
}

void clef_image_free(clef_image *im) {
    if (!im) return;
    clef_bufpool_free(im->pixel_values);
    memset(im, 0, sizeof *im);
}

size_t clef_image_tokens(const clef_image *im, int merge_size) {
    if (merge_size <= 0) return 0;
    return (size_t)(im->grid_h / merge_size) * (size_t)(im->grid_w / merge_size) * (size_t)im->grid_t;
}

static int validate_opts(const clef_image_opts *o, clef_err *err) {
    if (o->patch_size != 16 || o->merge_size != 2 || o->temporal_patch_size != 2)
        return clef_err_set(err, CLEF_E_BAD_MODEL, "image processor: only patch 16 / merge 2 / temporal 2 supported");
    if (o->tile != 0 && o->tile != 256 && o->tile != 448)
        return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "tile must be 0, 256 or 448 (got %d)", o->tile);
    if (o->min_pixels < 0 || o->max_pixels <= 0 || o->max_pixels > ((int64_t)1 << 40))
        return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "min_pixels/max_pixels out of range");
    return 0;
}

int clef_image_prepare_rgb(const clef_rgb *src, const clef_image_opts *o, clef_image *out, clef_err *err) {
    memset(out, 0, sizeof *out);
    if (validate_opts(o, err)) return -1;
    clef_rgb tiled = {0}, resized = {0};
    const clef_rgb *cur = src;
    if (src->px16 && o->tile) /* 16-bit pixels come only from the native-grid decoder */
        return clef_err_set(err, CLEF_E_INTERNAL, "a 16-bit image cannot take the fixed-tile path");
    if (o->tile) {
        if (clef_resize_pillow(src, o->tile, o->tile, &tiled, err)) return -1;
        cur = &tiled;
    }
    int64_t factor = (int64_t)o->patch_size * o->merge_size, oh, ow;
    if (clef_smart_resize(cur->h, cur->w, factor, o->min_pixels, o->max_pixels, &oh, &ow, err)) goto fail;
    if (oh * ow > o->max_pixels * 4 + factor * factor * 4 || oh > (1 << 20) || ow > (1 << 20)) {
        /* smart_resize bounds its result by max_pixels except through the factor floor; never allocate
         * beyond that. */
        clef_err_set(err, CLEF_E_LIMIT, "resized image %lldx%lld too large", (long long)ow, (long long)oh);
        goto fail;
    }
    if (cur->px16 ? clef_resize_torchvision_u16(cur, (int)ow, (int)oh, &resized, err)
                  : clef_resize_torchvision(cur, (int)ow, (int)oh, &resized, err))
        goto fail;
    clef_rgb_free(&tiled);
    int rc = clef_patchify(&resized, o, out, err);
    clef_rgb_free(&resized);
    return rc;
fail:
    clef_rgb_free(&tiled);
    clef_rgb_free(&resized);
    return -1;
}

/* The reference's outcome for a request carrying this entry: the processor makes n images (one per
 * frame), the prompt gets the tokens of image_grid_thw[0] only (one placeholder per entry), and the
 * model forward raises on the count. Measured on the tiny checkpoint (3-frame GIF): "Image features
 * and image tokens do not match, tokens: 70, features: 210". */
static int several_images(const clef_rgb *first, int n, const clef_image_opts *o, clef_err *err) {
    int64_t factor = (int64_t)o->patch_size * o->merge_size, oh, ow;
    if (clef_smart_resize(first->h, first->w, factor, o->min_pixels, o->max_pixels, &oh, &ow, err)) return -1;
    size_t tokens = (size_t)(oh / factor) * (size_t)(ow / factor);
    return clef_err_set(err, CLEF_E_MEDIA_TOKEN_MISMATCH,
                        "Image features and image tokens do not match, tokens: %zu, features: %zu", tokens,
                        tokens * (size_t)n);
}

/* Every frame through the processor, rows concatenated in frame order (the processor's pixel_values). */
static int prepare_frames(const clef_rgb *frames, int n, const clef_image_opts *o, clef_image *out, clef_err *err) {
    clef_image *part = calloc((size_t)n, sizeof *part);
    if (!part) return clef_err_set(err, CLEF_E_OOM, "out of memory for %d frames", n);
    int rc = -1;
    size_t rows = 0;
    for (int i = 0; i < n; i++) {
        if (clef_image_prepare_rgb(&frames[i], o, &part[i], err)) goto done;
        if (part[i].grid_h != part[0].grid_h || part[i].grid_w != part[0].grid_w) {
            clef_err_set(err, CLEF_E_INTERNAL, "frames of one image differ in size");
            goto done;
        }
        rows += part[i].n_patches;
    }
    const size_t dim = part[0].patch_dim;
    if (rows > SIZE_MAX / sizeof(float) / dim) {
        clef_err_set(err, CLEF_E_LIMIT, "too many image patches");
        goto done;
    }
    *out = part[0];
    out->pixel_values = clef_bufpool_alloc(clef_bufpool_process(), sizeof(float) * rows * dim);
    if (!out->pixel_values) {
        memset(out, 0, sizeof *out);
        clef_err_set(err, CLEF_E_OOM, "out of memory for %zu image patches", rows);
        goto done;
    }
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        memcpy(out->pixel_values + at * dim, part[i].pixel_values, sizeof(float) * part[i].n_patches * dim);
        at += part[i].n_patches;
    }
    out->n_patches = rows;
    out->n_images = n;
    rc = 0;
done:
    for (int i = 0; i < n; i++) clef_image_free(&part[i]);
    free(part);
    return rc;
}

/* all_images 2: every frame's grid and the count, without the frames' pixels. The frames share the
 * canvas size, so the first one's processing raises whatever processing all of them would. */
static int frames_grid(const clef_rgb *first, int n, const clef_image_opts *o, clef_image *out, clef_err *err) {
    if (clef_image_prepare_rgb(first, o, out, err)) return -1;
    clef_bufpool_free(out->pixel_values);
    out->pixel_values = NULL;
    out->n_patches *= (size_t)n;
    out->n_images = n;
    return 0;
}

/* The processor's first pass over one entry: its bytes (data URL, base64, or a path when allowed),
 * decoded into every frame. */
static int fetch_decode(const char *entry, size_t len, const clef_image_opts *o, clef_rgb **frames, int *nf,
                        clef_err *err) {
    if (validate_opts(o, err)) return -1;
    uint8_t *bytes = NULL;
    size_t n = 0;
    if (clef_image_entry_bytes(entry, len, o, &bytes, &n, err)) return -1;
    int rc = clef_image_decode_all(bytes, n, o, frames, nf, err);
    free(bytes);
    return rc ? -1 : 0;
}

int clef_image_prepare(const char *entry, size_t len, const clef_image_opts *o, clef_image *out, clef_err *err) {
    memset(out, 0, sizeof *out);
    clef_rgb *frames = NULL;
    int nf = 0, rc;
    if (fetch_decode(entry, len, o, &frames, &nf, err)) return -1;
    if (nf == 1) rc = clef_image_prepare_rgb(&frames[0], o, out, err);
    else if (!o->all_images) rc = several_images(&frames[0], nf, o, err);
    else if (o->all_images == 2) rc = frames_grid(&frames[0], nf, o, out, err);
    else rc = prepare_frames(frames, nf, o, out, err);
    clef_rgb_free_all(frames, nf);
    return rc;
}

int clef_image_probe_entry(const char *entry, size_t len, const clef_image_opts *o, clef_image_probe *out,
                           clef_err *err) {
    memset(out, 0, sizeof *out);
    clef_image_opts po = *o;
    po.probe = out;
    po.max_tokens = 0;
    clef_err e;
    clef_err_clear(&e);
    clef_rgb *frames = NULL;
    int nf = 0;
    /* with po.probe the decoder stops after the header: -1 with no error recorded */
    if (!fetch_decode(entry, len, &po, &frames, &nf, &e)) {
        clef_rgb_free_all(frames, nf); /* not reached: every decoder calls clef_image_check_size */
        return clef_err_set(err, CLEF_E_INTERNAL, "an image decoder did not stop at its header");
    }
    if (e.type) {
        if (err) *err = e;
        return -1;
    }
    if (out->w <= 0 || out->h <= 0) return clef_err_set(err, CLEF_E_INTERNAL, "an image header without a size");
    if (out->n_frames < 1) out->n_frames = 1;
    int64_t th = o->tile ? o->tile : out->h, tw = o->tile ? o->tile : out->w;
    int64_t factor = (int64_t)o->patch_size * o->merge_size, oh, ow;
    if (clef_smart_resize(th, tw, factor, o->min_pixels, o->max_pixels, &oh, &ow, err)) return -2;
    if (oh > (1 << 20) || ow > (1 << 20) || oh * ow > o->max_pixels * 4 + factor * factor * 4) {
        clef_err_set(err, CLEF_E_LIMIT, "resized image %lldx%lld too large", (long long)ow, (long long)oh);
        return -2; /* as clef_image_prepare_rgb finds it: after the decode */
    }
    out->grid_h = (int)(oh / o->patch_size);
    out->grid_w = (int)(ow / o->patch_size);
    out->tokens = (size_t)(oh / factor) * (size_t)(ow / factor);
    out->pixels = out->w * out->h * out->n_frames;
    return 0;
}

int clef_image_decodes(const char *entry, size_t len, const clef_image_opts *o, clef_err *err) {
    clef_rgb *frames = NULL;
    int nf = 0;
    if (fetch_decode(entry, len, o, &frames, &nf, err)) return -1;
    clef_rgb_free_all(frames, nf);
    return 0;
}
