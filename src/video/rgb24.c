#ifndef CLEF_NO_VIDEO /* a build without FFmpeg (make VIDEO=0) has no colour conversion either */
/* RGB24 conversion of decoded video frames, bit-equal to the reference's (PyAV 18.1.0 frame.to_rgb():
 * sws_scale_frame(SWS_BILINEAR) on its bundled FFmpeg 8.1.2, libswscale 9.5) with Debian's FFmpeg 5.1
 * (libswscale 6.7). Measured on the fixture clips and on synthetic frames through PyAV 18.1.0 (every
 * pixel of each frame compared; docs/spec-corrections.md "Video"), the two libraries part in three
 * places:
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
 *     versions. (Even widths.)
 *
 *  3. The same frames of odd width. For an odd output width libswscale interpolates chroma horizontally
 *     to the full luma width and writes RGB with its "full-chroma" writer (an integer matrix on 17-bit
 *     Y, U, V; no tables). That writer has the same uvalpha shortcut in 6.7 and the weighting in 9.5,
 *     U = (u0 * (4096 - a) + u1 * a - 2^26) >> 10, whose two bits below the 15-bit intermediates no frame
 *     handed to 6.7 can carry. clef does the whole conversion itself (full_chroma_420). With 6.7 alone,
 *     13,463 of 17,010 RGB values of av1_10bit_35x27.mkv were off (up to 54 levels) and 40,728 of
 *     54,990 of vp9_65x47.webm (up to 84); now none.
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
 * step (planar 4:2:0 without alpha, little-endian or 8-bit samples of 8..14 bits)? Odd widths then take
 * the full-chroma path (full_chroma_420), even ones the 4:2:2 intermediate (build_mid). */
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

/* Division by 2^s rounding toward minus infinity, as an arithmetic right shift does (C leaves >> of a
 * negative value to the implementation). */
static int64_t floor_shift(int64_t v, int s) { return v >= 0 ? v >> s : -((-v + ((int64_t)1 << s) - 1) >> s); }

/* libswscale's roundToInt16 of a 16.16 value scaled up: (f + 2^15) >> 16, clipped to int16. */
static int round16(int64_t f) {
    int64_t r = floor_shift(f + (1 << 15), 16);
    return (int)(r < -0x8000 ? -0x8000 : r > 0x7FFF ? 0x7FFF : r);
}

/* The coefficients of libswscale's full-chroma writer, as sws_setColorspaceDetails sets them (its
 * ff_yuv2rgb_c_init_tables) for matrix `inv` (sws_getCoefficients: v->r, u->b, u->g, v->g in 16.16),
 * source range full or limited, brightness 0, contrast and saturation 1.0 (the values both clef and 9.5's
 * sws_scale_frame pass; at 1.0 the contrast and saturation products are exact). */
typedef struct full_coefs {
    int y_off, y_mul, v2r, v2g, u2g, u2b;
} full_coefs;

static full_coefs full_coefs_for(const int *inv, int full) {
    int64_t crv = inv[0], cbu = inv[1], cgu = -(int64_t)inv[2], cgv = -(int64_t)inv[3];
    int64_t cy = 1 << 16, oy = 0;
    if (!full) {
        cy = (cy * 255) / 219;
        oy = 16 << 16;
    } else { /* C's truncating division, as libswscale's */
        crv = (crv * 224) / 255;
        cbu = (cbu * 224) / 255;
        cgu = (cgu * 224) / 255;
        cgv = (cgv * 224) / 255;
    }
    full_coefs k = {round16(oy * (1 << 9)), round16(cy * (1 << 13)), round16(crv * (1 << 13)),
                    round16(cgv * (1 << 13)), round16(cgu * (1 << 13)), round16(cbu * (1 << 13))};
    return k;
}

/* One channel of the writer: the sum wraps as libswscale's unsigned 32-bit arithmetic does; a value with
 * bit 31 set (negative as int) clips to 0, one of 2^30 or more to 2^30 - 1; the top 8 of 30 bits. */
static uint8_t full_channel(int64_t v) {
    uint32_t u = (uint32_t)v; /* modulo 2^32, well defined */
    if (u & 0x80000000u) return 0;
    if (u & 0x40000000u) u = 0x3FFFFFFF;
    return (uint8_t)(u >> 22);
}

/* 4:2:0 of odd width on the scaled path, all of it by hand into out (w x h, tight rows): for an odd
 * output width libswscale switches to full horizontal chroma interpolation (chroma scaled to the luma
 * width, then the "full" packed-RGB writer: integer matrix, no tables), and 6.7's writer for one luma tap
 * takes chroma row 0 alone below uvalpha 2048 and the mean of the two rows above it, with 15-bit chroma
 * at most; 9.5's weighs the rows, U = (u0 * (4096 - a) + u1 * a - 2^26) >> 10, 17 bits. No input to
 * 6.7's sws_scale carries those two bits (its intermediates stop at 15), so no 4:2:2 or 4:4:4 frame we
 * could hand it gives 9.5's answer; this function is the whole conversion. Written by hand, not copied:
 * from reading libswscale's output.c, utils.c and yuv2rgb.c (LGPL; the 6.x text, which has the 6.7
 * writer), with 9.5's weighting as measured through PyAV 18.1, and checked against PyAV 18.1 on the two
 * fixture clips and on synthetic frames (8 to 14 bits, widths 1 to 129, BT.601/709/2020 and untagged,
 * both ranges): every byte equal. (Samples above their bit depth, which no decoder gives, are not
 * matched; they were not before either.) Steps: luma to 15 bits (identity filter: sample << (15 - depth),
 * capped at 2^15 - 1 as hscale caps); chroma hscale (cw -> w, bilinear, the frame's siting) to 15 bits;
 * the vertical chroma filter (ch -> h); the writer, Y and chroma at 17 bits. */
