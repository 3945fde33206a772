/* GIF via giflib, in two flavours.
 * Pillow (GifImagePlugin, then convert("RGB")), first frame only: the image is the logical screen
 * grown to hold the first frame; pixels outside the frame hold the frame's transparent index when it
 * has one, else index 0; indices map through the local colour table, else the global one (past the
 * table: black); no table gives grey levels. Transparent pixels keep their palette colour.
 * torchvision.io.decode_gif (DGifSlurp, then every frame): the canvas is max(screen, first frame
 * size). Frame i starts as a copy of frame i-1 when its own graphics control block says "do not
 * dispose" (1), else as the global table's background colour (black without a global table); then
 * its pixels are drawn at its offset, skipping its transparent index. A frame's control block is the
 * first one since the previous frame, used only when 4 bytes long (giflib's DGifSavedExtensionToGCB).
 * Every frame is decoded, so a broken later frame fails the whole image, as DGifSlurp does. The
 * processor makes one image per frame. Where torchvision reads or writes out of bounds (a frame
 * outside the canvas, an index past the colour table, a background index past it, the canvas area
 * outside the screen) we refuse or use black: those are undefined there. */
#include <stdlib.h>
#include <string.h>

#include <gif_lib.h>

#include "image/decoders.h"
#include "image/orient.h"
#include "image/size_check.h"

typedef struct {
    const uint8_t *p;
    size_t n, off;
} gsrc;

static int gread(GifFileType *g, GifByteType *buf, int len) {
    gsrc *s = g->UserData;
    size_t k = len > 0 ? (size_t)len : 0;
    if (k > s->n - s->off) k = s->n - s->off;
    memcpy(buf, s->p + s->off, k);
    s->off += k;
    return (int)k;
}

static void put(uint8_t *q, const ColorMapObject *cm, int v) {
    if (!cm) {
        q[0] = q[1] = q[2] = (uint8_t)v;
    } else if (v < cm->ColorCount) {
        q[0] = cm->Colors[v].Red;
        q[1] = cm->Colors[v].Green;
        q[2] = cm->Colors[v].Blue;
    } else {
        q[0] = q[1] = q[2] = 0;
    }
}

/* Reads the current frame's raster (after DGifGetImageDesc) into idx (d->Width * d->Height). */
static int read_raster(GifFileType *g, const GifImageDesc *d, uint8_t *idx) {
    static const int start[4] = {0, 4, 2, 1}, step[4] = {8, 8, 4, 2};
    int passes = d->Interlace ? 4 : 1;
    for (int pass = 0; pass < passes; pass++) {
        int y0 = d->Interlace ? start[pass] : 0, dy = d->Interlace ? step[pass] : 1;
        for (int y = y0; y < d->Height; y += dy)
            if (DGifGetLine(g, idx + (size_t)y * d->Width, d->Width) == GIF_ERROR) return -1;
    }
    return 0;
}

/* Skips an extension's sub-blocks after the first; -1 on a read error. */
static int skip_ext(GifFileType *g, GifByteType *ext) {
    while (ext)
        if (DGifGetExtensionNext(g, &ext) == GIF_ERROR) return -1;
    return 0;
}

/* Skips the current frame's LZW data (after DGifGetImageDesc) without decoding it. */
static int skip_raster(GifFileType *g) {
    int size;
    GifByteType *block;
    if (DGifGetCode(g, &size, &block) == GIF_ERROR) return -1;
    while (block)
        if (DGifGetCodeNext(g, &block) == GIF_ERROR) return -1;
    return 0;
}

