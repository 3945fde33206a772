/* Internals of the image part: base64, decoding (decode.c), the resamplers, smart_resize and patchify;
 * decoded pixels are in rgb.h, below the rest (the format decoders in decoders.h, their size check in
 * size_check.h, EXIF orientation in orient.h: within src/image/ the calls run one way). Only the src/image sources, the CLI's preprocess verb, the unit test and the fuzz target include
 * this; the rest of the engine uses image.h. */
#ifndef CLEF_IMAGE_INTERNAL_H
#define CLEF_IMAGE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "image/image.h"
#include "image/rgb.h"

/* ---- base64 (base64.c) ---- */
/* Strict standard base64 (RFC 4648 alphabet, '=' padding). Python's b64decode (validate=False) skips
 * characters outside the alphabet; we accept ASCII whitespace only and refuse anything else.
 * Writes at most out_cap bytes; returns the decoded length, or -1 with err set (UnsupportedMedia for
 * malformed input, RequestTooLong when the output would exceed out_cap). */
long clef_base64_decode(const char *in, size_t len, uint8_t *out, size_t out_cap, clef_err *err);
/* Upper bound of the decoded size of `len` input characters. */
size_t clef_base64_max_decoded(size_t len);

/* ---- decoding (decode*.c) ---- */
typedef enum { CLEF_FMT_UNKNOWN, CLEF_FMT_PNG, CLEF_FMT_JPEG, CLEF_FMT_WEBP, CLEF_FMT_GIF } clef_img_format;
clef_img_format clef_image_sniff(const uint8_t *p, size_t n);

/* Decodes encoded bytes to RGB. Two flavours, because the reference decodes differently per arm:
 *  - native grid (o->tile == 0): transformers' TorchvisionBackend loads a string entry with
 *    load_image_as_tensor = torchvision.io.decode_image(bytes, ImageReadMode.RGB): no EXIF transpose,
 *    torchvision's GIF canvas rules, animated WebP refused;
 *  - fixed tiles: transformers' load_image (PIL open, exif_transpose, convert("RGB")) before the
 *    Pillow resize.
 * Checks max_source_pixels before allocating. */
int clef_image_decode(const uint8_t *data, size_t n, const clef_image_opts *o, clef_rgb *out, clef_err *err);
/* The same, keeping every image the reference's decoder returns: several only for an animated GIF at
 * the native grid (one per frame, torchvision.io.decode_gif). The frames together count against
 * max_source_pixels. *frames is an array of *n_frames images; free with clef_rgb_free_all. */
int clef_image_decode_all(const uint8_t *data, size_t n, const clef_image_opts *o, clef_rgb **frames, int *n_frames,
                          clef_err *err);
/* Turns an `images` entry (data: URL, bare base64, or a path when allowed) into encoded bytes. The
 * caller frees *bytes. */
int clef_image_entry_bytes(const char *entry, size_t len, const clef_image_opts *o, uint8_t **bytes, size_t *n,
                           clef_err *err);

/* ---- resampling (resize_*.c) ---- */
/* torchvision resize(uint8 CHW, [oh, ow], BICUBIC, antialias=True) as ATen's x86 uint8 path computes
 * it: separable, horizontal pass then vertical, int16 weights with a per-pass precision. */
int clef_resize_torchvision(const clef_rgb *in, int ow, int oh, clef_rgb *out, clef_err *err);
/* The same call on a uint16 image (a 16-bit PNG at the native grid): torchvision casts to float32, runs
 * ATen's float antialiased bicubic (resize_torchvision_float.c) and casts back to uint16 without
 * rounding or clamping. in and out hold px16. */
int clef_resize_torchvision_u16(const clef_rgb *in, int ow, int oh, clef_rgb *out, clef_err *err);
/* PIL Image.resize((ow, oh), BICUBIC) on an RGB image: Pillow's 22-bit fixed-point resampler. */
int clef_resize_pillow(const clef_rgb *in, int ow, int oh, clef_rgb *out, clef_err *err);

/* ---- processor (smart_resize.c, patchify.c) ---- */
/* model.md §7.1. Returns -1 with UnsupportedMedia for an aspect ratio over 200 (the reference's
 * ValueError) or a degenerate size. */
int clef_smart_resize(int64_t h, int64_t w, int64_t factor, int64_t min_pixels, int64_t max_pixels, int64_t *oh,
                      int64_t *ow, clef_err *err);
/* The rule of one smart_resize: the image's is one frame, temporal 1, no upscale (clef_smart_resize);
 * the video processor's is the clip's frame count and temporal patch, with sides under `factor` scaled
 * up first (clef_video_smart_resize). */
typedef struct {
    const char *noun;         /* "image" / "video": "%s has zero size" */
    int64_t frames, temporal; /* t (refused under temporal) and the temporal factor */
    int upscale_small;        /* scale h and w up so that both reach factor, before the aspect check */
    int64_t factor, min_pixels, max_pixels;
} clef_resize_rule;
/* The one smart_resize both processors call: model.md §7.1 over t x h x w. */
int clef_smart_resize_clip(const clef_resize_rule *r, int64_t h, int64_t w, int64_t *oh, int64_t *ow, clef_err *err);
/* (x - 127.5) / 127.5 in fp32 and the merge-block patch layout (model.md §7.4). im must be the
 * resized image (h, w multiples of patch*merge); 8- or 16-bit (16-bit values are normalised the same
 * way, as the reference does: 0..65535 gives about -1..513). */
int clef_patchify(const clef_rgb *im, const clef_image_opts *o, clef_image *out, clef_err *err);
/* Where clef_patchify_frames writes: the fields of a clef_image or a clef_video. */
typedef struct {
    int *grid_t, *grid_h, *grid_w; /* temporal groups, patch rows, patch columns */
    size_t *n_patches, *patch_dim; /* rows (t*h*w) and their width (3*T*P*P) */
    float **pixel_values;          /* the rows, from the process bufpool */
} clef_patch_out;
/* The patchify both processors share: frames[0..nf) of one size, a multiple of P*M (the caller checks),
 * taken T at a time (the last frame repeated to fill the last group; one image fills both slots), each
 * normalised as clef_patchify says. -1 with OutOfMemory ("out of memory for N <noun> patches"). */
int clef_patchify_frames(const clef_rgb *frames, int nf, int P, int M, int T, const char *noun, clef_patch_out out,
                         clef_err *err);
/* The processor on decoded pixels (tile, smart_resize, resize, patchify): one image. */
int clef_image_prepare_rgb(const clef_rgb *src, const clef_image_opts *o, clef_image *out, clef_err *err);

#endif
