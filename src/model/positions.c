/* M-RoPE position planes with images (see positions.h, model.md §5.3). */
#include "model/positions.h"

int clef_mrope_positions(size_t n_ids, const clef_pos_image *images, size_t n_images, int merge,
                         int32_t *pos_t, int32_t *pos_h, int32_t *pos_w, clef_err *err) {
    if (merge <= 0)
        return clef_err_set(err, CLEF_E_INTERNAL, "M-RoPE positions: spatial merge size %d", merge);
    if (n_ids > (size_t)INT32_MAX)
        return clef_err_set(err, CLEF_E_INTERNAL, "M-RoPE positions: %zu tokens", n_ids);
    size_t i = 0;    /* next index to fill */
    int64_t cur = 0; /* next position */
    for (size_t k = 0; k < n_images; k++) {
        const clef_pos_image *im = &images[k];
        if (im->grid_t != 1 || im->grid_h <= 0 || im->grid_w <= 0 || im->grid_h % merge || im->grid_w % merge)
            return clef_err_set(err, CLEF_E_INTERNAL, "M-RoPE positions: image %zu has grid (%d, %d, %d)", k,
                                im->grid_t, im->grid_h, im->grid_w);
        size_t mh = (size_t)(im->grid_h / merge), mw = (size_t)(im->grid_w / merge);
        if (im->n_pad != mh * mw)
            return clef_err_set(err, CLEF_E_INTERNAL,
                                "M-RoPE positions: image %zu has %zu pads for a %zux%zu merged grid", k, im->n_pad,
                                mh, mw);
        if (im->pad_start < i || im->pad_start > n_ids || im->n_pad > n_ids - im->pad_start)
            return clef_err_set(err, CLEF_E_INTERNAL,
                                "M-RoPE positions: image %zu pads [%zu, %zu) out of order or outside %zu tokens", k,
                                im->pad_start, im->pad_start + im->n_pad, n_ids);
        for (; i < im->pad_start; i++, cur++) pos_t[i] = pos_h[i] = pos_w[i] = (int32_t)cur;
        for (size_t r = 0; r < mh; r++) {
            for (size_t c = 0; c < mw; c++, i++) {
                pos_t[i] = (int32_t)cur;
                pos_h[i] = (int32_t)(cur + (int64_t)r);
                pos_w[i] = (int32_t)(cur + (int64_t)c);
            }
        }
        cur += (int64_t)(mh > mw ? mh : mw);
    }
    for (; i < n_ids; i++, cur++) pos_t[i] = pos_h[i] = pos_w[i] = (int32_t)cur;
    return 0;
}
