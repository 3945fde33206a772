/* The web playground served by `clef serve` at / (docs/serving.md, "The playground"). Its files
 * are the files in web/, compiled into the binary as byte arrays at build time (the Makefile writes
 * $(BUILD)/gen/serve/web_assets.h) and sent exactly as they are in the source tree, and
 * /question_types.js, the list of question types written from base/question_type.h. */
#ifndef CLEF_SERVE_PLAYGROUND_H
#define CLEF_SERVE_PLAYGROUND_H

#include <microhttpd.h>
#include <stddef.h>

typedef struct clef_asset {
    const char *path;  /* the URL path it answers: "/", "/playground.js", "/playground.css", "/question_types.js" */
    const char *ctype; /* its Content-Type */
    const unsigned char *data;
    size_t len;
} clef_asset;

/* The asset a GET of url answers; NULL when url names none (an exact match, no query string:
 * MHD hands the handler the path without it). */
const clef_asset *clef_playground_find(const char *url);

/* Queues the 200 answer for a (its bytes, Content-Type, the Content-Security-Policy, nosniff and
 * no-referrer headers, and header name: value when name is not NULL, e.g. the request id;
 * Connection: close when close_after). */
enum MHD_Result clef_playground_send(struct MHD_Connection *c, const clef_asset *a, const char *name,
                                     const char *value, int close_after);

#endif
