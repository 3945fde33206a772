/* The decoders' size check (size_check.h). */
#include "image/size_check.h"

#include "image/image_internal.h"

int clef_image_check_size(int64_t w, int64_t h, const clef_image_opts *o, clef_err *err) {
    if (w <= 0 || h <= 0)
        return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "image has zero size (%lldx%lld)", (long long)w,
                            (long long)h);
    if (w > 0x7fffffff / 4 || h > 0x7fffffff / 4 || (o->max_source_pixels > 0 && w * h > o->max_source_pixels))
        return clef_err_set(err, CLEF_E_LIMIT, "image of %lldx%lld pixels is over this server's limit of %lld pixels",
                            (long long)w, (long long)h, (long long)o->max_source_pixels);
    if (o->probe) { /* clef_image_probe_entry: the header is all it needs */
        o->probe->w = w;
        o->probe->h = h;
        return 1;
    }
    if (o->max_tokens > 0) {
        /* the target grid from the header's size, before any pixel is decoded or resized; a size
         * smart_resize refuses (its aspect ratio) is left to the processing, which reports it */
        int64_t th = o->tile ? o->tile : h, tw = o->tile ? o->tile : w;
        int64_t factor = (int64_t)(o->patch_size > 0 ? o->patch_size : 16) * (o->merge_size > 0 ? o->merge_size : 2);
        int64_t oh, ow;
        clef_err scratch;
        clef_err_clear(&scratch);
        if (o->min_pixels >= 0 && o->max_pixels > 0 &&
            clef_smart_resize(th, tw, factor, o->min_pixels, o->max_pixels, &oh, &ow, &scratch) == 0) {
            size_t tokens = (size_t)(oh / factor) * (size_t)(ow / factor);
            if (tokens > o->max_tokens) {
                if (o->over_tokens) *o->over_tokens = tokens;
                return clef_err_set(err, CLEF_E_SCHEMA_TOO_LONG,
                                    "an image of %lldx%lld pixels becomes %lldx%lld (%zu tokens) at min_pixels %lld, "
                                    "max_pixels %lld: over the token budget",
                                    (long long)w, (long long)h, (long long)ow, (long long)oh, tokens,
                                    (long long)o->min_pixels, (long long)o->max_pixels);
            }
        }
    }
    return 0;
}
