/* See host_check.h. */
#include "serve/host_check.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define NAME_MAX_LEN 255 /* a DNS name's longest text; a longer Host matches nothing */

int clef_host_is_loopback(const char *addr) {
    if (!addr) return 0;
    if (!strcasecmp(addr, "localhost")) return 1;
    struct in_addr a4;
    if (inet_pton(AF_INET, addr, &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
    char tmp[64];
    size_t n = strlen(addr);
    if (n >= 2 && addr[0] == '[' && addr[n - 1] == ']' && n - 2 < sizeof tmp) { /* [::1] */
        memcpy(tmp, addr + 1, n - 2);
        tmp[n - 2] = 0;
        addr = tmp;
    }
    struct in6_addr a6;
    if (inet_pton(AF_INET6, addr, &a6) == 1)
        return IN6_IS_ADDR_LOOPBACK(&a6) || (IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127);
    return 0;
}

/* One entry or Host name, normalized for comparing: brackets off an IPv6 address, one trailing dot
 * off a name. Returns its length in out (0: not a valid host text). */
static size_t host_part(const char *s, size_t n, int strip_port, char *out, size_t cap) {
    const char *b = s, *e = s + n;
    if (n && s[0] == '[') { /* [v6] or [v6]:port */
        const char *close = memchr(s, ']', n);
        if (!close) return 0;
        const char *after = close + 1;
        if (after != e && !(strip_port && *after == ':')) return 0;
        for (const char *p = after + (after != e); p < e; p++)
            if (*p < '0' || *p > '9') return 0;
        b = s + 1;
        e = close;
    } else {
        const char *colon = memchr(s, ':', n);
        if (colon && memchr(colon + 1, ':', (size_t)(e - colon - 1))) {
            if (strip_port) return 0; /* an unbracketed IPv6 address is not a Host value */
        } else if (colon) {
            if (!strip_port) return 0; /* no ports in the list */
            for (const char *p = colon + 1; p < e; p++)
                if (*p < '0' || *p > '9') return 0;
            e = colon;
        }
        if (e > b && e[-1] == '.' && e - b > 1) e--; /* "localhost." is localhost */
    }
    size_t len = (size_t)(e - b);
    if (!len || len >= cap || len > NAME_MAX_LEN) return 0;
    for (const char *p = b; p < e; p++) /* letters, digits, - . _ and : (IPv6); no spaces or controls */
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' ||
              *p == '.' || *p == '_' || *p == ':' || (*p == '*' && len == 1)))
            return 0;
    memcpy(out, b, len);
    out[len] = 0;
    if (memchr(out, ':', len)) { /* IPv6: compare the canonical text ("0:0::1" is "::1") */
        struct in6_addr a6;
        if (inet_pton(AF_INET6, out, &a6) != 1 || !inet_ntop(AF_INET6, &a6, out, (socklen_t)cap)) return 0;
        len = strlen(out);
    }
    return len;
}

/* Calls fn on each entry of the list (trimmed); stops at the first that returns non-zero. */
static int each_entry(const char *list, int (*fn)(const char *e, size_t n, void *ctx), void *ctx) {
    const char *p = list;
    for (;;) {
        const char *c = strchr(p, ',');
        const char *e = c ? c : p + strlen(p);
        const char *b = p;
        while (b < e && (*b == ' ' || *b == '\t')) b++;
        const char *t = e;
        while (t > b && (t[-1] == ' ' || t[-1] == '\t')) t--;
        int rc = fn(b, (size_t)(t - b), ctx);
        if (rc) return rc;
        if (!c) return 0;
        p = c + 1;
    }
}

typedef struct {
    char *err;
    size_t err_len;
} check_ctx;

static int check_entry(const char *e, size_t n, void *ctx) {
    check_ctx *c = ctx;
    char norm[NAME_MAX_LEN + 2];
    const char *name = e;
    size_t nn = n;
    if (n > 1 && e[0] == '.') { /* .domain */
        name++;
        nn--;
    }
    if (!n || !host_part(name, nn, 0, norm, sizeof norm)) {
        snprintf(c->err, c->err_len, "--allowed-hosts: '%.*s' is not a host name, an address, .domain or * "
                 "(comma-separated, no ports)", (int)(n > 80 ? 80 : n), e);
        return -1;
    }
    return 0;
}

int clef_host_list_check(const char *list, char *err, size_t err_len) {
    if (!list) return 0;
    check_ctx c = {err, err_len};
    return each_entry(list, check_entry, &c) ? -1 : 0;
}

typedef struct {
    const char *host; /* normalized */
    size_t len;
} match_ctx;

static int match_entry(const char *e, size_t n, void *ctx) {
    const match_ctx *m = ctx;
    char norm[NAME_MAX_LEN + 2];
    if (n == 1 && e[0] == '*') return 1;
    int domain = n > 1 && e[0] == '.';
    size_t nl = host_part(e + domain, n - (size_t)domain, 0, norm, sizeof norm);
    if (!nl) return 0;
    if (nl == m->len && !strcasecmp(norm, m->host)) return 1;
    /* .domain: any name that ends with ".domain" */
    return domain && m->len > nl && m->host[m->len - nl - 1] == '.' && !strcasecmp(m->host + m->len - nl, norm);
}

int clef_host_allowed(const char *list, const char *host) {
    if (!list || !host) return 1;
    char norm[NAME_MAX_LEN + 2];
    size_t len = host_part(host, strlen(host), 1, norm, sizeof norm);
    if (!len || (len == 1 && norm[0] == '*')) return 0;
    match_ctx m = {norm, len};
    return each_entry(list, match_entry, &m) == 1;
}
