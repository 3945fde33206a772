/* Image host side: smart_resize (model.md §7.1 examples), base64 edge cases, patch layout, and
 * corrupt / truncated / zero-size / bomb / wrong-format inputs answering a clear error (run under
 * ASan by `make check`). Valid images come from tests/fixtures/images (the suite runs from the repo
 * root). The 16-bit PNGs and the animated GIFs of the reference fixtures (index.json) are checked here
 * through the API too: every frame's pixel_values with all_images, the grids alone with all_images 2, and
 * the default's refusal. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sha256.h"
#include "image/image.h"
#include "image/image_internal.h"
#include "test.h"
#include "base/json.h"

static uint8_t *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(sz > 0 ? (size_t)sz : 1);
    if (b && fread(b, 1, (size_t)sz, f) != (size_t)sz) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *n = (size_t)sz;
    return b;
}

static uint32_t crc32_of(const uint8_t *p, size_t n) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1)));
    }
    return ~c;
}

static void put32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* A copy of a PNG with IHDR width/height replaced (CRC fixed). */
static uint8_t *png_with_size(const uint8_t *png, size_t n, uint32_t w, uint32_t h) {
    uint8_t *b = malloc(n);
    memcpy(b, png, n);
    put32(b + 16, w);
    put32(b + 20, h);
    put32(b + 29, crc32_of(b + 12, 17));
    return b;
}

static const char *decode_err(const uint8_t *p, size_t n, int tile, clef_err *e) {
    clef_image_opts o;
    clef_image_opts_default(&o);
    o.tile = tile;
    o.max_source_pixels = 1 << 24;
    clef_rgb im;
    clef_err_clear(e);
    if (clef_image_decode(p, n, &o, &im, e) == 0) {
        clef_rgb_free(&im);
        return "ok";
    }
    return e->type ? e->type : "(no type)";
}

/* expected values: transformers 5.17.0 smart_resize(h, w, 32, 65536, 16777216) */
static void test_smart_resize(void) {
    static const struct { int64_t h, w, oh, ow; } cases[] = {
        {400, 560, 384, 576},   {1080, 1920, 1088, 1920}, {5000, 5000, 4096, 4096}, {10, 10, 256, 256},
        {1, 200, 32, 3648},     {480, 640, 480, 640},     {1, 1, 256, 256},         {256, 256, 256, 256},
        {15, 17, 256, 288},     {3, 600, 32, 3648},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t oh = -1, ow = -1;
        clef_err e = {0};
        int rc = clef_smart_resize(cases[i].h, cases[i].w, 32, 65536, 16777216, &oh, &ow, &e);
        CHECK_MSG(rc == 0 && oh == cases[i].oh && ow == cases[i].ow, "%lldx%lld -> %lldx%lld (want %lldx%lld)",
                  (long long)cases[i].h, (long long)cases[i].w, (long long)oh, (long long)ow, (long long)cases[i].oh,
                  (long long)cases[i].ow);
    }
    int64_t oh, ow;
    clef_err e = {0};
    CHECK(clef_smart_resize(1, 201, 32, 65536, 16777216, &oh, &ow, &e) == -1);
    CHECK_STR(e.type, CLEF_E_UNSUPPORTED_MEDIA);
    CHECK_STR(e.msg, "absolute aspect ratio must be smaller than 200, got 201.0");
    CHECK(clef_smart_resize(24, 5000, 32, 65536, 16777216, &oh, &ow, &e) == -1);
    CHECK_STR(e.msg, "absolute aspect ratio must be smaller than 200, got 208.33333333333334");
    CHECK(clef_smart_resize(0, 5, 32, 65536, 16777216, &oh, &ow, &e) == -1);
    /* request-level bounds */
    CHECK(clef_smart_resize(480, 640, 32, 4096, 65536, &oh, &ow, &e) == 0 && oh == 192 && ow == 288);
}

