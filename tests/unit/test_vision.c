/* The vision tower and the M-RoPE planes with images (src/model/vision.c, positions.c):
 *  - positions: model.md §5.3's example (prefix, vision_start, pads, vision_end, text), two images,
 *    a wide and a tall image, refusals;
 *  - block order of patches, bilinear taps and weights (corners, identity grid, midpoints, sums);
 *  - rotary inverse frequencies (model.md §6.4 table; the tiny checkpoint's recorded bits);
 *  - a small tower on random weights: 1 vs 3 threads bit-identical, images one by one equal to
 *    images together, refusals.
 * Parity with the reference is in tests/parity/test_tiny_vision.py. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "compute/cpu/cpu_ops.h"
#include "model/positions.h"
#include "model/vision.h"
#include "test.h"

static void test_positions(void) {
    /* §5.3: 36 prefix tokens, <|vision_start|> at 36, pads 37 .. 36+N, <|vision_end|> at 37+N. */
    enum { N_IDS = 60 };
    int32_t t[N_IDS], h[N_IDS], w[N_IDS];
    clef_err err = {0};
    clef_pos_image im = {37, 6, 1, 6, 4}; /* merged 3 x 2 */
    CHECK(clef_mrope_positions(N_IDS, &im, 1, 2, t, h, w, &err) == 0);
    int ok = 1;
    for (int i = 0; i < 37; i++) ok &= t[i] == i && h[i] == i && w[i] == i;
    CHECK(ok);
    ok = 1;
    for (int n = 0; n < 6; n++) ok &= t[37 + n] == 37 && h[37 + n] == 37 + n / 2 && w[37 + n] == 37 + n % 2;
    CHECK(ok);
    CHECK(t[43] == 40 && h[43] == 40 && w[43] == 40); /* vision_end: 37 + max(3, 2) */
    ok = 1;
    for (int i = 43; i < N_IDS; i++) ok &= t[i] == i - 6 + 3 && h[i] == t[i] && w[i] == t[i];
    CHECK(ok);

    /* two images (the second wide: merged 1 x 4), text between and after */
    clef_pos_image two[2] = {{2, 4, 1, 4, 4}, {8, 4, 1, 2, 8}};
    int32_t t2[14], h2[14], w2[14];
    CHECK(clef_mrope_positions(14, two, 2, 2, t2, h2, w2, &err) == 0);
    static const int32_t eT[14] = {0, 1, 2, 2, 2, 2, 4, 5, 6, 6, 6, 6, 10, 11};
    static const int32_t eH[14] = {0, 1, 2, 2, 3, 3, 4, 5, 6, 6, 6, 6, 10, 11};
    static const int32_t eW[14] = {0, 1, 2, 3, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    CHECK(!memcmp(t2, eT, sizeof eT) && !memcmp(h2, eH, sizeof eH) && !memcmp(w2, eW, sizeof eW));

    /* an image right at the start and one at the very end (tall: merged 3 x 1) */
    clef_pos_image edge[2] = {{0, 1, 1, 2, 2}, {2, 3, 1, 6, 2}};
    int32_t t3[5], h3[5], w3[5];
    CHECK(clef_mrope_positions(5, edge, 2, 2, t3, h3, w3, &err) == 0);
    CHECK(t3[0] == 0 && t3[1] == 1 && t3[2] == 2 && h3[4] == 4 && w3[4] == 2 && t3[4] == 2);

    /* text only (no images): the index */
    CHECK(clef_mrope_positions(5, NULL, 0, 2, t3, h3, w3, &err) == 0 && t3[4] == 4 && w3[3] == 3);

    /* refusals */
    clef_pos_image bad = {37, 5, 1, 6, 4};
    CHECK(clef_mrope_positions(N_IDS, &bad, 1, 2, t, h, w, &err) == -1);
    bad = (clef_pos_image){37, 6, 2, 6, 4};
    CHECK(clef_mrope_positions(N_IDS, &bad, 1, 2, t, h, w, &err) == -1);
    bad = (clef_pos_image){57, 6, 1, 6, 4}; /* runs past the end */
    CHECK(clef_mrope_positions(N_IDS, &bad, 1, 2, t, h, w, &err) == -1);
    bad = (clef_pos_image){37, 6, 1, 5, 4}; /* not a multiple of merge */
    CHECK(clef_mrope_positions(N_IDS, &bad, 1, 2, t, h, w, &err) == -1);
    clef_pos_image overlap[2] = {{10, 4, 1, 4, 4}, {12, 4, 1, 4, 4}};
    CHECK(clef_mrope_positions(N_IDS, overlap, 2, 2, t, h, w, &err) == -1);
    CHECK(err.type && !strcmp(err.type, CLEF_E_INTERNAL));
}

