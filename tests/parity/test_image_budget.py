#!/usr/bin/env python3
"""A request's images costed from their headers before any is paid for (issue #35 item 2), on the tiny
checkpoint, through `clef decide` and `clef serve` (loopback):

1. 2,000 and 10,000 1x1 PNGs in one request: refused (413) in under 1 s, with the process's peak RSS
   under +64 MB over the same command answering a text request (decide: the child's ru_maxrss; serve:
   VmHWM before and after). Before the request's running total, each image was decoded, resized and
   patchified (~1.5 MB each) before the total was found over the budget: 3.1 GB for 2,000.
2. An 8000x8000 PNG (192 MB of RGB if decoded) is refused from its header: peak RSS under +64 MB; so
   are three 1x1 PNGs at min_pixels = max_pixels = 2^40 (2^30 pad tokens each: counted, not laid out).
3. A request within the budget (three small PNGs) is still answered (the processor's own grids and
   errors for such requests: test_image_requests.py, test_image_processor.py).
4. SIGTERM while the server prepares a request of 250 1000x1000 PNGs (within every budget: 1 token
   each at media_kwargs min/max_pixels 1024, 250 Mpx of decoding) with --timeout 1: the preparation
   stops at its next image once the shutdown's budget is spent, and the server exits within
   --timeout + 2 s (before: after the whole preparation).
5. clef_options.max_images through the Python package (build/dist/libclef.so): 3 images answered
   with the default, refused 413 RequestTooLong at max_images=2.
"""
import base64
import json
import os
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clef_server  # noqa: E402
from clef_server import BUILD, CLEF, MODEL, ROOT, Server  # noqa: E402

TMP = tempfile.mkdtemp(prefix="clef-image-budget-test-")
RSS_BAR_KB = 64 * 1024
TIME_BAR_S = 1.0

failures = []


def check(cond, what):
    print(("ok:   " if cond else "FAIL: ") + what, flush=True)
    if not cond:
        failures.append(what)


def png(w, h, rgb=(200, 30, 30)):
    row = b"\x00" + bytes(rgb) * w
    comp = zlib.compressobj(9)
    data = b"".join(comp.compress(row) for _ in range(h)) + comp.flush()

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", data) + chunk(b"IEND", b""))


def request_body(images, **extra):
    req = {"model": "clef-flash", "state": "x", "questions": {"q": {"type": "noul"}}}
    if images:
        req["images"] = ["data:image/png;base64," + base64.b64encode(p).decode("ascii") for p in images]
    req.update(extra)
    return json.dumps(req).encode("ascii")


def write(name, body):
    path = os.path.join(TMP, name)
    with open(path, "wb") as f:
        f.write(body)
    return path


