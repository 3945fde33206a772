/* config.json (Qwen3.5, model.md §2) and joint_head_config.json (contract.md §6.1), parsed and
 * validated. Every dimension the engine uses comes from here, never from constants. A config this
 * build cannot run is refused with BadModel and a sentence naming the key. */
#ifndef CLEF_MODEL_CONFIG_H
#define CLEF_MODEL_CONFIG_H

#include <stddef.h>

#include "base/err.h"

#define CLEF_MAX_LAYERS 1024

enum { CLEF_LAYER_LINEAR = 0, CLEF_LAYER_FULL = 1 };

typedef struct clef_text_config {
    int hidden_size;            /* 4096 */
    int num_hidden_layers;      /* 32 */
    unsigned char layer_types[CLEF_MAX_LAYERS]; /* CLEF_LAYER_*; from layer_types or full_attention_interval */
    int n_full_layers, n_linear_layers;
    int vocab_size;             /* 248320 */
    int intermediate_size;      /* 12288 */
    int num_attention_heads;    /* 16 */
    int num_key_value_heads;    /* 4 */
    int head_dim;               /* 256 */
    int linear_num_key_heads;   /* 16 */
    int linear_num_value_heads; /* 32 */
    int linear_key_head_dim;    /* 128 */
    int linear_value_head_dim;  /* 128 */
    int linear_conv_kernel_dim; /* 4 */
    double rms_norm_eps;        /* 1e-6 */
    double rope_theta;          /* 1e7 */
    double partial_rotary_factor; /* 0.25 */
    int rotary_dim;             /* head_dim * partial_rotary_factor = 64 (even, <= head_dim) */
    int mrope_section[3];       /* [11, 11, 10]; sums to rotary_dim / 2 */
    int eos_token_id;           /* -1 when absent */
    /* derived */
    int q_dim;                  /* heads * head_dim (q_proj has 2 * q_dim rows: query + gate) */
    int kv_dim;                 /* kv_heads * head_dim */
    int linear_key_dim;         /* linear_num_key_heads * linear_key_head_dim (2048) */
    int linear_value_dim;       /* linear_num_value_heads * linear_value_head_dim (4096) */
    int linear_conv_dim;        /* 2 * linear_key_dim + linear_value_dim (8192) */
} clef_text_config;

typedef struct clef_vision_config {
    int present;                /* 0 when config.json has no vision_config */
    int depth;                  /* 27 */
    int hidden_size;            /* 1152 */
    int num_heads;              /* 16 */
    int head_dim;               /* derived: hidden_size / num_heads = 72 */
    int intermediate_size;      /* 4304 */
    int patch_size;             /* 16 */
    int temporal_patch_size;    /* 2 */
    int spatial_merge_size;     /* 2 */
    int out_hidden_size;        /* 4096 (= text hidden_size) */
    int num_position_embeddings;/* 2304 */
    int num_grid_per_side;      /* derived: sqrt(num_position_embeddings) = 48 */
    int in_channels;            /* 3 */
    int patch_dim;              /* derived: in_channels * temporal_patch_size * patch_size^2 = 1536 */
    int merged_dim;             /* derived: hidden_size * spatial_merge_size^2 = 4608 */
    double layer_norm_eps;      /* 1e-6 (hard-coded in transformers) */
    double rope_theta;          /* 10000 */
} clef_vision_config;

typedef struct clef_config {
    clef_text_config text;
    clef_vision_config vision;
    int image_token_id;         /* 248056 (-1 when absent) */
    int video_token_id;         /* 248057 */
    int vision_start_token_id;  /* 248053 */
    int vision_end_token_id;    /* 248054 */
} clef_config;

typedef struct clef_head_config {
    int hidden_size;    /* 4096, must equal the text hidden_size */
    int width;          /* 1024 */
    int routing_layers; /* 2 (evidence layers) */
    int layers;         /* 4 (decoder layers) */
    int heads;          /* 16 */
    int head_dim;       /* derived: width / heads = 64 */
    int feedforward;    /* 4096 */
    double dropout;     /* 0.0 (eval mode: unused) */
} clef_head_config;

/* Parse + validate from bytes (`label` names the file in messages), or from a file path. */
int clef_config_parse(clef_config *c, const char *json, size_t len, const char *label, clef_err *err);
int clef_config_load(clef_config *c, const char *path, clef_err *err);
int clef_head_config_parse(clef_head_config *h, const char *json, size_t len, const char *label,
                           clef_err *err);
int clef_head_config_load(clef_head_config *h, const char *path, clef_err *err);
/* Cross-checks the two (head hidden_size == text hidden_size). */
int clef_head_config_check(const clef_head_config *h, const clef_config *c, clef_err *err);

#endif
