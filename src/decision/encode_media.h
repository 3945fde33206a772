/* Inside decision/: what encode.c (encode_record's text) and encode_media.c (its images and videos)
 * share. Not part of encode.h's interface. */
#ifndef CLEF_DECISION_ENCODE_MEDIA_H
#define CLEF_DECISION_ENCODE_MEDIA_H

#include <stddef.h>

#include "decision/encode.h"

/* Channels of every decoded entry (torchvision.io.decode_image with ImageReadMode.RGB): the first axis
 * of a single image, which the processor splits when the first entry is several images. */
#define CLEF_DECODED_CHANNELS 3

/* What the image entries add up to, for the checks after encoding. */
typedef struct {
    size_t features; /* image features of every processor image: what the forward compares */
    int several;     /* an entry is several processor images (an animated GIF's frames) */
} clef_image_count;

/* list(request.get(name) or []): the entries of "images" or "videos" as JSON values (*items malloc'd,
 * NULL when none). 0, or -1 with *err set (not a list). */
int clef_encode_media_list(const json_value *v, const char *name, json_doc *own, const json_value ***items,
                           size_t *n, clef_err *err);

/* The image entries (n_entries > 0; out->images allocated for them): media_kwargs, every entry through
 * the media function (opts->media, else the image module), the placeholders' token counts, then each
 * entry's <|vision_start|> pads <|vision_end|> appended to prefix. `fixed` holds the schema's and
 * suffix's lengths (for the budget). *unpaid: 1 when the entries are over the budget from their
 * headers alone (no pixels made), 2 when the pads were only counted (*unpushed of them). 0, or -1. */
int clef_encode_images(const clef_tokenizer *tok, const clef_request *req, const clef_encode_opts *opts,
                       const json_value **entries, size_t n_entries, size_t max_length, size_t fixed,
                       clef_record *out, clef_ids *prefix, clef_image_count *ic, int *unpaid, size_t *unpushed,
                       clef_err *err);

/* Decodes every video (request order) within media_budget tokens, then lays out their frame groups
 * after the images' pads in prefix, each as its own clef_enc_image of grid (1, h, w); *features grows
 * by their pads. 0, or -1 with *err set. */
int clef_encode_videos(const clef_tokenizer *tok, const json_value **entries, size_t n, const clef_encode_opts *opts,
                       size_t media_budget, clef_record *out, clef_ids *prefix, size_t *features, clef_err *err);

#endif
