/* Unit tests of src/text/tokenizer.c and bpe.c.
 *
 * With models/tiny/tokenizer.json (clef-flash's real file; written by make tiny): the prompt ids of
 * tokenizer.md §8, the §4.1 variant vectors under both variants, every added token inside text,
 * refusals (invalid UTF-8, lone surrogates), the empty string, concurrent calls. Without it the
 * test skips (exit 77). Always: the loader's refusals on small synthetic tokenizer.json files, and
 * the scan and heap BPE merge loops agreeing on random words over a random pair table. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "text/bpe.h"
#include "text/tokenizer.h"

#define TINY "models/tiny/tokenizer.json"
#define PM "models/tokenizer-pm/tokenizer.json"

static int ids_eq(const clef_ids *a, const int32_t *want, size_t n) {
    if (a->n != n) return 0;
    for (size_t i = 0; i < n; i++)
        if (a->v[i] != want[i]) return 0;
    return 1;
}

static void print_ids(const char *label, const clef_ids *a) {
    fprintf(stderr, "  %s (%zu):", label, a->n);
    for (size_t i = 0; i < a->n && i < 64; i++) fprintf(stderr, " %d", (int)a->v[i]);
    fputc('\n', stderr);
}

/* Tokenizes text and compares with want; prints both on mismatch. */
#define CHECK_IDS(t, text, ...) do { static const int32_t w_[] = {__VA_ARGS__}; clef_ids o_; clef_ids_init(&o_); \
    clef_err e_; clef_err_clear(&e_); int rc_ = clef_tokenize((t), (text), strlen(text), &o_, &e_); \
    CHECK_MSG(rc_ == 0 && ids_eq(&o_, w_, sizeof w_ / sizeof w_[0]), "%s: %s", (text), rc_ ? e_.msg : "ids differ"); \
    if (rc_ != 0 || !ids_eq(&o_, w_, sizeof w_ / sizeof w_[0])) { print_ids("got", &o_); } \
    clef_ids_free(&o_); } while (0)

static const char *refusal(const clef_tokenizer *t, const char *s, size_t n) {
    clef_ids o;
    clef_ids_init(&o);
    clef_ids_push(&o, 7);
    clef_err e;
    clef_err_clear(&e);
    int rc = clef_tokenize(t, s, n, &o, &e);
    int untouched = o.n == 1 && o.v[0] == 7;
    clef_ids_free(&o);
    if (rc == 0) return "(accepted)";
    if (!untouched) return "(output changed)";
    return e.type;
}

static const char *const added_table[33] = {
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
    "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
    "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>",
    "</tool_response>", "<think>", "</think>", "<|audio_start|>", "<|audio_end|>", "<tts_pad>",
    "<tts_text_bos>", "<tts_text_eod>", "<tts_text_bos_single>", "<|audio_pad|>",
};

static int tok(const clef_tokenizer *t, const char *s, clef_ids *o) {
    clef_err e;
    o->n = 0;
    return clef_tokenize(t, s, strlen(s), o, &e);
}

