/* The prompt's pieces through the tokenizer, and the surrogate checks (encode_piece.h). */
#include "decision/encode_piece.h"

#include <inttypes.h>

#include "base/utf8.h"

int clef_check_surrogates(const char *s, size_t len, clef_err *err) {
    size_t pos = 0, i = 0;
    while (i < len) {
        uint32_t cp;
        int k = clef_utf8_decode_wtf8(s + i, len - i, &cp);
        if (k <= 0) k = 1;
        if (utf8_is_surrogate(cp)) {
            /* Python reports the run of consecutive surrogates */
            size_t first = pos, last = pos;
            uint32_t first_cp = cp;
            size_t j = i + (size_t)k;
            while (j < len) {
                uint32_t c2;
                int k2 = clef_utf8_decode_wtf8(s + j, len - j, &c2);
                if (k2 <= 0 || !utf8_is_surrogate(c2)) break;
                last++;
                j += (size_t)k2;
            }
            if (first == last)
                clef_err_set(err, CLEF_E_LONE_SURROGATE,
                             "'utf-8' codec can't encode character '\\u%04" PRIx32 "' in position %zu: surrogates not allowed",
                             first_cp, first);
            else
                clef_err_set(err, CLEF_E_LONE_SURROGATE,
                             "'utf-8' codec can't encode characters in position %zu-%zu: surrogates not allowed", first, last);
            return 1;
        }
        i += (size_t)k;
        pos++;
    }
    return 0;
}

static int has_surrogate_bytes(const char *s, size_t len) {
    for (size_t i = 0; i + 1 < len; i++)
        if ((unsigned char)s[i] == 0xED && (unsigned char)s[i + 1] >= 0xA0) return 1;
    return 0;
}

/* What the reference raises for text holding a lone surrogate: the HF tokenizer's TypeError (measured:
 * tests/fixtures/tiny, e040-e044). */
#define LONE_SURROGATE_MSG "TextEncodeInput must be Union[TextInputSequence, Tuple[InputSequence, InputSequence]]"

int clef_encode_piece(const clef_tokenizer *tok, const char *s, size_t len, clef_ids *ids, clef_err *err) {
    if (has_surrogate_bytes(s, len) && clef_check_surrogates(s, len, NULL))
        return clef_err_set(err, CLEF_E_LONE_SURROGATE, LONE_SURROGATE_MSG);
    if (clef_tokenize(tok, s, len, ids, err)) return -1;
    if (ids->oom) return clef_err_set(err, CLEF_E_OOM, "out of memory while tokenizing");
    return 0;
}
