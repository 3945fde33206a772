"""Hostile clients against a clef_server.Server, shared by test_hostile.py and test_keepalive.py: the
small request they send, slowloris sockets that dribble a head, the bar that /health and a POST stay
answered within 1 s beside them, and the check that no client text forged a log line."""
import json
import signal
import socket
import threading
import time

from clef_server import check, request

BODY = b'{"model":"clef-flash","state":"x","questions":{"q":{"type":"noul"}}}'
HEAD = b"POST /v1/systemone HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"


def log_lines_valid(srv, what):
    bad = []
    for line in srv.logtext().splitlines():
        if not line.startswith("{"):
            continue  # the progress bar and sanitizer reports are not log lines
        try:
            o = json.loads(line)
            if o.get("event") == "forged" or "forged" in o:
                bad.append(line)
        except ValueError:
            bad.append(line)
    check(not bad, "%s: every log line is valid JSON, none forged: %r" % (what, bad[:2]))


def answered_beside(port, socks, byte, what):
    """While every socket of socks sends byte every 0.5 s: /health and a POST answered within 1 s
    (checked; what names the crowd in the message)."""
    stop = threading.Event()

    def dribble():
        while not stop.is_set():
            for s in socks:
                try:
                    s.sendall(byte)
                except OSError:
                    pass
            stop.wait(0.5)
    th = threading.Thread(target=dribble, daemon=True)
    th.start()
    try:
        time.sleep(1.0)
        t0 = time.time()
        st, _, _ = request(port, "GET", "/health", timeout=10)
        t_health = time.time() - t0
        t0 = time.time()
        st2, _, _ = request(port, "POST", "/v1/systemone", BODY, {"Content-Type": "application/json"}, timeout=10)
        t_post = time.time() - t0
        check(st == 200 and st2 == 200 and t_health < 1.0 and t_post < 1.0,
              "with %s: /health %s in %.2fs, POST %s in %.2fs (bar: 1 s)" % (what, st, t_health, st2, t_post))
    finally:
        stop.set()
        th.join()


def test_slowloris(srv, n=256):
    """n sockets that each sent the first byte of a head and dribble the rest."""
    socks = []
    for _ in range(n):
        try:
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
            s.sendall(b"P")
            socks.append(s)
        except OSError:
            break
    try:
        answered_beside(srv.port, socks, b"O", "%d slowloris sockets" % len(socks))
    finally:
        for s in socks:
            s.close()


def alive_then_stopped(srv, after, log_what):
    """After a run of clients: /health answered by a live server, every log line valid, exit 0 on
    SIGTERM."""
    st, _, _ = request(srv.port, "GET", "/health")
    check(st == 200 and srv.alive(), "alive after the %s" % after)
    log_lines_valid(srv, log_what)
    rc = srv.stop(signal.SIGTERM)
    check(rc == 0, "exit 0 after SIGTERM (%s)" % rc)