static void test_real_file(void) {
    clef_err err;
    clef_err_clear(&err);
    clef_tokenizer *t = clef_tokenizer_load(TINY, CLEF_SPLIT_FROM_FILE, &err);
    CHECK_MSG(t != NULL, "%s: %s", err.type, err.msg);
    if (!t) return;
    CHECK(clef_tokenizer_variant(t) == CLEF_SPLIT_QWEN2);
    CHECK(clef_tokenizer_vocab_size(t) == 248077);
    CHECK(clef_tokenizer_added_id(t, "<|image_pad|>") == 248056);
    CHECK(clef_tokenizer_added_id(t, "<think>") == 248068);
    CHECK(clef_tokenizer_added_id(t, "<think") == -1);

    /* tokenizer.md §8 */
    CHECK_IDS(t, "<|im_start|>system\nRead the complete state and schema. Decide every field jointly. Each answer "
                 "must be exactly one of that field's allowed options.<|im_end|>\n<|im_start|>user\nSTATE:\n",
              248045, 8678, 198, 4274, 279, 4434, 1528, 321, 10485, 13, 95462, 1396, 2002, 50407, 13, 8618, 4087, 1902,
              381, 6681, 799, 314, 421, 2002, 579, 5252, 2519, 13, 248046, 198, 248045, 846, 198, 23852, 25, 198);
    CHECK_IDS(t, "\n<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nJOINT SCHEMA DECISIONS:", 198, 248046, 198,
              248045, 74455, 198, 248068, 271, 248069, 271, 25310, 3118, 7295, 34651, 41402, 23451, 50, 25);
    CHECK_IDS(t, "\n\nSCHEMA FIELDS:\n", 271, 3423, 34651, 426, 32349, 25, 198);
    CHECK_IDS(t, "\nFIELD 1\nID: department\nTYPE: choice\nINSTRUCTION: ", 198, 27806, 220, 16, 198, 887, 25, 9016, 198,
              9222, 25, 5576, 198, 669, 55530, 25, 220);
    CHECK_IDS(t, "The capital of France is", 760, 6511, 314, 9338, 369);
    CHECK_IDS(t, " Paris.", 11751, 13);
    CHECK_IDS(t, "\n", 198);
    CHECK_IDS(t, "\n\n", 271);
    CHECK_IDS(t, ":", 25);
    CHECK_IDS(t, "user", 846);
    CHECK_IDS(t, "assistant", 74455);
    CHECK_IDS(t, "ありますか", 248043);
    CHECK_IDS(t, " ", 220);

    /* §4.1 discriminating vectors: the file's (Qwen2) split */
    CHECK_IDS(t, "क्", 62516, 28640);
    CHECK_IDS(t, "क्ष", 62516, 157451);

    /* every added token inside text: ids(a) + [id] + ids(b) */
    clef_ids a, b, whole;
    clef_ids_init(&a);
    clef_ids_init(&b);
    clef_ids_init(&whole);
    tok(t, "Hello ", &a);
    tok(t, " world", &b);
    for (int i = 0; i < 33; i++) {
        int32_t id = clef_tokenizer_added_id(t, added_table[i]);
        CHECK_MSG(id == 248044 + i, "%s has id %d", added_table[i], (int)id);
        char buf[128];
        snprintf(buf, sizeof buf, "Hello %s world", added_table[i]);
        tok(t, buf, &whole);
        int ok = whole.n == a.n + 1 + b.n && whole.v[a.n] == 248044 + i && !memcmp(whole.v, a.v, a.n * 4) &&
                 !memcmp(whole.v + a.n + 1, b.v, b.n * 4);
        CHECK_MSG(ok, "added token inside text: %s", buf);
        snprintf(buf, sizeof buf, "%s%s", added_table[i], added_table[(i + 1) % 33]);
        tok(t, buf, &whole);
        CHECK_MSG(whole.n == 2 && whole.v[0] == 248044 + i && whole.v[1] == 248044 + (i + 1) % 33, "adjacent: %s", buf);
    }
    /* not an added token: prefixes / near misses stay text */
    tok(t, "<think", &whole);
    CHECK(whole.n > 1);
    for (size_t i = 0; i < whole.n; i++) CHECK(whole.v[i] < 248044);
    /* the same text without added-token matching */
    clef_err e;
    whole.n = 0;
    CHECK(clef_tokenize_ex(t, "<think>", 7, CLEF_TOK_NO_ADDED, &whole, &e) == 0);
    CHECK(whole.n > 1 && whole.v[0] != 248068);
    clef_ids_free(&a);
    clef_ids_free(&b);
    clef_ids_free(&whole);

    /* refusals: nothing appended */
    CHECK_STR(refusal(t, "\xff", 1), "InvalidUtf8");
    CHECK_STR(refusal(t, "ab\xc3", 3), "InvalidUtf8");
    CHECK_STR(refusal(t, "\xc0\xaf", 2), "InvalidUtf8");
    CHECK_STR(refusal(t, "\xf4\x90\x80\x80", 4), "InvalidUtf8");
    CHECK_STR(refusal(t, "\xe2\x82", 2), "InvalidUtf8");
    CHECK_STR(refusal(t, "<think>\x80", 8), "InvalidUtf8");
    CHECK_STR(refusal(t, "\xed\xa0\x80", 3), "LoneSurrogate");
    CHECK_STR(refusal(t, "a\xed\xbf\xbf" "b", 5), "LoneSurrogate");
    CHECK_STR(refusal(t, "\xed\xa0\xbd\xed\xb8\x80", 6), "LoneSurrogate"); /* a pair in CESU form */

    /* empty string and NUL bytes */
    clef_ids o;
    clef_ids_init(&o);
    CHECK(clef_tokenize(t, "", 0, &o, &e) == 0 && o.n == 0);
    CHECK(clef_tokenize(t, NULL, 0, &o, &e) == 0 && o.n == 0);
    CHECK(clef_tokenize(t, "a\0b", 3, &o, &e) == 0 && o.n == 3 && o.v[1] == 188);
    clef_ids_free(&o);
    clef_tokenizer_free(t);

    /* the \p{M} variant, forced on the same file */
    t = clef_tokenizer_load(TINY, CLEF_SPLIT_QWEN35, &err);
    CHECK_MSG(t != NULL, "%s", err.msg);
    if (t) {
        CHECK(clef_tokenizer_variant(t) == CLEF_SPLIT_QWEN35);
        CHECK_IDS(t, "क्", 149567);
        CHECK_IDS(t, "क्ष", 151858);
        CHECK_IDS(t, "The capital of France is", 760, 6511, 314, 9338, 369);
        clef_tokenizer_free(t);
    }
    /* the \p{M} file, by its own pattern; and Qwen2 forced on it */
    if (access(PM, R_OK) == 0) {
        t = clef_tokenizer_load(PM, CLEF_SPLIT_FROM_FILE, &err);
        CHECK_MSG(t != NULL, "%s", err.msg);
        if (t) {
            CHECK(clef_tokenizer_variant(t) == CLEF_SPLIT_QWEN35);
            CHECK_IDS(t, "क्", 149567);
            CHECK_IDS(t, "क्ष", 151858);
            clef_tokenizer_free(t);
        }
        t = clef_tokenizer_load(PM, CLEF_SPLIT_QWEN2, &err);
        if (t) {
            CHECK_IDS(t, "क्ष", 62516, 157451);
            clef_tokenizer_free(t);
        }
    } else {
        fprintf(stderr, "note: %s absent, its by-pattern load not tested\n", PM);
    }
}

