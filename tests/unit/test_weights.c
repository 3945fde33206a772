/* config.json / joint_head_config.json validation and weights binding. Synthetic checkpoints in the
 * release layout (sharded + index, or one model.safetensors) are written from C into a temp dir from
 * clef_weights_expected(), with shapes also checked here against hand-written expectations; then
 * missing / wrong-dtype / wrong-shape tensors, bad index files and bad configs are refused with
 * messages naming the culprit. When models/tiny exists (make tiny) it is loaded too. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "model/config.h"
#include "model/weights.h"

static char tmpdir[256];
static int case_no;

/* ---------------------------------------------------------------- synthetic configs */

static const char *BASE_CONFIG =
    "{\n"
    "  \"architectures\": [\"Qwen3_5ForConditionalGeneration\"], \"model_type\": \"qwen3_5\",\n"
    "  \"image_token_id\": 40, \"video_token_id\": 41, \"vision_start_token_id\": 42, \"vision_end_token_id\": 43,\n"
    "  \"tie_word_embeddings\": false,\n"
    "  \"text_config\": {\n"
    "    \"model_type\": \"qwen3_5_text\", \"hidden_size\": 32, \"num_hidden_layers\": 4,\n"
    "    \"layer_types\": [\"linear_attention\", \"linear_attention\", \"linear_attention\", \"full_attention\"],\n"
    "    \"full_attention_interval\": 4, \"vocab_size\": 50, \"intermediate_size\": 48,\n"
    "    \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 8,\n"
    "    \"linear_num_key_heads\": 2, \"linear_num_value_heads\": 4, \"linear_key_head_dim\": 8,\n"
    "    \"linear_value_head_dim\": 6, \"linear_conv_kernel_dim\": 4, \"rms_norm_eps\": 1e-06,\n"
    "    \"hidden_act\": \"silu\", \"attention_bias\": false, \"eos_token_id\": 44,\n"
    "    \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 10000000, \"partial_rotary_factor\": 0.5,\n"
    "                        \"mrope_section\": [1, 1, 0], \"mrope_interleaved\": true}\n"
    "  },\n"
    "  \"vision_config\": {\n"
    "    \"model_type\": \"qwen3_5_vision\", \"depth\": 2, \"hidden_size\": 24, \"num_heads\": 2,\n"
    "    \"intermediate_size\": 40, \"patch_size\": 4, \"temporal_patch_size\": 2, \"spatial_merge_size\": 2,\n"
    "    \"out_hidden_size\": 32, \"num_position_embeddings\": 16, \"in_channels\": 3,\n"
    "    \"hidden_act\": \"gelu_pytorch_tanh\", \"deepstack_visual_indexes\": []\n"
    "  }\n"
    "}\n";

static const char *BASE_HEAD =
    "{\"hidden_size\": 32, \"width\": 16, \"routing_layers\": 2, \"layers\": 2, \"heads\": 4, \"feedforward\": 24, "
    "\"dropout\": 0.0}";

/* Replaces the first occurrence of `from` (must exist) by `to`; returns a malloc'd string. */
static char *subst(const char *s, const char *from, const char *to) {
    const char *at = strstr(s, from);
    if (!at) {
        fprintf(stderr, "subst: '%s' not found\n", from);
        exit(2);
    }
    size_t a = (size_t)(at - s), fl = strlen(from), tl = strlen(to), n = strlen(s);
    char *r = malloc(n - fl + tl + 1);
    memcpy(r, s, a);
    memcpy(r + a, to, tl);
    memcpy(r + a + tl, at + fl, n - a - fl + 1);
    return r;
}

/* ---------------------------------------------------------------- expected tensor list */

typedef struct spec {
    int file;
    char name[200];
    int dtype, ndim;
    int64_t shape[CLEF_MAX_DIMS];
} spec;

static spec specs[4096];
static size_t n_specs;

static int collect(void *user, int file, const char *name, int dtype, int ndim, const int64_t *shape) {
    (void)user;
    if (n_specs >= sizeof specs / sizeof specs[0]) return 1;
    spec *s = &specs[n_specs++];
    memset(s, 0, sizeof *s);
    s->file = file;
    snprintf(s->name, sizeof s->name, "%s", name);
    s->dtype = dtype;
    s->ndim = ndim;
    for (int i = 0; i < ndim; i++) s->shape[i] = shape[i];
    return 0;
}

static const spec *spec_find(const char *name) {
    for (size_t i = 0; i < n_specs; i++)
        if (strcmp(specs[i].name, name) == 0) return &specs[i];
    return NULL;
}

/* ---------------------------------------------------------------- writing checkpoints */

typedef struct mut {
    const char *skip;           /* leave this tensor out */
    const char *skip_prefix;    /* leave out every tensor starting with this */
    const char *dtype_of;       /* write this tensor with new_dtype */
    int new_dtype;
    const char *shape_of;       /* write this tensor with new_shape */
    int new_ndim;
    int64_t new_shape[CLEF_MAX_DIMS];
    const char *head_extra;     /* an extra tensor in joint_head.safetensors */
    int single_file;            /* model.safetensors instead of shards + index */
    const char *index_json;     /* written as the index instead of the real one */
    const char *bad_shard_for;  /* the index maps this tensor to the other shard */
    int unaligned;              /* odd header length: BF16 data at odd addresses */
    const char *config;         /* config.json text (default BASE_CONFIG) */
    const char *head_config;    /* joint_head_config.json text (default BASE_HEAD) */
} mut;

