#!/usr/bin/env python3
"""The soak of issue #22: `clef serve` under C concurrent clients for D seconds with a mix of valid,
invalid, slow and oversized requests, on loopback. Checks, and prints as one JSON summary line:
  - 0 crashes: the server process is alive throughout and exits 0 on SIGTERM at the end;
  - 0 wrong answers: every corpus request (valid ones and the e* error requests) gets the status and
    the body bytes it gets alone (a first server, --max-batch 1 --state-cache-mb 0, one request at a
    time, records them before the soak), or is shed (429 queue full, 503 past --deadline: counted
    apart as *_shed; on a machine slower than the load, the server's promised answer to overload);
  - every hostile request gets the answer its bound promises (docs/reliability.md): a slow but
    complete request its normal answer, a head that never ends a close (or 408) after
    --header-timeout, an oversized Content-Length 413, a chunked body over --max-body 413 + close,
    a 1x1 PNG asking for 80 Mpx through media_kwargs 413, 2,000 1x1 PNGs in one request 413;
  - RSS (VmRSS of the server, sampled every second) flat within 10% after the warm-up;
  - /health latency p99 (a probe on a fresh connection every 100 ms) under 50 ms.
The roles of the C clients: 9/16 corpus requests one at a time, 1/16 corpus requests pipelined (2 to
48 in one send, each answer checked the same way), 1/8 slow, 1/16 slowloris, 1/16 oversized, the
rest invalid bytes (malformed JSON, bad framing). Per-minute figures go to stderr.

  bench/soak.py MODEL_DIR [--clients 64] [--seconds 1800] [--warmup 180] [--threads 2]
                [--bin build/clef] [--out FILE] [-- extra clef serve flags]
Exit 0 when every check holds, 1 otherwise. Not a test: it takes half an hour (docs/reliability.md).
"""
import argparse
import base64
import glob
import http.client
import json
import os
import random
import re
import socket
import struct
import subprocess
import sys
import threading
import time
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def start_server(binary, model, threads, extra):
    cmd = [binary, "serve", "--model", model, "--port", "0", "--threads", str(threads)] + extra
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    port = None
    t_end = time.time() + 120
    log = []
    while time.time() < t_end:
        line = p.stderr.readline()
        if not line:
            break
        log.append(line)
        m = re.search(r'"event":"listening".*?"port":(\d+)', line)
        if m:
            port = int(m.group(1))
        if '"event":"ready"' in line and port:
            break
    if not port:
        p.kill()
        sys.exit("soak: the server did not start:\n" + "".join(log[-20:]))
    # keep draining its log so that it never blocks on a full pipe
    threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
    return p, port


def wait_health(port, t=60):
    end = time.time() + t
    while time.time() < end:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    sys.exit("soak: /health never answered 200")


def post(port, body, timeout=600):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("POST", "/v1/systemone", body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def png_1x1():
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(b"\x00\x10\x20\x30")) + chunk(b"IEND", b""))


def read_all(sock, limit_s):
    """Bytes until the server closes (or limit_s passes: then None)."""
    sock.settimeout(0.5)
    out = b""
    end = time.time() + limit_s
    while time.time() < end:
        try:
            d = sock.recv(65536)
        except socket.timeout:
            continue
        except ConnectionResetError:
            return out
        if not d:
            return out
        out += d
    return None


def read_answer(sock, buf, deadline):
    """The next answer on a keep-alive connection (Content-Length framing): (status, head, body, rest
    of buf), or None when the server closed or deadline passed first."""
    while b"\r\n\r\n" not in buf or len(buf) < _answer_end(buf):
        left = deadline - time.time()
        if left <= 0:
            return None
        sock.settimeout(left)
        try:
            d = sock.recv(65536)
        except (socket.timeout, ConnectionResetError):
            return None
        if not d:
            return None
        buf += d
    end = _answer_end(buf)
    head = buf[:buf.index(b"\r\n\r\n") + 4]
    status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/1.1 ") else -1
    return status, head, buf[len(head):end], buf[end:]


