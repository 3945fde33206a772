/* RGB24 conversion of decoded video frames, bit-equal to the reference's (PyAV 18.1.0 frame.to_rgb():
 * sws_scale_frame(SWS_BILINEAR) on its bundled FFmpeg 8.1.2, libswscale 9.5) with Debian's FFmpeg 5.1
 * (libswscale 6.7). Measured on the fixture clips and on synthetic frames through PyAV 18.1.0 (every
 * pixel of each frame compared; docs/spec-corrections.md "Video"), the two libraries part in two places:
 *
 *  1. The destination stride. PyAV converts into a frame from av_frame_get_buffer(align 16): its rgb24
 *     row is 3 * FFALIGN(w, 16) bytes. libswscale's x86 SIMD converter for 4:2:0/4:2:2 8-bit to RGB
 *     (the unscaled path, even heights) works in blocks of 8 pixels and, when the row cannot hold the
 *     last whole block, leaves the last w % 8 pixels of every row unwritten: with a tight 3 * w stride
 *     (what clef passed) columns 128-129 of a 130-wide clip stayed 0; PyAV's padded rows get them.
 *     Both versions compute the same values given room, so we convert into rows padded like PyAV's and
 *     copy them out. (Widths 20, 98, 130 of the fixtures: equal with this alone.)
 *
 *  2. 4:2:0 on libswscale's scaled path (sources over 8 bits, and 8-bit ones of odd height: the unscaled
 *     converter takes only even heights). Chroma is interpolated vertically by a 2-tap bilinear filter
 *     and the packed-RGB writer for one luma tap gets the weight of the second chroma row (uvalpha).
 *     libswscale 6.7's writer takes chroma row 0 alone when uvalpha < 2048 and the mean of the two rows
 *     otherwise (half-pixel steps: up to 57 levels off on the 10-bit AV1 fixture); 9.5's weighs the two
 *     rows: U = (u0 * (4096 - a) + u1 * a + 2^18) >> 19 on the 15-bit intermediates. No flag of 6.7
 *     selects that, so clef does this one step itself: it builds the filter as libswscale's initFilter
 *     does (clef_rgb24_vfilter), computes the 8-bit chroma of every output row with 9.5's rounding, and
 *     hands Debian's libswscale a 4:2:2 frame (at the source's luma depth, luma untouched, chroma
 *     C8 << (depth - 8)) whose chroma needs no vertical filter: the writer's one-row path then gives
 *     exactly C8, and the rest (luma rounding, the yuv->rgb tables, clipping) is the same code in both
 *     versions. Odd widths are left to libswscale as they are: there both versions switch to full
 *     horizontal chroma interpolation and 6.7's rounding differs again (not reproduced; no fixture).
 *
 * Colour: sws_scale_frame (9.5) reads the frame's colorspace and range; the legacy sws_scale (ours) does
 * not, so the frame's matrix and range are set with sws_setColorspaceDetails when the frame names them.
 *
 * This is our code, written from reading libswscale (LGPL) to understand it; none of it is copied. */
#include "video/rgb24.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <libavutil/opt.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>

void clef_rgb24_conv_free(clef_rgb24_conv *c) {
    if (!c) return;
    sws_freeContext(c->sws);
    av_frame_free(&c->mid);
    memset(c, 0, sizeof *c);
}

/* C's integer division rounding half away from zero (b > 0). */
static int64_t rounded_div(int64_t a, int64_t b) { return (a >= 0 ? a + b / 2 : a - b / 2) / b; }

