/* The size check every decoder makes from the image's header, before a pixel is allocated: zero size,
 * max_source_pixels, the probe's answer and the token budget (clef_image_opts). Below the decoders. */
#ifndef CLEF_IMAGE_SIZE_CHECK_H
#define CLEF_IMAGE_SIZE_CHECK_H

#include <stdint.h>

#include "base/err.h"
#include "image/image.h"

/* -1 with err set when the size is refused (zero, over max_source_pixels, over max_tokens); 1 when
 * o->probe is set (the size is stored there and the decoder stops: the header is all it needs); else 0. */
int clef_image_check_size(int64_t w, int64_t h, const clef_image_opts *o, clef_err *err);

#endif
