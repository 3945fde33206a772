/* Video input: decode a request's `videos` entry with FFmpeg's libraries and run the Qwen3-VL video
 * processor on it exactly as the pinned reference does (transformers 5.17.0 Qwen3VLVideoProcessor,
 * frames decoded by torchvision 0.24.0's io.read_video over PyAV 18.1.0; docs/spec-corrections.md
 * "Video"):
 *
 *  1. every frame of the first video stream is decoded (frames keyed by pts, sorted, pts < 0 dropped,
 *     a later frame with the same pts replacing the earlier: torchvision's _read_from_stream);
 *  2. fps = the stream's average frame rate; num_frames = int(total / fps * 2) clamped to
 *     [min_frames 4, max_frames 768] and to total; indices = round(linspace(0, total - 1, num_frames))
 *     (half to even);
 *  3. the sampled frames are converted to RGB24 (PyAV's frame.to_rgb(): see rgb24.c for where we
 *     compute it and why), resized together by the clip-level smart_resize (budget over
 *     frames x pixels) with torchvision's uint8 antialiased bicubic (src/image's resampler);
 *  4. an odd frame count is padded with the last frame; (x - 127.5) / 127.5; patches in
 *     (t, block row, block col, row, col) order, columns c*2*P*P + dt*P*P + y*P + x.
 *
 * Our limits (bytes, duration, decoded frames, pixels per frame, tokens) are checked before the work
 * they bound is paid for. */
#ifndef CLEF_VIDEO_VIDEO_H
#define CLEF_VIDEO_VIDEO_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#ifndef CLEF_E_UNSUPPORTED_MEDIA
#define CLEF_E_UNSUPPORTED_MEDIA "UnsupportedMedia"
#endif

#define CLEF_VIDEO_DEFAULT_MAX_BYTES ((size_t)64 << 20)      /* encoded bytes per video */
#define CLEF_VIDEO_DEFAULT_MAX_SECONDS 600.0                 /* container or stream duration */
#define CLEF_VIDEO_DEFAULT_MAX_DECODED_FRAMES 18000          /* frames decoded per video */
#define CLEF_VIDEO_DEFAULT_MAX_FRAME_PIXELS ((int64_t)3840 * 2160)
#define CLEF_VIDEO_DEFAULT_MAX_TOKENS ((size_t)16384)        /* video tokens per video */

typedef struct clef_video_opts {
    double fps;                      /* frames sampled per second: 2 */
    int min_frames, max_frames;      /* 4, 768 */
    int64_t min_pixels, max_pixels;  /* size.shortest_edge 4096, size.longest_edge 25165824 (over the clip) */
    int patch_size, temporal_patch_size, merge_size; /* 16, 2, 2 */
    int allow_paths;                 /* accept local file paths (CLI only) */
    size_t max_bytes;
    double max_seconds;
    int64_t max_decoded_frames;
    int64_t max_frame_pixels;
    size_t max_tokens;
} clef_video_opts;

void clef_video_opts_default(clef_video_opts *o);

typedef struct clef_video {
    int grid_t, grid_h, grid_w; /* video_grid_thw */
    size_t n_patches, patch_dim; /* grid_t*grid_h*grid_w, 3*2*16*16 */
    float *pixel_values;         /* [n_patches, patch_dim]: pixel_values_videos rows of this video
                                    (base/bufpool.h: freed by clef_video_free) */
    double *timestamps;          /* [grid_t] seconds of each frame group (mean of its two frames) */
    double fps;                  /* the stream's average frame rate (metadata.fps) */
    int64_t total_frames;        /* frames decoded (metadata.total_num_frames) */
    int n_sampled;               /* frames sampled (before padding) */
    int64_t *indices;            /* [n_sampled] */
    int src_w, src_h;            /* decoded frame size */
} clef_video;

/* What the reference raises (a TypeError from transformers' load_video) for a string that is neither an
 * http(s) URL nor an existing local path; ours for an entry that is not a data: URL, base64 or (when
 * allowed) an existing file: the same text (docs/spec-corrections.md "Video"). */
#define CLEF_VIDEO_BAD_ENTRY_MSG "Incorrect format used for video. Should be an url linking to an video or a local path."

/* Fetches an entry's bytes: a data: URL (data:video/...;base64,...), bare base64, or (opts->allow_paths)
 * a local path. "" and text that is none of these: UnsupportedMedia CLEF_VIDEO_BAD_ENTRY_MSG. */
int clef_video_entry_bytes(const char *entry, size_t len, const clef_video_opts *o, uint8_t **bytes, size_t *n,
                           clef_err *err);
/* Decodes and preprocesses encoded bytes. */
int clef_video_prepare_bytes(const uint8_t *data, size_t n, const clef_video_opts *o, clef_video *out,
                             clef_err *err);
/* clef_video_entry_bytes then clef_video_prepare_bytes. */
int clef_video_prepare(const char *entry, size_t len, const clef_video_opts *o, clef_video *out, clef_err *err);
void clef_video_free(clef_video *v);

/* The frame group's timestamp text as the processor writes it: "<%.1f seconds>" (Python's format, the
 * double rounded half to even on its exact value, as glibc's printf does). */
int clef_video_timestamp_text(double seconds, char *buf, size_t cap);

/* The reference's sampling (Qwen3VLVideoProcessor.sample_frames): fills idx[0..*n) (idx must hold
 * max_frames entries). total > 0, fps > 0. */
int clef_video_sample_indices(int64_t total, double video_fps, const clef_video_opts *o, int64_t *idx, int *n);
/* The clip-level smart_resize of video_processing_qwen3_vl.py. */
int clef_video_smart_resize(int64_t num_frames, int64_t h, int64_t w, int64_t factor, int64_t temporal,
                            int64_t min_pixels, int64_t max_pixels, int64_t *oh, int64_t *ow, clef_err *err);

#endif
