/* Image input: decode a request's image entry and run the Qwen2-VL image processor exactly as the
 * reference does (spec: ../shared/spec/model.md §7, contract.md §9.2). */
#ifndef CLEF_IMAGE_IMAGE_H
#define CLEF_IMAGE_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

/* The error name for media the engine does not accept or cannot decode (contract.md §3.3). */
#ifndef CLEF_E_UNSUPPORTED_MEDIA
#define CLEF_E_UNSUPPORTED_MEDIA "UnsupportedMedia"
#endif
/* The reference's outcome for an entry that the processor turns into several images (contract.md §3.1;
 * the same name and text as decision/request.h). */
#ifndef CLEF_E_MEDIA_TOKEN_MISMATCH
#define CLEF_E_MEDIA_TOKEN_MISMATCH "MediaTokenMismatch"
#endif

/* The error an image whose target grid alone is over the token budget gets (clef_image_opts.max_tokens;
 * the same name as decision/request.h's). */
#ifndef CLEF_E_SCHEMA_TOO_LONG
#define CLEF_E_SCHEMA_TOO_LONG "SchemaTooLong"
#endif

/* Image tokens of the processor's default max_pixels (16777216 / 32^2): a target grid up to this is
 * always processed (encode.c), larger ones only when they fit the token budget. */
#define CLEF_IMAGE_TOKENS_ALWAYS ((size_t)16384)

/* Our defaults, for the engine and every verb alike: encoded bytes per image (as serve's body cap) and
 * decoded pixels per image (64 Mpx: under Pillow's MAX_IMAGE_PIXELS of 89,478,485, above which Pillow
 * itself warns of a decompression bomb). clef_options.max_image_bytes / max_image_pixels override. */
#define CLEF_IMAGE_DEFAULT_MAX_BYTES ((size_t)16 << 20)
#define CLEF_IMAGE_DEFAULT_MAX_SOURCE_PIXELS ((int64_t)64 << 20)
/* Ours, per request (encode.c costs every entry from its header before any is decoded): the decoded
 * pixels of all its images together, as a multiple of the per-image cap (4 x 64 Mpx = 256 Mpx by
 * default: a few large photos, not hundreds of them); and the images per request when
 * clef_options.max_images is 0: as many as can fit the token budget (each image takes at least 3
 * tokens: <|vision_start|>, one pad, <|vision_end|>), so the cap refuses only requests that can never
 * be answered. */
#define CLEF_IMAGE_REQUEST_PIXELS_FACTOR 4
#define CLEF_IMAGE_MIN_TOKENS_PER_IMAGE 3

typedef struct clef_image_opts {
    int64_t min_pixels, max_pixels; /* processor bounds; defaults 65536 / 16777216 */
    int tile;                       /* 0 = native grid (reference); 256 or 448 = fixed tile (ours) */
    int allow_paths;                /* accept local file paths (CLI only) */
    size_t max_bytes;               /* cap on the encoded image size (ours) */
    int64_t max_source_pixels;      /* cap on decoded width*height before allocating (ours) */
    int patch_size, temporal_patch_size, merge_size; /* 16, 2, 2 */
    /* An animated GIF at the native grid is one image per frame in the reference processor (every
     * frame torchvision.io decodes). 0 (the default): such an entry fails with MediaTokenMismatch,
     * the error the reference's model forward raises for a request carrying it alone (its prompt holds
     * the first frame's tokens, its features are every frame's). 1: return every frame (n_images > 1);
     * only for callers that place each processor image (the processor's output, tests). 2: the grid and
     * n_images only (n_patches counts every frame, pixel_values is NULL when n_images > 1; the checks
     * and errors are those of 1: the first frame is processed and its pixels dropped): for
     * encode_record, which refuses such a request but needs the counts, without the memory and work
     * of every frame's pixels (a small canvas with many frames would be cheap to send). */
    int all_images;
    /* Ours: the most image tokens this image may take (0 = no bound). The target grid is computed from
     * min_pixels/max_pixels and the size in the image's header, before its pixels are decoded or
     * resized; over the bound, SchemaTooLong, and *over_tokens (when set) gets the image's tokens.
     * The reference resizes first (a 1x1 PNG at min_pixels 8e7: 2.2 GB) and then raises the same
     * SchemaTooLong from encode_record (docs/reliability.md). */
    size_t max_tokens;
    size_t *over_tokens;
    /* Ours: images per request (encode.c); 0 = as many as can fit the token budget
     * (max_length / CLEF_IMAGE_MIN_TOKENS_PER_IMAGE). */
    size_t max_images;
    /* Internal: set only by clef_image_probe_entry. The decoders then stop at the header, where
     * clef_image_check_size records the size into it (and an animated GIF's frames are counted without
     * decoding their rasters). */
    struct clef_image_probe *probe;
} clef_image_opts;

