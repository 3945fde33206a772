/* Weights prepared once by the backend (clef_model_prepare; the CPU: AMX-packed Linear weights,
 * compute/cpu/gemm.h clef_gemm_pack) on the tiny checkpoint (models/tiny, `make tiny`):
 *  - the text forward (every layer's rows and the final norm), the joint head's logits and the
 *    vision tower's merger rows are byte-identical before and after preparing, on 1 and 3
 *    threads, and with the model prepared by one backend and run by another;
 *  - every Linear weight is prepared exactly once (a second call prepares nothing), none of the
 *    gathered tables (embed_tokens, lm_head) is;
 *  - the mapped pages of the prepared weights were released and the original bytes still read
 *    back unchanged (faulted in again from the file);
 *  - a file parsed from caller memory (anonymous pages) is never released: its bytes stay;
 *  - an engine prepares at open (clef_engine_prepared_bytes > 0 where the model layer did), but
 *    not when opened for a single request (clef_options.single_request, as clef decide).
 * Without AMX (or with CLEF_AMX_PACKED=0, CLEF_LINEAR=double, CLEF_GEMM=avx512) nothing is
 * prepared: the outputs are still checked equal, then the test reports a skip (77). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clef.h"
#include "compute/cpu/cpu_ops.h"
#include "model/head.h"
#include "model/text.h"
#include "model/vision.h"
#include "model/weights.h"
#include "test.h"
#include "tiny_model.h"

typedef struct {
    float *rows[64];
    size_t n, nl;
} layers_t;

static void on_layer(void *user, int layer, const float *rows, size_t T, size_t D) {
    layers_t *h = user;
    size_t idx = layer == CLEF_LAYER_FINAL_NORM ? h->nl : (size_t)layer;
    if (idx >= 64) return;
    free(h->rows[idx]);
    h->rows[idx] = malloc(T * D * sizeof(float));
    if (h->rows[idx]) memcpy(h->rows[idx], rows, T * D * sizeof(float));
    h->n = T * D;
}

typedef struct {
    layers_t lay;
    float *hid, *logits, *vis;
    size_t n_hid, n_logits, n_vis;
} outputs;

static uint32_t rs = 4242;
static float frand(void) {
    rs = rs * 1103515245u + 12345u;
    return (float)((rs >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* text forward (with the layer hook), head, vision tower on fixed inputs */
static int run_all(clef_ops *ops, clef_model_files *m, outputs *o, const float *px, clef_vision_image *im) {
    const size_t H = (size_t)m->cfg.text.hidden_size, N = 150;
    int32_t ids[150];
    uint32_t s = 99;
    for (size_t i = 0; i < N; i++) {
        s = s * 1103515245u + 12345u;
        ids[i] = (int32_t)((s >> 8) % (uint32_t)m->cfg.text.vocab_size);
    }
    clef_err err = {0};
    memset(o, 0, sizeof *o);
    o->lay.nl = (size_t)m->cfg.text.num_hidden_layers;
    o->n_hid = N * H;
    o->hid = malloc(o->n_hid * sizeof(float));
    clef_forward_in in;
    memset(&in, 0, sizeof in);
    in.ids = ids;
    in.n = N;
    in.on_layer = on_layer;
    in.on_layer_user = &o->lay;
    if (!o->hid || clef_text_forward(ops, &m->cfg, &m->text, &in, o->hid, &err)) return -1;
    int32_t o0[] = {20, 25, 25, 30}, o1[] = {45, 50, 50, 52, 52, 60}, o2[] = {100, 110, 110, 111, 111, 120, 120, 130};
    clef_head_question qs[3] = {{0, 10, 20, 2, o0}, {1, 40, 45, 3, o1}, {2, 80, 100, 4, o2}};
    clef_head_in hin = {o->hid, N, ids, 3, qs, 0, NULL, NULL, 0};
    o->n_logits = clef_head_total_options(&hin);
    o->logits = malloc(o->n_logits * sizeof(float));
    if (!o->logits || clef_head_forward(ops, &m->head_cfg, &m->head, &m->text.lm_head, &hin, o->logits, &err))
        return -1;
    if (m->vision.present) {
        o->n_vis = clef_vision_tokens(&m->cfg.vision, im) * (size_t)m->cfg.vision.out_hidden_size;
        o->vis = malloc(o->n_vis * sizeof(float));
        im->pixel_values = px;
        if (!o->vis || clef_vision_forward(ops, &m->cfg.vision, &m->vision, im, 1, NULL, o->vis, &err)) return -1;
    }
    return 0;
}

