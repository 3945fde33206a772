/* The human log format (log_text.h). The fields are the JSON the log calls already build, read with
 * a scanner over top-level "key":value pairs (strings, numbers, literals, nested objects/arrays kept
 * as their JSON text): no allocation, safe on any input (a line it cannot read is shown as it is). */
#include "serve/log_text.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

typedef struct {
    char *p;
    size_t cap, len;
} sink;

static void put(sink *s, const char *b, size_t n) {
    for (size_t i = 0; i < n && s->len + 1 < s->cap; i++) s->p[s->len++] = b[i];
}

static void puts_(sink *s, const char *b) { put(s, b, strlen(b)); }

/* The end of the JSON value starting at v (a string, or a run up to the next top-level ','). */
static size_t value_end(const char *f, size_t i, size_t n) {
    if (i < n && f[i] == '"') {
        for (i++; i < n; i++) {
            if (f[i] == '\\') i++;
            else if (f[i] == '"') return i + 1;
        }
        return n;
    }
    int depth = 0, in_str = 0;
    for (; i < n; i++) {
        char c = f[i];
        if (in_str) {
            if (c == '\\') i++;
            else if (c == '"') in_str = 0;
        } else if (c == '"') in_str = 1;
        else if (c == '{' || c == '[') depth++;
        else if (c == '}' || c == ']') depth--;
        else if (c == ',' && depth <= 0) return i;
    }
    return n;
}

/* A JSON string's content without its quotes, when it needs no quoting in text (no space, quote,
 * backslash or '='); else the JSON text as it is. */
static void put_value(sink *s, const char *v, size_t n) {
    if (n >= 2 && v[0] == '"' && v[n - 1] == '"') {
        int plain = n > 2;
        for (size_t i = 1; i + 1 < n; i++)
            if (v[i] == ' ' || v[i] == '\\' || v[i] == '"' || v[i] == '=') plain = 0;
        if (plain) {
            put(s, v + 1, n - 2);
            return;
        }
    }
    put(s, v, n);
}

/* The value of key in fields as raw JSON text (v, vn), or 0 when absent. */
static int field(const char *f, size_t n, const char *key, const char **v, size_t *vn) {
    size_t kl = strlen(key), i = 0;
    while (i < n) {
        if (f[i] != '"') return 0;
        size_t k_end = value_end(f, i, n);
        if (k_end >= n || f[k_end] != ':') return 0;
        size_t v_end = value_end(f, k_end + 1, n);
        if (k_end - i == kl + 2 && !memcmp(f + i + 1, key, kl)) {
            *v = f + k_end + 1;
            *vn = v_end - (k_end + 1);
            return 1;
        }
        i = v_end + 1;
    }
    return 0;
}

size_t clef_log_text_render(char *out, size_t cap, double ts, const char *level, const char *fields, size_t n) {
    sink s = {out, cap, 0};
    if (!cap) return 0;
    time_t t = (time_t)ts;
    struct tm tm;
    char head[64];
    if (gmtime_r(&t, &tm)) snprintf(head, sizeof head, "%02d:%02d:%02d ", tm.tm_hour, tm.tm_min, tm.tm_sec);
    else snprintf(head, sizeof head, "--:--:-- ");
    puts_(&s, head);
    char lv[16];
    snprintf(lv, sizeof lv, "%-5s ", level ? level : "info");
    puts_(&s, lv);
    const char *ev = NULL, *host = NULL, *port = NULL;
    size_t ev_n = 0, host_n = 0, port_n = 0;
    int has_ev = field(fields, n, "event", &ev, &ev_n);
    if (has_ev && ev_n == 11 && !memcmp(ev, "\"listening\"", 11) && field(fields, n, "host", &host, &host_n) &&
        field(fields, n, "port", &port, &port_n)) {
        puts_(&s, "listening on http://");
        int v6 = memchr(host, ':', host_n) != NULL; /* [::1]:8080 */
        if (v6) puts_(&s, "[");
        put_value(&s, host, host_n);
        if (v6) puts_(&s, "]");
        puts_(&s, ":");
        put_value(&s, port, port_n);
    } else {
        if (has_ev) put_value(&s, ev, ev_n);
        size_t i = 0;
        while (i < n) {
            if (fields[i] != '"') { /* not the fields the log calls build: shown as they are */
                puts_(&s, " ");
                put(&s, fields + i, n - i);
                break;
            }
            size_t k_end = value_end(fields, i, n);
            if (k_end >= n || fields[k_end] != ':') {
                puts_(&s, " ");
                put(&s, fields + i, n - i);
                break;
            }
            size_t v_end = value_end(fields, k_end + 1, n);
            if (!(k_end - i == 7 && !memcmp(fields + i, "\"event\"", 7))) {
                puts_(&s, " ");
                put(&s, fields + i + 1, k_end - i - 2);
                puts_(&s, "=");
                put_value(&s, fields + k_end + 1, v_end - (k_end + 1));
            }
            i = v_end + 1;
        }
    }
    if (s.len + 1 >= cap && cap > 5) s.len = cap - 5, put(&s, "...", 3);
    if (s.len + 1 < cap) s.p[s.len++] = '\n';
    s.p[s.len] = 0;
    return s.len;
}
