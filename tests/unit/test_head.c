/* The JointSchemaHead forward on the tiny checkpoint (models/tiny):
 *  - 1 vs 3 threads: logits bit-identical;
 *  - the questions are decided jointly but without order: permuting the questions permutes the
 *    logits, reversing one question's options reverses its logits (to float noise);
 *  - every memory row matters (the evidence/cross attention reads all tokens);
 *  - an empty question span gives NaN logits for the whole record, as the reference;
 *  - spans outside the record, bad ids and types are refused with an error value.
 * Parity with the reference's logits and probabilities is in test_tiny_parity.c. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "compute/cpu/cpu_ops.h"
#include "model/head.h"
#include "model/text.h"
#include "model/weights.h"
#include "test.h"
#include "tiny_model.h"

static double maxdiff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= m)) m = d;
    }
    return m;
}

int main(void) {
    clef_model_files *m = tiny_model_open(NULL);
    if (!m) return 77;
    clef_err err = {0};
    const size_t H = (size_t)m->cfg.text.hidden_size, N = 150;
    int32_t ids[150];
    uint32_t s = 777;
    for (size_t i = 0; i < N; i++) { s = s * 1103515245u + 12345u; ids[i] = (int32_t)((s >> 8) % (uint32_t)m->cfg.text.vocab_size); }
    ids[25] = ids[22]; /* a token repeated inside an option span */
    clef_ops *o1 = clef_cpu_ops_create(1, NULL, &err), *o3 = clef_cpu_ops_create(3, NULL, &err);
    CHECK(o1 && o3);
    if (!o1 || !o3) return TEST_END();
    float *hid = malloc(N * H * 4);
    clef_forward_in fin;
    memset(&fin, 0, sizeof fin);
    fin.ids = ids;
    fin.n = N;
    CHECK(clef_text_forward(o3, &m->cfg, &m->text, &fin, hid, &err) == 0);

    int32_t o0[] = {20, 25, 25, 30}, oq1[] = {45, 50, 50, 52, 52, 60}, oq2[] = {100, 110, 110, 111, 111, 120, 120, 130};
    clef_head_question qs[3] = {{0, 10, 20, 2, o0}, {1, 40, 45, 3, oq1}, {2, 80, 100, 4, oq2}};
    clef_head_in in = {hid, N, ids, 3, qs, 0, NULL, NULL, 0};
    CHECK(clef_head_total_options(&in) == 9);
    float l1[9], l3[9], lp[9];
    CHECK(clef_head_forward(o1, &m->head_cfg, &m->head, &m->text.lm_head, &in, l1, &err) == 0);
    CHECK(clef_head_forward(o3, &m->head_cfg, &m->head, &m->text.lm_head, &in, l3, &err) == 0);
    CHECK_MSG(memcmp(l1, l3, sizeof l1) == 0, "head logits differ between 1 and 3 threads");
    int finite = 1;
    for (int i = 0; i < 9; i++) finite &= isfinite(l1[i]);
    CHECK(finite);

    /* permute questions: [2, 0, 1] */
    clef_head_question qp[3] = {qs[2], qs[0], qs[1]};
    clef_head_in inp = {hid, N, ids, 3, qp, 0, NULL, NULL, 0};
    CHECK(clef_head_forward(o3, &m->head_cfg, &m->head, &m->text.lm_head, &inp, lp, &err) == 0);
    float want[9] = {l1[5], l1[6], l1[7], l1[8], l1[0], l1[1], l1[2], l1[3], l1[4]};
    double d = maxdiff(lp, want, 9);
    CHECK_MSG(d < 1e-5, "question permutation moved logits by %g", d);
    /* reverse the options of question 1 */
    int32_t rev[] = {52, 60, 50, 52, 45, 50};
    clef_head_question qr[3] = {qs[0], {1, 40, 45, 3, rev}, qs[2]};
    clef_head_in inr = {hid, N, ids, 3, qr, 0, NULL, NULL, 0};
    CHECK(clef_head_forward(o3, &m->head_cfg, &m->head, &m->text.lm_head, &inr, lp, &err) == 0);
    float want2[9] = {l1[0], l1[1], l1[4], l1[3], l1[2], l1[5], l1[6], l1[7], l1[8]};
    d = maxdiff(lp, want2, 9);
    CHECK_MSG(d < 1e-5, "option reversal moved logits by %g", d);
    /* a memory row outside every span still matters */
    float *hid2 = malloc(N * H * 4);
    memcpy(hid2, hid, N * H * 4);
    for (size_t k = 0; k < H; k++) hid2[3 * H + k] *= -1.0f;
    clef_head_in in2 = {hid2, N, ids, 3, qs, 0, NULL, NULL, 0};
    CHECK(clef_head_forward(o3, &m->head_cfg, &m->head, &m->text.lm_head, &in2, lp, &err) == 0);
    CHECK(maxdiff(lp, l1, 9) > 1e-6);

    /* errors */
    int32_t badsp[] = {20, 25, 25, 151};
    clef_head_question qb[1] = {{0, 10, 20, 2, badsp}};
    clef_head_in inb = {hid, N, ids, 1, qb, 0, NULL, NULL, 0};
    clef_err_clear(&err);
    CHECK(clef_head_forward(o1, &m->head_cfg, &m->head, &m->text.lm_head, &inb, lp, &err) == -1 && err.type);
    qb[0].option_spans = o0;
    qb[0].type = CLEF_QTYPE_COUNT; /* one past the table's last row: type_embedding has no such row */
    clef_err_clear(&err);
    CHECK(clef_head_forward(o1, &m->head_cfg, &m->head, &m->text.lm_head, &inb, lp, &err) == -1 && err.type);
    CHECK(m->head.type_embedding.shape[0] == CLEF_QTYPE_COUNT); /* a row per question type */
    qb[0].type = (clef_qtype)(CLEF_QTYPE_COUNT - 1); /* the last row: answered */
    clef_err_clear(&err);
    CHECK(clef_head_forward(o1, &m->head_cfg, &m->head, &m->text.lm_head, &inb, lp, &err) == 0);
    qb[0].type = 0;
    qb[0].q_start = 21;
    qb[0].q_end = 20;
    clef_err_clear(&err);
    CHECK(clef_head_forward(o1, &m->head_cfg, &m->head, &m->text.lm_head, &inb, lp, &err) == -1 && err.type);
    qb[0].q_start = 10;

    /* the silent NaN case (contract.md §3.2): an empty question span is not refused; its mean is
     * NaN and, through the joint decoder, every logit of the record is NaN (as the reference) */
    clef_head_question qn[3] = {qs[0], {1, 40, 40, 3, oq1}, qs[2]};
    clef_head_in inn = {hid, N, ids, 3, qn, 0, NULL, NULL, 0};
    CHECK(clef_head_forward(o3, &m->head_cfg, &m->head, &m->text.lm_head, &inn, lp, &err) == 0);
    int allnan = 1;
    for (int i = 0; i < 9; i++) allnan &= isnan(lp[i]);
    CHECK_MSG(allnan, "an empty question span must make every logit NaN");
    int32_t ids_bad[150];
    memcpy(ids_bad, ids, sizeof ids);
    ids_bad[27] = -5;
    inb.ids = ids_bad;
    clef_err_clear(&err);
    CHECK(clef_head_forward(o1, &m->head_cfg, &m->head, &m->text.lm_head, &inb, lp, &err) == -1 && err.type);
    inb.ids = ids;
    CHECK(clef_head_forward(o1, &m->head_cfg, &m->head, &m->text.lm_head, &inb, lp, &err) == 0);

    free(hid); free(hid2);
    o1->destroy(o1);
    o3->destroy(o3);
    clef_model_close(m);
    return TEST_END();
}