static void test_base64(void) {
    uint8_t out[64];
    clef_err e = {0};
    CHECK(clef_base64_decode("", 0, out, sizeof out, &e) == 0);
    CHECK(clef_base64_decode("QQ==", 4, out, sizeof out, &e) == 1 && out[0] == 'A');
    CHECK(clef_base64_decode("QUI=", 4, out, sizeof out, &e) == 2 && !memcmp(out, "AB", 2));
    CHECK(clef_base64_decode("QUJD", 4, out, sizeof out, &e) == 3 && !memcmp(out, "ABC", 3));
    CHECK(clef_base64_decode("QU JD\r\nRA==\n", 12, out, sizeof out, &e) == 4 && !memcmp(out, "ABCD", 4));
    CHECK(clef_base64_decode("QR==", 4, out, sizeof out, &e) == 1 && out[0] == 'A'); /* stray bits ignored */
    clef_err_clear(&e);
    CHECK(clef_base64_decode("QQ", 2, out, sizeof out, &e) == -1);
    CHECK_STR(e.type, CLEF_E_UNSUPPORTED_MEDIA);
    CHECK(clef_base64_decode("Q===", 4, out, sizeof out, &e) == -1);
    CHECK(clef_base64_decode("QQ==QQ==", 8, out, sizeof out, &e) == -1);
    CHECK(clef_base64_decode("QU*D", 4, out, sizeof out, &e) == -1);
    CHECK(strstr(e.msg, "0x2a") != NULL);
    CHECK(clef_base64_decode("QUJD-_==", 8, out, sizeof out, &e) == -1); /* url-safe alphabet refused */
    clef_err_clear(&e);
    CHECK(clef_base64_decode("QUJDQUJD", 8, out, 5, &e) == -1);
    CHECK_STR(e.type, CLEF_E_LIMIT);
}

static void test_entries(void) {
    clef_image_opts o;
    clef_image_opts_default(&o);
    clef_image im;
    clef_err e = {0};
    const char *bad[] = {"", "https://example.com/a.png", "http://x", "data:text/plain;base64,QUJD",
                         "data:image/png;base64", "data:image/png;base64,", "QUJD", "!!!!", "/etc/passwd"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        clef_err_clear(&e);
        int rc = clef_image_prepare(bad[i], strlen(bad[i]), &o, &im, &e);
        CHECK_MSG(rc == -1 && e.type && !strcmp(e.type, CLEF_E_UNSUPPORTED_MEDIA), "entry '%s': %s", bad[i],
                  e.type ? e.type : "accepted");
    }
    /* max_bytes applies to the decoded bytes */
    o.max_bytes = 10;
    clef_err_clear(&e);
    CHECK(clef_image_prepare("QUJDQUJDQUJDQUJD", 16, &o, &im, &e) == -1);
    CHECK_STR(e.type, CLEF_E_LIMIT);
    /* bad tile */
    clef_image_opts_default(&o);
    o.tile = 300;
    CHECK(clef_image_prepare("QUJD", 4, &o, &im, &e) == -1);
}

static void test_png_errors(void) {
    size_t n;
    uint8_t *png = slurp("tests/fixtures/images/png_rgb_32x32.png", &n);
    CHECK(png != NULL);
    if (!png) return;
    clef_err e;
    CHECK_STR(decode_err(png, n, 0, &e), "ok");
    CHECK_STR(decode_err(png, n / 2, 0, &e), CLEF_E_UNSUPPORTED_MEDIA); /* truncated */
    CHECK_STR(decode_err(png, 8, 0, &e), CLEF_E_UNSUPPORTED_MEDIA);     /* signature only */
    CHECK_STR(decode_err(png, 40, 0, &e), CLEF_E_UNSUPPORTED_MEDIA);    /* IHDR only */
    uint8_t *z = png_with_size(png, n, 0, 32);
    CHECK_STR(decode_err(z, n, 0, &e), CLEF_E_UNSUPPORTED_MEDIA); /* zero width: libpng refuses */
    free(z);
    uint8_t *bomb = png_with_size(png, n, 100000, 100000);
    CHECK_STR(decode_err(bomb, n, 0, &e), CLEF_E_LIMIT); /* refused before allocating 30 GB */
    CHECK(strstr(e.msg, "100000x100000") != NULL);
    free(bomb);
    uint8_t *c = malloc(n);
    memcpy(c, png, n);
    c[40] ^= 0xff; /* IHDR CRC / data corrupted */
    CHECK_STR(decode_err(c, n, 0, &e), CLEF_E_UNSUPPORTED_MEDIA);
    free(c);
    free(png);
}

