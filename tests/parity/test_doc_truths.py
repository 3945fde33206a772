#!/usr/bin/env python3
"""The doc errors of issue #36 item 6 stay fixed:

- /openapi.json (from a live tiny server) does not say every answer carries Connection: close
  (keep-alive is on), and its image schema says what is accepted: a corpus image's data: URL and
  its bare base64 match the pattern, a file path and a non-base64 string do not;
- the README does not call tests/parity/install/prog.c "a 40-line client" nor say the Python
  package reads images from "paths" (a str is refused; only pathlib.Path);
- docs/fidelity.md names the model by its folder (--model models/clef-flash);
- docs/pull.md points inside the repository only, and its manifest keys are `clef pull --help`'s.
CLEF_BUILD overrides the build folder."""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("CLEF_BUILD", os.path.join(ROOT, "build")).rstrip("/")
CLEF = os.path.join(BUILD, "clef")
MODEL = os.path.join(ROOT, "models", "tiny")
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)


def doc(*path):
    return open(os.path.join(ROOT, *path), encoding="utf-8").read()


def openapi():
    log = tempfile.NamedTemporaryFile(prefix="clef-doc-truths-", suffix=".log", delete=False)
    p = subprocess.Popen([CLEF, "serve", "-m", MODEL, "-p", "0", "-t", "1", "--log-format", "json"],
                         stdout=subprocess.DEVNULL, stderr=log, stdin=subprocess.DEVNULL)
    try:
        port, t_end = None, time.time() + 120
        while port is None and time.time() < t_end and p.poll() is None:
            m = re.search(rb'"event":"listening".*?"port":(\d+)', open(log.name, "rb").read())
            port = int(m.group(1)) if m else None
            time.sleep(0.05)
        if port is None:
            return None
        return json.loads(urllib.request.urlopen("http://127.0.0.1:%d/openapi.json" % port, timeout=30).read())
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=60)
        os.unlink(log.name)


def image_schema(spec):
    """The schema of an `images` entry, wherever the document defines it."""
    found = []

    def walk(x):
        if isinstance(x, dict):
            if "images" in x and isinstance(x["images"], dict):
                # the list itself, or the list among the alternatives (anyOf: a falsy value or a list)
                for alt in [x["images"]] + list(x["images"].get("anyOf", [])):
                    if isinstance(alt, dict) and "items" in alt:
                        found.append(alt["items"])
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)
    walk(spec)
    return found


def main():
    if os.access(CLEF, os.X_OK) and os.path.isdir(MODEL):
        spec = openapi()
        check(spec is not None, "/openapi.json served")
        if spec:
            desc = spec["info"]["description"]
            check("carries X-Request-Id and Connection: close" not in desc and "kept alive" in desc,
                  "/openapi.json: keep-alive, not Connection: close on every answer (%r)" % desc)
            items = image_schema(spec)
            check(items and all("pattern" in it for it in items), "every images schema has a pattern")
            req = json.loads(doc("tests", "corpus", "requests", "m002_small_100x80_png.json"))
            url = req["images"][0] if isinstance(req.get("images"), list) else None
            for it in items:
                pat = re.compile(it["pattern"])
                check(url and pat.search(url), "a corpus data: URL matches the images pattern")
                check(url and pat.search(url.split(",", 1)[1]), "its bare base64 matches the images pattern")
                for bad in ("photo.jpg", "/tmp/photo.png", "not base64!", "", "data:text/plain;base64,QUJD"):
                    check(not pat.search(bad), "%r does not match the images pattern" % bad)
    else:
        print("no %s or %s: the /openapi.json checks are not run" % (CLEF, MODEL))
    readme = doc("README.md")
    check("40-line" not in readme, "README: prog.c is not called a 40-line client")
    check("bytes or paths" not in readme, "README: images are not said to be read from any path")
    fidelity = doc("docs", "fidelity.md")
    check(not re.search(r"--model clef-flash\b", fidelity), "docs/fidelity.md: --model names a folder")
    pull = doc("docs", "pull.md")
    check("../" not in pull, "docs/pull.md: no path outside the repository")
    if os.access(CLEF, os.X_OK):
        h = subprocess.run([CLEF, "pull", "--help"], capture_output=True, text=True, timeout=30).stdout
        keys_help = re.search(r"\{\"repository\", \"revision\", \"files\": \{name: \{\"bytes\", \"sha256\"\}\}\}", h)
        keys_doc = '`{"repository",\n  "revision", "files": {name: {"bytes", "sha256"}}}`' in pull
        check(keys_help and keys_doc, "clef pull --help and docs/pull.md name the same manifest keys")
    print("%d failed" % len(failures))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