/* The ASCII fast path of the split equals Oniguruma alone, on random text made of ASCII classes
 * with some non-ASCII letters, marks, spaces and fold-sensitive characters mixed in. */
static uint64_t rng_state;
static uint32_t rnd(uint32_t n);

static void test_fast_path(void) {
    clef_err err;
    static const char *const pieces[] = {
        "a", "Z", "s", "S", "t", "T", "l", "L", "e", "E", "r", "R", "v", "V", "m", "d", "D", "x", "0", "7", " ", " ",
        "  ", "\t", "\n", "\r", "\r\n", "\v", "\f", "'", "'", "!", ".", "-", "\"", "{", "}", ":", ",", "\x01", "\x7f",
        "\xc3\xa9", "e\xcc\x81", "\xc5\xbf" /* long s */, "\xe2\x84\xaa" /* Kelvin */, "\xc2\xa0", "\xe3\x80\x80",
        "\xe4\xb8\xad", "\xe0\xa4\x95\xe0\xa5\x8d", "\xd9\xa3", "\xef\xb8\x8f", "\xc2\x85", "\xe2\x80\xa8",
        "\xf0\x9f\x98\x80", "\xc2\xb2",
    };
    const size_t np = sizeof pieces / sizeof pieces[0];
    for (int v = 0; v < 2; v++) {
        clef_tokenizer *t = clef_tokenizer_load(TINY, v ? CLEF_SPLIT_QWEN35 : CLEF_SPLIT_QWEN2, &err);
        if (!t) { CHECK(0); return; }
        clef_ids x, y;
        clef_ids_init(&x);
        clef_ids_init(&y);
        int bad = 0;
        char buf[512];
        for (int it = 0; it < 20000; it++) {
            size_t len = 0, k = 1 + rnd(24);
            for (size_t i = 0; i < k; i++) {
                const char *pc = pieces[rnd(it % 4 ? 41 : (uint32_t)np)]; /* mostly ASCII */
                size_t pl = strlen(pc);
                memcpy(buf + len, pc, pl);
                len += pl;
            }
            x.n = y.n = 0;
            int r1 = clef_tokenize_ex(t, buf, len, 0, &x, &err), r2 = clef_tokenize_ex(t, buf, len, CLEF_TOK_REGEX_ONLY, &y, &err);
            if (r1 || r2 || x.n != y.n || memcmp(x.v, y.v, x.n * sizeof *x.v)) {
                if (bad++ < 5) fprintf(stderr, "  fast path differs on \"%.*s\"\n", (int)len, buf);
            }
        }
        CHECK_MSG(bad == 0, "ASCII fast path differs from the regex on %d of 20000 strings (variant %d)", bad, v);
        clef_ids_free(&x);
        clef_ids_free(&y);
        clef_tokenizer_free(t);
    }
}

