#include "base/utf8.h"

#include <stdio.h>
#include <string.h>

static int decode_impl(const unsigned char *s, size_t len, uint32_t *cp, int allow_surrogates) {
    unsigned c = s[0];
    *cp = 0xFFFD;
    if (c < 0x80) { *cp = c; return 1; }
    if (c < 0xC2) return 0; /* continuation byte or overlong 2-byte lead */
    if (c < 0xE0) {
        if (len < 2 || (s[1] & 0xC0) != 0x80) return 0;
        *cp = ((uint32_t)(c & 0x1F) << 6) | (s[1] & 0x3F);
        return 2;
    }
    if (c < 0xF0) {
        if (len < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80) return 0;
        if (c == 0xE0 && s[1] < 0xA0) return 0;                       /* overlong */
        if (c == 0xED && s[1] >= 0xA0 && !allow_surrogates) return 0; /* surrogate */
        *cp = ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
        return 3;
    }
    if (c < 0xF5) {
        if (len < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80) return 0;
        if (c == 0xF0 && s[1] < 0x90) return 0; /* overlong */
        if (c == 0xF4 && s[1] >= 0x90) return 0; /* > U+10FFFF */
        *cp = ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
              ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
        return 4;
    }
    return 0;
}

int clef_utf8_decode(const char *s, size_t len, uint32_t *cp) {
    return len ? decode_impl((const unsigned char *)s, len, cp, 0) : (*cp = 0xFFFD, 0);
}

int clef_utf8_decode_wtf8(const char *s, size_t len, uint32_t *cp) {
    return len ? decode_impl((const unsigned char *)s, len, cp, 1) : (*cp = 0xFFFD, 0);
}

size_t clef_utf8_valid_prefix(const char *s, size_t len) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        /* fast path: 8 ASCII bytes at a time */
        while (i + 8 <= len) {
            uint64_t w;
            memcpy(&w, p + i, 8);
            if (w & 0x8080808080808080ull) break;
            i += 8;
        }
        if (i >= len) break;
        if (p[i] < 0x80) { i++; continue; }
        uint32_t cp;
        int n = decode_impl(p + i, len - i, &cp, 0);
        if (n == 0) return i;
        i += (size_t)n;
    }
    return len;
}

int clef_utf8_encode(uint32_t cp, char *out) {
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) { o[0] = (unsigned char)cp; return 1; }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    if (cp <= 0x10FFFF) {
        o[0] = (unsigned char)(0xF0 | (cp >> 18));
        o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
        o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[3] = (unsigned char)(0x80 | (cp & 0x3F));
        return 4;
    }
    return 0;
}

size_t clef_utf8_count(const char *s, size_t len) {
    const unsigned char *p = (const unsigned char *)s;
    size_t n = 0;
    for (size_t i = 0; i < len; i++) n += (p[i] & 0xC0) != 0x80;
    return n;
}

void clef_utf8_error_message(const char *s, size_t len, size_t pos, char *msg, size_t cap) {
    const unsigned char *p = (const unsigned char *)s + pos;
    size_t avail = len - pos;
    unsigned c = p[0];
    size_t need = 0;
    unsigned lo = 0x80, hi = 0xBF; /* allowed range of the first continuation byte */
    if (c >= 0xC2 && c <= 0xDF) need = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    }
    if (need == 0) {
        snprintf(msg, cap, "'utf-8' codec can't decode byte 0x%02x in position %zu: invalid start byte", c, pos);
        return;
    }
    size_t k = 1; /* bytes of the sequence that are fine so far */
    while (k < need && k < avail) {
        unsigned b = p[k];
        unsigned l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
        if (b < l || b > h) break;
        k++;
    }
    const char *why = k == avail && k < need ? "unexpected end of data" : "invalid continuation byte";
    if (k == 1)
        snprintf(msg, cap, "'utf-8' codec can't decode byte 0x%02x in position %zu: %s", c, pos, why);
    else
        snprintf(msg, cap, "'utf-8' codec can't decode bytes in position %zu-%zu: %s", pos, pos + k - 1, why);
}
