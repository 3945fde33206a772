/* clef preprocess: the image processor's output for one entry, as grids and a hash.
 *
 *   clef preprocess --model DIR (--image F|- | --entry F|-) [--tile 256|448]
 *                   [--min-pixels N --max-pixels N] [--max-bytes N] [--max-source-pixels N]
 *
 * --image F: an image file (read as a local path); - = the image's bytes on stdin.
 * --entry F: a file (or stdin) holding one `images` entry exactly as a request carries it: a
 *   data:image/...;base64, URL or bare base64 (surrounding whitespace is part of the entry).
 * --tile: resize with Pillow's BICUBIC to tile x tile first (the fixed-tile arms).
 * --min-pixels/--max-pixels: the request's media_kwargs; used only when both are given (contract.md
 *   §9.2), as the reference does.
 * Reads DIR/preprocessor_config.json, else DIR/processor_config.json (its image_processor object when
 * present), for size.shortest_edge / size.longest_edge and the patch sizes; defaults otherwise.
 * Prints {"grid_thw":[1,gh,gw],"pixel_values_sha256":"<sha256 of float32 LE bytes>","shape":[n,1536]}
 * or {"error":{"type":...,"message":...}} (exit 1). An entry the processor makes several images of (an
 * animated GIF at the native grid: one per frame) prints them all, as the processor's output holds them:
 * grid_thw is the first image's, shape and the hash cover every image's rows, and
 * "image_grid_thw":[[1,gh,gw],...] lists each image's grid. (A request carrying such an entry fails:
 * encode_record, docs/errors.md.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/sha256.h"
#include "cli/cli_opts.h"
#include "cli/cmds.h"
#include "cli/read_input.h"
#include "image/image.h"
#include "base/json.h"

static int get_int(const json_value *obj, const char *key, int64_t lo, int64_t hi, int64_t *out) {
    const json_value *v = clef_json_object_get(obj, key);
    if (!v || v->kind != JSON_INT || v->u.integer.len > 18) return 0;
    char *end;
    long long x = strtoll(v->u.integer.digits, &end, 10);
    if (x < lo || x > hi) return 0;
    *out = x;
    return 1;
}

/* 0: read (or absent), -1: present but unreadable (message printed). */
static int read_config(const char *dir, clef_image_opts *o) {
    static const char *names[] = {"preprocessor_config.json", "processor_config.json"};
    for (int i = 0; i < 2; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        FILE *f = fopen(path, "rb");
        if (!f) continue;
        fclose(f);
        size_t len;
        char *text = cli_read_all(path, (size_t)1 << 20, &len);
        if (!text) return -1;
        clef_err e = {0};
        json_limits lim = {(size_t)1 << 20, 64};
        json_doc *d = clef_json_parse(text, len, &lim, &e);
        free(text);
        if (!d) {
            fprintf(stderr, "clef preprocess: %s: %s\n", path, e.msg);
            return -1;
        }
        const json_value *root = clef_json_doc_root(d);
        const json_value *ip = clef_json_object_get(root, "image_processor");
        if (ip && ip->kind == JSON_OBJECT) root = ip;
        int64_t v;
        const json_value *size = clef_json_object_get(root, "size");
        if (size && size->kind == JSON_OBJECT) {
            if (get_int(size, "shortest_edge", 0, (int64_t)1 << 40, &v)) o->min_pixels = v;
            if (get_int(size, "longest_edge", 1, (int64_t)1 << 40, &v)) o->max_pixels = v;
        } else {
            if (get_int(root, "min_pixels", 0, (int64_t)1 << 40, &v)) o->min_pixels = v;
            if (get_int(root, "max_pixels", 1, (int64_t)1 << 40, &v)) o->max_pixels = v;
        }
        if (get_int(root, "patch_size", 1, 1024, &v)) o->patch_size = (int)v;
        if (get_int(root, "merge_size", 1, 64, &v)) o->merge_size = (int)v;
        if (get_int(root, "temporal_patch_size", 1, 64, &v)) o->temporal_patch_size = (int)v;
        clef_json_doc_free(d);
        return 0;
    }
    return 0;
}

static void put_error(const char *type, const char *msg) {
    clef_buf o;
    clef_buf_init(&o);
    clef_json_render_error(&o, type, msg);
    clef_buf_puts(&o, "\n");
    if (!o.oom) fwrite(o.data, 1, o.len, stdout);
    clef_buf_free(&o);
}

/* Standard base64 with padding (RFC 4648); the library only decodes. NULL when out of memory. */
static char *base64_encode(const unsigned char *in, size_t n, size_t *out_len) {
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t m = (n + 2) / 3 * 4;
    char *out = malloc(m + 1), *q = out;
    if (!out) return NULL;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)in[i] << 16 | (i + 1 < n ? (unsigned)in[i + 1] << 8 : 0) | (i + 2 < n ? in[i + 2] : 0);
        *q++ = tab[v >> 18 & 63];
        *q++ = tab[v >> 12 & 63];
        *q++ = i + 1 < n ? tab[v >> 6 & 63] : '=';
        *q++ = i + 2 < n ? tab[v & 63] : '=';
    }
    *q = '\0';
    *out_len = m;
    return out;
}

