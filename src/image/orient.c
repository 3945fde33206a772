/* EXIF orientation: read (EXIF, XMP) and applied (orient.h). */
#include "image/orient.h"

#include <string.h>

static uint32_t rd16(const uint8_t *p, int le) { return le ? (uint32_t)(p[0] | p[1] << 8) : (uint32_t)(p[0] << 8 | p[1]); }
static uint32_t rd32(const uint8_t *p, int le) {
    return le ? ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24)
              : ((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3]);
}

int clef_exif_orientation(const uint8_t *t, size_t n) {
    if (n >= 6 && !memcmp(t, "Exif\0\0", 6)) {
        t += 6;
        n -= 6;
    }
    if (n < 8) return 0;
    int le;
    if (t[0] == 'I' && t[1] == 'I') le = 1;
    else if (t[0] == 'M' && t[1] == 'M') le = 0;
    else return 0;
    if (rd16(t + 2, le) != 42) return 0;
    uint32_t off = rd32(t + 4, le);
    if (off > n || n - off < 2) return 0;
    uint32_t cnt = rd16(t + off, le);
    for (uint32_t i = 0; i < cnt && i < 1000; i++) {
        size_t e = (size_t)off + 2 + (size_t)i * 12;
        if (e + 12 > n) break;
        if (rd16(t + e, le) != 0x0112) continue;
        uint32_t type = rd16(t + e + 2, le), count = rd32(t + e + 4, le);
        if (count < 1) return 0;
        uint32_t v;
        if (type == 3) v = rd16(t + e + 8, le);      /* SHORT */
        else if (type == 4) v = rd32(t + e + 8, le); /* LONG */
        else return 0;
        return (v >= 1 && v <= 8) ? (int)v : 9;     /* present but not a transform */
    }
    return 0;
}

int clef_xmp_orientation(const uint8_t *p, size_t n) {
    static const char key[] = "tiff:Orientation";
    const size_t k = sizeof key - 1;
    for (size_t i = 0; i + k + 2 <= n; i++) {
        if (p[i] != 't' || memcmp(p + i, key, k)) continue;
        const uint8_t *q = p + i + k;
        size_t rest = n - i - k;
        if (rest >= 3 && q[0] == '=' && q[1] == '"' && q[2] >= '0' && q[2] <= '9') return q[2] - '0';
        if (rest >= 2 && q[0] == '>' && q[1] >= '0' && q[1] <= '9') return q[1] - '0';
    }
    return 0;
}

int clef_rgb_orient(clef_rgb *im, int o, clef_err *err) {
    if (o < 2 || o > 8) return 0;
    if (!im->px) return clef_err_set(err, CLEF_E_INTERNAL, "orientation applies to 8-bit images only");
    const int W = im->w, H = im->h;
    int swap = o >= 5;
    clef_rgb out;
    if (clef_rgb_alloc(&out, swap ? H : W, swap ? W : H, err)) return -1;
    for (int y = 0; y < out.h; y++)
        for (int x = 0; x < out.w; x++) {
            int sx, sy;
            switch (o) {
            case 2: sx = W - 1 - x; sy = y; break;           /* mirror horizontal */
            case 3: sx = W - 1 - x; sy = H - 1 - y; break;   /* rotate 180 */
            case 4: sx = x; sy = H - 1 - y; break;           /* mirror vertical */
            case 5: sx = y; sy = x; break;                   /* transpose */
            case 6: sx = y; sy = H - 1 - x; break;           /* rotate 90 clockwise (PIL ROTATE_270) */
            case 7: sx = W - 1 - y; sy = H - 1 - x; break;   /* transverse */
            default: sx = W - 1 - y; sy = x; break;          /* 8: rotate 90 counter-clockwise */
            }
            memcpy(out.px + ((size_t)y * out.w + x) * 3, im->px + ((size_t)sy * W + sx) * 3, 3);
        }
    clef_rgb_free(im);
    *im = out;
    return 0;
}
