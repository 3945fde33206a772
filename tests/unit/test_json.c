/* Unit tests for src/base/json.c: every example of contract.md §5, Python's error messages, limits,
 * builders, lookups, truthiness, key order with surrogates, and a large-document timing check.
 * (The byte-for-byte comparison with CPython over 150k generated cases is
 * tests/parity/test_json_cpython.py.) */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "base/json.h"
#include "base/utf8.h"

static char rendered[8192];

/* Parses and renders (sorted or not); returns the rendering or "ERR:<type>:<message>". */
static const char *rt_n(const char *in, size_t len, int sort) {
    clef_err err;
    json_doc *d = clef_json_parse(in, len, NULL, &err);
    if (!d) {
        snprintf(rendered, sizeof rendered, "ERR:%s:%s", err.type, err.msg);
        return rendered;
    }
    clef_buf b;
    clef_buf_init(&b);
    clef_json_render(&b, clef_json_doc_root(d), sort);
    snprintf(rendered, sizeof rendered, "%s", b.data ? b.data : "");
    clef_buf_free(&b);
    clef_json_doc_free(d);
    return rendered;
}
static const char *rt(const char *in) { return rt_n(in, strlen(in), 1); }
static const char *rtu(const char *in) { return rt_n(in, strlen(in), 0); }

static void test_contract_examples(void) {
    /* §5.2 key order */
    CHECK_STR(rt("{\"Z\":1,\"a\":2,\"_\":3,\"\xc3\xa9\":4,\"10\":5,\"9\":6}"),
              "{\"10\":5,\"9\":6,\"Z\":1,\"_\":3,\"a\":2,\"\xc3\xa9\":4}");
    CHECK_STR(rt("{\"ab\":1,\"a\":2,\"\":3,\"a\\u0000\":4,\"A\":5}"), "{\"\":3,\"A\":5,\"a\":2,\"a\\u0000\":4,\"ab\":1}");
    CHECK_STR(rt("{\"b\":1,\"a\":[1,2.5,{\"z\":null,\"y\":true}]}"), "{\"a\":[1,2.5,{\"y\":true,\"z\":null}],\"b\":1}");
    CHECK_STR(rtu("{\"b\":1,\"a\":[1,2.5,{\"z\":null,\"y\":true}]}"), "{\"b\":1,\"a\":[1,2.5,{\"z\":null,\"y\":true}]}");
    /* §5.2 floats */
    CHECK_STR(rt("[1E5,1e-7,0.00001,0.0001,1e16,1e15]"), "[100000.0,1e-07,1e-05,0.0001,1e+16,1000000000000000.0]");
    CHECK_STR(rt("[12345678901234567.0,5e-324,-0.0,2.5E+3]"), "[1.2345678901234568e+16,5e-324,-0.0,2500.0]");
    CHECK_STR(rt("[1e400,-1e400,NaN,Infinity,-Infinity]"), "[Infinity,-Infinity,NaN,Infinity,-Infinity]");
    /* §5.1 / §5.2 integers */
    CHECK_STR(rt("9007199254740993"), "9007199254740993");
    CHECK_STR(rt("-0"), "0");
    CHECK_STR(rt("[-0,0,-1,123456789012345678901234567890]"), "[0,0,-1,123456789012345678901234567890]");
    /* §2.2 duplicate keys: last value, first position */
    CHECK_STR(rtu("{\"a\":1,\"b\":2,\"a\":3}"), "{\"a\":3,\"b\":2}");
    CHECK_STR(rtu("{\"b\":1,\"a\":2,\"b\":3,\"c\":4,\"a\":5}"), "{\"b\":3,\"a\":5,\"c\":4}");
    /* §5.1 surrogate pairs; §5.2 "😀 \ud83d\ude00" becomes two raw emoji */
    CHECK_STR(rt("\"\xf0\x9f\x98\x80 \\ud83d\\ude00\""), "\"\xf0\x9f\x98\x80 \xf0\x9f\x98\x80\"");
    /* §5.2 escaping */
    CHECK_STR(rt("\"\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u0000 \\u001F \\u007f \\u2028 <>&\""),
              "\"\\\" \\\\ / \\b \\f \\n \\r \\t \\u0000 \\u001f \x7f \xe2\x80\xa8 <>&\"");
    CHECK_STR(rt("[true,false,null]"), "[true,false,null]");
    /* whitespace: only space, tab, LF, CR */
    CHECK_STR(rt(" \t\r\n[ 1 ,\t2\n]\r\n"), "[1,2]");
}

