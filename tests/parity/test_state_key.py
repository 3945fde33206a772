#!/usr/bin/env python3
"""The routing key (clef.h clef_state_key; docs/serving.md "The routing key") on the tiny checkpoint:

1. one key per request whichever way it is asked: `clef state-key --jsonl` (clef_state_key, one
   line per request), `clef state-key --request F` (each body alone), Python `clef.state_key(request,
   model=...)`, `clef.Engine.state_key` (clef_job_state_key on a prepared job) and the
   `X-Clef-State-Key` header of `clef serve`'s answer; a refused request gets the same error body from
   the verb as from the Python binding, and its answer no header;
2. against the state cache itself: the requests answered one by one by an engine with the cache on,
   a request hits the cache exactly when an earlier request that saved an entry has its key (so equal
   cache entries imply equal keys, and a key never meets an entry of another state);
3. the documented definition, recomputed here for the text requests from `clef encode`'s ids;
4. pairs: the same state asked other questions (one key), states that differ only after the cache's
   boundary (one key), different states, long or shorter than a cache block (different keys), the same
   text with other images or videos (different keys), one image's pixels in two PNG encodings, as a
   data: URL and as bare base64 (one key).
Runs every body of tests/corpus/requests and the pairs. Exit 0 pass, 1 fail, 77 skip."""
import base64
import concurrent.futures as cf
import glob
import hashlib
import http.client
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clef_server  # noqa: E402
from clef_server import BUILD, CLEF, MODEL, ROOT, TALLY, Server, check  # noqa: E402

LIB = os.path.join(BUILD, "dist", "libclef.so")
TMP = tempfile.mkdtemp(prefix="clef-state-key-")
CHUNK = 64  # the delta rule's chunk: the cache's boundary is the state's last multiple of it
BIG = 60000  # bodies over this (the 16k-token truncation) are keyed, not answered: a forward takes minutes
SMALL = 20000  # the cache check answers the bodies up to this size, one at a time


def png(width, height, seed, level):
    """An RGB PNG of deterministic pixels, compressed at zlib `level` (same pixels, other bytes)."""
    rows = b"".join(b"\x00" + bytes((x * 7 + y * 13 + seed * 29 + c * 101) % 256
                                    for x in range(width) for c in range(3)) for y in range(height))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(rows, level))
            + chunk(b"IEND", b""))


def req(state, questions=None, images=None, videos=None):
    r = {"model": "clef-flash", "state": state,
         "questions": questions or {"q": {"type": "noul", "instructions": "Is it urgent?"}}}
    if images is not None:
        r["images"] = images
    if videos is not None:
        r["videos"] = videos
    return json.dumps(r).encode()


QA = {"urgent": {"type": "noul", "instructions": "Is it urgent?"}}
QB = {"dept": {"type": "choice", "criteria": {"billing": "money", "tech": None}}}
QC = {"sev": {"type": "score", "criteria": ["low", "mid", "high"]}, "x": {"type": "noul"}}


