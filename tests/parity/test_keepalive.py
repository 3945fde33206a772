#!/usr/bin/env python3
"""clef serve keep-alive behind the strict guard (issue #22 follow-up; docs/reliability.md), on the
tiny checkpoint over loopback, with short timeouts.

1. one connection, 20 POSTs to /v1/systemone and 20 GETs of /health: each answer byte-equal (less
   its Date line) to the same request on a fresh connection; /metrics says one accept for all;
2. pipelining: 5 requests in one send, 5 answers in order, each once; the connection stays open;
   33, 40 and 100 in one send (more than the 32 held at libmicrohttpd at once): all answered in order;
3. a bad later head (space before a colon, a bad Content-Length, an unknown Transfer-Encoding),
   sent with or after a good request: that request's answer whole, then the guard's 400/501 with
   Connection: close, then the close;
4. slowloris on the second head: closed at --header-timeout although bytes keep coming;
5. an idle keep-alive connection is closed after --keepalive-timeout (not before);
6. --keepalive-requests N: the N-th answer says Connection: close, then the close;
7. a 5,000-byte chunk extension in a later chunk, and in the first chunk of a later request: 400;
8. --keepalive-timeout 0: Connection: close on every answer, one request per connection;
9. 256 slowloris sockets, and 64 keep-alive connections dribbling their second head: /health and a
   POST still answered within 1 s (an idle keep-alive connection holds no --max-connections).
"""
import functools
import os
import re
import signal
import socket
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clef_server  # noqa: E402
from clef_server import TALLY, check, raw, request, status_of  # noqa: E402
from hostile_clients import BODY, HEAD, alive_then_stopped, answered_beside, test_slowloris  # noqa: E402

Server = functools.partial(clef_server.Server, log_dir=tempfile.mkdtemp(prefix="clef-keepalive-test-"))
request = functools.partial(request, timeout=30)


def post(rid=None, body=BODY, extra=b""):
    return (HEAD + (b"X-Request-Id: %s\r\n" % rid.encode() if rid else b"") + extra +
            b"Content-Length: %d\r\n\r\n" % len(body) + body)


def get(path, rid=None, extra=b""):
    return (b"GET %s HTTP/1.1\r\nHost: localhost\r\n" % path.encode() +
            (b"X-Request-Id: %s\r\n" % rid.encode() if rid else b"") + extra + b"\r\n")


class Conn:
    """One raw keep-alive connection that reads answers one at a time (Content-Length framing)."""

    def __init__(self, port, timeout=10):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""
        self.eof = False

    def send(self, data):
        self.s.sendall(data)

    def _fill(self, deadline):
        while True:
            left = deadline - time.time()
            if left <= 0:
                raise socket.timeout("no answer in time")
            self.s.settimeout(left)
            try:
                d = self.s.recv(65536)
            except ConnectionResetError:
                d = b""
            if not d:
                self.eof = True
                return False
            self.buf += d
            return True

    def answer(self, timeout=10):
        """The next whole answer (head + body) as bytes, or None when the server closed first."""
        deadline = time.time() + timeout
        while b"\r\n\r\n" not in self.buf:
            if self.eof or not self._fill(deadline):
                return None
        end = self.buf.index(b"\r\n\r\n") + 4
        m = re.search(rb"\r\nContent-Length: *(\d+)", self.buf[:end], re.I)
        n = int(m.group(1)) if m else 0
        while len(self.buf) < end + n:
            if self.eof or not self._fill(deadline):
                return None
        a, self.buf = self.buf[:end + n], self.buf[end + n:]
        return a

    def closed(self, timeout=5):
        """True when the server closes (EOF or reset) within timeout with nothing more sent."""
        deadline = time.time() + timeout
        try:
            while not self.eof:
                if not self._fill(deadline):
                    break
        except socket.timeout:
            return False
        except OSError:
            return True
        return self.buf == b""

    def close(self):
        self.s.close()


def norm(answer):
    """The answer less its Date line (the only part that differs between two equal requests)."""
    return re.sub(rb"\r\nDate: [^\r]*", b"", answer or b"")


def header(answer, name):
    m = re.search(rb"\r\n" + name.encode() + rb": *([^\r]*)", answer or b"", re.I)
    return m.group(1).decode() if m else None


def fresh(port, data):
    c = Conn(port)
    c.send(data)
    a = c.answer()
    c.close()
    return a


def accepted_in(metrics_answer):
    m = re.search(rb"clef_connections_accepted_total (\d+)", metrics_answer or b"")
    return int(m.group(1)) if m else None


# ---------------------------------------------------------------- 1, 2