static int write_text(const char *dir, const char *name, const char *text) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs(text, f);
    fclose(f);
    return 0;
}

typedef struct wt {
    const char *name;
    int dtype, ndim;
    const int64_t *shape;
} wt;

/* Element k of every tensor: BF16 / F32 value (k % 13) - 6 + (tensor ordinal) / 8 ... exact in both. */
static float value_of(size_t ordinal, int64_t k) { return (float)((k % 13) - 6) + (float)(ordinal % 8) * 0.125f; }

static int write_st(const char *dir, const char *fname, const wt *ts, size_t n, int unaligned) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, fname);
    size_t cap = 256 + n * 320, len = 0;
    char *h = malloc(cap);
    len += (size_t)snprintf(h + len, cap - len, "{\"__metadata__\":{\"format\":\"pt\"}");
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t numel = 1;
        for (int d = 0; d < ts[i].ndim; d++) numel *= ts[i].shape[d];
        uint64_t nb = (uint64_t)numel * (ts[i].dtype == CLEF_ST_F32 ? 4 : 2);
        len += (size_t)snprintf(h + len, cap - len, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", ts[i].name,
                                clef_dtype_name(ts[i].dtype));
        for (int d = 0; d < ts[i].ndim; d++)
            len += (size_t)snprintf(h + len, cap - len, "%s%lld", d ? "," : "", (long long)ts[i].shape[d]);
        len += (size_t)snprintf(h + len, cap - len, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                                (unsigned long long)(off + nb));
        off += nb;
    }
    len += (size_t)snprintf(h + len, cap - len, "}");
    if (unaligned) {
        if (len % 2 == 0) h[len++] = ' ';
    } else {
        while (len % 8) h[len++] = ' ';
    }
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    unsigned char l8[8];
    for (int i = 0; i < 8; i++) l8[i] = (unsigned char)((uint64_t)len >> (8 * i));
    fwrite(l8, 1, 8, f);
    fwrite(h, 1, len, f);
    for (size_t i = 0; i < n; i++) {
        int64_t numel = 1;
        for (int d = 0; d < ts[i].ndim; d++) numel *= ts[i].shape[d];
        for (int64_t k = 0; k < numel; k++) {
            float v = value_of(i, k);
            if (ts[i].dtype == CLEF_ST_F32) {
                fwrite(&v, 4, 1, f);
            } else {
                uint32_t u;
                memcpy(&u, &v, 4);
                uint16_t b = (uint16_t)(u >> 16); /* exact: the values have few mantissa bits */
                fwrite(&b, 2, 1, f);
            }
        }
    }
    fclose(f);
    free(h);
    return 0;
}

/* Writes a model folder for case `tag` and returns its path (static buffer). */
static const char *make_model(const char *tag, const mut *m) {
    static char dir[512];
    snprintf(dir, sizeof dir, "%s/%02d-%s", tmpdir, ++case_no, tag);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    if (system(cmd) != 0) exit(2);
    write_text(dir, "config.json", m->config ? m->config : BASE_CONFIG);
    write_text(dir, "joint_head_config.json", m->head_config ? m->head_config : BASE_HEAD);
    static wt shard[2][4096], head[4096];
    size_t ns[2] = {0, 0}, nh = 0;
    static int64_t mshape[CLEF_MAX_DIMS];
    static const int64_t mtp_shape[2] = {32, 64};
    for (size_t i = 0; i < n_specs; i++) {
        const spec *s = &specs[i];
        if (m->skip && strcmp(s->name, m->skip) == 0) continue;
        if (m->skip_prefix && strncmp(s->name, m->skip_prefix, strlen(m->skip_prefix)) == 0) continue;
        wt w = {s->name, s->dtype, s->ndim, s->shape};
        if (m->dtype_of && strcmp(s->name, m->dtype_of) == 0) w.dtype = m->new_dtype;
        if (m->shape_of && strcmp(s->name, m->shape_of) == 0) {
            memcpy(mshape, m->new_shape, sizeof mshape);
            w.ndim = m->new_ndim;
            w.shape = mshape;
        }
        if (s->file == 1) head[nh++] = w;
        else if (m->single_file) shard[0][ns[0]++] = w;
        else shard[i % 2][ns[i % 2]++] = w;
    }
    if (m->head_extra) head[nh++] = (wt){m->head_extra, CLEF_ST_BF16, 1, mtp_shape};
    shard[1][ns[1]++] = (wt){"mtp.fc.weight", CLEF_ST_BF16, 2, mtp_shape}; /* ignored by the loader */
    if (m->single_file) {
        shard[0][ns[0]++] = shard[1][0];
        write_st(dir, "model.safetensors", shard[0], ns[0], m->unaligned);
    } else {
        write_st(dir, "model-00001-of-00002.safetensors", shard[0], ns[0], m->unaligned);
        write_st(dir, "model-00002-of-00002.safetensors", shard[1], ns[1], m->unaligned);
        if (m->index_json) {
            write_text(dir, "model.safetensors.index.json", m->index_json);
        } else {
            size_t cap = 64 + (ns[0] + ns[1]) * 300, len = 0;
            char *ix = malloc(cap);
            len += (size_t)snprintf(ix + len, cap - len, "{\"metadata\":{\"total_size\":0},\"weight_map\":{");
            int first = 1;
            for (int k = 0; k < 2; k++)
                for (size_t i = 0; i < ns[k]; i++) {
                    int sh = k;
                    if (m->bad_shard_for && strcmp(shard[k][i].name, m->bad_shard_for) == 0) sh = 1 - k;
                    len += (size_t)snprintf(ix + len, cap - len, "%s\"%s\":\"model-0000%d-of-00002.safetensors\"",
                                            first ? "" : ",", shard[k][i].name, sh + 1);
                    first = 0;
                }
            snprintf(ix + len, cap - len, "}}");
            write_text(dir, "model.safetensors.index.json", ix);
            free(ix);
        }
    }
    write_st(dir, "joint_head.safetensors", head, nh, m->unaligned);
    return dir;
}

