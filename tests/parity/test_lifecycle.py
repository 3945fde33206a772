#!/usr/bin/env python3
"""clef serve's lifecycle for orchestrators (issue #33 item 2), on the tiny checkpoint over loopback.

1. Loading (CLEF_SERVE_TEST_LOAD_DELAY_MS holds it open): /livez 200 at once, /readyz 503
   {"status":"loading"} with a message, /health 503; once loaded /readyz 200 {"status":"ready"}.
   /openapi.json names both; /metrics has the scaling metrics (queue depth, in flight, batch
   occupancy and its limits), occupancy above 0 right after a forward.
2. --drain-delay 3: on SIGTERM /readyz turns 503 {"status":"draining"} at once (/livez stays 200,
   /health 503, clef_ready 0) while POSTs are still answered 200 byte-equal to `clef decide`, each
   with Connection: close; then the listener closes (connections refused), a request whose body was
   still arriving is answered, the process exits 0 and its `stopped` line says 0 unanswered, 0
   dropped. A second SIGTERM cuts a long delay short. Without the flag the listener closes at once.
3. Rolling restart: 3 servers with --drain-delay 3 behind a router that polls /readyz every 0.5 s
   (what a Kubernetes Service's endpoints or HAProxy's health check do); 16 client threads retry on
   503 / 429 with Retry-After and treat anything else as a failure; one server is SIGTERMed and a new
   one started in its place: no failed request, every answer byte-equal, `stopped` 0 unanswered.
CLEF_BUILD ending in build-asan waits longer. CLEF_TEST_DRAIN_DELAY sets the rolling restart's
--drain-delay (default 3; 0 shows the failures a stop without a drain causes)."""
import functools
import json
import os
import random
import re
import signal
import socket
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clef_server  # noqa: E402
from clef_server import ROOT, START_S, TALLY, check, decide, metric  # noqa: E402

TMP = tempfile.mkdtemp(prefix="clef-lifecycle-test-")
Server = functools.partial(clef_server.Server, threads=1, wait="ready", log_dir=TMP)
request = functools.partial(clef_server.request, timeout=30)
BODY = b'{"model":"clef-flash","state":"lifecycle","questions":{"q":{"type":"noul"}}}'
JSON = {"Content-Type": "application/json"}
POLL_S = 0.5  # the router's /readyz period (Kubernetes probes: periodSeconds >= 1; HAProxy's inter: 2 s)

