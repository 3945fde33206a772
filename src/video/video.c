/* Video decoding (FFmpeg's libavformat/libavcodec/libswscale, from memory through a custom
 * AVIOContext) and the Qwen3-VL video processor (see video.h). */
#include "video/video.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef CLEF_NO_VIDEO
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/imgutils.h>
#include <libavutil/log.h>
#include <libswscale/swscale.h>
#endif

#include "base/bufpool.h"
#include "image/image_internal.h"
#include "image/media_entry.h"
#ifndef CLEF_NO_VIDEO
#include "video/rgb24.h"
#endif

void clef_video_opts_default(clef_video_opts *o) {
    memset(o, 0, sizeof *o);
    o->fps = 2.0;
    o->min_frames = 4;
    o->max_frames = 768;
    o->min_pixels = 4096;
    o->max_pixels = 25165824;
    o->patch_size = 16;
    o->temporal_patch_size = 2;
    o->merge_size = 2;
    o->max_bytes = CLEF_VIDEO_DEFAULT_MAX_BYTES;
    o->max_seconds = CLEF_VIDEO_DEFAULT_MAX_SECONDS;
    o->max_decoded_frames = CLEF_VIDEO_DEFAULT_MAX_DECODED_FRAMES;
    o->max_frame_pixels = CLEF_VIDEO_DEFAULT_MAX_FRAME_PIXELS;
    o->max_tokens = CLEF_VIDEO_DEFAULT_MAX_TOKENS;
}

void clef_video_free(clef_video *v) {
    if (!v) return;
    clef_bufpool_free(v->pixel_values);
    free(v->timestamps);
    free(v->indices);
    memset(v, 0, sizeof *v);
}

/* ---- the entry's bytes ---- */

/* The video processor's words for a refused entry (image/media_entry.h). */
static int video_refuse(clef_err *err, clef_media_fault fault, const clef_media_fault_at *at) {
    switch (fault) {
    case CLEF_MEDIA_URL:
        return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "video URLs are not fetched; send a data: URL or base64");
    case CLEF_MEDIA_FILE_OPEN:
        return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "cannot open video file: %s", strerror(at->errnum));
    case CLEF_MEDIA_FILE_STAT:
        return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "cannot stat video file");
    case CLEF_MEDIA_FILE_LIMIT:
        return clef_err_set(err, CLEF_E_LIMIT, "video file is %lld bytes; the limit is %zu", at->size, at->limit);
    case CLEF_MEDIA_FILE_OOM:
        return clef_err_set(err, CLEF_E_OOM, "out of memory reading a video file");
    case CLEF_MEDIA_FILE_SHORT:
        return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "short read on video file");
    case CLEF_MEDIA_DATA_TYPE:
        return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "data: URL is not a video (expected data:video/...)");
    case CLEF_MEDIA_BASE64_LIMIT:
        return clef_err_set(err, CLEF_E_LIMIT, "video entry is over %zu bytes", at->limit);
    case CLEF_MEDIA_EMPTY:
    case CLEF_MEDIA_BASE64:
    case CLEF_MEDIA_DECODES_EMPTY:
    case CLEF_MEDIA_PATH_MISSING: /* not reached: path_words is off */
    case CLEF_MEDIA_PATH_IRREGULAR:
    case CLEF_MEDIA_PATH_NOT_BASE64:
        /* neither base64 nor (when allowed) a file: what the reference says of a string that names no file */
        return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, CLEF_VIDEO_BAD_ENTRY_MSG);
    }
    return clef_err_set(err, CLEF_E_INTERNAL, "video entry: fault %d", (int)fault);
}

static const char *const video_data_types[] = {"data:video/", "data:application/octet-stream", NULL};

static const clef_media_kind video_kind = {
    .data_types = video_data_types,
    .path_words = 0,
    .data_stops_at_second_comma = 0,
    .refuse = video_refuse,
};

int clef_video_entry_bytes(const char *entry, size_t len, const clef_video_opts *o, uint8_t **bytes, size_t *n,
                           clef_err *err) {
    return clef_media_entry_bytes(entry, len, &video_kind, o->allow_paths, o->max_bytes, bytes, n, err);
}

/* ---- sampling, timestamps, smart_resize (the processor's Python, in doubles) ---- */

