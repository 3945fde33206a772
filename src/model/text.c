/* The Qwen3.5 text decoder (model.md §4.0–§4.6, §5), fp32 mode. */
#include "model/text.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Tokens per MLP block: bounds the [T, intermediate] scratch (2 x 512 x 12,288 floats = 50 MB at
 * the real width). The GEMM streams the weights once per call, so blocks as long as its own row
 * chunk (CLEF_AMX_TC = 512) read the 300 MB of MLP weights per layer half as often as 256 did. */
#define MLP_BLOCK 512

void clef_text_inv_freq(const clef_text_config *tc, float *out) {
    int dim = tc->rotary_dim;
    float base = (float)tc->rope_theta;
    for (int i = 0; i < dim / 2; i++) {
        float e = (float)(2 * i) / (float)dim;                 /* arange(0, dim, 2).float() / dim */
        float p = (float)pow((double)base, (double)e);        /* base ** e in fp32 */
        out[i] = 1.0f / p;                                     /* 1.0 / (...) in fp32 */
    }
}

void clef_text_mrope_planes(const clef_text_config *tc, int *plane) {
    int half = tc->rotary_dim / 2;
    for (int i = 0; i < half; i++) plane[i] = 0;
    for (int d = 1; d <= 2; d++) {
        int len = tc->mrope_section[d] * 3;
        for (int i = d; i < len && i < half; i += 3) plane[i] = d;
    }
}

void clef_layer_dump_fn(void *user, int layer, const float *rows, size_t T, size_t D) {
    clef_layer_dump *d = user;
    char path[4096];
    int n;
    if (d->failed) return;
    if (layer == CLEF_LAYER_FINAL_NORM)
        n = snprintf(path, sizeof path, "%s/final_norm.f32", d->dir);
    else
        n = snprintf(path, sizeof path, "%s/layer_%02d.f32", d->dir, layer);
    if (n < 0 || (size_t)n >= sizeof path) { d->failed = 1; return; }
    FILE *f = fopen(path, "wb");
    if (!f) { d->failed = 1; return; }
    if (fwrite(rows, sizeof(float), T * D, f) != T * D) d->failed = 1;
    if (fclose(f) != 0) d->failed = 1;
}

static int report(clef_ops *ops, const clef_forward_in *in, int layer, const float *rows, size_t T,
                  size_t D, clef_err *err) {
    if (!in->on_layer) return 0;
    if (ops->host_memory) {
        in->on_layer(in->on_layer_user, layer, rows, T, D);
        return 0;
    }
    float *h = malloc(T * D * sizeof(float));
    if (!h) return clef_err_set(err, CLEF_E_OOM, "out of memory copying layer %d rows", layer);
    ops->download(ops, h, rows, T * D);
    in->on_layer(in->on_layer_user, layer, h, T, D);
    free(h);
    return 0;
}

static int check_config(const clef_text_config *tc, const clef_text_weights *w, clef_err *err) {
    if (tc->hidden_size <= 0 || tc->num_hidden_layers <= 0 || tc->num_attention_heads <= 0 ||
        tc->num_key_value_heads <= 0 || tc->head_dim <= 0 ||
        tc->num_attention_heads % tc->num_key_value_heads != 0 || tc->linear_num_key_heads <= 0 ||
        tc->linear_num_value_heads % tc->linear_num_key_heads != 0 || tc->rotary_dim < 0 ||
        tc->rotary_dim % 2 != 0 || tc->rotary_dim > tc->head_dim || tc->intermediate_size <= 0)
        return clef_err_set(err, CLEF_E_BAD_MODEL, "text config has dimensions the forward cannot run");
    if (w->n_layers != tc->num_hidden_layers || !w->layers)
        return clef_err_set(err, CLEF_E_BAD_MODEL, "text weights hold %d layers, config says %d",
                            w->n_layers, tc->num_hidden_layers);
    return 0;
}

/* Each record's rows: none empty, a state saved only at a chunk multiple inside a record that
 * starts here, resumed only from one; together exactly the forward's T rows. */
