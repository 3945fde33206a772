/* src/video's limits on clips made here with FFmpeg's own libraries (one 16x16 MPEG-4 intra frame
 * encoded once, its packet muxed many times with chosen timestamps: cheap clips whose headers or
 * frames claim what a limit bounds):
 *   - a 1-hour MP4 (2 frames of 1800 s): refused from the header's duration;
 *   - a 1-hour Matroska written without a duration in its header (not seekable while muxed): refused at
 *     the first frame past the limit;
 *   - 100,000 frames in MP4 (the header's frame count) and in Matroska (no count: refused when the
 *     decoded-frame limit is reached, after max_decoded_frames frames, not 100,000);
 *   - bytes over max_bytes, frames over max_frame_pixels, video tokens over max_tokens;
 *   - entry forms: data: URL and bare base64 decode to the same clip; "" and garbage get the reference's
 *     TypeError text; paths only when allowed; the video's words and steps through the entry reader it
 *     shares with images (data: types, no stop at a second comma, byte limits, no word for a path);
 *   - the clip's smart_resize (the image's with the video's steps: small sides scaled up, t >= temporal);
 *   - the chroma filter of src/video/rgb24.c (libswscale's bilinear initFilter) on sizes whose taps were
 *     read off the model that matched PyAV 18.1's output (docs/spec-corrections.md "Video");
 *   - rgb24.c's full-chroma path (4:2:0 of odd width, 10-bit BT.709 full range and 8-bit odd height):
 *     the rgb24 sha256 PyAV 18.1 gave for the same planes.
 * Peak RSS of the process is checked (< 512 MiB; 1 GiB under ASan): no limit may let the whole clip be paid for first.
 * Time is printed, not asserted. */
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/opt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "base/sha256.h"
#include "image/image_internal.h"
#include "test.h"
#include "video/rgb24.h"
#include "video/video.h"

/* FFmpeg 5.1's write_packet signature (non-const buffer) */
static int write_cb(void *opaque, uint8_t *buf, int size) {
    return fwrite(buf, 1, (size_t)size, opaque) == (size_t)size ? size : -1;
}

/* Writes a clip of n copies of one intra frame, frame i at pts i * step (in 1/tb_den s), to path.
 * seekable = 0 muxes through a non-seekable pipe-like AVIO (Matroska then writes no duration). */
static int make_clip(const char *path, const char *format, long n, int64_t step, int tb_den, int seekable,
                     int w, int h) {
    const AVCodec *codec = avcodec_find_encoder(AV_CODEC_ID_MPEG4);
    if (!codec) return -1;
    AVCodecContext *enc = avcodec_alloc_context3(codec);
    enc->width = w;
    enc->height = h;
    enc->pix_fmt = AV_PIX_FMT_YUV420P;
    enc->time_base = (AVRational){1, tb_den};
    enc->gop_size = 1;
    enc->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    if (avcodec_open2(enc, codec, NULL) < 0) return -1;
    AVFrame *f = av_frame_alloc();
    f->width = w;
    f->height = h;
    f->format = AV_PIX_FMT_YUV420P;
    av_frame_get_buffer(f, 0);
    for (int p = 0; p < 3; p++)
        for (int y = 0; y < (p ? h / 2 : h); y++) memset(f->data[p] + y * f->linesize[p], 64 + 40 * p + y, p ? w / 2 : w);
    f->pts = 0;
    AVPacket *pkt = av_packet_alloc();
    avcodec_send_frame(enc, f);
    avcodec_send_frame(enc, NULL);
    if (avcodec_receive_packet(enc, pkt) < 0) return -1;

    AVFormatContext *oc = NULL;
    avformat_alloc_output_context2(&oc, NULL, format, path);
    AVStream *st = avformat_new_stream(oc, NULL);
    avcodec_parameters_from_context(st->codecpar, enc);
    st->time_base = (AVRational){1, tb_den};
    FILE *fp = NULL;
    if (seekable) {
        if (avio_open(&oc->pb, path, AVIO_FLAG_WRITE) < 0) return -1;
    } else {
        fp = fopen(path, "wb");
        oc->pb = avio_alloc_context(av_malloc(4096), 4096, 1, fp, NULL, write_cb, NULL);
        oc->pb->seekable = 0;
    }
    int rc = 0;
    if (avformat_write_header(oc, NULL) < 0) rc = -1;
    AVPacket *q = av_packet_alloc();
    for (long i = 0; rc == 0 && i < n; i++) {
        av_packet_ref(q, pkt);
        q->pts = q->dts = i * step;
        q->duration = step;
        q->stream_index = 0;
        av_packet_rescale_ts(q, (AVRational){1, tb_den}, st->time_base);
        if (av_write_frame(oc, q) < 0) rc = -1;
        av_packet_unref(q);
    }
    av_write_trailer(oc);
    if (seekable) avio_closep(&oc->pb);
    av_packet_free(&q);
    av_packet_free(&pkt);
    av_frame_free(&f);
    avcodec_free_context(&enc);
    if (fp) {
        av_freep(&oc->pb->buffer);
        avio_context_free(&oc->pb);
        fclose(fp);
    }
    avformat_free_context(oc);
    return rc;
}

