/* Rescale+normalise ((x - 127.5) / 127.5 in fp32, the torchvision backend's fused form; uint16 samples
 * of a 16-bit PNG go through the same formula, as the reference's do) and the Qwen2-VL patch layout (model.md §7.4): rows in
 * temporal-group then merge-block order (group, block row, block col, in-block row, in-block col),
 * columns c*T*P*P + t*P*P + y*P + x. An image is a group of one frame repeated in both temporal slots;
 * a video's frames go T to a group, its last frame repeated when the count is odd. */
#include <stdlib.h>

#include "base/bufpool.h"
#include "image/image_internal.h"

int clef_patchify_frames(const clef_rgb *frames, int nf, int P, int M, int T, const char *noun, clef_patch_out out,
                         clef_err *err) {
    const int w = frames[0].w, h = frames[0].h;
    const int gt = (nf + T - 1) / T, gh = h / P, gw = w / P;
    const size_t dim = (size_t)3 * T * P * P, n = (size_t)gt * gh * gw;
    float *pv = clef_bufpool_alloc(clef_bufpool_process(), sizeof(float) * n * dim);
    if (!pv) return clef_err_set(err, CLEF_E_OOM, "out of memory for %zu %s patches", n, noun);
    float lut[256];
    for (int v = 0; v < 256; v++) lut[v] = ((float)v - 127.5f) / 127.5f;
    size_t row = 0;
    for (int t = 0; t < gt; t++)
        for (int br = 0; br < gh / M; br++)
            for (int bc = 0; bc < gw / M; bc++)
                for (int mr = 0; mr < M; mr++)
                    for (int mc = 0; mc < M; mc++, row++) {
                        const int py = br * M + mr, px = bc * M + mc;
                        float *dst = pv + row * dim;
                        for (int c = 0; c < 3; c++)
                            for (int dt = 0; dt < T; dt++) {
                                int fi = t * T + dt;
                                if (fi >= nf) fi = nf - 1;
                                const clef_rgb *im = &frames[fi];
                                for (int y = 0; y < P; y++) {
                                    const size_t at = ((size_t)(py * P + y) * w + (size_t)px * P) * 3 + c;
                                    float *d = dst + ((size_t)(c * T + dt) * P + y) * P;
                                    if (im->px16) {
                                        const uint16_t *src = im->px16 + at;
                                        for (int x = 0; x < P; x++) d[x] = ((float)src[3 * x] - 127.5f) / 127.5f;
                                    } else {
                                        const uint8_t *src = im->px + at;
                                        for (int x = 0; x < P; x++) d[x] = lut[src[3 * x]];
                                    }
                                }
                            }
                    }
    *out.grid_t = gt;
    *out.grid_h = gh;
    *out.grid_w = gw;
    *out.n_patches = n;
    *out.patch_dim = dim;
    *out.pixel_values = pv;
    return 0;
}

int clef_patchify(const clef_rgb *im, const clef_image_opts *o, clef_image *out, clef_err *err) {
    const int P = o->patch_size, M = o->merge_size, T = o->temporal_patch_size;
    if (P <= 0 || M <= 0 || T <= 0 || P > 1024 || M > 64 || T > 64 || im->w % (P * M) || im->h % (P * M))
        return clef_err_set(err, CLEF_E_INTERNAL, "patchify: %dx%d is not a multiple of %d", im->w, im->h, P * M);
    const clef_patch_out to = {&out->grid_t, &out->grid_h, &out->grid_w, &out->n_patches, &out->patch_dim,
                               &out->pixel_values};
    if (clef_patchify_frames(im, 1, P, M, T, "image", to, err)) return -1;
    out->n_images = 1;
    return 0;
}