int clef_video_sample_indices(int64_t total, double video_fps, const clef_video_opts *o, int64_t *idx, int *n) {
    /* num_frames = int(total_num_frames / metadata.fps * fps) */
    double q = (double)total / video_fps * o->fps;
    int64_t num = q >= 9.0e18 ? INT64_MAX : (int64_t)q;
    if (num < o->min_frames) num = o->min_frames;
    if (num > o->max_frames) num = o->max_frames;
    if (num > total) num = total;
    /* np.linspace(0, total - 1, num).round(): i * step, the last exactly total - 1; np.round is half to even */
    if (num == 1) {
        idx[0] = 0;
    } else {
        double step = (double)(total - 1) / (double)(num - 1);
        for (int64_t i = 0; i < num; i++) idx[i] = (int64_t)nearbyint((double)i * step);
        idx[num - 1] = total - 1;
    }
    *n = (int)num;
    return 0;
}

int clef_video_timestamp_text(double seconds, char *buf, size_t cap) {
    int k = snprintf(buf, cap, "<%.1f seconds>", seconds);
    return k < 0 || (size_t)k >= cap ? -1 : k;
}

int clef_video_smart_resize(int64_t num_frames, int64_t h, int64_t w, int64_t factor, int64_t temporal,
                            int64_t min_pixels, int64_t max_pixels, int64_t *oh, int64_t *ow, clef_err *err) {
    const clef_resize_rule r = {.noun = "video", .frames = num_frames, .temporal = temporal, .upscale_small = 1,
                                .factor = factor, .min_pixels = min_pixels, .max_pixels = max_pixels};
    return clef_smart_resize_clip(&r, h, w, oh, ow, err);
}

#ifndef CLEF_NO_VIDEO
/* ---- FFmpeg from memory ---- */

typedef struct {
    const uint8_t *p;
    size_t n, pos;
} mem_io;

static int mem_read(void *opaque, uint8_t *buf, int size) {
    mem_io *m = opaque;
    if (m->pos >= m->n) return AVERROR_EOF;
    size_t k = m->n - m->pos;
    if (size < 0) return AVERROR(EINVAL);
    if (k > (size_t)size) k = (size_t)size;
    memcpy(buf, m->p + m->pos, k);
    m->pos += k;
    return (int)k;
}

static int64_t mem_seek(void *opaque, int64_t off, int whence) {
    mem_io *m = opaque;
    whence &= ~AVSEEK_FORCE;
    if (whence == AVSEEK_SIZE) return (int64_t)m->n;
    int64_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? (int64_t)m->pos : whence == SEEK_END ? (int64_t)m->n : -1;
    if (base < 0) return AVERROR(EINVAL);
    if (off > (int64_t)m->n || off < -(int64_t)m->n) return AVERROR(EINVAL);
    int64_t np = base + off;
    if (np < 0 || np > (int64_t)m->n) return AVERROR(EINVAL);
    m->pos = (size_t)np;
    return np;
}

typedef struct {
    mem_io io;
    AVIOContext *avio;
    AVFormatContext *fmt;
    AVCodecContext *dec;
    AVPacket *pkt;
    AVFrame *frame;
    int stream;
} demux;

static void demux_close(demux *d) {
    if (d->dec) avcodec_free_context(&d->dec);
    if (d->fmt) avformat_close_input(&d->fmt);
    if (d->avio) {
        av_freep(&d->avio->buffer);
        avio_context_free(&d->avio);
    }
    av_packet_free(&d->pkt);
    av_frame_free(&d->frame);
}

static int ff_err(clef_err *err, const char *what, int e) {
    char msg[AV_ERROR_MAX_STRING_SIZE] = {0};
    av_strerror(e, msg, sizeof msg);
    return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "video: %s: %s", what, msg);
}