int clef_rgb24_filter(int src_h, int dst_h, int src_pos, int dst_pos, int one, int vertical, int **pos_out,
                      int **coef_out, int *size_out, clef_err *err) {
    *pos_out = NULL;
    *coef_out = NULL;
    *size_out = 0;
    if (src_h < 1 || dst_h < 1 || src_h > (1 << 20) || dst_h > (1 << 20) || (one != 1 << 12 && one != 1 << 14))
        return clef_err_set(err, CLEF_E_INTERNAL, "video chroma filter: sizes %d, %d", src_h, dst_h);
    const int64_t inc = (((int64_t)src_h << 16) + (dst_h >> 1)) / dst_h;
    const int64_t fone = (int64_t)1 << 54; /* upscaling: log2(src/dst) = 0 */
    int fs;
    int unscaled = llabs(inc - 0x10000) < 10 && src_pos == dst_pos;
    if (unscaled) fs = 1;
    else {
        fs = inc <= (1 << 16) ? 1 + 2 : 1 + (2 * src_h + dst_h - 1) / dst_h; /* bilinear: size factor 2 */
        if (fs > src_h - 2) fs = src_h - 2;
        if (fs < 1) fs = 1;
    }
    int64_t *f = calloc((size_t)dst_h * fs, sizeof *f);
    int *pos = malloc(sizeof *pos * (size_t)dst_h);
    if (!f || !pos) {
        free(f);
        free(pos);
        return clef_err_set(err, CLEF_E_OOM, "out of memory");
    }
    if (unscaled) {
        for (int i = 0; i < dst_h; i++) {
            f[i] = fone;
            pos[i] = i;
        }
    } else {
        int64_t x = ((dst_pos * inc) >> 7) - ((src_pos * 0x10000) >> 7);
        for (int i = 0; i < dst_h; i++) {
            int64_t xx = (x - (int64_t)(fs - 2) * 65536) / (1 << 17); /* truncating, as C does */
            pos[i] = (int)xx;
            for (int j = 0; j < fs; j++) {
                int64_t d = llabs((xx + j) * ((int64_t)1 << 17) - x) << 13;
                if (inc > (1 << 16)) d = d * dst_h / src_h;
                int64_t c = ((int64_t)1 << 30) - d;
                if (c < 0) c = 0;
                f[(size_t)i * fs + j] = c * (fone >> 30);
            }
            x += 2 * inc;
        }
    }
    /* drop near-zero taps: from the left by shifting (keeping positions monotonic), then count them
     * on the right; the filter size is the largest row's, rounded up to libswscale's x86 alignment
     * (vertical: 2, or 1 when a single tap remains; horizontal: 4) */
    const double cutoff = 0.002 * (double)fone;
    int min_size = 0;
    for (int i = dst_h - 1; i >= 0; i--) {
        int64_t *r = f + (size_t)i * fs;
        int64_t cut = 0;
        for (int j = 0; j < fs; j++) {
            cut += llabs(r[0]);
            if ((double)cut > cutoff) break;
            if (i < dst_h - 1 && pos[i] >= pos[i + 1]) break;
            memmove(r, r + 1, sizeof *r * (size_t)(fs - 1));
            r[fs - 1] = 0;
            pos[i]++;
        }
        int m = fs;
        cut = 0;
        for (int j = fs - 1; j > 0; j--) {
            cut += llabs(r[j]);
            if ((double)cut > cutoff) break;
            m--;
        }
        if (m > min_size) min_size = m;
    }
    int align = vertical ? (min_size == 1 ? 1 : 2) : 4;
    int n = (min_size + align - 1) / align * align;
    int *coef = malloc(sizeof *coef * (size_t)dst_h * n);
    int64_t *row = malloc(sizeof *row * (size_t)n);
    if (!coef || !row) {
        free(f);
        free(pos);
        free(coef);
        free(row);
        return clef_err_set(err, CLEF_E_OOM, "out of memory");
    }
    for (int i = 0; i < dst_h; i++) {
        for (int j = 0; j < n; j++) row[j] = j < fs ? f[(size_t)i * fs + j] : 0;
        /* borders: taps before row 0 or past the last row fold onto the edge */
        if (pos[i] < 0) {
            for (int j = 1; j < n; j++) {
                int left = j + pos[i] > 0 ? j + pos[i] : 0;
                row[left] += row[j];
                row[j] = 0;
            }
            pos[i] = 0;
        }
        if (pos[i] + n > src_h) {
            int shift = pos[i] + n - src_h;
            for (int j = n - 2; j >= 0; j--) {
                int right = j + shift < n - 1 ? j + shift : n - 1;
                row[right] += row[j];
                row[j] = 0;
            }
            pos[i] = src_h - n;
        }
        /* to `one` (12 bits vertical, 14 horizontal), carrying each tap's rounding error into the next */
        int64_t sum = 0, e = 0;
        for (int j = 0; j < n; j++) sum += row[j];
        sum = (sum + one / 2) / one;
        if (sum == 0) sum = 1;
        for (int j = 0; j < n; j++) {
            int64_t v = row[j] + e;
            int64_t iv = rounded_div(v, sum);
            coef[(size_t)i * n + j] = (int)iv;
            e = v - iv * sum;
        }
    }
    free(f);
    free(row);
    *pos_out = pos;
    *coef_out = coef;
    *size_out = n;
    return 0;
}

