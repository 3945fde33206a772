"""The Ray Serve application (clef.ray.serve) on a one-node Ray cluster (--num-cpus 3, in a network
namespace with only lo: ray_cluster.py), 3 engine replicas, on models/tiny:

1. Parity with `clef serve`: for requests answered (200), refused by the engine (400, 413, 422),
   refused before it (415 Content-Type, 405 method), the same status and body bytes; answers carry
   X-Request-Id (the client's when sane), X-Clef-State-Key = `clef state-key`, Retry-After on 503.
2. Locality: the 200 states x 5 question sets from 8 clients through Ray Serve's router, hashing on
   the routing key: state-cache hits summed over the replicas (the ingress's /metrics) >= 90% of
   one `clef serve`'s on the same traffic, every answer byte-equal to its.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clef_server  # noqa: E402
import deploy_traffic  # noqa: E402
import ray_cluster  # noqa: E402

ROOT = ray_cluster.ROOT
BUILD = os.environ.get("CLEF_BUILD", os.path.join(ROOT, "build")).rstrip("/")
CLEF = os.path.join(BUILD, "clef")
LIB = os.path.join(BUILD, "dist", "libclef.so")
MODEL = os.path.join(ROOT, "models", "tiny")
HERE = os.path.dirname(os.path.abspath(__file__))

failures = []


def check(cond, what):
    print(("ok: " if cond else "FAIL: ") + what)
    if not cond:
        failures.append(what)


def skip(why):
    print("skip: " + why)
    sys.exit(77)


# requests whose answers are compared one by one: (body, content type, method)
CASES = [
    (b'{"model":"clef-flash","state":"The kettle is boiling.","questions":{"hot":{"type":"noul","instructions":"Is the water hot?"}}}', "application/json", "POST"),
    (b'{"model":"clef-flash","state":"x","raw":true,"questions":{"q":{"type":"choice","criteria":{"a":"","b":null}}}}', "application/json; charset=utf-8", "POST"),
    (b'{"model":"clef-flash","state":"no questions"}', "application/json", "POST"),
    (b'{"model":"clef-flash","state":', "application/json", "POST"),
    (b'{"model":"clef-flash","state":"\xff","questions":{"q":{"type":"noul"}}}', "application/json", "POST"),
    (b'{"model":"clef-flash","state":"x","images":["not base64!"],"questions":{"q":{"type":"noul"}}}', "application/json", "POST"),
    (b"", "application/json", "POST"),
    (b'{"model":"clef-flash","state":"x","questions":{"q":{"type":"noul"}}}', "text/plain", "POST"),
    (b'{"model":"clef-flash","state":"x","questions":{"q":{"type":"noul"}}}', None, "POST"),
    (None, None, "GET"),
]

CLIENT = r'''
import http.client, json, sys
sys.path.insert(0, %(here)r)
import deploy_traffic
cases = json.load(open(sys.argv[2]))
port = int(sys.argv[1])
out = []
for body, ctype, method in cases:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    h = {"X-Request-Id": "test-id.1"}
    if ctype: h["Content-Type"] = ctype
    c.request(method, "/v1/systemone", body=None if body is None else body.encode("latin-1"), headers=h)
    r = c.getresponse()
    out.append([r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode("utf-8", "replace")])
    c.close()
json.dump(out, open(sys.argv[3], "w"))
'''


def serve_answers(port, cases):
    """The same cases against clef serve (outside the namespace: loopback)."""
    import http.client

    out = []
    for body, ctype, method in cases:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        h = {"X-Request-Id": "test-id.1"}
        if ctype:
            h["Content-Type"] = ctype
        c.request(method, "/v1/systemone", body=body, headers=h)
        r = c.getresponse()
        out.append([r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode("utf-8", "replace")])
        c.close()
    return out


def main():
    why = ray_cluster.missing()
    if why:
        skip(why)
    if not os.path.exists(LIB) or not os.path.exists(os.path.join(MODEL, "config.json")):
        skip("needs build/dist/libclef.so (not in the sanitizer build) and models/tiny")
    if "state-key" not in subprocess.run([CLEF, "--help"], capture_output=True, text=True).stdout:
        skip("no clef state-key (the routing key, branch h-key)")
    tmp = tempfile.mkdtemp(prefix="clef-ray-serve-")
    t0 = time.time()
    # the reference: one clef serve (its hits on the traffic, its bytes: shared with test_haproxy)
    bodies = [b for _, b in deploy_traffic.states_traffic()]
    one, one_hits = deploy_traffic.one_engine(CLEF, MODEL, bodies)
    ref = [(st, body.decode()) for st, body in one]
    srv = clef_server.Server("--quiet", threads=1, start_s=120, log_dir=tmp, stop_timeout=120)
    try:
        ref_cases = serve_answers(srv.port, CASES)
    finally:
        srv.stop()
    keys = subprocess.run([CLEF, "state-key", "--model", MODEL, "--jsonl"], input=b"\n".join(bodies) + b"\n",
                          capture_output=True).stdout.decode().splitlines()
    print(f"one clef serve: {one_hits} hits ({time.time() - t0:.0f} s)")

    env = {"CLEF_LIBRARY": LIB, "PYTHONPATH": os.path.join(ROOT, "python", "src")}
    with ray_cluster.RayCluster(workers=0, cpus=3, env=env) as c:
        code = ("import sys, time, json; from ray import serve; import ray; ray.init(logging_level='ERROR'); "
                "import clef.ray.serve as s; serve.start(http_options={'host': '127.0.0.1', 'port': 8000}); "
                f"serve.run(s.build({MODEL!r}, replicas=3, threads=1, engine_cpus=1), name='clef', route_prefix='/'); "
                "print('ready', flush=True); time.sleep(100000)")
        app = c.popen([ray_cluster.PY, "-c", code], stdout=subprocess.PIPE, stderr=open(os.path.join(tmp, "app.log"), "wb"))
        line = app.stdout.readline()
        check(line.strip() == b"ready", f"the application runs ({time.time() - t0:.0f} s): "
                                        + open(os.path.join(tmp, "app.log")).read()[-1500:] * (line.strip() != b"ready"))
        cases_path = os.path.join(tmp, "cases.json")
        json.dump([[None if b is None else b.decode("latin-1"), ct, m] for b, ct, m in CASES], open(cases_path, "w"))
        client = os.path.join(tmp, "client.py")
        open(client, "w").write(CLIENT % {"here": HERE})
        out = os.path.join(tmp, "cases-out.json")
        r = c.run([ray_cluster.PY, client, "8000", cases_path, out], capture_output=True, timeout=300)
        got = json.load(open(out)) if r.returncode == 0 else []
        check(len(got) == len(CASES), f"every case answered {r.stderr.decode()[-500:]}")
        for (st, hd, body), (rst, rhd, rbody), case in zip(got, ref_cases, CASES):
            check((st, body) == (rst, rbody), f"{case[2]} {case[1]} {case[0][:40] if case[0] else case[0]!r}: "
                                              f"{st} == clef serve's {rst}, same bytes")
            check(hd.get("x-request-id") == "test-id.1", "the client's X-Request-Id comes back")
            check(hd.get("content-type", "").startswith("application/json"), "Content-Type application/json")
            if st == 405:
                check(hd.get("allow") == rhd.get("allow"), "405 says Allow: POST")
        # locality
        out = os.path.join(tmp, "traffic-out.json")
        t1 = time.time()
        r = c.run([ray_cluster.PY, os.path.join(HERE, "deploy_traffic.py"), "send", "8000", out, "8"],
                  capture_output=True, timeout=900)
        dt = time.time() - t1
        got = json.load(open(out)) if r.returncode == 0 else {"answers": [], "hits": 0}
        same = sum(1 for (st, key, body), rr in zip(got["answers"], ref) if (st, body) == rr)
        check(same == len(bodies), f"every answer through Ray Serve is clef serve's bytes ({same}/{len(bodies)}) "
                                   f"{r.stderr.decode()[-500:]}")
        check(all(a[1] == k for a, k in zip(got["answers"], keys)), "X-Clef-State-Key is clef state-key's")
        hits = got["hits"]
        check(hits >= 0.9 * one_hits, f"Ray Serve, 3 replicas routed by the key: {hits} hits >= 90% of one "
                                      f"engine's {one_hits} ({hits / max(one_hits, 1):.2f}; {dt:.1f} s)")
        print(json.dumps({"locality_ray_serve": {"one_engine_hits": one_hits, "hits": hits,
                                                 "ratio": round(hits / max(one_hits, 1), 3), "seconds": round(dt, 1)}}))
        check(not c.listeners_outside_loopback(), "nothing in the namespace beyond loopback (ss)")
        app.send_signal(signal.SIGKILL)
    print(f"{time.time() - t0:.0f} s")
    if failures:
        print(f"{len(failures)} failed")
        sys.exit(1)
    subprocess.run(["rm", "-rf", tmp])
    print("ray serve: clef serve's bytes and statuses, routed by the state key")


if __name__ == "__main__":
    main()