/* ---------------------------------------------------------------- concurrency */

typedef struct {
    const clef_tokenizer *t;
    const char *const *texts;
    size_t n;
    const clef_ids *want;
    int bad;
} thr_arg;

static void *thr_main(void *p) {
    thr_arg *a = p;
    clef_ids o;
    clef_ids_init(&o);
    for (int round = 0; round < 30; round++) {
        for (size_t i = 0; i < a->n; i++) {
            size_t k = (i + (size_t)round) % a->n;
            clef_err e;
            o.n = 0;
            if (clef_tokenize(a->t, a->texts[k], strlen(a->texts[k]), &o, &e) || o.n != a->want[k].n ||
                memcmp(o.v, a->want[k].v, o.n * sizeof *o.v))
                a->bad++;
        }
    }
    clef_ids_free(&o);
    return NULL;
}

static void test_threads(void) {
    clef_err err;
    clef_tokenizer *t = clef_tokenizer_load(TINY, CLEF_SPLIT_FROM_FILE, &err);
    if (!t) return;
    static const char *const texts[] = {
        "The quick brown fox jumps over the lazy dog. It's 12:30!", "中文测试，漢字かなカナ。한국어 텍스트",
        "{\"a\":[1,2,3],\"b\":{\"c\":\"d\"}}\n\n  <think>x</think>", "café cafe\xcc\x81 na\xc3\xafve \xe0\xa4\x95\xe0\xa5\x8d",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        "    \t\t\r\n\r\n   x  y   ", "\xf0\x9f\x8f\xb3\xef\xb8\x8f\xe2\x80\x8d\xf0\x9f\x8c\x88 emoji \xe2\x9d\xa4\xef\xb8\x8f",
    };
    size_t n = sizeof texts / sizeof texts[0];
    clef_ids want[sizeof texts / sizeof texts[0]];
    for (size_t i = 0; i < n; i++) {
        clef_ids_init(&want[i]);
        clef_tokenize(t, texts[i], strlen(texts[i]), &want[i], &err);
    }
    pthread_t th[4];
    thr_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (thr_arg){t, texts, n, want, 0};
        pthread_create(&th[i], NULL, thr_main, &args[i]);
    }
    int bad = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        bad += args[i].bad;
    }
    CHECK_MSG(bad == 0, "%d concurrent results differ", bad);
    for (size_t i = 0; i < n; i++) clef_ids_free(&want[i]);
    clef_tokenizer_free(t);
}