def refused(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return False
    except ConnectionRefusedError:
        return True
    except OSError:
        return False


def documented_metric(name):
    """Whether docs/serving.md's metrics table names the metric: in full, or as `_suffix` after a
    full name in the same cell (`clef_state_cache_hits_total`, `_misses_total`)."""
    text = open(os.path.join(ROOT, "docs", "serving.md"), encoding="utf-8").read()
    section = text.split("### Metrics", 1)[-1].split("\n## ", 1)[0]
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        names = [re.sub(r"\{.*\}", "", n) for n in re.findall(r"`([^`]+)`", line.split("|")[1])]
        full = [n for n in names if not n.startswith("_")]
        if name in full:
            return True
        for a in (n for n in names if n.startswith("_")):
            if name.endswith(a) and any(f.startswith(name[:-len(a)] + "_") for f in full):
                return True
    return False


# ---------------------------------------------------------------- 1. loading, routes, metrics

def test_loading(expected):
    srv = Server(wait=None, env={"CLEF_SERVE_TEST_LOAD_DELAY_MS": "3000"})
    try:
        st, _, data = request(srv.port, "GET", "/livez")
        check(st == 200 and json.loads(data) == {"status": "alive"}, "/livez 200 while loading (%s %r)" % (st, data))
        st, hd, data = request(srv.port, "GET", "/readyz")
        body = json.loads(data) if data.startswith(b"{") else {}
        check(st == 503 and body.get("status") == "loading" and "loading" in body.get("message", ""),
              "/readyz 503 loading, saying why (%s %r)" % (st, data))
        st, _, _ = request(srv.port, "GET", "/health")
        check(st == 503, "/health 503 while loading (%s)" % st)
        srv.wait_ready(time.time() + START_S)
        st, _, data = request(srv.port, "GET", "/readyz")
        check(st == 200 and json.loads(data).get("status") == "ready", "/readyz 200 once loaded (%s %r)" % (st, data))
        st, _, _ = request(srv.port, "GET", "/livez")
        check(st == 200, "/livez 200 once loaded")
        # the probes answer whatever the Host (a pod's address), with --allowed-hosts' default on loopback
        st, _, _ = request(srv.port, "GET", "/readyz", headers={"Host": "10.1.2.3:8080"})
        check(st == 200, "/readyz answers a pod-address Host (%s)" % st)
        st, _, data = request(srv.port, "GET", "/openapi.json")
        doc = json.loads(data)
        for path, codes in (("/livez", ["200"]), ("/readyz", ["200", "503"])):
            got = doc["paths"].get(path, {}).get("get", {}).get("responses", {})
            check(all(c in got for c in codes), "openapi documents %s %s (%s)" % (path, codes, sorted(got)))
        st, _, data = request(srv.port, "POST", "/v1/systemone", BODY, JSON)
        check(st == 200 and data == expected, "answered byte-equal to decide (%s)" % st)
        text = request(srv.port, "GET", "/metrics")[2].decode()
        for name in ("clef_queue_depth", "clef_requests_in_flight", "clef_batch_occupancy", "clef_batch_tokens_limit",
                     "clef_batch_jobs_limit", "clef_queue_capacity", "clef_ready"):
            check(metric(text, name) is not None, "/metrics has %s" % name)
        check(metric(text, "clef_batch_tokens_limit") == 8192 and metric(text, "clef_batch_jobs_limit") == 32,
              "the limits are --batch-tokens and --max-batch")
        occ = metric(text, "clef_batch_occupancy") or 0
        check(0 < occ <= 1, "clef_batch_occupancy after a forward of one small request: %g in (0, 1]" % occ)
        t_end = time.time() + 3  # the POST's request ends (on_completed) just after its answer went out
        rest = text
        while time.time() < t_end and (metric(rest, "clef_requests_in_flight") or metric(rest, "clef_queue_depth")):
            time.sleep(0.05)
            rest = request(srv.port, "GET", "/metrics")[2].decode()
        check(metric(rest, "clef_requests_in_flight") == 0 and metric(rest, "clef_queue_depth") == 0,
              "nothing in flight or queued at rest (%s, %s)" % (metric(rest, "clef_requests_in_flight"),
                                                                metric(rest, "clef_queue_depth")))
        families = re.findall(r"^# TYPE (\S+) ", text, re.M)
        missing = [f for f in families if not documented_metric(f)]
        check(len(families) > 20 and not missing, "every metric is named in docs/serving.md's table: missing %s" % missing)
        srv.p.send_signal(signal.SIGTERM)
        check(srv.wait() == 0, "exit 0")
    finally:
        srv.kill()


# ---------------------------------------------------------------- 2. the drain

def test_drain(expected):
    delay = 3.0
    srv = Server("--drain-delay", str(delay))
    try:
        st, hd, data = request(srv.port, "POST", "/v1/systemone", BODY, JSON)
        check(st == 200 and hd.get("connection", "").lower() != "close", "before the signal: kept alive (%s)" % hd.get("connection"))
        t0 = time.time()
        srv.p.send_signal(signal.SIGTERM)
        dt = None
        while time.time() - t0 < 2:
            st, _, data = request(srv.port, "GET", "/readyz")
            if st == 503:
                dt = time.time() - t0
                break
            time.sleep(0.01)
        body = json.loads(data) if data.startswith(b"{") else {}
        check(dt is not None and dt < 1.0 and body.get("status") == "draining" and body.get("message"),
              "/readyz 503 draining at once after SIGTERM (%s s, %r)" % (dt, data))
        check(request(srv.port, "GET", "/livez")[0] == 200, "/livez still 200 while draining")
        check(request(srv.port, "GET", "/health")[0] == 503, "/health 503 from the signal on, as before")
        check(metric(request(srv.port, "GET", "/metrics")[2].decode(), "clef_ready") == 0, "clef_ready 0 while draining")
        # POSTs during the delay: answered, each closing its connection
        answered, closing, n = 0, 0, 0
        while time.time() - t0 < delay - 1.0:
            st, hd, data = request(srv.port, "POST", "/v1/systemone", BODY, JSON)
            n += 1
            answered += st == 200 and data == expected
            closing += hd.get("connection", "").lower() == "close"
            time.sleep(0.1)
        check(n >= 2 and answered == n and closing == n,
              "POSTs during the drain: %d of %d answered byte-equal, %d said Connection: close" % (answered, n, closing))
        # a request whose body is still coming when the listener closes is answered
        slow = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
        slow.sendall(b"POST /v1/systemone HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY[:10])
        t_closed = None
        while time.time() - t0 < delay + 5:
            if refused(srv.port):
                t_closed = time.time() - t0
                break
            time.sleep(0.05)
        check(t_closed is not None and delay - 0.2 <= t_closed <= delay + 3,
              "the listener closes after the delay (%s s after SIGTERM, delay %g)" % (t_closed, delay))
        slow.sendall(BODY[10:])
        resp = b""
        while True:
            try:
                chunk = slow.recv(65536)
            except OSError:
                break
            if not chunk:
                break
            resp += chunk
        slow.close()
        check(resp.startswith(b"HTTP/1.1 200 ") and resp.endswith(expected),
              "the upload in flight at the listener's close is answered (%r)" % resp[:60])
        rc = srv.wait()
        check(rc == 0, "exit 0 after the drain (%s)" % rc)
        drain, stopped = srv.events("draining"), srv.events("stopped")
        check(len(drain) == 1 and drain[0].get("drain_delay_s") == delay, "one draining line with the delay: %s" % drain)
        check(len(stopped) == 1 and stopped[0].get("unanswered") == 0 and stopped[0].get("dropped") == 0,
              "stopped: 0 unanswered, 0 dropped: %s" % stopped)
    finally:
        srv.kill()
    # a second signal cuts a long delay short
    srv = Server("--drain-delay", "60")
    try:
        srv.p.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        check(srv.p.poll() is None and request(srv.port, "GET", "/readyz")[0] == 503, "draining for --drain-delay 60")
        t0 = time.time()
        srv.p.send_signal(signal.SIGTERM)
        rc = srv.wait(timeout=30)
        check(rc == 0 and time.time() - t0 < 10, "a second SIGTERM ends the drain: exit %s in %.1f s" % (rc, time.time() - t0))
    finally:
        srv.kill()
    # without --drain-delay the listener closes at once (the behaviour before the flag)
    srv = Server()
    try:
        t0 = time.time()
        srv.p.send_signal(signal.SIGTERM)
        while time.time() - t0 < 5 and not refused(srv.port) and srv.p.poll() is None:
            time.sleep(0.01)
        check(time.time() - t0 < 2.0, "no --drain-delay: the listener closes at once (%.2f s)" % (time.time() - t0))
        check(srv.wait() == 0, "exit 0")
    finally:
        srv.kill()


# ---------------------------------------------------------------- 3. a rolling restart

class Router:
    """Polls each backend's /readyz every POLL_S and keeps the ready ones, as a Service's endpoints would."""

    def __init__(self, ports):
        self.ports = list(ports)
        self.ready = set()
        self.lock = threading.Lock()
        self.stop = False
        self.t = threading.Thread(target=self.loop, daemon=True)
        self.t.start()

    def loop(self):
        while not self.stop:
            for port in list(self.ports):
                try:
                    ok = request(port, "GET", "/readyz", timeout=2)[0] == 200
                except OSError:
                    ok = False
                with self.lock:
                    (self.ready.add if ok else self.ready.discard)(port)
            time.sleep(POLL_S)

    def replace(self, old, new):
        with self.lock:
            self.ports = [new if p == old else p for p in self.ports]
            self.ready.discard(old)

    def pick(self):
        with self.lock:
            return random.choice(sorted(self.ready)) if self.ready else None


def test_rolling_restart(expected, drain_delay=3.0):
    servers = [Server("--drain-delay", str(drain_delay)) for _ in range(3)]
    router = Router([s.port for s in servers])
    stats = {"ok": 0, "retried": 0, "failed": [], "wrong": 0}
    lock = threading.Lock()
    done = threading.Event()

    def client():
        while not done.is_set():
            for attempt in range(20):
                port = router.pick()
                if port is None:
                    time.sleep(0.05)
                    continue
                try:
                    st, hd, data = request(port, "POST", "/v1/systemone", BODY, JSON, timeout=30)
                except OSError as e:
                    with lock:
                        stats["failed"].append("port %d: %r" % (port, e))
                    break
                if st in (429, 503) and hd.get("retry-after"):
                    with lock:
                        stats["retried"] += 1
                    time.sleep(min(float(hd["retry-after"]), 1.0) * random.random())
                    continue
                with lock:
                    if st == 200 and data == expected:
                        stats["ok"] += 1
                    elif st == 200:
                        stats["wrong"] += 1
                    else:
                        stats["failed"].append("port %d: %s %r" % (port, st, data[:80]))
                break
            else:
                with lock:
                    stats["failed"].append("no answer in 20 tries")

    try:
        t_wait = time.time() + 10
        while len(router.ready) < 3 and time.time() < t_wait:
            time.sleep(0.05)
        threads = [threading.Thread(target=client) for _ in range(16)]
        for t in threads:
            t.start()
        time.sleep(1.0)
        victim = servers[1]
        victim.p.send_signal(signal.SIGTERM)
        rc = victim.wait(timeout=120)
        new = Server("--drain-delay", str(drain_delay))
        router.replace(victim.port, new.port)
        servers[1] = new
        t_wait = time.time() + 10
        while new.port not in router.ready and time.time() < t_wait:
            time.sleep(0.05)
        time.sleep(1.0)
        done.set()
        for t in threads:
            t.join(timeout=60)
        router.stop = True
        stopped = victim.events("stopped")
        t_drain = (victim.events("draining") or [{}])[0].get("ts", 0)
        during = [e for e in victim.events("request") if e.get("path") == "/v1/systemone" and e.get("ts", 0) > t_drain]
        print("the stopped server answered %d POSTs after its SIGTERM" % len(during), flush=True)
        print("rolling restart (drain %g s): %d answered, %d retried on 503/429, %d failed, %d wrong: %s" %
              (drain_delay, stats["ok"], stats["retried"], len(stats["failed"]), stats["wrong"], stats["failed"][:3]),
              flush=True)
        check(rc == 0, "the restarted server exits 0 (%s)" % rc)
        check(stats["ok"] >= 16 and not stats["failed"] and not stats["wrong"],
              "rolling restart: no failed request (%d answered, failed %s)" % (stats["ok"], stats["failed"][:3]))
        check(len(stopped) == 1 and stopped[0].get("unanswered") == 0 and stopped[0].get("dropped") == 0,
              "the restarted server's stopped line: 0 unanswered, 0 dropped: %s" % stopped)
    finally:
        done.set()
        router.stop = True
        for s in servers:
            if s.p.poll() is None:
                s.p.send_signal(signal.SIGTERM)
        for s in servers:
            s.wait(timeout=60)


def main():
    clef_server.need_clef()
    t_start = time.time()
    expected = decide(BODY)
    check(expected.startswith(b'{"model"'), "decide answers the body")
    test_loading(expected)
    test_drain(expected)
    test_rolling_restart(expected, float(os.environ.get("CLEF_TEST_DRAIN_DELAY", "3")))
    print("%d checks, %d failed (%.1fs)" % (TALLY.checks, len(TALLY.failures), time.time() - t_start))
    sys.exit(1 if TALLY.failures else 0)


if __name__ == "__main__":
    main()