static int check_segments(const clef_forward_seg *fs, size_t nseg, size_t T, clef_err *err) {
    size_t sum = 0;
    for (size_t i = 0; i < nseg; i++) {
        const clef_forward_seg *f = &fs[i];
        if (f->n == 0) return clef_err_set(err, CLEF_E_INTERNAL, "segment %zu has no rows", i);
        if (f->snap && (f->resume || f->snap->rows == 0 || f->snap->rows >= f->n || f->snap->rows % CLEF_DELTA_CHUNK))
            return clef_err_set(err, CLEF_E_INTERNAL, "segment %zu: a state can be saved only at a multiple of %d "
                                "inside a record that starts here", i, CLEF_DELTA_CHUNK);
        if (f->resume && f->resume->rows % CLEF_DELTA_CHUNK)
            return clef_err_set(err, CLEF_E_INTERNAL, "segment %zu resumes at %zu rows", i, f->resume->rows);
        sum += f->n;
    }
    if (sum != T) return clef_err_set(err, CLEF_E_INTERNAL, "segments hold %zu rows, the forward %zu", sum, T);
    return 0;
}

/* §5 cos / sin of the interleaved M-RoPE angles: theta_i = f32(pos_plane(i)) * w_i, computed in
 * hc / hs and uploaded to cs / sn (T x half each). */
static int rope_tables(clef_ops *ops, const clef_text_config *tc, const clef_forward_in *in, const clef_forward_seg *fs,
                       size_t nseg, size_t T, size_t half, float *hc, float *hs, float *cs, float *sn, clef_err *err) {
    float inv[512];
    int plane[512];
    if (half > 512) { clef_err_set(err, CLEF_E_BAD_MODEL, "rotary_dim %d is too large", tc->rotary_dim); return -1; }
    if (in->inv_freq) memcpy(inv, in->inv_freq, half * sizeof(float));
    else clef_text_inv_freq(tc, inv);
    clef_text_mrope_planes(tc, plane);
    for (size_t si = 0, t = 0; si < nseg; si++)
        for (size_t j = 0; j < fs[si].n; j++, t++)
        for (size_t i = 0; i < half; i++) {
            size_t tpos = (fs[si].resume ? fs[si].resume->rows : 0) + j; /* text-only: its place in the record */
            float p = in->pos[0] ? (float)in->pos[plane[i]][t] : (float)tpos;
            float th = p * inv[i];
            hc[t * half + i] = (float)cos((double)th);
            hs[t * half + i] = (float)sin((double)th);
        }
    ops->upload(ops, cs, hc, T * half);
    ops->upload(ops, sn, hs, T * half);
    return 0;
}

