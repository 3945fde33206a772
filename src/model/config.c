#include "model/config.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mapfile.h"
#include "base/json.h"

#define CFG_MAX_FILE (16u * 1024u * 1024u)
#define DIM_MAX (1 << 24) /* generous bound on any single dimension */

typedef struct {
    const char *label;   /* file name for messages */
    const char *section; /* "text_config.", "vision_config." or "" */
    clef_err *err;
} cctx;

static int bad(cctx *c, const char *fmt, const char *key, const char *what) {
    return clef_err_set(c->err, CLEF_E_BAD_MODEL, fmt, c->label, c->section, key, what);
}

/* An integer key in [lo, hi]. Absent: -1 when required (error set), else *out = def. */
static int get_int(cctx *c, const json_value *obj, const char *key, int required, int def, long long lo,
                   long long hi, int *out) {
    const json_value *v = clef_json_object_get(obj, key);
    if (!v || v->kind == JSON_NULL) {
        if (required)
            return clef_err_set(c->err, CLEF_E_BAD_MODEL, "%s: %s%s is missing (a config this build cannot run)",
                                c->label, c->section, key);
        *out = def;
        return 0;
    }
    if (v->kind != JSON_INT)
        return clef_err_set(c->err, CLEF_E_BAD_MODEL, "%s: %s%s must be an integer", c->label, c->section, key);
    errno = 0;
    char *end = NULL;
    long long x = strtoll(v->u.integer.digits, &end, 10);
    if (errno || end != v->u.integer.digits + v->u.integer.len || x < lo || x > hi)
        return clef_err_set(c->err, CLEF_E_BAD_MODEL,
                            "%s: %s%s = %.40s is out of range [%lld, %lld] (a config this build cannot run)",
                            c->label, c->section, key, v->u.integer.digits, lo, hi);
    *out = (int)x;
    return 0;
}

/* A number key (int or float literal), finite. */
static int get_num(cctx *c, const json_value *obj, const char *key, int required, double def, double *out) {
    const json_value *v = clef_json_object_get(obj, key);
    if (!v || v->kind == JSON_NULL) {
        if (required)
            return clef_err_set(c->err, CLEF_E_BAD_MODEL, "%s: %s%s is missing (a config this build cannot run)",
                                c->label, c->section, key);
        *out = def;
        return 0;
    }
    double x;
    if (v->kind == JSON_INT) x = strtod(v->u.integer.digits, NULL);
    else if (v->kind == JSON_FLOAT) x = v->u.number;
    else return bad(c, "%s: %s%s must be a number%s", key, "");
    if (!isfinite(x)) return bad(c, "%s: %s%s must be finite%s", key, "");
    *out = x;
    return 0;
}

static int str_is(const json_value *v, const char *s) {
    return v && v->kind == JSON_STRING && v->u.string.len == strlen(s) && memcmp(v->u.string.s, s, v->u.string.len) == 0;
}

/* If present, the key must be the string `want`. */
static int check_str(cctx *c, const json_value *obj, const char *key, const char *want) {
    const json_value *v = clef_json_object_get(obj, key);
    if (!v || v->kind == JSON_NULL || str_is(v, want)) return 0;
    return clef_err_set(c->err, CLEF_E_BAD_MODEL, "%s: %s%s must be \"%s\" (a config this build cannot run)", c->label,
                        c->section, key, want);
}

/* If present, the key must be a boolean equal to `want`. */
static int check_bool(cctx *c, const json_value *obj, const char *key, int want) {
    const json_value *v = clef_json_object_get(obj, key);
    if (!v || v->kind == JSON_NULL) return 0;
    if ((v->kind == JSON_TRUE && want) || (v->kind == JSON_FALSE && !want)) return 0;
    return clef_err_set(c->err, CLEF_E_BAD_MODEL, "%s: %s%s must be %s (a config this build cannot run)", c->label,
                        c->section, key, want ? "true" : "false");
}

#define TRY(x) do { if ((x) != 0) return -1; } while (0)
#define FAIL(...) return clef_err_set(c->err, CLEF_E_BAD_MODEL, __VA_ARGS__)

