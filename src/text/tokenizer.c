/* The Qwen3.5 tokenizer (spec: ../shared/spec/tokenizer.md), equal to HF tokenizers'
 * `Tokenizer.from_file(path).encode(text, add_special_tokens=False).ids`:
 *
 *   1. added tokens found in the raw text, leftmost-longest (HF's AddedVocabulary with every token
 *      normalized=false, lstrip/rstrip/single_word false; other flags are refused at load);
 *   2. each segment between them: NFC (utf8proc), skipped when every code point is NFC-inert; the
 *      code points HF's older NFC tables do not know act as inert starters (tok_nfc_inert);
 *   3. the Split regex (Oniguruma, default syntax, UTF-8, no options: what HF's SysRegex builds),
 *      with \p{L}/\p{N}/\p{M} bound to HF's Unicode 16.0 sets (user properties, tok_unicode.inc)
 *      so the result does not depend on the installed libonig's tables; every match is one
 *      pretoken and so is every gap between matches (behaviour Isolated). An exact ASCII fast path
 *      answers most positions without calling Oniguruma;
 *   4. byte-level: each byte of a pretoken is one initial symbol (the id of its GPT-2 byte char);
 *   5. BPE with merge ranks (bpe.c).
 *
 * Loading reads tokenizer.json with the project's JSON parser, resolves every merge to ids once and
 * keeps only id tables: a pair table, the 256 byte ids and the added tokens. The loaded tokenizer is
 * read-only, so concurrent clef_tokenize calls need no lock; each thread keeps its own scratch
 * buffers and pretoken cache (thread-specific data, freed at thread exit, or by
 * clef_tokenizer_free for the calling thread).
 *
 * This file: the split regex (its Unicode sets, compiled per tokenizer) and encoding; reading
 * tokenizer.json: tokenizer_load.c. */
#include "text/tokenizer.h"

#include <oniguruma.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "text/bpe.h"
#include "base/utf8.h"
#include "text/tokenizer_internal.h"

/* ---------------------------------------------------------------- the split regex */

/* \p{L}, \p{N}, \p{M} as HF tokenizers' bundled Oniguruma (Unicode 16.0) has them; the system
 * libonig may carry older tables. Defined once as user properties ClefL / ClefN / ClefM. */
#include "text/tok_unicode.inc"

static pthread_once_t onig_once = PTHREAD_ONCE_INIT;
static int onig_ready;
static void onig_init_once(void) {
    OnigEncoding enc[1] = {ONIG_ENCODING_UTF8};
    onig_ready = onig_initialize(enc, 1) == ONIG_NORMAL &&
                 onig_unicode_define_user_property("ClefL", tok_uni_L) == ONIG_NORMAL &&
                 onig_unicode_define_user_property("ClefN", tok_uni_N) == ONIG_NORMAL &&
                 onig_unicode_define_user_property("ClefM", tok_uni_M) == ONIG_NORMAL;
}

/* The split pattern with \p{L} / \p{N} / \p{M} replaced by the user properties above (the two known
 * patterns use no other spelling of these classes). Returns a malloc'd string or NULL. */
static char *pattern_with_user_props(const char *re) {
    size_t n = strlen(re);
    char *o = malloc(2 * n + 1);
    if (!o) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        if (i + 5 <= n && re[i] == '\\' && re[i + 1] == 'p' && re[i + 2] == '{' && re[i + 4] == '}' &&
            (re[i + 3] == 'L' || re[i + 3] == 'N' || re[i + 3] == 'M')) {
            k += (size_t)sprintf(o + k, "\\p{Clef%c}", re[i + 3]);
            i += 5;
        } else {
            o[k++] = re[i++];
        }
    }
    o[k] = '\0';
    return o;
}


/* Compiles the split pattern re (QWEN2_SPLIT or QWEN35_SPLIT) into t->re, with the sets above. */
int clef_tokenizer_compile_split(clef_tokenizer *t, const char *re, clef_err *err) {
    pthread_once(&onig_once, onig_init_once);
    if (!onig_ready) return clef_err_set(err, CLEF_E_INTERNAL, "Oniguruma failed to initialize");
    char *pat = pattern_with_user_props(re);
    if (!pat) return clef_err_set(err, CLEF_E_OOM, "out of memory");
    OnigErrorInfo einfo;
    int r = onig_new(&t->re, (const OnigUChar *)pat, (const OnigUChar *)pat + strlen(pat), ONIG_OPTION_NONE,
                     ONIG_ENCODING_UTF8, ONIG_SYNTAX_DEFAULT, &einfo);
    free(pat);
    if (r != ONIG_NORMAL) {
        t->re = NULL;
        OnigUChar msg[ONIG_MAX_ERROR_MESSAGE_LEN];
        onig_error_code_to_str(msg, r, &einfo);
        return clef_err_set(err, CLEF_E_INTERNAL, "Oniguruma refused the split regex: %s", (const char *)msg);
    }
    return 0;
}