/* Opens the container and the first video stream's decoder (PyAV: container.streams.video[0]). */
static int demux_open(demux *d, const uint8_t *data, size_t n, const clef_video_opts *o, double *fps,
                      clef_err *err) {
    memset(d, 0, sizeof *d);
    av_log_set_level(AV_LOG_QUIET);
    d->io.p = data;
    d->io.n = n;
    uint8_t *buf = av_malloc(1 << 16);
    if (!buf) return clef_err_set(err, CLEF_E_OOM, "out of memory");
    d->avio = avio_alloc_context(buf, 1 << 16, 0, &d->io, mem_read, NULL, mem_seek);
    if (!d->avio) {
        av_free(buf);
        return clef_err_set(err, CLEF_E_OOM, "out of memory");
    }
    d->fmt = avformat_alloc_context();
    if (!d->fmt) return clef_err_set(err, CLEF_E_OOM, "out of memory");
    d->fmt->pb = d->avio;
    /* PyAV opens every input with GENPTS: without it an AVI with B-frames (MPEG-4 Part 2) leaves the
     * packets of I/P frames without pts, and their frames with none */
    d->fmt->flags |= AVFMT_FLAG_CUSTOM_IO | AVFMT_FLAG_GENPTS;
    int e = avformat_open_input(&d->fmt, NULL, NULL, NULL);
    if (e < 0) {
        d->fmt = NULL; /* freed by avformat_open_input on failure */
        /* torchvision's read_video swallows the FFmpegError and returns no video_fps: the processor
         * then raises KeyError('video_fps') (measured: tests/fixtures/video "bad_bytes") */
        return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "'video_fps'");
    }
    e = avformat_find_stream_info(d->fmt, NULL);
    if (e < 0) return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "'video_fps'");
    d->stream = -1;
    for (unsigned i = 0; i < d->fmt->nb_streams; i++)
        if (d->fmt->streams[i]->codecpar->codec_type == AVMEDIA_TYPE_VIDEO) {
            d->stream = (int)i;
            break;
        }
    if (d->stream < 0) return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "'video_fps'");
    AVStream *st = d->fmt->streams[d->stream];
    for (unsigned i = 0; i < d->fmt->nb_streams; i++)
        if ((int)i != d->stream) d->fmt->streams[i]->discard = AVDISCARD_ALL;
    AVRational r = st->avg_frame_rate;
    if (r.num <= 0 || r.den <= 0) {
        /* The reference's FFmpeg (8.1) gives a raw elementary stream (.m4v) its demuxer's frame rate,
         * where Debian's leaves none; such a stream cannot seek, so torchvision keeps no frame and the
         * processor raises on t = 0 (measured: tests/fixtures/video mpeg4_raw.m4v) */
        if (av_seek_frame(d->fmt, d->stream, 0, AVSEEK_FLAG_BACKWARD) < 0)
            return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "t:0 must be larger than temporal_factor:%d",
                                o->temporal_patch_size);
        return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "'video_fps'");
    }
    *fps = (double)r.num / (double)r.den;
    /* ours: limits from the headers, before decoding */
    int64_t w = st->codecpar->width, h = st->codecpar->height;
    if (w > 0 && h > 0 && w * h > o->max_frame_pixels)
        return clef_err_set(err, CLEF_E_LIMIT, "video frames are %lldx%lld; the limit is %lld pixels per frame",
                            (long long)w, (long long)h, (long long)o->max_frame_pixels);
    double secs = -1;
    if (st->duration > 0 && st->time_base.den > 0)
        secs = (double)st->duration * st->time_base.num / st->time_base.den;
    else if (d->fmt->duration > 0)
        secs = (double)d->fmt->duration / AV_TIME_BASE;
    if (secs > o->max_seconds)
        return clef_err_set(err, CLEF_E_LIMIT, "video lasts %.1f s; the limit is %.0f s", secs, o->max_seconds);
    if (st->nb_frames > o->max_decoded_frames)
        return clef_err_set(err, CLEF_E_LIMIT, "video has %lld frames; the limit is %lld", (long long)st->nb_frames,
                            (long long)o->max_decoded_frames);
    const AVCodec *codec = avcodec_find_decoder(st->codecpar->codec_id);
    if (!codec) return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "video: no decoder for this codec");
    d->dec = avcodec_alloc_context3(codec);
    if (!d->dec) return clef_err_set(err, CLEF_E_OOM, "out of memory");
    e = avcodec_parameters_to_context(d->dec, st->codecpar);
    if (e < 0) return ff_err(err, "decoder parameters", e);
    d->dec->pkt_timebase = st->time_base;
    d->dec->thread_count = 1;
    e = avcodec_open2(d->dec, codec, NULL);
    if (e < 0) return ff_err(err, "opening the decoder", e);
    d->pkt = av_packet_alloc();
    d->frame = av_frame_alloc();
    if (!d->pkt || !d->frame) return clef_err_set(err, CLEF_E_OOM, "out of memory");
    return 0;
}

/* Decodes every frame of the stream (as PyAV's container.decode(video=0) with torchvision's loop:
 * a decoding or demuxing error ends the clip silently), calling fn on each. fn returns 0 to go on,
 * 1 to stop, -1 on error. torchvision's _read_from_stream first seeks the stream to 0 (PyAV's
 * container.seek(0, backward=True, any_frame=False, stream=s): av_seek_frame with
 * AVSEEK_FLAG_BACKWARD) and keeps no frame when that fails (a raw elementary stream, .h264 or .m4v):
 * then fn is never called. */
