#include "base/err.h"

#include <stdarg.h>
#include <stdio.h>

int clef_err_set(clef_err *e, const char *type, const char *fmt, ...) {
    if (!e) return -1;
    e->type = type;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

void clef_err_clear(clef_err *e) {
    if (!e) return;
    e->type = NULL;
    e->msg[0] = '\0';
}
