/* UTF-8 helpers: strict validation, decoding and encoding of one code point.
 *
 * "Strict" is what Python's bytes.decode("utf-8") accepts: no overlong forms, no surrogates
 * (ED A0..BF xx), nothing above U+10FFFF, no truncated sequences. The WTF-8 variants additionally
 * accept the 3-byte encoded surrogates U+D800..U+DFFF (our JSON strings keep lone \uD800 escapes that
 * way, see json.h). */
#ifndef CLEF_BASE_UTF8_H
#define CLEF_BASE_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Length in bytes of the longest valid strict-UTF-8 prefix of s; equals len when all of s is valid.
 * ASCII runs are checked several bytes at a time. */
size_t clef_utf8_valid_prefix(const char *s, size_t len);
static inline int utf8_valid(const char *s, size_t len) { return clef_utf8_valid_prefix(s, len) == len; }

/* Decodes one code point at s (len > 0 bytes available). Returns the number of bytes consumed (1..4)
 * and sets *cp, or returns 0 (and *cp = 0xFFFD) when the bytes there are not a valid strict UTF-8
 * sequence. clef_utf8_decode_wtf8 also accepts encoded surrogates. */
int clef_utf8_decode(const char *s, size_t len, uint32_t *cp);
int clef_utf8_decode_wtf8(const char *s, size_t len, uint32_t *cp);

/* Encodes cp (<= 0x10FFFF; surrogates are written in their 3-byte generalized form) into out
 * (at least 4 bytes). Returns the byte count, or 0 when cp > 0x10FFFF. */
int clef_utf8_encode(uint32_t cp, char *out);

/* Number of code points in a valid (WTF-8) byte string: bytes that are not continuation bytes. */
size_t clef_utf8_count(const char *s, size_t len);

/* Python's UnicodeDecodeError text for the invalid sequence at s[pos] (pos = clef_utf8_valid_prefix's
 * answer, < len), e.g. "'utf-8' codec can't decode byte 0xff in position 0: invalid start byte". */
void clef_utf8_error_message(const char *s, size_t len, size_t pos, char *msg, size_t cap);

/* 1 when cp is U+D800..U+DFFF. */
static inline int utf8_is_surrogate(uint32_t cp) { return cp >= 0xD800 && cp <= 0xDFFF; }

#endif
