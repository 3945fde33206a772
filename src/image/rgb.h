/* Decoded pixels: the clef_rgb every decoder writes and every later step reads, and its buffers. The
 * bottom of src/image/: it calls nothing else of the folder. */
#ifndef CLEF_IMAGE_RGB_H
#define CLEF_IMAGE_RGB_H

#include <stdint.h>

#include "base/err.h"

/* A decoded image: RGB, interleaved (HWC), rows packed. 8-bit in px, except a 16-bit PNG at the native
 * grid, which torchvision.io decodes to uint16 and the processor keeps so: 16-bit samples in px16.
 * Exactly one of the two is set. */
typedef struct clef_rgb {
    int w, h;
    uint8_t *px;    /* w*h*3 bytes */
    uint16_t *px16; /* w*h*3 samples (16-bit images only) */
} clef_rgb;

void clef_rgb_free(clef_rgb *im);
/* Allocates w*h*3 bytes (zeroed); -1 with OutOfMemory on failure. */
int clef_rgb_alloc(clef_rgb *im, int w, int h, clef_err *err);
/* The same with w*h*3 16-bit samples. */
int clef_rgb_alloc16(clef_rgb *im, int w, int h, clef_err *err);
/* Frees frames[0..n) and the array. */
void clef_rgb_free_all(clef_rgb *frames, int n);

#endif
