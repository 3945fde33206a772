/* The vision tower (see vision.h; model.md §6). */
#include "model/vision.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

size_t clef_vision_tokens(const clef_vision_config *vc, const clef_vision_image *im) {
    int m = vc->spatial_merge_size;
    if (m <= 0 || im->grid_t <= 0 || im->grid_h <= 0 || im->grid_w <= 0 || im->grid_h % m || im->grid_w % m)
        return 0;
    return (size_t)im->grid_t * (size_t)(im->grid_h / m) * (size_t)(im->grid_w / m);
}

void clef_vision_inv_freq(const clef_vision_config *vc, float *out) {
    int spatial = vc->head_dim / 2;
    float base = (float)vc->rope_theta;
    for (int i = 0; i < spatial / 2; i++) {
        float e = (float)(2 * i) / (float)spatial;          /* arange(0, spatial, 2).float() / spatial */
        float p = (float)pow((double)base, (double)e);      /* base ** e, fp32 result */
        out[i] = 1.0f / p;
    }
}

void clef_vision_patch_rc(size_t n, int grid_w, int merge, int *row, int *col) {
    size_t m = (size_t)merge, bw = (size_t)grid_w / m;
    size_t mc = n % m, mr = (n / m) % m, bc = (n / (m * m)) % bw, br = n / (m * m * bw);
    *row = (int)(br * m + mr);
    *col = (int)(bc * m + mc);
}

/* One axis: taps and weights for `index` on an axis of `size` targets (torch's closed form of
 * linspace(0, side-1, size)[index], all in fp32). */
static void axis_taps(int side, int index, int size, int32_t tap[2], float wt[2]) {
    float src = (float)index * (float)(side - 1);
    src = src / (float)(size - 1 > 1 ? size - 1 : 1);
    float fl = floorf(src);
    for (int o = 0; o < 2; o++) {
        int64_t t = (int64_t)fl + o;
        tap[o] = (int32_t)(t < 0 ? 0 : t > side - 1 ? side - 1 : t);
        float d = fabsf((src - fl) - (float)o);
        float w = 1.0f - d;
        wt[o] = w > 0.0f ? w : 0.0f;
    }
}

void clef_vision_bilinear(int side, int row, int col, int grid_h, int grid_w, int32_t idx[4], float wt[4]) {
    int32_t rt[2], ct[2];
    float rw[2], cw[2];
    axis_taps(side, row, grid_h, rt, rw);
    axis_taps(side, col, grid_w, ct, cw);
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) {
            idx[2 * a + b] = rt[a] * side + ct[b];
            wt[2 * a + b] = rw[a] * cw[b];
        }
}

/* Device buffers for a pack of images of Np patches in all. */
typedef struct {
    float *pix, *h, *x, *qkv, *att, *tmp, *mlp, *cos, *sin, *m1;
} vis_bufs;

static void free_bufs(clef_ops *ops, vis_bufs *b) {
    float **p = (float **)b;
    for (size_t i = 0; i < sizeof *b / sizeof(float *); i++) ops->free(ops, p[i]);
    memset(b, 0, sizeof *b);
}

static int check_config(const clef_vision_config *vc, const clef_vision_weights *w, clef_err *err) {
    if (!vc->present || !w->present)
        return clef_err_set(err, CLEF_E_BAD_MODEL, "this model has no vision tower (no model.visual.* weights)");
    if (vc->head_dim <= 0 || vc->head_dim % 4 || vc->num_heads * vc->head_dim != vc->hidden_size)
        return clef_err_set(err, CLEF_E_BAD_MODEL,
                            "vision_config: head_dim %d (hidden_size %d / num_heads %d) must be a multiple of 4",
                            vc->head_dim, vc->hidden_size, vc->num_heads);
    int64_t side = vc->num_grid_per_side;
    if (side < 1 || side * side != vc->num_position_embeddings)
        return clef_err_set(err, CLEF_E_BAD_MODEL, "vision_config: num_position_embeddings %d is not a square",
                            vc->num_position_embeddings);
    int m = vc->spatial_merge_size;
    if (m <= 0 || vc->merged_dim != vc->hidden_size * m * m)
        return clef_err_set(err, CLEF_E_BAD_MODEL, "vision_config: spatial_merge_size %d", m);
    if (w->depth != vc->depth || !w->patch_w.data || w->patch_w.shape[0] != vc->hidden_size ||
        w->patch_w.numel != (int64_t)vc->hidden_size * vc->patch_dim)
        return clef_err_set(err, CLEF_E_BAD_MODEL, "vision weights do not match vision_config");
    if (!w->pos_embed.data || w->pos_embed.numel != (int64_t)vc->num_position_embeddings * vc->hidden_size ||
        !w->merger_fc1_w.data || w->merger_fc1_w.numel != (int64_t)vc->merged_dim * vc->merged_dim ||
        !w->merger_fc2_w.data || w->merger_fc2_w.numel != (int64_t)vc->out_hidden_size * vc->merged_dim)
        return clef_err_set(err, CLEF_E_BAD_MODEL, "vision weights (pos_embed, merger) do not match vision_config");
    return 0;
}

