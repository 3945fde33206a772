/* The int8 precision's memory (docs/precision.md): quantizing the text Linears at load replaces
 * their bf16 pages, on the tiny checkpoint (models/tiny, `make tiny`):
 *  - every text Linear weight is read once (its pages resident in the shards' mapping), then
 *    clef_model_prepare with the int8 backend quantizes each and releases its pages: the mapping's
 *    resident set (/proc/self/smaps "Rss" of the shard files) falls by at least the bytes the model
 *    says it released, and those are more than half the weights' bf16 bytes;
 *  - the int8 copy holds about half the bf16 bytes (one int8 a weight, rows padded to
 *    CLEF_Q8_PAD, one fp32 scale a row);
 *  - the text forward gives the same bits before (each row slice quantized per call) and after
 *    (the copy made at load), on 1 and 3 threads: the quantization is per row either way. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/cpu/cpu_ops.h"
#include "model/text.h"
#include "model/weights.h"
#include "test.h"
#include "tiny_model.h"

/* Rss (bytes) of this process's mappings of the checkpoint's shards (model-*-of-*.safetensors). */
static size_t shards_rss(void) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return 0;
    char line[1024];
    int in_shard = 0;
    size_t kb = 0, total = 0;
    while (fgets(line, sizeof line, f)) {
        size_t tok = strcspn(line, " ");
        if (memchr(line, '-', tok) && !memchr(line, ':', tok)) /* a mapping's header: "start-end perms ... path" */
            in_shard = strstr(line, "/model-") && strstr(line, ".safetensors");
        else if (in_shard && sscanf(line, "Rss: %zu kB", &kb) == 1)
            total += kb * 1024;
    }
    fclose(f);
    return total;
}

static const clef_tensor *text_linear(const clef_text_layer *L, int j) {
    const clef_tensor *all[] = {&L->gdn.in_proj_qkv, &L->gdn.in_proj_z, &L->gdn.in_proj_b, &L->gdn.in_proj_a,
                                &L->gdn.out_proj, &L->attn.q_proj, &L->attn.k_proj, &L->attn.v_proj,
                                &L->attn.o_proj, &L->mlp_gate, &L->mlp_up, &L->mlp_down};
    return j < (int)(sizeof all / sizeof all[0]) ? all[j] : NULL;
}

static float *forward(clef_ops *ops, clef_model_files *m, size_t *n_out) {
    const size_t H = (size_t)m->cfg.text.hidden_size, N = 97;
    int32_t ids[97];
    uint32_t s = 7;
    for (size_t i = 0; i < N; i++) {
        s = s * 1103515245u + 12345u;
        ids[i] = (int32_t)((s >> 8) % (uint32_t)m->cfg.text.vocab_size);
    }
    float *hid = malloc(N * H * sizeof(float));
    clef_forward_in in;
    memset(&in, 0, sizeof in);
    in.ids = ids;
    in.n = N;
    clef_err err = {0};
    if (!hid || clef_text_forward(ops, &m->cfg, &m->text, &in, hid, &err)) {
        printf("forward: %s\n", err.msg);
        free(hid);
        return NULL;
    }
    *n_out = N * H;
    return hid;
}

int main(void) {
    clef_model_files *m = tiny_model_open(NULL);
    if (!m) return 77;
    clef_err err = {0};
    const char *note = NULL;
    clef_ops *o1 = clef_cpu_ops_create_prec(1, CLEF_CPU_INT8, NULL, &note, &err);
    clef_ops *o3 = clef_cpu_ops_create_prec(3, CLEF_CPU_INT8, NULL, &note, &err);
    CHECK_MSG(o1 && o3 && !strcmp(o1->name, "cpu-int8"), "int8 backend: %s", err.msg);
    if (!o1 || !o3) return TEST_END();

    size_t n_before = 0, n1 = 0, n3 = 0;
    float *before = forward(o3, m, &n_before); /* every row slice quantized per call */

    /* read every text Linear weight once: its pages are now resident */
    size_t bf16_bytes = 0, want = 0;
    volatile uint64_t sink = 0;
    for (int i = 0; i < m->text.n_layers; i++)
        for (int j = 0; text_linear(&m->text.layers[i], j); j++) {
            const clef_tensor *t = text_linear(&m->text.layers[i], j);
            if (!t->data) continue;
            const unsigned char *b = t->data;
            for (size_t k = 0; k < t->nbytes; k++) sink += b[k];
            bf16_bytes += t->nbytes;
            want++;
        }
    size_t rss0 = shards_rss();
    int n = clef_model_prepare(m, o1, CLEF_PREP_TEXT);
    size_t rss1 = shards_rss();
    printf("int8: %d text Linear weights quantized: %zu bf16 bytes -> %zu held; %zu mapped bytes released; "
           "shards' Rss %zu -> %zu bytes\n", n, bf16_bytes, m->prepared_bytes, m->released_bytes, rss0, rss1);
    CHECK_MSG((size_t)n == want, "quantized %d of %zu text Linear weights", n, want);
    CHECK_MSG(rss0 > 0, "no Rss read for the shards' mappings (/proc/self/smaps)");
    CHECK_MSG(m->released_bytes * 2 > bf16_bytes, "released %zu of %zu bf16 bytes", m->released_bytes, bf16_bytes);
    CHECK_MSG(rss1 + m->released_bytes <= rss0, "the shards' Rss fell by %zd bytes, not the %zu released",
              (ssize_t)rss0 - (ssize_t)rss1, m->released_bytes);
    /* int8 + a scale a row (+ the holders) against 2 bytes a weight: about half */
    CHECK_MSG(m->prepared_bytes * 10 < bf16_bytes * 6, "the int8 copy holds %zu bytes for %zu bf16 bytes",
              m->prepared_bytes, bf16_bytes);

    float *after1 = forward(o1, m, &n1), *after3 = forward(o3, m, &n3);
    CHECK(before && after1 && after3 && n1 == n_before && n3 == n_before);
    if (before && after1 && after3) {
        CHECK_MSG(!memcmp(before, after1, n_before * sizeof(float)), "quantized at load (1 thread) != per call");
        CHECK_MSG(!memcmp(before, after3, n_before * sizeof(float)), "quantized at load (3 threads) != per call");
    }
    free(before);
    free(after1);
    free(after3);
    (void)sink;
    o1->destroy(o1);
    o3->destroy(o3);
    clef_model_close(m);
    return TEST_END();
}