static void test_lone_surrogates(void) {
    CHECK_STR(rt("\"\\ud800\""), "\"\xed\xa0\x80\"");
    CHECK_STR(rt("\"\\udfff\\ud800\""), "\"\xed\xbf\xbf\xed\xa0\x80\"");
    CHECK_STR(rt("\"\\ud800\\u0041\""), "\"\xed\xa0\x80" "A\"");
    CHECK_STR(rt("\"\\ud800\\ud83d\\ude00\""), "\"\xed\xa0\x80\xf0\x9f\x98\x80\"");
    /* surrogate keys sort after U+D7FF and before U+E000 and astral characters, by code point */
    CHECK_STR(rt("{\"\\ud83d\\ude00\":1,\"\\ue000\":2,\"\\ud800\":3,\"\\ud7ff\":4}"),
              "{\"\xed\x9f\xbf\":4,\"\xed\xa0\x80\":3,\"\xee\x80\x80\":2,\"\xf0\x9f\x98\x80\":1}");
    clef_err err;
    const char *s = "{\"a\":[1,{\"k\":\"x\\udc00\"}]}";
    json_doc *d = clef_json_parse(s, strlen(s), NULL, &err);
    CHECK(d && clef_json_has_lone_surrogate(clef_json_doc_root(d)));
    clef_json_doc_free(d);
    s = "{\"\\ud800\":1}";
    d = clef_json_parse(s, strlen(s), NULL, &err);
    CHECK(d && clef_json_has_lone_surrogate(clef_json_doc_root(d)));
    clef_json_doc_free(d);
    s = "{\"a\":[\"\\ud83d\\ude00\",\"\xed\x9f\xbf\"]}";
    d = clef_json_parse(s, strlen(s), NULL, &err);
    CHECK(d && !clef_json_has_lone_surrogate(clef_json_doc_root(d)));
    clef_json_doc_free(d);
}

static void test_errors(void) {
    /* CPython 3.12's json.loads messages */
    CHECK_STR(rt(""), "ERR:BadJson:Expecting value: line 1 column 1 (char 0)");
    CHECK_STR(rt("   "), "ERR:BadJson:Expecting value: line 1 column 4 (char 3)");
    CHECK_STR(rt("[1,]"), "ERR:BadJson:Expecting value: line 1 column 4 (char 3)");
    CHECK_STR(rt("{\"a\":1,}"), "ERR:BadJson:Expecting property name enclosed in double quotes: line 1 column 8 (char 7)");
    CHECK_STR(rt("{\"a\" 1}"), "ERR:BadJson:Expecting ':' delimiter: line 1 column 6 (char 5)");
    CHECK_STR(rt("[1 2]"), "ERR:BadJson:Expecting ',' delimiter: line 1 column 4 (char 3)");
    CHECK_STR(rt("1 2"), "ERR:BadJson:Extra data: line 1 column 3 (char 2)");
    CHECK_STR(rt("[1,\n 2,\n x]"), "ERR:BadJson:Expecting value: line 3 column 2 (char 9)");
    CHECK_STR(rt("\"\xc3\xa9\xc3\xa9\" x"), "ERR:BadJson:Extra data: line 1 column 6 (char 5)"); /* chars */
    CHECK_STR(rt("\"abc"), "ERR:BadJson:Unterminated string starting at: line 1 column 1 (char 0)");
    CHECK_STR(rt("\"a\\x\""), "ERR:BadJson:Invalid \\escape: line 1 column 3 (char 2)");
    CHECK_STR(rt("\"\\u12"), "ERR:BadJson:Invalid \\uXXXX escape: line 1 column 3 (char 2)");
    CHECK_STR(rt("\"\\uZZZZ\""), "ERR:BadJson:Invalid \\uXXXX escape: line 1 column 3 (char 2)");
    CHECK_STR(rt("\"a\tb\""), "ERR:BadJson:Invalid control character at: line 1 column 3 (char 2)");
    CHECK_STR(rt("\xef\xbb\xbf{}"), "ERR:BadJson:Unexpected UTF-8 BOM (decode using utf-8-sig): line 1 column 1 (char 0)");
    CHECK_STR(rt("01"), "ERR:BadJson:Extra data: line 1 column 2 (char 1)");
    CHECK_STR(rt("1."), "ERR:BadJson:Extra data: line 1 column 2 (char 1)");
    CHECK_STR(rt("-"), "ERR:BadJson:Expecting value: line 1 column 1 (char 0)");
    CHECK_STR(rt("nan"), "ERR:BadJson:Expecting value: line 1 column 1 (char 0)");
    CHECK_STR(rt("\x0b" "1"), "ERR:BadJson:Expecting value: line 1 column 1 (char 0)"); /* not Python whitespace */
    CHECK_STR(rt("\xc2\xa0" "1"), "ERR:BadJson:Expecting value: line 1 column 1 (char 0)");
    /* not UTF-8 */
    CHECK(strncmp(rt("\"\xff\""), "ERR:InvalidUtf8:", 16) == 0);
    CHECK(strncmp(rt("\"\xed\xa0\x80\""), "ERR:InvalidUtf8:", 16) == 0); /* raw surrogate bytes */
    CHECK(strncmp(rt("\"\xc0\xaf\""), "ERR:InvalidUtf8:", 16) == 0);    /* overlong */
    CHECK(strncmp(rt("[1, \xf4\x90\x80\x80]"), "ERR:InvalidUtf8:", 16) == 0);
    /* NUL bytes inside the input are ordinary (invalid) characters; \u0000 is a valid string char */
    CHECK_STR(rt_n("[1]\0", 4, 1), "ERR:BadJson:Extra data: line 1 column 4 (char 3)");
    CHECK_STR(rt_n("\"a\0\"", 4, 1), "ERR:BadJson:Invalid control character at: line 1 column 3 (char 2)");
}

