/* vision_tool: runs the vision tower (and the M-RoPE planes) on its own, for the parity tests.
 *
 *   vision_tool --model DIR --request F [--threads N] --out DIR2
 *       parses and encodes the request as the engine does (tokenizer, image processor), runs the
 *       tower on its images and writes DIR2/rows.f32 (merger rows of all images, [N, out_hidden]),
 *       DIR2/positions.i32 (the T, H, W planes, [3, n_ids]) and DIR2/pixels.f32 (pixel_values of
 *       all images, [sum Np, patch_dim]); prints {"n_ids":n,"images":[{"grid_thw":[t,h,w],
 *       "pad_start":i,"n_pad":n,"pixel_values_sha256":"..."}],"rows":[N,D]}.
 *   vision_tool --model DIR --pixels F.f32 --grid T,H,W [--threads N] --out F2
 *       runs the tower on raw little-endian float32 pixel rows [T*H*W, patch_dim] and writes the
 *       merger rows to F2 ([N, out_hidden] float32).
 * Exit 0 on success, 1 with a message on stderr otherwise. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/sha256.h"
#include "compute/cpu/cpu_ops.h"
#include "decision/encode.h"
#include "decision/request.h"
#include "model/positions.h"
#include "model/vision.h"
#include "model/weights.h"
#include "base/json.h"
#include "text/tokenizer.h"

static int fail(const clef_err *e) {
    fprintf(stderr, "vision_tool: %s: %s\n", e->type ? e->type : "Error", e->msg);
    return 1;
}

static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    clef_buf b;
    clef_buf_init(&b);
    char tmp[65536];
    size_t n;
    while ((n = fread(tmp, 1, sizeof tmp, f)) > 0) clef_buf_put(&b, tmp, n);
    fclose(f);
    if (b.oom) { clef_buf_free(&b); return NULL; }
    return clef_buf_take(&b, len);
}

static int write_file(const char *dir, const char *name, const void *p, size_t n) {
    char path[4096];
    if (name) snprintf(path, sizeof path, "%s/%s", dir, name);
    else snprintf(path, sizeof path, "%s", dir);
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = n ? fwrite(p, 1, n, f) : 0;
    return (fclose(f) == 0 && w == n) ? 0 : -1;
}

int main(int argc, char **argv) {
    const char *model = NULL, *request = NULL, *pixels = NULL, *grid = NULL, *out = NULL;
    int threads = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--model")) model = argv[i + 1];
        else if (!strcmp(argv[i], "--request")) request = argv[i + 1];
        else if (!strcmp(argv[i], "--pixels")) pixels = argv[i + 1];
        else if (!strcmp(argv[i], "--grid")) grid = argv[i + 1];
        else if (!strcmp(argv[i], "--out")) out = argv[i + 1];
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else { fprintf(stderr, "vision_tool: unknown option %s\n", argv[i]); return 1; }
    }
    if (!model || !out || (!request == !pixels) || (pixels && !grid)) {
        fprintf(stderr, "usage: vision_tool --model DIR (--request F | --pixels F --grid T,H,W) [--threads N] --out P\n");
        return 1;
    }
    clef_err err;
    clef_err_clear(&err);
    clef_model_files *mf = clef_model_open(model, &err);
    if (!mf) return fail(&err);
    clef_ops *ops = clef_cpu_ops_create(threads, NULL, &err);
    if (!ops) return fail(&err);
    const clef_vision_config *vc = &mf->cfg.vision;
    size_t D = (size_t)vc->out_hidden_size, P = (size_t)vc->patch_dim;
    int rc = 1;

    if (pixels) {
        clef_vision_image im = {0};
        if (sscanf(grid, "%d,%d,%d", &im.grid_t, &im.grid_h, &im.grid_w) != 3) {
            fprintf(stderr, "vision_tool: bad --grid %s\n", grid);
            return 1;
        }
        size_t len = 0, Np = (size_t)im.grid_t * (size_t)im.grid_h * (size_t)im.grid_w;
        char *px = read_all(pixels, &len);
        if (!px || len != Np * P * sizeof(float)) {
            fprintf(stderr, "vision_tool: %s: expected %zu bytes, got %zu\n", pixels, Np * P * sizeof(float), len);
            return 1;
        }
        im.pixel_values = (const float *)px;
        size_t N = clef_vision_tokens(vc, &im);
        float *rows = ops->alloc(ops, N * D + 1);
        if (clef_vision_forward(ops, vc, &mf->vision, &im, 1, NULL, rows, &err)) return fail(&err);
        if (write_file(out, NULL, rows, N * D * sizeof(float))) { perror(out); return 1; }
        printf("{\"rows\":[%zu,%zu]}\n", N, D);
        ops->free(ops, rows);
        free(px);
        rc = 0;
    } else {
        char tp[4096];
        snprintf(tp, sizeof tp, "%s/tokenizer.json", model);
        clef_tokenizer *tok = clef_tokenizer_load(tp, CLEF_SPLIT_FROM_FILE, &err);
        if (!tok) return fail(&err);
        size_t len = 0;
        char *body = read_all(request, &len);
        if (!body) { perror(request); return 1; }
        json_limits lim = {0};
        json_doc *doc = clef_json_parse(body, len, &lim, &err);
        if (!doc) return fail(&err);
        clef_request req;
        memset(&req, 0, sizeof req);
        if (clef_request_parse(clef_json_doc_root(doc), &req, &err)) return fail(&err);
        clef_image_opts io;
        clef_image_opts_default(&io);
        io.max_bytes = (size_t)16 << 20;
        io.max_source_pixels = (int64_t)64 << 20;
        clef_encode_opts eo = {0};
        eo.image = &io;
        clef_record rec;
        memset(&rec, 0, sizeof rec);
        if (clef_encode_record(tok, &req, &eo, &rec, &err)) return fail(&err);
        size_t n = rec.n_images, N = 0, Np = 0;
        clef_vision_image *vi = calloc(n ? n : 1, sizeof *vi);
        clef_pos_image *pi = calloc(n ? n : 1, sizeof *pi);
        int32_t *pos = malloc(3 * (rec.n_ids ? rec.n_ids : 1) * sizeof(int32_t));
        if (!vi || !pi || !pos) { fprintf(stderr, "vision_tool: out of memory\n"); return 1; }
        clef_buf js;
        clef_buf_init(&js);
        clef_buf_printf(&js, "{\"n_ids\":%zu,\"images\":[", rec.n_ids);
        for (size_t k = 0; k < n; k++) {
            const clef_image *ci = &rec.images[k].image;
            vi[k] = (clef_vision_image){ci->pixel_values, ci->grid_t, ci->grid_h, ci->grid_w};
            pi[k] = (clef_pos_image){rec.images[k].pad_start, rec.images[k].n_pad, ci->grid_t, ci->grid_h, ci->grid_w};
            N += clef_vision_tokens(vc, &vi[k]);
            Np += ci->n_patches;
            char hx[65];
            clef_sha256_hex(ci->pixel_values, ci->n_patches * ci->patch_dim * sizeof(float), hx);
            clef_buf_printf(&js, "%s{\"grid_thw\":[%d,%d,%d],\"pad_start\":%zu,\"n_pad\":%zu,\"pixel_values_sha256\":\"%s\"}",
                            k ? "," : "", ci->grid_t, ci->grid_h, ci->grid_w, rec.images[k].pad_start,
                            rec.images[k].n_pad, hx);
        }
        clef_buf_printf(&js, "],\"rows\":[%zu,%zu]}", N, D);
        if (clef_mrope_positions(rec.n_ids, pi, n, vc->spatial_merge_size, pos, pos + rec.n_ids,
                                 pos + 2 * rec.n_ids, &err))
            return fail(&err);
        float *rows = ops->alloc(ops, N * D + 1);
        float *px = malloc((Np ? Np : 1) * P * sizeof(float));
        if (!rows || !px) { fprintf(stderr, "vision_tool: out of memory\n"); return 1; }
        size_t o = 0;
        for (size_t k = 0; k < n; k++) {
            memcpy(px + o * P, rec.images[k].image.pixel_values, rec.images[k].image.n_patches * P * sizeof(float));
            o += rec.images[k].image.n_patches;
        }
        if (n && clef_vision_forward(ops, vc, &mf->vision, vi, n, NULL, rows, &err)) return fail(&err);
        if (write_file(out, "rows.f32", rows, N * D * sizeof(float)) ||
            write_file(out, "positions.i32", pos, 3 * rec.n_ids * sizeof(int32_t)) ||
            write_file(out, "pixels.f32", px, Np * P * sizeof(float))) {
            perror(out);
            return 1;
        }
        if (js.oom) return 1;
        printf("%s\n", js.data);
        clef_buf_free(&js);
        ops->free(ops, rows);
        free(px);
        free(pos);
        free(vi);
        free(pi);
        clef_record_free(&rec);
        clef_request_free(&req);
        clef_json_doc_free(doc);
        clef_tokenizer_free(tok);
        free(body);
        rc = 0;
    }
    ops->destroy(ops);
    clef_model_close(mf);
    return rc;
}