static void test_jpeg_errors(void) {
    size_t n;
    uint8_t *jpg = slurp("tests/fixtures/images/jpeg_420_640x480.jpg", &n);
    CHECK(jpg != NULL);
    if (!jpg) return;
    clef_err e;
    CHECK_STR(decode_err(jpg, n, 0, &e), "ok");
    CHECK_STR(decode_err(jpg, n / 2, 0, &e), CLEF_E_UNSUPPORTED_MEDIA);
    CHECK(strstr(e.msg, "truncated") != NULL);
    CHECK_STR(decode_err(jpg, 3, 0, &e), CLEF_E_UNSUPPORTED_MEDIA);
    /* SOF0 dimensions patched to 60000 x 60000: refused by our pixel limit, before decoding */
    uint8_t *b = malloc(n);
    memcpy(b, jpg, n);
    int patched = 0;
    for (size_t i = 2; i + 9 < n; i++)
        if (b[i] == 0xff && (b[i + 1] == 0xc0 || b[i + 1] == 0xc2)) {
            b[i + 5] = 0xea;
            b[i + 6] = 0x60;
            b[i + 7] = 0xea;
            b[i + 8] = 0x60;
            patched = 1;
            break;
        }
    CHECK(patched);
    CHECK_STR(decode_err(b, n, 0, &e), CLEF_E_LIMIT);
    free(b);
    free(jpg);
}

static void test_other_formats(void) {
    clef_err e;
    static const char *files[] = {"webp_lossy.webp", "gif_p.gif", "jpeg_cmyk.jpg", "png_interlaced_rgb.png"};
    for (size_t i = 0; i < 4; i++) {
        char path[256];
        snprintf(path, sizeof path, "tests/fixtures/images/%s", files[i]);
        size_t n;
        uint8_t *b = slurp(path, &n);
        CHECK(b != NULL);
        if (!b) continue;
        CHECK_STR(decode_err(b, n, 0, &e), "ok");
        CHECK_STR(decode_err(b, n, 256, &e), "ok");
        for (size_t cut = 1; cut < n; cut = cut * 3 + 1) {
            const char *t = decode_err(b, cut, 0, &e);
            CHECK_MSG(!strcmp(t, CLEF_E_UNSUPPORTED_MEDIA), "%s cut at %zu: %s", files[i], cut, t);
        }
        free(b);
    }
    /* GIF with a 65535 x 65535 logical screen: over the limit */
    static const uint8_t gif[] = {'G', 'I', 'F', '8', '9', 'a', 0xff, 0xff, 0xff, 0xff, 0x00, 0, 0,
                                  ',', 0, 0, 0, 0, 1, 0, 1, 0, 0, 2, 2, 0x44, 0x01, 0, ';'};
    CHECK_STR(decode_err(gif, sizeof gif, 0, &e), CLEF_E_LIMIT);
    static const uint8_t bmp[] = {'B', 'M', 0x3a, 0, 0, 0, 0, 0, 0, 0, 0x36, 0, 0, 0, 0x28, 0};
    CHECK_STR(decode_err(bmp, sizeof bmp, 0, &e), CLEF_E_UNSUPPORTED_MEDIA);
    CHECK(strstr(e.msg, "cannot identify") != NULL);
    CHECK_STR(decode_err((const uint8_t *)"", 0, 0, &e), CLEF_E_UNSUPPORTED_MEDIA);
    static const uint8_t riff[] = {'R', 'I', 'F', 'F', 4, 0, 0, 0, 'W', 'E', 'B', 'P'};
    CHECK_STR(decode_err(riff, sizeof riff, 0, &e), CLEF_E_UNSUPPORTED_MEDIA);
}

/* Patch layout (model.md §7.4): value of pixel (y, x, c) lands in row n(block order) at column
 * c*512 + t*256 + (y%16)*16 + x%16, for both t. */
static void test_patchify(void) {
    clef_rgb im;
    clef_err e = {0};
    CHECK(clef_rgb_alloc(&im, 64, 32, &e) == 0);
    for (int y = 0; y < 32; y++)
        for (int x = 0; x < 64; x++)
            for (int c = 0; c < 3; c++) im.px[((size_t)y * 64 + x) * 3 + c] = (uint8_t)((y * 7 + x * 3 + c * 50) & 255);
    clef_image_opts o;
    clef_image_opts_default(&o);
    clef_image out;
    CHECK(clef_patchify(&im, &o, &out, &e) == 0);
    CHECK(out.grid_t == 1 && out.grid_h == 2 && out.grid_w == 4 && out.n_patches == 8 && out.patch_dim == 1536);
    CHECK(clef_image_tokens(&out, 2) == 2);
    int bad = 0;
    for (size_t n = 0; n < out.n_patches; n++) {
        int mc = n % 2, mr = (n / 2) % 2, bc = (n / 4) % 2, br = (int)(n / 8);
        int prow = 2 * br + mr, pcol = 2 * bc + mc;
        for (int c = 0; c < 3; c++)
            for (int t = 0; t < 2; t++)
                for (int y = 0; y < 16; y++)
                    for (int x = 0; x < 16; x++) {
                        uint8_t v = im.px[((size_t)(prow * 16 + y) * 64 + pcol * 16 + x) * 3 + c];
                        float want = ((float)v - 127.5f) / 127.5f;
                        if (out.pixel_values[n * 1536 + c * 512 + t * 256 + y * 16 + x] != want) bad++;
                    }
    }
    CHECK_MSG(bad == 0, "%d misplaced values", bad);
    CHECK(out.pixel_values[0] == -1.0f); /* pixel (0,0) R = 0 */
    clef_image_free(&out);
    clef_rgb_free(&im);
}

