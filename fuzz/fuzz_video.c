// libFuzzer target over the video host side (src/video): the first input byte picks the form — 'd':
// the rest is a `videos` entry as text (data: URL or base64); anything else: the bytes are a clip —
// decoded with FFmpeg from memory, sampled, resized and patchified as the processor does, under small
// limits. Any input must be processed or refused cleanly (no crash, leak, UB, or a failure without a
// name), and a success must be self-consistent (grid, rows, timestamps, indices). Not part of the
// default build; tests/parity/test_fuzz_corpus.sh replays the fixture clips and fuzz/regress/video.
//
//   clang -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined -Iinclude -Isrc \
//     $(pkg-config --cflags libpng libavformat) fuzz/fuzz_video.c src/video/*.c src/image/*.c src/base/err.c \
//     src/base/buf.c src/base/bufpool.c src/base/sha256.c src/base/pyfmt.c \
//     $(pkg-config --libs libpng libjpeg libwebp libwebpdemux libgif libavformat libavcodec libswscale libavutil) \
//     -lm -pthread -o build/fuzz_video
//   mkdir -p build/fuzz-video && cp tests/fixtures/video/*.{mp4,mkv,webm} fuzz/regress/video/* build/fuzz-video/
//   build/fuzz_video -max_len=65536 -max_total_time=120 -rss_limit_mb=2048 build/fuzz-video
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "video/video.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(c)                                                                                                       \
    do {                                                                                                               \
        if (!(c)) abort();                                                                                             \
    } while (0)

static void check_video(const clef_video *v, const clef_video_opts *o) {
    CHECK(v->grid_t > 0 && v->grid_h > 0 && v->grid_w > 0);
    CHECK(v->grid_h % o->merge_size == 0 && v->grid_w % o->merge_size == 0);
    CHECK(v->n_patches == (size_t)v->grid_t * v->grid_h * v->grid_w);
    CHECK(v->patch_dim == (size_t)3 * o->temporal_patch_size * o->patch_size * o->patch_size);
    CHECK(v->n_patches / (size_t)(o->merge_size * o->merge_size) <= o->max_tokens);
    CHECK(v->n_sampled >= o->temporal_patch_size && v->n_sampled <= o->max_frames);
    CHECK(v->grid_t == (v->n_sampled + o->temporal_patch_size - 1) / o->temporal_patch_size);
    CHECK(v->total_frames >= v->n_sampled && v->total_frames <= o->max_decoded_frames);
    for (int i = 0; i < v->n_sampled; i++) {
        CHECK(v->indices[i] >= 0 && v->indices[i] < v->total_frames);
        if (i) CHECK(v->indices[i] >= v->indices[i - 1]);
    }
    for (int g = 0; g < v->grid_t; g++) {
        CHECK(v->timestamps[g] >= 0);
        char buf[64];
        CHECK(clef_video_timestamp_text(v->timestamps[g], buf, sizeof buf) > 0);
    }
    /* (x - 127.5) / 127.5 of uint8 values: within [-1, 1] */
    for (size_t i = 0; i < v->n_patches * v->patch_dim; i += 97) CHECK(v->pixel_values[i] >= -1.0f && v->pixel_values[i] <= 1.0f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    clef_video_opts o;
    clef_video_opts_default(&o);
    o.max_bytes = 1 << 20;
    o.max_seconds = 120;
    o.max_decoded_frames = 600;
    o.max_frame_pixels = 1 << 18; /* keeps each run fast and bounded */
    o.max_tokens = 4096;
    clef_video v;
    clef_err err;
    clef_err_clear(&err);
    int rc;
    if (size > 0 && data[0] == 'd') rc = clef_video_prepare((const char *)data + 1, size - 1, &o, &v, &err);
    else rc = clef_video_prepare_bytes(data, size, &o, &v, &err);
    if (rc == 0) {
        check_video(&v, &o);
        clef_video_free(&v);
    } else {
        CHECK(err.type != NULL && err.msg[0] != '\0');
    }
    return 0;
}
