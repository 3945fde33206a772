/* JPEG via libjpeg-turbo with Pillow's decode settings (JpegDecode.c): default DCT (ISLOW), fancy
 * upsampling on, libjpeg's own colour-space detection; 1 component -> L, 3 -> RGB, 4 -> CMYK read as
 * "CMYK;I" (inverted, Adobe convention) and converted as Pillow's cmyk2rgb. EXIF (first APP1
 * "Exif\0\0") Orientation, else the XMP tiff:Orientation, is reported for exif_transpose. */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

#include "image/decoders.h"
#include "image/orient.h"
#include "image/size_check.h"

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX];
    int hit_eof; /* libjpeg's "Premature end of JPEG file" warning: Pillow raises "image file is truncated" */
} jerr_t;

typedef struct {
    struct jpeg_progress_mgr pub;
    int scans_seen;
} jprog_t;

static void on_error_exit(j_common_ptr c) {
    jerr_t *e = (jerr_t *)c->err;
    c->err->format_message(c, e->msg);
    longjmp(e->jb, 1);
}

static void on_emit(j_common_ptr c, int level) {
    if (level < 0 && c->err->msg_code == JWRN_JPEG_EOF) ((jerr_t *)c->err)->hit_eof = 1;
}

#define MAX_SCANS 1000
static void on_progress(j_common_ptr c) {
    j_decompress_ptr d = (j_decompress_ptr)c;
    if (d->input_scan_number > MAX_SCANS) {
        jerr_t *e = (jerr_t *)c->err;
        snprintf(e->msg, sizeof e->msg, "more than %d scans", MAX_SCANS);
        longjmp(e->jb, 1);
    }
}

static inline uint8_t muldiv255(int a, int b) {
    int t = a * b + 128;
    return (uint8_t)(((t >> 8) + t) >> 8);
}

typedef struct {
    struct jpeg_decompress_struct cinfo;
    jerr_t jerr;
    jprog_t prog;
    uint8_t *row;
} jctx;

static int jpeg_body(jctx *j, const uint8_t *p, size_t n, const clef_image_opts *o, clef_rgb *out, int *orient,
                     clef_err *err) {
    struct jpeg_decompress_struct *c = &j->cinfo;
    jpeg_mem_src(c, p, (unsigned long)n);
    jpeg_save_markers(c, JPEG_APP0 + 1, 0xffff);
    jpeg_read_header(c, TRUE);
    const int header_only = clef_image_check_size((int64_t)c->image_width, (int64_t)c->image_height, o, err);
    if (header_only < 0) return -1; /* 1: a probe, which stops after the header's checks */
    int comps = c->num_components;
    if (comps == 1) c->out_color_space = JCS_GRAYSCALE;
    else if (comps == 3) c->out_color_space = JCS_RGB;
    else if (comps == 4) c->out_color_space = JCS_CMYK;
    else return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "JPEG with %d components is not supported", comps);
    if (header_only) return -1;
    c->dct_method = JDCT_ISLOW;
    c->do_fancy_upsampling = TRUE;
    c->mem->max_memory_to_use = (long)512 << 20;
    int exo = 0, xmpo = 0;
    for (jpeg_saved_marker_ptr m = c->marker_list; m; m = m->next) {
        if (m->marker != JPEG_APP0 + 1) continue;
        if (!exo && m->data_length >= 6 && !memcmp(m->data, "Exif\0\0", 6))
            exo = clef_exif_orientation(m->data, m->data_length) ? clef_exif_orientation(m->data, m->data_length) : -1;
        else if (!xmpo && m->data_length >= 29 && !memcmp(m->data, "http://ns.adobe.com/xap/1.0/\0", 29))
            xmpo = clef_xmp_orientation(m->data + 29, m->data_length - 29);
    }
    *orient = exo > 0 ? exo : xmpo;
    jpeg_start_decompress(c);
    int w = (int)c->output_width, h = (int)c->output_height, oc = c->output_components;
    if (clef_rgb_alloc(out, w, h, err)) return -1;
    j->row = malloc((size_t)w * (size_t)oc);
    if (!j->row) return clef_err_set(err, CLEF_E_OOM, "out of memory decoding a JPEG");
    while (c->output_scanline < c->output_height) {
        int y = (int)c->output_scanline;
        JSAMPROW rp = j->row;
        if (jpeg_read_scanlines(c, &rp, 1) != 1) return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "truncated JPEG");
        uint8_t *d = out->px + (size_t)y * w * 3;
        for (int x = 0; x < w; x++, d += 3) {
            const uint8_t *s = j->row + (size_t)x * oc;
            if (oc == 1) {
                d[0] = d[1] = d[2] = s[0];
            } else if (oc == 3) {
                d[0] = s[0];
                d[1] = s[1];
                d[2] = s[2];
            } else { /* "CMYK;I" then cmyk2rgb */
                int cc = 255 - s[0], mm = 255 - s[1], yy = 255 - s[2], nk = 255 - (255 - s[3]);
                int r = nk - muldiv255(cc, nk), g = nk - muldiv255(mm, nk), b = nk - muldiv255(yy, nk);
                d[0] = (uint8_t)(r < 0 ? 0 : r);
                d[1] = (uint8_t)(g < 0 ? 0 : g);
                d[2] = (uint8_t)(b < 0 ? 0 : b);
            }
        }
    }
    if (j->jerr.hit_eof) return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "cannot decode JPEG: image file is truncated");
    jpeg_finish_decompress(c);
    return 0;
}

int clef_decode_jpeg(const uint8_t *p, size_t n, const clef_image_opts *o, int tv, clef_rgb *out, int *orient,
                     clef_err *err) {
    (void)tv; /* same pixels either way (measured); only the caller's EXIF handling differs */
    memset(out, 0, sizeof *out);
    jctx *j = calloc(1, sizeof *j);
    if (!j) return clef_err_set(err, CLEF_E_OOM, "out of memory (libjpeg)");
    j->cinfo.err = jpeg_std_error(&j->jerr.pub);
    j->jerr.pub.error_exit = on_error_exit;
    j->jerr.pub.emit_message = on_emit;
    int rc;
    if (setjmp(j->jerr.jb)) {
        clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "cannot decode JPEG: %s", j->jerr.msg);
        clef_rgb_free(out);
        rc = -1;
        goto done;
    }
    jpeg_create_decompress(&j->cinfo);
    j->prog.pub.progress_monitor = on_progress;
    j->cinfo.progress = &j->prog.pub;
    rc = jpeg_body(j, p, n, o, out, orient, err);
    if (rc) clef_rgb_free(out);
done:
    jpeg_destroy_decompress(&j->cinfo);
    free(j->row);
    free(j);
    return rc;
}