void clef_image_opts_default(clef_image_opts *o);

typedef struct clef_image {
    int grid_t, grid_h, grid_w;  /* image_grid_thw of each image, in patches */
    int n_images;                /* processor images held (all of one grid); 0 or 1 = one. > 1 only
                                    with opts.all_images (the frames of an animated GIF; with 2, no
                                    pixel_values) */
    size_t n_patches;            /* all rows: n_images * grid_t * grid_h * grid_w */
    size_t patch_dim;            /* 3 * temporal_patch_size * patch_size^2 = 1536 */
    float *pixel_values;         /* [n_patches, patch_dim], rows in the processor's block order,
                                    image after image; from the process's request-buffer pool
                                    (base/bufpool.h): freed by clef_image_free, never free() */
} clef_image;

/* Decodes one `images` entry (a data: URL, bare base64, or a path when allowed) and preprocesses it.
 * Errors: UnsupportedMedia (with a clear message), RequestTooLong (over our limits), OutOfMemory,
 * MediaTokenMismatch (several processor images from one entry without opts.all_images). */
int clef_image_prepare(const char *entry, size_t len, const clef_image_opts *o, clef_image *out, clef_err *err);
void clef_image_free(clef_image *im);

/* The processor's first pass over one entry: fetch it (data URL, base64, or a path when allowed) and
 * decode every frame, then free the pixels. 0 when that succeeds; otherwise -1 with the error
 * clef_image_prepare reports for that entry. The processor decodes all entries before it resizes
 * any, so a request's first decoder failure outranks an earlier entry's later-step error
 * (encode.c); this answers which, on the error path only. */
int clef_image_decodes(const char *entry, size_t len, const clef_image_opts *o, clef_err *err);

/* What one entry costs, read from its header alone: no pixel array is built. */
typedef struct clef_image_probe {
    int64_t w, h;       /* the canvas the decoder would allocate */
    int n_frames;       /* processor images: an animated GIF's frames at the native grid, else 1 */
    int grid_h, grid_w; /* the processor's grid of one frame, in patches (smart_resize, or the tile's) */
    size_t tokens;      /* image tokens of one frame: (grid_h / merge) * (grid_w / merge) */
    int64_t pixels;     /* pixels its decode writes: w * h * n_frames */
} clef_image_probe;

/* Fetches an entry (as clef_image_prepare) and reads its format and size from the header, with the
 * checks the decoder makes there (our byte and pixel caps, zero size, a palette PNG without PLTE, an
 * animated WebP at the native grid, a GIF frame outside its canvas...). Returns 0 with *out filled;
 * -1 with the error clef_image_prepare reports for the entry at that point; -2 with the processing's
 * error (smart_resize: an aspect ratio over 200), which the processor raises only after it decoded
 * every entry. A corrupt image body after a valid header is not seen here. */
int clef_image_probe_entry(const char *entry, size_t len, const clef_image_opts *o, clef_image_probe *out,
                           clef_err *err);

/* Image tokens the prompt carries for one image of this grid: (grid_h / merge) * (grid_w / merge) * grid_t. */
size_t clef_image_tokens(const clef_image *im, int merge_size);

#endif
