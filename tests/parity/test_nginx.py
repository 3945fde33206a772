#!/usr/bin/env python3
"""clef serve behind nginx (Debian's), on loopback: early refusals keep their status (issue #35 item 5).

nginx proxies with upstream keep-alive (proxy_http_version 1.1, Connection "", a keepalive_timeout
shorter than clef's --keepalive-timeout: docs/serving.md "Behind nginx / HAProxy") and buffers
each client body before it sends it on. clef refuses some requests from their head alone, while
nginx is still sending the body: 413 (Content-Length over --max-body: the guard), 415 (not
application/json), 404 (unknown path) and 401 (--api-key). clef must then close like nginx's own
lingering close (the answer, shutdown of its write side, the rest of the body read and dropped),
or nginx's next write meets a reset and the client gets 502 instead of the real status.

Each of the four refusals with a 10 MB body, 10 times: the real status every time, the answer's
own JSON error body. Before and after, a valid request through the same nginx is answered 200 and
byte-equal to `clef decide`. Skipped where nginx is not installed (tools/setup.sh installs it)."""
import functools
import grp
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clef_server  # noqa: E402
from clef_server import TALLY, check, decide, free_port, request, skip  # noqa: E402

TMP = tempfile.mkdtemp(prefix="clef-nginx-test-")
Clef = functools.partial(clef_server.Server, threads=1, wait="ready", log_dir=TMP)
NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None)
KEY = "nginx-test-key"
BODY = b'{"model":"clef-flash","state":"x","questions":{"q":{"type":"noul"}}}'
BIG = 10 << 20  # bytes of each refused body
TRIES = 10

class Nginx:
    """nginx with its own prefix, config, pid, logs and temp folders under TMP, in the foreground."""

    def __init__(self, upstream_port, upstream_small):
        self.prefix = os.path.join(TMP, "nginx")
        for d in ("logs", "body", "proxy", "fastcgi", "uwsgi", "scgi"):
            os.makedirs(os.path.join(self.prefix, d), exist_ok=True)
        # as root, nginx's workers would switch to nobody, who cannot write the temp folders
        user = ""
        if os.geteuid() == 0:
            user = "user %s %s;\n" % (pwd.getpwuid(os.geteuid()).pw_name, grp.getgrgid(os.getegid()).gr_name)
        for attempt in range(5):
            self.port, self.port_small = free_port(), free_port()
            conf = os.path.join(self.prefix, "nginx.conf")
            with open(conf, "w") as f:
                f.write(CONF % {"user": user, "p": self.prefix, "port": self.port, "upstream": upstream_port,
                                "port_small": self.port_small, "upstream_small": upstream_small})
            self.err = open(os.path.join(self.prefix, "logs", "stderr.log"), "ab")
            self.p = subprocess.Popen([NGINX, "-p", self.prefix + "/", "-c", conf, "-e", "logs/error.log"],
                                      stdout=self.err, stderr=self.err)
            t_end = time.time() + 20
            while time.time() < t_end and self.p.poll() is None:
                try:
                    for port in (self.port, self.port_small):
                        socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    return
                except OSError:
                    time.sleep(0.05)
            self.stop()  # the port was taken in between, or nginx refused the config: try again
        raise RuntimeError("nginx did not start: " + open(os.path.join(self.prefix, "logs", "error.log")).read())

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGQUIT)  # graceful
            try:
                self.p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.err.close()

    def error_log(self):
        return open(os.path.join(self.prefix, "logs", "error.log"), "rb").read().decode("utf-8", "replace")


