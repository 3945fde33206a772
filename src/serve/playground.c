/* The web playground's files (see playground.h). No file is read at run time: the bytes are in
 * the binary, so the page always matches the server that serves it. */
#include "serve/playground.h"

#include <string.h>

#include "base/question_type.h"
#include "serve/web_assets.h" /* made by the Makefile in $(BUILD)/gen: web_playground_{html,js,css}[] */

/* The page loads only its own script and style sheet from this server and talks only to it
 * (fetch of /v1/systemone, /v1/models); images are shown from data: URLs. No inline script or
 * style (the script sets bar widths through the CSSOM, which CSP does not restrict). */
#define CSP "default-src 'self'; img-src data: 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

/* The question types the page offers, from the table (base/question_type.h): loaded before
 * playground.js, which goes by each type's shape and never spells a name. */
#define TYPE_JS(ID, name, Title, criteria, shape, label, schema) \
    "{\"name\":\"" #name "\",\"shape\":\"" #shape "\",\"label\":\"" label "\"}"
static const char question_types_js[] =
    "// The question types of this server (base/question_type.h): {name, shape, label}.\n"
    "const CLEF_QUESTION_TYPES = [" CLEF_QUESTION_TYPES(TYPE_JS, CLEF_QT_COMMA_STR) "];\n";

static const clef_asset assets[] = {
    {"/", "text/html; charset=utf-8", web_playground_html, sizeof web_playground_html},
    {"/playground.js", "text/javascript; charset=utf-8", web_playground_js, sizeof web_playground_js},
    {"/playground.css", "text/css; charset=utf-8", web_playground_css, sizeof web_playground_css},
    {"/question_types.js", "text/javascript; charset=utf-8", (const unsigned char *)question_types_js,
     sizeof question_types_js - 1},
};

const clef_asset *clef_playground_find(const char *url) {
    if (!url) return NULL;
    for (size_t i = 0; i < sizeof assets / sizeof assets[0]; i++)
        if (!strcmp(url, assets[i].path)) return &assets[i];
    return NULL;
}

enum MHD_Result clef_playground_send(struct MHD_Connection *c, const clef_asset *a, const char *name,
                                     const char *value, int close_after) {
    /* the bytes are static and outlive the response: no copy */
    struct MHD_Response *resp = MHD_create_response_from_buffer(a->len, (void *)a->data, MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    int bad = MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, a->ctype) != MHD_YES;
    bad |= MHD_add_response_header(resp, "Content-Security-Policy", CSP) != MHD_YES;
    bad |= MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff") != MHD_YES;
    bad |= MHD_add_response_header(resp, "Referrer-Policy", "no-referrer") != MHD_YES;
    bad |= MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache") != MHD_YES;
    if (name) bad |= MHD_add_response_header(resp, name, value) != MHD_YES;
    /* the server's keep-alive rules decide (server.c, must_close) */
    if (close_after) bad |= MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close") != MHD_YES;
    enum MHD_Result rc = bad ? MHD_NO : MHD_queue_response(c, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    return rc;
}
