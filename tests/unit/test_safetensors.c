/* safetensors reader: acceptance of well-formed files and a clear BadModel (no crash) for every
 * malformed kind: truncated, header length past the end / huge, garbage / non-object header, unknown
 * or ill-typed dtype, extent mismatch, offsets past the end, overlaps, begin > end, negative /
 * overflowing / non-integer shape, too many dims, bad metadata. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "model/safetensors.h"

static char tmpdir[256];

/* An image: u64 header length, header (padded with spaces to `pad` if pad > 0), data_len bytes
 * (byte i = i & 0xff). Caller frees. */
static unsigned char *image(const char *header, size_t pad, size_t data_len, size_t *len) {
    size_t h = strlen(header), hp = h;
    if (pad) hp = (h + pad - 1) / pad * pad;
    *len = 8 + hp + data_len;
    unsigned char *p = malloc(*len ? *len : 1);
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)((uint64_t)hp >> (8 * i));
    memcpy(p + 8, header, h);
    memset(p + 8 + h, ' ', hp - h);
    for (size_t i = 0; i < data_len; i++) p[8 + hp + i] = (unsigned char)(i & 0xff);
    return p;
}

static int write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = n ? fwrite(p, 1, n, f) : 0;
    fclose(f);
    return w == n ? 0 : -1;
}

/* Expects refusal as BadModel with every needle in the message. */
static void refuse_bytes(const char *what, const unsigned char *p, size_t len, const char *n1, const char *n2) {
    clef_err err = {0};
    clef_st_file *f = clef_st_parse(p, len, "bad.safetensors", &err);
    CHECK_MSG(f == NULL, "%s: accepted", what);
    clef_st_close(f);
    CHECK_MSG(err.type && strcmp(err.type, CLEF_E_BAD_MODEL) == 0, "%s: type %s", what, err.type ? err.type : "(none)");
    CHECK_MSG(strstr(err.msg, "bad.safetensors") != NULL, "%s: message lacks the file: %s", what, err.msg);
    if (n1) CHECK_MSG(strstr(err.msg, n1) != NULL, "%s: message lacks '%s': %s", what, n1, err.msg);
    if (n2) CHECK_MSG(strstr(err.msg, n2) != NULL, "%s: message lacks '%s': %s", what, n2, err.msg);
    printf("  refused %-28s %s\n", what, err.msg);
}

static void refuse_header(const char *what, const char *header, size_t data_len, const char *n1, const char *n2) {
    size_t len;
    unsigned char *p = image(header, 8, data_len, &len);
    refuse_bytes(what, p, len, n1, n2);
    free(p);
}

static void test_accept(void) {
    const char *hdr = "{\"__metadata__\":{\"format\":\"pt\"},"
                      "\"b.weight\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[12,16]},"
                      "\"a.weight\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,12]},"
                      "\"empty\":{\"dtype\":\"I64\",\"shape\":[0,5],\"data_offsets\":[16,16]},"
                      "\"c\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[16,20]}}";
    size_t len;
    unsigned char *p = image(hdr, 8, 20, &len);
    char path[512];
    snprintf(path, sizeof path, "%s/ok.safetensors", tmpdir);
    CHECK(write_file(path, p, len) == 0);
    clef_err err = {0};
    clef_st_file *f = clef_st_open(path, &err);
    CHECK_MSG(f != NULL, "%s", err.msg);
    if (f) {
        CHECK(clef_st_count(f) == 4);
        CHECK_STR(clef_st_at(f, 0)->name, "b.weight"); /* header order */
        const clef_tensor *a = clef_st_find(f, "a.weight");
        CHECK(a != NULL);
        if (a) {
            CHECK(a->dtype == CLEF_ST_BF16 && a->ndim == 2 && a->shape[0] == 2 && a->shape[1] == 3);
            CHECK(a->numel == 6 && a->nbytes == 12);
            size_t sz;
            const unsigned char *base = clef_st_bytes(f, &sz);
            CHECK(sz == len);
            CHECK((const unsigned char *)a->data == base + len - 20); /* the data area is the last 20 bytes */
            CHECK(((const unsigned char *)a->data)[0] == 0 && ((const unsigned char *)a->data)[11] == 11);
            CHECK(((uintptr_t)a->data & 1) == 0);
        }
        const clef_tensor *b = clef_st_find(f, "b.weight");
        CHECK(b && b->ndim == 0 && b->numel == 1 && b->nbytes == 4 && b->dtype == CLEF_ST_F32);
        if (b) CHECK(((const unsigned char *)b->data)[0] == 12);
        const clef_tensor *e = clef_st_find(f, "empty");
        CHECK(e && e->numel == 0 && e->nbytes == 0 && e->shape[0] == 0 && e->shape[1] == 5);
        const clef_tensor *c = clef_st_find(f, "c");
        CHECK(c && c->dtype == CLEF_ST_U8 && c->shape[0] == 4);
        CHECK(clef_st_find(f, "a") == NULL && clef_st_find(f, "a.weight2") == NULL && clef_st_find(f, "") == NULL);
        CHECK_STR(clef_st_metadata(f, "format"), "pt");
        CHECK(clef_st_metadata(f, "other") == NULL);
        CHECK(strstr(clef_st_label(f), "ok.safetensors") != NULL);
    }
    clef_st_close(f);
    free(p);

    /* empty header object: a file with no tensors */
    p = image("{}", 0, 0, &len);
    f = clef_st_parse(p, len, "empty.safetensors", &err);
    CHECK(f != NULL && clef_st_count(f) == 0);
    clef_st_close(f);
    free(p);

    /* dtype sizes and names */
    CHECK(clef_dtype_size(CLEF_ST_BF16) == 2 && clef_dtype_size(CLEF_ST_F32) == 4 && clef_dtype_size(CLEF_ST_I64) == 8);
    CHECK(clef_dtype_size(CLEF_ST_F16) == 2 && clef_dtype_size(CLEF_ST_BOOL) == 1 && clef_dtype_size(999) == 0);
    CHECK(clef_dtype_from_name("BF16", 4) == CLEF_ST_BF16 && clef_dtype_from_name("bf16", 4) == 0);
    CHECK_STR(clef_dtype_name(CLEF_ST_F64), "F64");
}

