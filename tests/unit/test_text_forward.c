/* The text forward on the tiny release-layout checkpoint (models/tiny, `make tiny`):
 *  - 1 vs 3 threads: hidden rows and every layer dump bit-identical;
 *  - the layer hook is called once per layer and once for the final norm (= the output);
 *  - explicit position planes equal to the index give the text-only result bit for bit;
 *  - a replacement row equal to another token's embedding gives that token's result bit for bit;
 *  - causality: a prefix's rows equal the first rows of the longer run bit for bit (also across a
 *    64-token GDN chunk boundary);
 *  - the dump callback writes every layer and the final norm as raw fp32 files;
 *  - bad inputs are refused with an error value;
 *  - a state cache entry's buffers do not come from the activations' pool (ops->alloc_kept).
 * Parity with the reference fixtures (tests/fixtures/tiny) is in test_tiny_parity.c. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compute/cpu/cpu_ops.h"
#include "engine/state_cache.h"
#include "model/text.h"
#include "model/weights.h"
#include "test.h"
#include "tiny_model.h"

typedef struct {
    int calls, final_seen, order_ok, nl;
    float *rows[64];
    size_t T, D;
} hook_t;

static void hook(void *user, int layer, const float *rows, size_t T, size_t D) {
    hook_t *h = user;
    int idx = layer == CLEF_LAYER_FINAL_NORM ? h->nl : layer;
    if (layer != CLEF_LAYER_FINAL_NORM && layer != h->calls) h->order_ok = 0;
    if (layer == CLEF_LAYER_FINAL_NORM) h->final_seen++;
    h->calls++;
    if (idx < 0 || idx >= 64) return;
    free(h->rows[idx]);
    h->rows[idx] = malloc(T * D * sizeof(float));
    memcpy(h->rows[idx], rows, T * D * sizeof(float));
    h->T = T;
    h->D = D;
}

static int run(clef_ops *ops, clef_model_files *m, const int32_t *ids, size_t n, float *out, hook_t *hk,
               const int32_t *const pos[3], size_t nrep, const int32_t *rpos, const float *rrows, clef_err *err) {
    clef_forward_in in;
    memset(&in, 0, sizeof in);
    in.ids = ids;
    in.n = n;
    if (pos) for (int i = 0; i < 3; i++) in.pos[i] = pos[i];
    in.n_replace = nrep;
    in.replace_pos = rpos;
    in.replace_rows = rrows;
    if (hk) { in.on_layer = hook; in.on_layer_user = hk; }
    return clef_text_forward(ops, &m->cfg, &m->text, &in, out, err);
}

int main(void) {
    clef_model_files *m = tiny_model_open(NULL);
    if (!m) return 77;
    clef_err err = {0};
    const size_t H = (size_t)m->cfg.text.hidden_size, N = 150;
    const int nl = m->cfg.text.num_hidden_layers;
    int32_t ids[150];
    uint32_t s = 12345;
    for (size_t i = 0; i < N; i++) { s = s * 1103515245u + 12345u; ids[i] = (int32_t)((s >> 8) % (uint32_t)m->cfg.text.vocab_size); }
    ids[0] = 248045; /* <|im_start|> */
    clef_ops *o1 = clef_cpu_ops_create(1, NULL, &err), *o3 = clef_cpu_ops_create(3, NULL, &err);
    CHECK(o1 && o3);
    if (!o1 || !o3) return TEST_END();
    float *a = malloc(N * H * 4), *b = malloc(N * H * 4), *c = malloc(N * H * 4);
    hook_t h1, h3;
    memset(&h1, 0, sizeof h1);
    memset(&h3, 0, sizeof h3);
    h1.order_ok = h3.order_ok = 1;
    h1.nl = h3.nl = nl;

    /* threads */
    CHECK(run(o1, m, ids, N, a, &h1, NULL, 0, NULL, NULL, &err) == 0);
    CHECK(run(o3, m, ids, N, b, &h3, NULL, 0, NULL, NULL, &err) == 0);
    CHECK_MSG(memcmp(a, b, N * H * 4) == 0, "hidden rows differ between 1 and 3 threads");
    int same = 1;
    for (int l = 0; l <= nl && l < 64; l++)
        same &= h1.rows[l] && h3.rows[l] && memcmp(h1.rows[l], h3.rows[l], N * H * 4) == 0;
    CHECK_MSG(same, "layer dumps differ between 1 and 3 threads");
    /* hook */
    CHECK(h1.calls == nl + 1 && h1.final_seen == 1 && h1.order_ok && h1.T == N && h1.D == H);
    CHECK(h1.rows[nl] && memcmp(h1.rows[nl], a, N * H * 4) == 0);
    int finite = 1;
    for (size_t i = 0; i < N * H; i++) finite &= a[i] == a[i] && a[i] - a[i] == 0;
    CHECK(finite);
    /* layers actually change the stream */
    CHECK(nl < 2 || memcmp(h1.rows[0], h1.rows[1], N * H * 4) != 0);

    /* explicit planes = index */
    int32_t *p = malloc(N * sizeof(int32_t));
    for (size_t i = 0; i < N; i++) p[i] = (int32_t)i;
    const int32_t *planes[3] = {p, p, p};
    CHECK(run(o3, m, ids, N, c, NULL, planes, 0, NULL, NULL, &err) == 0);
    CHECK_MSG(memcmp(a, c, N * H * 4) == 0, "index planes differ from text-only positions");
    /* different H/W planes change the full-attention layers (and only from the first changed token) */
    int32_t *p2 = malloc(N * sizeof(int32_t));
    for (size_t i = 0; i < N; i++) p2[i] = (int32_t)(i < 40 ? i : i + 3);
    const int32_t *planes2[3] = {p, p2, p};
    CHECK(run(o3, m, ids, N, c, NULL, planes2, 0, NULL, NULL, &err) == 0);
    CHECK(memcmp(a, c, 40 * H * 4) == 0 && memcmp(a + 40 * H, c + 40 * H, (N - 40) * H * 4) != 0);

    /* replacement row = the embedding of another token */
    int32_t ids2[150];
    memcpy(ids2, ids, sizeof ids);
    ids2[7] = 1234;
    ids2[90] = 777;
    float *rows = malloc(2 * H * 4);
    o1->embed(o1, rows, &m->text.embed_tokens, (const int32_t[]){1234, 777}, 2);
    int32_t rpos[2] = {7, 90};
    CHECK(run(o3, m, ids2, N, b, NULL, NULL, 0, NULL, NULL, &err) == 0);
    CHECK(run(o3, m, ids, N, c, NULL, NULL, 2, rpos, rows, &err) == 0);
    CHECK_MSG(memcmp(b, c, N * H * 4) == 0, "replacement rows differ from the token's own embedding");
    CHECK(memcmp(a, b, N * H * 4) != 0);

    /* causality: prefixes (inside the first chunk, at and across the chunk boundary) */
    static const size_t pre[] = {1, 37, 64, 65, 129};
    for (size_t i = 0; i < sizeof pre / sizeof pre[0]; i++) {
        CHECK(run(o3, m, ids, pre[i], c, NULL, NULL, 0, NULL, NULL, &err) == 0);
        CHECK_MSG(memcmp(a, c, pre[i] * H * 4) == 0, "prefix of %zu tokens differs from the long run", pre[i]);
    }

    /* the ready-made dump callback (--dump-layers DIR): layer_NN.f32 + final_norm.f32, raw fp32 */
    char tmpl[] = "/tmp/clef_dumpXXXXXX";
    char *dd = mkdtemp(tmpl);
    CHECK(dd != NULL);
    if (dd) {
        clef_layer_dump dump = {dd, 0};
        clef_forward_in din;
        memset(&din, 0, sizeof din);
        din.ids = ids;
        din.n = 70;
        din.on_layer = clef_layer_dump_fn;
        din.on_layer_user = &dump;
        CHECK(clef_text_forward(o3, &m->cfg, &m->text, &din, c, &err) == 0 && !dump.failed);
        char path[512];
        float *got = malloc(70 * H * 4 + 4);
        for (int l = 0; l <= nl; l++) {
            if (l < nl) snprintf(path, sizeof path, "%s/layer_%02d.f32", dd, l);
            else snprintf(path, sizeof path, "%s/final_norm.f32", dd);
            FILE *f = fopen(path, "rb");
            size_t nr = f ? fread(got, 4, 70 * H + 1, f) : 0;
            if (f) fclose(f);
            CHECK_MSG(nr == 70 * H && memcmp(got, l < nl ? h1.rows[l] : a, 70 * H * 4) == 0, "%s", path);
            remove(path);
        }
        free(got);
        rmdir(dd);
        clef_layer_dump bad_dir = {"/nonexistent/clef", 0};
        din.on_layer_user = &bad_dir;
        CHECK(clef_text_forward(o3, &m->cfg, &m->text, &din, c, &err) == 0 && bad_dir.failed);
    }

    /* errors */
    int32_t bad[3] = {1, m->cfg.text.vocab_size, 2};
    clef_err_clear(&err);
    CHECK(run(o1, m, bad, 3, c, NULL, NULL, 0, NULL, NULL, &err) == -1 && err.type != NULL);
    clef_err_clear(&err);
    CHECK(run(o1, m, ids, 0, c, NULL, NULL, 0, NULL, NULL, &err) == -1 && err.type != NULL);
    int32_t rbad = 150;
    clef_err_clear(&err);
    CHECK(run(o1, m, ids, N, c, NULL, NULL, 1, &rbad, rows, &err) == -1 && err.type != NULL);
    const int32_t *half_planes[3] = {p, NULL, NULL};
    clef_err_clear(&err);
    CHECK(run(o1, m, ids, N, c, NULL, half_planes, 0, NULL, NULL, &err) == -1 && err.type != NULL);

    /* the state cache's saved states outlive the forward: they are not carved from the pool the
     * forwards' activations share (ops->alloc_kept), so the pool's live bytes stay 0 while an entry
     * large enough for the pool (8,192 rows: 2 MiB of keys per attention layer) is held */
    {
        clef_state_cache *sc = clef_cache_create(o1, &m->cfg, 32, (size_t)256 << 20);
        const size_t krows = 8192;
        int32_t *kids = calloc(krows, sizeof *kids);
        clef_ops_buffers before, held;
        o1->buffer_stats(o1, &before);
        clef_cache_entry *ce = sc && kids ? clef_cache_reserve(sc, kids, krows, NULL, 0) : NULL;
        CHECK(ce != NULL);
        o1->buffer_stats(o1, &held);
        CHECK_MSG(held.live_bytes == before.live_bytes && held.held_bytes == before.held_bytes,
                  "a state cache entry takes nothing from the activations' pool (live %zu -> %zu, held %zu -> %zu)",
                  before.live_bytes, held.live_bytes, before.held_bytes, held.held_bytes);
        if (ce) clef_cache_release(sc, ce); /* pending: freed */
        clef_cache_destroy(sc);
        free(kids);
    }

    for (int l = 0; l < 64; l++) { free(h1.rows[l]); free(h3.rows[l]); }
    free(a); free(b); free(c); free(p); free(p2); free(rows);
    o1->destroy(o1);
    o3->destroy(o3);
    clef_model_close(m);
    return TEST_END();
}
