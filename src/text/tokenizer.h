/* The Qwen3.5 tokenizer as clef-flash's tokenizer.json defines it (spec: ../shared/spec/tokenizer.md):
 * added tokens matched on the raw text, NFC (utf8proc), the Split regex from the file (Oniguruma,
 * the engine HF tokenizers uses), byte-level BPE with merge ranks. Equals HF tokenizers'
 * `tokenizer(text, add_special_tokens=False).input_ids`. */
#ifndef CLEF_TEXT_TOKENIZER_H
#define CLEF_TEXT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"

typedef struct clef_tokenizer clef_tokenizer;

typedef enum {
    CLEF_SPLIT_FROM_FILE = 0, /* the Split regex written in tokenizer.json (the reference, transformers 5.17) */
    CLEF_SPLIT_QWEN2,         /* force the Qwen2 regex (\p{L}+ letter runs) */
    CLEF_SPLIT_QWEN35,        /* force the \p{M} regex that transformers >= 5.18's Qwen3_5Tokenizer swaps in */
} clef_split_variant;

/* Loads a tokenizer.json file (path) as published. Refuses a Split regex that is neither known variant
 * unless forced. */
clef_tokenizer *clef_tokenizer_load(const char *path, clef_split_variant v, clef_err *err);
void clef_tokenizer_free(clef_tokenizer *t);

/* Appends the ids of one piece of text (UTF-8) to out; on failure out is left as it was. Refuses
 * invalid UTF-8 (InvalidUtf8) and lone surrogates in generalized UTF-8 form (LoneSurrogate). Safe to
 * call from several threads at once on the same tokenizer. */
int clef_tokenize(const clef_tokenizer *t, const char *text, size_t len, clef_ids *out, clef_err *err);

/* The id of an added token's content ("<|image_pad|>"), or -1. */
int32_t clef_tokenizer_added_id(const clef_tokenizer *t, const char *content);
size_t clef_tokenizer_vocab_size(const clef_tokenizer *t); /* ordinary + added */

/* Additions (tokenizer part): */
/* The variant actually in use (CLEF_SPLIT_QWEN2 or CLEF_SPLIT_QWEN35), resolved at load. */
clef_split_variant clef_tokenizer_variant(const clef_tokenizer *t);
/* clef_tokenize with flags. CLEF_TOK_NO_ADDED: do not match added tokens, the whole text is one
 * segment (NFC, split, BPE); a literal "<|im_start|>" becomes ordinary tokens. Not what the
 * reference does (it matches added tokens in every piece); for tests against per-piece fixtures. */
#define CLEF_TOK_NO_ADDED 1u
/* CLEF_TOK_REGEX_ONLY: split with Oniguruma alone, without the equivalent ASCII fast path (tests
 * compare the two). */
#define CLEF_TOK_REGEX_ONLY 2u
int clef_tokenize_ex(const clef_tokenizer *t, const char *text, size_t len, unsigned flags, clef_ids *out,
                     clef_err *err);

#endif