static void test_bilinear(void) {
    /* block order: gw = 4, merge 2 */
    static const int er[8] = {0, 0, 1, 1, 0, 0, 1, 1}, ec[8] = {0, 1, 0, 1, 2, 3, 2, 3};
    int ok = 1;
    for (int n = 0; n < 8; n++) {
        int r, c;
        clef_vision_patch_rc((size_t)n, 4, 2, &r, &c);
        ok &= r == er[n] && c == ec[n];
    }
    int r, c;
    clef_vision_patch_rc(8, 4, 2, &r, &c);
    CHECK(ok && r == 2 && c == 0);

    int32_t idx[4];
    float wt[4];
    /* corners map to the table's corners with weight 1 */
    clef_vision_bilinear(48, 0, 0, 30, 40, idx, wt);
    CHECK(idx[0] == 0 && wt[0] == 1.0f && wt[1] == 0.0f && wt[2] == 0.0f && wt[3] == 0.0f);
    clef_vision_bilinear(48, 29, 39, 30, 40, idx, wt);
    CHECK(idx[0] == 48 * 48 - 1 && wt[0] == 1.0f && wt[1] == 0.0f && wt[2] == 0.0f && wt[3] == 0.0f);
    CHECK(idx[3] == 48 * 48 - 1); /* clamped tap */
    clef_vision_bilinear(48, 0, 39, 30, 40, idx, wt);
    CHECK(idx[0] == 47 && wt[0] == 1.0f);
    clef_vision_bilinear(48, 29, 0, 30, 40, idx, wt);
    CHECK(idx[0] == 47 * 48 && wt[0] == 1.0f);
    /* a grid as large as the table: identity */
    ok = 1;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            clef_vision_bilinear(4, i, j, 4, 4, idx, wt);
            ok &= idx[0] == i * 4 + j && wt[0] == 1.0f && wt[1] == 0.0f && wt[2] == 0.0f && wt[3] == 0.0f;
        }
    CHECK(ok);
    /* side 4, 7 rows: row 1 -> src 0.5 (halfway between table rows 0 and 1) */
    clef_vision_bilinear(4, 1, 0, 7, 1, idx, wt);
    CHECK(idx[0] == 0 && idx[2] == 4 && wt[0] == 0.5f && wt[2] == 0.5f && wt[1] == 0.0f);
    /* one-patch axis: size - 1 clamps to 1, src 0 */
    clef_vision_bilinear(4, 0, 0, 1, 1, idx, wt);
    CHECK(idx[0] == 0 && wt[0] == 1.0f);
    /* weights are in [0, 1] and sum to 1 within an ulp or two; taps in range */
    ok = 1;
    for (int i = 0; i < 30; i++)
        for (int j = 0; j < 22; j++) {
            clef_vision_bilinear(48, i, j, 30, 22, idx, wt);
            double s = 0;
            for (int k = 0; k < 4; k++) {
                ok &= wt[k] >= 0.0f && wt[k] <= 1.0f && idx[k] >= 0 && idx[k] < 48 * 48;
                s += wt[k];
            }
            ok &= fabs(s - 1.0) < 1e-6;
        }
    CHECK(ok);
}

static void test_inv_freq(void) {
    clef_vision_config vc;
    memset(&vc, 0, sizeof vc);
    vc.head_dim = 72;
    vc.rope_theta = 10000.0;
    float inv[18];
    clef_vision_inv_freq(&vc, inv);
    /* model.md §6.4 */
    static const double tab[18] = {1.0, 0.5994842052459717, 0.35938137769699097, 0.2154434472322464,
        0.1291549652814865, 0.07742635905742645, 0.04641588404774666, 0.027825593948364258,
        0.01668100617825985, 0.009999999776482582, 0.005994841456413269, 0.0035938138607889414,
        0.002154434332624078, 0.001291549764573574, 0.0007742635789327323, 0.00046415894757956266,
        0.00027825593133457005, 0.00016681010311003774};
    int ok = 1;
    for (int i = 0; i < 18; i++) { /* within one ulp (torch's powf may differ from ours by one) */
        double ulp = (double)nextafterf((float)tab[i], 2.0f) - (double)(float)tab[i];
        ok &= fabs((double)inv[i] - tab[i]) <= ulp;
    }
    CHECK(ok);
    /* the tiny checkpoint (head_dim 16): the reference's recorded bits */
    vc.head_dim = 16;
    float t4[4];
    clef_vision_inv_freq(&vc, t4);
    static const uint32_t bits[4] = {1065353216u, 1036831949u, 1008981770u, 981668463u};
    uint32_t got[4];
    memcpy(got, t4, sizeof got);
    CHECK(!memcmp(got, bits, sizeof bits));
}