static uint8_t *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)sz + 1);
    *n = fread(b, 1, (size_t)sz, f);
    fclose(f);
    return b;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* Prepares the clip at path with opts; returns 0/-1 and fills err. */
static int prep_file(const char *path, const clef_video_opts *o, clef_video *v, clef_err *err, const char *what) {
    size_t n = 0;
    uint8_t *b = slurp(path, &n);
    if (!b) return -2;
    double t0 = now();
    clef_err_clear(err);
    int rc = clef_video_prepare_bytes(b, n, o, v, err);
    printf("%-40s %8zu bytes  %.3f s  %s%s%s\n", what, n, now() - t0, rc ? err->type : "ok", rc ? ": " : "",
           rc ? err->msg : "");
    free(b);
    return rc;
}

/* The case is 100,000 frames; under ASan (5x slower to encode and decode) 20,000 frames test
 * the same two limits (over the header's count limit; over the decoded-frame limit of 18,000). */
#if defined(__SANITIZE_ADDRESS__)
#define MANY_FRAMES 20000
#define MANY_FRAMES_TEXT "20000 frames"
#else
#define MANY_FRAMES 100000
#define MANY_FRAMES_TEXT "100000 frames"
#endif

int main(void) {
    char dir[] = "/tmp/clef_test_video_XXXXXX";
    if (!mkdtemp(dir)) return 1;
    char p[256];
    clef_video_opts o;
    clef_video_opts_default(&o);
    clef_video v;
    clef_err e;

    /* a short good clip: 8 frames at 4 fps, 32x32 */
    snprintf(p, sizeof p, "%s/ok.mp4", dir);
    CHECK(make_clip(p, "mp4", 8, 1, 4, 1, 32, 32) == 0);
    CHECK(prep_file(p, &o, &v, &e, "8 frames, 4 fps") == 0);
    CHECK(v.grid_t == 2 && v.grid_h == 2 && v.grid_w == 2 && v.total_frames == 8 && v.n_sampled == 4);
    clef_video_free(&v);

    /* 1 hour, header: 2 frames of 1800 s */
    snprintf(p, sizeof p, "%s/hour.mp4", dir);
    CHECK(make_clip(p, "mp4", 2, 1800, 1, 1, 16, 16) == 0);
    CHECK(prep_file(p, &o, &v, &e, "1 hour (mp4 header)") == -1);
    CHECK_STR(e.type, CLEF_E_LIMIT);
    CHECK(strstr(e.msg, "video lasts") != NULL);

    /* 1 hour, no duration in the header (Matroska muxed without seeking): frames at 0, 60, ... s */
    snprintf(p, sizeof p, "%s/hour_stream.mkv", dir);
    CHECK(make_clip(p, "matroska", 61, 60, 1, 0, 16, 16) == 0);
    CHECK(prep_file(p, &o, &v, &e, "1 hour (mkv, no header duration)") == -1);
    CHECK_STR(e.type, CLEF_E_LIMIT);
    CHECK(strstr(e.msg, "video lasts") != NULL);

    /* 100,000 frames at 1000 fps (100 s: under the duration limit) */
    snprintf(p, sizeof p, "%s/frames.mp4", dir);
    CHECK(make_clip(p, "mp4", MANY_FRAMES, 1, 1000, 1, 16, 16) == 0);
    CHECK(prep_file(p, &o, &v, &e, "100,000 frames (mp4 header count)") == -1);
    CHECK_STR(e.type, CLEF_E_LIMIT);
    CHECK(strstr(e.msg, MANY_FRAMES_TEXT) != NULL);
    /* Matroska has no frame count in its header: 100,000 frames at 200 fps (500 s) */
    snprintf(p, sizeof p, "%s/frames.mkv", dir);
    CHECK(make_clip(p, "matroska", MANY_FRAMES, 1, 200, 1, 16, 16) == 0);
    CHECK(prep_file(p, &o, &v, &e, "100,000 frames (mkv, decoded count)") == -1);
    CHECK_STR(e.type, CLEF_E_LIMIT);
    CHECK(strstr(e.msg, "video has over 18000 frames") != NULL);

    /* bytes, pixels per frame, tokens */
    snprintf(p, sizeof p, "%s/ok.mp4", dir);
    clef_video_opts small = o;
    small.max_bytes = 100;
    CHECK(prep_file(p, &small, &v, &e, "over max_bytes") == -1);
    CHECK_STR(e.type, CLEF_E_LIMIT);
    small = o;
    small.max_frame_pixels = 32 * 32 - 1;
    CHECK(prep_file(p, &small, &v, &e, "over max_frame_pixels") == -1);
    CHECK_STR(e.type, CLEF_E_LIMIT);
    small = o;
    small.max_tokens = 1;
    CHECK(prep_file(p, &small, &v, &e, "over max_tokens") == -1);
    CHECK_STR(e.type, CLEF_E_LIMIT);

    /* entry forms */
    size_t n = 0;
    uint8_t *b = slurp(p, &n);
    size_t cap = 4 * ((n + 2) / 3) + 64;
    char *txt = malloc(cap + 32);
    static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    strcpy(txt, "data:video/mp4;base64,");
    size_t k = strlen(txt), start = k;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t x = (uint32_t)b[i] << 16 | (i + 1 < n ? (uint32_t)b[i + 1] << 8 : 0) | (i + 2 < n ? b[i + 2] : 0);
        txt[k++] = tbl[x >> 18 & 63];
        txt[k++] = tbl[x >> 12 & 63];
        txt[k++] = i + 1 < n ? tbl[x >> 6 & 63] : '=';
        txt[k++] = i + 2 < n ? tbl[x & 63] : '=';
    }
    txt[k] = 0;
    clef_err_clear(&e);
    CHECK(clef_video_prepare(txt, k, &o, &v, &e) == 0 && v.grid_t == 2);
    clef_video_free(&v);
    CHECK(clef_video_prepare(txt + start, k - start, &o, &v, &e) == 0 && v.grid_t == 2);
    clef_video_free(&v);
    CHECK(clef_video_prepare("", 0, &o, &v, &e) == -1);
    CHECK_STR(e.msg, CLEF_VIDEO_BAD_ENTRY_MSG);
    CHECK(clef_video_prepare("no such file.mp4", 16, &o, &v, &e) == -1);
    CHECK_STR(e.msg, CLEF_VIDEO_BAD_ENTRY_MSG);
    CHECK(clef_video_prepare(p, strlen(p), &o, &v, &e) == -1); /* a path, not allowed */
    clef_video_opts paths = o;
    paths.allow_paths = 1;
    CHECK(clef_video_prepare(p, strlen(p), &paths, &v, &e) == 0 && v.grid_t == 2);
    clef_video_free(&v);
    CHECK(clef_video_prepare("https://example.com/a.mp4", 25, &paths, &v, &e) == -1);
    CHECK_STR(e.type, CLEF_E_UNSUPPORTED_MEDIA);
    CHECK_STR(e.msg, "video URLs are not fetched; send a data: URL or base64");
    /* the video's words and steps through the reader shared with images (image/media_entry.c): */
    CHECK(clef_video_prepare("data:image/png;base64,QUJD", 26, &o, &v, &e) == -1);
    CHECK_STR(e.msg, "data: URL is not a video (expected data:video/...)");
    memmove(txt + 37, txt + start, k - start + 1); /* the same clip under the other type it takes */
    memcpy(txt, "data:application/octet-stream;base64,", 37);
    CHECK(clef_video_prepare(txt, 37 + k - start, &o, &v, &e) == 0 && v.grid_t == 2);
    clef_video_free(&v);
    strcat(txt, ",QUJD"); /* a second comma is no end for a video (an image's data: URL stops there) */
    CHECK(clef_video_prepare(txt, strlen(txt), &o, &v, &e) == -1);
    CHECK_STR(e.msg, CLEF_VIDEO_BAD_ENTRY_MSG);
    CHECK(clef_video_prepare("data:video/mp4;base64,", 22, &o, &v, &e) == -1); /* no bytes */
    CHECK_STR(e.msg, CLEF_VIDEO_BAD_ENTRY_MSG);
    clef_video_opts tiny = paths;
    tiny.max_bytes = 10;
    CHECK(clef_video_prepare(txt + 37, k - start, &tiny, &v, &e) == -1);
    CHECK_STR(e.msg, "video entry is over 10 bytes");
    CHECK(clef_video_prepare(p, strlen(p), &tiny, &v, &e) == -1);
    char want[128];
    snprintf(want, sizeof want, "video file is %zu bytes; the limit is 10", n);
    CHECK_STR(e.msg, want);
    CHECK(clef_video_prepare("/nonexistent/x.mp4", 18, &paths, &v, &e) == -1); /* no word for a path, unlike images */
    CHECK_STR(e.msg, CLEF_VIDEO_BAD_ENTRY_MSG);

    /* the clip's smart_resize: sides under factor scaled up first (an image's is not), t against temporal */
    int64_t oh = 0, ow = 0;
    CHECK(clef_video_smart_resize(2, 10, 20, 32, 2, 1024, 1 << 24, &oh, &ow, &e) == 0 && oh == 32 && ow == 64);
    CHECK(clef_smart_resize(10, 20, 32, 4096, 1 << 24, &oh, &ow, &e) == 0 && oh == 64 && ow == 96);
    CHECK(clef_video_smart_resize(1, 64, 64, 32, 2, 4096, 1 << 24, &oh, &ow, &e) == -1);
    CHECK_STR(e.msg, "t:1 must be larger than temporal_factor:2");
    CHECK(clef_video_smart_resize(2, 0, 64, 32, 2, 4096, 1 << 24, &oh, &ow, &e) == -1);
    CHECK_STR(e.msg, "video has zero size (64x0)");
    free(txt);
    free(b);

    /* chroma filters: 4:2:0 rows 24 -> 48 (exact 2x) and 24 -> 47 (odd height), centred siting */
    {
        int *pos = NULL, *coef = NULL, sz = 0;
        CHECK(clef_rgb24_filter(24, 48, 128, 128, 1 << 12, 1, &pos, &coef, &sz, &e) == 0 && sz == 2);
        CHECK(pos[0] == 0 && coef[0] == 4096 && coef[1] == 0);
        CHECK(pos[1] == 0 && coef[2] == 3072 && coef[3] == 1024);
        CHECK(pos[2] == 0 && coef[4] == 1024 && coef[5] == 3072);
        CHECK(pos[47] == 22 && coef[94] == 0 && coef[95] == 4096);
        free(pos);
        free(coef);
        CHECK(clef_rgb24_filter(24, 47, 128, 128, 1 << 12, 1, &pos, &coef, &sz, &e) == 0 && sz == 2);
        CHECK(pos[1] == 0 && coef[2] == 3007 && coef[3] == 1089);
        CHECK(pos[45] == 22 && coef[90] == 1090 && coef[91] == 3006);
        free(pos);
        free(coef);
        CHECK(clef_rgb24_filter(1, 1, 128, 128, 1 << 12, 1, &pos, &coef, &sz, &e) == 0 && sz == 1 && coef[0] == 4096);
        free(pos);
        free(coef);
        CHECK(clef_rgb24_filter(0, 4, 128, 128, 1 << 12, 1, &pos, &coef, &sz, &e) == -1 && !pos && !coef);
    }

    /* 4:2:0 of odd width on libswscale's scaled path (rgb24.c's full_chroma_420): frames drawn by formula,
     * their rgb24 sha256 as PyAV 18.1.0's to_rgb() (FFmpeg 8.1.2) gave it for the same planes and tags.
     * 9 rows (5 of chroma), so the vertical filter has 2 taps (libswscale keeps 1 for 3 chroma rows or
     * fewer, where Debian's 6.7 gives the same bytes); with 6.7 alone these two frames are 194 and 213
     * values off. */
    {
        struct {
            int w, h, fmt, bits, space, range, a[9];
            const char *sha;
        } t[] = {
            {11, 9, AV_PIX_FMT_YUV420P10LE, 10, AVCOL_SPC_BT709, AVCOL_RANGE_JPEG, {211, 97, 40, 313, 151, 100, 173, 359, 500},
             "eb862976e02f090fcd5630a83ccc6a8bfbe8cb780b1fe0a8de998f33a4efbfb2"},
            {13, 9, AV_PIX_FMT_YUV420P, 8, AVCOL_SPC_UNSPECIFIED, AVCOL_RANGE_MPEG, {53, 29, 16, 71, 37, 20, 19, 83, 90},
             "4c8f1f047872918c124ea3bfc69a71cb335be152105c559ee2fccf9dde1ea0d4"},
        };
        for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
            AVFrame *f = av_frame_alloc();
            CHECK(f != NULL);
            if (!f) break;
            f->width = t[i].w;
            f->height = t[i].h;
            f->format = t[i].fmt;
            f->colorspace = t[i].space;
            f->color_range = t[i].range;
            CHECK(av_frame_get_buffer(f, 32) == 0);
            const int m = 1 << t[i].bits;
            for (int pl = 0; pl < 3; pl++) {
                const int pw = pl ? (t[i].w + 1) / 2 : t[i].w, ph = pl ? (t[i].h + 1) / 2 : t[i].h;
                const int *a = t[i].a + 3 * pl;
                for (int y = 0; y < ph; y++)
                    for (int x = 0; x < pw; x++) {
                        int smp = (y * a[0] + x * a[1] + a[2]) % m;
                        uint8_t *row = f->data[pl] + (size_t)y * f->linesize[pl];
                        if (t[i].bits == 8) row[x] = (uint8_t)smp;
                        else ((uint16_t *)row)[x] = (uint16_t)smp;
                    }
            }
            clef_rgb24_conv conv;
            memset(&conv, 0, sizeof conv);
            clef_rgb rgb;
            char hex[65] = "";
            CHECK(clef_rgb24_convert(&conv, f, &rgb, &e) == 0);
            if (rgb.px) {
                clef_sha256_hex(rgb.px, (size_t)3 * rgb.w * rgb.h, hex);
                clef_rgb_free(&rgb);
            }
            CHECK_STR(hex, t[i].sha);
            clef_rgb24_conv_free(&conv);
            av_frame_free(&f);
        }
    }

    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("peak RSS %ld MiB\n", ru.ru_maxrss / 1024);
#if defined(__SANITIZE_ADDRESS__)
    const long bound_mib = 1024; /* ASan's quarantine and shadow memory add ~600 MiB here */
#else
    const long bound_mib = 512;
#endif
    CHECK(ru.ru_maxrss < bound_mib * 1024);

    const char *names[] = {"ok.mp4", "hour.mp4", "hour_stream.mkv", "frames.mp4", "frames.mkv"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        unlink(p);
    }
    rmdir(dir);
    return TEST_END();
}
