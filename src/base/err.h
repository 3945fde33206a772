/* Errors as values. Library code never exits or aborts on input: a function that can fail takes a
 * clef_err*, fills it and returns -1 (or NULL). `type` is the error's name as clients see it
 * ("BadJson", "NoQuestions", ... see docs/errors.md); `msg` is a sentence fit for an HTTP 400 body. */
#ifndef CLEF_BASE_ERR_H
#define CLEF_BASE_ERR_H

#include <stddef.h>

typedef struct clef_err {
    const char *type; /* static string; NULL while no error is set */
    char msg[1024];
} clef_err;

/* Sets type and a printf-formatted message (truncated to fit, never inside a UTF-8 sequence);
 * returns -1 for `return clef_err_set(...)`. `e` may be NULL (then nothing is recorded). */
int clef_err_set(clef_err *e, const char *type, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void clef_err_clear(clef_err *e);

/* Error names used across parts (one place, so a typo cannot create a new name). */
#define CLEF_E_BAD_JSON "BadJson"
#define CLEF_E_INVALID_UTF8 "InvalidUtf8"
#define CLEF_E_LONE_SURROGATE "LoneSurrogate"
#define CLEF_E_OOM "OutOfMemory"
#define CLEF_E_IO "IoError"
#define CLEF_E_LIMIT "RequestTooLong"
#define CLEF_E_BAD_MODEL "BadModel"
#define CLEF_E_INTERNAL "InternalError"
#define CLEF_E_DEADLINE "DeadlineExceeded" /* waited past the server's --deadline (503) */

#endif
