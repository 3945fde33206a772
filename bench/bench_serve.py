#!/usr/bin/env python3
"""Load client for bench_serve.sh: C concurrent keep-alive clients POST valid corpus requests to a
running `clef serve` for D seconds; prints one JSON line: requests/s, p50/p99 latency (ms), tokens/s.
Loopback only.  usage: bench_serve.py PORT CLIENTS SECONDS [REQUEST_GLOB]"""
import glob
import http.client
import json
import os
import random
import sys
import threading
import time

port, clients, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pattern = sys.argv[4] if len(sys.argv) > 4 else os.path.join(root, "tests/corpus/requests/t0*.json")
bodies = [open(f, "rb").read() for f in sorted(glob.glob(pattern)) if os.path.getsize(f) < 8000]
lat, toks, errors = [], [], [0]
lock = threading.Lock()
stop_at = time.time() + seconds


def client(k):
    rnd = random.Random(k)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    while time.time() < stop_at:
        b = bodies[rnd.randrange(len(bodies))]
        t0 = time.perf_counter()
        conn.request("POST", "/v1/systemone", body=b, headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        data = r.read()
        dt = time.perf_counter() - t0
        with lock:
            if r.status == 200:
                lat.append(dt)
                toks.append(json.loads(data)["usage"]["input_tokens"])
            else:
                errors[0] += 1
    conn.close()


t0 = time.time()
ths = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
for t in ths:
    t.start()
for t in ths:
    t.join()
wall = time.time() - t0
lat.sort()
pct = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] * 1e3 if lat else float("nan")
print(json.dumps({"clients": clients, "requests": len(lat), "errors": errors[0], "seconds": round(wall, 2),
                  "req_per_s": round(len(lat) / wall, 2), "p50_ms": round(pct(0.50), 1), "p99_ms": round(pct(0.99), 1),
                  "tokens_per_s": round(sum(toks) / wall, 1), "mean_tokens": round(sum(toks) / max(1, len(toks)), 1)}))