/* The learned position rows [Np, Hv] (host), rows in block order, frames repeating. */
static void pos_rows(const clef_vision_config *vc, const float *table, const clef_vision_image *im, float *outp) {
    size_t Hv = (size_t)vc->hidden_size, per = (size_t)im->grid_h * (size_t)im->grid_w;
    int side = vc->num_grid_per_side;
    for (size_t n = 0; n < per; n++) {
        int row, col;
        clef_vision_patch_rc(n, im->grid_w, vc->spatial_merge_size, &row, &col);
        int32_t idx[4];
        float wt[4];
        clef_vision_bilinear(side, row, col, im->grid_h, im->grid_w, idx, wt);
        float *y = outp + n * Hv;
        const float *p0 = table + (size_t)idx[0] * Hv, *p1 = table + (size_t)idx[1] * Hv;
        const float *p2 = table + (size_t)idx[2] * Hv, *p3 = table + (size_t)idx[3] * Hv;
        for (size_t d = 0; d < Hv; d++) {
            float s = p0[d] * wt[0];
            s = s + p1[d] * wt[1];
            s = s + p2[d] * wt[2];
            s = s + p3[d] * wt[3];
            y[d] = s;
        }
    }
    for (int t = 1; t < im->grid_t; t++) memcpy(outp + (size_t)t * per * Hv, outp, per * Hv * sizeof(float));
}

/* Rotary half tables [Np, head_dim / 2]: [row*w_0 .. row*w_{q-1}, col*w_0 .. col*w_{q-1}]. */
static void rope_rows(const clef_vision_config *vc, const float *inv, const clef_vision_image *im, float *hc,
                      float *hs) {
    size_t half = (size_t)vc->head_dim / 2, q = half / 2, per = (size_t)im->grid_h * (size_t)im->grid_w;
    for (size_t n = 0; n < per; n++) {
        int row, col;
        clef_vision_patch_rc(n, im->grid_w, vc->spatial_merge_size, &row, &col);
        for (size_t i = 0; i < half; i++) {
            float p = i < q ? (float)row : (float)col;
            float th = p * inv[i < q ? i : i - q];
            hc[n * half + i] = (float)cos((double)th);
            hs[n * half + i] = (float)sin((double)th);
        }
    }
    for (int t = 1; t < im->grid_t; t++) {
        memcpy(hc + (size_t)t * per * half, hc, per * half * sizeof(float));
        memcpy(hs + (size_t)t * per * half, hs, per * half * sizeof(float));
    }
}

/* Patches per packed pass of the tower: images are packed until this many (an image larger than
 * this runs alone). Bounds the [Np, intermediate] scratch (~140 MB at the real width) while short
 * images of a batch share every weight read. A row's bits do not depend on the pack. */
#define VISION_PACK_PATCHES 8192

