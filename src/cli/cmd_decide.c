/* clef decide: answer one request with the model; prints the response JSON (the bytes the server
 * sends) or {"error":{...}} and exits non-zero. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clef.h"
#include "cli/cmds.h"
#include "cli/read_input.h"

static void usage(void) {
    fprintf(stderr,
            "usage: clef decide --model DIR [--request F|-] [--threads N] [--max-length N]\n"
            "                   [--split file|qwen2|qwen35] [--tile 0|256|448] [--allow-image-paths]\n"
            "                   [--dump-layers DIR] [--device auto|cpu|cuda] [--precision fp32|fast|bf16]\n"
            "                   [--gpu N]\n");
}

int cmd_decide(int argc, char **argv) {
    clef_options o;
    clef_options_default(&o);
    o.single_request = 1; /* one forward: no weight packing at open (clef.h) */
    const char *request = "-", *dump = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--allow-image-paths")) { o.allow_image_paths = 1; continue; }
        if (!v) { usage(); return 2; }
        i++;
        if (!strcmp(a, "--model")) o.model_dir = v;
        else if (!strcmp(a, "--request")) request = v;
        else if (!strcmp(a, "--threads")) o.threads = atoi(v);
        else if (!strcmp(a, "--max-length")) o.max_length = atoi(v);
        else if (!strcmp(a, "--tile")) o.image_tile = atoi(v);
        else if (!strcmp(a, "--dump-layers")) dump = v;
        else if (!strcmp(a, "--gpu")) o.gpu = atoi(v);
        else if (!strcmp(a, "--device")) {
            if (!strcmp(v, "auto")) o.device = CLEF_DEVICE_AUTO;
            else if (!strcmp(v, "cpu")) o.device = CLEF_DEVICE_CPU;
            else if (!strcmp(v, "cuda")) o.device = CLEF_DEVICE_CUDA;
            else { usage(); return 2; }
        } else if (!strcmp(a, "--precision")) {
            if (!strcmp(v, "fp32")) o.precision = CLEF_PRECISION_FP32;
            else if (!strcmp(v, "fast")) o.precision = CLEF_PRECISION_FAST;
            else if (!strcmp(v, "bf16")) o.precision = CLEF_PRECISION_BF16;
            else { usage(); return 2; }
        } else if (!strcmp(a, "--split")) {
            if (!strcmp(v, "file")) o.split_variant = 0;
            else if (!strcmp(v, "qwen2")) o.split_variant = 1;
            else if (!strcmp(v, "qwen35")) o.split_variant = 2;
            else { usage(); return 2; }
        } else { usage(); return 2; }
    }
    if (!o.model_dir) { usage(); return 2; }
    if (o.threads < 0 || o.max_length < 0 || o.gpu < 0 || (o.image_tile != 0 && o.image_tile != 256 && o.image_tile != 448)) {
        usage();
        return 2;
    }

    size_t len = 0;
    char *body = cli_read_all(request, CLI_MAX_INPUT_BYTES, &len);
    if (!body) return 2;
    char err[1200];
    clef_engine *e = clef_open(&o, err, sizeof err);
    if (!e) {
        fprintf(stderr, "clef: %s\n", err);
        free(body);
        return 3;
    }
    if (dump) clef_set_dump_dir(e, dump);
    clef_result r;
    int rc = clef_decide(e, body, len, &r);
    if (r.body) {
        fwrite(r.body, 1, r.body_len, stdout);
        fputc('\n', stdout);
    }
    clef_result_free(&r);
    clef_close(e);
    free(body);
    return rc ? 1 : 0;
}