/* End to end on a fixture file at the native grid and a tile: grid and hash as the reference's
 * (tests/fixtures/images/index.json, png_rgb_640x480.png). */
static void test_end_to_end(void) {
    clef_image_opts o;
    clef_image_opts_default(&o);
    o.allow_paths = 1;
    const char *p = "tests/fixtures/images/png_rgb_640x480.png";
    clef_image im;
    clef_err e = {0};
    CHECK(clef_image_prepare(p, strlen(p), &o, &im, &e) == 0);
    CHECK(im.grid_h == 30 && im.grid_w == 40 && im.n_patches == 1200);
    char hex[65];
    clef_sha256_hex(im.pixel_values, im.n_patches * im.patch_dim * 4, hex);
    CHECK_STR(hex, "d7f4040532a56baa245b0281e7a92c65b2a3dbf7bc8f87e192d939da130b4212");
    clef_image_free(&im);
    o.tile = 448;
    CHECK(clef_image_prepare(p, strlen(p), &o, &im, &e) == 0);
    CHECK(im.grid_h == 28 && im.grid_w == 28 && clef_image_tokens(&im, 2) == 196);
    clef_image_free(&im);
    /* paths are refused unless allowed */
    o.allow_paths = 0;
    CHECK(clef_image_prepare(p, strlen(p), &o, &im, &e) == -1);
}

static int json_int_at(const json_value *arr, size_t i) {
    if (!arr || arr->kind != JSON_ARRAY || i >= arr->u.array.n || arr->u.array.items[i]->kind != JSON_INT) return -1;
    return atoi(arr->u.array.items[i]->u.integer.digits);
}