/* The 4:2:2 format at the depth clef hands Debian's libswscale for a planar 4:2:0 source of `bits`. */
static enum AVPixelFormat mid_format(int bits) {
    if (bits <= 10) return AV_PIX_FMT_YUV422P10LE;
    if (bits == 12) return AV_PIX_FMT_YUV422P12LE;
    if (bits == 14) return AV_PIX_FMT_YUV422P14LE;
    return AV_PIX_FMT_NONE;
}

/* Does 8.1.2 take its scaled path with a 2-tap vertical chroma filter for this frame, and can we do that
 * step (planar 4:2:0 without alpha, little-endian or 8-bit samples of 8..14 bits, even width)? */
static int needs_vchroma(const AVFrame *f, const AVPixFmtDescriptor *d) {
    if (!d || (d->flags & (AV_PIX_FMT_FLAG_RGB | AV_PIX_FMT_FLAG_ALPHA | AV_PIX_FMT_FLAG_BE | AV_PIX_FMT_FLAG_PAL |
                           AV_PIX_FMT_FLAG_HWACCEL | AV_PIX_FMT_FLAG_BITSTREAM | AV_PIX_FMT_FLAG_FLOAT)))
        return 0;
    if (!(d->flags & AV_PIX_FMT_FLAG_PLANAR) || d->nb_components != 3 || d->log2_chroma_w != 1 ||
        d->log2_chroma_h != 1)
        return 0;
    int bits = d->comp[0].depth;
    if (bits < 8 || bits > 14 || mid_format(bits) == AV_PIX_FMT_NONE) return 0;
    for (int k = 0; k < 3; k++)
        if (d->comp[k].plane != k || d->comp[k].depth != bits || d->comp[k].shift != 0) return 0;
    if (f->width & 1) return 0;
    return bits > 8 || (f->height & 1);
}

static int is_full_range(const AVFrame *f) {
    switch (f->format) {
    case AV_PIX_FMT_YUVJ420P:
    case AV_PIX_FMT_YUVJ422P:
    case AV_PIX_FMT_YUVJ444P:
    case AV_PIX_FMT_YUVJ440P:
    case AV_PIX_FMT_YUVJ411P:
        return 1;
    default:
        return f->color_range == AVCOL_RANGE_JPEG;
    }
}

/* Chroma siting as 9.5's sws_scale_frame takes it from the frame (av_chroma_location_enum_to_pos):
 * positions in 1/256 of a sample, -513 where the frame names none (libswscale's default). */
static void chroma_pos(const AVFrame *f, int *x, int *y) {
    *x = *y = -513;
    int loc = (int)f->chroma_location;
    if (loc <= AVCHROMA_LOC_UNSPECIFIED || loc >= AVCHROMA_LOC_NB) return;
    int p = loc - 1;
    *x = (p & 1) * 128;
    *y = ((p >> 1) ^ (p < 4)) * 128;
}

/* libswscale's get_local_pos: a chroma position in the subsampled plane's own 1/256 units. */
static int local_pos(int subsample, int pos) {
    if (pos == -1 || pos <= -513) pos = (128 << subsample) - 128;
    pos += 128;
    return pos >> subsample;
}

/* libswscale's horizontal chroma step (hscale) on plane k of a 4:2:0 frame: every chroma row of
 * (w + 1) / 2 samples to dst_w 15-bit intermediates (sum of samples x 14-bit taps, >> 7 for 8 bits or
 * >> (depth - 1), capped at 2^15 - 1) into rows, ch rows of dst_w. */
static void hscale_chroma(const AVFrame *f, int k, int bits, int ch, int dst_w, const int *hp, const int *hc,
                          int hn, int32_t *rows) {
    const int cw = (f->width + 1) >> 1;
    const int hsh = bits == 8 ? 7 : bits - 1;
    for (int r = 0; r < ch; r++) {
        const uint8_t *line = f->data[k] + (ptrdiff_t)r * f->linesize[k];
        int32_t *out = rows + (size_t)r * dst_w;
        for (int x = 0; x < dst_w; x++) {
            int64_t acc = 0;
            for (int j = 0; j < hn; j++) {
                int cf = hc[(size_t)x * hn + j];
                if (!cf) continue;
                int sx = hp[x] + j;
                sx = sx < 0 ? 0 : sx >= cw ? cw - 1 : sx;
                int smp = bits == 8 ? line[sx] : ((const uint16_t *)line)[sx];
                acc += (int64_t)smp * cf;
            }
            acc >>= hsh;
            out[x] = (int32_t)(acc > 32767 ? 32767 : acc);
        }
    }
}