/* ---------------------------------------------------------------- encoding */

typedef struct tok_work {
    bpe_work bpe;
    int32_t *syms;
    size_t syms_cap;
    int32_t *cps; /* NFC: code points */
    size_t cps_cap;
    char *norm; /* NFC: re-encoded segment */
    size_t norm_cap;
    OnigRegion *region;
} tok_work;

static void work_free(tok_work *w) {
    clef_bpe_work_free(&w->bpe);
    free(w->syms);
    free(w->cps);
    free(w->norm);
    if (w->region) onig_region_free(w->region, 1);
    memset(w, 0, sizeof *w);
}

/* Per-thread state, kept between calls: the scratch buffers and a direct-mapped cache of pretoken
 * bytes -> ids (most pretokens of a text are words seen before; a hit skips the BPE's pair-table
 * lookups). Entries carry the tokenizer's gen, so several tokenizers can share a thread's cache.
 * Thread-local, so concurrent calls share nothing. */
#define CACHE_SLOTS 8192
#define CACHE_KEY 26
#define CACHE_IDS 8
typedef struct cache_slot {
    uint32_t gen; /* 0 = empty */
    uint8_t klen, nids;
    char key[CACHE_KEY];
    int32_t ids[CACHE_IDS];
} cache_slot;

typedef struct tok_tls {
    tok_work w;
    cache_slot *slots;
} tok_tls;

static pthread_key_t tls_key;
static pthread_once_t tls_once = PTHREAD_ONCE_INIT;
static int tls_ok;

static void tls_destroy(void *p) {
    tok_tls *x = p;
    if (!x) return;
    work_free(&x->w);
    free(x->slots);
    free(x);
}

static void tls_init_once(void) { tls_ok = pthread_key_create(&tls_key, tls_destroy) == 0; }

/* The calling thread's state, created on first use; NULL when out of memory. */
static tok_tls *tls_get(void) {
    pthread_once(&tls_once, tls_init_once);
    if (!tls_ok) return NULL;
    tok_tls *x = pthread_getspecific(tls_key);
    if (x) return x;
    x = calloc(1, sizeof *x);
    if (!x) return NULL;
    x->slots = calloc(CACHE_SLOTS, sizeof *x->slots);
    if (!x->slots || pthread_setspecific(tls_key, x)) {
        free(x->slots);
        free(x);
        return NULL;
    }
    return x;
}

/* Frees the calling thread's state (other threads' go at their exit). */
void clef_tokenizer_release_tls(void) {
    pthread_once(&tls_once, tls_init_once);
    if (!tls_ok) return;
    tok_tls *x = pthread_getspecific(tls_key);
    if (!x) return;
    pthread_setspecific(tls_key, NULL);
    tls_destroy(x);
}

static inline uint32_t cache_hash(const unsigned char *p, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 16777619u;
    return h ^ (h >> 15);
}

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 256;
    while (c < need) c *= 2;
    if (c > SIZE_MAX / elem) return -1;
    void *q = realloc(*p, c * elem);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

/* 1 when NFC could change the segment: some code point outside ranges known to be NFC-inert
 * (NFC_Quick_Check=Yes, canonical combining class 0, never the second of a composition): below
 * U+0300, Cyrillic without its combining marks, kana, CJK ideographs, Hangul syllables, emoji,
 * general and CJK punctuation, fullwidth forms (checked with Python's unicodedata when written). */
