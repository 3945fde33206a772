/* The JointSchemaHead forward (contract.md §6.4) in fp32: final-norm hidden rows + ids +
 * question/option spans in, one logit per option out (question order, then head option order).
 * A batch of records runs as one call (each Linear over every record's rows at once, attention
 * within each record), with the bits each record has alone. */
#ifndef CLEF_MODEL_HEAD_H
#define CLEF_MODEL_HEAD_H

#include <stddef.h>

#include "base/err.h"
#include "compute/ops.h"
#include "model/config.h"
#include "model/forward.h"
#include "model/weights.h"

/* Total options of a record (the length of the logits array). */
size_t clef_head_total_options(const clef_head_in *in);

/* lm_head: the backbone's lm_head.weight [V, hidden] (the lexical table). logits: host array of
 * clef_head_total_options(in) floats. An empty span is not an error: its mean is NaN as in the
 * reference, which makes every logit of the record NaN (contract.md §3.2, the silent NaN case;
 * the decision layer may refuse such a record before calling). Returns 0, or -1 with err set
 * (InternalError for spans, ids or types out of range; OutOfMemory). */
int clef_head_forward(clef_ops *ops, const clef_head_config *hc, const clef_head_weights *hw,
                      const clef_tensor *lm_head, const clef_head_in *in, float *logits,
                      clef_err *err);

/* The same for n records at once: logits[i] receives record i's. Fails as a whole (the first
 * invalid record's error, or OutOfMemory); the caller that needs each record's own error runs
 * them one at a time then. */
int clef_head_forward_batch(clef_ops *ops, const clef_head_config *hc, const clef_head_weights *hw,
                            const clef_tensor *lm_head, const clef_head_in *ins, size_t n, float *const *logits,
                            clef_err *err);

#endif
