/* GIF via giflib, first frame, in two flavours.
 * Pillow (GifImagePlugin, then convert("RGB")): the image is the logical screen grown to hold the
 * first frame; pixels outside the frame hold the frame's transparent index when it has one, else
 * index 0; indices map through the local colour table, else the global one (past the table: black);
 * no table gives grey levels. Transparent pixels keep their palette colour.
 * torchvision.io.decode_gif: the canvas is max(screen, first frame size); it is filled with the global
 * table's background colour (black without a global table) and the frame is drawn at its offset,
 * skipping transparent pixels. An animated GIF decodes to several images there (which the reference
 * processor turns into several images); we refuse it at the native grid. */
#include <stdlib.h>
#include <string.h>

#include <gif_lib.h>

#include "image/image_internal.h"

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

/* Skips the rest of the file's records; counts further images. -1 on a read error. */
static int count_more_images(GifFileType *g) {
    int more = 0;
    for (int guard = 0; guard < 100000; guard++) {
        GifRecordType rt;
        if (DGifGetRecordType(g, &rt) == GIF_ERROR) return -1;
        if (rt == TERMINATE_RECORD_TYPE) return more;
        if (rt == EXTENSION_RECORD_TYPE) {
            int code;
            GifByteType *ext;
            if (DGifGetExtension(g, &code, &ext) == GIF_ERROR) return -1;
            while (ext)
                if (DGifGetExtensionNext(g, &ext) == GIF_ERROR) return -1;
        } else if (rt == IMAGE_DESC_RECORD_TYPE) {
            if (DGifGetImageDesc(g) == GIF_ERROR) return -1;
            return more + 1; /* one more is enough to know */
        }
    }
    return more;
}

int clef_decode_gif(const uint8_t *p, size_t n, const clef_image_opts *o, int tv, clef_rgb *out, clef_err *err) {
    memset(out, 0, sizeof *out);
    gsrc s = {p, n, 0};
    int gerr = 0, rc = -1, trans = -1;
    uint8_t *idx = NULL, *line = NULL;
    GifFileType *g = DGifOpen(&s, gread, &gerr);
    if (!g) return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "cannot decode GIF: %s", GifErrorString(gerr));
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
            while (ext) {
                if (DGifGetExtensionNext(g, &ext) == GIF_ERROR) goto gif_error;
            }
            continue;
        }
        if (rt != IMAGE_DESC_RECORD_TYPE) continue;
        if (DGifGetImageDesc(g) == GIF_ERROR) goto gif_error;
        GifImageDesc d = g->Image;
        if (d.Width <= 0 || d.Height <= 0 || d.Left < 0 || d.Top < 0) {
            clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "cannot decode GIF: empty frame");
            goto done;
        }
        int64_t W, H;
        if (tv) {
            W = g->SWidth > d.Width ? g->SWidth : d.Width;
            H = g->SHeight > d.Height ? g->SHeight : d.Height;
            if ((int64_t)d.Left + d.Width > W || (int64_t)d.Top + d.Height > H) {
                clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "cannot decode GIF: frame outside the canvas");
                goto done;
            }
        } else {
            W = g->SWidth > (int64_t)d.Left + d.Width ? g->SWidth : (int64_t)d.Left + d.Width;
            H = g->SHeight > (int64_t)d.Top + d.Height ? g->SHeight : (int64_t)d.Top + d.Height;
        }
        if (clef_image_check_size(W, H, o, err)) goto done;
        idx = malloc((size_t)d.Width * (size_t)d.Height);
        line = malloc((size_t)d.Width);
        if (!idx || !line) {
            clef_err_set(err, CLEF_E_OOM, "out of memory decoding a GIF");
            goto done;
        }
        static const int start[4] = {0, 4, 2, 1}, step[4] = {8, 8, 4, 2};
        int passes = d.Interlace ? 4 : 1;
        for (int pass = 0; pass < passes; pass++) {
            int y0 = d.Interlace ? start[pass] : 0, dy = d.Interlace ? step[pass] : 1;
            for (int y = y0; y < d.Height; y += dy) {
                if (DGifGetLine(g, line, d.Width) == GIF_ERROR) goto gif_error;
                memcpy(idx + (size_t)y * d.Width, line, (size_t)d.Width);
            }
        }
        const ColorMapObject *cm = d.ColorMap ? d.ColorMap : g->SColorMap;
        if (clef_rgb_alloc(out, (int)W, (int)H, err)) goto done;
        if (tv) {
            if (!cm) {
                clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "cannot decode GIF: no colour table");
                goto done;
            }
            int more = count_more_images(g);
            if (more < 0) goto gif_error;
            if (more > 0) {
                clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "animated GIF is not supported at the native grid");
                goto done;
            }
            uint8_t bg[3] = {0, 0, 0};
            if (g->SColorMap && g->SBackGroundColor < g->SColorMap->ColorCount) {
                bg[0] = g->SColorMap->Colors[g->SBackGroundColor].Red;
                bg[1] = g->SColorMap->Colors[g->SBackGroundColor].Green;
                bg[2] = g->SColorMap->Colors[g->SBackGroundColor].Blue;
            }
            /* torchvision fills the screen area; a first frame larger than the screen covers the rest */
            for (int64_t y = 0; y < H; y++)
                for (int64_t x = 0; x < W; x++) memcpy(out->px + ((size_t)y * W + x) * 3, bg, 3);
            for (int y = 0; y < d.Height; y++)
                for (int x = 0; x < d.Width; x++) {
                    int v = idx[(size_t)y * d.Width + x];
                    if (v == trans) continue;
                    put(out->px + ((size_t)(y + d.Top) * W + (x + d.Left)) * 3, cm, v);
                }
        } else {
            int fillv = trans >= 0 ? trans : 0;
            for (size_t i = 0, np = (size_t)W * H; i < np; i++) put(out->px + 3 * i, cm, fillv);
            for (int y = 0; y < d.Height; y++)
                for (int x = 0; x < d.Width; x++)
                    put(out->px + ((size_t)(y + d.Top) * W + (x + d.Left)) * 3, cm, idx[(size_t)y * d.Width + x]);
        }
        rc = 0;
        goto done;
    }
gif_error:
    clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "cannot decode GIF: %s", GifErrorString(g->Error));
done:
    if (rc) clef_rgb_free(out);
    free(idx);
    free(line);
    DGifCloseFile(g, &gerr);
    return rc;
}
