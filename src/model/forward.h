/* Model-level inputs of one forward pass: the text decoder (clef_forward_in) and the joint schema
 * head (clef_head_in). Independent of the decision/ headers: the host side fills these from its
 * encoded record. All arrays are host memory unless marked "device" (a buffer of the clef_ops
 * backend in use; on the CPU backend that is host memory too). */
#ifndef CLEF_MODEL_FORWARD_H
#define CLEF_MODEL_FORWARD_H

#include <stddef.h>
#include <stdint.h>

#include "base/question_type.h"

/* Debug hook: called after every decoder layer (layer = 0 .. n_layers-1, rows = the residual
 * stream after that layer) and once more with layer = CLEF_LAYER_FINAL_NORM (-1) for the
 * final-norm rows. `rows` is host memory [T, D] valid only during the call. */
#define CLEF_LAYER_FINAL_NORM (-1)
typedef void (*clef_layer_fn)(void *user, int layer, const float *rows, size_t T, size_t D);

/* The delta rule's chunk (model.md §4.4.6): chunks start at each record's first token. */
#define CLEF_DELTA_CHUNK 64

/* A record's state after its first `rows` tokens (a multiple of the delta rule's chunk, 64): what a
 * later forward needs to go on from there with the bits of the uninterrupted run (the engine's
 * state cache keeps these). Device buffers, one per layer (NULL where the layer has none):
 * Gated DeltaNet layers conv [K-1, conv_dim] (the conv's input window) and rec [Hv, dk, dv] (the
 * delta rule's state); attention layers k, v [rows, kv_heads * head_dim] (after norm and rotary). */
typedef struct clef_text_state {
    size_t rows;
    float **conv, **rec, **k, **v; /* [num_hidden_layers] each */
} clef_text_state;

/* One record of a packed forward: the next `n` rows of ids. */
typedef struct clef_forward_seg {
    size_t n;
    const clef_text_state *resume; /* NULL: the record starts here (position 0); else its rows are
                                      positions resume->rows.., going on from that state */
    clef_text_state *snap;         /* NULL, or the buffers to fill with the state after snap->rows of
                                      these rows (0 < rows < n, a multiple of 64; needs resume NULL) */
} clef_forward_seg;

typedef struct clef_forward_in {
    const int32_t *ids;          /* [n] token ids, each in [0, vocab_size) */
    size_t n;                    /* tokens, >= 1 (all segments together) */
    /* The records packed into this forward, in row order (their n add up to n). 0 / NULL: one
     * record of n rows from position 0. Rows of different records never mix. */
    size_t nseg;
    const clef_forward_seg *segs;
    /* M-RoPE position planes T, H, W (model.md §5.3), each [n] (every row of the forward). All
     * NULL: text-only, every plane = the row's position in its record. Either all three or none. */
    const int32_t *pos[3];
    /* Rows that replace the token embeddings at the given positions (image rows, in order):
     * replace_rows is device memory [n_replace, hidden_size]; replace_pos host [n_replace]. */
    size_t n_replace;
    const int32_t *replace_pos;
    const float *replace_rows;
    /* Optional: the rotary inverse frequencies [rotary_dim / 2] as the reference computed them
     * (the fixture records their bits); NULL computes them the way torch does in fp32. */
    const float *inv_freq;
    /* Optional per-layer hook (see clef_layer_fn). */
    clef_layer_fn on_layer;
    void *on_layer_user;
} clef_forward_in;


/* One question of a record, spans half-open into the record's token sequence. */
typedef struct clef_head_question {
    clef_qtype type;             /* the row of type_embedding */
    int32_t q_start, q_end;      /* question (instructions) span */
    int n_options;               /* >= 1 */
    const int32_t *option_spans; /* [2 * n_options]: start0, end0, start1, end1, ... (head order) */
} clef_head_question;

/* One record for the head. Its spans index the whole record; a record that resumed from a cached
 * state gives only its new rows' hidden states and the cached memory rows of the others (the
 * head's memory, memory_projection(hidden_norm(h)), is per row). */
typedef struct clef_head_in {
    const float *hidden;         /* device [T - past, hidden_size]: the backbone's final-norm rows
                                    of positions past .. T-1 */
    size_t T;                    /* real tokens of the record (no padding) */
    const int32_t *ids;          /* [T] the record's input ids (for the lexical rows) */
    int n_questions;             /* >= 1 */
    const clef_head_question *questions; /* spans inside [past, T) (empty spans anywhere) */
    size_t past;                 /* rows before `hidden` (0: none) ... */
    const float *mem_past;       /* ... whose memory rows are these, device [past, width] */
    float *mem_snap;             /* NULL, or device [snap_rows, width]: receives memory rows 0.. */
    size_t snap_rows;            /* ... snap_rows - 1 (needs past == 0) */
} clef_head_in;

#endif