/* One recorded processor run (native or kwargs) against clef_image_prepare(all_images = 1). */
static void check_run(const char *file, const json_value *ref, int64_t minp, int64_t maxp, int *checked) {
    if (!ref || ref->kind != JSON_OBJECT || clef_json_object_get(ref, "error")) return;
    char path[512];
    snprintf(path, sizeof path, "tests/fixtures/images/%s", file);
    clef_image_opts o;
    clef_image_opts_default(&o);
    o.allow_paths = 1;
    o.all_images = 1;
    if (minp > 0) {
        o.min_pixels = minp;
        o.max_pixels = maxp;
    }
    clef_image im;
    clef_err e = {0};
    if (clef_image_prepare(path, strlen(path), &o, &im, &e)) {
        CHECK_MSG(0, "%s: %s %s", file, e.type, e.msg);
        return;
    }
    const json_value *grid = clef_json_object_get(ref, "grid_thw"), *shape = clef_json_object_get(ref, "shape");
    const json_value *all = clef_json_object_get(ref, "image_grid_thw"), *sha = clef_json_object_get(ref, "pixel_values_sha256");
    int want_n = all && all->kind == JSON_ARRAY ? (int)all->u.array.n : 1;
    int n = im.n_images ? im.n_images : 1;
    CHECK_MSG(im.grid_t == json_int_at(grid, 0) && im.grid_h == json_int_at(grid, 1) && im.grid_w == json_int_at(grid, 2),
              "%s: grid %d,%d,%d", file, im.grid_t, im.grid_h, im.grid_w);
    CHECK_MSG(n == want_n && (int)im.n_patches == json_int_at(shape, 0), "%s: %d images, %zu rows (want %d, %d)", file,
              n, im.n_patches, want_n, json_int_at(shape, 0));
    char hex[65];
    clef_sha256_hex(im.pixel_values, im.n_patches * im.patch_dim * sizeof(float), hex);
    CHECK_MSG(sha && sha->kind == JSON_STRING && !strcmp(hex, sha->u.string.s), "%s: pixel_values %s", file, hex);
    clef_image_free(&im);
    (*checked)++;
    /* all_images 2 (encode_record's): the same grid and counts; pixels only for a single image */
    o.all_images = 2;
    clef_err_clear(&e);
    if (clef_image_prepare(path, strlen(path), &o, &im, &e)) {
        CHECK_MSG(0, "%s (all_images 2): %s %s", file, e.type, e.msg);
    } else {
        CHECK_MSG(im.grid_h == json_int_at(grid, 1) && im.grid_w == json_int_at(grid, 2) &&
                      (im.n_images ? im.n_images : 1) == want_n && (int)im.n_patches == json_int_at(shape, 0),
                  "%s (all_images 2): grid %d,%d, %d images, %zu rows", file, im.grid_h, im.grid_w, im.n_images,
                  im.n_patches);
        if (want_n > 1) {
            CHECK_MSG(im.pixel_values == NULL, "%s (all_images 2): pixels of several images", file);
        } else {
            clef_sha256_hex(im.pixel_values, im.n_patches * im.patch_dim * sizeof(float), hex);
            CHECK_MSG(sha && sha->kind == JSON_STRING && !strcmp(hex, sha->u.string.s), "%s (all_images 2): %s", file,
                      hex);
        }
        clef_image_free(&im);
    }
    o.all_images = 1;
    const json_value *req = clef_json_object_get(ref, "request");
    if (n > 1 && req) { /* without all_images: the reference's outcome for a request with this entry */
        const json_value *msg = clef_json_object_get(req, "message");
        o.all_images = 0;
        clef_err_clear(&e);
        CHECK(clef_image_prepare(path, strlen(path), &o, &im, &e) == -1);
        CHECK_STR(e.type, CLEF_E_MEDIA_TOKEN_MISMATCH);
        CHECK_MSG(msg && msg->kind == JSON_STRING && !strcmp(e.msg, msg->u.string.s), "%s: %s", file, e.msg);
    }
}

/* The 16-bit PNGs (ATen's float resize) and the animated GIFs (one image per frame) of index.json. */
static void test_reference_fixtures(void) {
    size_t n;
    uint8_t *text = slurp("tests/fixtures/images/index.json", &n);
    CHECK(text != NULL);
    if (!text) return;
    clef_err e = {0};
    json_limits lim = {0, 64};
    json_doc *d = clef_json_parse((const char *)text, n, &lim, &e);
    free(text);
    CHECK(d != NULL);
    if (!d) return;
    const json_value *images = clef_json_object_get(clef_json_doc_root(d), "images");
    int checked = 0, multi = 0, sixteen = 0;
    for (size_t i = 0; images && images->kind == JSON_ARRAY && i < images->u.array.n; i++) {
        const json_value *rec = images->u.array.items[i], *f = clef_json_object_get(rec, "file");
        const json_value *nat = clef_json_object_get(rec, "native");
        if (!f || f->kind != JSON_STRING || !nat) continue;
        const char *file = f->u.string.s;
        int is16 = !strncmp(file, "png16_", 6) || !strcmp(file, "png_rgb16.png") || !strcmp(file, "png_rgba16.png") ||
                   !strcmp(file, "png_grey16.png") || !strcmp(file, "png_la16.png");
        int is_multi = clef_json_object_get(nat, "image_grid_thw") != NULL;
        if (!is16 && !is_multi) continue;
        sixteen += is16;
        multi += is_multi;
        check_run(file, nat, 0, 0, &checked);
        const json_value *kw = clef_json_object_get(rec, "kwargs");
        for (size_t k = 0; kw && kw->kind == JSON_ARRAY && k < kw->u.array.n; k++) {
            const json_value *r = kw->u.array.items[k];
            const json_value *a = clef_json_object_get(r, "min_pixels"), *b = clef_json_object_get(r, "max_pixels");
            if (a && b && a->kind == JSON_INT && b->kind == JSON_INT)
                check_run(file, r, atoll(a->u.integer.digits), atoll(b->u.integer.digits), &checked);
        }
    }
    CHECK_MSG(sixteen >= 15 && multi >= 3 && checked >= sixteen + multi + 4, "%d 16-bit, %d animated, %d runs", sixteen,
              multi, checked);
    printf("reference fixtures through the API: %d 16-bit PNGs, %d animated GIFs, %d runs\n", sixteen, multi, checked);
    clef_json_doc_free(d);
}

