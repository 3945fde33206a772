/* An `images` entry to RGB pixels, as transformers' load_image does it: a data:image/...;base64, URL
 * (the part after the comma) or bare base64 (or a local path when allowed), PIL open, EXIF
 * transpose, convert("RGB"). http(s) URLs are refused (we fetch nothing). */
#include <stdlib.h>
#include <string.h>

#include "image/decoders.h"
#include "image/image_internal.h"
#include "image/media_entry.h"
#include "image/orient.h"

clef_img_format clef_image_sniff(const uint8_t *p, size_t n) {
    if (n >= 8 && !memcmp(p, "\x89PNG\r\n\x1a\n", 8)) return CLEF_FMT_PNG;
    if (n >= 3 && p[0] == 0xff && p[1] == 0xd8 && p[2] == 0xff) return CLEF_FMT_JPEG;
    if (n >= 12 && !memcmp(p, "RIFF", 4) && !memcmp(p + 8, "WEBP", 4)) return CLEF_FMT_WEBP;
    if (n >= 6 && (!memcmp(p, "GIF87a", 6) || !memcmp(p, "GIF89a", 6))) return CLEF_FMT_GIF;
    return CLEF_FMT_UNKNOWN;
}

/* The image processor's words for a refused entry (media_entry.h). */
static int image_refuse(clef_err *err, clef_media_fault fault, const clef_media_fault_at *at) {
    int shown = (int)(at->len < 200 ? at->len : 200);
    switch (fault) {
    case CLEF_MEDIA_EMPTY:
        return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "empty image entry");
    case CLEF_MEDIA_URL:
        return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "image URLs are not fetched; send a data: URL or base64");
    case CLEF_MEDIA_PATH_MISSING:
        return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "image file '%.*s' does not exist", shown, at->entry);
    case CLEF_MEDIA_PATH_IRREGULAR:
        return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "image file '%.*s' is not a regular file", shown,
                            at->entry);
    case CLEF_MEDIA_PATH_NOT_BASE64:
        return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA,
                            "'%.*s' looks like a file path, not base64: send the image as a data: URL or bare "
                            "base64 (clef decide and clef batch read local files with --allow-image-paths; "
                            "clef serve never does)", (int)(at->len < 120 ? at->len : 120), at->entry);
    case CLEF_MEDIA_FILE_OPEN:
        return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "cannot open image file '%.200s'", at->path);
    case CLEF_MEDIA_FILE_STAT:
        return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "'%.200s' is not a regular file", at->path);
    case CLEF_MEDIA_FILE_LIMIT:
        return clef_err_set(err, CLEF_E_LIMIT, "image file of %lld bytes is over this server's limit of %zu bytes",
                            at->size, at->limit);
    case CLEF_MEDIA_FILE_OOM:
        return clef_err_set(err, CLEF_E_OOM, "out of memory reading an image");
    case CLEF_MEDIA_FILE_SHORT:
        return clef_err_set(err, CLEF_E_IO, "short read on '%.200s'", at->path);
    case CLEF_MEDIA_DATA_TYPE:
        return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "data: URL is not an image (expected data:image/...)");
    case CLEF_MEDIA_BASE64:
    case CLEF_MEDIA_BASE64_LIMIT:
        return -1; /* base64's own words ("invalid base64: ...", "image data over this server's limit ...") */
    case CLEF_MEDIA_DECODES_EMPTY:
        return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "image entry decodes to no bytes");
    }
    return clef_err_set(err, CLEF_E_INTERNAL, "image entry: fault %d", (int)fault);
}

static const char *const image_data_types[] = {"data:image/", NULL};

/* transformers' load_image takes the text between the first and a possible second comma of a data URL */
static const clef_media_kind image_kind = {
    .data_types = image_data_types,
    .path_words = 1,
    .data_stops_at_second_comma = 1,
    .refuse = image_refuse,
};

int clef_image_entry_bytes(const char *entry, size_t len, const clef_image_opts *o, uint8_t **bytes, size_t *n,
                           clef_err *err) {
    return clef_media_entry_bytes(entry, len, &image_kind, o->allow_paths, o->max_bytes, bytes, n, err);
}

int clef_image_decode_all(const uint8_t *data, size_t n, const clef_image_opts *o, clef_rgb **frames, int *n_frames,
                          clef_err *err) {
    *frames = NULL;
    *n_frames = 0;
    if (n > o->max_bytes)
        return clef_err_set(err, CLEF_E_LIMIT, "image of %zu bytes is over this server's limit of %zu bytes", n,
                            o->max_bytes);
    int orient = 0, rc, tv = o->tile == 0;
    clef_img_format fmt = clef_image_sniff(data, n);
    if (fmt == CLEF_FMT_GIF) return clef_decode_gif(data, n, o, tv, frames, n_frames, err);
    if (fmt == CLEF_FMT_UNKNOWN)
        return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "cannot identify image file (supported: PNG, JPEG, WebP, GIF)");
    clef_rgb *out = calloc(1, sizeof *out);
    if (!out) return clef_err_set(err, CLEF_E_OOM, "out of memory decoding an image");
    switch (fmt) {
    case CLEF_FMT_PNG: rc = clef_decode_png(data, n, o, tv, out, &orient, err); break;
    case CLEF_FMT_JPEG: rc = clef_decode_jpeg(data, n, o, tv, out, &orient, err); break;
    default: rc = clef_decode_webp(data, n, o, tv, out, &orient, err); break;
    }
    /* torchvision.io.decode_image does not apply EXIF orientation; PIL's exif_transpose does */
    if (!rc && !tv) rc = clef_rgb_orient(out, orient, err);
    if (rc) {
        clef_rgb_free_all(out, 1);
        return -1;
    }
    *frames = out;
    *n_frames = 1;
    return 0;
}

int clef_image_decode(const uint8_t *data, size_t n, const clef_image_opts *o, clef_rgb *out, clef_err *err) {
    memset(out, 0, sizeof *out);
    clef_rgb *frames = NULL;
    int nf = 0;
    if (clef_image_decode_all(data, n, o, &frames, &nf, err)) return -1;
    *out = frames[0]; /* the first image; the others (animated GIF frames) are dropped */
    memset(&frames[0], 0, sizeof frames[0]);
    clef_rgb_free_all(frames, nf);
    return 0;
}
