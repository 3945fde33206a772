#!/usr/bin/env python3
"""clef serve's log format (issue #36 item 4) on the tiny checkpoint:

1. --log-format text: "HH:MM:SS level listening on http://127.0.0.1:PORT", then a "ready" line, no
   JSON object lines; the server answers /health on that port;
2. --log-format json (and auto with stderr a file): one JSON object a line, as before;
3. auto with stderr a terminal (a pty): the text format.
CLEF_BUILD overrides the build folder."""
import json
import os
import pty
import re
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clef_server import CLEF, MODEL, TALLY, check, stop_process  # noqa: E402

LISTEN = re.compile(r"^\d\d:\d\d:\d\d info  listening on http://127\.0\.0\.1:(\d+)$")


def serve(extra, stderr):
    return subprocess.Popen([CLEF, "serve", "-m", MODEL, "-p", "0", "-t", "2"] + extra, stdout=subprocess.DEVNULL,
                            stderr=stderr, stdin=subprocess.DEVNULL)


def read_until(read, pattern, limit=120):
    text, t_end = "", time.time() + limit
    while time.time() < t_end and not re.search(pattern, text, re.M):
        chunk = read()
        if chunk is None:
            time.sleep(0.05)
            continue
        if not chunk:
            break
        text += chunk
    return text


def main():
    if not os.access(CLEF, os.X_OK) or not os.path.isdir(MODEL):
        print("skip: no %s or no %s (make, make tiny)" % (CLEF, MODEL))
        sys.exit(77)
    for fmt in ("text", "json", "auto"):
        p = serve(["--log-format", fmt] if fmt != "auto" else [], subprocess.PIPE)
        os.set_blocking(p.stderr.fileno(), False)

        def read():
            b = p.stderr.read()
            return None if b is None else b.decode("utf-8", "replace")
        text = read_until(read, r"ready")
        stop_process(p)
        lines = [ln for ln in text.splitlines() if ln.strip()]
        if fmt == "text":
            m = [LISTEN.match(ln) for ln in lines]
            port = next((int(x.group(1)) for x in m if x), None)
            check(port is not None, "text: a 'listening on http://127.0.0.1:PORT' line (%r)" % text[-500:])
            check(any(re.match(r"^\d\d:\d\d:\d\d info  ready load_ms=", ln) for ln in lines), "text: the ready line")
            check(not any(ln.startswith("{") for ln in lines), "text: no JSON lines (%r)" % text[-500:])
        else:
            ok = bool(lines)
            for ln in lines:
                try:
                    ok = ok and isinstance(json.loads(ln), dict)
                except ValueError:
                    ok = False
            check(ok and '"event":"listening"' in text, "%s (stderr a pipe): JSON lines only (%r)" % (fmt, text[-500:]))
    # auto on a terminal
    master, slave = pty.openpty()
    p = serve([], slave)
    os.close(slave)

    def read_pty():
        try:
            return os.read(master, 65536).decode("utf-8", "replace")
        except OSError:
            return ""
    text = read_until(read_pty, r"listening on http://")
    port = None
    for ln in text.replace("\r", "").splitlines():
        m = LISTEN.match(ln)
        if m:
            port = int(m.group(1))
    if port:
        t_end = time.time() + 60
        st = None
        while time.time() < t_end and st != 200:
            try:
                st = urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=5).status
            except OSError:
                time.sleep(0.1)
        check(st == 200, "the port of the text line answers /health")
    stop_process(p)
    os.close(master)
    check(port is not None, "auto on a terminal: the text format (%r)" % text[-500:])
    print("%d failed" % len(TALLY.failures))
    sys.exit(1 if TALLY.failures else 0)


if __name__ == "__main__":
    main()
