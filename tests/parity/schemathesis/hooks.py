"""schemathesis hooks for tests/parity/test_openapi_schemathesis.py (loaded through SCHEMATHESIS_HOOKS).

One check replaces schemathesis's positive_data_acceptance: a request the schema allows must not be
refused for a schema reason. A JSON Schema cannot say that the bytes of a base64 string are a PNG, so
a 422 whose error type says the content of a well-formed field was refused (CONTENT_REFUSALS) is not
a schema reason; neither is BadCriteria for a noul's criteria pair whose key is a list or an object
(OpenAPI 3.0 has no tuple schema to say "the first item a scalar"; the schema's description says it).
Any other 400/413/415/422 of a schema-valid request is a failure."""
import json

import schemathesis

CONTENT_REFUSALS = {"UnsupportedMedia", "SchemaTooLong", "RequestTooLong", "BadCriteria"}  # docs/errors.md


@schemathesis.check
def valid_request_not_refused_for_a_schema_reason(ctx, response, case):
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive:
        return None
    if response.status_code not in (400, 413, 415, 422):
        return None
    try:
        kind = json.loads(response.content)["error"]["type"]
    except (ValueError, KeyError, TypeError):
        kind = None
    if kind in CONTENT_REFUSALS:
        return None
    raise AssertionError("a schema-valid request was refused %d %s: %s"
                         % (response.status_code, kind, response.content[:300]))
