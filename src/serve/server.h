/* The HTTP server behind `clef serve` (libmicrohttpd, internal polling threads, connections
 * suspended while their request waits for the model). Routes, statuses and limits:
 * docs/serving.md.
 *
 * Life cycle: clef_server_start (binds, answers 503 on the model routes; /livez 200), clef_server_attach
 * (the engine is loaded and warmed up: starts the scheduler, /health and /readyz turn 200),
 * clef_server_drain (optional: /readyz 503, requests still answered), clef_server_shutdown (stops
 * accepting, runs what is queued, answers it, stops). */
#ifndef CLEF_SERVE_SERVER_H
#define CLEF_SERVE_SERVER_H

#include <stddef.h>

#include "clef.h"

/* The body cap's default: serve's --max-body, and the longest line `clef batch` and `clef state-key
 * --jsonl` read (--max-line), so a request one accepts the others accept. */
#define CLEF_SERVE_MAX_BODY_DEFAULT ((size_t)16 << 20)
#define CLEF_SERVE_HOST_DEFAULT "127.0.0.1"   /* --host's default, also when the config leaves it NULL */
#define CLEF_SERVE_MODEL_ID_DEFAULT "clef-flash" /* --model-id's default, the same */
/* --timeout's default, also the shutdown's budget when the config leaves it 0 */
#define CLEF_SERVE_IO_TIMEOUT_DEFAULT 30u

/* Every field's default is set once, in clef_server_config_default (server.c); `clef serve --help`
 * prints the values it sets (cli_format_default), docs/cli.md and docs/serving.md show them. */
typedef struct clef_server_config {
    const char *host;        /* numeric IPv4/IPv6 address or "localhost" */
    int port;                /* 0 = any free port (see clef_server_port) */
    int http_threads;        /* MHD thread pool size; they also run clef_job_prepare */
    size_t max_body;         /* bytes (CLEF_SERVE_MAX_BODY_DEFAULT) */
    size_t max_header;       /* per-connection memory for the request line and headers */
    unsigned max_connections;/* connections being served */
    unsigned io_timeout_s;   /* idle/slow client timeout */
    double deadline_s;       /* most time a request may wait in the queue (0 = none) */
    size_t queue_len;        /* requests waiting for the model */
    size_t max_tokens;       /* refuse (413) prepared requests over this many tokens; 0 = no limit */
    size_t batch_tokens;     /* token budget of one forward */
    size_t max_batch;        /* most requests in one forward */
    double batch_wait_s;     /* a forward not full waits for more requests at most this long, and at
                                most 3% of the previous forward (0 = never; scheduler.h) */
    const char *model_id;    /* for /v1/models */
    int log_requests;        /* one JSON line per request on stderr */
    int no_ui;               /* 1: no web playground at / (404 there, as any unknown path) */
    /* hostile clients (docs/reliability.md) */
    double header_timeout_s; /* accept (a later head: its first byte) -> complete request head, else closed (408 if bytes came) */
    double body_timeout_s;   /* complete head -> complete body, else closed (0 = none) */
    unsigned max_pending;    /* connections still sending their head (0 = 4 x max_connections) */
    unsigned client_share;   /* of those, per client address (a new one closes the oldest) */
    int prepare_threads;     /* threads that parse, tokenize and decode images (0 = http_threads) */
    double keepalive_timeout_s; /* an idle connection between requests is closed after this (0 = Connection: close on every answer) */
    unsigned keepalive_requests;/* requests per connection; the answer to the last says Connection: close */
    /* access (docs/serving.md) */
    const char *api_key;     /* NULL = no authentication; else "Authorization: Bearer KEY" or 401 */
    int auth_all;            /* 1: /health and /metrics need the key too (default: they do not) */
    const char *cors_origin; /* NULL = no CORS headers; an origin or "*" */
    const char *allowed_hosts; /* Host values answered, else 421 (host_check.h); NULL = the default: loopback
                                  names when host is a loopback address, else any */
    size_t gzip_min;         /* answers of at least this many bytes are gzipped when asked (0 = never) */
    /* tests only ($CLEF_SERVE_TEST_SUBMIT_DELAY_MS): a prepare thread waits this long after queueing a
     * request, so the batch can answer it first (the hand-off's ownership; test_hostile.py) */
    unsigned test_submit_delay_ms;
} clef_server_config;

void clef_server_config_default(clef_server_config *c);

typedef struct clef_server clef_server;

/* Binds and starts answering. NULL with one clear line in err when it cannot. */
clef_server *clef_server_start(const clef_server_config *c, char *err, size_t err_len);
int clef_server_port(const clef_server *s);
/* Hands over a loaded, warmed-up engine: POST /v1/systemone and /health go live. -1 when the
 * scheduler cannot start. The engine stays the caller's (close it after clef_server_shutdown). */
int clef_server_attach(clef_server *s, clef_engine *e);
/* The first step of a stop with --drain-delay: /readyz (and /health) turn 503 at once so that a
 * balancer takes the server out, while requests are still taken and answered (each answer says
 * Connection: close); the caller waits the delay, then calls clef_server_shutdown. */
void clef_server_drain(clef_server *s, double delay_s);
/* Stops accepting, answers 503 to new requests on open connections, runs and answers everything
 * queued, then stops the HTTP threads and frees the server. */
void clef_server_shutdown(clef_server *s);

/* The OpenAPI 3 document served at /openapi.json. */
extern const char clef_openapi_json[];

/* Writes one JSON log line ({"ts":..,"level":"info", then the preformatted fields}) to stderr
 * under the log lock. Fields that carry outside text must be rendered with clef_json_render_string_utf8. */
void clef_log_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The same with a level: "debug", "info", "warn", "error" or "fatal". */
void clef_log_linel(const char *level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* 1: the log lines above are written in the human format of serve/log_text.h (--log-format text);
 * 0 (the default): JSON. Set before the server starts. */
void clef_log_set_text(int on);
/* A fatal start-up error as one JSON log line: {"level":"fatal","event":"fatal","message":msg}. */
void clef_log_fatal(const char *msg);

#endif
