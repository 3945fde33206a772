#!/usr/bin/env python3
"""The web playground (`clef serve` at /, web/) driven in real headless Chromium (Debian's chromium +
chromium-driver, Selenium from .venv-test) against `clef serve --model models/tiny` on loopback.

- HTTP: /, /playground.js, /playground.css are the web/ files byte for byte, with their
  Content-Type, the Content-Security-Policy and nosniff; POST / is 405; with --no-ui all three
  are 404.
- The browser, at a phone's size (390x844): fills a text state, uploads a PNG with the file
  picker, adds a choice question (with an integer-like option id, so JavaScript's key order
  cannot go unnoticed) and a score question beside the page's own noul one, submits; the request
  the page shows as curl is the one the test builds, the raw response is byte-equal to `clef
  decide --request -` on that request, and every bar's number (and the summaries' choice, score,
  confidence) equals decide's, in request order, each bar as wide as its probability.
- Then a JSON state: invalid JSON is refused on the page with a readable message and no request;
  valid JSON (with an integer past 2^53, sent as typed) and the image removed: again equal to
  decide's. Then a truncated PNG: the server's 422 is shown as "HTTP 422 — <type>: <message>".
- No console errors (the expected 422 resource error of that last step aside), no horizontal
  scrolling at phone width, and no request leaves loopback: every request in Chromium's
  performance log goes to the server (or is a data: URL), and Chromium runs with a proxy on a
  closed port for everything that is not loopback.

Skips (77) only when chromium or chromedriver is not installed (tools/setup.sh installs both)."""
import base64
import http.client
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("CLEF_BUILD", os.path.join(ROOT, "build")).rstrip("/")
CLEF = os.path.join(BUILD, "clef")
MODEL = os.path.join(ROOT, "models", "tiny")
WEB = os.path.join(ROOT, "web")
IMAGES = os.path.join(ROOT, "tests", "fixtures", "images")
PNG = os.path.join(IMAGES, "png_base64_bare.png")
BAD_PNG = os.path.join(IMAGES, "bad_truncated.png")
ASAN = BUILD.endswith("build-asan")
WAIT = 240 if ASAN else 60
TMP = tempfile.mkdtemp(prefix="clef-playground-test-")

failures = []
checks = 0


def check(cond, what):
    global checks
    checks += 1
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)


def skip(why):
    print(why)
    sys.exit(77)


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
if not CHROMIUM or not DRIVER:
    skip("skip: chromium or chromedriver not installed (apt-get install chromium chromium-driver; tools/setup.sh does)")
try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError as e:
    print("selenium is missing from .venv-test (%s): run tools/reference/make_venv.sh test" % e)
    sys.exit(1)
if not os.path.isfile(os.path.join(MODEL, "config.json")):
    skip("skip: no models/tiny (make tiny)")
os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must not try to download anything


# ---------------------------------------------------------------- the server

class Server:
    def __init__(self, *extra):
        self.log = os.path.join(TMP, "serve-%d.log" % len(os.listdir(TMP)))
        self.logf = open(self.log, "wb")
        self.p = subprocess.Popen([CLEF, "serve", "--model", MODEL, "--port", "0", "--threads", "2"] + list(extra),
                                  stdout=subprocess.DEVNULL, stderr=self.logf)
        self.port = None
        t_end = time.time() + WAIT
        while time.time() < t_end:
            if self.port is None:
                m = re.search(rb'"event":"listening".*?"port":(\d+)', open(self.log, "rb").read())
                if m:
                    self.port = int(m.group(1))
            elif get(self.port, "/health")[0] == 200:
                return
            if self.p.poll() is not None:
                raise RuntimeError("server exited: " + open(self.log).read())
            time.sleep(0.05)
        raise RuntimeError("server not ready: " + open(self.log).read())

    def stop(self):
        self.p.terminate()
        try:
            self.p.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        self.logf.close()
        check(self.p.returncode == 0, "the server exits 0 on SIGTERM (ASan quiet): %s %s"
              % (self.p.returncode, open(self.log, errors="replace").read()[-2000:]))