typedef int (*frame_fn)(void *ctx, AVFrame *f, clef_err *err);

static int decode_all(demux *d, frame_fn fn, void *ctx, clef_err *err) {
    if (av_seek_frame(d->fmt, d->stream, 0, AVSEEK_FLAG_BACKWARD) < 0) return 0;
    avcodec_flush_buffers(d->dec);
    int flushing = 0;
    for (;;) {
        if (!flushing) {
            int e = av_read_frame(d->fmt, d->pkt);
            if (e < 0) {
                flushing = 1;
                if (avcodec_send_packet(d->dec, NULL) < 0) return 0;
            } else {
                if (d->pkt->stream_index != d->stream) {
                    av_packet_unref(d->pkt);
                    continue;
                }
                e = avcodec_send_packet(d->dec, d->pkt);
                av_packet_unref(d->pkt);
                if (e < 0 && e != AVERROR(EAGAIN)) return 0; /* PyAV raises; torchvision stops */
            }
        }
        for (;;) {
            int e = avcodec_receive_frame(d->dec, d->frame);
            if (e == AVERROR(EAGAIN)) break;
            if (e == AVERROR_EOF) return 0;
            if (e < 0) return 0;
            int r = fn(ctx, d->frame, err);
            av_frame_unref(d->frame);
            if (r) return r < 0 ? -1 : 0;
        }
    }
}

/* ---- pass 1: the pts of every frame ---- */

typedef struct {
    int64_t *pts;
    size_t n, cap;
    int has_nopts;
    int w, h, size_changed;
    const clef_video_opts *o;
    double tb; /* seconds per pts unit */
} pass1;

static int p1_frame(void *ctx, AVFrame *f, clef_err *err) {
    pass1 *p = ctx;
    if (p->n == 0) {
        p->w = f->width;
        p->h = f->height;
    } else if (f->width != p->w || f->height != p->h) {
        p->size_changed = 1;
    }
    if ((int64_t)f->width * f->height > p->o->max_frame_pixels)
        return clef_err_set(err, CLEF_E_LIMIT, "video frames are %dx%d; the limit is %lld pixels per frame", f->width,
                            f->height, (long long)p->o->max_frame_pixels);
    if ((int64_t)p->n >= p->o->max_decoded_frames)
        return clef_err_set(err, CLEF_E_LIMIT, "video has over %lld frames; the limit is %lld",
                            (long long)p->o->max_decoded_frames, (long long)p->o->max_decoded_frames);
    if (f->pts == AV_NOPTS_VALUE) {
        p->has_nopts = 1;
        return 0;
    }
    if (p->tb > 0 && (double)f->pts * p->tb > p->o->max_seconds)
        return clef_err_set(err, CLEF_E_LIMIT, "video lasts over %.0f s; the limit is %.0f s", p->o->max_seconds,
                            p->o->max_seconds);
    if (p->n == p->cap) {
        size_t nc = p->cap ? p->cap * 2 : 256;
        int64_t *np = realloc(p->pts, nc * sizeof *np);
        if (!np) return clef_err_set(err, CLEF_E_OOM, "out of memory");
        p->pts = np;
        p->cap = nc;
    }
    p->pts[p->n++] = f->pts;
    return 0;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* ---- pass 2: convert the sampled frames ---- */

typedef struct {
    const int64_t *want; /* sorted pts wanted (the sampled frames' pts, may repeat) */
    int n_want;
    clef_rgb *frames; /* [n_want]: index k holds the frame of pts want[k] (duplicates filled at the end) */
    int ow, oh;       /* resize target */
    clef_rgb24_conv conv;
    clef_rgb tmp;
    const clef_video_opts *o;
} pass2;

/* PyAV 18's frame.to_rgb() (VideoFrame.reformat(format="rgb24")) as the reference calls it: rgb24.c. */
static int to_rgb24(pass2 *p, AVFrame *f, clef_rgb *out, clef_err *err) { return clef_rgb24_convert(&p->conv, f, out, err); }

static int p2_frame(void *ctx, AVFrame *f, clef_err *err) {
    pass2 *p = ctx;
    if (f->pts == AV_NOPTS_VALUE) return 0;
    /* binary search for the first k with want[k] == pts */
    int lo = 0, hi = p->n_want;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (p->want[mid] < f->pts) lo = mid + 1;
        else hi = mid;
    }
    if (lo >= p->n_want || p->want[lo] != f->pts) return 0;
    /* a later frame with the same pts replaces the earlier (torchvision's dict) */
    clef_rgb_free(&p->tmp);
    if (to_rgb24(p, f, &p->tmp, err)) return -1;
    clef_rgb_free(&p->frames[lo]);
    if (p->tmp.w == p->ow && p->tmp.h == p->oh) {
        p->frames[lo] = p->tmp;
        memset(&p->tmp, 0, sizeof p->tmp);
        return 0;
    }
    return clef_resize_torchvision(&p->tmp, p->ow, p->oh, &p->frames[lo], err) ? -1 : 0;
}