/* Images [0, n) in one pass: every per-patch op over all their rows, attention per frame. */
static int image_pack(clef_ops *ops, const clef_vision_config *vc, const clef_vision_weights *w,
                      const clef_vision_image *ims, size_t n, const float *inv, const float *table, float *out,
                      clef_err *err) {
    const size_t Hv = (size_t)vc->hidden_size, Iv = (size_t)vc->intermediate_size, nh = (size_t)vc->num_heads;
    const size_t hd = (size_t)vc->head_dim, half = hd / 2, P = (size_t)vc->patch_dim;
    const size_t mm = (size_t)vc->spatial_merge_size * (size_t)vc->spatial_merge_size;
    const size_t Md = (size_t)vc->merged_dim, Od = (size_t)vc->out_hidden_size;
    const float eps = (float)vc->layer_norm_eps, scale = (float)(1.0 / sqrt((double)hd));
    size_t Np = 0, nframes = 0;
    for (size_t k = 0; k < n; k++) {
        Np += (size_t)ims[k].grid_t * (size_t)ims[k].grid_h * (size_t)ims[k].grid_w;
        nframes += (size_t)ims[k].grid_t;
    }
    const size_t Nt = Np / mm;

    vis_bufs b = {0};
    float *host = NULL, *hc = NULL;
    clef_attn_seg *frames = malloc(nframes * sizeof *frames);
    int rc = 0;
    b.pix = ops->alloc(ops, Np * P);
    b.h = ops->alloc(ops, Np * Hv);
    b.x = ops->alloc(ops, Np * Hv);
    b.qkv = ops->alloc(ops, Np * 3 * Hv);
    b.att = ops->alloc(ops, Np * Hv);
    b.tmp = ops->alloc(ops, Np * Hv);
    b.mlp = ops->alloc(ops, Np * Iv);
    b.cos = ops->alloc(ops, Np * half);
    b.sin = ops->alloc(ops, Np * half);
    b.m1 = ops->alloc(ops, Nt * Md);
    host = malloc(Np * Hv * sizeof(float));
    hc = malloc(2 * Np * half * sizeof(float));
    int have = host && hc && frames;
    float **bp = (float **)&b;
    for (size_t i = 0; i < sizeof b / sizeof(float *); i++)
        if (!bp[i]) have = 0;
    if (!have) {
        rc = clef_err_set(err, CLEF_E_OOM, "out of memory for images of %zu patches", Np);
        goto done;
    }

    /* per image: pixels, learned positions, rotary tables at its rows; one segment per frame */
    size_t row = 0, f = 0;
    for (size_t k = 0; k < n; k++) {
        const clef_vision_image *im = &ims[k];
        const size_t per = (size_t)im->grid_h * (size_t)im->grid_w, np = (size_t)im->grid_t * per;
        ops->upload(ops, b.pix + row * P, im->pixel_values, np * P);
        pos_rows(vc, table, im, host + row * Hv);
        rope_rows(vc, inv, im, hc + row * half, hc + Np * half + row * half);
        for (int t = 0; t < im->grid_t; t++, f++) {
            frames[f].q0 = frames[f].k0 = row + (size_t)t * per;
            frames[f].nq = frames[f].nk = per;
        }
        row += np;
    }
    /* patch embedding: one GEMM over the flattened [Hv, C*T*p*p] kernel, plus learned positions */
    ops->linear(ops, b.h, b.pix, Np, &w->patch_w, 0, Hv, &w->patch_b);
    ops->upload(ops, b.tmp, host, Np * Hv);
    ops->add(ops, b.h, b.h, b.tmp, Np * Hv);
    ops->upload(ops, b.cos, hc, Np * half);
    ops->upload(ops, b.sin, hc + Np * half, Np * half);
    if (ops->failed) goto oom;

    for (int l = 0; l < vc->depth; l++) {
        const clef_vision_block *B = &w->blocks[l];
        ops->layernorm(ops, b.x, b.h, Np, Hv, &B->norm1_w, &B->norm1_b, eps);
        ops->linear(ops, b.qkv, b.x, Np, &B->qkv_w, 0, 3 * Hv, &B->qkv_b);
        ops->rope(ops, b.qkv, 3 * Hv, Np, nh, hd, hd, b.cos, b.sin);      /* q */
        ops->rope(ops, b.qkv + Hv, 3 * Hv, Np, nh, hd, hd, b.cos, b.sin); /* k */
        ops->attention(ops, b.att, Hv, b.qkv, 3 * Hv, b.qkv + Hv, 3 * Hv, b.qkv + 2 * Hv, 3 * Hv, frames, nframes,
                       nh, nh, hd, scale, 0);
        ops->linear(ops, b.tmp, b.att, Np, &B->proj_w, 0, Hv, &B->proj_b);
        ops->add(ops, b.h, b.h, b.tmp, Np * Hv);
        ops->layernorm(ops, b.x, b.h, Np, Hv, &B->norm2_w, &B->norm2_b, eps);
        ops->linear(ops, b.mlp, b.x, Np, &B->fc1_w, 0, Iv, &B->fc1_b);
        ops->gelu(ops, b.mlp, Np * Iv, 1);
        ops->linear(ops, b.tmp, b.mlp, Np, &B->fc2_w, 0, Hv, &B->fc2_b);
        ops->add(ops, b.h, b.h, b.tmp, Np * Hv);
        if (ops->failed) goto oom;
    }

    /* merger: LayerNorm per patch, 4 consecutive rows = one token (never across images: each
     * image's rows are a multiple of 4), fc1, erf GELU, fc2 */
    ops->layernorm(ops, b.x, b.h, Np, Hv, &w->merger_norm_w, &w->merger_norm_b, eps);
    ops->linear(ops, b.m1, b.x, Nt, &w->merger_fc1_w, 0, Md, &w->merger_fc1_b);
    ops->gelu(ops, b.m1, Nt * Md, 0);
    ops->linear(ops, out, b.m1, Nt, &w->merger_fc2_w, 0, Od, &w->merger_fc2_b);
    if (ops->failed) goto oom;
    goto done;
oom:
    rc = clef_err_set(err, CLEF_E_OOM, "out of memory inside the compute backend (vision, %zu patches)", Np);
done:
    free(host);
    free(hc);
    free(frames);
    free_bufs(ops, &b);
    return rc;
}

