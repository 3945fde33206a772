"""Traffic for the scale-out tests (test_ray_batch.py, test_ray_serve.py, test_haproxy.py): made here,
deterministically, never stored.

states_traffic(): N states asked K times each (a different question set each time), shuffled; every
state is long enough (well over 64 tokens) for the state cache to keep it, and some carry an image
(images come before the state, so those are cached too).

batch_lines(): 2,000 JSONL lines: that traffic (200 x 5) plus requests on states seen once, invalid
requests (bad JSON, no questions, bad criteria, invalid UTF-8), empty lines and one line over the
--max-line the tests pass (LONG_LINE_MAX), shuffled.
"""
import base64
import json
import os
import random

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
IMAGES = [os.path.join(ROOT, "tests", "corpus", "images", n) for n in ("gray_alpha_64x64.png", "gray_200x150.png")]
LONG_LINE_MAX = 65536  # --max-line for the batch tests: the long line is over it, every other line under
# CLEF_DEPLOY_STATES=N: N states instead of 200 (and 10 N batch lines instead of 2,000) for a quick
# look on a loaded machine; the tests' bars are the same
STATES = int(os.environ.get("CLEF_DEPLOY_STATES", "200"))

WORDS = ("ticket refund invoice delivery parcel router screen battery warranty account password login "
         "payment card bank transfer order shipping address customer support manager weekend urgent "
         "broken missing late cancel upgrade downgrade plan subscription renewal discount coupon").split()


def _state(rng, i):
    text = " ".join(rng.choice(WORDS) for _ in range(70))
    if i % 3 == 0:  # a JSON state: the cache key is the state as the model sees it
        return {"ticket": i, "body": text, "lang": rng.choice(["en", "de", "fr"])}
    return f"Case {i}: {text}."


def _questions(rng, k):
    kinds = [
        {"hot": {"type": "noul", "instructions": "Is the customer angry?"}},
        {"dept": {"type": "choice", "instructions": "Route the ticket.",
                  "criteria": {"tech": "Technical problems", "billing": "Payments", "sales": None}}},
        {"sev": {"type": "score", "instructions": "How severe?", "criteria": ["none", "minor", "major"]}},
        {"spam": {"type": "noul"}, "lang": {"type": "choice", "criteria": {"en": "", "de": "", "fr": ""}}},
        {"refund": {"type": "noul", "instructions": "Does the customer want money back?"},
         "tone": {"type": "score", "criteria": ["calm", "tense", "furious"]}},
    ]
    return kinds[k % len(kinds)]


def _image_b64(j):
    with open(IMAGES[j % len(IMAGES)], "rb") as f:
        return base64.b64encode(f.read()).decode("ascii")