static int parse_text(cctx *c, const json_value *t, clef_text_config *x) {
    TRY(check_str(c, t, "model_type", "qwen3_5_text"));
    TRY(get_int(c, t, "hidden_size", 1, 0, 1, DIM_MAX, &x->hidden_size));
    TRY(get_int(c, t, "num_hidden_layers", 1, 0, 1, CLEF_MAX_LAYERS, &x->num_hidden_layers));
    TRY(get_int(c, t, "vocab_size", 1, 0, 1, 1 << 26, &x->vocab_size));
    TRY(get_int(c, t, "intermediate_size", 1, 0, 1, DIM_MAX, &x->intermediate_size));
    TRY(get_int(c, t, "num_attention_heads", 1, 0, 1, 4096, &x->num_attention_heads));
    TRY(get_int(c, t, "num_key_value_heads", 1, 0, 1, 4096, &x->num_key_value_heads));
    TRY(get_int(c, t, "head_dim", 1, 0, 1, 65536, &x->head_dim));
    TRY(get_int(c, t, "linear_num_key_heads", 1, 0, 1, 4096, &x->linear_num_key_heads));
    TRY(get_int(c, t, "linear_num_value_heads", 1, 0, 1, 4096, &x->linear_num_value_heads));
    TRY(get_int(c, t, "linear_key_head_dim", 1, 0, 1, 65536, &x->linear_key_head_dim));
    TRY(get_int(c, t, "linear_value_head_dim", 1, 0, 1, 65536, &x->linear_value_head_dim));
    TRY(get_int(c, t, "linear_conv_kernel_dim", 1, 0, 1, 64, &x->linear_conv_kernel_dim));
    TRY(get_num(c, t, "rms_norm_eps", 1, 0, &x->rms_norm_eps));
    if (!(x->rms_norm_eps > 0 && x->rms_norm_eps < 1)) FAIL("%s: %srms_norm_eps must be in (0, 1)", c->label, c->section);
    TRY(check_str(c, t, "hidden_act", "silu"));
    TRY(check_bool(c, t, "attention_bias", 0));
    TRY(check_bool(c, t, "tie_word_embeddings", 0));
    const json_value *eos = clef_json_object_get(t, "eos_token_id");
    x->eos_token_id = -1;
    if (eos && eos->kind == JSON_INT) TRY(get_int(c, t, "eos_token_id", 0, -1, 0, x->vocab_size - 1, &x->eos_token_id));

    /* layer types */
    int L = x->num_hidden_layers;
    const json_value *lt = clef_json_object_get(t, "layer_types");
    if (lt && lt->kind != JSON_NULL) {
        if (lt->kind != JSON_ARRAY || lt->u.array.n != (size_t)L)
            FAIL("%s: %slayer_types must be a list of num_hidden_layers (%d) strings", c->label, c->section, L);
        for (int i = 0; i < L; i++) {
            const json_value *v = lt->u.array.items[i];
            if (str_is(v, "linear_attention")) x->layer_types[i] = CLEF_LAYER_LINEAR;
            else if (str_is(v, "full_attention")) x->layer_types[i] = CLEF_LAYER_FULL;
            else FAIL("%s: %slayer_types[%d] must be \"linear_attention\" or \"full_attention\"", c->label,
                      c->section, i);
        }
    } else {
        int interval;
        TRY(get_int(c, t, "full_attention_interval", 0, 4, 1, CLEF_MAX_LAYERS, &interval));
        for (int i = 0; i < L; i++) x->layer_types[i] = (i + 1) % interval == 0 ? CLEF_LAYER_FULL : CLEF_LAYER_LINEAR;
    }
    x->n_full_layers = x->n_linear_layers = 0;
    for (int i = 0; i < L; i++) {
        if (x->layer_types[i] == CLEF_LAYER_FULL) x->n_full_layers++;
        else x->n_linear_layers++;
    }

    /* rope: rope_parameters (transformers 5) or rope_scaling + top-level keys (older files) */
    const json_value *rp = clef_json_object_get(t, "rope_parameters");
    const char *saved = c->section;
    const json_value *rsrc = t;
    if (rp && rp->kind == JSON_OBJECT) {
        rsrc = rp;
        c->section = "text_config.rope_parameters.";
    } else if (rp && rp->kind != JSON_NULL) {
        FAIL("%s: %srope_parameters must be an object", c->label, c->section);
    }
    const json_value *rs = clef_json_object_get(t, "rope_scaling");
    if (rs && rs->kind != JSON_OBJECT) rs = NULL;
    TRY(check_str(c, rsrc, "rope_type", "default"));
    /* a key missing from rope_parameters may sit at the text_config level (older files) */
    TRY(get_num(c, clef_json_object_get(rsrc, "rope_theta") ? rsrc : t, "rope_theta", 1, 0, &x->rope_theta));
    TRY(get_num(c, clef_json_object_get(rsrc, "partial_rotary_factor") ? rsrc : t, "partial_rotary_factor", 1, 0,
                &x->partial_rotary_factor));
    const json_value *ms = clef_json_object_get(rsrc, "mrope_section");
    if ((!ms || ms->kind == JSON_NULL) && rs) ms = clef_json_object_get(rs, "mrope_section");
    if (!(x->rope_theta > 0)) FAIL("%s: %srope_theta must be positive", c->label, c->section);
    if (!(x->partial_rotary_factor > 0 && x->partial_rotary_factor <= 1))
        FAIL("%s: %spartial_rotary_factor must be in (0, 1]", c->label, c->section);
    x->rotary_dim = (int)(x->head_dim * x->partial_rotary_factor);
    if (x->rotary_dim <= 0 || x->rotary_dim % 2 || x->rotary_dim > x->head_dim)
        FAIL("%s: %shead_dim * partial_rotary_factor = %d must be a positive even number", c->label, c->section,
             x->rotary_dim);
    if (!ms || ms->kind != JSON_ARRAY || ms->u.array.n != 3)
        FAIL("%s: %smrope_section must be a list of 3 integers", c->label, c->section);
    int sum = 0;
    for (int i = 0; i < 3; i++) {
        const json_value *v = ms->u.array.items[i];
        long long s = v->kind == JSON_INT ? strtoll(v->u.integer.digits, NULL, 10) : -1;
        if (v->kind != JSON_INT || v->u.integer.len > 9 || s < 0)
            FAIL("%s: %smrope_section[%d] must be a non-negative integer", c->label, c->section, i);
        x->mrope_section[i] = (int)s;
        sum += (int)s;
    }
    if (sum != x->rotary_dim / 2)
        FAIL("%s: %smrope_section sums to %d, but rotary_dim / 2 = %d", c->label, c->section, sum, x->rotary_dim / 2);
    c->section = saved;

    /* divisibility and derived widths */
    if (x->num_attention_heads % x->num_key_value_heads)
        FAIL("%s: %snum_attention_heads (%d) must be a multiple of num_key_value_heads (%d)", c->label, c->section,
             x->num_attention_heads, x->num_key_value_heads);
    if (x->linear_num_value_heads % x->linear_num_key_heads)
        FAIL("%s: %slinear_num_value_heads (%d) must be a multiple of linear_num_key_heads (%d)", c->label,
             c->section, x->linear_num_value_heads, x->linear_num_key_heads);
    int64_t q = (int64_t)x->num_attention_heads * x->head_dim, kv = (int64_t)x->num_key_value_heads * x->head_dim;
    int64_t kd = (int64_t)x->linear_num_key_heads * x->linear_key_head_dim;
    int64_t vd = (int64_t)x->linear_num_value_heads * x->linear_value_head_dim;
    if (q > DIM_MAX || kd > DIM_MAX || vd > DIM_MAX)
        FAIL("%s: %sattention widths are too large for this build", c->label, c->section);
    x->q_dim = (int)q;
    x->kv_dim = (int)kv;
    x->linear_key_dim = (int)kd;
    x->linear_value_dim = (int)vd;
    x->linear_conv_dim = (int)(2 * kd + vd);
    return 0;
}

