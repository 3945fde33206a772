// libFuzzer target over the image host side: an `images` entry (first input byte picks the form:
// raw encoded bytes, or the rest taken as a data URL / base64 text), decoded in both flavours and run
// through the processor with small limits. Not part of the default build.
//
//   clang -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined -Iinclude -Isrc \
//     $(pkg-config --cflags libpng) fuzz/fuzz_image.c src/image/*.c src/base/err.c src/base/buf.c \
//     src/base/bufpool.c src/base/sha256.c src/base/pyfmt.c $(pkg-config --libs libpng libjpeg libwebp libwebpdemux libgif) \
//     -lm -pthread \
//     -o build/fuzz_image
//   mkdir -p build/fuzz-corpus && cp tests/fixtures/images/*.{png,jpg,webp,gif} build/fuzz-corpus/
//   build/fuzz_image -max_len=65536 -max_total_time=120 -rss_limit_mb=2048 build/fuzz-corpus
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "image/image_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    clef_image_opts o;
    clef_image_opts_default(&o);
    o.max_bytes = 1 << 20;
    o.max_source_pixels = 1 << 20; /* 1 MP: keeps each run fast and bounded */
    o.max_pixels = 1 << 18;        /* smaller processor output */
    o.min_pixels = 1 << 12;
    clef_err err;
    if (size > 0 && data[0] == 'd') {
        /* text entry: data URL or base64 */
        clef_image im;
        clef_err_clear(&err);
        if (clef_image_prepare((const char *)data + 1, size - 1, &o, &im, &err) == 0) clef_image_free(&im);
        else if (!err.type) abort(); /* every failure must say what */
        return 0;
    }
    for (int tile = 0; tile <= 256; tile += 256) {
        o.tile = tile;
        clef_rgb rgb;
        clef_err_clear(&err);
        if (clef_image_decode(data, size, &o, &rgb, &err) != 0) {
            if (!err.type) abort();
            continue;
        }
        if ((int64_t)rgb.w * rgb.h > o.max_source_pixels) abort(); /* limit must hold */
        clef_image im;
        if (clef_image_prepare_rgb(&rgb, &o, &im, &err) == 0) {
            if (im.n_patches != (size_t)im.grid_h * im.grid_w) abort();
            clef_image_free(&im);
        } else if (!err.type) {
            abort();
        }
        clef_rgb_free(&rgb);
    }
    return 0;
}