def decide(path):
    """(exit code, stdout, seconds, the child's peak RSS in kB)."""
    t0 = time.monotonic()
    p = subprocess.Popen([CLEF, "decide", "--model", MODEL, "--threads", "1", "--request", path],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return p.returncode, out, time.monotonic() - t0, ru.ru_maxrss


def post(port, body):
    st, _, data = clef_server.post(port, body)
    return st, data


def error_type(out):
    try:
        return json.loads(out)["error"]["type"]
    except (ValueError, KeyError, TypeError):
        return None


OVER = ("SchemaTooLong", "RequestTooLong")  # docs/errors.md: 413, the budget's refusals


def main():
    if not os.access(CLEF, os.X_OK):
        print(f"skip: no {CLEF} (build first)")
        return 77
    if not os.path.exists(os.path.join(MODEL, "manifest.sha256")):
        print(f"skip: no {MODEL} (make tiny)")
        return 77
    one = png(1, 1)
    cases = [("2,000 1x1 PNGs", request_body([one] * 2000)), ("10,000 1x1 PNGs", request_body([one] * 10000)),
             ("an 8000x8000 PNG", request_body([png(8000, 8000)])),
             # each image's grid 2^30 tokens: the prompt's pads are counted, never laid out
             ("three 1x1 PNGs at min_pixels = max_pixels = 2^40",
              request_body([one] * 3, media_kwargs={"min_pixels": 1 << 40, "max_pixels": 1 << 40}))]
    small = request_body([png(40, 30), png(64, 64, (0, 90, 200)), png(100, 37, (10, 200, 10))])

    # ---- clef decide: the child's peak RSS and time against the same command on a text request ----
    rc0, out0, t0, rss0 = decide(write("text.json", request_body([])))
    check(rc0 == 0, "decide answers a text request (exit %d: %r)" % (rc0, out0[:200]))
    for name, body in cases:
        rc, out, t, rss = decide(write("req.json", body))
        check(rc == 1 and error_type(out) in OVER, "decide, %s: refused 413 (exit %d: %r)" % (name, rc, out[:160]))
        check(rss - rss0 < RSS_BAR_KB, "decide, %s: peak RSS %d kB, +%d kB over a text request (bar: +64 MB)"
              % (name, rss, rss - rss0))
        check(t - t0 < TIME_BAR_S, "decide, %s: %.2f s, %.2f s more than a text request (bar: 1 s)" % (name, t, t - t0))
    rc, out, _, _ = decide(write("small.json", small))
    check(rc == 0 and b'"usage"' in out, "decide answers three small images (exit %d: %r)" % (rc, out[:200]))

    # ---- clef serve: VmHWM before and after, each answer's time ----
    s = Server(threads=1, log_dir=TMP)
    try:
        st, data = post(s.port, request_body([]))
        check(st == 200, "serve answers a text request (%d)" % st)
        st, data = post(s.port, small)
        check(st == 200, "serve answers three small images (%d %r)" % (st, data[:160]))
        hwm0 = s.hwm_kb()
        for name, body in cases:
            t = time.monotonic()
            st, data = post(s.port, body)
            t = time.monotonic() - t
            check(st == 413 and error_type(data) in OVER, "serve, %s: 413 (%d %r)" % (name, st, data[:160]))
            check(t < TIME_BAR_S, "serve, %s: answered in %.3f s (bar: 1 s)" % (name, t))
        hwm1 = s.hwm_kb()
        check(hwm1 - hwm0 < RSS_BAR_KB, "serve: VmHWM %d -> %d kB, +%d kB (bar: +64 MB)" % (hwm0, hwm1, hwm1 - hwm0))
    finally:
        s.stop()

    # ---- SIGTERM during a long preparation: it stops at the next image once --timeout is spent ----
    big = request_body([png(1000, 1000, (i % 256, 7, 9)) for i in range(250)],
                       media_kwargs={"min_pixels": 1024, "max_pixels": 1024})
    s = Server("--timeout", "1", threads=1, log_dir=TMP)
    result = {}

    def client():
        try:
            result["answer"] = post(s.port, big)
        except OSError as e:
            result["answer"] = (None, repr(e).encode())
    th = threading.Thread(target=client)
    th.start()
    time.sleep(0.5)  # the body (1 MB) is in, the preparation under way
    t = time.monotonic()
    rc = s.stop(timeout=120)
    took = time.monotonic() - t
    th.join(120)
    check(rc == 0, "SIGTERM during a 250-image preparation: exit %d" % rc)
    check(took < 1 + 2, "SIGTERM during a 250-image preparation: exit after %.2f s (bar: --timeout 1 + 2 s)" % took)
    print("  the client got:", result.get("answer", (None, b""))[0], result.get("answer", (None, b""))[1][:120])

    # ---- clef_options.max_images (the Python package on build/dist/libclef.so) ----
    lib = os.path.join(BUILD, "dist", "libclef.so")
    if os.path.exists(lib):
        os.environ["CLEF_LIBRARY"] = lib
        sys.path.insert(0, os.path.join(ROOT, "python", "src"))
        import clef
        three = json.loads(small)
        for cap, want in ((0, None), (2, "RequestTooLong")):
            e = clef.Engine(MODEL, threads=1, max_images=cap)
            try:
                got = "answered" if "answers" in e.decide(three) else "?"
            except clef.Error as x:
                got = x.type if x.status == 413 else "%s %d" % (x.type, x.status)
            e.close()
            check(got == (want or "answered"), "python, max_images=%d, three images: %s" % (cap, got))
    else:
        print("  (no %s: max_images through the Python package not checked)" % lib)

    if failures:
        print("%d failure(s)" % len(failures))
        return 1
    print("image budget: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
