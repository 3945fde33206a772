/* The human log format of clef serve (--log-format text): one JSON log line's fields turned into
 * "HH:MM:SS level event key=value ..." for a person at a terminal, and the "listening" event into
 * "listening on http://HOST:PORT". The JSON format stays the one for machines (docs/serving.md). */
#ifndef CLEF_SERVE_LOG_TEXT_H
#define CLEF_SERVE_LOG_TEXT_H

#include <stddef.h>

/* Renders the fields of a log line (the text between the braces after "ts" and "level":
 * "\"event\":\"listening\",\"host\":\"127.0.0.1\",\"port\":9000") as one text line ending in '\n'
 * into out (always terminated; cut at cap with "..." when longer). ts: seconds since the epoch (UTC
 * time of day shown). Returns the length written. */
size_t clef_log_text_render(char *out, size_t cap, double ts, const char *level, const char *fields, size_t n);

#endif
