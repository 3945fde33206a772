#!/usr/bin/env python3
"""/openapi.json keeps its promises (issue #36 item 6): schemathesis (PyPI, in .venv-test through
tools/reference/requirements-test.txt; this test installs nothing) against a live tiny server, every
operation, a bounded number of examples (--max-examples, SCHEMATHESIS_MAX_EXAMPLES, default 25: well
under 2 minutes on 2 vCPUs), a fixed seed so a failure can be replayed.

0 failures of schemathesis's checks: no 5xx, answers as the schema says (status, content type,
headers, body), no schema-violating request accepted (negative_data_rejection), and no schema-valid
request refused for a schema reason (tests/parity/schemathesis/hooks.py: the one refusal a schema
cannot express, image bytes that are not an image, excepted).
Skips (77) without schemathesis in this venv, without the build or models/tiny, and under ASan
(CLEF_BUILD ending in build-asan: the generated requests are slow there and the optimized run covers
the schema)."""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("CLEF_BUILD", os.path.join(ROOT, "build")).rstrip("/")
CLEF = os.path.join(BUILD, "clef")
MODEL = os.path.join(ROOT, "models", "tiny")
ST = os.path.join(os.path.dirname(sys.executable), "st")
HOOKS = os.path.join(ROOT, "tests", "parity", "schemathesis", "hooks.py")


def main():
    if BUILD.endswith("build-asan"):
        print("skip: not under ASan (slow; the optimized build's run covers the schema)")
        sys.exit(77)
    if not os.access(CLEF, os.X_OK) or not os.path.isdir(MODEL):
        print("skip: no %s or no %s (make, make tiny)" % (CLEF, MODEL))
        sys.exit(77)
    if not os.access(ST, os.X_OK):
        print("skip: no schemathesis in %s (tools/reference/make_venv.sh test installs it)" % sys.executable)
        sys.exit(77)
    log = tempfile.NamedTemporaryFile(prefix="clef-schemathesis-", suffix=".log", delete=False)
    p = subprocess.Popen([CLEF, "serve", "-m", MODEL, "-p", "0", "-t", "2", "--log-format", "json", "--quiet"],
                         stdout=subprocess.DEVNULL, stderr=log, stdin=subprocess.DEVNULL)
    rc = 1
    try:
        port, t_end = None, time.time() + 120
        while port is None and time.time() < t_end and p.poll() is None:
            m = re.search(rb'"event":"listening".*?"port":(\d+)', open(log.name, "rb").read())
            port = int(m.group(1)) if m else None
            time.sleep(0.05)
        if port is None:
            print("FAIL: the server did not start: %s" % open(log.name, errors="replace").read()[-1000:])
            sys.exit(1)
        n = os.environ.get("SCHEMATHESIS_MAX_EXAMPLES", "25")
        cmd = [ST, "run", "http://127.0.0.1:%d/openapi.json" % port, "--max-examples", n, "--seed", "36",
               "--checks", "all", "--exclude-checks", "positive_data_acceptance", "--no-color"]
        env = dict(os.environ, SCHEMATHESIS_HOOKS="hooks", PYTHONPATH=os.path.dirname(HOOKS))
        t0 = time.time()
        work = tempfile.mkdtemp(prefix="clef-schemathesis-")  # schemathesis keeps its .schemathesis/ there
        try:
            q = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        out = q.stdout + q.stderr
        print(out[-6000:])
        print("schemathesis: exit %d in %.1f s (max-examples %s)" % (q.returncode, time.time() - t0, n))
        rc = 0 if q.returncode == 0 else 1
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
        os.unlink(log.name)
    sys.exit(rc)


if __name__ == "__main__":
    main()