static int parse_vision(cctx *c, const json_value *v, clef_vision_config *x, int text_hidden) {
    x->present = 1;
    TRY(get_int(c, v, "depth", 1, 0, 1, CLEF_MAX_LAYERS, &x->depth));
    TRY(get_int(c, v, "hidden_size", 1, 0, 1, DIM_MAX, &x->hidden_size));
    TRY(get_int(c, v, "num_heads", 1, 0, 1, 4096, &x->num_heads));
    TRY(get_int(c, v, "intermediate_size", 1, 0, 1, DIM_MAX, &x->intermediate_size));
    TRY(get_int(c, v, "patch_size", 1, 0, 1, 1024, &x->patch_size));
    TRY(get_int(c, v, "temporal_patch_size", 1, 0, 1, 64, &x->temporal_patch_size));
    TRY(get_int(c, v, "spatial_merge_size", 1, 0, 1, 64, &x->spatial_merge_size));
    TRY(get_int(c, v, "out_hidden_size", 1, 0, 1, DIM_MAX, &x->out_hidden_size));
    TRY(get_int(c, v, "num_position_embeddings", 1, 0, 1, 1 << 22, &x->num_position_embeddings));
    TRY(get_int(c, v, "in_channels", 1, 0, 1, 64, &x->in_channels));
    TRY(check_str(c, v, "hidden_act", "gelu_pytorch_tanh"));
    const json_value *ds = clef_json_object_get(v, "deepstack_visual_indexes");
    if (ds && ds->kind == JSON_ARRAY && ds->u.array.n)
        FAIL("%s: %sdeepstack_visual_indexes must be empty (Qwen3.5 has no DeepStack)", c->label, c->section);
    if (x->hidden_size % x->num_heads)
        FAIL("%s: %shidden_size (%d) must be a multiple of num_heads (%d)", c->label, c->section, x->hidden_size,
             x->num_heads);
    x->head_dim = x->hidden_size / x->num_heads;
    if (x->head_dim % 4)
        FAIL("%s: %shead_dim (hidden_size / num_heads = %d) must be a multiple of 4 for the 2-D rotary", c->label,
             c->section, x->head_dim);
    int side = (int)llround(sqrt((double)x->num_position_embeddings));
    if (side * side != x->num_position_embeddings)
        FAIL("%s: %snum_position_embeddings (%d) must be a square grid", c->label, c->section,
             x->num_position_embeddings);
    x->num_grid_per_side = side;
    if (x->out_hidden_size != text_hidden)
        FAIL("%s: %sout_hidden_size (%d) must equal text_config.hidden_size (%d)", c->label, c->section,
             x->out_hidden_size, text_hidden);
    int64_t pd = (int64_t)x->in_channels * x->temporal_patch_size * x->patch_size * x->patch_size;
    int64_t md = (int64_t)x->hidden_size * x->spatial_merge_size * x->spatial_merge_size;
    if (pd > DIM_MAX || md > DIM_MAX) FAIL("%s: %spatch or merger width too large for this build", c->label, c->section);
    x->patch_dim = (int)pd;
    x->merged_dim = (int)md;
    x->layer_norm_eps = 1e-6;
    x->rope_theta = 10000.0;
    const json_value *rp = clef_json_object_get(v, "rope_parameters");
    if (rp && rp->kind == JSON_OBJECT) {
        const char *saved = c->section;
        c->section = "vision_config.rope_parameters.";
        TRY(get_num(c, rp, "rope_theta", 0, 10000.0, &x->rope_theta));
        if (!(x->rope_theta > 0)) FAIL("%s: %srope_theta must be positive", c->label, c->section);
        c->section = saved;
    }
    return 0;
}