static int same(const outputs *a, const outputs *b, const char *what) {
    int ok = a->n_hid == b->n_hid && !memcmp(a->hid, b->hid, a->n_hid * sizeof(float));
    CHECK_MSG(ok, "%s: final hidden rows differ", what);
    for (size_t l = 0; l <= a->lay.nl; l++) {
        int lok = a->lay.rows[l] && b->lay.rows[l] && !memcmp(a->lay.rows[l], b->lay.rows[l], a->lay.n * sizeof(float));
        CHECK_MSG(lok, "%s: layer %zu rows differ", what, l);
        ok &= lok;
    }
    int hok = a->n_logits == b->n_logits && !memcmp(a->logits, b->logits, a->n_logits * sizeof(float));
    CHECK_MSG(hok, "%s: head logits differ", what);
    int vok = a->n_vis == b->n_vis && (!a->n_vis || !memcmp(a->vis, b->vis, a->n_vis * sizeof(float)));
    CHECK_MSG(vok, "%s: vision rows differ", what);
    return ok && hok && vok;
}

static void outputs_free(outputs *o) {
    for (size_t l = 0; l < 64; l++) free(o->lay.rows[l]);
    free(o->hid);
    free(o->logits);
    free(o->vis);
}

static uint64_t fnv(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* clef_st_release on a file image in anonymous memory: never released (MADV_DONTNEED would zero
 * it), the bytes stay. */
static void test_anonymous_not_released(void) {
    const size_t nb = 4 * 16384;
    char hdr[128];
    int hl = snprintf(hdr, sizeof hdr, "{\"a\":{\"dtype\":\"BF16\",\"shape\":[%zu],\"data_offsets\":[0,%zu]}}",
                      nb / 2, nb);
    size_t hpad = ((size_t)hl + 7) / 8 * 8, len = 8 + hpad + nb;
    unsigned char *img = aligned_alloc(4096, (len + 4095) / 4096 * 4096);
    CHECK(img != NULL);
    if (!img) return;
    uint64_t h64 = hpad;
    memcpy(img, &h64, 8); /* little-endian host */
    memset(img + 8, ' ', hpad);
    memcpy(img + 8, hdr, (size_t)hl);
    for (size_t i = 0; i < nb; i++) img[8 + hpad + i] = (unsigned char)(i * 7 + 1);
    clef_err err = {0};
    clef_st_file *f = clef_st_parse(img, len, "anon", &err);
    CHECK_MSG(f != NULL, "%s", err.msg);
    if (f) {
        const clef_tensor *t = clef_st_find(f, "a");
        uint64_t before = fnv(t->data, t->nbytes);
        CHECK(clef_st_release(f, t->data, t->nbytes) == 0);
        CHECK(fnv(t->data, t->nbytes) == before);
        clef_st_close(f);
    }
    free(img);
}

int main(void) {
    test_anonymous_not_released();
    const char *dir;
    clef_model_files *m = tiny_model_open(&dir);
    if (!m) return 77;
    clef_err err = {0};
    clef_ops *o1 = clef_cpu_ops_create(1, NULL, &err), *o3 = clef_cpu_ops_create(3, NULL, &err);
    CHECK(o1 && o3);
    if (!o1 || !o3) return TEST_END();
    /* one image of 4 x 6 patches */
    clef_vision_image im = {NULL, 1, 4, 6};
    size_t P = (size_t)m->cfg.vision.patch_dim, np = 24;
    float *px = malloc(np * (P ? P : 1) * sizeof(float));
    for (size_t i = 0; i < np * P; i++) px[i] = frand();

    outputs before, after1, after3;
    CHECK(run_all(o3, m, &before, px, &im) == 0);
    /* a checksum of every Linear weight of layer 0 and the head's memory projection */
    const clef_tensor *probe[] = {&m->text.layers[0].mlp_gate, &m->text.layers[0].mlp_down, &m->head.memory_projection};
    uint64_t sum0[3];
    for (int i = 0; i < 3; i++) sum0[i] = fnv(probe[i]->data, probe[i]->nbytes);

    int n = clef_model_prepare(m, o1, CLEF_PREP_TEXT | CLEF_PREP_HEAD | CLEF_PREP_VISION);
    printf("prepared %d Linear weights, %zu bytes held, %zu mapped bytes released\n", n, m->prepared_bytes,
           m->released_bytes);
    CHECK(n == m->n_prepared);
    CHECK(clef_model_prepare(m, o3, CLEF_PREP_TEXT | CLEF_PREP_HEAD | CLEF_PREP_VISION) == 0);
    CHECK(m->text.embed_tokens.prep == NULL && m->text.lm_head.prep == NULL);

    CHECK(run_all(o1, m, &after1, px, &im) == 0);
    CHECK(run_all(o3, m, &after3, px, &im) == 0); /* prepared by o1, run by o3 */
    int ok1 = same(&before, &after1, "prepared, 1 thread");
    int ok3 = same(&before, &after3, "prepared, 3 threads");
    for (int i = 0; i < 3; i++)
        CHECK_MSG(fnv(probe[i]->data, probe[i]->nbytes) == sum0[i], "%s reads back changed after its pages were released",
                  probe[i]->name);

    /* the engine prepares at open, except for a single request (clef decide) */
    for (int single = 0; single <= 1; single++) {
        clef_options eo;
        clef_options_default(&eo);
        eo.model_dir = dir;
        eo.device = CLEF_DEVICE_CPU;
        eo.single_request = single;
        char ebuf[256];
        clef_engine *e = clef_open(&eo, ebuf, sizeof ebuf);
        CHECK_MSG(e != NULL, "clef_open: %s", ebuf);
        if (!e) continue;
        size_t pb = clef_engine_prepared_bytes(e);
        CHECK_MSG(single || n == 0 ? pb == 0 : pb > 0, "engine (single_request=%d) holds %zu prepared bytes", single, pb);
        clef_close(e);
    }
    int rc;
    if (n == 0) {
        rc = TEST_END();
        if (rc == 0) printf("skip: nothing was prepared here (no AMX, or CLEF_AMX_PACKED=0 / CLEF_LINEAR=double / CLEF_GEMM); outputs equal\n");
        rc = rc == 0 ? 77 : rc;
    } else {
        /* every Linear weight: 8 per GDN layer, 7 per attention layer, the head, the tower */
        int want = 0;
        for (int i = 0; i < m->text.n_layers; i++) want += m->text.layers[i].type == CLEF_LAYER_LINEAR ? 8 : 7;
        want += 8 + 4 * m->head.n_evidence + 6 * m->head.n_layers;
        if (m->vision.present) want += 3 + 4 * m->vision.depth;
        CHECK_MSG(n == want, "prepared %d weights, the model has %d Linear weights", n, want);
        CHECK(m->released_bytes > 0 && m->prepared_bytes > 0);
        rc = TEST_END();
        if (ok1 && ok3) printf("text, head and vision outputs byte-identical with %d prepared weights\n", n);
    }
    outputs_free(&before);
    outputs_free(&after1);
    outputs_free(&after3);
    free(px);
    o1->destroy(o1); /* the model's prepared weights outlive the backends */
    o3->destroy(o3);
    clef_model_close(m);
    return rc;
}