static void test_sha256(void) {
    char hex[65];
    clef_sha256_hex("", 0, hex);
    CHECK_STR(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    clef_sha256_hex("abc", 3, hex);
    CHECK_STR(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    clef_sha256_hex(m, strlen(m), hex);
    CHECK_STR(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    /* one million 'a' fed in uneven pieces */
    clef_sha256 s;
    clef_sha256_init(&s);
    char a[997];
    memset(a, 'a', sizeof a);
    size_t left = 1000000;
    while (left) {
        size_t k = left < sizeof a ? left : sizeof a;
        clef_sha256_update(&s, a, k);
        left -= k;
    }
    uint8_t d[32];
    clef_sha256_final(&s, d);
    clef_sha256_to_hex(d, hex);
    CHECK_STR(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

static char *b64(const uint8_t *p, size_t n, size_t *len) {
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *o = malloc((n + 2) / 3 * 4 + 1), *q = o;
    if (!o) return NULL;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        *q++ = tab[v >> 18 & 63];
        *q++ = tab[v >> 12 & 63];
        *q++ = i + 1 < n ? tab[v >> 6 & 63] : '=';
        *q++ = i + 2 < n ? tab[v & 63] : '=';
    }
    *q = 0;
    *len = (size_t)(q - o);
    return o;
}

/* clef_image_probe_entry (the request's cost pass, from the header alone) against clef_image_prepare
 * (what encode_record runs: all_images 2) on every fixture image, at the native grid and a tile, with
 * the defaults and a small pixel cap: where prepare succeeds the probe gives its grid and frame count;
 * where the probe refuses, prepare refuses with the same error (the probe sees no pixel, so an image
 * corrupt after its header passes it). */
static void test_probe(void) {
    DIR *d = opendir("tests/fixtures/images");
    CHECK(d != NULL);
    if (!d) return;
    int files = 0, agree = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.' || strstr(de->d_name, ".json")) continue;
        char path[512];
        snprintf(path, sizeof path, "tests/fixtures/images/%s", de->d_name);
        size_t n = 0, len = 0;
        uint8_t *bytes = slurp(path, &n);
        char *entry = bytes ? b64(bytes, n, &len) : NULL;
        free(bytes);
        if (!entry) continue;
        files++;
        for (int arm = 0; arm < 4; arm++) {
            clef_image_opts o;
            clef_image_opts_default(&o);
            o.all_images = 2;
            o.tile = arm & 1 ? 256 : 0;
            if (arm & 2) o.max_source_pixels = 100000;
            clef_image im;
            clef_image_probe pr;
            clef_err e1, e2;
            clef_err_clear(&e1);
            clef_err_clear(&e2);
            int rp = clef_image_prepare(entry, len, &o, &im, &e1);
            int rq = clef_image_probe_entry(entry, len, &o, &pr, &e2);
            if (rp == 0) {
                CHECK_MSG(rq == 0 && pr.grid_h == im.grid_h && pr.grid_w == im.grid_w &&
                              pr.n_frames == (im.n_images > 1 ? im.n_images : 1) &&
                              pr.tokens == clef_image_tokens(&im, 2) && pr.pixels == pr.w * pr.h * pr.n_frames,
                          "%s arm %d: probe %d %dx%d x%d, prepare %dx%d x%d (%s)", de->d_name, arm, rq, pr.grid_h,
                          pr.grid_w, pr.n_frames, im.grid_h, im.grid_w, im.n_images, e2.msg);
                clef_image_free(&im);
            } else if (rq != 0) {
                CHECK_MSG(e1.type && e2.type && !strcmp(e1.type, e2.type) && !strcmp(e1.msg, e2.msg),
                          "%s arm %d: prepare %s: %s; probe %s: %s", de->d_name, arm, e1.type, e1.msg, e2.type, e2.msg);
            }
            agree += !(rp == 0 && rq != 0);
        }
        free(entry);
    }
    closedir(d);
    CHECK(files > 50);
    CHECK(agree == files * 4);
}

int main(void) {
    test_sha256();
    test_smart_resize();
    test_base64();
    test_entries();
    test_png_errors();
    test_jpeg_errors();
    test_other_formats();
    test_patchify();
    test_end_to_end();
    test_reference_fixtures();
    test_probe();
    return TEST_END();
}