def states_traffic(n_states=STATES, times=5, seed=33, image_every=10):
    """[(state index, body bytes)], n_states x times, shuffled."""
    rng = random.Random(seed)
    out = []
    for i in range(n_states):
        state = _state(rng, i)
        images = [_image_b64(i // image_every)] if image_every and i % image_every == 0 else None
        for k in range(times):
            req = {"model": "clef-flash", "state": state, "questions": _questions(rng, k)}
            if images:
                req["images"] = images
            out.append((i, json.dumps(req, separators=(",", ":")).encode()))
    rng.shuffle(out)
    return out


def batch_lines(total=10 * STATES, seed=34, one_offs=STATES // 5):
    """The 2,000 lines of the batch test (bytes, without their newlines): the 1,000 of
    states_traffic(), one_offs requests on states seen once, and the rest refused requests and empty
    lines (cheap: refused before any forward), one line over LONG_LINE_MAX."""
    rng = random.Random(seed)
    lines = [b for _, b in states_traffic(seed=seed)]
    bad = [
        b'{"model":"clef-flash","state":"no questions"}',
        b'{"model":"clef-flash","state":"x","questions":{"q":{"type":"choice","criteria":{}}}}',
        b'{"model":"clef-flash","state":"x","questions":{"q":{"type":"nope"}}}',
        b'{"model":"clef-flash","state":',
        b'not json at all',
        b'{"model":"clef-flash","state":"\xff\xfe","questions":{"q":{"type":"noul"}}}',
        b'{"model":"clef-flash","state":"x","images":["not base64!"],"questions":{"q":{"type":"noul"}}}',
        b'[1,2,3]',
        b'   ',
        b'{"model":"clef-flash","state":"crlf","questions":{"q":{"type":"noul"}}}\r',
    ]
    long_state = "x" * (LONG_LINE_MAX + 100)
    lines.append(json.dumps({"model": "clef-flash", "state": long_state, "questions": {"q": {"type": "noul"}}}).encode())
    i = 0
    for i in range(one_offs):  # states seen once
        req = {"model": "clef-flash", "state": f"one-off {i}: " + " ".join(rng.choice(WORDS) for _ in range(20)),
               "questions": _questions(rng, i)}
        lines.append(json.dumps(req, separators=(",", ":")).encode())
    k = 0
    while len(lines) < total:  # refused requests, every eighth line empty
        lines.append(b"" if k % 8 == 0 else bad[k % len(bad)])
        k += 1
    rng.shuffle(lines)
    return lines


def write_jsonl(path, lines, final_newline=False):
    """Lines joined by '\\n'; the last one without its newline unless final_newline (clef batch counts
    it all the same)."""
    with open(path, "wb") as f:
        f.write(b"\n".join(lines) + (b"\n" if final_newline else b""))


def send_all(port, bodies, keys=None, clients=8, path="/v1/systemone", retry_503=False, timeout=300):
    """POSTs every body to 127.0.0.1:port from `clients` threads (keep-alive connections), with
    X-Clef-State-Key when keys are given. Returns [(status, headers, body)] in the bodies' order.
    retry_503: a 503 with Retry-After is sent again after that many seconds (what a client of a
    draining server does); a refused connection too."""
    import http.client
    import threading
    import time

    out = [None] * len(bodies)
    nxt = {"i": 0}
    lock = threading.Lock()

    def worker():
        conn = None
        while True:
            with lock:
                i = nxt["i"]
                nxt["i"] += 1
            if i >= len(bodies):
                break
            h = {"Content-Type": "application/json"}
            if keys is not None and keys[i]:
                h["X-Clef-State-Key"] = keys[i]
            t_end = time.time() + timeout
            while True:
                try:
                    if conn is None:
                        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
                    conn.request("POST", path, body=bodies[i], headers=h)
                    r = conn.getresponse()
                    data = r.read()
                    hd = {k.lower(): v for k, v in r.getheaders()}
                    if hd.get("connection", "").lower() == "close":
                        conn.close()
                        conn = None
                    if retry_503 and r.status == 503 and "retry-after" in hd and time.time() < t_end:
                        time.sleep(float(hd["retry-after"]) / 4)
                        continue
                    out[i] = (r.status, hd, data)
                    break
                except (OSError, http.client.HTTPException) as e:
                    if conn is not None:
                        conn.close()
                        conn = None
                    if retry_503 and time.time() < t_end:
                        time.sleep(0.1)
                        continue
                    out[i] = (0, {}, repr(e).encode())
                    break
        if conn is not None:
            conn.close()

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def cache_hits(port):
    """clef_state_cache_hits_total summed over the series of GET /metrics (one per replica where a
    front renders several)."""
    import http.client
    import re

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    return sum(int(float(v)) for v in re.findall(r"^clef_state_cache_hits_total(?:\{[^}]*\})? (\S+)$", text, re.M))


def one_engine(clef, model, bodies, clients=8):
    # clef: the binary clef_server.Server starts (CLEF_BUILD's), named here for the cache's key
    """One engine's answers to `bodies` ([(status, body bytes)]) and its state-cache hits: the
    baseline the locality tests (HAProxy, Ray Serve) compare with. Computed once per binary, model
    and traffic (a file in the temp folder named by their SHA-256, made under a lock): the tests
    that need it share the run instead of each sending the whole traffic to one engine again."""
    import fcntl
    import hashlib
    import tempfile

    h = hashlib.sha256()
    for path in (clef, os.path.join(model, "manifest.sha256")):
        with open(path, "rb") as f:
            h.update(hashlib.sha256(f.read()).digest())
    h.update(str(clients).encode())
    for b in bodies:
        h.update(hashlib.sha256(b).digest())
    path = os.path.join(tempfile.gettempdir(), f"clef-one-engine-{h.hexdigest()[:32]}.json")
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with open(path) as f:
                got = json.load(f)
            return [(st, body.encode("latin-1")) for st, body in got["answers"]], got["hits"]
        except (OSError, ValueError, KeyError):
            pass
        import clef_server

        tmp = tempfile.mkdtemp(prefix="clef-one-engine-")
        # 2 threads (the same bits as 1: test_threads.py): a test that needs this baseline while
        # another computes it waits, so the one computing it may take both CPUs of a 2-CPU machine
        srv = clef_server.Server("--quiet", threads=min(2, os.cpu_count() or 1), model=model, start_s=120,
                                 log_dir=tmp, stop_timeout=120)
        try:
            res = send_all(srv.port, bodies, clients=clients)
            hits = cache_hits(srv.port)
        finally:
            srv.stop()
        answers = [(st, body) for st, _, body in res]
        if all(st != 0 for st, _ in answers):  # a transport failure is the caller's to see, never kept
            with open(path + ".tmp", "w") as f:
                json.dump({"answers": [(st, body.decode("latin-1")) for st, body in answers], "hits": hits}, f)
            os.replace(path + ".tmp", path)
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
        return answers, hits


if __name__ == "__main__":  # inside a namespace: python deploy_traffic.py send PORT OUT.json [clients]
    import sys

    if sys.argv[1] == "send":
        bodies = [b for _, b in states_traffic()]
        res = send_all(int(sys.argv[2]), bodies, clients=int(sys.argv[4]) if len(sys.argv) > 4 else 8)
        with open(sys.argv[3], "w") as f:
            json.dump({"answers": [[s, h.get("x-clef-state-key"), b.decode("utf-8", "replace")] for s, h, b in res],
                       "hits": cache_hits(int(sys.argv[2]))}, f)