def test_sequential(srv, n=20):
    want_post = norm(fresh(srv.port, post("ka-post")))
    want_health = norm(fresh(srv.port, get("/health", "ka-health")))
    check(status_of(want_post) == 200 and status_of(want_health) == 200,
          "fresh-connection answers are 200 (%r, %r)" % (want_post[:40], want_health[:40]))
    check(header(want_post, "Connection") is None and header(want_health, "Connection") is None,
          "keep-alive answers do not say Connection: close (%r)" % header(want_post, "Connection"))
    c = Conn(srv.port)
    c.send(get("/metrics"))
    m0 = c.answer()
    same = 0
    for i in range(n):
        c.send(post("ka-post"))
        a = c.answer()
        same += norm(a) == want_post
        c.send(get("/health", "ka-health"))
        a = c.answer()
        same += norm(a) == want_health
    c.send(get("/metrics"))
    m1 = c.answer()
    c.close()
    n0, n1 = accepted_in(m0), accepted_in(m1)
    check(same == 2 * n, "one connection, %d POSTs + %d GETs: %d of %d answers byte-equal to a fresh "
          "connection's" % (n, n, same, 2 * n))
    check(n0 is not None and n1 == n0, "one connection for all %d requests: accepted %s before, %s after" % (2 * n + 2, n0, n1))


def test_pipelining(srv):
    reqs = [get("/health", "p1"), post("p2"), get("/v1/models", "p3"), post("p4"), get("/health", "p5")]
    c = Conn(srv.port)
    c.send(b"".join(reqs))
    ids = []
    for _ in reqs:
        a = c.answer(30)
        ids.append((status_of(a), header(a, "X-Request-Id")))
    check(ids == [(200, "p%d" % k) for k in range(1, 6)], "5 pipelined requests: 5 answers in order (%s)" % ids)
    c.send(get("/health", "p6"))
    a = c.answer()
    check(header(a, "X-Request-Id") == "p6" and c.buf == b"", "after the pipeline the connection still serves (%r)" % a)
    c.close()


def test_deep_pipeline(srv, trials=6):
    """More requests in one send than the guard holds at libmicrohttpd at once (32): the rest go on as
    answers make room, with the client's side still open and after it shut its side; all answered in
    order. Before the fix, 33 such GETs stalled after 32 answers (the guard walked on only when a later
    event came), most trials."""
    bad = []
    for n in (33, 40, 100):
        for t in range(trials):
            shut = t % 2 == 1
            c = Conn(srv.port)
            c.send(b"".join(get("/health", "d%d" % k) for k in range(n)))
            if shut:
                c.s.shutdown(socket.SHUT_WR)
            got = []
            for _ in range(n):
                try:
                    a = c.answer(5)
                except socket.timeout:
                    a = None
                if a is None:
                    break
                got.append(header(a, "X-Request-Id"))
            if got != ["d%d" % k for k in range(n)]:
                bad.append((n, "shut" if shut else "open", len(got)))
            c.close()
    check(not bad, "33, 40, 100 pipelined GETs in one send, %d trials each: all answered in order (failed: "
          "n, client side, answers: %s)" % (trials, bad))


# ---------------------------------------------------------------- 3

BAD = [
    ("space before a colon", b"GET /health HTTP/1.1\r\nHost : x\r\n\r\n", 400),
    ("Content-Length: +N", HEAD + b"Content-Length: +%d\r\n\r\n" % len(BODY) + BODY, 400),
    ("Content-Length: N, N", HEAD + b"Content-Length: %d, %d\r\n\r\n" % (len(BODY), len(BODY)) + BODY, 400),
    ("Transfer-Encoding: gzip", HEAD + b"Transfer-Encoding: gzip\r\n\r\n" + BODY, 501),
    ("a TLS ClientHello", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"r" * 32, 0),
]


def test_bad_later_head(srv):
    for together in (False, True):
        for name, bad, want in BAD:
            c = Conn(srv.port)
            if together:  # in one send with a POST: the guard must wait for its answer
                c.send(post("good") + bad)
            else:
                c.send(post("good"))
            first = c.answer(30)
            if not together:
                c.send(bad)
            second = c.answer(10) if want else None
            closed = c.closed(5)
            c.close()
            ok1 = status_of(first) == 200 and header(first, "X-Request-Id") == "good" and \
                first.count(b"HTTP/1.") == 1 and header(first, "Connection") is None
            if want:
                ok2 = status_of(second) == want and (header(second, "Connection") or "").lower() == "close"
            else:
                ok2 = True  # garbage: closed without an answer
            check(ok1 and ok2 and closed,
                  "bad later head (%s, %s): the first answer whole, then %s + close (got %r / %r, closed %s)" %
                  (name, "pipelined" if together else "after the answer", want or "a close", (first or b"")[:40],
                   (second or b"")[:60], closed))


