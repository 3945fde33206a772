/* clef.h's clef_batch_options_default: the serving defaults, whose home is serve/ (scheduler.h's
 * forward sizing, server.h's body cap), handed to drivers outside the CLI. */
#include "clef.h"

#include <string.h>

#include "serve/scheduler.h"
#include "serve/server.h"

void clef_batch_options_default(clef_batch_options *o) {
    memset(o, 0, sizeof *o);
    o->batch_tokens = CLEF_SCHED_BATCH_TOKENS_DEFAULT;
    o->max_batch = CLEF_SCHED_MAX_BATCH_DEFAULT;
    o->queue_len = CLEF_SCHED_QUEUE_LEN_DEFAULT;
    o->max_body = CLEF_SERVE_MAX_BODY_DEFAULT;
}
