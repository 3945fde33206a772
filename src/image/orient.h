/* EXIF orientation, as Pillow reads and applies it (PIL.ImageOps.exif_transpose): the decoders read the
 * tag from their metadata, decode.c applies it on the fixed-tile arm. Below the decoders. */
#ifndef CLEF_IMAGE_ORIENT_H
#define CLEF_IMAGE_ORIENT_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "image/rgb.h"

/* The Orientation tag of an EXIF block ("Exif\0\0" optional, then TIFF "II"/"MM"): 1..8, 9 when the tag is
 * present with another value, 0 when absent (then Pillow looks at XMP). */
int clef_exif_orientation(const uint8_t *tiff, size_t n);
/* Pillow's XMP fallback: the digit after tiff:Orientation=" or tiff:Orientation>, or 0. */
int clef_xmp_orientation(const uint8_t *xmp, size_t n);
/* Applies an EXIF orientation (2..8) in place (as PIL.ImageOps.exif_transpose). */
int clef_rgb_orient(clef_rgb *im, int orientation, clef_err *err);

#endif
