#!/usr/bin/env python3
"""Peak RSS of `clef serve` with the state cache filled vs without it (issue #16's memory bar: within the
cache bound + 10% of the uncached server's peak).

For each mode (`--state-cache-mb MB`, then `--state-cache-mb 0`) a server is started and CLIENTS
concurrent clients send one request each on distinct long states (so every one is a miss that saves
its state, and the cache fills and evicts), then each state once more (hits where still cached). Prints
the server's VmHWM (peak RSS), the cache's bytes and counters from /metrics, and the bar's check.

  bench/bench_cache_rss.py MODEL_DIR [MB] [CLIENTS] [WORDS] [extra clef serve flags...]
Env: CLEF_BUILD (default build)."""
import http.client
import json
import os
import re
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("CLEF_BUILD", os.path.join(ROOT, "build"))


def start(model, flags):
    log = open("/tmp/bench_cache_rss.%d.log" % os.getpid(), "w+")
    # --deadline 0: 16 long states queue for minutes on a CPU; none may be dropped for waiting
    p = subprocess.Popen([os.path.join(BUILD, "clef"), "serve", "--model", model, "--port", "0", "--quiet",
                          "--deadline", "0"] + flags,
                         stderr=log, stdout=subprocess.DEVNULL)
    for _ in range(3000):
        log.seek(0)
        m = re.search(r'"event":"listening"[^}]*"port":(\d+)', log.read())
        if m:
            try:
                c = http.client.HTTPConnection("127.0.0.1", int(m.group(1)), timeout=5)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    return p, int(m.group(1))
            except OSError:
                pass
        time.sleep(0.2)
    p.kill()
    sys.exit("server did not start")


def hwm_mb(pid):
    for line in open("/proc/%d/status" % pid):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0


def run(model, flags, clients, words):
    p, port = start(model, flags)
    errors = []

    def one(k, rep):
        state = " ".join("Client %d line %d: the order %d shipped late and the box was damaged." % (k, i, k * 100 + i)
                         for i in range(words // 12))
        doc = {"model": "clef-flash", "state": state, "questions": {"late": {"type": "noul"}}}
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
        c.request("POST", "/v1/systemone", body=json.dumps(doc), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        if r.status != 200:
            errors.append(r.status)

    t0 = time.time()
    for rep in range(2):
        ts = [threading.Thread(target=one, args=(k, rep)) for k in range(clients)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/metrics")
    metrics = c.getresponse().read().decode()
    peak = hwm_mb(p.pid)
    p.terminate()
    p.wait()
    m = dict(re.findall(r"^(clef_state_cache_\w+) (\d+)", metrics, re.M))
    return peak, m, time.time() - t0, errors


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    model = sys.argv[1]
    mb = int(sys.argv[2]) if len(sys.argv) > 2 else 256
    clients = int(sys.argv[3]) if len(sys.argv) > 3 else 16
    words = int(sys.argv[4]) if len(sys.argv) > 4 else 1400
    extra = sys.argv[5:]
    print("# %s, %d cores, load %s, model %s, %d clients x 2 rounds on distinct ~%d-word states, serve flags %s" % (
        os.uname().machine, os.cpu_count(), open("/proc/loadavg").read().split()[0], model, clients, words,
        " ".join(extra) or "(none)"))
    pc, mc, tc, ec = run(model, ["--state-cache-mb", str(mb)] + extra, clients, words)
    print("cache %d MiB: peak RSS %.0f MB, %.0f s, cache %s, errors %d" % (mb, pc, tc, json.dumps(mc), len(ec)))
    pu, mu, tu, eu = run(model, ["--state-cache-mb", "0"] + extra, clients, words)
    print("cache off:    peak RSS %.0f MB, %.0f s, errors %d" % (pu, tu, len(eu)))
    bound = mb * 1048576 / 1e6 + 1.1 * pu
    ok = pc <= bound and not ec and not eu
    print("bar: %.0f MB <= %d MiB + 10%% of %.0f MB = %.0f MB: %s" % (pc, mb, pu, bound, "met" if ok else "NOT met"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
