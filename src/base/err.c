#include "base/err.h"

#include <stdarg.h>
#include <stdio.h>

int clef_err_set(clef_err *e, const char *type, const char *fmt, ...) {
    if (!e) return -1;
    e->type = type;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    if (n >= (int)sizeof e->msg) { /* truncated: do not end inside a UTF-8 sequence */
        size_t len = sizeof e->msg - 1, lead = len;
        while (lead > 0 && len - lead < 4 && ((unsigned char)e->msg[lead - 1] & 0xC0) == 0x80) lead--;
        if (lead > 0) {
            unsigned char c = (unsigned char)e->msg[lead - 1];
            size_t want = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
            if (len - (lead - 1) < want) e->msg[lead - 1] = '\0';
        }
    }
    return -1;
}

void clef_err_clear(clef_err *e) {
    if (!e) return;
    e->type = NULL;
    e->msg[0] = '\0';
}