static int nfc_may_change(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80) { i++; continue; }
        uint32_t cp;
        int k = clef_utf8_decode(s + i, n - i, &cp);
        if (k <= 0) return 1;
        i += (size_t)k;
        if (cp < 0x300 || (cp >= 0x400 && cp <= 0x482) || (cp >= 0x48A && cp <= 0x52F) || (cp >= 0x3041 && cp <= 0x3096) ||
            (cp >= 0x30A1 && cp <= 0x30FA) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x4E00 && cp <= 0x9FFF) ||
            (cp >= 0xAC00 && cp <= 0xD7A3) || (cp >= 0x1F300 && cp <= 0x1FAFF) || cp == 0x200D || cp == 0xFE0F ||
            (cp >= 0x2010 && cp <= 0x2027) || (cp >= 0x2030 && cp <= 0x205E) || (cp >= 0x3000 && cp <= 0x3029) ||
            (cp >= 0x3030 && cp <= 0x303F) || (cp >= 0xFF01 && cp <= 0xFFEF))
            continue;
        return 1;
    }
    return 0;
}

static int nfc_inert(uint32_t cp) {
    size_t lo = 0, hi = sizeof tok_nfc_inert / sizeof tok_nfc_inert[0];
    if (cp < tok_nfc_inert[0][0]) return 0;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < tok_nfc_inert[mid][0]) hi = mid;
        else if (cp > tok_nfc_inert[mid][1]) lo = mid + 1;
        else return 1;
    }
    return 0;
}

/* Appends NFC(s[0..n)) (utf8proc) to w->norm at *o. */
static int nfc_piece(tok_work *w, const char *s, size_t n, size_t *o, clef_err *err) {
    const utf8proc_option_t opt = UTF8PROC_STABLE | UTF8PROC_COMPOSE;
    size_t need = n + 16;
    for (;;) {
        if (grow((void **)&w->cps, &w->cps_cap, need, sizeof *w->cps))
            return clef_err_set(err, CLEF_E_OOM, "out of memory normalizing text");
        utf8proc_ssize_t r = utf8proc_decompose((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, w->cps,
                                                (utf8proc_ssize_t)w->cps_cap, opt);
        if (r < 0) return clef_err_set(err, CLEF_E_INVALID_UTF8, "text is not valid UTF-8 (%s)", utf8proc_errmsg(r));
        if ((size_t)r <= w->cps_cap) {
            r = utf8proc_normalize_utf32(w->cps, r, opt);
            if (r < 0) return clef_err_set(err, CLEF_E_INTERNAL, "NFC failed: %s", utf8proc_errmsg(r));
            if (grow((void **)&w->norm, &w->norm_cap, *o + (size_t)r * 4 + 1, 1))
                return clef_err_set(err, CLEF_E_OOM, "out of memory normalizing text");
            for (utf8proc_ssize_t i = 0; i < r; i++) *o += (size_t)clef_utf8_encode((uint32_t)w->cps[i], w->norm + *o);
            return 0;
        }
        need = (size_t)r;
    }
}

/* NFC as HF's normalizer computes it: utf8proc's NFC, except that the code points in tok_nfc_inert
 * (marks and compositions newer than HF's Unicode 9.0 tables) act as inert starters: the text is
 * cut there and the pieces are normalized on their own, the cut code points copied as they are. */
static int nfc(tok_work *w, const char *s, size_t n, const char **out, size_t *out_len, clef_err *err) {
    size_t o = 0, start = 0, i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0xDF) { /* below U+07C0: never inert */
            i += c < 0x80 ? 1 : 2;
            continue;
        }
        uint32_t cp;
        int k = clef_utf8_decode(s + i, n - i, &cp);
        if (k <= 0) return clef_err_set(err, CLEF_E_INVALID_UTF8, "text is not valid UTF-8");
        if (nfc_inert(cp)) {
            if (i > start && nfc_piece(w, s + start, i - start, &o, err)) return -1;
            if (grow((void **)&w->norm, &w->norm_cap, o + (size_t)k + 1, 1))
                return clef_err_set(err, CLEF_E_OOM, "out of memory normalizing text");
            memcpy(w->norm + o, s + i, (size_t)k);
            o += (size_t)k;
            start = i + (size_t)k;
        }
        i += (size_t)k;
    }
    if (n > start && nfc_piece(w, s + start, n - start, &o, err)) return -1;
    *out = w->norm ? w->norm : s;
    *out_len = o;
    return 0;
}

