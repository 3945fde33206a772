/* Request ids (docs/serving.md): a client's X-Request-Id when it is sane, else 32 random hex digits
 * (128 bits from getrandom), so ids are unique across processes and restarts. */
#ifndef CLEF_SERVE_REQUEST_ID_H
#define CLEF_SERVE_REQUEST_ID_H

#include <stddef.h>

#define CLEF_REQUEST_ID_MAX 64 /* characters of a client's id we honour */

/* Writes a fresh id (32 hex digits + NUL) into out[33]. */
void clef_request_id_new(char out[33]);
/* 1 when s is 1..64 characters of [A-Za-z0-9._:-] (safe in a header and a log line as is). */
int clef_request_id_sane(const char *s);

#endif
