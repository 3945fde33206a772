#include "model/weights.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/mapfile.h"
#include "base/question_type.h"
#include "compute/ops.h"
#include "base/json.h"

#define INDEX_MAX_BYTES (64u * 1024u * 1024u)
#define MAX_SHARDS 4096

typedef struct map_ent {
    char *name;
    int shard;
} map_ent;

struct clef_model_files_priv {
    char *dir;
    size_t n_shards;
    clef_st_file **shards;
    char **shard_paths;
    size_t n_map;       /* 0 for a single model.safetensors */
    map_ent *map;       /* sorted by name */
    clef_st_file *head;
    char *head_path;
};

/* ------------------------------------------------------------------------------------------ */
/* Binding (or enumerating) the expected tensors.                                             */

typedef struct binder {
    int enumerate;               /* 1: call fn instead of looking up */
    clef_expect_fn fn;
    void *user;
    const clef_model_files *m;
    int file;                    /* 0 backbone, 1 head */
    unsigned char *head_used;    /* per head tensor: bound */
    size_t n_bound_head;
    clef_err *err;
} binder;

static const clef_tensor *backbone_lookup(const clef_model_files *m, const char *name, const char **where,
                                          int *index_but_absent);

static void fmt_shape(char *buf, size_t cap, int ndim, const int64_t *shape) {
    size_t n = 0;
    n += (size_t)snprintf(buf + n, cap - n, "[");
    for (int i = 0; i < ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

static int want(binder *b, clef_tensor *dst, int dtype, int ndim, const int64_t *shape, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

static int want(binder *b, clef_tensor *dst, int dtype, int ndim, const int64_t *shape, const char *fmt, ...) {
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    if (b->enumerate) {
        if (b->fn(b->user, b->file, name, dtype, ndim, shape))
            return clef_err_set(b->err, CLEF_E_INTERNAL, "enumeration stopped at %s", name);
        return 0;
    }
    const clef_model_files *m = b->m;
    const clef_tensor *t;
    const char *where;
    if (b->file == 1) {
        where = m->priv->head_path;
        t = clef_st_find(m->priv->head, name);
    } else {
        int in_index = 0;
        t = backbone_lookup(m, name, &where, &in_index);
        if (!t && in_index)
            return clef_err_set(b->err, CLEF_E_BAD_MODEL,
                                "%s: model.safetensors.index.json maps tensor '%s' to this shard, but it is not there",
                                where, name);
    }
    if (!t)
        return clef_err_set(b->err, CLEF_E_BAD_MODEL, "%s: tensor '%s' is missing (needed by the model)", where,
                            name);
    if (t->dtype != dtype)
        return clef_err_set(b->err, CLEF_E_BAD_MODEL, "%s: tensor '%s' has dtype %s, expected %s", where, name,
                            clef_dtype_name(t->dtype), clef_dtype_name(dtype));
    int same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++) same = t->shape[i] == shape[i];
    if (!same) {
        char got[160], exp[160];
        fmt_shape(got, sizeof got, t->ndim, t->shape);
        fmt_shape(exp, sizeof exp, ndim, shape);
        return clef_err_set(b->err, CLEF_E_BAD_MODEL, "%s: tensor '%s' has shape %s, expected %s from the config",
                            where, name, got, exp);
    }
    size_t es = clef_dtype_size(dtype);
    if (t->data && es && ((uintptr_t)t->data % es) != 0)
        return clef_err_set(b->err, CLEF_E_BAD_MODEL,
                            "%s: tensor '%s' data is not aligned to its %zu-byte elements (header not padded)", where,
                            name, es);
    *dst = *t;
    if (b->file == 1) {
        size_t idx = (size_t)(t - clef_st_at(m->priv->head, 0));
        if (!b->head_used[idx]) b->n_bound_head++;
        b->head_used[idx] = 1;
    }
    return 0;
}

#define SH(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (const int64_t[]){__VA_ARGS__}
#define SCALAR 0, NULL
#define BF CLEF_ST_BF16
#define F32 CLEF_ST_F32
#define TRY(x) do { if ((x) != 0) return -1; } while (0)

static int bind_text(binder *b, const clef_text_config *c, clef_text_weights *w) {
    const int64_t H = c->hidden_size, V = c->vocab_size, I = c->intermediate_size;
    const char *P = "model.language_model.";
    b->file = 0;
    TRY(want(b, &w->embed_tokens, BF, SH(V, H), "%sembed_tokens.weight", P));
    TRY(want(b, &w->final_norm, BF, SH(H), "%snorm.weight", P));
    TRY(want(b, &w->lm_head, BF, SH(V, H), "lm_head.weight"));
    for (int i = 0; i < c->num_hidden_layers; i++) {
        clef_text_layer *L = &w->layers[i];
        L->type = c->layer_types[i];
        TRY(want(b, &L->input_norm, BF, SH(H), "%slayers.%d.input_layernorm.weight", P, i));
        TRY(want(b, &L->post_norm, BF, SH(H), "%slayers.%d.post_attention_layernorm.weight", P, i));
        TRY(want(b, &L->mlp_gate, BF, SH(I, H), "%slayers.%d.mlp.gate_proj.weight", P, i));
        TRY(want(b, &L->mlp_up, BF, SH(I, H), "%slayers.%d.mlp.up_proj.weight", P, i));
        TRY(want(b, &L->mlp_down, BF, SH(H, I), "%slayers.%d.mlp.down_proj.weight", P, i));
        if (L->type == CLEF_LAYER_LINEAR) {
            const int64_t nv = c->linear_num_value_heads, vd = c->linear_value_dim, cd = c->linear_conv_dim;
            const char *A = "linear_attn";
            TRY(want(b, &L->gdn.in_proj_qkv, BF, SH(cd, H), "%slayers.%d.%s.in_proj_qkv.weight", P, i, A));
            TRY(want(b, &L->gdn.in_proj_z, BF, SH(vd, H), "%slayers.%d.%s.in_proj_z.weight", P, i, A));
            TRY(want(b, &L->gdn.in_proj_b, BF, SH(nv, H), "%slayers.%d.%s.in_proj_b.weight", P, i, A));
            TRY(want(b, &L->gdn.in_proj_a, BF, SH(nv, H), "%slayers.%d.%s.in_proj_a.weight", P, i, A));
            TRY(want(b, &L->gdn.conv1d, BF, SH(cd, 1, c->linear_conv_kernel_dim), "%slayers.%d.%s.conv1d.weight", P,
                     i, A));
            TRY(want(b, &L->gdn.dt_bias, BF, SH(nv), "%slayers.%d.%s.dt_bias", P, i, A));
            TRY(want(b, &L->gdn.A_log, F32, SH(nv), "%slayers.%d.%s.A_log", P, i, A));
            TRY(want(b, &L->gdn.norm, F32, SH(c->linear_value_head_dim), "%slayers.%d.%s.norm.weight", P, i, A));
            TRY(want(b, &L->gdn.out_proj, BF, SH(H, vd), "%slayers.%d.%s.out_proj.weight", P, i, A));
        } else {
            const int64_t q = c->q_dim, kv = c->kv_dim, hd = c->head_dim;
            const char *A = "self_attn";
            TRY(want(b, &L->attn.q_proj, BF, SH(2 * q, H), "%slayers.%d.%s.q_proj.weight", P, i, A));
            TRY(want(b, &L->attn.k_proj, BF, SH(kv, H), "%slayers.%d.%s.k_proj.weight", P, i, A));
            TRY(want(b, &L->attn.v_proj, BF, SH(kv, H), "%slayers.%d.%s.v_proj.weight", P, i, A));
            TRY(want(b, &L->attn.o_proj, BF, SH(H, q), "%slayers.%d.%s.o_proj.weight", P, i, A));
            TRY(want(b, &L->attn.q_norm, BF, SH(hd), "%slayers.%d.%s.q_norm.weight", P, i, A));
            TRY(want(b, &L->attn.k_norm, BF, SH(hd), "%slayers.%d.%s.k_norm.weight", P, i, A));
        }
    }
    return 0;
}

static int bind_vision(binder *b, const clef_vision_config *c, int64_t out_hidden, clef_vision_weights *w) {
    const int64_t Hv = c->hidden_size, Iv = c->intermediate_size, M = c->merged_dim, p = c->patch_size;
    const char *V = "model.visual.";
    b->file = 0;
    w->present = 1;
    TRY(want(b, &w->patch_w, BF, SH(Hv, c->in_channels, c->temporal_patch_size, p, p), "%spatch_embed.proj.weight",
             V));
    TRY(want(b, &w->patch_b, BF, SH(Hv), "%spatch_embed.proj.bias", V));
    TRY(want(b, &w->pos_embed, BF, SH(c->num_position_embeddings, Hv), "%spos_embed.weight", V));
    for (int j = 0; j < c->depth; j++) {
        clef_vision_block *k = &w->blocks[j];
        TRY(want(b, &k->norm1_w, BF, SH(Hv), "%sblocks.%d.norm1.weight", V, j));
        TRY(want(b, &k->norm1_b, BF, SH(Hv), "%sblocks.%d.norm1.bias", V, j));
        TRY(want(b, &k->norm2_w, BF, SH(Hv), "%sblocks.%d.norm2.weight", V, j));
        TRY(want(b, &k->norm2_b, BF, SH(Hv), "%sblocks.%d.norm2.bias", V, j));
        TRY(want(b, &k->qkv_w, BF, SH(3 * Hv, Hv), "%sblocks.%d.attn.qkv.weight", V, j));
        TRY(want(b, &k->qkv_b, BF, SH(3 * Hv), "%sblocks.%d.attn.qkv.bias", V, j));
        TRY(want(b, &k->proj_w, BF, SH(Hv, Hv), "%sblocks.%d.attn.proj.weight", V, j));
        TRY(want(b, &k->proj_b, BF, SH(Hv), "%sblocks.%d.attn.proj.bias", V, j));
        TRY(want(b, &k->fc1_w, BF, SH(Iv, Hv), "%sblocks.%d.mlp.linear_fc1.weight", V, j));
        TRY(want(b, &k->fc1_b, BF, SH(Iv), "%sblocks.%d.mlp.linear_fc1.bias", V, j));
        TRY(want(b, &k->fc2_w, BF, SH(Hv, Iv), "%sblocks.%d.mlp.linear_fc2.weight", V, j));
        TRY(want(b, &k->fc2_b, BF, SH(Hv), "%sblocks.%d.mlp.linear_fc2.bias", V, j));
    }
    TRY(want(b, &w->merger_norm_w, BF, SH(Hv), "%smerger.norm.weight", V));
    TRY(want(b, &w->merger_norm_b, BF, SH(Hv), "%smerger.norm.bias", V));
    TRY(want(b, &w->merger_fc1_w, BF, SH(M, M), "%smerger.linear_fc1.weight", V));
    TRY(want(b, &w->merger_fc1_b, BF, SH(M), "%smerger.linear_fc1.bias", V));
    TRY(want(b, &w->merger_fc2_w, BF, SH(out_hidden, M), "%smerger.linear_fc2.weight", V));
    TRY(want(b, &w->merger_fc2_b, BF, SH(out_hidden), "%smerger.linear_fc2.bias", V));
    return 0;
}

static int bind_mha(binder *b, clef_tensor *in_w, clef_tensor *in_b, clef_tensor *out_w, clef_tensor *out_b,
                    int64_t W, const char *prefix) {
    TRY(want(b, in_w, BF, SH(3 * W, W), "%s.in_proj_weight", prefix));
    TRY(want(b, in_b, BF, SH(3 * W), "%s.in_proj_bias", prefix));
    TRY(want(b, out_w, BF, SH(W, W), "%s.out_proj.weight", prefix));
    TRY(want(b, out_b, BF, SH(W), "%s.out_proj.bias", prefix));
    return 0;
}

static int bind_ln(binder *b, clef_tensor *w, clef_tensor *bias, int64_t n, const char *fmt, int i) {
    char p[128];
    snprintf(p, sizeof p, fmt, i);
    TRY(want(b, w, BF, SH(n), "%s.weight", p));
    TRY(want(b, bias, BF, SH(n), "%s.bias", p));
    return 0;
}

static int bind_head(binder *b, const clef_head_config *c, clef_head_weights *w) {
    const int64_t Hb = c->hidden_size, W = c->width, F = c->feedforward;
    b->file = 1;
    TRY(bind_ln(b, &w->hidden_norm_w, &w->hidden_norm_b, Hb, "hidden_norm", 0));
    TRY(want(b, &w->memory_projection, BF, SH(W, Hb), "memory_projection.weight"));
    TRY(want(b, &w->question_projection, BF, SH(W, Hb), "question_projection.weight"));
    TRY(want(b, &w->option_question_projection, BF, SH(W, Hb), "option_question_projection.weight"));
    TRY(want(b, &w->global_projection, BF, SH(W, Hb), "global_projection.weight"));
    TRY(want(b, &w->option_context_projection, BF, SH(W, Hb), "option_context_projection.weight"));
    TRY(want(b, &w->option_lexical_projection, BF, SH(W, Hb), "option_lexical_projection.weight"));
    TRY(want(b, &w->type_embedding, BF, SH(CLEF_QTYPE_COUNT, W), "type_embedding.weight")); /* a row per question type */
    for (int i = 0; i < c->routing_layers; i++) {
        clef_head_evidence_layer *e = &w->evidence[i];
        char p[96];
        TRY(bind_ln(b, &e->query_norm_w, &e->query_norm_b, W, "evidence_layers.%d.query_norm", i));
        TRY(bind_ln(b, &e->memory_norm_w, &e->memory_norm_b, W, "evidence_layers.%d.memory_norm", i));
        TRY(bind_ln(b, &e->ff_norm_w, &e->ff_norm_b, W, "evidence_layers.%d.feedforward_norm", i));
        snprintf(p, sizeof p, "evidence_layers.%d.attention", i);
        TRY(bind_mha(b, &e->attn_in_w, &e->attn_in_b, &e->attn_out_w, &e->attn_out_b, W, p));
        TRY(want(b, &e->ff0_w, BF, SH(F, W), "evidence_layers.%d.feedforward.0.weight", i));
        TRY(want(b, &e->ff0_b, BF, SH(F), "evidence_layers.%d.feedforward.0.bias", i));
        TRY(want(b, &e->ff3_w, BF, SH(W, F), "evidence_layers.%d.feedforward.3.weight", i));
        TRY(want(b, &e->ff3_b, BF, SH(W), "evidence_layers.%d.feedforward.3.bias", i));
    }
    TRY(bind_ln(b, &w->option_summary_norm_w, &w->option_summary_norm_b, W, "option_summary_norm", 0));
    TRY(bind_ln(b, &w->field_norm_w, &w->field_norm_b, W, "field_norm", 0));
    TRY(bind_ln(b, &w->option_norm_w, &w->option_norm_b, W, "option_norm", 0));
    for (int j = 0; j < c->layers; j++) {
        clef_head_decoder_layer *d = &w->layers[j];
        char p[96];
        snprintf(p, sizeof p, "layers.%d.self_attn", j);
        TRY(bind_mha(b, &d->sa_in_w, &d->sa_in_b, &d->sa_out_w, &d->sa_out_b, W, p));
        snprintf(p, sizeof p, "layers.%d.multihead_attn", j);
        TRY(bind_mha(b, &d->ca_in_w, &d->ca_in_b, &d->ca_out_w, &d->ca_out_b, W, p));
        TRY(want(b, &d->linear1_w, BF, SH(F, W), "layers.%d.linear1.weight", j));
        TRY(want(b, &d->linear1_b, BF, SH(F), "layers.%d.linear1.bias", j));
        TRY(want(b, &d->linear2_w, BF, SH(W, F), "layers.%d.linear2.weight", j));
        TRY(want(b, &d->linear2_b, BF, SH(W), "layers.%d.linear2.bias", j));
        TRY(bind_ln(b, &d->norm1_w, &d->norm1_b, W, "layers.%d.norm1", j));
        TRY(bind_ln(b, &d->norm2_w, &d->norm2_b, W, "layers.%d.norm2", j));
        TRY(bind_ln(b, &d->norm3_w, &d->norm3_b, W, "layers.%d.norm3", j));
    }
    TRY(want(b, &w->scorer0_w, BF, SH(W, 4 * W), "residual_scorer.0.weight"));
    TRY(want(b, &w->scorer0_b, BF, SH(W), "residual_scorer.0.bias"));
    TRY(want(b, &w->scorer3_w, BF, SH(1, W), "residual_scorer.3.weight"));
    TRY(want(b, &w->scorer3_b, BF, SH(1), "residual_scorer.3.bias"));
    TRY(want(b, &w->prior_logit_scale, BF, SCALAR, "prior_logit_scale"));
    TRY(want(b, &w->joint_logit_scale, BF, SCALAR, "joint_logit_scale"));
    TRY(want(b, &w->residual_gate, BF, SCALAR, "residual_gate"));
    return 0;
}

static int alloc_arrays(const clef_config *cfg, const clef_head_config *h, int with_vision, clef_text_weights *t,
                        clef_vision_weights *v, clef_head_weights *hw, clef_err *err) {
    t->n_layers = cfg->text.num_hidden_layers;
    t->layers = calloc((size_t)t->n_layers, sizeof *t->layers);
    if (with_vision) {
        v->depth = cfg->vision.depth;
        v->blocks = calloc((size_t)v->depth, sizeof *v->blocks);
    }
    hw->n_evidence = h->routing_layers;
    hw->evidence = calloc((size_t)hw->n_evidence, sizeof *hw->evidence);
    hw->n_layers = h->layers;
    hw->layers = calloc((size_t)hw->n_layers, sizeof *hw->layers);
    if (!t->layers || (with_vision && !v->blocks) || !hw->evidence || !hw->layers)
        return clef_err_set(err, CLEF_E_OOM, "out of memory binding the model weights");
    return 0;
}

static void free_arrays(clef_text_weights *t, clef_vision_weights *v, clef_head_weights *hw) {
    free(t->layers);
    free(v->blocks);
    free(hw->evidence);
    free(hw->layers);
    memset(t, 0, sizeof *t);
    memset(v, 0, sizeof *v);
    memset(hw, 0, sizeof *hw);
}

int clef_weights_expected(const clef_config *cfg, const clef_head_config *hcfg, int with_vision, clef_expect_fn fn,
                          void *user) {
    clef_text_weights t = {0};
    clef_vision_weights v = {0};
    clef_head_weights hw = {0};
    clef_err err = {0};
    binder b = {.enumerate = 1, .fn = fn, .user = user, .err = &err};
    with_vision = with_vision && cfg->vision.present;
    int rc = alloc_arrays(cfg, hcfg, with_vision, &t, &v, &hw, &err);
    if (!rc) rc = bind_text(&b, &cfg->text, &t);
    if (!rc && with_vision) rc = bind_vision(&b, &cfg->vision, cfg->text.hidden_size, &v);
    if (!rc) rc = bind_head(&b, hcfg, &hw);
    free_arrays(&t, &v, &hw);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Files: index, shards, lookup.                                                               */

static int cmp_map(const void *a, const void *b) {
    return strcmp(((const map_ent *)a)->name, ((const map_ent *)b)->name);
}

static const map_ent *map_find(const clef_model_files_priv *p, const char *name) {
    size_t lo = 0, hi = p->n_map;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(p->map[mid].name, name);
        if (c == 0) return &p->map[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

static const clef_tensor *backbone_lookup(const clef_model_files *m, const char *name, const char **where,
                                          int *index_but_absent) {
    const clef_model_files_priv *p = m->priv;
    *index_but_absent = 0;
    if (!p->map) {
        *where = p->shard_paths[0];
        return clef_st_find(p->shards[0], name);
    }
    const map_ent *e = map_find(p, name);
    if (!e) {
        *where = p->dir;
        return NULL;
    }
    *where = p->shard_paths[e->shard];
    const clef_tensor *t = clef_st_find(p->shards[e->shard], name);
    if (!t) *index_but_absent = 1;
    return t;
}

const clef_tensor *clef_model_find(const clef_model_files *m, const char *name) {
    if (!m || !m->priv || !name) return NULL;
    const char *where;
    int absent;
    return backbone_lookup(m, name, &where, &absent);
}

static int has_prefix(const clef_model_files_priv *p, const char *prefix) {
    size_t n = strlen(prefix);
    if (!p->map) {
        for (size_t i = 0; i < clef_st_count(p->shards[0]); i++)
            if (strncmp(clef_st_at(p->shards[0], i)->name, prefix, n) == 0) return 1;
        return 0;
    }
    size_t lo = 0, hi = p->n_map; /* first entry >= prefix */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(p->map[mid].name, prefix) < 0) lo = mid + 1;
        else hi = mid;
    }
    return lo < p->n_map && strncmp(p->map[lo].name, prefix, n) == 0;
}

static char *join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    if (a + b + 2 > PATH_MAX) return NULL;
    char *s = malloc(a + b + 2);
    if (!s) return NULL;
    memcpy(s, dir, a);
    s[a] = '/';
    memcpy(s + a + 1, name, b + 1);
    return s;
}

static int file_exists(const char *path) { return access(path, F_OK) == 0; }

/* A shard name must be a plain file name inside the folder. */
static int shard_name_ok(const char *s, size_t len) {
    if (len == 0 || len > 255) return 0;
    if (memchr(s, '\0', len) || memchr(s, '/', len) || memchr(s, '\\', len)) return 0;
    for (size_t i = 0; i + 1 < len; i++)
        if (s[i] == '.' && s[i + 1] == '.') return 0;
    if (len == 1 && s[0] == '.') return 0;
    return 1;
}

static int read_index(clef_model_files_priv *p, const char *index_path, clef_err *err) {
    clef_mapfile mf;
    if (clef_mapfile_open(&mf, index_path, err)) return -1;
    int rc = -1;
    json_doc *doc = NULL;
    char **names = NULL;
    size_t n_names = 0;
    if (mf.size > INDEX_MAX_BYTES) {
        clef_err_set(err, CLEF_E_BAD_MODEL, "%s: file is too large (%zu bytes)", index_path, mf.size);
        goto out;
    }
    json_limits lim = {.max_bytes = INDEX_MAX_BYTES, .max_depth = 16};
    clef_err jerr = {0};
    doc = clef_json_parse(mf.data ? (const char *)mf.data : "", mf.size, &lim, &jerr);
    if (!doc) {
        clef_err_set(err, CLEF_E_BAD_MODEL, "%s: not valid JSON: %s", index_path, jerr.msg);
        goto out;
    }
    const json_value *wm = clef_json_object_get(clef_json_doc_root(doc), "weight_map");
    if (!wm || wm->kind != JSON_OBJECT) {
        clef_err_set(err, CLEF_E_BAD_MODEL, "%s: no \"weight_map\" object", index_path);
        goto out;
    }
    size_t n = wm->u.object.n;
    p->map = calloc(n ? n : 1, sizeof *p->map);
    names = calloc(n ? n : 1, sizeof *names);
    if (!p->map || !names) {
        clef_err_set(err, CLEF_E_OOM, "out of memory reading %s", index_path);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        const json_member *mb = &wm->u.object.members[i];
        const json_value *v = mb->val;
        if (memchr(mb->key, '\0', mb->key_len)) {
            clef_err_set(err, CLEF_E_BAD_MODEL, "%s: a tensor name contains a NUL byte", index_path);
            goto out;
        }
        if (!v || v->kind != JSON_STRING || !shard_name_ok(v->u.string.s, v->u.string.len)) {
            clef_err_set(err, CLEF_E_BAD_MODEL,
                         "%s: tensor '%.200s' maps to \"%.200s\", which is not a plain file name inside the model "
                         "folder", index_path, mb->key, v && v->kind == JSON_STRING ? v->u.string.s : "(not a string)");
            goto out;
        }
        size_t k = 0;
        while (k < n_names && strcmp(names[k], v->u.string.s) != 0) k++;
        if (k == n_names) {
            if (n_names >= MAX_SHARDS) {
                clef_err_set(err, CLEF_E_BAD_MODEL, "%s: more than %d shards", index_path, MAX_SHARDS);
                goto out;
            }
            names[n_names] = strdup(v->u.string.s);
            if (!names[n_names]) {
                clef_err_set(err, CLEF_E_OOM, "out of memory reading %s", index_path);
                goto out;
            }
            n_names++;
        }
        p->map[i].name = strdup(mb->key);
        p->map[i].shard = (int)k;
        p->n_map = i + 1;
        if (!p->map[i].name) {
            clef_err_set(err, CLEF_E_OOM, "out of memory reading %s", index_path);
            goto out;
        }
    }
    if (n == 0) {
        clef_err_set(err, CLEF_E_BAD_MODEL, "%s: \"weight_map\" is empty", index_path);
        goto out;
    }
    qsort(p->map, p->n_map, sizeof *p->map, cmp_map);
    p->shard_paths = calloc(n_names, sizeof *p->shard_paths);
    p->shards = calloc(n_names, sizeof *p->shards);
    if (!p->shard_paths || !p->shards) {
        clef_err_set(err, CLEF_E_OOM, "out of memory reading %s", index_path);
        goto out;
    }
    p->n_shards = n_names;
    for (size_t k = 0; k < n_names; k++) {
        p->shard_paths[k] = join(p->dir, names[k]);
        if (!p->shard_paths[k]) {
            clef_err_set(err, CLEF_E_OOM, "out of memory (or path too long) for shard %s", names[k]);
            goto out;
        }
    }
    rc = 0;
out:
    for (size_t k = 0; k < n_names; k++) free(names[k]);
    free(names);
    clef_json_doc_free(doc);
    clef_mapfile_close(&mf);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Prepared Linear weights (clef_model_prepare).                                               */

typedef void (*linear_fn)(clef_model_files *m, clef_tensor *t, void *ctx);

static void each(clef_model_files *m, clef_tensor *const *ts, size_t n, linear_fn fn, void *ctx) {
    for (size_t k = 0; k < n; k++) fn(m, ts[k], ctx);
}
#define EACH(m, fn, ctx, ...) \
    each((m), (clef_tensor *const[]){__VA_ARGS__}, sizeof((clef_tensor *const[]){__VA_ARGS__}) / sizeof(clef_tensor *), (fn), (ctx))

/* Every weight the model passes to ops->linear, of the chosen parts. Not embed_tokens / lm_head:
 * those are gathered by rows (a prepared copy would make the whole 2 GB table resident). */
static void for_each_linear(clef_model_files *m, unsigned parts, linear_fn fn, void *ctx) {
    if (parts & CLEF_PREP_TEXT)
        for (int i = 0; m->text.layers && i < m->text.n_layers; i++) {
            clef_text_layer *L = &m->text.layers[i];
            EACH(m, fn, ctx, &L->gdn.in_proj_qkv, &L->gdn.in_proj_z, &L->gdn.in_proj_b, &L->gdn.in_proj_a,
                 &L->gdn.out_proj, &L->attn.q_proj, &L->attn.k_proj, &L->attn.v_proj, &L->attn.o_proj,
                 &L->mlp_gate, &L->mlp_up, &L->mlp_down);
        }
    if ((parts & CLEF_PREP_VISION) && m->vision.present) {
        clef_vision_weights *v = &m->vision;
        fn(m, &v->patch_w, ctx);
        for (int j = 0; v->blocks && j < v->depth; j++) {
            clef_vision_block *k = &v->blocks[j];
            EACH(m, fn, ctx, &k->qkv_w, &k->proj_w, &k->fc1_w, &k->fc2_w);
        }
        EACH(m, fn, ctx, &v->merger_fc1_w, &v->merger_fc2_w);
    }
    if (parts & CLEF_PREP_HEAD) {
        clef_head_weights *h = &m->head;
        EACH(m, fn, ctx, &h->memory_projection, &h->question_projection, &h->option_question_projection,
             &h->global_projection, &h->option_context_projection, &h->option_lexical_projection,
             &h->scorer0_w, &h->scorer3_w);
        for (int i = 0; h->evidence && i < h->n_evidence; i++) {
            clef_head_evidence_layer *e = &h->evidence[i];
            EACH(m, fn, ctx, &e->attn_in_w, &e->attn_out_w, &e->ff0_w, &e->ff3_w);
        }
        for (int j = 0; h->layers && j < h->n_layers; j++) {
            clef_head_decoder_layer *d = &h->layers[j];
            EACH(m, fn, ctx, &d->sa_in_w, &d->sa_out_w, &d->ca_in_w, &d->ca_out_w, &d->linear1_w, &d->linear2_w);
        }
    }
}

/* Releases the pages of [p, p + n) in whichever mapped file holds it (clef_st_release checks the
 * range and returns 0 for the others). */
static size_t release_pages(const clef_model_files *m, const void *p, size_t n) {
    const clef_model_files_priv *pv = m->priv;
    size_t r = 0;
    for (size_t i = 0; i < pv->n_shards && !r; i++) r = clef_st_release(pv->shards[i], p, n);
    return r ? r : clef_st_release(pv->head, p, n);
}

typedef struct { clef_ops *ops; int n; } prep_ctx;

static void prepare_one(clef_model_files *m, clef_tensor *t, void *ctx) {
    prep_ctx *c = ctx;
    if (!t->data || t->prep) return;
    t->prep = c->ops->prepare_weight(c->ops, t);
    if (!t->prep) return;
    c->n++;
    m->n_prepared++;
    m->prepared_bytes += t->prep->bytes;
    /* right away, so at most one matrix is resident twice during the load */
    m->released_bytes += release_pages(m, t->data, t->nbytes);
}

static void unprepare_one(clef_model_files *m, clef_tensor *t, void *ctx) {
    (void)m;
    (void)ctx;
    if (t->prep) t->prep->destroy(t->prep);
    t->prep = NULL;
}

int clef_model_prepare(clef_model_files *m, clef_ops *ops, unsigned parts) {
    if (!m || !m->priv || !ops || !ops->prepare_weight) return 0;
    prep_ctx c = {ops, 0};
    for_each_linear(m, parts, prepare_one, &c);
    return c.n;
}

void clef_model_close(clef_model_files *m) {
    if (!m) return;
    for_each_linear(m, CLEF_PREP_TEXT | CLEF_PREP_HEAD | CLEF_PREP_VISION, unprepare_one, NULL);
    clef_model_files_priv *p = m->priv;
    if (p) {
        for (size_t i = 0; i < p->n_shards; i++) {
            if (p->shards) clef_st_close(p->shards[i]);
            if (p->shard_paths) free(p->shard_paths[i]);
        }
        free(p->shards);
        free(p->shard_paths);
        for (size_t i = 0; i < p->n_map; i++) free(p->map[i].name);
        free(p->map);
        clef_st_close(p->head);
        free(p->head_path);
        free(p->dir);
        free(p);
    }
    free_arrays(&m->text, &m->vision, &m->head);
    free(m);
}

static int report(const clef_model_open_opts *o, const char *stage, size_t done, size_t total, clef_err *err) {
    if (o && o->progress && o->progress(o->progress_user, stage, done, total))
        return clef_err_set(err, CLEF_E_INTERNAL, "model loading cancelled");
    return 0;
}

clef_model_files *clef_model_open_ex(const char *dir, const clef_model_open_opts *opts, clef_err *err) {
    clef_model_files *m = calloc(1, sizeof *m);
    char *path = NULL;
    unsigned char *head_used = NULL;
    if (!m || !(m->priv = calloc(1, sizeof *m->priv)) || !(m->priv->dir = strdup(dir))) {
        clef_err_set(err, CLEF_E_OOM, "out of memory opening %s", dir);
        goto fail;
    }
    clef_model_files_priv *p = m->priv;
#define PATH(name) do { free(path); path = join(dir, name); \
        if (!path) { clef_err_set(err, CLEF_E_OOM, "out of memory (or path too long) in %s", dir); goto fail; } } while (0)

    PATH("config.json");
    if (clef_config_load(&m->cfg, path, err)) goto fail;
    PATH("joint_head_config.json");
    if (clef_head_config_load(&m->head_cfg, path, err)) goto fail;
    if (clef_head_config_check(&m->head_cfg, &m->cfg, err)) {
        if (err) {
            char msg[sizeof err->msg];
            snprintf(msg, sizeof msg, "%s", err->msg);
            clef_err_set(err, CLEF_E_BAD_MODEL, "%s: %s", dir, msg);
        }
        goto fail;
    }

    PATH("model.safetensors.index.json");
    if (file_exists(path)) {
        if (read_index(p, path, err)) goto fail;
    } else {
        PATH("model.safetensors");
        if (!file_exists(path)) {
            clef_err_set(err, CLEF_E_BAD_MODEL, "%s: neither model.safetensors.index.json nor model.safetensors found",
                         dir);
            goto fail;
        }
        p->shards = calloc(1, sizeof *p->shards);
        p->shard_paths = calloc(1, sizeof *p->shard_paths);
        if (!p->shards || !p->shard_paths) {
            clef_err_set(err, CLEF_E_OOM, "out of memory opening %s", dir);
            goto fail;
        }
        p->n_shards = 1;
        p->shard_paths[0] = path;
        path = NULL;
    }
    size_t total_files = p->n_shards + 1;
    for (size_t i = 0; i < p->n_shards; i++) {
        if (report(opts, "open", i, total_files, err)) goto fail;
        if (!file_exists(p->shard_paths[i])) {
            clef_err_set(err, CLEF_E_BAD_MODEL, "%s: shard named by model.safetensors.index.json does not exist",
                         p->shard_paths[i]);
            goto fail;
        }
        p->shards[i] = clef_st_open(p->shard_paths[i], err);
        if (!p->shards[i]) goto fail;
        size_t sz;
        clef_st_bytes(p->shards[i], &sz);
        m->mapped_bytes += sz;
    }
    if (report(opts, "open", p->n_shards, total_files, err)) goto fail;
    PATH("joint_head.safetensors");
    p->head_path = path;
    path = NULL;
    p->head = clef_st_open(p->head_path, err);
    if (!p->head) goto fail;
    {
        size_t sz;
        clef_st_bytes(p->head, &sz);
        m->mapped_bytes += sz;
    }
    if (report(opts, "open", total_files, total_files, err)) goto fail;

    /* Vision: absent tensors = text-only use; present = all of them, strictly. */
    int with_vision = 0;
    if (m->cfg.vision.present && has_prefix(p, "model.visual.")) with_vision = 1;
    else if (opts && opts->require_vision) {
        clef_err_set(err, CLEF_E_BAD_MODEL, "%s: %s", dir,
                     m->cfg.vision.present ? "the checkpoint has no model.visual.* tensors (a text-only checkpoint)"
                                           : "config.json has no vision_config");
        goto fail;
    }
    if (alloc_arrays(&m->cfg, &m->head_cfg, with_vision, &m->text, &m->vision, &m->head, err)) goto fail;
    head_used = calloc(clef_st_count(p->head) + 1, 1);
    if (!head_used) {
        clef_err_set(err, CLEF_E_OOM, "out of memory binding the model weights");
        goto fail;
    }
    binder b = {.m = m, .err = err, .head_used = head_used};
    if (bind_text(&b, &m->cfg.text, &m->text)) goto fail;
    if (with_vision && bind_vision(&b, &m->cfg.vision, m->cfg.text.hidden_size, &m->vision)) goto fail;
    if (bind_head(&b, &m->head_cfg, &m->head)) goto fail;
    if (b.n_bound_head != clef_st_count(p->head)) {
        for (size_t i = 0; i < clef_st_count(p->head); i++)
            if (!head_used[i]) {
                clef_err_set(err, CLEF_E_BAD_MODEL,
                             "%s: unexpected tensor '%.200s' (the head is loaded strictly; joint_head_config.json "
                             "does not call for it)", p->head_path, clef_st_at(p->head, i)->name);
                goto fail;
            }
    }
    free(head_used);
    return m;
fail:
#undef PATH
    free(path);
    free(head_used);
    clef_model_close(m);
    return NULL;
}

clef_model_files *clef_model_open(const char *dir, clef_err *err) { return clef_model_open_ex(dir, NULL, err); }

int clef_model_prefetch(clef_model_files *m, clef_progress_fn progress, void *user, clef_err *err) {
    if (!m || !m->priv) return 0;
    clef_model_files_priv *p = m->priv;
    size_t bufsz = 4u << 20, done = 0, total = m->mapped_bytes;
    char *buf = malloc(bufsz);
    if (!buf) return clef_err_set(err, CLEF_E_OOM, "out of memory prefetching the model");
    int rc = 0;
    for (size_t i = 0; i <= p->n_shards && rc == 0; i++) {
        const char *path = i < p->n_shards ? p->shard_paths[i] : p->head_path;
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            rc = clef_err_set(err, CLEF_E_IO, "cannot open %s: %s", path, strerror(errno));
            break;
        }
        for (;;) {
            ssize_t r = read(fd, buf, bufsz);
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) {
                rc = clef_err_set(err, CLEF_E_IO, "cannot read %s: %s", path, strerror(errno));
                break;
            }
            if (r == 0) break;
            done += (size_t)r;
            if (progress && progress(user, "prefetch", done < total ? done : total, total)) {
                rc = clef_err_set(err, CLEF_E_INTERNAL, "model prefetch cancelled");
                break;
            }
        }
        close(fd);
    }
    free(buf);
    return rc;
}