/* Parses a config file's text with our size and depth limits; NULL with c->err set (BadModel naming
 * the file, or OutOfMemory). */
static json_doc *parse_doc(cctx *c, const char *text, size_t len, int max_depth) {
    if (len > CFG_MAX_FILE) {
        clef_err_set(c->err, CLEF_E_BAD_MODEL, "%s: file is too large (%zu bytes)", c->label, len);
        return NULL;
    }
    json_limits lim = {.max_bytes = CFG_MAX_FILE, .max_depth = max_depth};
    clef_err jerr = {0};
    json_doc *doc = clef_json_parse(text, len, &lim, &jerr);
    if (!doc) {
        if (jerr.type && strcmp(jerr.type, CLEF_E_OOM) == 0) clef_err_set(c->err, CLEF_E_OOM, "%s", jerr.msg);
        else clef_err_set(c->err, CLEF_E_BAD_MODEL, "%s: not valid JSON: %s", c->label, jerr.msg);
    }
    return doc;
}

int clef_config_parse(clef_config *cfg, const char *text, size_t len, const char *label, clef_err *err) {
    memset(cfg, 0, sizeof *cfg);
    cctx cc = {label ? label : "config.json", "", err}, *c = &cc;
    json_doc *doc = parse_doc(c, text, len, 32);
    if (!doc) return -1;
    int rc = -1;
    const json_value *root = clef_json_doc_root(doc);
    if (!root || root->kind != JSON_OBJECT) {
        clef_err_set(err, CLEF_E_BAD_MODEL, "%s: not a JSON object", c->label);
        goto out;
    }
    const json_value *tc = clef_json_object_get(root, "text_config");
    const json_value *vc = clef_json_object_get(root, "vision_config");
    if (tc && tc->kind != JSON_NULL) {
        if (tc->kind != JSON_OBJECT) {
            clef_err_set(err, CLEF_E_BAD_MODEL, "%s: text_config is not an object", c->label);
            goto out;
        }
        const json_value *mt = clef_json_object_get(root, "model_type");
        if (mt && !str_is(mt, "qwen3_5")) {
            clef_err_set(err, CLEF_E_BAD_MODEL,
                         "%s: model_type \"%.60s\" is not \"qwen3_5\" (this build runs Qwen3.5 dense models only)",
                         c->label, mt->kind == JSON_STRING ? mt->u.string.s : "(not a string)");
            goto out;
        }
        const json_value *ar = clef_json_object_get(root, "architectures");
        if (ar && ar->kind != JSON_NULL) {
            int ok = 0;
            if (ar->kind == JSON_ARRAY)
                for (size_t i = 0; i < ar->u.array.n; i++)
                    if (str_is(ar->u.array.items[i], "Qwen3_5ForConditionalGeneration")) ok = 1;
            if (!ok) {
                clef_err_set(err, CLEF_E_BAD_MODEL,
                             "%s: architectures does not list Qwen3_5ForConditionalGeneration", c->label);
                goto out;
            }
        }
        cc.section = "text_config.";
        if (parse_text(c, tc, &cfg->text)) goto out;
    } else {
        /* a bare text config (model_type qwen3_5_text at the top level) */
        if (!str_is(clef_json_object_get(root, "model_type"), "qwen3_5_text")) {
            clef_err_set(err, CLEF_E_BAD_MODEL,
                         "%s: no text_config and model_type is not \"qwen3_5_text\" (this build runs Qwen3.5 only)",
                         c->label);
            goto out;
        }
        if (parse_text(c, root, &cfg->text)) goto out;
    }
    if (vc && vc->kind != JSON_NULL) {
        if (vc->kind != JSON_OBJECT) {
            clef_err_set(err, CLEF_E_BAD_MODEL, "%s: vision_config is not an object", c->label);
            goto out;
        }
        cc.section = "vision_config.";
        if (parse_vision(c, vc, &cfg->vision, cfg->text.hidden_size)) goto out;
    }
    cc.section = "";
    int V = cfg->text.vocab_size;
    if (get_int(c, root, "image_token_id", 0, -1, 0, V - 1, &cfg->image_token_id) ||
        get_int(c, root, "video_token_id", 0, -1, 0, V - 1, &cfg->video_token_id) ||
        get_int(c, root, "vision_start_token_id", 0, -1, 0, V - 1, &cfg->vision_start_token_id) ||
        get_int(c, root, "vision_end_token_id", 0, -1, 0, V - 1, &cfg->vision_end_token_id))
        goto out;
    if (cfg->vision.present && (cfg->image_token_id < 0 || cfg->vision_start_token_id < 0 ||
                                cfg->vision_end_token_id < 0)) {
        clef_err_set(err, CLEF_E_BAD_MODEL,
                     "%s: a vision_config needs image_token_id, vision_start_token_id and vision_end_token_id",
                     c->label);
        goto out;
    }
    rc = 0;
out:
    clef_json_doc_free(doc);
    return rc;
}