static int full_chroma_420(const AVFrame *f, const AVPixFmtDescriptor *d, const full_coefs *k, clef_rgb *out,
                           clef_err *err) {
    const int bits = d->comp[0].depth, w = f->width, h = f->height;
    const int cw = (w + 1) >> 1, ch = (h + 1) >> 1;
    if ((size_t)ch > SIZE_MAX / 2 / sizeof(int32_t) / (size_t)w)
        return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "video frame of %dx%d", w, h);
    int xpos, ypos;
    chroma_pos(f, &xpos, &ypos);
    int *vp = NULL, *vc = NULL, vn = 0, *hp = NULL, *hc = NULL, hn = 0;
    if (clef_rgb24_filter(ch, h, local_pos(1, ypos), local_pos(0, -513), 1 << 12, 1, &vp, &vc, &vn, err)) return -1;
    if (clef_rgb24_filter(cw, w, local_pos(1, xpos), local_pos(0, -513), 1 << 14, 0, &hp, &hc, &hn, err)) {
        free(vp);
        free(vc);
        return -1;
    }
    int32_t *u15 = malloc(sizeof *u15 * 2 * (size_t)ch * w);
    if (!u15 || clef_rgb_alloc(out, w, h, err)) {
        free(vp);
        free(vc);
        free(hp);
        free(hc);
        if (!u15) return clef_err_set(err, CLEF_E_OOM, "out of memory for a %dx%d video frame", w, h);
        free(u15);
        return -1;
    }
    int32_t *v15 = u15 + (size_t)ch * w;
    hscale_chroma(f, 1, bits, ch, w, hp, hc, hn, u15);
    hscale_chroma(f, 2, bits, ch, w, hp, hc, hn, v15);
    const int ysh = bits == 8 ? 7 : 15 - bits;
    for (int y = 0; y < h; y++) {
        const int *cf = vc + (size_t)y * vn;
        const int p0 = vp[y];
        /* which writer 9.5's vertical step calls: one chroma tap (uvalpha 0), two summing to 4096 (the
         * one-luma-tap writer with uvalpha = the second), else the general one (rounded sum; no frame
         * tested needed it: a 2x upscale leaves 2 taps summing to 4096) */
        const int one = vn == 1, two = vn == 2 && cf[0] + cf[1] == 4096 && cf[1] >= 0 && cf[1] <= 4096;
        const uint8_t *ysrc = f->data[0] + (ptrdiff_t)y * f->linesize[0];
        uint8_t *o = out->px + (size_t)y * 3 * w;
        for (int x = 0; x < w; x++) {
            int64_t U, V;
            if (one) {
                U = ((int64_t)u15[(size_t)p0 * w + x] - (128 << 7)) * 4;
                V = ((int64_t)v15[(size_t)p0 * w + x] - (128 << 7)) * 4;
            } else {
                int64_t su = two ? 0 : (1 << 9), sv = su;
                for (int j = 0; j < vn; j++) {
                    int r = p0 + j;
                    r = r < 0 ? 0 : r >= ch ? ch - 1 : r;
                    su += (int64_t)u15[(size_t)r * w + x] * cf[j];
                    sv += (int64_t)v15[(size_t)r * w + x] * cf[j];
                }
                U = floor_shift(su - ((int64_t)128 << 19), 10);
                V = floor_shift(sv - ((int64_t)128 << 19), 10);
            }
            int64_t y15 = (int64_t)(bits == 8 ? ysrc[x] : ((const uint16_t *)ysrc)[x]) << ysh;
            if (y15 > 32767) y15 = 32767; /* as C hscale caps (samples over their depth: not matched) */
            int64_t Y = (y15 * 4 - k->y_off) * k->y_mul + (1 << 21);
            o[3 * x] = full_channel(Y + V * k->v2r);
            o[3 * x + 1] = full_channel(Y + V * k->v2g + U * k->u2g);
            o[3 * x + 2] = full_channel(Y + U * k->u2b);
        }
    }
    free(u15);
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
    /* the matrix 9.5 takes from the frame (and clef passes with sws_setColorspaceDetails below) */
    const int cs = f->colorspace == AVCOL_SPC_UNSPECIFIED || f->colorspace == AVCOL_SPC_RGB ? SWS_CS_DEFAULT
                                                                                         : (int)f->colorspace;
    if (needs_vchroma(f, d)) {
        if (f->width & 1) {
            full_coefs k = full_coefs_for(sws_getCoefficients(cs), full);
            return full_chroma_420(f, d, &k, out, err);
        }
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
#endif /* CLEF_NO_VIDEO */