def get(port, path, method="GET", body=None, headers=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    except OSError:
        return 0, {}, b""
    finally:
        c.close()


def decide(req):
    body = json.dumps(req).encode()
    p = subprocess.run([CLEF, "decide", "--model", MODEL, "--threads", "2", "--request", "-"], input=body,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=WAIT)
    out = p.stdout.decode("utf-8")
    return out[:-1] if out.endswith("\n") else out


def ordered(text):
    """JSON with every object as its list of (key, value) pairs: equality is order-sensitive."""
    return json.loads(text, object_pairs_hook=lambda pairs: [list(p) for p in pairs])


def closed_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# ---------------------------------------------------------------- HTTP checks

def http_checks(srv):
    want = {"/": ("playground.html", "text/html; charset=utf-8"),
            "/playground.js": ("playground.js", "text/javascript; charset=utf-8"),
            "/playground.css": ("playground.css", "text/css; charset=utf-8")}
    for path, (name, ctype) in want.items():
        st, hd, data = get(srv.port, path)
        with open(os.path.join(WEB, name), "rb") as f:
            src = f.read()
        check(st == 200 and data == src, "GET %s is web/%s byte for byte (%s, %d vs %d bytes)" % (path, name, st, len(data), len(src)))
        check(hd.get("content-type") == ctype, "%s Content-Type %r" % (path, hd.get("content-type")))
        csp = hd.get("content-security-policy", "")
        check("default-src 'self'" in csp and "img-src data: 'self'" in csp and "unsafe" not in csp,
              "%s has the strict CSP: %r" % (path, csp))
        check(hd.get("x-content-type-options") == "nosniff", "%s nosniff" % path)
        check(hd.get("x-request-id"), "%s has X-Request-Id" % path)
        st, hd, data = get(srv.port, path, "HEAD")
        check(st == 200 and data == b"" and hd.get("content-type") == ctype, "HEAD %s: %s %r" % (path, st, data[:40]))
    st, hd, data = get(srv.port, "/", "POST", b"{}", {"Content-Type": "application/json"})
    check(st == 405 and json.loads(data)["error"]["type"] == "MethodNotAllowed" and "GET" in hd.get("allow", ""),
          "POST / is 405 with Allow: %s %r" % (st, data[:80]))
    st, _, data = get(srv.port, "/playground.html")
    check(st == 404, "/playground.html is not a route (the page is /): %s" % st)


# ---------------------------------------------------------------- the browser

def browser():
    o = webdriver.ChromeOptions()
    o.binary_location = CHROMIUM
    for a in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=500,900",
              "--no-first-run", "--no-default-browser-check", "--disable-background-networking",
              "--disable-component-update", "--disable-sync", "--disable-default-apps", "--disable-extensions",
              "--metrics-recording-only", "--safebrowsing-disable-auto-update",
              # everything that is not loopback goes to a proxy on a closed port: it cannot leave
              "--proxy-server=http://127.0.0.1:%d" % closed_port()]:
        o.add_argument(a)
    o.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    return webdriver.Chrome(service=Service(DRIVER, log_output=os.path.join(TMP, "chromedriver.log")), options=o)


def severe(d):
    return [e for e in d.get_log("browser") if e.get("level") == "SEVERE"]


def js_text(d, elem_id):
    return d.execute_script("return document.getElementById(arguments[0]).textContent", elem_id)


def submit_and_wait(d, until):
    before = d.execute_script("return document.getElementById('answers').dataset.done || ''")
    d.find_element(By.ID, "submit").click()
    if until == "answers":
        WebDriverWait(d, WAIT).until(lambda drv: drv.execute_script(
            "return (document.getElementById('answers').dataset.done || '') !== arguments[0]", before))
    else:
        WebDriverWait(d, WAIT).until(lambda drv: not drv.find_element(By.ID, "error").get_attribute("hidden")
                                     and not drv.find_element(By.ID, "submit").get_attribute("disabled"))


def fill(elem, text):
    elem.clear()
    elem.send_keys(text)