/* ---------------------------------------------------------------- BPE loops agree */

static uint64_t rng_state = 88172645463325252ull;
static uint32_t rnd(uint32_t n) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state % n);
}

static void test_bpe_loops(void) {
    /* symbols 0..3 are "bytes"; 300 random merges over existing symbols with distinct ranks */
    bpe_pairs p;
    CHECK(clef_bpe_pairs_init(&p, 400) == 0);
    int32_t next_id = 4;
    for (uint32_t r = 0; r < 300; r++) {
        uint32_t a = rnd((uint32_t)next_id), b = rnd((uint32_t)next_id);
        if (bpe_pairs_get(&p, a, b)) continue;
        clef_bpe_pairs_put(&p, a, b, r, next_id++);
    }
    bpe_work w;
    memset(&w, 0, sizeof w);
    int32_t x[300], y[300];
    int bad = 0;
    for (int it = 0; it < 3000; it++) {
        size_t n = 1 + rnd(it < 2000 ? 40 : 300);
        for (size_t i = 0; i < n; i++) x[i] = y[i] = (int32_t)rnd(it % 3 ? 4 : 2); /* few symbols: many ties */
        size_t m1 = clef_bpe_merge_scan(&p, x, n, &w), m2 = clef_bpe_merge_heap(&p, y, n, &w);
        if (m1 != m2 || memcmp(x, y, m1 * sizeof *x)) bad++;
    }
    CHECK_MSG(bad == 0, "scan and heap BPE differ on %d of 3000 words", bad);
    /* leftmost first on ties: pairs (0,0)->4 rank 0 over "000" gives [4, 0] */
    bpe_pairs q;
    clef_bpe_pairs_init(&q, 4);
    clef_bpe_pairs_put(&q, 0, 0, 0, 4);
    int32_t z[3] = {0, 0, 0}, z2[3] = {0, 0, 0};
    size_t m = clef_bpe_merge_scan(&q, z, 3, &w), m2 = clef_bpe_merge_heap(&q, z2, 3, &w);
    CHECK(m == 2 && z[0] == 4 && z[1] == 0);
    CHECK(m2 == 2 && z2[0] == 4 && z2[1] == 0);
    /* a later duplicate pair overwrites (HF collects merges into a HashMap) */
    clef_bpe_pairs_put(&q, 0, 0, 9, 5);
    CHECK(q.replaced == 1 && bpe_pairs_get(&q, 0, 0)->rank == 9 && bpe_pairs_get(&q, 0, 0)->merged == 5);
    clef_bpe_pairs_free(&q);
    clef_bpe_work_free(&w);
    clef_bpe_pairs_free(&p);
}

/* ---------------------------------------------------------------- loader refusals (synthetic files) */

static uint32_t byte_char(unsigned b) {
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) return b;
    unsigned k = 0;
    for (unsigned x = 0; x < b; x++)
        if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255))) k++;
    return 256 + k;
}

/* Writes a small tokenizer.json: 256 byte symbols (id = byte), "ab" 256, "abc" 257, merges given
 * as strings "a b" and a pair ["ab","c"]; the given regex, normalizer and added-token flag. */