/* ---------------------------------------------------------------- helpers */

static int shape_is(const clef_tensor *t, int ndim, int64_t a, int64_t b, int64_t c) {
    if (t->ndim != ndim) return 0;
    int64_t e[3] = {a, b, c};
    for (int i = 0; i < ndim && i < 3; i++)
        if (t->shape[i] != e[i]) return 0;
    return 1;
}

static float bf16_at(const clef_tensor *t, int64_t k) {
    uint16_t b;
    memcpy(&b, (const char *)t->data + 2 * k, 2);
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static float f32_at(const clef_tensor *t, int64_t k) {
    float f;
    memcpy(&f, (const char *)t->data + 4 * k, 4);
    return f;
}

static void refuse_model(const char *what, const char *dir, const char *n1, const char *n2) {
    clef_err err = {0};
    clef_model_files *m = clef_model_open(dir, &err);
    CHECK_MSG(m == NULL, "%s: accepted", what);
    clef_model_close(m);
    CHECK_MSG(err.type && strcmp(err.type, CLEF_E_BAD_MODEL) == 0, "%s: type %s (%s)", what,
              err.type ? err.type : "(none)", err.msg);
    if (n1) CHECK_MSG(strstr(err.msg, n1) != NULL, "%s: message lacks '%s': %s", what, n1, err.msg);
    if (n2) CHECK_MSG(strstr(err.msg, n2) != NULL, "%s: message lacks '%s': %s", what, n2, err.msg);
    const char *shown = strstr(err.msg, "clef_test_w_");
    printf("  refused %-30s %s\n", what, shown ? shown + 19 : err.msg);
}

static void refuse_config(const char *what, const char *text, const char *n1) {
    clef_config c;
    clef_err err = {0};
    int rc = clef_config_parse(&c, text, strlen(text), "config.json", &err);
    CHECK_MSG(rc == -1, "%s: accepted", what);
    CHECK_MSG(err.type && strcmp(err.type, CLEF_E_BAD_MODEL) == 0, "%s: type %s", what, err.type ? err.type : "-");
    if (n1) CHECK_MSG(strstr(err.msg, n1) != NULL, "%s: message lacks '%s': %s", what, n1, err.msg);
    printf("  refused %-30s %s\n", what, err.msg);
}

static void refuse_head_config(const char *what, const char *text, const char *n1) {
    clef_head_config h;
    clef_err err = {0};
    int rc = clef_head_config_parse(&h, text, strlen(text), "joint_head_config.json", &err);
    CHECK_MSG(rc == -1, "%s: accepted", what);
    CHECK_MSG(err.type && strcmp(err.type, CLEF_E_BAD_MODEL) == 0, "%s: type %s", what, err.type ? err.type : "-");
    if (n1) CHECK_MSG(strstr(err.msg, n1) != NULL, "%s: message lacks '%s': %s", what, n1, err.msg);
    printf("  refused %-30s %s\n", what, err.msg);
}

/* ---------------------------------------------------------------- tests */

static clef_config base_cfg;
static clef_head_config base_head;

static void test_configs(void) {
    clef_err err = {0};
    CHECK_MSG(clef_config_parse(&base_cfg, BASE_CONFIG, strlen(BASE_CONFIG), "config.json", &err) == 0, "%s", err.msg);
    CHECK_MSG(clef_head_config_parse(&base_head, BASE_HEAD, strlen(BASE_HEAD), "h", &err) == 0, "%s", err.msg);
    const clef_text_config *t = &base_cfg.text;
    CHECK(t->hidden_size == 32 && t->num_hidden_layers == 4 && t->vocab_size == 50 && t->intermediate_size == 48);
    CHECK(t->layer_types[0] == CLEF_LAYER_LINEAR && t->layer_types[3] == CLEF_LAYER_FULL);
    CHECK(t->n_full_layers == 1 && t->n_linear_layers == 3);
    CHECK(t->q_dim == 32 && t->kv_dim == 16 && t->rotary_dim == 4);
    CHECK(t->linear_key_dim == 16 && t->linear_value_dim == 24 && t->linear_conv_dim == 56);
    CHECK(t->mrope_section[0] == 1 && t->mrope_section[1] == 1 && t->mrope_section[2] == 0);
    CHECK(t->rms_norm_eps == 1e-6 && t->rope_theta == 1e7 && t->partial_rotary_factor == 0.5);
    CHECK(t->eos_token_id == 44);
    const clef_vision_config *v = &base_cfg.vision;
    CHECK(v->present && v->depth == 2 && v->hidden_size == 24 && v->head_dim == 12 && v->num_grid_per_side == 4);
    CHECK(v->patch_dim == 3 * 2 * 4 * 4 && v->merged_dim == 96 && v->rope_theta == 10000.0);
    CHECK(base_cfg.image_token_id == 40 && base_cfg.vision_end_token_id == 43);
    CHECK(base_head.width == 16 && base_head.head_dim == 4 && base_head.routing_layers == 2 && base_head.feedforward == 24);

    /* layer_types derived from full_attention_interval when absent */
    char *c1 = subst(BASE_CONFIG,
                     "\"layer_types\": [\"linear_attention\", \"linear_attention\", \"linear_attention\", \"full_attention\"],",
                     "");
    char *c2 = subst(c1, "\"full_attention_interval\": 4", "\"full_attention_interval\": 2");
    clef_config c;
    CHECK_MSG(clef_config_parse(&c, c2, strlen(c2), "config.json", &err) == 0, "%s", err.msg);
    CHECK(c.text.layer_types[0] == CLEF_LAYER_LINEAR && c.text.layer_types[1] == CLEF_LAYER_FULL &&
          c.text.layer_types[3] == CLEF_LAYER_FULL && c.text.n_full_layers == 2);
    free(c1);
    free(c2);

    struct { const char *what, *from, *to, *needle; } bad[] = {
        {"model_type qwen3_next", "\"model_type\": \"qwen3_5\",", "\"model_type\": \"qwen3_next\",", "model_type"},
        {"architectures", "Qwen3_5ForConditionalGeneration", "LlamaForCausalLM", "architectures"},
        {"missing hidden_size", "\"hidden_size\": 32, \"num_hidden_layers\"", "\"num_hidden_layers\"", "hidden_size"},
        {"zero hidden_size", "\"hidden_size\": 32, \"num", "\"hidden_size\": 0, \"num", "hidden_size"},
        {"negative vocab", "\"vocab_size\": 50", "\"vocab_size\": -50", "vocab_size"},
        {"float head_dim", "\"head_dim\": 8", "\"head_dim\": 8.0", "head_dim"},
        {"string layers", "\"num_hidden_layers\": 4", "\"num_hidden_layers\": \"4\"", "num_hidden_layers"},
        {"heads % kv_heads", "\"num_key_value_heads\": 2", "\"num_key_value_heads\": 3", "num_key_value_heads"},
        {"v heads % k heads", "\"linear_num_value_heads\": 4", "\"linear_num_value_heads\": 5", "linear_num_key_heads"},
        {"mrope sum", "[1, 1, 0]", "[1, 1, 1]", "mrope_section"},
        {"mrope length", "[1, 1, 0]", "[1, 1]", "mrope_section"},
        {"odd rotary dim", "\"partial_rotary_factor\": 0.5", "\"partial_rotary_factor\": 0.125", "partial_rotary_factor"},
        {"rope_type yarn", "\"rope_type\": \"default\"", "\"rope_type\": \"yarn\"", "rope_type"},
        {"rms eps zero", "\"rms_norm_eps\": 1e-06", "\"rms_norm_eps\": 0", "rms_norm_eps"},
        {"layer_types length", "\"full_attention\"]", "\"full_attention\", \"full_attention\"]", "layer_types"},
        {"layer_types value", "\"full_attention\"]", "\"sliding_attention\"]", "layer_types[3]"},
        {"hidden_act", "\"silu\"", "\"gelu\"", "hidden_act"},
        {"tied embeddings", "\"attention_bias\": false", "\"attention_bias\": false, \"tie_word_embeddings\": true",
         "tie_word_embeddings"},
        {"vision out_hidden", "\"out_hidden_size\": 32", "\"out_hidden_size\": 33", "out_hidden_size"},
        {"vision heads", "\"num_heads\": 2", "\"num_heads\": 5", "num_heads"},
        {"vision head_dim % 4", "\"num_heads\": 2", "\"num_heads\": 4", "multiple of 4"},
        {"vision pos grid", "\"num_position_embeddings\": 16", "\"num_position_embeddings\": 15", "square"},
        {"vision missing depth", "\"depth\": 2,", "", "depth"},
        {"deepstack", "\"deepstack_visual_indexes\": []", "\"deepstack_visual_indexes\": [1]", "deepstack"},
        {"image token >= vocab", "\"image_token_id\": 40", "\"image_token_id\": 50", "image_token_id"},
        {"huge layers", "\"num_hidden_layers\": 4", "\"num_hidden_layers\": 4000000000000", "num_hidden_layers"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *s = subst(BASE_CONFIG, bad[i].from, bad[i].to);
        refuse_config(bad[i].what, s, bad[i].needle);
        free(s);
    }
    refuse_config("garbage config", "{\"text_config\": ", "not valid JSON");
    refuse_config("config not an object", "[]", "not a JSON object");

    struct { const char *what, *from, *to, *needle; } badh[] = {
        {"head unknown key", "\"dropout\": 0.0", "\"dropout\": 0.0, \"bias\": true", "unexpected key"},
        {"head width % heads", "\"heads\": 4", "\"heads\": 5", "multiple of heads"},
        {"head missing width", "\"width\": 16, ", "", "width"},
        {"head zero layers", "\"layers\": 2", "\"layers\": 0", "layers"},
        {"head dropout 1", "\"dropout\": 0.0", "\"dropout\": 1.5", "dropout"},
    };
    for (size_t i = 0; i < sizeof badh / sizeof badh[0]; i++) {
        char *s = subst(BASE_HEAD, badh[i].from, badh[i].to);
        refuse_head_config(badh[i].what, s, badh[i].needle);
        free(s);
    }
    clef_head_config h2 = base_head;
    h2.hidden_size = 64;
    CHECK(clef_head_config_check(&h2, &base_cfg, &err) == -1 && strstr(err.msg, "hidden_size"));
}

static void test_expected(void) {
    n_specs = 0;
    CHECK(clef_weights_expected(&base_cfg, &base_head, 1, collect, NULL) == 0);
    size_t nb = 0, nh = 0;
    for (size_t i = 0; i < n_specs; i++) *(specs[i].file ? &nh : &nb) += 1;
    /* text: 3 + 3 linear layers x (5 + 9) + 1 full x (5 + 6) = 56; vision: 3 + 2 x 12 + 6 = 33 */
    CHECK_MSG(nb == 56 + 33, "%zu backbone tensors", nb);
    /* head: 9 + routing 2 x 14 + 6 + layers 2 x 18 + 4 + 3 (122 with the release's 2 / 4 layers) */
    CHECK_MSG(nh == 9 + 28 + 6 + 36 + 4 + 3, "%zu head tensors", nh);
    clef_head_config rel = base_head;
    rel.layers = 4;
    n_specs = 0;
    CHECK(clef_weights_expected(&base_cfg, &rel, 0, collect, NULL) == 0);
    nh = 0;
    for (size_t i = 0; i < n_specs; i++) nh += specs[i].file == 1;
    CHECK_MSG(nh == 122, "release head: %zu tensors", nh);
    n_specs = 0;
    CHECK(clef_weights_expected(&base_cfg, &base_head, 1, collect, NULL) == 0);

    /* hand-written expectations (model.md §3.1, contract.md §6.2) for a few tensors */
    const spec *s;
    s = spec_find("model.language_model.layers.3.self_attn.q_proj.weight");
    CHECK(s && s->ndim == 2 && s->shape[0] == 2 * 4 * 8 && s->shape[1] == 32 && s->dtype == CLEF_ST_BF16);
    s = spec_find("model.language_model.layers.3.self_attn.k_proj.weight");
    CHECK(s && s->shape[0] == 16 && s->shape[1] == 32);
    s = spec_find("model.language_model.layers.3.self_attn.o_proj.weight");
    CHECK(s && s->shape[0] == 32 && s->shape[1] == 32);
    s = spec_find("model.language_model.layers.3.self_attn.q_norm.weight");
    CHECK(s && s->ndim == 1 && s->shape[0] == 8);
    s = spec_find("model.language_model.layers.0.linear_attn.in_proj_qkv.weight");
    CHECK(s && s->shape[0] == 2 * 16 + 24 && s->shape[1] == 32);
    s = spec_find("model.language_model.layers.0.linear_attn.conv1d.weight");
    CHECK(s && s->ndim == 3 && s->shape[0] == 56 && s->shape[1] == 1 && s->shape[2] == 4);
    s = spec_find("model.language_model.layers.2.linear_attn.A_log");
    CHECK(s && s->dtype == CLEF_ST_F32 && s->ndim == 1 && s->shape[0] == 4);
    s = spec_find("model.language_model.layers.2.linear_attn.norm.weight");
    CHECK(s && s->dtype == CLEF_ST_F32 && s->shape[0] == 6);
    s = spec_find("model.language_model.layers.2.linear_attn.dt_bias");
    CHECK(s && s->dtype == CLEF_ST_BF16 && s->shape[0] == 4);
    s = spec_find("model.language_model.layers.1.linear_attn.out_proj.weight");
    CHECK(s && s->shape[0] == 32 && s->shape[1] == 24);
    s = spec_find("model.language_model.layers.1.mlp.down_proj.weight");
    CHECK(s && s->shape[0] == 32 && s->shape[1] == 48);
    CHECK(spec_find("model.language_model.layers.3.linear_attn.A_log") == NULL);
    CHECK(spec_find("model.language_model.layers.0.self_attn.q_proj.weight") == NULL);
    s = spec_find("lm_head.weight");
    CHECK(s && s->shape[0] == 50 && s->shape[1] == 32);
    s = spec_find("model.visual.patch_embed.proj.weight");
    CHECK(s && s->ndim == 5 && s->shape[0] == 24 && s->shape[1] == 3 && s->shape[2] == 2 && s->shape[3] == 4 &&
          s->shape[4] == 4);
    s = spec_find("model.visual.blocks.1.attn.qkv.weight");
    CHECK(s && s->shape[0] == 72 && s->shape[1] == 24);
    s = spec_find("model.visual.merger.linear_fc1.weight");
    CHECK(s && s->shape[0] == 96 && s->shape[1] == 96);
    s = spec_find("model.visual.merger.linear_fc2.weight");
    CHECK(s && s->shape[0] == 32 && s->shape[1] == 96);
    s = spec_find("model.visual.pos_embed.weight");
    CHECK(s && s->shape[0] == 16 && s->shape[1] == 24);
    s = spec_find("residual_scorer.0.weight");
    CHECK(s && s->file == 1 && s->shape[0] == 16 && s->shape[1] == 64);
    s = spec_find("evidence_layers.1.feedforward.3.weight");
    CHECK(s && s->shape[0] == 16 && s->shape[1] == 24);
    s = spec_find("layers.1.multihead_attn.in_proj_weight");
    CHECK(s && s->shape[0] == 48 && s->shape[1] == 16);
    s = spec_find("residual_gate");
    CHECK(s && s->ndim == 0 && s->dtype == CLEF_ST_BF16);
    s = spec_find("type_embedding.weight");
    CHECK(s && s->shape[0] == 3 && s->shape[1] == 16);
    s = spec_find("option_lexical_projection.weight");
    CHECK(s && s->shape[0] == 16 && s->shape[1] == 32);
}

static int progress_calls, progress_cancel_at = -1;
static size_t last_done, last_total;
static int on_progress(void *user, const char *stage, size_t done, size_t total) {
    (void)user;
    (void)stage;
    last_done = done;
    last_total = total;
    return progress_calls++ == progress_cancel_at;
}

static void check_bound(const clef_model_files *m, int vision) {
    const clef_text_weights *t = &m->text;
    CHECK(t->n_layers == 4 && t->layers[3].type == CLEF_LAYER_FULL && t->layers[0].type == CLEF_LAYER_LINEAR);
    CHECK(shape_is(&t->lm_head, 2, 50, 32, 0) && t->lm_head.dtype == CLEF_ST_BF16);
    CHECK(t->lm_head.name && strcmp(t->lm_head.name, "lm_head.weight") == 0);
    CHECK(shape_is(&t->layers[3].attn.q_proj, 2, 32 * 2, 32, 0));
    CHECK(t->layers[3].gdn.A_log.data == NULL && t->layers[0].attn.q_proj.data == NULL);
    const clef_tensor *a = &t->layers[1].gdn.A_log;
    CHECK(a->dtype == CLEF_ST_F32 && shape_is(a, 1, 4, 0, 0));
    CHECK(shape_is(&t->layers[1].gdn.conv1d, 3, 56, 1, 4));
    /* values: the writer stores (k % 13) - 6 + (ordinal % 8) / 8; the fraction is common to a tensor */
    if (a->data) {
        float f0 = f32_at(a, 0), frac = f0 + 6.0f;
        CHECK(frac >= 0.0f && frac < 1.0f);
        CHECK(f32_at(a, 3) == -3.0f + frac);
    }
    const clef_tensor *e = &t->embed_tokens;
    if (e->data) {
        float frac = bf16_at(e, 0) + 6.0f;
        CHECK(bf16_at(e, 14) == -5.0f + frac && bf16_at(e, 50 * 32 - 1) == (float)((50 * 32 - 1) % 13 - 6) + frac);
    }
    CHECK(((uintptr_t)e->data & 1) == 0);
    CHECK(clef_model_find(m, "mtp.fc.weight") != NULL); /* in a shard (and the index), ignored by the binder */
    CHECK(clef_model_find(m, "model.language_model.norm.weight") == &t->final_norm ||
          (clef_model_find(m, "model.language_model.norm.weight") &&
           clef_model_find(m, "model.language_model.norm.weight")->data == t->final_norm.data));
    CHECK(m->vision.present == vision);
    if (vision) {
        CHECK(m->vision.depth == 2 && m->vision.blocks != NULL);
        CHECK(m->vision.patch_w.ndim == 5 && m->vision.patch_w.shape[4] == 4);
        CHECK(shape_is(&m->vision.blocks[1].fc2_w, 2, 24, 40, 0));
        CHECK(shape_is(&m->vision.merger_fc2_b, 1, 32, 0, 0));
    } else {
        CHECK(m->vision.patch_w.data == NULL);
    }
    const clef_head_weights *h = &m->head;
    CHECK(h->n_evidence == 2 && h->n_layers == 2);
    CHECK(shape_is(&h->scorer0_w, 2, 16, 64, 0) && shape_is(&h->layers[1].linear2_w, 2, 16, 24, 0));
    CHECK(h->residual_gate.ndim == 0 && h->residual_gate.numel == 1 && h->residual_gate.data != NULL);
    CHECK(shape_is(&h->evidence[1].attn_in_w, 2, 48, 16, 0));
}

static void test_models(void) {
    clef_err err = {0};
    mut m0 = {0};
    const char *dir = make_model("ok", &m0);
    clef_model_open_opts opts = {.require_vision = 1, .progress = on_progress};
    clef_model_files *m = clef_model_open_ex(dir, &opts, &err);
    CHECK_MSG(m != NULL, "%s", err.msg);
    CHECK(progress_calls >= 2 && last_done == last_total && last_total == 3);
    if (m) {
        check_bound(m, 1);
        CHECK(m->mapped_bytes > 0);
        progress_calls = 0;
        CHECK(clef_model_prefetch(m, on_progress, NULL, &err) == 0);
        CHECK(progress_calls >= 3 && last_done == m->mapped_bytes && last_total == m->mapped_bytes);
    }
    clef_model_close(m);
    /* cancel from the progress callback */
    progress_calls = 0;
    progress_cancel_at = 1;
    CHECK(clef_model_open_ex(dir, &opts, &err) == NULL && strstr(err.msg, "cancel"));
    progress_cancel_at = -1;

    mut m1 = {.single_file = 1};
    dir = make_model("single", &m1);
    m = clef_model_open(dir, &err);
    CHECK_MSG(m != NULL, "single file: %s", err.msg);
    if (m) check_bound(m, 1);
    clef_model_close(m);

    mut m2 = {.skip_prefix = "model.visual."};
    dir = make_model("textonly", &m2);
    m = clef_model_open(dir, &err);
    CHECK_MSG(m != NULL, "text-only: %s", err.msg);
    if (m) check_bound(m, 0);
    clef_model_close(m);
    CHECK(clef_model_open_ex(dir, &opts, &err) == NULL && strstr(err.msg, "text-only"));

    /* refusals */
    mut r1 = {.skip = "model.language_model.layers.1.linear_attn.A_log"};
    refuse_model("missing tensor", make_model("missing", &r1), "layers.1.linear_attn.A_log", "missing");
    mut r2 = {.dtype_of = "model.language_model.layers.2.linear_attn.A_log", .new_dtype = CLEF_ST_BF16};
    refuse_model("A_log stored BF16", make_model("dtype", &r2), "layers.2.linear_attn.A_log", "dtype BF16, expected F32");
    mut r3 = {.dtype_of = "lm_head.weight", .new_dtype = CLEF_ST_F32};
    refuse_model("lm_head stored F32", make_model("dtype2", &r3), "lm_head.weight", "dtype F32");
    mut r4 = {.shape_of = "model.language_model.layers.3.self_attn.q_proj.weight", .new_ndim = 2,
              .new_shape = {32, 32}};
    refuse_model("q_proj without gate rows", make_model("shape", &r4), "q_proj.weight", "shape [32, 32], expected [64, 32]");
    mut r5 = {.shape_of = "model.language_model.layers.0.linear_attn.conv1d.weight", .new_ndim = 2,
              .new_shape = {56, 4}};
    refuse_model("conv1d flattened", make_model("shape2", &r5), "conv1d.weight", "shape");
    char *cfg = subst(BASE_CONFIG, "\"intermediate_size\": 48", "\"intermediate_size\": 40");
    mut r6 = {.config = cfg};
    refuse_model("config vs checkpoint", make_model("cfgshape", &r6), "mlp.gate_proj.weight", "expected [40, 32]");
    mut r7 = {.skip = "model.visual.blocks.1.norm2.bias"};
    refuse_model("partial vision", make_model("partvision", &r7), "model.visual.blocks.1.norm2.bias", "missing");
    mut r8 = {.head_extra = "extra.weight"};
    refuse_model("head extra tensor", make_model("headextra", &r8), "extra.weight", "unexpected");
    mut r9 = {.skip = "residual_gate"};
    refuse_model("head missing tensor", make_model("headmiss", &r9), "residual_gate", "joint_head.safetensors");
    mut r10 = {.shape_of = "residual_scorer.0.weight", .new_ndim = 2, .new_shape = {16, 24}};
    refuse_model("head wrong shape", make_model("headshape", &r10), "residual_scorer.0.weight", "expected [16, 64]");
    mut r11 = {.index_json = "{\"weight_map\":{\"lm_head.weight\":\"model-00009-of-00009.safetensors\"}}"};
    refuse_model("index: missing shard", make_model("ixmissing", &r11), "model-00009-of-00009.safetensors",
                 "does not exist");
    mut r12 = {.index_json = "{\"weight_map\":{\"lm_head.weight\":\"../model-00001-of-00002.safetensors\"}}"};
    refuse_model("index: path with ..", make_model("ixdotdot", &r12), "../model", "plain file name");
    mut r13 = {.index_json = "{\"weight_map\":{\"lm_head.weight\":\"/etc/passwd\"}}"};
    refuse_model("index: absolute path", make_model("ixabs", &r13), "/etc/passwd", "plain file name");
    mut r14 = {.index_json = "{\"weight_map\":{\"lm_head.weight\":\"..\"}}"};
    refuse_model("index: ..", make_model("ixdd", &r14), "lm_head.weight", "plain file name");
    mut r15 = {.index_json = "{\"weight_map\": [1]}"};
    refuse_model("index: no weight_map", make_model("ixnomap", &r15), "weight_map", NULL);
    mut r16 = {.index_json = "{\"weight_map\": {"};
    refuse_model("index: garbage", make_model("ixgarbage", &r16), "index.json", "not valid JSON");
    mut r17 = {.bad_shard_for = "model.language_model.norm.weight"};
    refuse_model("index: wrong shard", make_model("ixwrong", &r17), "model.language_model.norm.weight", "not there");
    mut r18 = {.index_json = "{\"weight_map\":{\"lm_head.weight\":\"model-00001-of-00002.safetensors\"}}"};
    refuse_model("index: incomplete", make_model("ixincomplete", &r18), "embed_tokens.weight", "missing");
    mut r19 = {.unaligned = 1};
    refuse_model("unaligned data", make_model("unaligned", &r19), "aligned", NULL);
    char *hc = subst(BASE_HEAD, "\"width\": 16", "\"width\": 32");
    mut r20 = {.head_config = hc};
    refuse_model("head config vs file", make_model("headcfg", &r20), "memory_projection.weight", "expected [32, 32]");
    char *hc2 = subst(BASE_HEAD, "\"hidden_size\": 32", "\"hidden_size\": 64");
    mut r21 = {.head_config = hc2};
    refuse_model("head hidden vs backbone", make_model("headhidden", &r21), "hidden_size", NULL);
    free(cfg);
    free(hc);
    free(hc2);

    /* no checkpoint at all, no config at all */
    char empty[512];
    snprintf(empty, sizeof empty, "%s/empty", tmpdir);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp '%s/01-ok/config.json' '%s/01-ok/joint_head_config.json' '%s/'", empty,
             tmpdir, tmpdir, empty);
    CHECK(system(cmd) == 0);
    refuse_model("no safetensors", empty, "neither", NULL);
    snprintf(empty, sizeof empty, "%s/nothing", tmpdir);
    CHECK(clef_model_open(empty, &err) == NULL && err.type && strcmp(err.type, CLEF_E_IO) == 0);
    /* a shard that is itself malformed */
    snprintf(cmd, sizeof cmd, "head -c 100 '%s/01-ok/model-00001-of-00002.safetensors' > '%s/02-single/model.safetensors'",
             tmpdir, tmpdir);
    CHECK(system(cmd) == 0);
    snprintf(empty, sizeof empty, "%s/02-single", tmpdir);
    refuse_model("truncated shard", empty, "model.safetensors", "past the end");
}

static long rss_kb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long kb = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "VmRSS:", 6) == 0) kb = strtol(line + 6, NULL, 10);
    fclose(f);
    return kb;
}

