/* The GET pages (server_internal.h): /health, /livez, /readyz (docs/serving.md "Lifecycle"),
 * /metrics, /v1/models and /openapi.json (openapi.c). The playground's files: playground.c. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "base/buf.h"
#include "base/json.h"
#include "serve/metrics.h"
#include "serve/server_internal.h"

enum MHD_Result clef_srv_answer_get(clef_server *s, req *r, const char *url) {
    clef_buf b;
    clef_buf_init(&b);
    enum MHD_Result rc;
    if (!strcmp(url, "/health")) { /* 503 from the signal on, drain included */
        int ready = atomic_load(&s->ready), shutting = atomic_load(&s->shutting) || atomic_load(&s->draining);
        const char *st = shutting ? "shutting_down" : ready ? "ok" : "loading";
        clef_buf_printf(&b, "{\"status\":\"%s\"}", st);
        snprintf(r->outcome, sizeof r->outcome, "%s", st);
        rc = clef_srv_send_bytes(r, ready && !shutting ? 200 : 503, "application/json", b.data, b.len);
    } else if (!strcmp(url, "/livez")) { /* the process answers: loading, draining, shutting down alike */
        clef_buf_puts(&b, "{\"status\":\"alive\"}");
        snprintf(r->outcome, sizeof r->outcome, "ok");
        rc = clef_srv_send_bytes(r, 200, "application/json", b.data, b.len);
    } else if (!strcmp(url, "/readyz")) { /* send traffic here? (docs/serving.md "Lifecycle") */
        const char *st = "ready", *why = "the model is loaded and the server takes requests";
        if (atomic_load(&s->shutting)) st = "shutting_down", why = "the server is shutting down: no new connections";
        else if (atomic_load(&s->draining))
            st = "draining", why = "the server was told to stop: it still answers for --drain-delay, then closes its listener";
        else if (!atomic_load(&s->ready)) st = "loading", why = "the model is still loading";
        clef_buf_printf(&b, "{\"status\":\"%s\",\"message\":\"%s\"}", st, why);
        snprintf(r->outcome, sizeof r->outcome, "%s", st);
        rc = clef_srv_send_bytes(r, strcmp(st, "ready") ? 503 : 200, "application/json", b.data, b.len);
    } else if (!strcmp(url, "/metrics")) {
        pthread_rwlock_rdlock(&s->gate);
        size_t depth = s->sched ? clef_sched_depth(s->sched) : 0;
        pthread_rwlock_unlock(&s->gate);
        clef_metrics_render(s->metrics, &b, depth, s->cfg.queue_len, (long)atomic_load(&s->live) - 1,
                            atomic_load(&s->ready) && !atomic_load(&s->shutting) && !atomic_load(&s->draining));
        clef_buf_printf(&b, "# HELP clef_connections_accepted_total TCP connections accepted\n"
                            "# TYPE clef_connections_accepted_total counter\nclef_connections_accepted_total %lu\n",
                        clef_guard_accepted(s->guard));
        if (atomic_load(&s->ready)) {
            clef_cache_info ci;
            clef_engine_cache_info(s->engine, &ci);
            clef_metrics_render_cache(&b, &ci);
            clef_memory_info mi;
            clef_engine_memory_info(s->engine, &mi);
            clef_metrics_render_memory(&b, &mi);
        }
        snprintf(r->outcome, sizeof r->outcome, "ok");
        rc = b.oom ? MHD_NO : clef_srv_send_bytes(r, 200, "text/plain; version=0.0.4; charset=utf-8", b.data, b.len);
    } else if (!strcmp(url, "/v1/models")) {
        clef_buf_puts(&b, "{\"object\":\"list\",\"data\":[{\"id\":");
        clef_json_render_string_utf8(&b, s->cfg.model_id, strlen(s->cfg.model_id));
        clef_buf_printf(&b, ",\"object\":\"model\",\"owned_by\":\"cloudflare\",\"ready\":%s}]}",
                        atomic_load(&s->ready) ? "true" : "false");
        snprintf(r->outcome, sizeof r->outcome, "ok");
        rc = b.oom ? MHD_NO : clef_srv_send_bytes(r, 200, "application/json", b.data, b.len);
    } else { /* /openapi.json */
        snprintf(r->outcome, sizeof r->outcome, "ok");
        rc = clef_srv_send_bytes(r, 200, "application/json", clef_openapi_json, strlen(clef_openapi_json));
    }
    clef_buf_free(&b);
    return rc;
}
