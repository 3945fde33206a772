/* GIF via giflib, first frame, as Pillow's GifImagePlugin opens it (mode P, or L without a palette)
 * and convert("RGB") maps it: the image is the logical screen, grown to hold the first frame; pixels
 * outside the frame hold the frame's transparent index when it has one, else index 0; indices map
 * through the local colour table, else the global one (an index past the table gives black); no
 * table at all gives grey levels. */
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
    size_t k = (size_t)len;
    if (k > s->n - s->off) k = s->n - s->off;
    memcpy(buf, s->p + s->off, k);
    s->off += k;
    return (int)k;
}

int clef_decode_gif(const uint8_t *p, size_t n, const clef_image_opts *o, clef_rgb *out, clef_err *err) {
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
        GifImageDesc *d = &g->Image;
        int64_t W = g->SWidth, H = g->SHeight;
        if ((int64_t)d->Left + d->Width > W) W = (int64_t)d->Left + d->Width;
        if ((int64_t)d->Top + d->Height > H) H = (int64_t)d->Top + d->Height;
        if (clef_image_check_size(W, H, o, err)) goto done;
        if (d->Width <= 0 || d->Height <= 0) {
            clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "cannot decode GIF: empty frame");
            goto done;
        }
        idx = malloc((size_t)W * (size_t)H);
        line = malloc((size_t)d->Width);
        if (!idx || !line) {
            clef_err_set(err, CLEF_E_OOM, "out of memory decoding a GIF");
            goto done;
        }
        memset(idx, trans >= 0 ? trans : 0, (size_t)W * (size_t)H);
        static const int start[4] = {0, 4, 2, 1}, step[4] = {8, 8, 4, 2};
        int passes = d->Interlace ? 4 : 1;
        for (int pass = 0; pass < passes; pass++) {
            int y0 = d->Interlace ? start[pass] : 0, dy = d->Interlace ? step[pass] : 1;
            for (int y = y0; y < d->Height; y += dy) {
                if (DGifGetLine(g, line, d->Width) == GIF_ERROR) goto gif_error;
                memcpy(idx + (size_t)(d->Top + y) * W + d->Left, line, (size_t)d->Width);
            }
        }
        ColorMapObject *cm = d->ColorMap ? d->ColorMap : g->SColorMap;
        if (clef_rgb_alloc(out, (int)W, (int)H, err)) goto done;
        for (size_t i = 0, np = (size_t)W * H; i < np; i++) {
            uint8_t *q = out->px + 3 * i;
            int v = idx[i];
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