static void test_tiny(void) {
    char dir[600];
    const char *env = getenv("CLEF_TINY_DIR");
    snprintf(dir, sizeof dir, "%s", env ? env : "models/tiny");
    char probe[700];
    snprintf(probe, sizeof probe, "%s/config.json", dir);
    if (access(probe, R_OK) != 0) {
        const char *b = getenv("CLEF_BUILD");
        if (b) snprintf(dir, sizeof dir, "%s/../models/tiny", b);
        snprintf(probe, sizeof probe, "%s/config.json", dir);
    }
    if (access(probe, R_OK) != 0) {
        printf("  models/tiny not found (make tiny): tiny checkpoint checks not run\n");
        return;
    }
    long rss0 = rss_kb();
    clef_err err = {0};
    clef_model_files *m = clef_model_open(dir, &err);
    long rss1 = rss_kb();
    CHECK_MSG(m != NULL, "tiny: %s", err.msg);
    if (!m) return;
    printf("  tiny: %s, %zu bytes mapped, RSS %ld -> %ld kB\n", dir, m->mapped_bytes, rss0, rss1);
    /* no copy at load: RSS grows far less than the mapped size (lm_head + embed alone ~64 MB) */
    CHECK_MSG(rss1 - rss0 < 16 * 1024, "RSS grew by %ld kB", rss1 - rss0);
    const clef_config *c = &m->cfg;
    CHECK(c->text.vocab_size == 248320 && c->text.hidden_size == 64 && c->text.num_hidden_layers == 8);
    const clef_text_weights *t = &m->text;
    CHECK(t->lm_head.dtype == CLEF_ST_BF16 && shape_is(&t->lm_head, 2, 248320, 64, 0));
    CHECK(t->lm_head.data != t->embed_tokens.data);
    const clef_tensor *a = &t->layers[0].gdn.A_log;
    CHECK(t->layers[0].type == CLEF_LAYER_LINEAR && t->layers[3].type == CLEF_LAYER_FULL);
    CHECK(a->dtype == CLEF_ST_F32 && shape_is(a, 1, c->text.linear_num_value_heads, 0, 0));
    int in_range = 1; /* write_tiny.py: A_log = -2 + U[-1, 1) */
    for (int64_t k = 0; a->data && k < a->numel; k++) in_range &= f32_at(a, k) >= -3.0f && f32_at(a, k) < -1.0f;
    CHECK(a->data && in_range);
    const clef_tensor *n = &t->layers[0].gdn.norm;
    CHECK(n->dtype == CLEF_ST_F32 && n->data && f32_at(n, 0) >= 0.8f && f32_at(n, 0) <= 1.2f);
    CHECK(m->vision.present && m->vision.depth == c->vision.depth);
    CHECK(m->head.residual_gate.data && bf16_at(&m->head.residual_gate, 0) == -0.5f);
    CHECK(m->head.prior_logit_scale.data && bf16_at(&m->head.prior_logit_scale, 0) == 0.5f);
    CHECK(clef_model_find(m, "mtp.fc.weight") != NULL); /* in the index, ignored by the binder */
    clef_model_close(m);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/clef_test_w_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_configs();
    test_expected();
    test_models();
    test_tiny();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return TEST_END();
}
