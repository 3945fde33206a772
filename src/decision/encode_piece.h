/* Below encode.c and encode_media.c: one piece of the prompt through the tokenizer, and the lone
 * surrogate checks both use (the tokenizer's refusal for a piece, Python's for `model`). */
#ifndef CLEF_DECISION_ENCODE_PIECE_H
#define CLEF_DECISION_ENCODE_PIECE_H

#include <stddef.h>

#include "base/err.h"
#include "text/tokenizer.h"

/* One piece of the prompt: _tokens(tokenizer, text) (a lone surrogate refused as the reference's
 * tokenizer refuses it). 0, or -1 with *err set. */
int clef_encode_piece(const clef_tokenizer *tok, const char *s, size_t len, clef_ids *ids, clef_err *err);

/* Returns 1 when the WTF-8 string s holds a lone surrogate, and then sets err (when not NULL) to
 * LoneSurrogate with Python's UnicodeEncodeError text for the first one (run), as encoding the
 * response would raise: "'utf-8' codec can't encode character '\ud800' in position 5: surrogates not
 * allowed". Used for `model`. Text that is tokenized gets the reference's own message instead (the HF
 * tokenizer's TypeError "TextEncodeInput must be Union[TextInputSequence, Tuple[InputSequence,
 * InputSequence]]"). */
int clef_check_surrogates(const char *s, size_t len, clef_err *err);

#endif