def pair_bodies():
    """(name, body) pairs and the expectations: groups of names that must share one key, and names
    whose keys must all differ."""
    words = " ".join("ticket%d was opened by customer%d about invoice%d;" % (i, i * 3, i * 7) for i in range(40))
    long_a = "Long state A: " + words
    long_b = "Long state B: " + words  # differs at its first token
    short_a, short_b = "short a", "short b"
    img1_fast, img1_small = png(64, 48, 1, 1), png(64, 48, 1, 9)
    img2 = png(64, 48, 2, 6)
    vdir = os.path.join(ROOT, "tests", "fixtures", "video")
    clips = [os.path.join(vdir, n) for n in ("h264_64x48_10fps_15.mp4", "av1_64x64_7frames.webm")]
    clips = [c for c in clips if os.path.exists(c)]
    b64 = lambda data: base64.b64encode(data).decode()
    out = [
        ("long_a_QA", req(long_a, QA)), ("long_a_QB", req(long_a, QB)), ("long_a_QC", req(long_a, QC)),
        ("long_a_tail1", req(long_a + " The end.", QA)), ("long_a_tail2", req(long_a + " Other words here.", QB)),
        ("long_b_QA", req(long_b, QA)),
        ("short_a_QA", req(short_a, QA)), ("short_a_QB", req(short_a, QB)), ("short_b_QA", req(short_b, QA)),
        ("img1_fast_QA", req("A picture.", QA, [b64(img1_fast)])),
        ("img1_small_QB", req("A picture.", QB, ["data:image/png;base64," + b64(img1_small)])),
        ("img2_QA", req("A picture.", QA, [b64(img2)])),
        ("img12_QA", req("A picture.", QA, [b64(img1_fast), b64(img2)])),
        ("img21_QA", req("A picture.", QA, [b64(img2), b64(img1_fast)])),
        ("img1_long_QA", req(long_a, QA, [b64(img1_fast)])),
        ("img1_long_QB", req(long_a, QB, [b64(img1_small)])),
    ]
    same = [["long_a_QA", "long_a_QB", "long_a_QC", "long_a_tail1", "long_a_tail2"], ["short_a_QA", "short_a_QB"],
            ["img1_fast_QA", "img1_small_QB"], ["img1_long_QA", "img1_long_QB"]]
    differ = ["long_a_QA", "long_b_QA", "short_a_QA", "short_b_QA", "img1_fast_QA", "img2_QA", "img12_QA",
              "img21_QA", "img1_long_QA"]
    for i, c in enumerate(clips):
        data = open(c, "rb").read()
        out.append(("video%d_QA" % i, req("A clip.", QA, videos=[b64(data)])))
        out.append(("video%d_QB" % i, req("A clip.", QB, videos=[b64(data)])))
        same.append(["video%d_QA" % i, "video%d_QB" % i])
        differ.append("video%d_QA" % i)
    return out, same, differ


def verb_one(body, *extra):
    """`clef state-key --request -`: (its output line, exit status)."""
    p = subprocess.run([CLEF, "state-key", "--model", MODEL, "--request", "-"] + list(extra), input=body,
                       capture_output=True, timeout=120)
    out = p.stdout.decode()
    check(out.endswith("\n") and out.count("\n") == 1, "state-key --request: one line (%r)" % out[:100])
    return out[:-1], p.returncode


def verb_keys(bodies, *extra):
    """`clef state-key --jsonl` over the bodies, one per line; a body holding a newline (a pretty-printed
    file) alone with --request (as a line it would be other requests)."""
    path = os.path.join(TMP, "in.jsonl")
    lined = [b for b in bodies if b"\n" not in b]
    with open(path, "wb") as f:
        f.write(b"".join(b + b"\n" for b in lined))
    p = subprocess.run([CLEF, "state-key", "--model", MODEL, "--jsonl", "--request", path] + list(extra),
                       capture_output=True, timeout=600)
    check(p.returncode == 0, "state-key --jsonl exits 0 (rc %d, %r)" % (p.returncode, p.stderr[-300:]))
    lines = p.stdout.decode().split("\n")
    check(lines[-1] == "" and len(lines) - 1 == len(lined), "state-key --jsonl: one line per request")
    it = iter(lines[:-1])
    return [next(it, "") if b"\n" not in b else verb_one(b, *extra)[0] for b in bodies]


KEY = re.compile(r"^[0-9a-f]{64}$")


