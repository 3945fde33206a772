/* WebP via libwebp (+ demux), as Pillow's WebPImagePlugin (WebPAnimDecoder) gives the first frame:
 * the canvas starts transparent black, the first frame (a key frame) is decoded into it at its offset
 * as non-premultiplied RGBA with libwebp's defaults (fancy upsampling); convert("RGB") drops alpha.
 * The EXIF chunk's Orientation (else XMP tiff:Orientation) is reported for exif_transpose. */
#include <stdlib.h>
#include <string.h>

#include <webp/decode.h>
#include <webp/demux.h>

#include "image/decoders.h"
#include "image/orient.h"
#include "image/size_check.h"

int clef_decode_webp(const uint8_t *p, size_t n, const clef_image_opts *o, int tv, clef_rgb *out, int *orient,
                     clef_err *err) {
    memset(out, 0, sizeof *out);
    WebPData wd = {p, n};
    WebPDemuxer *dmx = WebPDemux(&wd);
    if (!dmx) return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "cannot decode WebP: invalid or truncated file");
    int rc = -1;
    uint8_t *rgba = NULL;
    WebPIterator it;
    int have_it = 0;
    uint32_t cw = WebPDemuxGetI(dmx, WEBP_FF_CANVAS_WIDTH), ch = WebPDemuxGetI(dmx, WEBP_FF_CANVAS_HEIGHT);
    const int header_only = clef_image_check_size((int64_t)cw, (int64_t)ch, o, err); /* 1: a probe */
    if (header_only < 0) goto done;
    if (tv && (WebPDemuxGetI(dmx, WEBP_FF_FORMAT_FLAGS) & ANIMATION_FLAG)) {
        /* torchvision.io.decode_webp's own refusal, which the reference raises */
        clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "Animated webp files are not supported.");
        goto done;
    }
    if (header_only) goto done;
    if (!WebPDemuxGetFrame(dmx, 1, &it)) {
        clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "cannot decode WebP: no frame");
        goto done;
    }
    have_it = 1;
    if (it.x_offset < 0 || it.y_offset < 0 || it.width <= 0 || it.height <= 0 ||
        (int64_t)it.x_offset + it.width > (int64_t)cw || (int64_t)it.y_offset + it.height > (int64_t)ch) {
        clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "cannot decode WebP: frame outside the canvas");
        goto done;
    }
    size_t stride = (size_t)cw * 4;
    rgba = calloc((size_t)ch, stride);
    if (!rgba) {
        clef_err_set(err, CLEF_E_OOM, "out of memory decoding a WebP");
        goto done;
    }
    WebPDecoderConfig cfg;
    if (!WebPInitDecoderConfig(&cfg)) {
        clef_err_set(err, CLEF_E_INTERNAL, "libwebp version mismatch");
        goto done;
    }
    cfg.output.colorspace = MODE_RGBA;
    cfg.output.is_external_memory = 1;
    cfg.output.u.RGBA.rgba = rgba + (size_t)it.y_offset * stride + (size_t)it.x_offset * 4;
    cfg.output.u.RGBA.stride = (int)stride;
    cfg.output.u.RGBA.size = stride * (size_t)(it.height - 1) + (size_t)it.width * 4;
    VP8StatusCode st = WebPDecode(it.fragment.bytes, it.fragment.size, &cfg);
    WebPFreeDecBuffer(&cfg.output);
    if (st != VP8_STATUS_OK) {
        clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "cannot decode WebP (libwebp status %d)", (int)st);
        goto done;
    }
    if (clef_rgb_alloc(out, (int)cw, (int)ch, err)) goto done;
    for (size_t i = 0, np = (size_t)cw * ch; i < np; i++) memcpy(out->px + 3 * i, rgba + 4 * i, 3);
    WebPChunkIterator ci;
    int exo = 0;
    if (WebPDemuxGetChunk(dmx, "EXIF", 1, &ci)) {
        exo = clef_exif_orientation(ci.chunk.bytes, ci.chunk.size);
        WebPDemuxReleaseChunkIterator(&ci);
    }
    if (!exo && WebPDemuxGetChunk(dmx, "XMP ", 1, &ci)) {
        exo = clef_xmp_orientation(ci.chunk.bytes, ci.chunk.size);
        WebPDemuxReleaseChunkIterator(&ci);
    }
    *orient = exo;
    rc = 0;
done:
    if (have_it) WebPDemuxReleaseIterator(&it);
    WebPDemuxDelete(dmx);
    free(rgba);
    return rc;
}