static void test_big_ints(void) {
    char *buf = malloc(4400 + 16);
    memset(buf, '7', 4300);
    buf[4300] = '\0';
    const char *r = rt(buf);
    CHECK(strlen(r) == 4300 && r[0] == '7');
    buf[0] = '-';
    memset(buf + 1, '7', 4300);
    buf[4301] = '\0';
    r = rt(buf); /* 4300 digits and a sign: allowed */
    CHECK(strlen(r) == 4301);
    memset(buf, '7', 4301);
    buf[4301] = '\0';
    CHECK_STR(rt(buf), "ERR:BadJson:Exceeds the limit (4300 digits) for integer string conversion: value has 4301 "
                       "digits; use sys.set_int_max_str_digits() to increase the limit");
    /* a long float literal is not an int: no limit */
    memset(buf, '1', 4400);
    memcpy(buf + 4400, ".5", 3);
    CHECK_STR(rt(buf), "Infinity");
    free(buf);
}

static void test_limits(void) {
    clef_err err;
    json_limits lim = {10, 0};
    json_doc *d = clef_json_parse("[1,2,3,4,5]", 11, &lim, &err);
    CHECK(!d && strcmp(err.type, CLEF_E_LIMIT) == 0);
    lim.max_bytes = 11;
    d = clef_json_parse("[1,2,3,4,5]", 11, &lim, &err);
    CHECK(d != NULL);
    clef_json_doc_free(d);
    /* depth: default 512 */
    char deep[2100];
    for (int i = 0; i < 512; i++) deep[i] = '[';
    for (int i = 0; i < 512; i++) deep[512 + i] = ']';
    d = clef_json_parse(deep, 1024, NULL, &err);
    CHECK(d != NULL);
    clef_json_doc_free(d);
    for (int i = 0; i < 513; i++) deep[i] = '[';
    for (int i = 0; i < 513; i++) deep[513 + i] = ']';
    d = clef_json_parse(deep, 1026, NULL, &err);
    CHECK(!d && strcmp(err.type, CLEF_E_LIMIT) == 0);
    json_limits l3 = {0, 3};
    d = clef_json_parse("[[[1]]]", 7, &l3, &err);
    CHECK(d != NULL);
    clef_json_doc_free(d);
    d = clef_json_parse("[[[{}]]]", 8, &l3, &err);
    CHECK(!d && strcmp(err.type, CLEF_E_LIMIT) == 0 && strstr(err.msg, "deeper than 3"));
}

