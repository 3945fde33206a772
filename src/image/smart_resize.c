/* smart_resize (model.md §7.1), as transformers computes it in Python doubles: the image processor's
 * (qwen2_vl) and the video processor's (qwen3_vl, over the clip) are one computation, the image being a
 * clip of one frame with a temporal factor of 1 and no upscale of small sides. */
#include <math.h>

#include "image/image_internal.h"
#include "base/pyfmt.h"

int clef_smart_resize_clip(const clef_resize_rule *r, int64_t h, int64_t w, int64_t *oh, int64_t *ow,
                           clef_err *err) {
    const int64_t t = r->frames, temporal = r->temporal, factor = r->factor;
    if (t < temporal)
        return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "t:%lld must be larger than temporal_factor:%lld",
                            (long long)t, (long long)temporal);
    if (h <= 0 || w <= 0 || factor <= 0)
        return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "%s has zero size (%lldx%lld)", r->noun, (long long)w,
                            (long long)h);
    if (r->upscale_small && (h < factor || w < factor)) {
        double fh = (double)factor / (double)h, fw = (double)factor / (double)w;
        double scale = fh > fw ? fh : fw;
        h = (int64_t)((double)h * scale);
        w = (int64_t)((double)w * scale);
    }
    int64_t mx = h > w ? h : w, mn = h > w ? w : h;
    double ratio = (double)mx / (double)mn;
    if (ratio > 200.0) {
        char rs[40];
        clef_py_repr_double(ratio, rs);
        return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "absolute aspect ratio must be smaller than 200, got %s",
                            rs);
    }
    double f = (double)factor;
    /* Python round(): half to even on the double quotient (nearbyint in the default rounding mode). */
    int64_t hb = (int64_t)nearbyint((double)h / f) * factor;
    int64_t wb = (int64_t)nearbyint((double)w / f) * factor;
    int64_t tb = (int64_t)nearbyint((double)t / (double)temporal) * temporal;
    /* Python integers: t_bar * h_bar * w_bar does not overflow there; here the factors are bounded by
     * our limits (frames <= max_frames, pixels <= max_frame_pixels or max_source_pixels) */
    if ((double)tb * (double)hb * (double)wb > (double)r->max_pixels && tb * hb * wb > r->max_pixels) {
        double beta = sqrt((double)(t * h * w) / (double)r->max_pixels);
        hb = (int64_t)floor((double)h / beta / f) * factor;
        wb = (int64_t)floor((double)w / beta / f) * factor;
        if (hb < factor) hb = factor;
        if (wb < factor) wb = factor;
    } else if (tb * hb * wb < r->min_pixels) {
        double beta = sqrt((double)r->min_pixels / (double)(t * h * w));
        hb = (int64_t)ceil((double)h * beta / f) * factor;
        wb = (int64_t)ceil((double)w * beta / f) * factor;
    }
    *oh = hb;
    *ow = wb;
    return 0;
}

int clef_smart_resize(int64_t h, int64_t w, int64_t factor, int64_t min_pixels, int64_t max_pixels, int64_t *oh,
                      int64_t *ow, clef_err *err) {
    const clef_resize_rule r = {.noun = "image", .frames = 1, .temporal = 1, .upscale_small = 0,
                                .factor = factor, .min_pixels = min_pixels, .max_pixels = max_pixels};
    return clef_smart_resize_clip(&r, h, w, oh, ow, err);
}
