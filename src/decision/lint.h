/* What the reference accepts without a word, said in words (docs/errors.md "Warnings"): keys it
 * never reads (a typo such as "instruction" drops the instructions), and, for a refusal whose
 * message must stay the reference's bytes, a line naming the place (a JSON pointer) and what was
 * expected. The lines are printable ASCII (other bytes written \xHH), fit for an HTTP header. */
#ifndef CLEF_DECISION_LINT_H
#define CLEF_DECISION_LINT_H

#include <stddef.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/json.h"

/* --strict's refusal (422): a warning that strict mode turns into an error. */
#define CLEF_E_STRICT "StrictRefused"

/* Appends one line ("...\n") per unknown key of the request and of each question object to out, e.g.
 * "unknown key /questions/hot/instruction; did you mean instructions?"; past 8, one line counts the
 * rest ("N more unknown keys"). Returns the number of lines added (0 for a root that is not an
 * object), -1 when out ran out of memory. */
int clef_request_lint(const json_value *root, clef_buf *out);

/* After clef_request_parse or encode_record refused root with err, where the message must stay the
 * reference's bytes: appends one line saying where and what was expected ("/questions must be an
 * object of id -> question, got a list"; for the reference's 'video_fps' what is wrong with the
 * video), or nothing for a refusal whose message already says it. Returns the number of lines added, -1 on out of memory. */
int clef_request_explain(const json_value *root, const clef_err *err, clef_buf *out);

/* "/a/b" for a key: appends "/" and the key, JSON-pointer escaped (~0, ~1), bytes outside printable
 * ASCII as \xHH, cut after 64 bytes with "...". */
void clef_pointer_put(clef_buf *out, const char *key, size_t key_len);

#endif
