/* Failure as a value at the op seam (compute/ops.h): a backend's clef_ops_fail reaches the caller's
 * clef_err as what actually happened.
 *  - the status itself: the first failure is kept, clef_ops_take maps CLEF_OPS_OOM to OutOfMemory and
 *    a device error or an unsupported shape to InternalError with the backend's words, and clears it;
 *  - fault injection on models/tiny: a CPU backend whose one op (attention, the delta rule, a
 *    Linear, the final norm, a head op) fails on its k-th call with a device error, an OOM or a
 *    shape error; the text forward / head must return -1 with that error type and the backend's
 *    message, leave the status cleared, and the next forward on the same backend must give the
 *    bits of an untouched one.
 * Out-of-memory inside the CPU ops themselves is driven by tests/unit/test_alloc_fail.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/cpu/cpu_ops.h"
#include "model/head.h"
#include "model/text.h"
#include "model/weights.h"
#include "test.h"
#include "tiny_model.h"

/* ---------------------------------------------------------------- the injecting backend */

static clef_ops *g_real;     /* the CPU backend the fake forwards to */
static const char *g_op;     /* the op to fail ("attention", ...) */
static int g_code, g_at, g_calls;

static int inject(clef_ops *ops, const char *op) {
    if (!g_op || strcmp(op, g_op) || ++g_calls != g_at) return 0;
    clef_ops_fail(ops, g_code, "%s: CUDA error cudaErrorIllegalAddress: an illegal memory access (injected)", op);
    return 1;
}

static void f_attention(clef_ops *ops, float *o, size_t ldo, const float *q, size_t ldq, const float *k, size_t ldk,
                        const float *v, size_t ldv, const clef_attn_seg *segs, size_t nseg, size_t nh, size_t nkv,
                        size_t hd, float scale, int causal) {
    if (inject(ops, "attention")) return;
    g_real->attention(ops, o, ldo, q, ldq, k, ldk, v, ldv, segs, nseg, nh, nkv, hd, scale, causal);
}
static void f_delta_rule(clef_ops *ops, float *o, const float *q, const float *k, const float *v, const float *beta,
                         const float *g, size_t Hk, size_t Hv, size_t dk, size_t dv, size_t chunk, const clef_seg *segs,
                         size_t nseg, const clef_seg_state *st) {
    if (inject(ops, "delta_rule")) return;
    g_real->delta_rule(ops, o, q, k, v, beta, g, Hk, Hv, dk, dv, chunk, segs, nseg, st);
}
static void f_linear(clef_ops *ops, float *y, const float *x, size_t T, const clef_tensor *w, size_t row0, size_t N,
                     const clef_tensor *b) {
    if (inject(ops, "linear")) return;
    g_real->linear(ops, y, x, T, w, row0, N, b);
}
static void f_rmsnorm(clef_ops *ops, float *y, size_t ldy, const float *x, size_t ldx, size_t rows, size_t D,
                      const clef_tensor *w, int offset, float eps) {
    if (inject(ops, "rmsnorm")) return;
    g_real->rmsnorm(ops, y, ldy, x, ldx, rows, D, w, offset, eps);
}

/* ---------------------------------------------------------------- tests */

static void test_status(void) {
    clef_ops o;
    memset(&o, 0, sizeof o);
    clef_err err;
    clef_err_clear(&err);
    CHECK(!clef_ops_failed(&o));
    CHECK(clef_ops_take(&o, "nowhere", &err) == 0 && err.type == NULL);
    CHECK(clef_ops_fail(&o, CLEF_OPS_OOM, "linear: out of memory for %d floats", 12) == -1);
    clef_ops_fail(&o, CLEF_OPS_DEVICE, "a consequence"); /* the first failure is the cause */
    CHECK(clef_ops_failed(&o) && o.status.code == CLEF_OPS_OOM);
    CHECK(clef_ops_take(&o, "layer 3", &err) == -1);
    CHECK_STR(err.type, "OutOfMemory");
    CHECK_STR(err.msg, "layer 3: linear: out of memory for 12 floats");
    CHECK(!clef_ops_failed(&o) && o.status.msg[0] == '\0');
    clef_ops_fail(&o, CLEF_OPS_DEVICE, "attention: CUDA error cudaErrorLaunchFailure: unspecified launch failure");
    CHECK(clef_ops_take(&o, "the head", &err) == -1);
    CHECK_STR(err.type, "InternalError");
    CHECK_STR(err.msg, "the head: attention: CUDA error cudaErrorLaunchFailure: unspecified launch failure");
    clef_ops_fail(&o, CLEF_OPS_SHAPE, "delta_rule: chunk over 64");
    CHECK(clef_ops_take(&o, "x", &err) == -1 && !strcmp(err.type, "InternalError"));
    clef_ops_fail(&o, CLEF_OPS_OOM, "y");
    clef_ops_clear(&o);
    CHECK(!clef_ops_failed(&o));
}

typedef struct {
    const char *op;
    int code, at;
    const char *type;
} injection;

