/* The four format decoders (decode_png.c, decode_jpeg.c, decode_webp.c, decode_gif.c), called by
 * decode.c only (clef_image_decode_all picks one by the sniffed format). Each checks the header's size
 * (size_check.h) before allocating and reports the EXIF orientation it finds (orient.h). */
#ifndef CLEF_IMAGE_DECODERS_H
#define CLEF_IMAGE_DECODERS_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "image/image.h"
#include "image/rgb.h"

/* tv: torchvision.io semantics (native grid), else Pillow's. *exif_orientation: the tag found (0 none),
 * which decode.c applies on Pillow's arm only. */
int clef_decode_png(const uint8_t *p, size_t n, const clef_image_opts *o, int tv, clef_rgb *out,
                    int *exif_orientation, clef_err *err);
int clef_decode_jpeg(const uint8_t *p, size_t n, const clef_image_opts *o, int tv, clef_rgb *out,
                     int *exif_orientation, clef_err *err);
int clef_decode_webp(const uint8_t *p, size_t n, const clef_image_opts *o, int tv, clef_rgb *out,
                     int *exif_orientation, clef_err *err);
/* GIF: Pillow's first frame (tv == 0), or torchvision's frames (tv == 1: *n_frames >= 1). */
int clef_decode_gif(const uint8_t *p, size_t n, const clef_image_opts *o, int tv, clef_rgb **frames, int *n_frames,
                    clef_err *err);

#endif