static int encode_pretoken(const clef_tokenizer *t, tok_work *w, cache_slot *cache, const unsigned char *p, size_t n,
                           clef_ids *out, clef_err *err) {
    if (n == 1) {
        if (clef_ids_push(out, t->byte_id[p[0]])) return clef_err_set(err, CLEF_E_OOM, "out of memory");
        return 0;
    }
    cache_slot *slot = NULL;
    if (cache && n <= CACHE_KEY) {
        slot = &cache[cache_hash(p, n) & (CACHE_SLOTS - 1)];
        if (slot->gen == t->gen && slot->klen == n && memcmp(slot->key, p, n) == 0) {
            if (clef_ids_append(out, slot->ids, slot->nids)) return clef_err_set(err, CLEF_E_OOM, "out of memory");
            return 0;
        }
    }
    if (grow((void **)&w->syms, &w->syms_cap, n, sizeof *w->syms)) return clef_err_set(err, CLEF_E_OOM, "out of memory");
    for (size_t i = 0; i < n; i++) w->syms[i] = t->byte_id[p[i]];
    size_t m = clef_bpe_merge(&t->pairs, w->syms, n, &w->bpe);
    if (m == (size_t)-1) return clef_err_set(err, CLEF_E_OOM, "out of memory in BPE");
    if (clef_ids_append(out, w->syms, m)) return clef_err_set(err, CLEF_E_OOM, "out of memory");
    if (slot && m <= CACHE_IDS) {
        slot->gen = t->gen;
        slot->klen = (uint8_t)n;
        slot->nids = (uint8_t)m;
        memcpy(slot->key, p, n);
        memcpy(slot->ids, w->syms, m * sizeof *w->syms);
    }
    return 0;
}

/* ---------------------------------------------------------------- ASCII fast path of the split
 *
 * On ASCII text both known patterns reduce to simple rules (no \p{M} in ASCII; \p{L} = [A-Za-z],
 * \p{N} = [0-9], \s = [\t\n\v\f\r ]). ascii_match gives the match Oniguruma finds at i, trying
 * the alternatives in pattern order, as long as it reads only ASCII: it returns 0 ("ask the regex")
 * whenever the answer would depend on a byte at or past `a`, the first non-ASCII byte (a < n), e.g.
 * a letter run reaching a non-ASCII letter. The result equals Oniguruma's (compared on random text
 * by test_tokenizer and, through CLEF_TOK_REGEX_ONLY, by the parity test). */
enum { A_OTHER, A_LETTER, A_DIGIT, A_SPACE, A_CRLF, A_END, A_UNSURE };

static const unsigned char ascii_class[128] = {
    ['\t'] = A_SPACE, ['\n'] = A_CRLF, ['\v'] = A_SPACE, ['\f'] = A_SPACE, ['\r'] = A_CRLF, [' '] = A_SPACE,
    ['0'] = A_DIGIT, ['1'] = A_DIGIT, ['2'] = A_DIGIT, ['3'] = A_DIGIT, ['4'] = A_DIGIT, ['5'] = A_DIGIT,
    ['6'] = A_DIGIT, ['7'] = A_DIGIT, ['8'] = A_DIGIT, ['9'] = A_DIGIT,
    ['A'] = A_LETTER, ['B'] = A_LETTER, ['C'] = A_LETTER, ['D'] = A_LETTER, ['E'] = A_LETTER, ['F'] = A_LETTER,
    ['G'] = A_LETTER, ['H'] = A_LETTER, ['I'] = A_LETTER, ['J'] = A_LETTER, ['K'] = A_LETTER, ['L'] = A_LETTER,
    ['M'] = A_LETTER, ['N'] = A_LETTER, ['O'] = A_LETTER, ['P'] = A_LETTER, ['Q'] = A_LETTER, ['R'] = A_LETTER,
    ['S'] = A_LETTER, ['T'] = A_LETTER, ['U'] = A_LETTER, ['V'] = A_LETTER, ['W'] = A_LETTER, ['X'] = A_LETTER,
    ['Y'] = A_LETTER, ['Z'] = A_LETTER,
    ['a'] = A_LETTER, ['b'] = A_LETTER, ['c'] = A_LETTER, ['d'] = A_LETTER, ['e'] = A_LETTER, ['f'] = A_LETTER,
    ['g'] = A_LETTER, ['h'] = A_LETTER, ['i'] = A_LETTER, ['j'] = A_LETTER, ['k'] = A_LETTER, ['l'] = A_LETTER,
    ['m'] = A_LETTER, ['n'] = A_LETTER, ['o'] = A_LETTER, ['p'] = A_LETTER, ['q'] = A_LETTER, ['r'] = A_LETTER,
    ['s'] = A_LETTER, ['t'] = A_LETTER, ['u'] = A_LETTER, ['v'] = A_LETTER, ['w'] = A_LETTER, ['x'] = A_LETTER,
    ['y'] = A_LETTER, ['z'] = A_LETTER,
};