/* The chroma steps of 9.5 (see the top of this file) into c->mid: horizontal (libswscale's hscale to
 * 15-bit intermediates, filtered when the frame's chroma siting asks for it) then vertical with 9.5's
 * rounding to 8 bits. */
static int build_mid(clef_rgb24_conv *c, const AVFrame *f, const AVPixFmtDescriptor *d, clef_err *err) {
    const int bits = d->comp[0].depth, w = f->width, h = f->height;
    const int cw = (w + 1) >> 1, ch = (h + 1) >> 1;
    const enum AVPixelFormat mf = mid_format(bits);
    const int mbits = bits <= 10 ? 10 : bits;
    if (!c->mid || c->mid->width != w || c->mid->height != h || c->mid->format != mf) {
        av_frame_free(&c->mid);
        c->mid = av_frame_alloc();
        if (!c->mid) return clef_err_set(err, CLEF_E_OOM, "out of memory");
        c->mid->format = mf;
        c->mid->width = w;
        c->mid->height = h;
        if (av_frame_get_buffer(c->mid, 64) < 0) {
            av_frame_free(&c->mid);
            return clef_err_set(err, CLEF_E_OOM, "out of memory for a %dx%d video frame", w, h);
        }
    }
    int xpos, ypos;
    chroma_pos(f, &xpos, &ypos);
    int *vp = NULL, *vc = NULL, vn = 0, *hp = NULL, *hc = NULL, hn = 0;
    if (clef_rgb24_filter(ch, h, local_pos(1, ypos), local_pos(0, -513), 1 << 12, 1, &vp, &vc, &vn, err)) return -1;
    if (clef_rgb24_filter(cw, cw, local_pos(1, xpos), local_pos(1, -513), 1 << 14, 0, &hp, &hc, &hn, err)) {
        free(vp);
        free(vc);
        return -1;
    }
    int32_t *rows = malloc(sizeof *rows * (size_t)cw * ch);
    if (!rows) {
        free(vp);
        free(vc);
        free(hp);
        free(hc);
        return clef_err_set(err, CLEF_E_OOM, "out of memory for a %dx%d video frame", w, h);
    }
    AVFrame *m = c->mid;
    /* luma: the source's samples, at the intermediate's depth (8 and 9 bits shift up to 10: the
     * writer's rounding (Y << (15 - depth) + 64) >> 7 gives the same 8-bit luma) */
    const int ysh = mbits - bits;
    for (int y = 0; y < h; y++) {
        uint16_t *dst = (uint16_t *)(m->data[0] + (size_t)y * m->linesize[0]);
        if (bits == 8) {
            const uint8_t *src = f->data[0] + (ptrdiff_t)y * f->linesize[0];
            for (int x = 0; x < w; x++) dst[x] = (uint16_t)(src[x] << ysh);
        } else {
            const uint16_t *src = (const uint16_t *)(f->data[0] + (ptrdiff_t)y * f->linesize[0]);
            for (int x = 0; x < w; x++) dst[x] = (uint16_t)(src[x] << ysh);
        }
    }
    for (int k = 1; k <= 2; k++) {
        hscale_chroma(f, k, bits, ch, cw, hp, hc, hn, rows);
        /* vertical: (sum of rows x 12-bit taps + 2^18) >> 19, clipped to 8 bits */
        for (int y = 0; y < h; y++) {
            uint16_t *dst = (uint16_t *)(m->data[k] + (size_t)y * m->linesize[k]);
            const int *cf = vc + (size_t)y * vn;
            for (int x = 0; x < cw; x++) {
                int64_t acc = (int64_t)1 << 18;
                for (int j = 0; j < vn; j++) {
                    if (!cf[j]) continue;
                    int r = vp[y] + j;
                    r = r < 0 ? 0 : r >= ch ? ch - 1 : r;
                    acc += (int64_t)rows[(size_t)r * cw + x] * cf[j];
                }
                int64_t v = acc >> 19;
                if (v < 0) v = 0;
                if (v > 255) v = 255;
                dst[x] = (uint16_t)(v << (mbits - 8));
            }
        }
    }
    free(rows);
    free(vp);
    free(vc);
    free(hp);
    free(hc);
    return 0;
}

/* A context for src -> rgb24 (SWS_BILINEAR, as PyAV) with the chroma siting 9.5 would use: the frame's,
 * for the subsampled directions, where the frame names one; kept while nothing changes. */