/* ---- a small random tower ---- */

typedef struct {
    clef_vision_config vc;
    clef_vision_weights w;
    clef_vision_block blocks[2];
    float *store[64];
    int n_store;
} tower;

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float frand(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static clef_tensor mk(tower *T, float scale, float offset, int ndim, int64_t d0, int64_t d1) {
    clef_tensor t;
    memset(&t, 0, sizeof t);
    int64_t n = ndim == 1 ? d0 : d0 * d1;
    float *p = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) p[i] = offset + scale * frand();
    T->store[T->n_store++] = p;
    t.data = p;
    t.dtype = CLEF_ST_F32;
    t.ndim = ndim;
    t.shape[0] = d0;
    if (ndim == 2) t.shape[1] = d1;
    t.numel = n;
    t.nbytes = (size_t)n * sizeof(float);
    t.name = "test";
    return t;
}

static void tower_init(tower *T) {
    memset(T, 0, sizeof *T);
    clef_vision_config *v = &T->vc;
    v->present = 1;
    v->depth = 2;
    v->hidden_size = 24;
    v->num_heads = 2;
    v->head_dim = 12;
    v->intermediate_size = 40;
    v->patch_size = 2;
    v->temporal_patch_size = 2;
    v->spatial_merge_size = 2;
    v->out_hidden_size = 16;
    v->num_position_embeddings = 9;
    v->num_grid_per_side = 3;
    v->in_channels = 3;
    v->patch_dim = 3 * 2 * 2 * 2;
    v->merged_dim = 24 * 4;
    v->layer_norm_eps = 1e-6;
    v->rope_theta = 10000.0;
    clef_vision_weights *w = &T->w;
    w->present = 1;
    w->patch_w = mk(T, 0.3f, 0, 2, 24, v->patch_dim);
    w->patch_b = mk(T, 0.1f, 0, 1, 24, 0);
    w->pos_embed = mk(T, 0.5f, 0, 2, 9, 24);
    w->depth = 2;
    w->blocks = T->blocks;
    for (int l = 0; l < 2; l++) {
        clef_vision_block *B = &T->blocks[l];
        B->norm1_w = mk(T, 0.2f, 1, 1, 24, 0);
        B->norm1_b = mk(T, 0.1f, 0, 1, 24, 0);
        B->norm2_w = mk(T, 0.2f, 1, 1, 24, 0);
        B->norm2_b = mk(T, 0.1f, 0, 1, 24, 0);
        B->qkv_w = mk(T, 0.3f, 0, 2, 72, 24);
        B->qkv_b = mk(T, 0.1f, 0, 1, 72, 0);
        B->proj_w = mk(T, 0.3f, 0, 2, 24, 24);
        B->proj_b = mk(T, 0.1f, 0, 1, 24, 0);
        B->fc1_w = mk(T, 0.3f, 0, 2, 40, 24);
        B->fc1_b = mk(T, 0.1f, 0, 1, 40, 0);
        B->fc2_w = mk(T, 0.3f, 0, 2, 24, 40);
        B->fc2_b = mk(T, 0.1f, 0, 1, 24, 0);
    }
    w->merger_norm_w = mk(T, 0.2f, 1, 1, 24, 0);
    w->merger_norm_b = mk(T, 0.1f, 0, 1, 24, 0);
    w->merger_fc1_w = mk(T, 0.2f, 0, 2, 96, 96);
    w->merger_fc1_b = mk(T, 0.1f, 0, 1, 96, 0);
    w->merger_fc2_w = mk(T, 0.2f, 0, 2, 16, 96);
    w->merger_fc2_b = mk(T, 0.1f, 0, 1, 16, 0);
}