int cmd_preprocess(int argc, char **argv) {
    const char *model = NULL, *image = NULL, *entry = NULL;
    int tile = 0, have_min = 0, have_max = 0, have_bytes = 0, have_src = 0;
    size_t minp = 0, maxp = 0; /* the model's preprocessor config unless both are given */
    size_t max_bytes = CLEF_IMAGE_DEFAULT_MAX_BYTES, max_src = (size_t)CLEF_IMAGE_DEFAULT_MAX_SOURCE_PIXELS;
    const cli_opt opts[] = {
        CLI_OPT_MODEL(&model),
        {.name = "--image", .kind = CLI_FILE, .dst = &image, .arg = "F|-",
         .help = "an image file (this option is the opt-in to read a local path); - = the image's bytes on stdin"},
        {.name = "--entry", .kind = CLI_FILE, .dst = &entry, .arg = "F|-",
         .help = "a file holding one `images` entry as a request carries it (data: URL or base64); - = stdin"},
        CLI_OPT_TILE(&tile),
        {.name = "--min-pixels", .kind = CLI_SIZE, .dst = &minp, .arg = "N", .lo = 0, .hi = 1099511627776.0,
         .seen = &have_min, .no_default = 1, .help = "media_kwargs min_pixels (used only with --max-pixels, as the reference does)"},
        {.name = "--max-pixels", .kind = CLI_SIZE, .dst = &maxp, .arg = "N", .lo = 0, .hi = 1099511627776.0,
         .seen = &have_max, .no_default = 1, .help = "media_kwargs max_pixels (used only with --min-pixels)"},
        {.name = "--max-bytes", .kind = CLI_SIZE, .dst = &max_bytes, .arg = "BYTES", .lo = 0, .hi = 1099511627776.0,
         .seen = &have_bytes, .help = "cap on the encoded image's bytes (the default is the library's)"},
        {.name = "--max-source-pixels", .kind = CLI_SIZE, .dst = &max_src, .arg = "N", .lo = 0,
         .hi = 1099511627776.0, .seen = &have_src,
         .help = "cap on the decoded width*height (the default is the library's)"},
        CLI_OPT_END,
    };
    const cli_cmd cmd = {
        .verb = "preprocess", .usage = "--model DIR (--image F|- | --entry F|-) [options]", .opts = opts,
        .about = "Prints {\"grid_thw\":[1,gh,gw],\"pixel_values_sha256\":...,\"shape\":[n,1536]} or {\"error\":{...}}\n"
                 "with exit 1.\n"};
    int st = cli_parse(&cmd, argc, argv);
    if (st != CLI_CONTINUE) return st;
    if (!image == !entry) {
        fprintf(stderr, "clef preprocess: give one of --image F|- and --entry F|- (clef preprocess --help)\n");
        return 2;
    }
    clef_image_opts o;
    clef_image_opts_default(&o);
    if (read_config(model, &o)) return 1;
    if (have_min && have_max) {
        o.min_pixels = (int64_t)minp;
        o.max_pixels = (int64_t)maxp;
    } else if (have_min || have_max) {
        fprintf(stderr, "clef preprocess: --min-pixels/--max-pixels apply only together; ignored\n");
    }
    o.tile = tile;
    o.all_images = 1; /* every processor image of the entry, as the reference processor returns them */
    if (have_bytes) o.max_bytes = (size_t)max_bytes;
    if (have_src) o.max_source_pixels = (int64_t)max_src;
    char *text = NULL;
    size_t len;
    if (image && !strcmp(image, "-")) {
        /* the bytes on stdin, handed to the library as the base64 entry a request would carry */
        size_t n = 0;
        char *raw = cli_read_all("-", o.max_bytes, &n);
        text = raw ? base64_encode((const unsigned char *)raw, n, &len) : NULL;
        free(raw);
    } else if (image) {
        o.allow_paths = 1;
        text = strdup(image);
        len = text ? strlen(text) : 0;
    } else {
        text = cli_read_all(entry, o.max_bytes / 3 * 4 + 4096, &len);
    }
    if (!text) return 1;
    clef_image im;
    clef_err e = {0};
    int rc = clef_image_prepare(text, len, &o, &im, &e);
    free(text);
    if (rc) {
        put_error(e.type ? e.type : CLEF_E_INTERNAL, e.msg);
        return 1;
    }
    /* float32 little-endian bytes: this engine runs on little-endian hosts only */
    char hex[65];
    clef_sha256_hex(im.pixel_values, im.n_patches * im.patch_dim * sizeof(float), hex);
    printf("{\"grid_thw\":[%d,%d,%d],\"pixel_values_sha256\":\"%s\",\"shape\":[%zu,%zu]", im.grid_t, im.grid_h,
           im.grid_w, hex, im.n_patches, im.patch_dim);
    if (im.n_images > 1) { /* the images of one entry share its grid */
        printf(",\"image_grid_thw\":[");
        for (int i = 0; i < im.n_images; i++) printf("%s[%d,%d,%d]", i ? "," : "", im.grid_t, im.grid_h, im.grid_w);
        printf("]");
    }
    printf("}\n");
    clef_image_free(&im);
    return 0;
}