def _answer_end(buf):
    he = buf.index(b"\r\n\r\n") + 4
    m = re.search(rb"\r\nContent-Length: *(\d+)", buf[:he], re.I)
    return he + (int(m.group(1)) if m else 0)


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}
        self.failures = []
        self.health = []

    def add(self, key, ok=True, why=None):
        with self.lock:
            self.counts[key] = self.counts.get(key, 0) + 1
            if not ok:
                self.failures.append(why or key)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=1800)
    ap.add_argument("--warmup", type=float, default=180)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "clef"))
    ap.add_argument("--header-timeout", type=int, default=10)
    ap.add_argument("--max-body", type=int, default=1 << 20)
    ap.add_argument("--out")
    ap.add_argument("extra", nargs="*")
    a = ap.parse_args()

    files = sorted(glob.glob(os.path.join(ROOT, "tests/corpus/requests/*.json")))
    bodies = [open(f, "rb").read() for f in files]
    bodies = [b for b in bodies if len(b) < a.max_body]

    # 1. Each corpus request alone: its status and bytes.
    ref, port = start_server(a.bin, a.model, a.threads, ["--max-batch", "1", "--state-cache-mb", "0", "--quiet"])
    wait_health(port)
    expect = [post(port, b) for b in bodies]
    ref.terminate()
    ref.wait(60)
    print(f"soak: {len(bodies)} corpus requests answered alone "
          f"({sum(1 for s, _ in expect if s == 200)} with 200)", file=sys.stderr)

    # 2. The soak server: the defaults, with a body cap the oversized clients can reach cheaply.
    flags = ["--quiet", "--max-body", str(a.max_body), "--header-timeout", str(a.header_timeout)] + a.extra
    srv, port = start_server(a.bin, a.model, a.threads, flags)
    wait_health(port)
    st = Stats()
    t_start = time.time()
    stop_at = t_start + a.seconds
    rss = []  # (t, kB)
    mem = []  # (t, {metric: value}) from /metrics
    alive = [True]

    def corpus_client(k):
        rnd = random.Random(k)
        while time.time() < stop_at:
            i = rnd.randrange(len(bodies))
            try:
                s, d = post(port, bodies[i])
            except OSError as e:
                st.add("corpus_error", False, f"corpus request {os.path.basename(files[i])}: {e!r}")
                continue
            # shed (429 queue full, 503 past --deadline: the bound a client is promised under
            # overload): not a wrong answer, counted apart; anything else must equal the alone answer
            ok = (s, d) == expect[i] or s in (429, 503)
            st.add("corpus", ok, None if ok else
                   f"corpus request {os.path.basename(files[i])}: {s} {d[:200]!r} != {expect[i][0]} {expect[i][1][:200]!r}")
            if s in (429, 503) and (s, d) != expect[i]:
                st.add("corpus_shed")

    def slow_client(k):
        rnd = random.Random(1000 + k)
        while time.time() < stop_at:
            i = rnd.randrange(len(bodies))
            b = bodies[i]
            head = (f"POST /v1/systemone HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(b)}\r\nConnection: close\r\n\r\n").encode()
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=30)
                for j in range(0, len(head), 8):  # the head in pieces over ~2 s (under --header-timeout)
                    s.sendall(head[j:j + 8])
                    time.sleep(2.0 / (len(head) / 8))
                step = max(1, len(b) // 20)
                for j in range(0, len(b), step):  # the body in 20 pieces over ~2 s
                    s.sendall(b[j:j + step])
                    time.sleep(0.1)
                out = read_all(s, 600)
                s.close()
            except OSError as e:
                st.add("slow_error", False, f"slow client: {e!r}")
                continue
            if out is None:
                st.add("slow", False, "slow client: no answer")
                continue
            hdr, _, body = out.partition(b"\r\n\r\n")
            status = int(hdr.split(b" ", 2)[1]) if hdr.startswith(b"HTTP/1.1 ") else -1
            ok = (status, body) == expect[i] or status in (429, 503)
            if status in (429, 503) and (status, body) != expect[i]:
                st.add("slow_shed")
            st.add("slow", ok, None if ok else f"slow client {os.path.basename(files[i])}: {status} {body[:200]!r}")

    def pipeline_client(k):  # up to 48 corpus requests in one send on one connection (the guard holds 32 at once)
        rnd = random.Random(2000 + k)
        while time.time() < stop_at:
            idx = [rnd.randrange(len(bodies)) for _ in range(rnd.randint(2, 48))]
            data = b"".join(b"POST /v1/systemone HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                            b"Content-Length: %d\r\n\r\n" % len(bodies[i]) + bodies[i] for i in idx)
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=30)
            except OSError as e:
                st.add("pipeline_error", False, f"pipeline: {e!r}")
                continue

            def send():  # beside the reading: a long pipeline fills the socket buffers otherwise
                try:
                    s.sendall(data)
                except OSError:
                    pass  # the server closed after an answer that said so; what was answered is checked
            sender = threading.Thread(target=send, daemon=True)
            sender.start()
            buf, deadline = b"", time.time() + 600
            for n, i in enumerate(idx):
                got = read_answer(s, buf, deadline)
                if got is None:
                    st.add("pipeline", False, f"pipeline of {len(idx)}: no answer {n + 1} (the server closed or "
                           f"600 s passed; the previous answer did not say Connection: close)")
                    break
                status, head, body, buf = got
                ok = (status, body) == expect[i] or status in (429, 503)
                if status in (429, 503) and (status, body) != expect[i]:
                    st.add("pipeline_shed")
                st.add("pipeline", ok, None if ok else f"pipeline of {len(idx)}, answer {n + 1} "
                       f"({os.path.basename(files[i])}): {status} {body[:200]!r} != {expect[i][0]} {expect[i][1][:200]!r}")
                if re.search(rb"\r\nConnection: *close", head, re.I):
                    st.add("pipeline_closed")  # the rest is not answered on this connection: allowed
                    break
            s.close()
            sender.join(30)

    def slowloris_client(k):
        while time.time() < stop_at:
            t0 = time.time()
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=30)
                s.settimeout(0.2)
                s.sendall(b"POST /v1/systemone HTTP/1.1\r\nHost: localhost\r\n")
                closed = False
                while time.time() - t0 < a.header_timeout + 10:
                    try:
                        s.sendall(b"X-a: b\r\n")
                        d = s.recv(4096)
                        if not d or d.startswith(b"HTTP/1.1 408"):
                            closed = True
                            break
                    except socket.timeout:
                        pass
                    except (BrokenPipeError, ConnectionResetError):
                        closed = True
                        break
                    time.sleep(1.0)
                s.close()
            except OSError as e:
                st.add("slowloris_error", False, f"slowloris: {e!r}")
                time.sleep(1)
                continue
            dt = time.time() - t0
            ok = closed and dt <= a.header_timeout + 3
            st.add("slowloris", ok, None if ok else f"slowloris held {dt:.1f} s (closed={closed})")

    big_png = base64.b64encode(png_1x1()).decode()
    mk_req = json.dumps({"model": "clef-flash", "state": "x", "images": ["data:image/png;base64," + big_png],
                         "media_kwargs": {"min_pixels": 80000000, "max_pixels": 80000000},
                         "questions": {"q": {"type": "noul"}}}).encode()

    many_req = json.dumps({"model": "clef-flash", "state": "x", "images": ["data:image/png;base64," + big_png] * 2000,
                           "questions": {"q": {"type": "noul"}}}).encode()

    def oversized_client(k):
        rnd = random.Random(2000 + k)
        while time.time() < stop_at:
            kind = rnd.randrange(4)
            try:
                if kind == 0:  # Content-Length over the cap: 413 before the body
                    s = socket.create_connection(("127.0.0.1", port), timeout=30)
                    s.sendall((f"POST /v1/systemone HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                               f"Content-Length: {a.max_body * 4}\r\n\r\n").encode())
                    out = read_all(s, 30)
                    s.close()
                    ok = out is not None and out.startswith(b"HTTP/1.1 413 ")
                    st.add("oversized_length", ok, None if ok else f"oversized length: {out[:100] if out else out!r}")
                elif kind == 1:  # a chunked body that grows over the cap: 413 and a close
                    s = socket.create_connection(("127.0.0.1", port), timeout=30)
                    s.sendall(b"POST /v1/systemone HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                              b"Transfer-Encoding: chunked\r\n\r\n")
                    chunk = b"%x\r\n" % 65536 + b"a" * 65536 + b"\r\n"
                    sent = 0
                    try:
                        while sent < a.max_body * 3:
                            s.sendall(chunk)
                            sent += 65536
                    except (BrokenPipeError, ConnectionResetError):
                        pass
                    out = read_all(s, 30)
                    s.close()
                    ok = sent < a.max_body * 3 or (out is not None and out.startswith(b"HTTP/1.1 413 "))
                    st.add("oversized_chunked", ok, None if ok else f"oversized chunked: sent {sent}, {out[:100] if out else out!r}")
                elif kind == 2:  # 80 Mpx asked of a 1x1 PNG: refused before resizing
                    t0 = time.perf_counter()
                    s_, d = post(port, mk_req)
                    ok = s_ == 413
                    st.add("oversized_pixels", ok, None if ok else f"media_kwargs request: {s_} {d[:200]!r}")
                else:  # 2,000 1x1 PNGs in one request: refused from their headers, no pixel array built
                    s_, d = post(port, many_req)
                    ok = s_ == 413
                    st.add("many_images", ok, None if ok else f"many-image request: {s_} {d[:200]!r}")
            except OSError as e:
                st.add("oversized_error", False, f"oversized: {e!r}")
            time.sleep(0.5)

    garbage = [b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", b"GET / HTTP/1.1\r\nHost: localhost\r\nContent-Length : 5\r\n\r\nhello",
               b"POST /v1/systemone HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: gzip\r\n\r\n",
               b"POST /v1/systemone HTTP/1.1\r\nHost: localhost\r\nContent-Length: -1\r\n\r\n",
               b"POST /v1/systemone HTTP/1.1\r\nHost: localhost\r\n\r\n{\"a\":1}",
               b"POST /v1/systemone HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 9\r\n\r\n{\"model\":"]

    def invalid_client(k):
        rnd = random.Random(3000 + k)
        while time.time() < stop_at:
            g = garbage[rnd.randrange(len(garbage))]
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=30)
                try:
                    s.sendall(g)
                    s.shutdown(socket.SHUT_WR)
                except (BrokenPipeError, ConnectionResetError, OSError):
                    pass  # the guard closed it already (a TLS ClientHello is closed at its first byte)
                out = read_all(s, a.header_timeout + 15)
                s.close()
            except OSError as e:
                st.add("invalid_error", False, f"invalid: {e!r}")
                continue
            # an answer, when there is one, is one well-formed 4xx/5xx status line; a close is fine too
            ok = out is not None and (out == b"" or re.match(rb"HTTP/1\.1 [45]\d\d ", out) is not None)
            st.add("invalid", ok, None if ok else f"invalid {g[:40]!r}: {out[:120] if out else out!r}")
            time.sleep(0.05)

    def health_probe():
        while time.time() < stop_at:
            t0 = time.perf_counter()
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                c.request("GET", "/health")
                r = c.getresponse()
                r.read()
                c.close()
                dt = time.perf_counter() - t0
                with st.lock:
                    st.health.append((time.time() - t_start, dt, r.status))
            except OSError as e:
                st.add("health_error", False, f"/health: {e!r}")
            time.sleep(0.1)

    MEM = ("process_resident_memory_bytes", "clef_buffer_held_bytes", "clef_buffer_cache_bytes", "clef_buffer_peak_bytes",
           "clef_state_cache_bytes", "clef_request_pool_held_bytes", "clef_request_pool_live_bytes",
           'clef_malloc_bytes{kind="in_use"}', 'clef_malloc_bytes{kind="free"}', 'clef_malloc_bytes{kind="mapped"}',
           'clef_pixel_budget_admissions_total{outcome="at_once"}', 'clef_pixel_budget_admissions_total{outcome="waited"}',
           'clef_pixel_budget_admissions_total{outcome="refused"}')

    def metrics_sampler():  # what the memory is, every 10 s (docs/reliability.md "The soak")
        while time.time() < stop_at:
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                c.request("GET", "/metrics")
                text = c.getresponse().read().decode()
                c.close()
                vals = {}
                for ln in text.splitlines():
                    name, _, v = ln.rpartition(" ")
                    if name in MEM:
                        vals[name] = int(float(v))
                mem.append((time.time() - t_start, vals))
            except (OSError, ValueError):
                pass
            time.sleep(10)

    def sampler():
        while time.time() < stop_at:
            if srv.poll() is not None:
                alive[0] = False
                st.add("crash", False, f"server exited with {srv.returncode} during the soak")
                return
            try:
                with open(f"/proc/{srv.pid}/status") as f:
                    kb = int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))
                rss.append((time.time() - t_start, kb))
            except (OSError, AttributeError):
                pass
            time.sleep(1)

    roles = []
    for k in range(a.clients):
        r = k % 16
        roles.append(corpus_client if r < 9 else pipeline_client if r == 9 else slow_client if r < 12
                     else slowloris_client if r == 12
                     else oversized_client if r == 13 else invalid_client)
    ths = [threading.Thread(target=f, args=(k,), daemon=True) for k, f in enumerate(roles)]
    ths += [threading.Thread(target=health_probe, daemon=True), threading.Thread(target=sampler, daemon=True),
            threading.Thread(target=metrics_sampler, daemon=True)]
    for t in ths:
        t.start()
    last = time.time()
    while any(t.is_alive() for t in ths):
        time.sleep(1)
        if time.time() - last >= 60:
            last = time.time()
            with st.lock:
                h = [d for _, d, _ in st.health[-600:]]
                c = dict(st.counts)
                nf = len(st.failures)
            h.sort()
            print(f"soak: t={time.time() - t_start:.0f}s rss={rss[-1][1] if rss else 0} kB "
                  f"health p99 {h[int(0.99 * (len(h) - 1))] * 1e3 if h else float('nan'):.1f} ms "
                  f"failures={nf} {c}", file=sys.stderr)
            if mem:
                print("soak: memory (MB) " + " ".join(f"{k}={v / 1e6:.1f}" for k, v in mem[-1][1].items()
                                                     if "_total" not in k) +
                      "; counts " + " ".join(f"{k}={v}" for k, v in mem[-1][1].items() if "_total" in k),
                      file=sys.stderr)
        if time.time() > stop_at + 900:
            break

    srv.terminate()
    try:
        rc = srv.wait(120)
    except subprocess.TimeoutExpired:
        srv.kill()
        rc = "hung on SIGTERM"
    if rc != 0:
        st.add("exit", False, f"server exit on SIGTERM: {rc}")

    after = [kb for t, kb in rss if t >= a.warmup]
    rss_ok = bool(after) and max(after) <= 1.10 * min(after)
    per_minute = {}  # minute -> [min, max] MB of the 1-s samples
    for t, kb in rss:
        m = per_minute.setdefault(int(t // 60), [kb, kb])
        m[0], m[1] = min(m[0], kb), max(m[1], kb)
    hl = sorted(d for t, d, s in st.health)
    bad_health = [s for _, _, s in st.health if s != 200]
    p99 = hl[int(0.99 * (len(hl) - 1))] * 1e3 if hl else float("nan")
    summary = {
        "seconds": round(time.time() - t_start, 1), "clients": a.clients, "counts": st.counts,
        "shed": sum(v for k, v in st.counts.items() if k.endswith("_shed")),
        "failures": len(st.failures), "first_failures": st.failures[:10], "server_exit": rc,
        "rss_kB_after_warmup": {"min": min(after) if after else None, "max": max(after) if after else None,
                                "first": after[0] if after else None, "last": after[-1] if after else None},
        "rss_flat_within_10pct": rss_ok,
        "rss_MB_per_minute": {m: [round(v[0] / 1024, 1), round(v[1] / 1024, 1)] for m, v in sorted(per_minute.items())},
        "health": {"n": len(hl), "p50_ms": round(hl[len(hl) // 2] * 1e3, 2) if hl else None,
                   "p99_ms": round(p99, 2), "max_ms": round(hl[-1] * 1e3, 2) if hl else None,
                   "not_200": len(bad_health)},
    }
    ok = not st.failures and rss_ok and p99 < 50 and not bad_health and rc == 0
    summary["pass"] = ok
    line = json.dumps(summary)
    print(line)
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"summary": summary, "rss": rss, "memory": mem, "health": st.health, "failures": st.failures}, f)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