static void test_builders_and_lookups(void) {
    json_doc *d = clef_json_doc_new();
    json_value *o = clef_json_new_object(d);
    CHECK(clef_json_object_set(d, o, "model", 5, clef_json_new_string(d, "m\"1", 3)) == 0);
    json_value *arr = clef_json_new_array(d);
    for (int i = 0; i < 20; i++) CHECK(clef_json_array_push(d, arr, clef_json_new_int(d, i - 5)) == 0);
    CHECK(clef_json_object_set(d, o, "list", 4, arr) == 0);
    CHECK(clef_json_object_set(d, o, "f", 1, clef_json_new_float(d, 0.9731)) == 0);
    CHECK(clef_json_object_set(d, o, "model", 5, clef_json_new_bool(d, 1)) == 0); /* replaces in place */
    CHECK(clef_json_object_set(d, o, "n", 1, clef_json_new_null(d)) == 0);
    CHECK(clef_json_object_set(d, o, "k\0x", 3, clef_json_new_float(d, 1.0)) == 0);
    clef_json_doc_set_root(d, o);
    clef_buf b;
    clef_buf_init(&b);
    clef_json_render(&b, clef_json_doc_root(d), 0);
    CHECK_STR(b.data, "{\"model\":true,\"list\":[-5,-4,-3,-2,-1,0,1,2,3,4,5,6,7,8,9,10,11,12,13,14],"
                      "\"f\":0.9731,\"n\":null,\"k\\u0000x\":1.0}");
    clef_buf_reset(&b);
    clef_json_render(&b, o, 1);
    CHECK_STR(b.data, "{\"f\":0.9731,\"k\\u0000x\":1.0,\"list\":[-5,-4,-3,-2,-1,0,1,2,3,4,5,6,7,8,9,10,11,12,13,14],"
                      "\"model\":true,\"n\":null}");
    CHECK(clef_json_object_get(o, "f") && clef_json_object_get(o, "f")->kind == JSON_FLOAT);
    CHECK(clef_json_object_get(o, "absent") == NULL);
    CHECK(clef_json_object_get(arr, "f") == NULL);
    CHECK(clef_json_object_getn(o, "k\0x", 3) != NULL);
    CHECK(clef_json_object_getn(o, "k", 1) == NULL);
    /* render_py: a string raw, anything else sorted dumps */
    clef_buf_reset(&b);
    clef_json_render_py(&b, clef_json_new_string(d, "a\nb\"", 4));
    CHECK_STR(b.data, "a\nb\"");
    clef_buf_reset(&b);
    clef_json_render_py(&b, o);
    CHECK(b.data && strncmp(b.data, "{\"f\":0.9731,", 12) == 0);
    clef_buf_reset(&b);
    clef_json_render_string(&b, "\x01\x1f\x7f\xe2\x80\xa9/", 7);
    CHECK_STR(b.data, "\"\\u0001\\u001f\x7f\xe2\x80\xa9/\"");
    /* the always-UTF-8 variant: valid text as above; a lone surrogate as its escape; other invalid
     * bytes (a stray continuation, a sequence cut short, 0xff) as U+FFFD each */
    clef_buf_reset(&b);
    clef_json_render_string_utf8(&b, "\x01\x1f\x7f\xe2\x80\xa9/", 7);
    CHECK_STR(b.data, "\"\\u0001\\u001f\x7f\xe2\x80\xa9/\"");
    clef_buf_reset(&b);
    clef_json_render_string_utf8(&b, "a\xed\xa0\x80\"\xed\xbf\xbf: x", 11);
    CHECK_STR(b.data, "\"a\\ud800\\\"\\udfff: x\"");
    clef_buf_reset(&b);
    clef_json_render_string_utf8(&b, "\x80z\xff\xe2\x80", 5);
    CHECK_STR(b.data, "\"\xef\xbf\xbdz\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"");
    CHECK(utf8_valid(b.data, b.len));
    clef_buf_reset(&b);
    clef_json_render_string_utf8(&b, "", 0);
    CHECK_STR(b.data, "\"\"");
    clef_buf_free(&b);
    clef_json_doc_free(d);
}

static int truthy_of(const char *s) {
    clef_err err;
    json_doc *d = clef_json_parse(s, strlen(s), NULL, &err);
    if (!d) return -1;
    int t = clef_json_truthy(clef_json_doc_root(d));
    clef_json_doc_free(d);
    return t;
}

static void test_truthy(void) {
    const char *falsy[] = {"null", "false", "0", "-0", "0.0", "-0.0", "0e5", "\"\"", "[]", "{}", " { } "};
    const char *truthy[] = {"true", "1", "-1", "0.1", "NaN", "Infinity", "\" \"", "[0]", "{\"\":0}", "\"0\""};
    for (size_t i = 0; i < sizeof falsy / sizeof *falsy; i++) CHECK_MSG(truthy_of(falsy[i]) == 0, "%s", falsy[i]);
    for (size_t i = 0; i < sizeof truthy / sizeof *truthy; i++) CHECK_MSG(truthy_of(truthy[i]) == 1, "%s", truthy[i]);
    CHECK(clef_json_truthy(NULL) == 0);
}

static void test_big_object_dups(void) {
    /* more keys than the linear scan handles: hash index, with duplicates spread out */
    clef_buf src;
    clef_buf_init(&src);
    clef_buf_putc(&src, '{');
    for (int i = 0; i < 5000; i++) clef_buf_printf(&src, "%s\"k%d\":%d", i ? "," : "", i % 3000, i);
    clef_buf_putc(&src, '}');
    clef_err err;
    json_doc *d = clef_json_parse(src.data, src.len, NULL, &err);
    CHECK(d != NULL);
    json_value *o = clef_json_doc_root(d);
    CHECK(o && o->u.object.n == 3000);
    CHECK(o && strcmp(o->u.object.members[0].key, "k0") == 0 &&
          strcmp(o->u.object.members[0].val->u.integer.digits, "3000") == 0);
    CHECK(o && strcmp(clef_json_object_get(o, "k2999")->u.integer.digits, "2999") == 0);
    CHECK(o && strcmp(clef_json_object_get(o, "k1999")->u.integer.digits, "4999") == 0);
    clef_json_doc_free(d);
    clef_buf_free(&src);
}

/* The real tokenizer.json (~20 MB, ~1M nodes; a synthetic one of the same shape when absent) parses,
 * and its sorted rendering parses back to the same rendering. Speed is measured in bench/, never
 * asserted here. */
static void test_big_document(void) {
    const char *paths[] = {"models/tiny/tokenizer.json", "../models/tiny/tokenizer.json"};
    FILE *f = NULL;
    for (size_t i = 0; i < 2 && !f; i++) f = fopen(paths[i], "rb");
    clef_buf src;
    clef_buf_init(&src);
    if (f) {
        char chunk[65536];
        size_t n;
        while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) clef_buf_put(&src, chunk, n);
        fclose(f);
    } else {
        clef_buf_puts(&src, "{\"model\":{\"vocab\":{");
        for (int i = 0; i < 150000; i++) clef_buf_printf(&src, "%s\"tok\\u0120%d\xc4\xa0x\":%d", i ? "," : "", i, i);
        clef_buf_puts(&src, "},\"merges\":[");
        for (int i = 0; i < 150000; i++) clef_buf_printf(&src, "%s[\"a%d\",\"b%d\"]", i ? "," : "", i, i);
        clef_buf_puts(&src, "]}}");
    }
    CHECK(!src.oom);
    clef_err err;
    json_doc *d = clef_json_parse(src.data, src.len, NULL, &err);
    CHECK_MSG(d != NULL, "%s", err.msg);
    if (d) {
        clef_buf out, again;
        clef_buf_init(&out);
        clef_buf_init(&again);
        CHECK(clef_json_render(&out, clef_json_doc_root(d), 1) == 0);
        json_doc *d2 = clef_json_parse(out.data, out.len, NULL, &err);
        CHECK_MSG(d2 != NULL, "%s", err.msg);
        if (d2) {
            CHECK(clef_json_render(&again, clef_json_doc_root(d2), 1) == 0);
            CHECK(out.len == again.len && memcmp(out.data, again.data, out.len) == 0);
            clef_json_doc_free(d2);
        }
        clef_buf_free(&out);
        clef_buf_free(&again);
    }
    clef_json_doc_free(d);
    clef_buf_free(&src);
}

