/* PNG via libpng's low-level API, converting to RGB exactly as Pillow's PngImagePlugin +
 * convert("RGB") does: grey 1/2/4-bit scaled to 0..255 (x255, x85, x17); 16-bit RGB/RGBA/grey-alpha
 * keep the high byte; 16-bit grey opens as I;16 and convert("RGB") clamps the value to 255; palette
 * indices map through PLTE (an index past the palette gives black); alpha and tRNS are dropped; gAMA,
 * cHRM, sRGB and iCCP are ignored (Pillow converts nothing). The eXIf chunk's Orientation is
 * reported for exif_transpose. libpng errors longjmp back here; nothing leaks.
 * At the native grid (torchvision.io.decode_image(..., ImageReadMode.RGB)) 16-bit PNGs stay 16-bit:
 * the samples as stored, grey repeated in the three channels, alpha dropped (measured on the grey,
 * grey+alpha, RGB and RGBA fixtures); 8-bit and lower decode as Pillow's. */
#include <png.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

#include "image/decoders.h"
#include "image/orient.h"
#include "image/size_check.h"

typedef struct {
    const uint8_t *p;
    size_t n, off;
    char msg[200];
    uint8_t *raw;      /* whole image (interlaced) or one row */
    uint8_t **rows;
    int tv;
    int past_image; /* errors after the pixels (in chunks after IDAT) are ignored, as Pillow does */
} png_src;

static void rd(png_structp png, png_bytep out, size_t len) {
    png_src *s = png_get_io_ptr(png);
    if (len > s->n - s->off) png_error(png, "truncated PNG data");
    memcpy(out, s->p + s->off, len);
    s->off += len;
}

static void on_error(png_structp png, png_const_charp msg) {
    png_src *s = png_get_error_ptr(png);
    snprintf(s->msg, sizeof s->msg, "%s", msg);
    png_longjmp(png, 1);
}

static void on_warning(png_structp png, png_const_charp msg) {
    (void)png;
    (void)msg;
}

static void convert_row(const uint8_t *r, uint8_t *o, int w, int ct, int depth, const png_color *pal, int npal) {
    for (int x = 0; x < w; x++, o += 3) {
        switch (ct) {
        case PNG_COLOR_TYPE_GRAY:
            if (depth == 16) {
                unsigned v = (unsigned)r[2 * x] << 8 | r[2 * x + 1];
                o[0] = o[1] = o[2] = (uint8_t)(v > 255 ? 255 : v);
            } else {
                unsigned v = r[x]; /* unpacked by png_set_packing: 0 .. 2^depth-1 */
                if (depth == 1) v *= 255;
                else if (depth == 2) v *= 85;
                else if (depth == 4) v *= 17;
                o[0] = o[1] = o[2] = (uint8_t)v;
            }
            break;
        case PNG_COLOR_TYPE_GRAY_ALPHA: {
            int b = depth == 16 ? 4 : 2;
            o[0] = o[1] = o[2] = r[b * x];
            break;
        }
        case PNG_COLOR_TYPE_RGB: {
            int b = depth == 16 ? 2 : 1;
            o[0] = r[(3 * x + 0) * b];
            o[1] = r[(3 * x + 1) * b];
            o[2] = r[(3 * x + 2) * b];
            break;
        }
        case PNG_COLOR_TYPE_RGB_ALPHA: {
            int b = depth == 16 ? 2 : 1;
            o[0] = r[(4 * x + 0) * b];
            o[1] = r[(4 * x + 1) * b];
            o[2] = r[(4 * x + 2) * b];
            break;
        }
        default: { /* palette */
            int i = r[x];
            if (i < npal) {
                o[0] = pal[i].red;
                o[1] = pal[i].green;
                o[2] = pal[i].blue;
            } else {
                o[0] = o[1] = o[2] = 0;
            }
        }
        }
    }
}

/* 16-bit rows (big-endian samples) to interleaved uint16 RGB, torchvision's way. */
static void convert_row16(const uint8_t *r, uint16_t *o, int w, int ct) {
    const int ch = ct == PNG_COLOR_TYPE_GRAY ? 1 : ct == PNG_COLOR_TYPE_GRAY_ALPHA ? 2 : ct == PNG_COLOR_TYPE_RGB ? 3 : 4;
    for (int x = 0; x < w; x++, o += 3) {
        const uint8_t *p = r + (size_t)x * ch * 2;
        for (int c = 0; c < 3; c++) {
            const uint8_t *q = ch >= 3 ? p + 2 * c : p; /* grey: the same sample three times */
            o[c] = (uint16_t)((unsigned)q[0] << 8 | q[1]);
        }
    }
}

