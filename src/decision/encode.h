/* encode_record: the token sequence, spans and media of one request, as the author's
 * joint_schema_model.encode_record builds them (spec: ../shared/spec/contract.md §4).
 *
 *   input_ids = PREFIX [+ MEDIA] + STATE_kept + SCHEMA + SUFFIX
 *
 * Every piece is tokenized on its own (clef_tokenize, add_special_tokens=False) and the ids are
 * concatenated. The work runs in the reference's order, so the first failure is the one it reports:
 * schema (question by question: header, instructions, "ALLOWED OPTIONS", then the options, where a
 * deferred BadCriteria is raised; LoneSurrogate from any piece) -> prefix/suffix -> media
 * (UnsupportedMedia: every entry in order, except that the first decoder failure of any entry comes
 * before an earlier entry's later-step failure, as the processor decodes all before it resizes any;
 * then an animated GIF after the first entry, "too many values to unpack (expected 4)") -> state
 * (LoneSurrogate) -> length check (SchemaTooLong) -> our checks after the reference's
 * (MediaTokenMismatch, what its model forward raises: the prompt's <|image_pad|> count, literal ones
 * included, against every processor image's features; LoneSurrogate in `model`, which the response
 * echoes; UnsupportedMedia when literal pads make up an animated GIF's count: ours).
 *
 * Videos (`videos`, after every image, as the processor lays them out): each entry a data: URL, bare
 * base64 or (allow_paths) a local path, decoded and sampled by src/video. The media block gets per video
 * <|vision_start|>, then per frame group g "<t_g seconds>" (tokenized) <|vision_start|> + <|video_pad|> x
 * (h/2)(w/2) + <|vision_end|>, then <|vision_end|>. Refusals: the reference's names and messages for what
 * it can receive (paths: see video_error below and docs/spec-corrections.md "Video"); a non-string entry
 * fails before any entry is decoded, a decoder failure of any entry before an earlier entry's resize
 * failure; "Video features and video tokens do not match" after the image check.
 *
 * An animated GIF (native grid) is several processor images, one per frame (the media step asks for
 * grids only: clef_image_opts.all_images = 2). When it is the first entry the processor flattens the
 * first axis of every entry (a single image's 3 channel planes become 3 images of its grid) and the
 * prompt's placeholder k gets processor image k's tokens (images[k].n_pad); such a request always fails.
 *
 * The record does not depend on model headers and is batch-ready: each record owns its arrays and
 * knows its length; a batch is an array of records (the model part converts). It borrows option ids
 * and question ids from the request: free the record before the request. */
#ifndef CLEF_DECISION_ENCODE_H
#define CLEF_DECISION_ENCODE_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "decision/request.h"
#include "image/image.h"
#include "video/video.h"
#include "base/json.h"
#include "text/tokenizer.h"

/* The reference's max_length: the one home of --max-length's default (clef_options_default). */
#define CLEF_MAX_LENGTH_DEFAULT 16384

typedef struct clef_span {
    size_t start, end; /* half-open, indices into input_ids */
} clef_span;

typedef struct clef_enc_question {
    const char *id; /* borrowed from the request */
    size_t id_len;
    int type; /* the clef_qtype: its row in base/question_type.h and of type_embedding */
    clef_span span;
    size_t n_options;
    clef_span *option_spans;    /* head order */
    const clef_option *options; /* borrowed: ids (and descriptions) in head order */
} clef_enc_question;

/* One run of media pads and the rows that replace them: an image, or one frame group of a video.
 * The model treats a video of grid (t, h, w) as t images of grid (1, h, w) (its M-RoPE splits
 * video_grid_thw per frame group, its tower attends per frame: docs/spec-corrections.md "Video"), so
 * each frame group is its own entry with grid (1, h, w), its own <|video_pad|> run and pixel rows. */
typedef struct clef_enc_image {
    clef_image image; /* grid and pixel_values (owned; pixel_values may be NULL when injected) */
    size_t pad_start; /* index of the first <|image_pad|> (<|video_pad|>) in input_ids */
    size_t n_pad;     /* number of pad ids: t * (h / merge) * (w / merge) */
    int video;        /* 0: an image; 1: frame group `group` of video `video_index` */
    size_t video_index, group;
    int video_grid_t; /* the video's grid_t (video_grid_thw[video_index][0]) */
} clef_enc_image;

typedef struct clef_record {
    int32_t *input_ids;
    size_t n_ids;
    size_t n_questions;
    clef_enc_question *questions; /* request order */
    size_t n_images;        /* images, then every video's frame groups */
    clef_enc_image *images; /* request order: images[0, n_real_images) are images, the rest frame groups */
    size_t n_real_images;
    size_t n_videos;
    size_t token_offset;    /* len(PREFIX) = 36: where the media block starts */
    size_t state_start;     /* len(PREFIX) + len(MEDIA) */
    size_t state_kept, state_total; /* state ids kept / before truncation */
    size_t schema_offset;   /* state_start + state_kept: the shift applied to every span */
} clef_record;

/* The media step, replaceable (tests inject precomputed grids): fill `out` for images[index].
 * `entry` is the entry as list(request["images"]) yields it (a JSON value; for an object `images`
 * a key string, for a string `images` one character). opts->all_images is 2: an entry the processor
 * makes several images of sets out->n_images (pixel_values may be NULL then). Return -1 with err set
 * on failure. */
typedef int (*clef_media_fn)(void *ctx, size_t index, const json_value *entry, const clef_image_opts *opts,
                             clef_image *out, clef_err *err);

typedef struct clef_encode_opts {
    size_t max_length;            /* 0 = CLEF_MAX_LENGTH_DEFAULT */
    const clef_image_opts *image; /* NULL = the processor defaults */
    const clef_video_opts *video; /* NULL = the processor defaults and our limits; local paths as
                                     image->allow_paths allows */
    clef_media_fn media;          /* NULL = clef_image_prepare on string entries */
    void *media_ctx;
    /* Ours: asked before each image and video entry; non-zero stops the encoding with
     * DeadlineExceeded (a server's shutdown budget ran out: clef_engine_stop_preparing). NULL: never. */
    int (*stop)(void *ctx);
    void *stop_ctx;
} clef_encode_opts;

/* Builds the record. On failure returns -1 with err set (the record is left empty). */
int clef_encode_record(const clef_tokenizer *tok, const clef_request *req, const clef_encode_opts *opts,
                       clef_record *out, clef_err *err);
void clef_record_free(clef_record *r);

/* Renders the record as `clef encode` prints it:
 * {"input_ids":[...],"questions":[{"question_id","question_type","question_span","option_spans",
 *  "option_ids"},...]} (images add "images":[{"grid_thw":[t,h,w],"pad_start":i,"n_pad":n}], videos
 *  "videos":[{"grid_thw":[t,h,w],"groups":[{"pad_start":i,"n_pad":n},...]}]). */
int clef_record_render(clef_buf *out, const clef_record *r);

#endif