static int patchify_video(const clef_rgb *frames, int nf, const clef_video_opts *o, clef_video *out, clef_err *err) {
    const int P = o->patch_size, M = o->merge_size, T = o->temporal_patch_size;
    const int w = frames[0].w, h = frames[0].h;
    if (w % (P * M) || h % (P * M)) return clef_err_set(err, CLEF_E_INTERNAL, "video patchify: %dx%d", w, h);
    const clef_patch_out to = {&out->grid_t, &out->grid_h, &out->grid_w, &out->n_patches, &out->patch_dim,
                               &out->pixel_values};
    return clef_patchify_frames(frames, nf, P, M, T, "video", to, err);
}

/* After pass 2: a sampled frame that repeats the one before it (the same pts) was decoded once and
 * is copied; any other frame missing is an error. */
static int fill_repeats(pass2 *p2, const int64_t *want, int nf, const int64_t *indices, clef_err *err) {
    for (int k = 0; k < nf; k++) {
        if (!p2->frames[k].px) {
            if (k > 0 && want[k] == want[k - 1] && p2->frames[k - 1].px) {
                if (clef_rgb_alloc(&p2->frames[k], p2->frames[k - 1].w, p2->frames[k - 1].h, err)) return -1;
                memcpy(p2->frames[k].px, p2->frames[k - 1].px, (size_t)p2->frames[k].w * p2->frames[k].h * 3);
            } else {
                clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "video: frame %lld did not decode the second time",
                             (long long)indices[k]);
                return -1;
            }
        }
    }
    return 0;
}