def documented_key(body):
    """The key as docs/serving.md defines it, for a request without media, from `clef encode`."""
    p = subprocess.run([CLEF, "encode", "--model", MODEL], input=body, capture_output=True, timeout=120)
    enc = json.loads(p.stdout)
    if "error" in enc or "images" in enc or "videos" in enc:
        return None
    ids = enc["input_ids"]
    schema = documented_key.schema_piece
    q0 = enc["questions"][0]["question_span"][0]
    starts = [i for i in range(q0) if ids[i:i + len(schema)] == schema]
    schema_offset = starts[-1]  # the SCHEMA FIELDS piece right before the first field
    rows = schema_offset // CHUNK * CHUNK
    if rows == 0:
        rows = schema_offset
    h = hashlib.sha256(b"clef-state-key/v1\0" + struct.pack("<Q", rows) + struct.pack("<%di" % rows, *ids[:rows])
                       + struct.pack("<Q", 0))
    return h.hexdigest()


def server_keys(named):
    """{name: (status, X-Clef-State-Key or None)} from one `clef serve`."""
    try:
        srv = Server("--quiet", wait=None, start_s=120, log_dir=TMP)
    except RuntimeError as e:
        check(False, "clef serve did not start: %s" % str(e)[-500:])
        return {}
    out = {}
    try:
        def one(body):
            c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=300)
            for _ in range(600):  # 503 NotReady while loading
                c.request("POST", "/v1/systemone", body=body, headers={"Content-Type": "application/json"})
                r = c.getresponse()
                r.read()
                if r.status != 503:
                    break
                time.sleep(0.1)
            c.close()
            return r.status, r.getheader("X-Clef-State-Key")
        with cf.ThreadPoolExecutor(8) as ex:  # the server batches them
            out = dict(zip((n for n, _ in named), ex.map(one, (b for _, b in named))))
    finally:
        srv.kill()
    return out


def python_keys(clef, names, bodies, keys):
    """clef.state_key and Engine.state_key give the verb's line (a key, or the error body)."""
    engine = clef.Engine(MODEL, threads=1)
    for n in names:
        k = keys[n]
        for how, fn in (("clef.state_key", lambda b: clef.state_key(b, model=MODEL)), ("Engine.state_key", engine.state_key)):
            try:
                got = fn(bodies[n])
            except clef.Error as e:
                got = e.body
            check(got == k, "%s: %s %r == the verb's %r" % (n, how, got[:80], k[:80]))
    engine.close()


def cache_check(clef, names, bodies, keys):
    """2. against the state cache: a hit exactly when an earlier request that saved an entry has the key."""
    t0 = time.time()
    saved = {}  # key -> the request that saved its entry
    hits = inserts = uncached = 0
    with clef.Engine(MODEL, threads=1) as engine:
        for n in names:
            if not KEY.match(keys[n]) or len(bodies[n]) > SMALL:  # the larger images: slow forwards
                continue
            a = engine.cache_info()
            try:
                engine.decide_raw(bodies[n])
            except clef.Error:
                pass  # SchemaTooLong after encoding, ...: no lookup either way
            b = engine.cache_info()
            hit, looked, inserted = b["hits"] - a["hits"], b["hits"] + b["misses"] - a["hits"] - a["misses"], \
                b["inserts"] - a["inserts"]
            k = keys[n]
            if hit:
                hits += 1
                check(k in saved, "%s: a cache hit, so an earlier request has its key (%s); none has" % (n, k[:16]))
            elif looked:
                check(k not in saved, "%s: a miss, yet %s saved an entry under its key %s" % (n, saved.get(k), k[:16]))
                if inserted:
                    inserts += 1
                    saved[k] = n
            else:
                uncached += 1
                check(k not in saved, "%s: not cacheable, yet its key %s is a cached state's (%s)" % (n, k[:16], saved.get(k)))
    print("cache: %d hits, %d entries saved, %d requests not cacheable (%.1fs)" % (hits, inserts, uncached,
                                                                                  time.time() - t0), flush=True)
    check(hits >= 5 and inserts >= 10, "the cache check saw hits and entries (%d, %d)" % (hits, inserts))


