/* libFuzzer target: the safetensors header parser (src/model/safetensors.c) on arbitrary bytes.
 * Not part of the default build. Build and run (from the repo root):
 *
 *   clang -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined -Isrc \
 *     fuzz/fuzz_safetensors.c src/model/safetensors.c src/base/mapfile.c src/base/err.c src/base/buf.c \
 *     src/base/json.c src/base/json_render.c src/base/utf8.c src/base/pyfmt.c -lm -o build/fuzz_safetensors
 *   mkdir -p build/fuzz-corpus && build/fuzz_safetensors -max_total_time=60 -max_len=4096 build/fuzz-corpus
 *
 * Besides the sanitizers, it checks the reader's promises on every accepted input: each tensor's
 * bytes lie inside the input, extents match shape x dtype, no two non-empty tensors overlap, and
 * lookup by name finds every tensor. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    clef_err err = {0};
    clef_st_file *f = clef_st_parse(data, size, "fuzz", &err);
    if (!f) {
        if (!err.type || !err.msg[0]) __builtin_trap();
        return 0;
    }
    size_t n = clef_st_count(f);
    for (size_t i = 0; i < n; i++) {
        const clef_tensor *t = clef_st_at(f, i);
        if (!t || !t->name || clef_st_find(f, t->name) != t) __builtin_trap();
        if (t->ndim < 0 || t->ndim > CLEF_MAX_DIMS || clef_dtype_size(t->dtype) == 0) __builtin_trap();
        int64_t numel = 1;
        for (int d = 0; d < t->ndim; d++) numel *= t->shape[d];
        if (numel != t->numel || (size_t)numel * clef_dtype_size(t->dtype) != t->nbytes) __builtin_trap();
        if (t->nbytes) {
            const uint8_t *p = t->data;
            if (p < data || p + t->nbytes > data + size) __builtin_trap();
            volatile uint8_t sink = p[0] ^ p[t->nbytes - 1]; /* touch both ends (ASan) */
            (void)sink;
            for (size_t j = 0; j < i; j++) {
                const clef_tensor *u = clef_st_at(f, j);
                const uint8_t *q = u->data;
                if (u->nbytes && p < q + u->nbytes && q < p + t->nbytes) __builtin_trap();
            }
        }
    }
    clef_st_close(f);
    return 0;
}