# The configuration docs/serving.md recommends, on loopback. keepalive_timeout (4 s) is shorter than
# clef's --keepalive-timeout (5 s) so that nginx never sends on a connection clef is closing.
CONF = """%(user)sdaemon off;
worker_processes 1;
pid %(p)s/nginx.pid;
error_log %(p)s/logs/error.log info;
events { worker_connections 256; }
http {
    access_log %(p)s/logs/access.log;
    client_body_temp_path %(p)s/body;
    proxy_temp_path %(p)s/proxy;
    fastcgi_temp_path %(p)s/fastcgi;
    uwsgi_temp_path %(p)s/uwsgi;
    scgi_temp_path %(p)s/scgi;
    upstream clef {
        server 127.0.0.1:%(upstream)d;
        keepalive 16;
        keepalive_timeout 4s;
    }
    upstream clef_small {
        server 127.0.0.1:%(upstream_small)d;
        keepalive 16;
        keepalive_timeout 4s;
    }
    proxy_http_version 1.1;
    proxy_set_header Connection "";
    proxy_set_header Host $http_host;
    proxy_read_timeout 120s;
    proxy_send_timeout 120s;
    client_max_body_size 20m;
    server {
        listen 127.0.0.1:%(port)d;
        location / { proxy_pass http://clef; }
    }
    server {
        listen 127.0.0.1:%(port_small)d;
        location / { proxy_pass http://clef_small; }
    }
}
"""


def main():
    clef_server.need_clef()
    if not NGINX:
        skip("skip: no nginx (Debian's nginx package; tools/setup.sh installs it)")
    t_start = time.time()
    expected = decide(BODY)
    # two upstreams: --max-body 1M refuses the 10 MB body by its Content-Length (the guard's 413);
    # the default 16M lets the other refusals (415, 404, 401: libmicrohttpd's handler) come from its head
    clef = Clef("--api-key", KEY, "--keepalive-timeout", "5")
    clef_small = Clef("--max-body", "1M", "--api-key", KEY, "--keepalive-timeout", "5")
    nginx = None
    try:
        nginx = Nginx(clef.port, clef_small.port)
        auth = {"Authorization": "Bearer " + KEY}
        json_auth = dict(auth, **{"Content-Type": "application/json"})
        for port in (nginx.port, nginx.port_small):
            st, _, data = request(port, "POST", "/v1/systemone", BODY, json_auth)
            check(st == 200 and data == expected, "a valid request through nginx: 200 byte-equal to decide (%s %r)" % (st, data[:80]))
        big = b"x" * BIG
        cases = [  # status, error type, nginx port, path, headers
            (413, "RequestTooLong", nginx.port_small, "/v1/systemone", json_auth),
            (415, "UnsupportedMediaType", nginx.port, "/v1/systemone", dict(auth, **{"Content-Type": "text/plain"})),
            (404, "NotFound", nginx.port, "/no-such-route", json_auth),
            (401, "Unauthorized", nginx.port, "/v1/systemone", {"Content-Type": "application/json"}),
        ]
        for status, etype, port, path, headers in cases:
            got = []
            for _ in range(TRIES):
                try:
                    st, _, data = request(port, "POST", path, big, headers)
                    try:
                        typ = json.loads(data)["error"]["type"]
                    except (ValueError, KeyError, TypeError):
                        typ = None
                except OSError as e:
                    st, typ = repr(e), None
                got.append((st, typ))
            right = sum(1 for st, typ in got if st == status and typ == etype)
            print("%d %s through nginx, %d MB bodies: %d of %d" % (status, etype, BIG >> 20, right, TRIES), flush=True)
            check(right == TRIES, "%d through nginx %d of %d times (got %s)" % (status, right, TRIES,
                                                                                sorted(set(map(str, got)))))
        for port in (nginx.port, nginx.port_small):
            st, _, data = request(port, "POST", "/v1/systemone", BODY, json_auth)
            check(st == 200 and data == expected, "a valid request after the refusals: 200 byte-equal (%s)" % st)
        resets = [ln for ln in nginx.error_log().splitlines() if "reset by peer" in ln or "prematurely closed" in ln
                  or "Broken pipe" in ln]
        check(not resets, "nginx saw no reset or broken pipe from clef: %r" % resets[:2])
    finally:
        if nginx:
            nginx.stop()
        for c in (clef, clef_small):
            rc = c.stop()
            check(rc == 0, "clef exits 0 after SIGTERM (%s)" % rc)
            check(not c.sanitizer_report(), "no sanitizer report")
    print("%d checks, %d failed (%.1fs)" % (TALLY.checks, len(TALLY.failures), time.time() - t_start))
    if not TALLY.failures:
        shutil.rmtree(TMP, ignore_errors=True)
    sys.exit(1 if TALLY.failures else 0)


if __name__ == "__main__":
    main()