static int load_file(const char *path, int (*parse)(void *, const char *, size_t, const char *, clef_err *),
                     void *dst, clef_err *err) {
    clef_mapfile m;
    if (clef_mapfile_open(&m, path, err)) return -1;
    int rc;
    if (m.size > CFG_MAX_FILE) rc = clef_err_set(err, CLEF_E_BAD_MODEL, "%s: file is too large", path);
    else rc = parse(dst, m.data ? (const char *)m.data : "", m.size, path, err);
    clef_mapfile_close(&m);
    return rc;
}

static int parse_cfg_v(void *d, const char *s, size_t n, const char *l, clef_err *e) {
    return clef_config_parse(d, s, n, l, e);
}
static int parse_head_v(void *d, const char *s, size_t n, const char *l, clef_err *e) {
    return clef_head_config_parse(d, s, n, l, e);
}

int clef_config_load(clef_config *c, const char *path, clef_err *err) { return load_file(path, parse_cfg_v, c, err); }

int clef_head_config_load(clef_head_config *h, const char *path, clef_err *err) {
    return load_file(path, parse_head_v, h, err);
}

int clef_head_config_parse(clef_head_config *h, const char *text, size_t len, const char *label, clef_err *err) {
    memset(h, 0, sizeof *h);
    cctx cc = {label ? label : "joint_head_config.json", "", err}, *c = &cc;
    json_doc *doc = parse_doc(c, text, len, 8);
    if (!doc) return -1;
    int rc = -1;
    const json_value *r = clef_json_doc_root(doc);
    static const char *const keys[] = {"hidden_size", "width", "routing_layers", "layers", "heads", "feedforward",
                                       "dropout"};
    if (!r || r->kind != JSON_OBJECT) {
        clef_err_set(err, CLEF_E_BAD_MODEL, "%s: not a JSON object", c->label);
        goto out;
    }
    /* The reference calls JointSchemaHead(**config): any other key is a TypeError there. */
    for (size_t i = 0; i < r->u.object.n; i++) {
        int known = 0;
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
            if (r->u.object.members[i].key_len == strlen(keys[k]) &&
                memcmp(r->u.object.members[i].key, keys[k], strlen(keys[k])) == 0)
                known = 1;
        if (!known) {
            clef_err_set(err, CLEF_E_BAD_MODEL, "%s: unexpected key \"%.60s\" (JointSchemaHead takes hidden_size, "
                         "width, routing_layers, layers, heads, feedforward, dropout)", c->label,
                         r->u.object.members[i].key);
            goto out;
        }
    }
    if (get_int(c, r, "hidden_size", 1, 0, 1, DIM_MAX, &h->hidden_size) ||
        get_int(c, r, "width", 1, 0, 1, DIM_MAX, &h->width) ||
        get_int(c, r, "routing_layers", 1, 0, 1, 256, &h->routing_layers) ||
        get_int(c, r, "layers", 1, 0, 1, 256, &h->layers) || get_int(c, r, "heads", 1, 0, 1, 4096, &h->heads) ||
        get_int(c, r, "feedforward", 1, 0, 1, DIM_MAX, &h->feedforward) ||
        get_num(c, r, "dropout", 0, 0.0, &h->dropout))
        goto out;
    if (h->width % h->heads) {
        clef_err_set(err, CLEF_E_BAD_MODEL, "%s: width (%d) must be a multiple of heads (%d)", c->label, h->width,
                     h->heads);
        goto out;
    }
    if (!(h->dropout >= 0 && h->dropout < 1)) {
        clef_err_set(err, CLEF_E_BAD_MODEL, "%s: dropout must be in [0, 1)", c->label);
        goto out;
    }
    h->head_dim = h->width / h->heads;
    rc = 0;
out:
    clef_json_doc_free(doc);
    return rc;
}

int clef_head_config_check(const clef_head_config *h, const clef_config *c, clef_err *err) {
    if (h->hidden_size != c->text.hidden_size)
        return clef_err_set(err, CLEF_E_BAD_MODEL,
                            "joint_head_config.json: hidden_size (%d) does not match the backbone hidden_size (%d)",
                            h->hidden_size, c->text.hidden_size);
    return 0;
}