static void test_many(void) {
    /* 300 tensors, lookup of each by binary search */
    size_t cap = 300 * 100 + 16, n = 0;
    char *h = malloc(cap);
    n += (size_t)snprintf(h + n, cap - n, "{");
    for (int i = 0; i < 300; i++)
        n += (size_t)snprintf(h + n, cap - n, "%s\"t.%d\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[%d,%d]}",
                              i ? "," : "", (i * 7919) % 300, ((i * 7919) % 300) * 4, ((i * 7919) % 300) * 4 + 4);
    snprintf(h + n, cap - n, "}");
    size_t len;
    unsigned char *p = image(h, 8, 1200, &len);
    clef_err err = {0};
    clef_st_file *f = clef_st_parse(p, len, "many", &err);
    CHECK_MSG(f != NULL, "%s", err.msg);
    int found = 0;
    for (int i = 0; f && i < 300; i++) {
        char name[32];
        snprintf(name, sizeof name, "t.%d", i);
        const clef_tensor *t = clef_st_find(f, name);
        if (t && (const unsigned char *)t->data - (const unsigned char *)clef_st_find(f, "t.0")->data == 4 * i) found++;
    }
    CHECK(found == 300);
    clef_st_close(f);
    free(p);
    free(h);
}

#define T1(dtype, shape, offs) "{\"x\":{\"dtype\":" dtype ",\"shape\":" shape ",\"data_offsets\":" offs "}}"

