/* The question types: the one table every part reads (docs/development.md, "Adding a question type").
 * The request's "type" (decision/request.c), the schema line "TYPE: ..." (decision/encode.c), the
 * answer (decision/response.c), the head's row of type_embedding (model/weights.c, model/head.c),
 * /openapi.json's Question schemas (serve/openapi.c) and the playground's list (serve/playground.c,
 * web/) all come from CLEF_QUESTION_TYPES; no other file spells a type's name.
 *
 * One row per type, in the order of type_embedding's rows (the enum value is the row the head adds):
 *   X(ID, name, Title, criteria, shape, label, criteria_schema)
 *   ID               the enum constant's suffix: CLEF_Q_<ID>
 *   name             the "type" string of the request and of the answer, and the answer's value key
 *                    (a bare token: #name is the string); decision/ names its functions after it:
 *                    resolve_<name> (request.c: the options from "criteria") and answer_<name>
 *                    (response.c: the answer's fields after "type")
 *   Title            its schema's name under components/schemas in /openapi.json
 *   criteria         required: a falsy "criteria" is refused (EmptyCriteria); optional: it may be absent
 *   shape            how the playground edits and shows its options: flag (none: true/false),
 *                    keyed (option id -> description, one is chosen), levels (ordered descriptions, a score)
 *   label            the playground's name for it
 *   criteria_schema  the OpenAPI schema of its "criteria" (a JSON text)
 * SEP() is put between rows (a list that needs no separator passes CLEF_QT_NOSEP). */
#ifndef CLEF_BASE_QUESTION_TYPE_H
#define CLEF_BASE_QUESTION_TYPE_H

#include <stddef.h>

#define CLEF_QUESTION_TYPES(X, SEP)                                                                              \
    X(NOUL, noul, Noul, optional, flag, "yes/no (noul)",                                                          \
      "{\"description\":\"Optional: {\\\"true\\\": d, \\\"false\\\": d} over the defaults (extra keys "            \
      "ignored, null: no description), or what Python's dict.update takes (a list of key/value pairs); a falsy "   \
      "value: the defaults; other values are refused (BadCriteria)\",\"anyOf\":[{\"enum\":[null,false,0,\"\",[]]}," \
      "{\"type\":\"object\"},{\"type\":\"array\",\"items\":{\"type\":\"array\",\"minItems\":2,\"maxItems\":2,"     \
      "\"description\":\"[key, description]; a key that is a list or an object is refused (BadCriteria)\"}}]}")    \
    SEP()                                                                                                          \
    X(CHOICE, choice, Choice, required, keyed, "choice",                                                          \
      "{\"description\":\"{option id: description (any value; null: none)}\",\"type\":\"object\","                 \
      "\"minProperties\":1}")                                                                                      \
    SEP()                                                                                                          \
    X(SCORE, score, Score, required, levels, "score",                                                             \
      "{\"description\":\"The ordered levels: a list of descriptions (null: none), an object (its keys) "          \
      "or a string (its characters)\",\"oneOf\":[{\"type\":\"array\",\"minItems\":1},{\"type\":\"object\","        \
      "\"minProperties\":1},{\"type\":\"string\",\"minLength\":1}]}")

#define CLEF_QT_NOSEP()
#define CLEF_QT_COMMA_STR() ","

#define CLEF_QT_ENUM_(ID, name, Title, criteria, shape, label, schema) CLEF_Q_##ID,
typedef enum { CLEF_QUESTION_TYPES(CLEF_QT_ENUM_, CLEF_QT_NOSEP) CLEF_QTYPE_COUNT } clef_qtype;

/* The type's name ("type" in the request and the answer); "?" for a value outside the table. */
const char *clef_qtype_name(clef_qtype t);

/* The type named by the n bytes at s; -1 when no row has that name. */
int clef_qtype_parse(const char *s, size_t n, clef_qtype *t);

/* 1 when a falsy "criteria" is refused (EmptyCriteria). */
int clef_qtype_needs_criteria(clef_qtype t);

/* Every name as the reference's message lists them ("a, b, or c"), written to buf (cut at cap - 1
 * bytes, always NUL-terminated when cap > 0). */
void clef_qtype_list(char *buf, size_t cap);

#endif