static inline int acls(const unsigned char *s, size_t n, size_t a, size_t j) {
    if (j >= n) return A_END;
    if (j >= a) return A_UNSURE;
    return ascii_class[s[j]];
}

/* End of the match at i (i < a), or 0 when the regex must decide. */
static size_t ascii_match(const unsigned char *s, size_t n, size_t a, size_t i) {
    int c0 = ascii_class[s[i]];
    size_t j;
    int c;
    /* (?i:'s|'t|'re|'ve|'m|'ll|'d) */
    if (s[i] == '\'') {
        c = acls(s, n, a, i + 1);
        if (c == A_UNSURE) return 0;
        if (c == A_LETTER) {
            int l = s[i + 1] | 0x20;
            if (l == 's' || l == 't' || l == 'm' || l == 'd') return i + 2;
            if (l == 'r' || l == 'v' || l == 'l') {
                int c2 = acls(s, n, a, i + 2);
                if (c2 == A_UNSURE) return 0;
                if (c2 == A_LETTER && (s[i + 2] | 0x20) == (l == 'l' ? 'l' : 'e')) return i + 3;
            }
        }
    }
    /* [^\r\n\p{L}\p{N}]?\p{L}+ (the \p{M} variant's [\p{L}\p{M}]+ is the same on ASCII) */
    if (c0 == A_LETTER || c0 == A_OTHER || c0 == A_SPACE) {
        j = c0 == A_LETTER ? i : i + 1;
        c = acls(s, n, a, j);
        if (c == A_UNSURE) return 0;
        if (c == A_LETTER) {
            while ((c = acls(s, n, a, j)) == A_LETTER) j++;
            return c == A_UNSURE ? 0 : j;
        }
    }
    /* \p{N} */
    if (c0 == A_DIGIT) return i + 1;
    /* " ?[^\s\p{L}\p{N}]+[\r\n]*" */
    j = s[i] == ' ' ? i + 1 : i;
    c = acls(s, n, a, j);
    if (c == A_UNSURE) return 0;
    if (c == A_OTHER) {
        while ((c = acls(s, n, a, j)) == A_OTHER) j++;
        while (c == A_CRLF) c = acls(s, n, a, ++j);
        return c == A_UNSURE ? 0 : j;
    }
    /* what is left starts with whitespace: \s*[\r\n]+ | \s+(?!\S) | \s+ */
    if (c0 != A_SPACE && c0 != A_CRLF) return 0; /* not reached for ASCII */
    size_t last_crlf = 0;
    int has_crlf = 0;
    j = i;
    while ((c = acls(s, n, a, j)) == A_SPACE || c == A_CRLF) {
        if (c == A_CRLF) { last_crlf = j; has_crlf = 1; }
        j++;
    }
    if (c == A_UNSURE) return 0; /* the run may go on with non-ASCII whitespace */
    if (has_crlf) return last_crlf + 1;
    if (c == A_END) return j;
    return j - i >= 2 ? j - 1 : j;
}

static int regex_error(int r, clef_err *err) {
    OnigUChar msg[ONIG_MAX_ERROR_MESSAGE_LEN];
    onig_error_code_to_str(msg, r);
    return clef_err_set(err, CLEF_E_INTERNAL, "the split regex failed: %s", (const char *)msg);
}