static void test_refuse(void) {
    /* 1. truncated: shorter than the 8-byte length */
    unsigned char small[5] = {1, 2, 3, 4, 5};
    refuse_bytes("truncated (5 bytes)", small, sizeof small, "too short", NULL);
    refuse_bytes("empty file", small, 0, "too short", NULL);
    /* 2. header length past the end of the file */
    size_t len;
    unsigned char *p = image(T1("\"F32\"", "[1]", "[0,4]"), 8, 4, &len);
    p[0] = (unsigned char)(p[0] + 64);
    refuse_bytes("header length past end", p, len, "past the end", NULL);
    /* 3. header length huge */
    memset(p, 0xff, 8);
    refuse_bytes("header length huge", p, len, "limit", NULL);
    p[0] = 0; p[1] = 0; p[2] = 0; p[3] = 0x40; p[4] = p[5] = p[6] = p[7] = 0; /* 1 GiB, > 100 MB */
    refuse_bytes("header length 1 GiB", p, len, "limit", NULL);
    free(p);
    /* 4. header JSON garbage */
    refuse_header("garbage header", "{\"x\": nope", 0, "not valid JSON", NULL);
    refuse_header("invalid utf-8 header", "{\"\xff\":1}", 0, "not valid JSON", NULL);
    refuse_header("header with NUL", "{\"a\":\0}", 0, NULL, NULL);
    /* 5. non-object header */
    refuse_header("array header", "[1,2,3]", 0, "not a JSON object", NULL);
    refuse_header("string header", "\"abc\"", 0, "not a JSON object", NULL);
    refuse_header("entry not an object", "{\"x\":[1]}", 0, "'x'", "not a JSON object");
    /* 6. unknown or ill-typed dtype */
    refuse_header("unknown dtype", T1("\"Q7\"", "[1]", "[0,1]"), 1, "'x'", "unknown");
    refuse_header("sub-byte dtype F4", T1("\"F4\"", "[2]", "[0,1]"), 1, "'x'", "dtype");
    refuse_header("dtype not a string", T1("16", "[1]", "[0,2]"), 2, "'x'", "dtype");
    refuse_header("missing dtype", "{\"x\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "'x'", "dtype");
    /* 7. shape/extent mismatch */
    refuse_header("extent too small", T1("\"F32\"", "[2,2]", "[0,12]"), 16, "'x'", "need 16");
    refuse_header("extent too large", T1("\"BF16\"", "[3]", "[0,8]"), 8, "'x'", "extent");
    /* 8. offsets past the end of the data */
    refuse_header("offsets past end", T1("\"F32\"", "[4]", "[0,16]"), 12, "'x'", "past the end");
    refuse_header("begin > end", T1("\"F32\"", "[0]", "[8,4]"), 12, "'x'", "begin");
    refuse_header("negative offset", T1("\"F32\"", "[1]", "[-4,0]"), 12, "'x'", "non-negative");
    refuse_header("offsets not a pair", T1("\"F32\"", "[1]", "[0,4,8]"), 12, "'x'", "data_offsets");
    refuse_header("offsets float", T1("\"F32\"", "[1]", "[0.0,4]"), 12, "'x'", "data_offsets");
    refuse_header("missing offsets", "{\"x\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "'x'", "data_offsets");
    /* 9. overlapping offsets */
    refuse_header("overlap", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                             "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "overlap", "'b'");
    refuse_header("overlap (same extent)", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
                                           "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]}}", 12,
                  "overlap", NULL);
    refuse_header("overlap (contained)", "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]},"
                                         "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[4,6]}}", 12,
                  "overlap", NULL);
    /* 10. negative, overflowing, non-integer shapes; too many dims */
    refuse_header("negative shape", T1("\"F32\"", "[-1]", "[0,4]"), 4, "'x'", "negative");
    refuse_header("overflowing shape", T1("\"F32\"", "[4294967296,4294967296]", "[0,4]"), 4, "'x'", "overflow");
    refuse_header("byte size overflow", T1("\"F64\"", "[4611686018427387904]", "[0,8]"), 8, "'x'", "overflow");
    refuse_header("huge dim", T1("\"U8\"", "[99999999999999999999999]", "[0,8]"), 8, "'x'", "too large");
    refuse_header("float shape", T1("\"F32\"", "[1.5]", "[0,4]"), 4, "'x'", "not an integer");
    refuse_header("shape not array", T1("\"F32\"", "4", "[0,4]"), 4, "'x'", "shape");
    refuse_header("9 dims", T1("\"U8\"", "[1,1,1,1,1,1,1,1,1]", "[0,1]"), 1, "'x'", "dimensions");
    /* 11. bad metadata */
    refuse_header("metadata not an object", "{\"__metadata__\":[1]}", 0, "__metadata__", NULL);
    refuse_header("metadata value not a string", "{\"__metadata__\":{\"k\":1}}", 0, "__metadata__", NULL);
    /* 12. a file cut short after a valid header */
    p = image(T1("\"F32\"", "[4]", "[0,16]"), 8, 16, &len);
    refuse_bytes("data truncated", p, len - 1, "past the end", NULL);
    free(p);
    /* 13. a file that does not exist, a directory */
    clef_err err = {0};
    char path[512];
    snprintf(path, sizeof path, "%s/nope.safetensors", tmpdir);
    CHECK(clef_st_open(path, &err) == NULL && err.type && strcmp(err.type, CLEF_E_IO) == 0);
    CHECK(strstr(err.msg, "nope.safetensors") != NULL);
    clef_err_clear(&err);
    CHECK(clef_st_open(tmpdir, &err) == NULL && err.type && strcmp(err.type, CLEF_E_IO) == 0);
    /* a zero-length file on disk */
    snprintf(path, sizeof path, "%s/zero.safetensors", tmpdir);
    CHECK(write_file(path, "", 0) == 0);
    clef_err_clear(&err);
    CHECK(clef_st_open(path, &err) == NULL && err.type && strcmp(err.type, CLEF_E_BAD_MODEL) == 0);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/clef_test_st_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_accept();
    test_many();
    test_refuse();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return TEST_END();
}