static int get_sws(clef_rgb24_conv *c, const AVFrame *src, int hpos, int vpos, int colour, clef_err *err) {
    if (c->sws && c->w == src->width && c->h == src->height && c->fmt == src->format && c->hpos == hpos &&
        c->vpos == vpos && c->colour == colour)
        return 0;
    sws_freeContext(c->sws);
    c->sws = sws_alloc_context();
    if (!c->sws) return clef_err_set(err, CLEF_E_OOM, "out of memory");
    struct SwsContext *s = c->sws;
    int bad = av_opt_set_int(s, "srcw", src->width, 0) < 0 || av_opt_set_int(s, "srch", src->height, 0) < 0 ||
              av_opt_set_int(s, "dstw", src->width, 0) < 0 || av_opt_set_int(s, "dsth", src->height, 0) < 0 ||
              av_opt_set_int(s, "src_format", src->format, 0) < 0 ||
              av_opt_set_int(s, "dst_format", AV_PIX_FMT_RGB24, 0) < 0 ||
              av_opt_set_int(s, "sws_flags", SWS_BILINEAR, 0) < 0 ||
              (hpos != -513 && av_opt_set_int(s, "src_h_chr_pos", hpos, 0) < 0) ||
              (vpos != -513 && av_opt_set_int(s, "src_v_chr_pos", vpos, 0) < 0);
    if (bad || sws_init_context(s, NULL, NULL) < 0) {
        sws_freeContext(c->sws);
        c->sws = NULL;
        return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "video: cannot convert pixel format %d to RGB",
                            src->format);
    }
    c->w = src->width;
    c->h = src->height;
    c->fmt = src->format;
    c->hpos = hpos;
    c->vpos = vpos;
    c->colour = colour;
    return 0;
}

int clef_rgb24_convert(clef_rgb24_conv *c, const AVFrame *f, clef_rgb *out, clef_err *err) {
    const AVPixFmtDescriptor *d = av_pix_fmt_desc_get((enum AVPixelFormat)f->format);
    if (f->width < 1 || f->height < 1 || f->width > INT_MAX / 3 / 16 - 16)
        return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "video frame of %dx%d", f->width, f->height);
    const AVFrame *src = f;
    int full = is_full_range(f);
    if (needs_vchroma(f, d)) {
        if (build_mid(c, f, d, err)) return -1;
        src = c->mid;
    }
    int colour = f->colorspace != AVCOL_SPC_UNSPECIFIED || full ? 1 + 2 * (int)f->colorspace + full : 0;
    int hpos = -513, vpos = -513;
    if (src == f) { /* the frame's own chroma goes through libswscale: its siting too */
        int xpos, ypos;
        chroma_pos(f, &xpos, &ypos);
        if (d && d->log2_chroma_w) hpos = xpos;
        if (d && d->log2_chroma_h) vpos = ypos;
    }
    if (get_sws(c, src, hpos, vpos, colour, err)) return -1;
    if (colour) {
        int cs = f->colorspace == AVCOL_SPC_UNSPECIFIED || f->colorspace == AVCOL_SPC_RGB ? SWS_CS_DEFAULT
                                                                                          : (int)f->colorspace;
        const int *coefs = sws_getCoefficients(cs);
        sws_setColorspaceDetails(c->sws, coefs, full, sws_getCoefficients(SWS_CS_DEFAULT), 1, 0, 1 << 16, 1 << 16);
    }
    /* rows padded as av_frame_get_buffer(align 16) pads PyAV's (point 1 above) */
    const int w = f->width, h = f->height;
    const size_t stride = (size_t)3 * (((size_t)w + 15) & ~(size_t)15);
    if ((size_t)h > SIZE_MAX / stride - 1)
        return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "video frame of %dx%d", w, h);
    uint8_t *buf = malloc(stride * (size_t)h + 64);
    if (!buf) return clef_err_set(err, CLEF_E_OOM, "out of memory for a %dx%d video frame", w, h);
    if (clef_rgb_alloc(out, w, h, err)) {
        free(buf);
        return -1;
    }
    uint8_t *dst[4] = {buf, NULL, NULL, NULL};
    int dst_stride[4] = {(int)stride, 0, 0, 0};
    int got = sws_scale(c->sws, (const uint8_t *const *)src->data, src->linesize, 0, h, dst, dst_stride);
    if (got != h) {
        free(buf);
        clef_rgb_free(out);
        return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "video: converting a %dx%d frame to RGB failed", w, h);
    }
    for (int y = 0; y < h; y++) memcpy(out->px + (size_t)y * 3 * w, buf + (size_t)y * stride, (size_t)3 * w);
    free(buf);
    return 0;
}
