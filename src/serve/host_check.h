/* --allowed-hosts: which Host header values `clef serve` answers (docs/serving.md "Access"). A page
 * on an attacker's site can make a browser send requests to a local server under the attacker's
 * own name (DNS rebinding: the name resolves to 127.0.0.1 after the page loaded), and the browser
 * then lets the page read the answers, as same-origin. Those requests carry the attacker's name in
 * Host, so a server that answers only the names it is reached by cannot be read that way (Jupyter's
 * and Vite's protection). Pure functions, no allocation. */
#ifndef CLEF_SERVE_HOST_CHECK_H
#define CLEF_SERVE_HOST_CHECK_H

#include <stddef.h>

/* The names a server bound to a loopback address answers when --allowed-hosts is not given (the
 * bound address itself is added by the server). */
#define CLEF_LOOPBACK_HOSTS "localhost,127.0.0.1,[::1]"

/* 1 when addr (a --host value: a numeric address or "localhost") is a loopback address:
 * 127.0.0.0/8, ::1, ::ffff:127.x.x.x, or the name localhost. */
int clef_host_is_loopback(const char *addr);

/* Checks an --allowed-hosts list: comma-separated entries, spaces around them ignored; each is "*"
 * (any Host), a name or IPv4 address, an IPv6 address (bracketed or not), or ".domain" (the domain
 * and every name under it). No ports (a Host's port is never compared), no empty entries. 0 when
 * valid, else -1 with the reason in err. */
int clef_host_list_check(const char *list, char *err, size_t err_len);

/* 1 when the Host header value (name, name:port, [v6], [v6]:port; any case; one trailing dot
 * ignored) is allowed by the list (checked with clef_host_list_check; NULL: any Host). A missing
 * Host (NULL: HTTP/1.0) is allowed: a browser always sends one. */
int clef_host_allowed(const char *list, const char *host);

#endif