int clef_text_forward(clef_ops *ops, const clef_config *cfg, const clef_text_weights *w,
                      const clef_forward_in *in, float *hidden_out, clef_err *err) {
    const clef_text_config *tc = &cfg->text;
    if (check_config(tc, w, err) != 0) return -1;
    const size_t T = in->n, H = (size_t)tc->hidden_size, I = (size_t)tc->intermediate_size;
    const size_t half = (size_t)tc->rotary_dim / 2;
    const float eps = (float)tc->rms_norm_eps;
    if (T == 0 || !in->ids) return clef_err_set(err, CLEF_E_INTERNAL, "text forward called with no tokens");
    if (T > ((size_t)1 << 24)) return clef_err_set(err, CLEF_E_LIMIT, "%zu tokens is too many for one forward pass", T);
    for (size_t t = 0; t < T; t++)
        if (in->ids[t] < 0 || in->ids[t] >= tc->vocab_size)
            return clef_err_set(err, CLEF_E_INTERNAL, "token id %d at %zu is outside the vocabulary", (int)in->ids[t], t);
    if ((in->pos[0] || in->pos[1] || in->pos[2]) && !(in->pos[0] && in->pos[1] && in->pos[2]))
        return clef_err_set(err, CLEF_E_INTERNAL, "position planes: give all three or none");
    for (size_t r = 0; r < in->n_replace; r++)
        if (!in->replace_pos || !in->replace_rows || in->replace_pos[r] < 0 || (size_t)in->replace_pos[r] >= T)
            return clef_err_set(err, CLEF_E_INTERNAL, "replacement row %zu has no valid position", r);
    /* the records: their rows, and what each resumes from or saves */
    clef_forward_seg one = {T, NULL, NULL};
    const clef_forward_seg *fs = in->nseg ? in->segs : &one;
    const size_t nseg = in->nseg ? in->nseg : 1;
    if (in->nseg && !in->segs) return clef_err_set(err, CLEF_E_INTERNAL, "segments: count without a table");
    if (check_segments(fs, nseg, T, err) != 0) return -1;

    int rc = -1;
    clef_seg *rows = malloc(nseg * sizeof *rows);
    if (!rows) return clef_err_set(err, CLEF_E_OOM, "out of memory");
    for (size_t i = 0, r0 = 0; i < nseg; r0 += fs[i].n, i++) {
        rows[i].row0 = r0;
        rows[i].n = fs[i].n;
    }
    float *h = hidden_out; /* the residual stream lives in the output buffer */
    float *u = ops->alloc(ops, T * H), *mix = ops->alloc(ops, T * H);
    size_t MB = T < MLP_BLOCK ? T : MLP_BLOCK;
    float *gu = NULL; /* the MLP's gate | up scratch, taken per layer (see below) */
    float *cs = NULL, *sn = NULL;
    float *hc = malloc((half ? T * half : 1) * sizeof(float)), *hs = malloc((half ? T * half : 1) * sizeof(float));
    if (half) { cs = ops->alloc(ops, T * half); sn = ops->alloc(ops, T * half); }
    if (!u || !mix || !hc || !hs || (half && (!cs || !sn))) {
        clef_err_set(err, CLEF_E_OOM, "out of memory for a %zu-token forward pass", T);
        goto done;
    }

    /* §5 the rotary tables */
    if (half && rope_tables(ops, tc, in, fs, nseg, T, half, hc, hs, cs, sn, err) != 0) goto done;
    clef_rope_tab rope = {cs, sn};

    /* §4.0 embeddings, then replacement rows */
    ops->embed(ops, h, &w->embed_tokens, in->ids, T);
    for (size_t r = 0; r < in->n_replace; r++)
        ops->copy2d(ops, h + (size_t)in->replace_pos[r] * H, H, in->replace_rows + r * H, H, 1, H);

    for (int li = 0; li < tc->num_hidden_layers; li++) {
        const clef_text_layer *L = &w->layers[li];
        /* §4.2 */
        ops->rmsnorm(ops, u, H, h, H, T, H, &L->input_norm, 1, eps);
        clef_mix_segs ms = {rows, fs, nseg, li};
        int mrc = tc->layer_types[li] == CLEF_LAYER_FULL
                      ? clef_attention_forward(ops, tc, L, u, T, &ms, &rope, mix, err)
                      : clef_gdn_forward(ops, tc, L, u, T, &ms, mix, err);
        if (mrc != 0) goto done;
        ops->add(ops, h, h, mix, T * H);
        ops->rmsnorm(ops, u, H, h, H, T, H, &L->post_norm, 1, eps);
        /* §4.5 SwiGLU MLP in token blocks. Its scratch is taken after the mixer has returned its
         * buffers, so a caching backend (the CPU's) hands it one of them instead of new pages. */
        gu = ops->alloc(ops, 2 * MB * I);
        if (!gu) { clef_err_set(err, CLEF_E_OOM, "out of memory for the MLP of layer %d", li); goto done; }
        float *gate = gu, *up = gu + MB * I;
        for (size_t t0 = 0; t0 < T; t0 += MB) {
            size_t n = T - t0 < MB ? T - t0 : MB;
            ops->linear(ops, gate, u + t0 * H, n, &L->mlp_gate, 0, I, NULL);
            ops->linear(ops, up, u + t0 * H, n, &L->mlp_up, 0, I, NULL);
            ops->silu_mul(ops, gate, gate, up, n * I);
            ops->linear(ops, mix + t0 * H, gate, n, &L->mlp_down, 0, H, NULL);
        }
        ops->add(ops, h, h, mix, T * H);
        ops->free(ops, gu);
        gu = NULL;
        if (clef_ops_failed(ops)) {
            char where[48];
            snprintf(where, sizeof where, "an op of layer %d", li);
            clef_ops_take(ops, where, err);
            goto done;
        }
        if (report(ops, in, li, h, T, H, err) != 0) goto done;
    }
    /* §4.6 final norm, in place */
    ops->rmsnorm(ops, h, H, h, H, T, H, &w->final_norm, 1, eps);
    if (clef_ops_take(ops, "the final norm", err)) goto done;
    if (report(ops, in, CLEF_LAYER_FINAL_NORM, h, T, H, err) != 0) goto done;
    rc = 0;
done:
    ops->free(ops, u);
    ops->free(ops, mix);
    ops->free(ops, gu);
    ops->free(ops, cs);
    ops->free(ops, sn);
    free(hc);
    free(hs);
    free(rows);
    return rc;
}