def question(d, qid):
    for fs in d.find_elements(By.CSS_SELECTOR, "#questions fieldset.question"):
        if fs.find_element(By.CSS_SELECTOR, ".q-id").get_attribute("value") == qid:
            return fs
    raise AssertionError("no question %r on the page" % qid)


def bars_equal_decide(d, req, expected_text, what):
    """The answers on the page against decide's response for the same request."""
    raw = js_text(d, "raw-response")
    check(raw == expected_text, "%s: the raw response is byte-equal to clef decide's\n page:   %s\n decide: %s"
          % (what, raw[:300], expected_text[:300]))
    exp = json.loads(expected_text)
    check("answers" in exp, "%s: decide answered (%s)" % (what, expected_text[:200]))
    page = d.execute_script("""
        return Array.from(document.querySelectorAll('#answers .answer'), a => ({
          id: a.dataset.question, type: a.dataset.type,
          summary: Object.fromEntries(Array.from(a.querySelectorAll('.summary .value'), v => [v.dataset.key, v.textContent])),
          bars: Array.from(a.querySelectorAll('.bar-row'), r => ({
            option: r.dataset.option, num: r.querySelector('.num').textContent, chosen: r.classList.contains('chosen'),
            frac: r.querySelector('.fill').getBoundingClientRect().width / r.querySelector('.track').getBoundingClientRect().width}))
        }))""")
    answers = exp.get("answers", {})
    check([a["id"] for a in page] == list(answers), "%s: answers in request order: %r vs %r"
          % (what, [a["id"] for a in page], list(answers)))
    nbars = 0
    for a in page:
        e = answers.get(a["id"])
        if e is None:
            continue
        check(a["type"] == e["type"], "%s: %s type %s vs %s" % (what, a["id"], a["type"], e["type"]))
        if e["type"] == "noul":
            want = [("true", e["noul"])]
        else:
            want = list(e["probabilities"].items())
        got = [(b["option"], b["num"]) for b in a["bars"]]
        check(got == [(k, repr(v)) for k, v in want], "%s: %s bars %r vs decide %r" % (what, a["id"], got, want))
        for b, (k, v) in zip(a["bars"], want):
            nbars += 1
            check(float(b["num"]) == v, "%s: %s/%s number %s == %r" % (what, a["id"], k, b["num"], v))
            check(abs(b["frac"] - v) < 0.02, "%s: %s/%s bar width %.4f of the track for p=%r" % (what, a["id"], k, b["frac"], v))
            check(b["chosen"] == (e["type"] == "choice" and k == e["choice"]), "%s: %s/%s chosen mark" % (what, a["id"], k))
        if e["type"] == "choice":
            check(a["summary"].get("choice") == e["choice"] and a["summary"].get("confidence") == repr(e["confidence"]),
                  "%s: %s summary %r vs %r/%r" % (what, a["id"], a["summary"], e["choice"], e["confidence"]))
        if e["type"] == "score":
            check(a["summary"].get("score") == repr(e["score"]) and a["summary"].get("confidence") == repr(e["confidence"]),
                  "%s: %s summary %r vs %r/%r" % (what, a["id"], a["summary"], e["score"], e["confidence"]))
    return nbars


def page_request(d):
    """The request body of the page's curl command (its last argument)."""
    return shlex.split(js_text(d, "curl"))[-1]


