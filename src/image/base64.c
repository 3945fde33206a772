/* Strict base64 (RFC 4648 standard alphabet) with a bounded output. ASCII whitespace is skipped
 * (data URLs and wrapped base64 carry line breaks); '=' padding is accepted only at the end and must
 * complete the last quantum; anything else is refused with a clear message. */
#include "image/image_internal.h"

static int b64val(unsigned char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

size_t clef_base64_max_decoded(size_t len) { return len / 4 * 3 + 3; }

long clef_base64_decode(const char *in, size_t len, uint8_t *out, size_t out_cap, clef_err *err) {
    uint32_t acc = 0;
    int nq = 0, pad = 0;
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)in[i];
        if (c == ' ' || c == '\n' || c == '\r' || c == '\t' || c == '\f' || c == '\v') continue;
        if (c == '=') {
            if (nq < 2)
                return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "invalid base64: misplaced padding at offset %zu",
                                    i);
            pad++;
            nq++;
            acc <<= 6;
            if (nq == 4) {
                size_t nb = (size_t)(3 - pad);
                if (o + nb > out_cap)
                    return clef_err_set(err, CLEF_E_LIMIT, "image data over this server's limit of %zu bytes", out_cap);
                /* like Python, bits left over before the padding are ignored */
                if (pad == 2) {
                    out[o++] = (uint8_t)(acc >> 16);
                } else {
                    out[o++] = (uint8_t)(acc >> 16);
                    out[o++] = (uint8_t)(acc >> 8);
                }
                /* only whitespace may follow */
                for (size_t j = i + 1; j < len; j++) {
                    unsigned char d = (unsigned char)in[j];
                    if (!(d == ' ' || d == '\n' || d == '\r' || d == '\t' || d == '\f' || d == '\v'))
                        return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA,
                                            "invalid base64: data after the padding at offset %zu", j);
                }
                return (long)o;
            }
            continue;
        }
        int v = b64val(c);
        if (v < 0)
            return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "invalid base64: byte 0x%02x at offset %zu", c, i);
        if (pad) return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "invalid base64: data after the padding");
        acc = (acc << 6) | (uint32_t)v;
        if (++nq == 4) {
            if (o + 3 > out_cap)
                return clef_err_set(err, CLEF_E_LIMIT, "image data over this server's limit of %zu bytes", out_cap);
            out[o++] = (uint8_t)(acc >> 16);
            out[o++] = (uint8_t)(acc >> 8);
            out[o++] = (uint8_t)acc;
            acc = 0;
            nq = 0;
        }
    }
    if (pad) return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "invalid base64: incomplete padding");
    if (nq != 0) return clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "invalid base64: incorrect padding");
    return (long)o;
}