static int write_synthetic(const char *path, const char *regex_json, const char *normalizer, const char *added_flag) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":[{\"id\":258,\"content\":\"<x>\","
               "\"single_word\":false,\"lstrip\":%s,\"rstrip\":false,\"normalized\":false,\"special\":true}],"
               "\"normalizer\":%s,\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\","
               "\"pattern\":{\"Regex\":%s},\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\","
               "\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":false}]},\"post_processor\":null,"
               "\"decoder\":null,\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":null,"
               "\"continuing_subword_prefix\":\"\",\"end_of_word_suffix\":\"\",\"fuse_unk\":false,\"byte_fallback\":false,"
               "\"ignore_merges\":false,\"vocab\":{",
            added_flag, normalizer, regex_json);
    for (unsigned b = 0; b < 256; b++) {
        uint32_t c = byte_char(b);
        if (c == '"' || c == '\\') fprintf(f, "\"\\%c\":%u,", (char)c, b);
        else if (c < 128) fprintf(f, "\"%c\":%u,", (char)c, b);
        else fprintf(f, "\"\\u%04x\":%u,", c, b);
    }
    fprintf(f, "\"ab\":256,\"abc\":257},\"merges\":[\"a b\",[\"ab\",\"c\"]]}}");
    return fclose(f);
}

static void test_loader(void) {
    char dir[] = "/tmp/clef_test_tok_XXXXXX";
    if (!mkdtemp(dir)) { CHECK(0); return; }
    char path[128];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    static const char *const qwen2 = "\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}| "
                                     "?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"";
    clef_err err;
    clef_tokenizer *t;

    CHECK(write_synthetic(path, qwen2, "{\"type\":\"NFC\"}", "false") == 0);
    t = clef_tokenizer_load(path, CLEF_SPLIT_FROM_FILE, &err);
    CHECK_MSG(t != NULL, "%s", t ? "" : err.msg);
    if (t) {
        CHECK(clef_tokenizer_vocab_size(t) == 259);
        CHECK_IDS(t, "abc", 257);
        CHECK_IDS(t, "abd", 256, 'd');
        CHECK_IDS(t, "ab<x>c", 256, 258, 'c');
        CHECK_IDS(t, "x abc", 'x', ' ', 257); /* pretokens "x", " abc" */
        CHECK_IDS(t, "caf\xc3\xa9 cafe\xcc\x81", 'c', 'a', 'f', 0xc3, 0xa9, ' ', 'c', 'a', 'f', 0xc3, 0xa9); /* NFC */
        clef_tokenizer_free(t);
    }
    /* unknown split pattern: refused unless forced */
    CHECK(write_synthetic(path, "\"\\\\w+|\\\\s+\"", "{\"type\":\"NFC\"}", "false") == 0);
    t = clef_tokenizer_load(path, CLEF_SPLIT_FROM_FILE, &err);
    CHECK(t == NULL && err.type && !strcmp(err.type, "BadModel") && strstr(err.msg, "--split"));
    clef_tokenizer_free(t);
    t = clef_tokenizer_load(path, CLEF_SPLIT_QWEN2, &err);
    CHECK(t != NULL);
    clef_tokenizer_free(t);
    /* unsupported normalizer, added-token flag */
    CHECK(write_synthetic(path, qwen2, "{\"type\":\"Lowercase\"}", "false") == 0);
    t = clef_tokenizer_load(path, CLEF_SPLIT_FROM_FILE, &err);
    CHECK(t == NULL && !strcmp(err.type, "BadModel") && strstr(err.msg, "normalizer"));
    CHECK(write_synthetic(path, qwen2, "null", "true") == 0);
    t = clef_tokenizer_load(path, CLEF_SPLIT_FROM_FILE, &err);
    CHECK(t == NULL && !strcmp(err.type, "BadModel") && strstr(err.msg, "lstrip"));
    /* missing file */
    t = clef_tokenizer_load("/nonexistent/tokenizer.json", CLEF_SPLIT_FROM_FILE, &err);
    CHECK(t == NULL && !strcmp(err.type, "IoError"));
    unlink(path);
    rmdir(dir);
}

int main(void) {
    test_bpe_loops();
    test_loader();
    if (access(TINY, R_OK) != 0) {
        if (TEST_END()) return 1; /* the file-independent parts failed */
        printf("skipped: %s is absent (make tiny writes it)\n", TINY);
        return 77;
    }
    test_real_file();
    test_fast_path();
    test_threads();
    return TEST_END();
}