static int encode_segment(const clef_tokenizer *t, tok_work *w, cache_slot *cache, const char *s, size_t n, unsigned flags,
                          clef_ids *out, clef_err *err) {
    if (n == 0) return 0;
    if (t->nfc && nfc_may_change(s, n) && nfc(w, s, n, &s, &n, err)) return -1;
    const OnigUChar *b = (const OnigUChar *)s, *e = b + n;
    int fast = !(flags & CLEF_TOK_REGEX_ONLY);
    size_t prev = 0, pos = 0, a = 0; /* a: first non-ASCII byte at or after pos (or n) */
    while (pos < n) {
        size_t ms, me = 0;
        if (fast) {
            if (a < pos) a = pos;
            while (a < n && b[a] < 0x80) a++;
            if (pos < a) me = ascii_match(b, n, a, pos);
        }
        if (me) {
            ms = pos;
        } else {
            if (!w->region && !(w->region = onig_region_new())) return clef_err_set(err, CLEF_E_OOM, "out of memory");
            int r = onig_search(t->re, b, e, b + pos, e, w->region, ONIG_OPTION_NONE);
            if (r == ONIG_MISMATCH) break;
            if (r < 0) return regex_error(r, err);
            ms = (size_t)w->region->beg[0];
            me = (size_t)w->region->end[0];
            if (me == ms) { /* cannot happen with the two known patterns; step one code point like onig's find_iter */
                size_t k = pos + 1;
                while (k < n && (b[k] & 0xC0) == 0x80) k++;
                pos = k;
                continue;
            }
        }
        if (ms > prev && encode_pretoken(t, w, cache, b + prev, ms - prev, out, err)) return -1;
        if (encode_pretoken(t, w, cache, b + ms, me - ms, out, err)) return -1;
        prev = pos = me;
    }
    if (prev < n && encode_pretoken(t, w, cache, b + prev, n - prev, out, err)) return -1;
    return 0;
}

/* Offset of the first added token at or after `from` (leftmost, then longest), its index in *which;
 * len when none. */
static size_t find_added(const clef_tokenizer *t, const char *s, size_t len, size_t from, size_t *which) {
    if (t->n_added == 0) return len;
    size_t i = from;
    while (i < len) {
        if (t->single_first >= 0) {
            const char *q = memchr(s + i, t->single_first, len - i);
            if (!q) return len;
            i = (size_t)(q - s);
        }
        unsigned c = (unsigned char)s[i];
        for (size_t k = t->first_start[c]; k < t->first_start[c + 1]; k++) {
            const added_tok *a = &t->added[t->by_first[k]];
            if (a->len <= len - i && memcmp(s + i, a->s, a->len) == 0) {
                *which = t->by_first[k];
                return i;
            }
        }
        i++;
    }
    return len;
}

static int check_text(const char *text, size_t len, clef_err *err) {
    size_t ok = clef_utf8_valid_prefix(text, len);
    if (ok == len) return 0;
    const unsigned char *p = (const unsigned char *)text + ok;
    if (len - ok >= 3 && p[0] == 0xED && p[1] >= 0xA0 && p[1] <= 0xBF && (p[2] & 0xC0) == 0x80) {
        unsigned cp = 0xD000u | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu);
        return clef_err_set(err, CLEF_E_LONE_SURROGATE, "text holds a lone surrogate U+%04X (byte offset %zu)", cp, ok);
    }
    return clef_err_set(err, CLEF_E_INVALID_UTF8, "text is not valid UTF-8 (byte offset %zu)", ok);
}

int clef_tokenize_ex(const clef_tokenizer *t, const char *text, size_t len, unsigned flags, clef_ids *out, clef_err *err) {
    if (len && !text) return clef_err_set(err, CLEF_E_INTERNAL, "clef_tokenize: NULL text");
    if (check_text(text, len, err)) return -1;
    size_t n0 = out->n; /* on failure, out is left as it was */
    tok_tls *tls = tls_get();
    tok_work local;
    memset(&local, 0, sizeof local);
    tok_work *w = tls ? &tls->w : &local;
    cache_slot *cache = tls ? tls->slots : NULL;
    int rc = 0;
    size_t pos = 0;
    while (pos < len) {
        size_t which = 0;
        size_t at = (flags & CLEF_TOK_NO_ADDED) ? len : find_added(t, text, len, pos, &which);
        if (encode_segment(t, w, cache, text + pos, at - pos, flags, out, err)) { rc = -1; break; }
        if (at == len) break;
        if (clef_ids_push(out, t->added[which].id)) { rc = clef_err_set(err, CLEF_E_OOM, "out of memory"); break; }
        pos = at + t->added[which].len;
    }
    /* keep the thread's buffers unless one call made them large */
    if (!tls || w->syms_cap > (1u << 20) || w->norm_cap > (4u << 20) || w->cps_cap > (1u << 20) || w->bpe.cap > (1u << 20))
        work_free(w);
    if (rc == 0 && out->oom) rc = clef_err_set(err, CLEF_E_OOM, "out of memory");
    if (rc) out->n = n0 < out->n ? n0 : out->n;
    return rc;
}

int clef_tokenize(const clef_tokenizer *t, const char *text, size_t len, clef_ids *out, clef_err *err) {
    return clef_tokenize_ex(t, text, len, 0, out, err);
}
