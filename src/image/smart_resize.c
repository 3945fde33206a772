/* smart_resize (model.md §7.1), as transformers' qwen2_vl smart_resize computes it in Python doubles. */
#include <math.h>

#include "image/image_internal.h"
#include "base/pyfmt.h"

int clef_smart_resize(int64_t h, int64_t w, int64_t factor, int64_t min_pixels, int64_t max_pixels, int64_t *oh,
                      int64_t *ow, clef_err *err) {
    if (h <= 0 || w <= 0 || factor <= 0)
        return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "image has zero size (%lldx%lld)", (long long)w,
                            (long long)h);
    int64_t mx = h > w ? h : w, mn = h > w ? w : h;
    double ratio = (double)mx / (double)mn;
    if (ratio > 200.0) {
        char r[40];
        clef_py_repr_double(ratio, r);
        return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "absolute aspect ratio must be smaller than 200, got %s",
                            r);
    }
    double f = (double)factor;
    /* Python round(): half to even on the double quotient (nearbyint in the default rounding mode). */
    int64_t hb = (int64_t)nearbyint((double)h / f) * factor;
    int64_t wb = (int64_t)nearbyint((double)w / f) * factor;
    if (hb * wb > max_pixels) {
        double beta = sqrt((double)(h * w) / (double)max_pixels);
        hb = (int64_t)floor((double)h / beta / f) * factor;
        wb = (int64_t)floor((double)w / beta / f) * factor;
        if (hb < factor) hb = factor;
        if (wb < factor) wb = factor;
    } else if (hb * wb < min_pixels) {
        double beta = sqrt((double)min_pixels / (double)(h * w));
        hb = (int64_t)ceil((double)h * beta / f) * factor;
        wb = (int64_t)ceil((double)w * beta / f) * factor;
    }
    *oh = hb;
    *ow = wb;
    return 0;
}