int clef_vision_forward(clef_ops *ops, const clef_vision_config *vc, const clef_vision_weights *w,
                        const clef_vision_image *images, size_t n_images, const float *inv_freq, float *out,
                        clef_err *err) {
    if (check_config(vc, w, err)) return -1;
    for (size_t k = 0; k < n_images; k++) {
        const clef_vision_image *im = &images[k];
        if (!clef_vision_tokens(vc, im) || !im->pixel_values)
            return clef_err_set(err, CLEF_E_INTERNAL, "vision: image %zu has grid (%d, %d, %d)%s", k, im->grid_t,
                                im->grid_h, im->grid_w, im->pixel_values ? "" : " and no pixel values");
        if ((int64_t)im->grid_t * im->grid_h * im->grid_w > ((int64_t)1 << 24))
            return clef_err_set(err, CLEF_E_LIMIT, "vision: image %zu has %lld patches", k,
                                (long long)im->grid_t * im->grid_h * im->grid_w);
    }
    const size_t Hv = (size_t)vc->hidden_size, tab_n = (size_t)vc->num_position_embeddings * Hv;
    float inv[256];
    size_t q = (size_t)vc->head_dim / 4;
    if (q > sizeof inv / sizeof inv[0])
        return clef_err_set(err, CLEF_E_BAD_MODEL, "vision_config: head_dim %d is too large", vc->head_dim);
    if (inv_freq) memcpy(inv, inv_freq, q * sizeof(float));
    else clef_vision_inv_freq(vc, inv);
    /* the learned grid in fp32 (host: the weights are always host-mapped) */
    float *table = malloc(tab_n * sizeof(float));
    if (!table) return clef_err_set(err, CLEF_E_OOM, "out of memory");
    for (size_t i = 0; i < tab_n; i++) table[i] = clef_tensor_f32_at(&w->pos_embed, (int64_t)i);
    int rc = 0;
    size_t off = 0;
    for (size_t k0 = 0; k0 < n_images && rc == 0;) { /* packs of up to VISION_PACK_PATCHES patches */
        size_t k1 = k0, np = 0;
        while (k1 < n_images) {
            size_t p = (size_t)images[k1].grid_t * (size_t)images[k1].grid_h * (size_t)images[k1].grid_w;
            if (k1 > k0 && np + p > VISION_PACK_PATCHES) break;
            np += p;
            k1++;
        }
        rc = image_pack(ops, vc, w, images + k0, k1 - k0, inv, table, out + off * (size_t)vc->out_hidden_size, err);
        for (; k0 < k1; k0++) off += clef_vision_tokens(vc, &images[k0]);
    }
    free(table);
    return rc;
}
