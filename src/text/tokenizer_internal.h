/* The loaded tokenizer, shared by tokenizer_load.c (reading tokenizer.json) and tokenizer.c (the
 * split regex and encoding). Not part of tokenizer.h's interface. */
#ifndef CLEF_TEXT_TOKENIZER_INTERNAL_H
#define CLEF_TEXT_TOKENIZER_INTERNAL_H

#include <oniguruma.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "text/bpe.h"
#include "text/tokenizer.h"

/* The two Split patterns of the Qwen tokenizers, as tokenizer.json spells them. */
#define QWEN2_SPLIT                                                                               \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" \
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define QWEN35_SPLIT                                                                     \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| "         \
    "?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"


typedef struct added_tok {
    char *s;
    size_t len;
    int32_t id;
    int special;
} added_tok;

struct clef_tokenizer {
    bpe_pairs pairs;
    int32_t byte_id[256];
    size_t n_ids; /* largest id + 1 */
    added_tok *added;
    size_t n_added;
    /* added-token lookup: by first byte, candidates sorted longest first */
    uint16_t first_start[257];
    uint16_t *by_first; /* indices into added */
    int single_first;   /* the one first byte all added tokens share, or -1 */
    int nfc;
    OnigRegex re;
    clef_split_variant variant; /* resolved: QWEN2 or QWEN35 */
    uint32_t gen;               /* distinct per loaded tokenizer: tags its entries in the thread caches */
};

/* tokenizer.c: compiles the split pattern re into t->re (0, or an error) */
int clef_tokenizer_compile_split(clef_tokenizer *t, const char *re, clef_err *err);
/* tokenizer.c: frees the calling thread's scratch buffers and cache (clef_tokenizer_free) */
void clef_tokenizer_release_tls(void);

#endif