# ---------------------------------------------------------------- 4, 5

def test_later_slowloris(srv, header_timeout):
    c = Conn(srv.port, timeout=header_timeout + 10)
    c.send(get("/health"))
    c.answer()
    t0 = time.time()
    msg = b"GET /health HTTP/1.1\r\nX-Slow: " + b"a" * 1000
    closed_at, got = None, b""
    for i in range(len(msg)):
        try:
            c.s.sendall(msg[i:i + 1])
        except OSError:
            closed_at = time.time() - t0
            break
        c.s.settimeout(0.2)
        try:
            d = c.s.recv(4096)
            if not d:
                closed_at = time.time() - t0
                break
            got += d
            if status_of(got) == 408:
                closed_at = time.time() - t0
                break
        except socket.timeout:
            pass
        except OSError:
            closed_at = time.time() - t0
            break
        if time.time() - t0 > header_timeout + 8:
            break
    c.close()
    check(closed_at is not None and header_timeout - 0.5 < closed_at < header_timeout + 2,
          "a second head dribbled byte by byte is closed at --header-timeout %s, not before (after %s s, %r)" %
          (header_timeout, closed_at, got[:30]))


def test_idle(srv, keepalive_timeout):
    c = Conn(srv.port, timeout=keepalive_timeout + 10)
    c.send(get("/health"))
    c.answer()
    t0 = time.time()
    early = c.closed(keepalive_timeout - 1)
    closed = early or c.closed(4)
    dt = time.time() - t0
    c.close()
    check(not early and closed and dt < keepalive_timeout + 2,
          "an idle keep-alive connection is closed after --keepalive-timeout %s (not before; closed after %.1fs)" %
          (keepalive_timeout, dt))


# ---------------------------------------------------------------- 7

def test_later_chunk(srv):
    for size in (5000, 100000):
        ext = b";" + b"a" * size
        body = b"%x\r\n%s\r\n" % (10, BODY[:10]) + b"%x%s\r\n%s\r\n0\r\n\r\n" % (len(BODY) - 10, ext, BODY[10:])
        resp = raw(srv.port, HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + body, 8)
        check(status_of(resp) == 400 and resp.count(b"HTTP/1.") == 1,
              "a %d-byte extension in a later chunk: 400 (got %r)" % (size, resp[:60]))
    ext = b";" + b"a" * 5000
    first = b"%x%s\r\n%s\r\n0\r\n\r\n" % (len(BODY), ext, BODY)
    c = Conn(srv.port)
    c.send(get("/health", "c1"))
    a1 = c.answer()
    c.send(HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + first)
    a2 = c.answer()
    closed = c.closed(5)
    c.close()
    check(status_of(a1) == 200 and status_of(a2) == 400 and closed,
          "a 5,000-byte extension in the first chunk of a second request: 400 + close (got %r, %r)" %
          ((a1 or b"")[:20], (a2 or b"")[:60]))
    # a valid chunked POST on a kept-alive connection is answered like one with a length
    ok = b"5\r\n" + BODY[:5] + b"\r\n%x;name=v\r\n" % (len(BODY) - 5) + BODY[5:] + b"\r\n0\r\nX-T: 1\r\n\r\n"
    c = Conn(srv.port)
    c.send(HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + ok + get("/health", "after-chunked"))
    a1, a2 = c.answer(30), c.answer()
    c.close()
    check(status_of(a1) == 200 and header(a2, "X-Request-Id") == "after-chunked",
          "a valid chunked POST, then a GET, on one connection: both answered (%r, %r)" % ((a1 or b"")[:20], (a2 or b"")[:60]))


# ---------------------------------------------------------------- 6, 8

def test_max_requests(n):
    srv = Server("--keepalive-requests", str(n), "--header-timeout", "3")
    try:
        c = Conn(srv.port)
        conn_hdr = []
        for i in range(n):
            c.send(get("/health", "m%d" % i))
            a = c.answer()
            conn_hdr.append(header(a, "Connection"))
        closed = c.closed(5)
        c.close()
        check(conn_hdr == [None] * (n - 1) + ["close"] and closed,
              "--keepalive-requests %d: only the last answer says close, then the close (%s, closed %s)" %
              (n, conn_hdr, closed))
        c = Conn(srv.port)
        c.send(b"".join(get("/health", "q%d" % i) for i in range(n + 2)))
        got = []
        while True:
            a = c.answer()
            if a is None:
                break
            got.append(header(a, "X-Request-Id"))
        c.close()
        check(got == ["q%d" % i for i in range(n)], "--keepalive-requests %d, %d pipelined: %d answers (%s)" %
              (n, n + 2, n, got))
    finally:
        srv.stop(signal.SIGKILL)


