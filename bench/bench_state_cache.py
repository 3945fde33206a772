#!/usr/bin/env python3
"""State cache benchmark (issue #16): one long state, then question sets on it.

For each mode (the state cache on, then `--state-cache-mb 0`) a `clef serve` is started on loopback and
sent, one at a time: a request on a state of about TOKENS tokens (the first sight of it), then N more
requests on the same state, each with a different question set. Prints each request's wall time, the
mean of the N, the speed-up of the cached requests over the first one and over the uncached server, and
checks that both servers answered every request with the same bytes ("raw": true: the unrounded
probabilities).

  bench/bench_state_cache.py MODEL_DIR [TOKENS] [N] [extra clef serve flags...]
Env: CLEF_BUILD (default build)."""
import http.client
import json
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("CLEF_BUILD", os.path.join(ROOT, "build"))

QUESTIONS = [
    {"urgent": {"type": "noul", "instructions": "Is this urgent?"}},
    {"team": {"type": "choice", "instructions": "Which team should take it?",
              "criteria": {"hardware": None, "software": None, "facilities": None, "security": None}}},
    {"sev": {"type": "score", "instructions": "How severe is it?", "criteria": ["low", "medium", "high", "critical"]}},
    {"refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"}},
    {"lang": {"type": "choice", "instructions": "Language?", "criteria": {"en": None, "fr": None, "de": None}}},
    {"tone": {"type": "score", "instructions": "How angry is the writer?", "criteria": ["calm", "annoyed", "furious"]}},
    {"spam": {"type": "noul"}, "bot": {"type": "noul", "instructions": "Was it written by a bot?"}},
    {"topic": {"type": "choice", "criteria": {"billing": None, "outage": None, "feature request": None, "other": None}}},
]


def state_text(words):
    base = ("Ticket {i}: the printer on floor {f} jams after {p} pages; the customer called twice and the "
            "technician replaced the roller, but the fault came back on {d}.")
    days = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]
    parts, i = [], 0
    while sum(len(p.split()) for p in parts) < words:
        parts.append(base.format(i=i, f=i % 9, p=10 + 3 * i, d=days[i % 5]))
        i += 1
    return " ".join(parts)


def start(model, extra):
    log = open(os.path.join("/tmp", "bench_state_cache.%d.log" % os.getpid()), "w+")
    p = subprocess.Popen([os.path.join(BUILD, "clef"), "serve", "--model", model, "--port", "0"] + extra,
                         stderr=log, stdout=subprocess.DEVNULL)
    for _ in range(3000):
        log.seek(0)
        m = re.search(r'"event":"listening"[^}]*"port":(\d+)', log.read())
        if m:
            port = int(m.group(1))
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    return p, port
            except OSError:
                pass
        time.sleep(0.2)
    p.kill()
    log.seek(0)
    sys.exit("server did not start:\n" + log.read())


def post(port, doc):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    body = json.dumps(doc).encode()
    t0 = time.perf_counter()
    c.request("POST", "/v1/systemone", body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    dt = time.perf_counter() - t0
    if r.status != 200:
        sys.exit("HTTP %d: %s" % (r.status, data[:300]))
    return dt, data


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    model = sys.argv[1]
    tokens = int(sys.argv[2]) if len(sys.argv) > 2 else 2048
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    extra = sys.argv[4:]
    state = state_text(int(tokens * 0.72))  # about 1.4 tokens per word here
    docs = [{"model": "clef-flash", "state": state, "questions": QUESTIONS[i % len(QUESTIONS)], "raw": True}
            for i in range(n + 1)]
    print("# %s, %d cores, model %s, state %d words, %d requests after the first, serve flags %s" % (
        os.uname().machine, os.cpu_count(), model, len(state.split()), n, " ".join(extra) or "(none)"))
    results = {}
    for mode, flags in (("cache", []), ("nocache", ["--state-cache-mb", "0"])):
        p, port = start(model, flags + extra)
        try:
            times, bodies = [], []
            for d in docs:
                dt, data = post(port, d)
                times.append(dt)
                bodies.append(data)
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            c.request("GET", "/metrics")
            metrics = c.getresponse().read().decode()
        finally:
            p.terminate()
            p.wait()
        tok = json.loads(bodies[0])["usage"]["input_tokens"]
        results[mode] = (times, bodies)
        hits = re.findall(r"^clef_state_cache_hits_total (\d+)", metrics, re.M)
        print("%-8s first %.3f s (%d tokens); next %d: %s; mean %.3f s; cache hits %s" % (
            mode, times[0], tok, n, " ".join("%.3f" % t for t in times[1:]), sum(times[1:]) / n,
            hits[0] if hits else "n/a"))
    ct, cb = results["cache"]
    ut, ub = results["nocache"]
    same = cb == ub
    mean_c = sum(ct[1:]) / n
    print("cached requests: %.1fx faster than the first sight of the state, %.1fx faster than the uncached "
          "server's mean (%.3f s); answers byte-equal across servers: %s" % (
              ct[0] / mean_c, (sum(ut[1:]) / n) / mean_c, sum(ut[1:]) / n, "yes" if same else "NO"))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