/* src/base/utf8.c, which the parser and the tokenizer share */
static void test_utf8(void) {
    uint32_t cp;
    CHECK(clef_utf8_decode("A", 1, &cp) == 1 && cp == 'A');
    CHECK(clef_utf8_decode("\xc3\xa9", 2, &cp) == 2 && cp == 0xE9);
    CHECK(clef_utf8_decode("\xe2\x82\xac", 3, &cp) == 3 && cp == 0x20AC);
    CHECK(clef_utf8_decode("\xf0\x9f\x98\x80", 4, &cp) == 4 && cp == 0x1F600);
    CHECK(clef_utf8_decode("\xf4\x8f\xbf\xbf", 4, &cp) == 4 && cp == 0x10FFFF);
    CHECK(clef_utf8_decode("\xf4\x90\x80\x80", 4, &cp) == 0 && cp == 0xFFFD);
    CHECK(clef_utf8_decode("\xed\xa0\x80", 3, &cp) == 0);
    CHECK(clef_utf8_decode_wtf8("\xed\xa0\x80", 3, &cp) == 3 && cp == 0xD800);
    CHECK(clef_utf8_decode("\xc0\xaf", 2, &cp) == 0);        /* overlong */
    CHECK(clef_utf8_decode("\xe0\x9f\xbf", 3, &cp) == 0);    /* overlong */
    CHECK(clef_utf8_decode("\xf0\x8f\xbf\xbf", 4, &cp) == 0); /* overlong */
    CHECK(clef_utf8_decode("\xe2\x82", 2, &cp) == 0);         /* truncated */
    CHECK(clef_utf8_decode("\x80", 1, &cp) == 0);
    CHECK(clef_utf8_decode("", 0, &cp) == 0);
    char out[4];
    CHECK(clef_utf8_encode(0x7F, out) == 1 && out[0] == 0x7F);
    CHECK(clef_utf8_encode(0x7FF, out) == 2 && memcmp(out, "\xdf\xbf", 2) == 0);
    CHECK(clef_utf8_encode(0xDFFF, out) == 3 && memcmp(out, "\xed\xbf\xbf", 3) == 0);
    CHECK(clef_utf8_encode(0x10FFFF, out) == 4 && memcmp(out, "\xf4\x8f\xbf\xbf", 4) == 0);
    CHECK(clef_utf8_encode(0x110000, out) == 0);
    for (uint32_t c = 0; c <= 0x10FFFF; c += (c < 0x3000 ? 1 : 97)) { /* round trip */
        int n = clef_utf8_encode(c, out);
        uint32_t back;
        int m = utf8_is_surrogate(c) ? clef_utf8_decode_wtf8(out, (size_t)n, &back) : clef_utf8_decode(out, (size_t)n, &back);
        if (m != n || back != c) { CHECK_MSG(0, "U+%04X", (unsigned)c); break; }
    }
    const char *mixed = "abcdefghijklmnop\xc3\xa9qrstuvwxyz0123456789\xff";
    CHECK(clef_utf8_valid_prefix(mixed, strlen(mixed)) == strlen(mixed) - 1);
    CHECK(utf8_valid(mixed, strlen(mixed) - 1));
    CHECK(clef_utf8_count("a\xc3\xa9\xf0\x9f\x98\x80", 7) == 3);
    char msg[200];
    clef_utf8_error_message("ab\xf0\x9f\x98", 5, 2, msg, sizeof msg);
    CHECK_STR(msg, "'utf-8' codec can't decode bytes in position 2-4: unexpected end of data");
    clef_utf8_error_message("\xed\xa0\x80", 3, 0, msg, sizeof msg);
    CHECK_STR(msg, "'utf-8' codec can't decode byte 0xed in position 0: invalid continuation byte");
    clef_utf8_error_message("\xff", 1, 0, msg, sizeof msg);
    CHECK_STR(msg, "'utf-8' codec can't decode byte 0xff in position 0: invalid start byte");
}

int main(void) {
    test_utf8();
    test_contract_examples();
    test_lone_surrogates();
    test_errors();
    test_big_ints();
    test_limits();
    test_builders_and_lookups();
    test_truthy();
    test_big_object_dups();
    test_big_document();
    return TEST_END();
}