def main():
    clef_server.need_clef()
    clef = None
    if os.path.exists(LIB):  # the sanitizer build ships no library: the CLI's parts only
        sys.path.insert(0, os.path.join(ROOT, "python", "src"))
        os.environ.setdefault("CLEF_LIBRARY", LIB)
        import clef

    files = sorted(glob.glob(os.path.join(ROOT, "tests", "corpus", "requests", "*.json")))
    named = [(os.path.basename(f), open(f, "rb").read()) for f in files]
    pairs, same, differ = pair_bodies()
    named += pairs
    pairs_named = {n for n, _ in pairs}
    names = [n for n, _ in named]
    bodies = dict(named)

    # 1. every surface gives one key
    t0 = time.time()
    keys = dict(zip(names, verb_keys([b for _, b in named])))
    print("state-key --jsonl: %d requests in %.1fs" % (len(named), time.time() - t0), flush=True)
    n_keys = sum(1 for k in keys.values() if KEY.match(k))
    check(n_keys > 100, "most requests get a key (%d)" % n_keys)
    for n in names[::7]:  # the verb on one request, as `clef encode` reads it
        out, rc = verb_one(bodies[n])
        check(out == keys[n] and rc == (0 if KEY.match(keys[n]) else 1),
              "%s: state-key --request == its --jsonl line (rc %d)" % (n, rc))
    if clef:
        python_keys(clef, names, bodies, keys)
    t0 = time.time()
    # the pairs and every third corpus request (the rest is keyed above; the answers cost minutes)
    served = server_keys([(n, b) for i, (n, b) in enumerate(named) if len(b) <= BIG and (n in pairs_named or i % 3 == 0)])
    print("clef serve: %d answers (%.1fs)" % (len(served), time.time() - t0), flush=True)
    for n in names:
        if n not in served:
            continue
        status, hk = served[n]
        if KEY.match(keys[n]):
            check(hk == keys[n], "%s: X-Clef-State-Key %r == the verb's %s (status %d)" % (n, hk, keys[n], status))
        else:
            check(hk is None, "%s: refused (%d) before encoding: no X-Clef-State-Key (%r)" % (n, status, hk))

    if clef:
        cache_check(clef, names, bodies, keys)
    else:
        print("the Python binding and the cache check skipped: no %s (this build ships no library)" % LIB)

    # 3. the definition as documented, for the requests without media
    documented_key.schema_piece = json.loads(subprocess.run(
        [CLEF, "tokenize", "--model", MODEL, "--text", "\n\nSCHEMA FIELDS:\n"], capture_output=True,
        timeout=60).stdout)["ids"]
    n_doc = 0
    for n in names[::2]:  # one `clef encode` each: half of them is plenty
        if KEY.match(keys[n]) and len(bodies[n]) <= BIG:
            want = documented_key(bodies[n])
            if want is not None:
                n_doc += 1
                check(keys[n] == want, "%s: the key %s is the documented SHA-256 %s" % (n, keys[n][:16], want[:16]))
    check(n_doc > 25, "the documented definition checked on %d requests" % n_doc)

    # 4. pairs
    for group in same:
        ks = {keys[n] for n in group}
        check(len(ks) == 1 and KEY.match(keys[group[0]]), "one key for %s: %s" % (group, sorted(k[:16] for k in ks)))
    ks = [keys[n] for n in differ]
    check(len(set(ks)) == len(ks), "different states, different keys: %s" % list(zip(differ, (k[:16] for k in ks))))
    # the options that change the record change the key; the same ones give the same key
    tiled = verb_keys([bodies["img1_fast_QA"], bodies["long_a_QA"]], "--tile", "256")
    check(tiled[0] != keys["img1_fast_QA"] and tiled[1] == keys["long_a_QA"],
          "--tile 256 changes an image request's key, not a text one's")
    print("%d checks, %d failed" % (TALLY.checks, len(TALLY.failures)))
    sys.exit(1 if TALLY.failures else 0)


if __name__ == "__main__":
    main()
