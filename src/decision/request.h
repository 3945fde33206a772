/* A SystemOne request, checked the way the author's systemone() checks it (spec:
 * ../shared/spec/contract.md §2, §3), and typed for encode_record (encode.h) and the response
 * (response.h).
 *
 * Order of the checks (each is the first failure reported; messages are the reference's exact
 * exception text, see docs/errors.md):
 *   0 root not an object                      BadJson              "'list' object has no attribute 'get'"
 *   1 model not a string, or no "state" key   MissingModelOrState  "model and state are required"
 *   2 questions not an object, or empty       NoQuestions          "at least one question is required"
 *   per question, in insertion order:
 *   3a question not an object                 BadQuestion          "'str' object has no attribute 'get'"
 *   3b type not noul/choice/score             BadQuestionType      "{id}: type must be noul, choice, or score"
 *      (a list/object type: the reference's TypeError "unhashable type: 'list'")
 *   4  not noul and criteria falsy            EmptyCriteria        "{id}: criteria must not be empty"
 * Criteria that the reference's question_options() rejects (BadCriteria) are found here but reported
 * by encode_record at the point where the reference fails: after that question's header and
 * instructions were tokenized (clef_question.crit_err_*).
 *
 * Lifetime: the request borrows from the parsed document (strings, values); keep the json_doc alive
 * until clef_request_free. Values the reference synthesizes (an id used as instructions, the noul
 * default descriptions, score legend keys/characters) live in the request's own document. */
#ifndef CLEF_DECISION_REQUEST_H
#define CLEF_DECISION_REQUEST_H

#include <stddef.h>

#include "base/err.h"
#include "base/question_type.h"
#include "base/json.h"

/* Error names of the decision part (docs/errors.md). */
#define CLEF_E_MISSING_MODEL_OR_STATE "MissingModelOrState"
#define CLEF_E_NO_QUESTIONS "NoQuestions"
#define CLEF_E_BAD_QUESTION "BadQuestion"
#define CLEF_E_BAD_QUESTION_TYPE "BadQuestionType"
#define CLEF_E_EMPTY_CRITERIA "EmptyCriteria"
#define CLEF_E_BAD_CRITERIA "BadCriteria"
#define CLEF_E_SCHEMA_TOO_LONG "SchemaTooLong"
#ifndef CLEF_E_UNSUPPORTED_MEDIA
#define CLEF_E_UNSUPPORTED_MEDIA "UnsupportedMedia"
#endif
#define CLEF_E_MEDIA_TOKEN_MISMATCH "MediaTokenMismatch"


typedef struct clef_option {
    const char *id; /* "true"/"false", the choice key, or "0".."n-1"; NUL-terminated */
    size_t id_len;
    const json_value *description; /* NULL: no description (the option JSON has no "description" key) */
} clef_option;

typedef struct clef_question {
    const char *id; /* the question key, raw (may hold any UTF-8/WTF-8, even NUL bytes) */
    size_t id_len;
    clef_qtype type;
    const char *type_name;          /* its name in the table (base/question_type.h) */
    const json_value *instructions; /* resolved: missing, null or "" -> the id as a string */
    /* Options in head order (noul true,false; choice sorted by code point; score by index). */
    size_t n_options;
    clef_option *options;
    /* The response's listing order: listing[k] is an index into options. choice: the criteria's
     * insertion order; noul and score: 0..n-1. */
    size_t *listing;
    /* score only: the original criteria items (list items, object keys, string characters). */
    const json_value **legend;
    /* BadCriteria found while resolving the options (NULL when none); encode_record raises it. */
    const char *crit_err_type;
    char *crit_err_msg;
} clef_question;

typedef struct clef_request {
    const json_value *root;
    const char *model; /* request["model"], a string */
    size_t model_len;
    const json_value *state;        /* never NULL after a successful parse (JSON null is a value) */
    size_t n_questions;
    clef_question *questions;       /* insertion order */
    const json_value *images;       /* request["images"] as given, or NULL */
    const json_value *videos;       /* request["videos"] as given, or NULL */
    const json_value *media_kwargs; /* request["media_kwargs"] as given, or NULL */
    int raw;                        /* ours: top-level "raw": true adds unrounded probabilities */
    json_doc *own;                  /* values synthesized for the request */
} clef_request;

/* Checks 0-4 and resolves every question. On failure returns -1 with err set (and req freed). */
int clef_request_parse(const json_value *root, clef_request *req, clef_err *err);
void clef_request_free(clef_request *req);

/* The first deferred BadCriteria of the request, if any (for callers that do not encode, like
 * `clef respond`): returns -1 with err set, else 0. */
int clef_request_check_criteria(const clef_request *req, clef_err *err);

/* Python's type name of a JSON value as json.loads makes it: NoneType, bool, int, float, str, list,
 * dict. */
const char *clef_py_type_name(const json_value *v);

#endif