static void tower_free(tower *T) {
    for (int i = 0; i < T->n_store; i++) free(T->store[i]);
}

static void test_tower(void) {
    tower T;
    tower_init(&T);
    clef_err err = {0};
    clef_ops *o1 = clef_cpu_ops_create(1, NULL, &err), *o3 = clef_cpu_ops_create(3, NULL, &err);
    CHECK(o1 && o3);
    if (!o1 || !o3) return;
    /* two images: 6 x 10 patches (15 tokens) and 4 x 4 (4 tokens) */
    clef_vision_image im[2] = {{NULL, 1, 6, 10}, {NULL, 1, 4, 4}};
    size_t np0 = 60, np1 = 16, P = (size_t)T.vc.patch_dim, D = 16;
    float *px = malloc((np0 + np1) * P * sizeof(float));
    for (size_t i = 0; i < (np0 + np1) * P; i++) px[i] = frand();
    im[0].pixel_values = px;
    im[1].pixel_values = px + np0 * P;
    CHECK(clef_vision_tokens(&T.vc, &im[0]) == 15 && clef_vision_tokens(&T.vc, &im[1]) == 4);
    size_t N = 19;
    float *a = calloc(N * D, sizeof(float)), *b = calloc(N * D, sizeof(float)), *c = calloc(N * D, sizeof(float));
    CHECK(clef_vision_forward(o1, &T.vc, &T.w, im, 2, NULL, a, &err) == 0);
    CHECK(clef_vision_forward(o3, &T.vc, &T.w, im, 2, NULL, b, &err) == 0);
    CHECK_MSG(!memcmp(a, b, N * D * sizeof(float)), "1 vs 3 threads differ");
    /* one by one = together */
    CHECK(clef_vision_forward(o3, &T.vc, &T.w, &im[0], 1, NULL, c, &err) == 0);
    CHECK(clef_vision_forward(o3, &T.vc, &T.w, &im[1], 1, NULL, c + 15 * D, &err) == 0);
    CHECK(!memcmp(a, c, N * D * sizeof(float)));
    /* finite, not all equal, and the image matters */
    int fin = 1;
    for (size_t i = 0; i < N * D; i++) fin &= isfinite(a[i]);
    CHECK(fin && a[0] != a[D] && memcmp(a, a + 15 * D, D * sizeof(float)) != 0);
    /* explicit inv_freq equal to the computed one gives the same bits */
    float inv[3];
    clef_vision_inv_freq(&T.vc, inv);
    CHECK(clef_vision_forward(o1, &T.vc, &T.w, im, 2, inv, c, &err) == 0 && !memcmp(a, c, N * D * sizeof(float)));
    /* a different rotary frequency changes the result (the rotary is applied) */
    inv[1] *= 1.5f;
    CHECK(clef_vision_forward(o1, &T.vc, &T.w, im, 2, inv, c, &err) == 0 && memcmp(a, c, N * D * sizeof(float)));
    /* a pixel change in one image leaves the other image's rows alone (attention per image) */
    px[3] += 0.5f;
    CHECK(clef_vision_forward(o1, &T.vc, &T.w, im, 2, NULL, c, &err) == 0);
    CHECK(memcmp(a, c, 15 * D * sizeof(float)) != 0 && !memcmp(a + 15 * D, c + 15 * D, 4 * D * sizeof(float)));
    /* refusals */
    clef_vision_image badim = {px, 1, 5, 4};
    CHECK(clef_vision_tokens(&T.vc, &badim) == 0);
    CHECK(clef_vision_forward(o1, &T.vc, &T.w, &badim, 1, NULL, c, &err) == -1 && !strcmp(err.type, CLEF_E_INTERNAL));
    badim = (clef_vision_image){NULL, 1, 4, 4};
    CHECK(clef_vision_forward(o1, &T.vc, &T.w, &badim, 1, NULL, c, &err) == -1);
    clef_vision_weights none;
    memset(&none, 0, sizeof none);
    CHECK(clef_vision_forward(o1, &T.vc, &none, im, 1, NULL, c, &err) == -1 && !strcmp(err.type, CLEF_E_BAD_MODEL));
    free(px);
    free(a);
    free(b);
    free(c);
    o1->destroy(o1);
    o3->destroy(o3);
    tower_free(&T);
}

int main(void) {
    test_positions();
    test_bilinear();
    test_inv_freq();
    test_tower();
    return TEST_END();
}