def test_keepalive_off():
    srv = Server("--keepalive-timeout", "0")
    try:
        for data in (get("/health"), post(), get("/v1/models")):
            c = Conn(srv.port)
            c.send(data + get("/health", "second"))
            a = c.answer(30)
            rest = c.answer(5)
            c.close()
            check(status_of(a) == 200 and (header(a, "Connection") or "").lower() == "close" and rest is None,
                  "--keepalive-timeout 0: Connection: close and one answer per connection (%r, then %r)" %
                  ((a or b"")[:80], (rest or b"")[:40]))
    finally:
        srv.stop(signal.SIGKILL)


# ---------------------------------------------------------------- shutdown

def test_shutdown():
    srv = Server("--timeout", "6")
    idle = Conn(srv.port)
    idle.send(get("/health"))
    idle.answer()
    busy = Conn(srv.port)
    busy.send(get("/health"))
    busy.answer()
    body = post("inflight")
    busy.send(body[:-10])  # its head is in, its body not yet whole
    time.sleep(0.3)
    t0 = time.time()
    srv.p.send_signal(signal.SIGTERM)
    idle_closed = idle.closed(3)
    t_idle = time.time() - t0
    busy.send(body[-10:])
    a = busy.answer(10)
    busy_closed = busy.closed(3)
    rc = srv.stop(signal.SIGTERM, timeout=30)
    idle.close()
    busy.close()
    check(idle_closed and t_idle < 1.5, "shutdown: an idle keep-alive connection is closed promptly (%s after %.1fs)" %
          (idle_closed, t_idle))
    check(status_of(a) == 200 and header(a, "X-Request-Id") == "inflight" and
          (header(a, "Connection") or "").lower() == "close" and busy_closed,
          "shutdown: the in-flight request is answered with Connection: close, then closed (%r, closed %s)" %
          ((a or b"")[:120], busy_closed))
    stopped = [l for l in srv.logtext().splitlines() if '"event":"stopped"' in l]
    check(rc == 0 and stopped and '"unanswered":0' in stopped[0] and '"dropped":0' in stopped[0],
          "shutdown with keep-alive connections: exit %s, %s" % (rc, stopped))


# ---------------------------------------------------------------- 9

def test_slowloris_second_heads(srv, n=64):
    conns = []
    for _ in range(n):
        try:
            c = Conn(srv.port)
            c.send(get("/health"))
            c.answer()
            c.send(b"G")
            conns.append(c)
        except OSError:
            break
    try:
        answered_beside(srv.port, [c.s for c in conns], b"E", "%d keep-alive connections dribbling their second head "
                        "(--max-connections %d)" % (len(conns), n))
    finally:
        for c in conns:
            c.close()


def main():
    clef_server.need_clef()
    t_start = time.time()
    header_timeout, keepalive_timeout = 3, 3
    srv = Server("--header-timeout", str(header_timeout), "--keepalive-timeout", str(keepalive_timeout),
                   "--max-body", "256K")
    try:
        test_sequential(srv)
        test_pipelining(srv)
        test_deep_pipeline(srv)
        test_bad_later_head(srv)
        test_later_slowloris(srv, header_timeout)
        test_idle(srv, keepalive_timeout)
        test_later_chunk(srv)
        test_slowloris(srv)
        alive_then_stopped(srv, "keep-alive clients", "keep-alive")
        stopped = [l for l in srv.logtext().splitlines() if '"event":"stopped"' in l]
        check(stopped and '"unanswered":0' in stopped[0] and '"dropped":0' in stopped[0],
              "the stopped line: nothing unanswered or dropped (%s)" % stopped)
        check(not srv.sanitizer_report(), "no sanitizer report")
    finally:
        if srv.p.poll() is None:
            srv.stop(signal.SIGKILL)
    # an idle keep-alive connection holds none of --max-connections
    srv = Server("--max-connections", "64", "--header-timeout", "5")
    try:
        test_slowloris_second_heads(srv, 64)
    finally:
        srv.stop(signal.SIGKILL)
    test_max_requests(3)
    test_keepalive_off()
    test_shutdown()
    print("%d checks, %d failed (%.1fs)" % (TALLY.checks, len(TALLY.failures), time.time() - t_start))
    sys.exit(1 if TALLY.failures else 0)


if __name__ == "__main__":
    main()