static int png_body(png_structp png, png_infop info, png_src *s, const clef_image_opts *o, clef_rgb *out,
                    int *orient, clef_err *err) {
    png_uint_32 w, h;
    int depth, ct, il;
    png_read_info(png, info);
    png_get_IHDR(png, info, &w, &h, &depth, &ct, &il, NULL, NULL);
    const int header_only = clef_image_check_size((int64_t)w, (int64_t)h, o, err); /* 1: a probe */
    if (header_only < 0) return -1;
    if (depth < 8) png_set_packing(png);
    const int wide = s->tv && depth == 16 && ct != PNG_COLOR_TYPE_PALETTE;
    int passes = png_set_interlace_handling(png);
    png_read_update_info(png, info);
    size_t rowbytes = png_get_rowbytes(png, info);
    png_colorp pal = NULL;
    int npal = 0;
    if (ct == PNG_COLOR_TYPE_PALETTE && !png_get_PLTE(png, info, &pal, &npal)) {
        clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "PNG palette image without a PLTE chunk");
        return -1;
    }
    if (header_only) return -1;
    if (wide ? clef_rgb_alloc16(out, (int)w, (int)h, err) : clef_rgb_alloc(out, (int)w, (int)h, err)) return -1;
    if (passes > 1) {
        if (rowbytes > SIZE_MAX / h) {
            clef_err_set(err, CLEF_E_LIMIT, "PNG too large");
            return -1;
        }
        s->raw = malloc(rowbytes * h);
        s->rows = malloc(sizeof(uint8_t *) * h);
        if (!s->raw || !s->rows) {
            clef_err_set(err, CLEF_E_OOM, "out of memory decoding a PNG");
            return -1;
        }
        for (png_uint_32 y = 0; y < h; y++) s->rows[y] = s->raw + rowbytes * y;
        png_read_image(png, s->rows);
        for (png_uint_32 y = 0; y < h; y++) {
            if (wide) convert_row16(s->rows[y], out->px16 + (size_t)y * w * 3, (int)w, ct);
            else convert_row(s->rows[y], out->px + (size_t)y * w * 3, (int)w, ct, depth, pal, npal);
        }
    } else {
        s->raw = malloc(rowbytes);
        if (!s->raw) {
            clef_err_set(err, CLEF_E_OOM, "out of memory decoding a PNG");
            return -1;
        }
        for (png_uint_32 y = 0; y < h; y++) {
            png_read_row(png, s->raw, NULL);
            if (wide) convert_row16(s->raw, out->px16 + (size_t)y * w * 3, (int)w, ct);
            else convert_row(s->raw, out->px + (size_t)y * w * 3, (int)w, ct, depth, pal, npal);
        }
    }
    s->past_image = 1;
    png_read_end(png, info);
#ifdef PNG_eXIf_SUPPORTED
    png_uint_32 exn = 0;
    png_bytep ex = NULL;
    if (png_get_eXIf_1(png, info, &exn, &ex) && ex) *orient = clef_exif_orientation(ex, exn);
#endif
    if (*orient == 0) { /* Pillow's getexif falls back to the XMP packet's tiff:Orientation */
        png_textp tx = NULL;
        int nt = 0;
        if (png_get_text(png, info, &tx, &nt) > 0 && tx)
            for (int i = 0; i < nt; i++)
                if (tx[i].key && tx[i].text && !strcmp(tx[i].key, "XML:com.adobe.xmp")) {
                    *orient = clef_xmp_orientation((const uint8_t *)tx[i].text, strlen(tx[i].text));
                    break;
                }
    }
    return 0;
}

int clef_decode_png(const uint8_t *p, size_t n, const clef_image_opts *o, int tv, clef_rgb *out, int *orient,
                    clef_err *err) {
    /* Everything the longjmp path needs lives behind pointers that are not modified after setjmp. */
    png_src *s = calloc(1, sizeof *s);
    if (!s) return clef_err_set(err, CLEF_E_OOM, "out of memory (libpng)");
    s->p = p;
    s->n = n;
    memset(out, 0, sizeof *out);
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, s, on_error, on_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!png || !info) {
        if (png) png_destroy_read_struct(&png, NULL, NULL);
        free(s);
        return clef_err_set(err, CLEF_E_OOM, "out of memory (libpng)");
    }
    int rc;
    if (setjmp(png_jmpbuf(png))) {
        if (s->past_image) {
            rc = 0;
        } else {
            clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "cannot decode PNG: %s", s->msg[0] ? s->msg : "error");
            clef_rgb_free(out);
            rc = -1;
        }
        goto done;
    }
    s->tv = tv;
    png_set_read_fn(png, s, rd);
    png_set_user_limits(png, 0x7fffffff, 0x7fffffff);
    png_set_chunk_cache_max(png, 1000);
    png_set_chunk_malloc_max(png, 16u << 20);
    /* Pillow verifies CRCs of critical chunks and ignores bad ancillary ones. */
    png_set_crc_action(png, PNG_CRC_DEFAULT, PNG_CRC_QUIET_USE);
    rc = png_body(png, info, s, o, out, orient, err);
    if (rc) clef_rgb_free(out);
done:
    png_destroy_read_struct(&png, &info, NULL);
    free(s->raw);
    free(s->rows);
    free(s);
    return rc;
}