/* Pillow's first frame. */
static int pillow_first(GifFileType *g, const clef_image_opts *o, clef_rgb *out, clef_err *err) {
    int trans = -1, rc = -1;
    uint8_t *idx = NULL;
    for (;;) {
        GifRecordType rt;
        if (DGifGetRecordType(g, &rt) == GIF_ERROR) goto gif_error;
        if (rt == TERMINATE_RECORD_TYPE) {
            clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "cannot decode GIF: no image");
            goto done;
        }
        if (rt == EXTENSION_RECORD_TYPE) {
            int code;
            GifByteType *ext;
            if (DGifGetExtension(g, &code, &ext) == GIF_ERROR) goto gif_error;
            if (code == GRAPHICS_EXT_FUNC_CODE && ext && ext[0] >= 4) trans = (ext[1] & 1) ? ext[4] : -1;
            if (skip_ext(g, ext)) goto gif_error;
            continue;
        }
        if (rt != IMAGE_DESC_RECORD_TYPE) continue;
        if (DGifGetImageDesc(g) == GIF_ERROR) goto gif_error;
        GifImageDesc d = g->Image;
        if (d.Width <= 0 || d.Height <= 0 || d.Left < 0 || d.Top < 0) {
            clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "cannot decode GIF: empty frame");
            goto done;
        }
        int64_t W = g->SWidth > (int64_t)d.Left + d.Width ? g->SWidth : (int64_t)d.Left + d.Width;
        int64_t H = g->SHeight > (int64_t)d.Top + d.Height ? g->SHeight : (int64_t)d.Top + d.Height;
        if (clef_image_check_size(W, H, o, err)) goto done;
        idx = malloc((size_t)d.Width * (size_t)d.Height);
        if (!idx) {
            clef_err_set(err, CLEF_E_OOM, "out of memory decoding a GIF");
            goto done;
        }
        if (read_raster(g, &d, idx)) goto gif_error;
        const ColorMapObject *cm = d.ColorMap ? d.ColorMap : g->SColorMap;
        if (clef_rgb_alloc(out, (int)W, (int)H, err)) goto done;
        int fillv = trans >= 0 ? trans : 0;
        for (size_t i = 0, np = (size_t)W * H; i < np; i++) put(out->px + 3 * i, cm, fillv);
        for (int y = 0; y < d.Height; y++)
            for (int x = 0; x < d.Width; x++)
                put(out->px + ((size_t)(y + d.Top) * W + (x + d.Left)) * 3, cm, idx[(size_t)y * d.Width + x]);
        rc = 0;
        goto done;
    }
gif_error:
    clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "cannot decode GIF: %s", GifErrorString(g->Error));
done:
    if (rc) clef_rgb_free(out);
    free(idx);
    return rc;
}

/* One of torchvision's frames: the previous frame kept (prev: disposal 1) or the background, then
 * the raster's pixels that are not transparent, at the frame's place on the canvas. */
static void paint_frame(clef_rgb *cur, const clef_rgb *prev, const uint8_t bg[3], int64_t W, int64_t H,
                        const GifImageDesc *d, const uint8_t *idx, const ColorMapObject *cm, int trans) {
    if (prev) {
        memcpy(cur->px, prev->px, (size_t)W * H * 3);
    } else {
        /* torchvision fills the screen area; a first frame larger than the screen covers the rest */
        for (size_t i = 0, np = (size_t)W * H; i < np; i++) memcpy(cur->px + 3 * i, bg, 3);
    }
    for (int y = 0; y < d->Height; y++)
        for (int x = 0; x < d->Width; x++) {
            int v = idx[(size_t)y * d->Width + x];
            if (v == trans) continue;
            put(cur->px + ((size_t)(y + d->Top) * W + (x + d->Left)) * 3, cm, v);
        }
}

