/* The failure status of the op seam (ops.h): a value with a message, set by the backends, taken by
 * the model and the engine into their clef_err. */
#include "compute/ops.h"

#include <stdarg.h>
#include <stdio.h>

int clef_ops_fail(clef_ops *ops, int code, const char *fmt, ...) {
    if (!ops || ops->status.code != CLEF_OPS_OK) return -1; /* the first failure is the cause */
    ops->status.code = code != CLEF_OPS_OK ? code : CLEF_OPS_DEVICE;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ops->status.msg, sizeof ops->status.msg, fmt, ap);
    va_end(ap);
    return -1;
}

int clef_ops_take(clef_ops *ops, const char *where, clef_err *err) {
    if (ops->status.code == CLEF_OPS_OK) return 0;
    const char *type = ops->status.code == CLEF_OPS_OOM ? CLEF_E_OOM : CLEF_E_INTERNAL;
    clef_err_set(err, type, "%s: %s", where, ops->status.msg);
    clef_ops_clear(ops);
    return -1;
}