int clef_video_prepare_bytes(const uint8_t *data, size_t n, const clef_video_opts *o, clef_video *out,
                             clef_err *err) {
    memset(out, 0, sizeof *out);
    if (n > o->max_bytes)
        return clef_err_set(err, CLEF_E_LIMIT, "video is %zu bytes; the limit is %zu", n, o->max_bytes);
    if (n > INT_MAX) return clef_err_set(err, CLEF_E_LIMIT, "video is %zu bytes", n);
    if (o->min_frames < 1 || o->max_frames < o->min_frames || o->max_frames > 100000 || o->fps <= 0 ||
        o->temporal_patch_size <= 0 || o->patch_size <= 0 || o->merge_size <= 0)
        return clef_err_set(err, CLEF_E_INTERNAL, "video options out of range");
    demux d;
    pass1 p1 = {0};
    pass2 p2 = {0};
    int64_t *want = NULL;
    int rc = -1;
    double fps = 0;
    if (demux_open(&d, data, n, o, &fps, err)) goto done;
    AVStream *st = d.fmt->streams[d.stream];
    p1.o = o;
    p1.tb = st->time_base.den > 0 ? (double)st->time_base.num / st->time_base.den : 0;
    if (decode_all(&d, p1_frame, &p1, err)) goto done;
    if (p1.has_nopts && p1.n) {
        clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA,
                     "'<' not supported between instances of 'NoneType' and 'int'");
        goto done;
    }
    if (p1.has_nopts) {
        clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "'<=' not supported between instances of 'int' and 'NoneType'");
        goto done;
    }
    /* sorted unique pts >= 0: torchvision's frames dict, filtered by start_offset <= pts */
    if (p1.n) qsort(p1.pts, p1.n, sizeof *p1.pts, cmp_i64); /* qsort(NULL, 0) is UB */
    size_t u = 0;
    for (size_t i = 0; i < p1.n; i++)
        if (p1.pts[i] >= 0 && (u == 0 || p1.pts[u - 1] != p1.pts[i])) p1.pts[u++] = p1.pts[i];
    int64_t total = (int64_t)u;
    out->fps = fps;
    out->total_frames = total;
    if (total == 0) {
        /* sample_frames gives no indices; the resize's smart_resize refuses t = 0 */
        clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "t:0 must be larger than temporal_factor:%d",
                     o->temporal_patch_size);
        goto done;
    }
    if (p1.size_changed) {
        clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "all input arrays must have the same shape");
        goto done;
    }
    out->indices = malloc((size_t)o->max_frames * sizeof *out->indices);
    if (!out->indices) {
        clef_err_set(err, CLEF_E_OOM, "out of memory");
        goto done;
    }
    int nf = 0;
    clef_video_sample_indices(total, fps, o, out->indices, &nf);
    out->n_sampled = nf;
    out->src_w = p1.w;
    out->src_h = p1.h;
    const int64_t factor = (int64_t)o->patch_size * o->merge_size;
    int64_t oh, ow;
    if (clef_video_smart_resize(nf, p1.h, p1.w, factor, o->temporal_patch_size, o->min_pixels, o->max_pixels, &oh,
                                &ow, err))
        goto done;
    int64_t gt = (nf + o->temporal_patch_size - 1) / o->temporal_patch_size;
    int64_t tokens = gt * (oh / factor) * (ow / factor);
    if (tokens <= 0 || (size_t)tokens > o->max_tokens) {
        clef_err_set(err, CLEF_E_LIMIT, "video needs %lld tokens (%lld frame groups of %lldx%lld); the limit is %zu",
                     (long long)tokens, (long long)gt, (long long)(ow / factor), (long long)(oh / factor),
                     o->max_tokens);
        goto done;
    }
    /* timestamps: the indices padded to the temporal patch with the last one, idx / fps, then the mean
     * of each group's first and last (processing_qwen3_vl._calculate_timestamps) */
    out->timestamps = malloc((size_t)gt * sizeof *out->timestamps);
    want = malloc((size_t)nf * sizeof *want);
    p2.frames = calloc((size_t)nf, sizeof *p2.frames);
    if (!out->timestamps || !want || !p2.frames) {
        clef_err_set(err, CLEF_E_OOM, "out of memory");
        goto done;
    }
    for (int64_t g = 0; g < gt; g++) {
        int64_t a = g * o->temporal_patch_size, b = a + o->temporal_patch_size - 1;
        if (b >= nf) b = nf - 1;
        out->timestamps[g] = ((double)out->indices[a] / fps + (double)out->indices[b] / fps) / 2;
    }
    for (int k = 0; k < nf; k++) want[k] = p1.pts[out->indices[k]];
    /* pass 2: decode again from the start, convert and resize the sampled frames */
    demux_close(&d);
    if (demux_open(&d, data, n, o, &fps, err)) goto done;
    p2.want = want;
    p2.n_want = nf;
    p2.ow = (int)ow;
    p2.oh = (int)oh;
    p2.o = o;
    if (decode_all(&d, p2_frame, &p2, err)) goto done;
    if (fill_repeats(&p2, want, nf, out->indices, err)) goto done;
    if (patchify_video(p2.frames, nf, o, out, err)) goto done;
    rc = 0;
done:
    demux_close(&d);
    free(p1.pts);
    free(want);
    if (p2.frames) {
        for (int k = 0; k < p2.n_want; k++) clef_rgb_free(&p2.frames[k]);
        free(p2.frames);
    }
    clef_rgb_free(&p2.tmp);
    clef_rgb24_conv_free(&p2.conv);
    if (rc) clef_video_free(out);
    return rc;
}
#else /* CLEF_NO_VIDEO: a build without FFmpeg (`make VIDEO=0`, docs/building.md) */

int clef_video_prepare_bytes(const uint8_t *data, size_t n, const clef_video_opts *o, clef_video *out,
                             clef_err *err) {
    (void)data;
    (void)n;
    (void)o;
    memset(out, 0, sizeof *out);
    return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "this build of clef has no video decoding (built with VIDEO=0)");
}
#endif

int clef_video_prepare(const char *entry, size_t len, const clef_video_opts *o, clef_video *out, clef_err *err) {
    memset(out, 0, sizeof *out);
    uint8_t *b = NULL;
    size_t n = 0;
    if (clef_video_entry_bytes(entry, len, o, &b, &n, err)) return -1;
    int rc = clef_video_prepare_bytes(b, n, o, out, err);
    free(b);
    return rc;
}