/* torchvision's frames. */
static int torchvision_frames(GifFileType *g, const clef_image_opts *o, clef_rgb **frames, int *n_frames,
                              clef_err *err) {
    int rc = -1, nf = 0, cap = 0;
    int have_gcb = 0, disposal = 0, trans = -1; /* the current frame's control block (giflib's defaults) */
    int64_t W = 0, H = 0, total = 0;
    uint8_t *idx = NULL;
    size_t idx_cap = 0;
    clef_rgb *f = NULL;
    uint8_t bg[3] = {0, 0, 0};
    if (g->SColorMap && g->SBackGroundColor >= 0 && g->SBackGroundColor < g->SColorMap->ColorCount) {
        bg[0] = g->SColorMap->Colors[g->SBackGroundColor].Red;
        bg[1] = g->SColorMap->Colors[g->SBackGroundColor].Green;
        bg[2] = g->SColorMap->Colors[g->SBackGroundColor].Blue;
    }
    for (long records = 0;; records++) {
        if (records > (1L << 24)) { /* every record takes bytes: only a pathological file gets here */
            clef_err_set(err, CLEF_E_LIMIT, "GIF with too many records");
            goto done;
        }
        GifRecordType rt;
        if (DGifGetRecordType(g, &rt) == GIF_ERROR) goto gif_error;
        if (rt == TERMINATE_RECORD_TYPE) break;
        if (rt == EXTENSION_RECORD_TYPE) {
            int code;
            GifByteType *ext;
            if (DGifGetExtension(g, &code, &ext) == GIF_ERROR) goto gif_error;
            if (code == GRAPHICS_EXT_FUNC_CODE && ext && !have_gcb) {
                have_gcb = 1;
                if (ext[0] == 4) {
                    disposal = (ext[1] >> 2) & 7;
                    trans = (ext[1] & 1) ? ext[4] : -1;
                }
            }
            if (skip_ext(g, ext)) goto gif_error;
            continue;
        }
        if (rt != IMAGE_DESC_RECORD_TYPE) continue;
        if (DGifGetImageDesc(g) == GIF_ERROR) goto gif_error;
        GifImageDesc d = g->Image;
        if (d.Width <= 0 || d.Height <= 0 || d.Left < 0 || d.Top < 0) {
            clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "cannot decode GIF: empty frame");
            goto done;
        }
        if (nf == 0) {
            W = g->SWidth > d.Width ? g->SWidth : d.Width;
            H = g->SHeight > d.Height ? g->SHeight : d.Height;
            if (clef_image_check_size(W, H, o, err) < 0) goto done; /* 1: a probe (below) */
        }
        if ((int64_t)d.Left + d.Width > W || (int64_t)d.Top + d.Height > H) {
            clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "cannot decode GIF: frame %d outside the canvas", nf);
            goto done;
        }
        /* all frames together within our pixel limit: it bounds memory and the decoding work */
        total += W * H;
        if (o->max_source_pixels > 0 && total > o->max_source_pixels) {
            clef_err_set(err, CLEF_E_LIMIT,
                         "animated GIF of %d+ frames of %lldx%lld pixels is over this server's limit of %lld pixels",
                         nf + 1, (long long)W, (long long)H, (long long)o->max_source_pixels);
            goto done;
        }
        if (o->probe) {
            /* the frames are counted, their rasters skipped undecoded: no pixel is written */
            if (skip_raster(g)) goto gif_error;
            nf++;
            o->probe->n_frames = nf;
            have_gcb = 0, disposal = 0, trans = -1;
            continue;
        }
        size_t need = (size_t)d.Width * (size_t)d.Height;
        if (need > idx_cap) {
            free(idx);
            idx = malloc(need);
            idx_cap = idx ? need : 0;
            if (!idx) goto oom;
        }
        if (read_raster(g, &d, idx)) goto gif_error;
        const ColorMapObject *cm = d.ColorMap ? d.ColorMap : g->SColorMap;
        if (!cm) {
            clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "cannot decode GIF: no colour table");
            goto done;
        }
        if (nf == cap) {
            int ncap = cap ? cap * 2 : 4;
            clef_rgb *nfr = realloc(f, sizeof *f * (size_t)ncap);
            if (!nfr) goto oom;
            memset(nfr + cap, 0, sizeof *f * (size_t)(ncap - cap));
            f = nfr;
            cap = ncap;
        }
        clef_rgb *cur = &f[nf];
        if (clef_rgb_alloc(cur, (int)W, (int)H, err)) goto done;
        nf++;
        paint_frame(cur, nf > 1 && disposal == 1 ? &f[nf - 2] : NULL, bg, W, H, &d, idx, cm, trans);
        have_gcb = 0, disposal = 0, trans = -1;
    }
    if (nf == 0) {
        clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "cannot decode GIF: no image");
        goto done;
    }
    if (o->probe) goto done; /* counted: -1 with no error, as every decoder stops for a probe */
    *frames = f;
    *n_frames = nf;
    f = NULL;
    rc = 0;
    goto done;
oom:
    clef_err_set(err, CLEF_E_OOM, "out of memory decoding a GIF");
    goto done;
gif_error:
    clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "cannot decode GIF: %s", GifErrorString(g->Error));
done:
    clef_rgb_free_all(f, nf);
    free(idx);
    return rc;
}

int clef_decode_gif(const uint8_t *p, size_t n, const clef_image_opts *o, int tv, clef_rgb **frames, int *n_frames,
                    clef_err *err) {
    *frames = NULL;
    *n_frames = 0;
    gsrc s = {p, n, 0};
    int gerr = 0, rc;
    GifFileType *g = DGifOpen(&s, gread, &gerr);
    if (!g) return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "cannot decode GIF: %s", GifErrorString(gerr));
    if (tv) {
        rc = torchvision_frames(g, o, frames, n_frames, err);
    } else {
        clef_rgb *one = calloc(1, sizeof *one);
        if (!one) {
            rc = clef_err_set(err, CLEF_E_OOM, "out of memory decoding a GIF");
        } else if ((rc = pillow_first(g, o, one, err)) != 0) {
            free(one);
        } else {
            *frames = one;
            *n_frames = 1;
        }
    }
    DGifCloseFile(g, &gerr);
    return rc;
}
