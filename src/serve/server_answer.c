/* How an answer goes out (server_internal.h): the headers every answer carries (X-Request-Id, the
 * state key, CORS, Vary, Clef-Warning, Retry-After, Allow, Connection: close when the connection
 * ends), gzip when the client takes it, error bodies, the engine's result, and the CORS preflight. */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "base/buf.h"
#include "base/json.h"
#include "serve/http_extras.h"
#include "serve/server_internal.h"

/* Whether this answer ends its connection (then it says Connection: close and MHD closes). */
int clef_srv_must_close(const req *r) {
    const clef_server *s = r->srv;
    return s->cfg.keepalive_timeout_s <= 0 || r->nth == 0 || r->nth >= s->cfg.keepalive_requests ||
           r->client_close || r->body_pending || atomic_load(&s->shutting) ||
           atomic_load(&s->draining); /* a kept-alive client then reconnects, to a replica that stays */
}

enum MHD_Result clef_srv_send_bytes(req *r, int status, const char *ctype, const char *body, size_t len) {
    const clef_server *s = r->srv;
    clef_buf gz;
    clef_buf_init(&gz);
    int zipped = r->gzip_ok && s->cfg.gzip_min && len >= s->cfg.gzip_min && clef_gzip(body, len, &gz) == 0;
    struct MHD_Response *resp = zipped ? MHD_create_response_from_buffer(gz.len, gz.data, MHD_RESPMEM_MUST_COPY)
                                       : MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    size_t out_len = zipped ? gz.len : len;
    clef_buf_free(&gz);
    if (!resp) return MHD_NO;
    if (ctype) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    MHD_add_response_header(resp, "X-Request-Id", r->id);
    if (r->state_key[0]) MHD_add_response_header(resp, "X-Clef-State-Key", r->state_key);
    if (zipped) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_ENCODING, "gzip");
    if (s->cfg.gzip_min) MHD_add_response_header(resp, MHD_HTTP_HEADER_VARY, r->cors ? "Accept-Encoding, Origin" : "Accept-Encoding");
    if (r->cors) {
        MHD_add_response_header(resp, "Access-Control-Allow-Origin", s->cfg.cors_origin);
        MHD_add_response_header(resp, "Access-Control-Expose-Headers", CLEF_CORS_EXPOSE);
    }
    /* one Clef-Warning per line of clef_result.warnings (printable ASCII: decision/lint.h) */
    for (const char *w = r->have_res ? r->res.warnings : NULL, *nl; w && (nl = strchr(w, '\n')); w = nl + 1) {
        char line[512];
        snprintf(line, sizeof line, "%.*s", (int)(nl - w), w);
        MHD_add_response_header(resp, "Clef-Warning", line);
    }
    if (status == 429 || status == 503) MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    if (status == 401) MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (r->coded_body) MHD_add_response_header(resp, MHD_HTTP_HEADER_ACCEPT_ENCODING, "identity"); /* RFC 9110 15.5.16 */
    if (status == 405)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, r->decide || !strcmp(r->route, ROUTE_DECIDE) ? "POST" : "GET, HEAD");
    /* keep-alive unless clef_srv_must_close: the next request's head goes through the guard's strict checks
     * all the same (http_guard.h says what libmicrohttpd would let through) */
    if (clef_srv_must_close(r)) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result rc = MHD_queue_response(r->conn, (unsigned)status, resp);
    MHD_destroy_response(resp);
    r->status = status;
    r->bytes_out = strcmp(r->method, MHD_HTTP_METHOD_HEAD) ? out_len : 0; /* HEAD: no body goes out */
    atomic_store(&r->state, R_ANSWERED);
    return rc;
}

/* The message may quote what the client sent (a path, a Content-Type), which need not be UTF-8:
 * clef_json_render_string_utf8 keeps the body valid UTF-8 JSON all the same. */
enum MHD_Result clef_srv_send_error(req *r, int status, const char *type, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    clef_buf b;
    clef_buf_init(&b);
    clef_json_render_error(&b, type, msg);
    snprintf(r->outcome, sizeof r->outcome, "%s", type);
    enum MHD_Result rc = b.oom ? MHD_NO : clef_srv_send_bytes(r, status, "application/json", b.data, b.len);
    clef_buf_free(&b);
    return rc;
}

enum MHD_Result clef_srv_send_result(req *r) {
    clef_result *res = &r->res;
    snprintf(r->outcome, sizeof r->outcome, "%s", res->error_type ? res->error_type : "ok");
    if (res->input_tokens > 0) r->tokens = res->input_tokens;
    int status = res->http_status ? res->http_status : (res->error_type ? 500 : 200);
    if (!res->body) return clef_srv_send_error(r, 500, "OutOfMemory", "no answer could be built");
    return clef_srv_send_bytes(r, status, "application/json", res->body, res->body_len);
}

/* A CORS preflight (OPTIONS with Origin, --cors-origin set): 204 with the allowed methods and
 * headers for the allowed origin, 403 for another. */
enum MHD_Result clef_srv_answer_preflight(clef_server *s, req *r) {
    r->route = "preflight";
    if (!r->cors) return clef_srv_send_error(r, 403, "Forbidden", "origin not allowed (--cors-origin)");
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, "X-Request-Id", r->id);
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", s->cfg.cors_origin);
    MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, HEAD, POST, OPTIONS");
    MHD_add_response_header(resp, "Access-Control-Allow-Headers", "Content-Type, Authorization, X-Request-Id");
    MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_VARY, "Origin");
    if (clef_srv_must_close(r)) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result rc = MHD_queue_response(r->conn, 204, resp);
    MHD_destroy_response(resp);
    r->status = 204;
    snprintf(r->outcome, sizeof r->outcome, "ok");
    atomic_store(&r->state, R_ANSWERED);
    return rc;
}