int main(void) {
    test_status();
    clef_model_files *m = tiny_model_open(NULL);
    if (!m) return 77;
    clef_err err;
    clef_err_clear(&err);
    const size_t H = (size_t)m->cfg.text.hidden_size, N = 150;
    int32_t ids[150];
    uint32_t s = 777;
    for (size_t i = 0; i < N; i++) { s = s * 1103515245u + 12345u; ids[i] = (int32_t)((s >> 8) % (uint32_t)m->cfg.text.vocab_size); }
    g_real = clef_cpu_ops_create(2, NULL, &err);
    CHECK(g_real != NULL);
    if (!g_real) return TEST_END();
    clef_ops fake = *g_real; /* the same impl; its own status */
    fake.attention = f_attention;
    fake.delta_rule = f_delta_rule;
    fake.linear = f_linear;
    fake.rmsnorm = f_rmsnorm;
    float *want = malloc(N * H * 4), *got = malloc(N * H * 4);
    clef_forward_in fin;
    memset(&fin, 0, sizeof fin);
    fin.ids = ids;
    fin.n = N;
    CHECK(clef_text_forward(g_real, &m->cfg, &m->text, &fin, want, &err) == 0);

    int32_t o0[] = {20, 25, 25, 30}, oq1[] = {45, 50, 50, 52, 52, 60};
    clef_head_question qs[2] = {{0, 10, 20, 2, o0}, {1, 40, 45, 3, oq1}};
    clef_head_in hin = {want, N, ids, 2, qs, 0, NULL, NULL, 0};
    float lwant[5], lgot[5];
    CHECK(clef_head_forward(g_real, &m->head_cfg, &m->head, &m->text.lm_head, &hin, lwant, &err) == 0);

    /* the text forward: each op of a layer, the final norm (the last rmsnorm call) */
    g_op = "rmsnorm";
    g_at = -1;
    g_calls = 0;
    CHECK(clef_text_forward(&fake, &m->cfg, &m->text, &fin, got, &err) == 0);
    const int last_norm = g_calls;
    const injection tf[] = {
        {"attention", CLEF_OPS_DEVICE, 1, "InternalError"},
        {"delta_rule", CLEF_OPS_OOM, 2, "OutOfMemory"},
        {"linear", CLEF_OPS_SHAPE, 5, "InternalError"},
        {"rmsnorm", CLEF_OPS_DEVICE, last_norm, "InternalError"},
    };
    for (size_t i = 0; i < sizeof tf / sizeof tf[0]; i++) {
        g_op = tf[i].op;
        g_code = tf[i].code;
        g_at = tf[i].at;
        g_calls = 0;
        clef_err_clear(&err);
        int rc = clef_text_forward(&fake, &m->cfg, &m->text, &fin, got, &err);
        CHECK_MSG(rc == -1 && err.type && !strcmp(err.type, tf[i].type), "%s (call %d): rc %d, %s: %s", tf[i].op, tf[i].at,
                  rc, err.type ? err.type : "no error", err.msg);
        CHECK_MSG(strstr(err.msg, "an illegal memory access (injected)") && strstr(err.msg, tf[i].op),
                  "%s: the backend's words reach the error: %s", tf[i].op, err.msg);
        CHECK_MSG(!clef_ops_failed(&fake), "%s: the status was taken", tf[i].op);
        g_op = NULL;
        CHECK(clef_text_forward(&fake, &m->cfg, &m->text, &fin, got, &err) == 0);
        CHECK_MSG(!memcmp(got, want, N * H * 4), "%s: the next forward gives the untouched bits", tf[i].op);
    }
    /* where: the final norm is named */
    g_op = "rmsnorm";
    g_code = CLEF_OPS_OOM;
    g_at = last_norm;
    g_calls = 0;
    CHECK(clef_text_forward(&fake, &m->cfg, &m->text, &fin, got, &err) == -1 && strstr(err.msg, "final norm") &&
          !strcmp(err.type, "OutOfMemory"));

    /* the head */
    for (int at = 1; at <= 3; at++) {
        g_op = "linear";
        g_code = at == 2 ? CLEF_OPS_OOM : CLEF_OPS_DEVICE;
        g_at = at;
        g_calls = 0;
        clef_err_clear(&err);
        int rc = clef_head_forward(&fake, &m->head_cfg, &m->head, &m->text.lm_head, &hin, lgot, &err);
        const char *want_type = at == 2 ? "OutOfMemory" : "InternalError";
        CHECK_MSG(g_calls >= at, "the head makes at least %d Linear calls", at);
        CHECK_MSG(rc == -1 && err.type && !strcmp(err.type, want_type) && strstr(err.msg, "(injected)"),
                  "head, linear call %d: rc %d, %s: %s", at, rc, err.type ? err.type : "no error", err.msg);
        CHECK(!clef_ops_failed(&fake));
        g_op = NULL;
        CHECK(clef_head_forward(&fake, &m->head_cfg, &m->head, &m->text.lm_head, &hin, lgot, &err) == 0 &&
              !memcmp(lgot, lwant, sizeof lwant));
    }
    free(want);
    free(got);
    g_real->destroy(g_real);
    clef_model_close(m);
    return TEST_END();
}