def browser_checks(srv):
    d = browser()
    origin = "http://127.0.0.1:%d" % srv.port
    try:
        # a phone's viewport (the window alone cannot go below headless Chromium's minimum width)
        d.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {"width": 390, "height": 844, "deviceScaleFactor": 2,
                                                                 "mobile": True})
        d.get(origin + "/")
        check(d.execute_script("return window.innerWidth") == 390, "the page sees a 390 px wide viewport")
        WebDriverWait(d, WAIT).until(lambda drv: "ready" in drv.find_element(By.ID, "server").text)
        shots = os.environ.get("CLEF_PLAYGROUND_SHOTS")

        # ---- round 1: text state, a PNG, noul (the page's own) + choice + score
        state = "A kettle whistles in the kitchen; steam fills the room."
        fill(d.find_element(By.ID, "state"), state)
        d.find_element(By.ID, "file").send_keys(PNG)
        WebDriverWait(d, WAIT).until(lambda drv: len(drv.find_elements(By.CSS_SELECTOR, "#images li img")) == 1)
        d.find_element(By.ID, "add-choice").click()
        ch = d.find_elements(By.CSS_SELECTOR, "#questions fieldset.question")[-1]
        fill(ch.find_element(By.CSS_SELECTOR, ".q-id"), "room")
        fill(ch.find_element(By.CSS_SELECTOR, ".q-instructions"), "Where is this?")
        ch.find_element(By.CSS_SELECTOR, ".add-option").click()
        rows = ch.find_elements(By.CSS_SELECTOR, ".option")
        check(len(rows) == 3, "choice has its two default rows + one added: %d" % len(rows))
        for row, (oid, desc) in zip(rows, [("kitchen", "A room for cooking"), ("garden", ""), ("3", "Somewhere else")]):
            fill(row.find_element(By.CSS_SELECTOR, ".o-id"), oid)
            fill(row.find_element(By.CSS_SELECTOR, ".o-description"), desc)
        d.find_element(By.ID, "add-score").click()
        sc = d.find_elements(By.CSS_SELECTOR, "#questions fieldset.question")[-1]
        fill(sc.find_element(By.CSS_SELECTOR, ".q-id"), "heat")
        levels = [r.find_element(By.CSS_SELECTOR, ".o-description").get_attribute("value")
                  for r in sc.find_elements(By.CSS_SELECTOR, ".option")]
        check(levels == ["low", "medium", "high"], "score's default levels: %r" % levels)
        with open(PNG, "rb") as f:
            png_url = "data:image/png;base64," + base64.b64encode(f.read()).decode()
        req1 = {"model": "clef-flash", "state": state,
                "questions": {"hot": {"type": "noul", "instructions": "Is the water hot?"},
                              "room": {"type": "choice", "instructions": "Where is this?",
                                       "criteria": {"kitchen": "A room for cooking", "garden": None, "3": "Somewhere else"}},
                              "heat": {"type": "score", "criteria": ["low", "medium", "high"]}},
                "images": [png_url]}
        check(severe(d) == [], "no console errors while filling the form")
        submit_and_wait(d, "answers")
        body1 = page_request(d)
        check(ordered(body1) == ordered(json.dumps(req1)), "round 1: the page's request is the test's\n page: %s\n test: %s"
              % (body1[:400], json.dumps(req1)[:400]))
        check(js_text(d, "curl").startswith("curl -s '%s/v1/systemone' -H 'Content-Type: application/json' --data-binary '" % origin),
              "the curl command names this server: %r" % js_text(d, "curl")[:120])
        exp1 = decide(req1)
        n1 = bars_equal_decide(d, req1, exp1, "round 1")
        check(n1 == 1 + 3 + 3, "round 1: 7 bars (noul 1, choice 3, score 3): %d" % n1)
        check(js_text(d, "status").startswith("HTTP 200"), "status line: %r" % js_text(d, "status"))
        check(d.find_element(By.ID, "error").get_attribute("hidden") is not None, "no error shown after a good answer")
        overflow = d.execute_script("return [document.documentElement.scrollWidth, window.innerWidth]")
        check(overflow[0] <= overflow[1], "no horizontal scrolling at phone width: %r" % overflow)
        if shots:
            d.execute_script("document.getElementById('result').scrollIntoView()")
            d.save_screenshot(os.path.join(shots, "round1.png"))
        check(severe(d) == [], "no console errors in round 1")

        # ---- round 2: JSON state; invalid first (refused on the page), then valid; no image
        d.find_element(By.ID, "kind-json").click()
        fill(d.find_element(By.ID, "state"), '{"temp": 97, "unit": "C",')
        status_before = js_text(d, "status")
        d.find_element(By.ID, "submit").click()
        err = d.find_element(By.ID, "error")
        check(err.get_attribute("hidden") is None and "not valid JSON" in err.text,
              "invalid JSON state: a readable error on the page: %r" % err.text)
        check(js_text(d, "status") == status_before, "invalid JSON state: nothing was sent")
        big = '{"temp": 97, "unit": "C", "serial": 12345678901234567890}'
        fill(d.find_element(By.ID, "state"), big)
        d.find_element(By.CSS_SELECTOR, "#images .remove-image").click()
        check(d.find_elements(By.CSS_SELECTOR, "#images li") == [], "the image is removed")
        question(d, "room").find_elements(By.CSS_SELECTOR, ".remove-option")[1].click()  # garden
        req2 = json.loads(json.dumps(req1))
        req2["state"] = json.loads(big)
        del req2["images"]
        del req2["questions"]["room"]["criteria"]["garden"]
        submit_and_wait(d, "answers")
        body2 = page_request(d)
        check(big in body2, "the JSON state is sent as typed (the integer past 2^53 intact): %s" % body2[:200])
        check(ordered(body2) == ordered(json.dumps(req2)), "round 2: the page's request is the test's\n page: %s\n test: %s"
              % (body2, json.dumps(req2)))
        n2 = bars_equal_decide(d, req2, decide(req2), "round 2")
        check(n2 == 1 + 2 + 3, "round 2: 6 bars: %d" % n2)
        check(severe(d) == [], "no console errors in round 2")

        # ---- round 3: an image the engine refuses: the error is shown readably
        d.find_element(By.ID, "file").send_keys(BAD_PNG)
        WebDriverWait(d, WAIT).until(lambda drv: len(drv.find_elements(By.CSS_SELECTOR, "#images li img")) == 1)
        with open(BAD_PNG, "rb") as f:
            req3 = json.loads(json.dumps(req2))
            req3["images"] = ["data:image/png;base64," + base64.b64encode(f.read()).decode()]
        exp3 = json.loads(decide(req3))
        check("error" in exp3, "decide refuses the truncated PNG: %r" % exp3)
        submit_and_wait(d, "error")
        err = d.find_element(By.ID, "error").text
        e3 = exp3.get("error", {})
        check(re.match(r"HTTP 4\d\d", err) is not None and e3.get("type", "?") in err and e3.get("message", "?") in err,
              "the server's refusal is shown readably: %r (decide: %r)" % (err, e3))
        check(d.find_elements(By.CSS_SELECTOR, "#answers .answer") == [], "no stale answers under an error")
        if shots:
            d.execute_script("document.getElementById('error').scrollIntoView()")
            d.save_screenshot(os.path.join(shots, "round3.png"))
        logs = severe(d)
        check(all("status of 4" in e.get("message", "") for e in logs),
              "round 3: the only console errors are the refused request's own: %r" % logs)

        # ---- nothing left loopback
        urls = []
        for e in d.get_log("performance"):
            m = json.loads(e["message"])["message"]
            if m.get("method") == "Network.requestWillBeSent":
                urls.append(m["params"]["request"]["url"])
        posts = [u for u in urls if u == origin + "/v1/systemone"]
        check(len(posts) == 3, "the performance log saw the 3 POSTs: %d of %d requests" % (len(posts), len(urls)))
        outside = [u for u in urls if not (u.startswith(origin + "/") or u.startswith("data:"))]
        check(outside == [], "no request leaves the server: %r" % outside)
    finally:
        d.quit()


def main():
    srv = Server()
    try:
        http_checks(srv)
        browser_checks(srv)
    finally:
        srv.stop()
    srv = Server("--no-ui")
    try:
        for path in ("/", "/playground.js", "/playground.css"):
            st, _, data = get(srv.port, path)
            check(st == 404 and json.loads(data)["error"]["type"] == "NotFound", "--no-ui: %s is 404: %s" % (path, st))
        check(get(srv.port, "/health")[0] == 200, "--no-ui: the API is still there")
    finally:
        srv.stop()
    if failures:
        print("%d of %d checks failed" % (len(failures), checks))
        sys.exit(1)
    print("playground: %d checks passed in headless %s" % (checks, os.path.basename(CHROMIUM)))


if __name__ == "__main__":
    main()
