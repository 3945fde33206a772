#!/usr/bin/env python3
"""The web playground (`clef serve` at /, web/) driven in real headless Chromium (Debian's chromium +
chromium-driver, Selenium from .venv-test) against `clef serve --model models/tiny` on loopback.

- HTTP: /, /playground.js, /playground.css are the web/ files byte for byte, with their
  Content-Type, the Content-Security-Policy and nosniff; POST / is 405; /openapi.json (linked from
  the page) answers; with --no-ui the three files are 404.
- At a phone's 390x844: fills a text state, uploads a PNG with the file picker, adds a choice
  question (with an integer-like option id, so JavaScript's key order cannot go unnoticed) and a
  score question beside the page's own noul one, presses Decide: the first answer's bars are inside
  the viewport and not covered, with no scrolling by the test; the request the page shows as curl
  is the one the test builds, the raw response is byte-equal to `clef decide --request -` on it,
  and every bar's number (and the summaries) equals decide's, in request order, each bar as wide as
  its probability. Typed values are in the text colour, placeholders not. Then a JSON state:
  invalid JSON is refused on the page (the field focused and annotated, nothing sent); valid JSON
  (an integer past 2^53, sent as typed): equal to decide's. A truncated PNG: the server's 422 is
  shown as "HTTP 422 — <type>" + message, in view, with no Answers heading. A video through the
  file picker: sent as a data: URL in "videos", answered as decide answers it. A reload keeps the
  form (the video too); Decide from the top of the page scrolls the answers into view.
- At 1280x800: the answers beside the form; each example (support ticket, JSON record, image)
  fills the form and is answered as decide answers it, the ticket's bars in the viewport after
  Decide; a pasted request (integer-like ids, a large integer, 2.50, "" and null, raw, an image)
  round-trips through the form, the JSON panel and what Decide sends, and is answered as decide
  answers it; a pasted question with a misspelt key is refused by name, the form untouched.
- A server with --api-key: the 401 opens Options and focuses and marks the key field, with a note;
  with the key typed in, answers.
- No console errors (the expected 4xx aside), no horizontal scrolling at phone width, and no
  request leaves loopback: every request in Chromium's performance log goes to the test's servers
  (or is a data: URL), and Chromium runs with a proxy on a closed port for everything that is not
  loopback.

Screenshots go to $CLEF_SCREENSHOTS, or to a temporary folder (printed at the end).
Skips (77) only when chromium or chromedriver is not installed (tools/setup.sh installs both)."""
import base64
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clef_server  # noqa: E402
from clef_server import ASAN, CLEF, MODEL, ROOT, TALLY, check, free_port, request, skip  # noqa: E402

WEB = os.path.join(ROOT, "web")
IMAGES = os.path.join(ROOT, "tests", "fixtures", "images")
PNG = os.path.join(IMAGES, "png_base64_bare.png")
BAD_PNG = os.path.join(IMAGES, "bad_truncated.png")
VIDEO = os.path.join(ROOT, "tests", "fixtures", "video", "h264_64x48_10fps_15.mp4")
API_KEY = "playground-test-key"
WAIT = 240 if ASAN else 60
TMP = tempfile.mkdtemp(prefix="clef-playground-test-")

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

def Server(*extra):
    return clef_server.Server(*extra, start_s=WAIT, log_dir=TMP)


def stop(srv):
    rc = srv.stop(timeout=WAIT)
    check(rc == 0, "the server exits 0 on SIGTERM (ASan quiet): %s %s" % (rc, srv.logtext()[-2000:]))


def get(port, path, method="GET", body=None, headers=None):
    try:
        return request(port, method, path, body, headers, timeout=30)
    except OSError:
        return 0, {}, b""


def decide(req):
    body = json.dumps(req).encode()
    p = subprocess.run([CLEF, "decide", "--model", MODEL, "--threads", "2", "--request", "-"], input=body,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=WAIT)
    out = p.stdout.decode("utf-8")
    return out[:-1] if out.endswith("\n") else out


def ordered(text):
    """JSON with every object as its list of (key, value) pairs: equality is order-sensitive."""
    return json.loads(text, object_pairs_hook=lambda pairs: [list(p) for p in pairs])


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

PHONE = (390, 844)
WIDE = (1280, 800)
SHOTS = os.environ.get("CLEF_SCREENSHOTS") or os.path.join(TMP, "screenshots")
posts = 0  # POSTs the test made the page send (checked against Chromium's performance log)


def browser():
    o = webdriver.ChromeOptions()
    o.binary_location = CHROMIUM
    for a in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1300,900",
              "--no-first-run", "--no-default-browser-check", "--disable-background-networking",
              "--disable-component-update", "--disable-sync", "--disable-default-apps", "--disable-extensions",
              "--metrics-recording-only", "--safebrowsing-disable-auto-update", "--hide-scrollbars",
              # everything that is not loopback goes to a proxy on a closed port: it cannot leave
              "--proxy-server=http://127.0.0.1:%d" % free_port()]:
        o.add_argument(a)
    o.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    return webdriver.Chrome(service=Service(DRIVER, log_output=os.path.join(TMP, "chromedriver.log")), options=o)


def open_page(d, url, size):
    """Loads the page in a viewport of size (w, h) (a phone's below 600 px: the window alone cannot go below
    headless Chromium's minimum width) and waits for the server line."""
    w, h = size
    d.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {"width": w, "height": h, "deviceScaleFactor": 1,
                                                             "mobile": w < 600})
    d.get(url)
    check(d.execute_script("return [window.innerWidth, window.innerHeight]") == [w, h],
          "the page sees a %dx%d viewport" % (w, h))
    WebDriverWait(d, WAIT).until(lambda drv: drv.find_element(By.ID, "server").text not in ("", "checking the server…"))


def shot(d, name):
    os.makedirs(SHOTS, exist_ok=True)
    d.save_screenshot(os.path.join(SHOTS, name))


def severe(d):
    return [e for e in d.get_log("browser") if e.get("level") == "SEVERE"]


def js_text(d, elem_id):
    return d.execute_script("return document.getElementById(arguments[0]).textContent", elem_id)


def click(d, elem):
    """Clicks elem in the middle of the view (the sticky Decide bar covers the bottom edge, where
    chromedriver would otherwise leave an element it scrolled to)."""
    d.execute_script("arguments[0].scrollIntoView({block: 'center'})", elem)
    elem.click()


def submit_and_wait(d, until):
    """Presses Decide without scrolling (the button stays on screen), so where the page is after it is the
    page's own doing."""
    global posts
    posts += 1
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


def form_questions(d):
    """[(id, type, [option ids])] as the form's fields hold them."""
    return d.execute_script("""
        return Array.from(document.querySelectorAll('#questions fieldset.question'), fs => [
          fs.querySelector('.q-id').value, fs.dataset.type,
          Array.from(fs.querySelectorAll('.o-id'), i => i.value)])""")


def answers_in_view(d, what):
    """The first answer's bars lie inside the viewport, uncovered, with no scrolling by the test."""
    r = d.execute_script("""
        const a = document.querySelector('#answers .answer');
        if (!a) return null;
        return Array.from(a.querySelectorAll('.bar-row'), row => {
          const b = row.getBoundingClientRect();
          const hit = document.elementFromPoint((b.left + b.right) / 2, (b.top + b.bottom) / 2);
          return [b.top, b.bottom, b.left, b.right, !!hit && row.contains(hit)];
        });""")
    w, h = d.execute_script("return [window.innerWidth, window.innerHeight]")
    check(bool(r), "%s: a first answer with bars: %r" % (what, r))
    out = [b for b in r or [] if b[0] < 0 or b[1] > h or b[2] < 0 or b[3] > w or not b[4]]
    check(not out, "%s: the first answer's bars are inside the %dx%d viewport, uncovered, after Decide "
          "(top, bottom, left, right, on top): %r" % (what, w, h, out))


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
    check(d.find_element(By.ID, "answers-heading").get_attribute("hidden") is None, "%s: the Answers heading shows" % what)
    return nbars


def page_request(d):
    """The request body of the page's curl command (its last argument): what the page sent."""
    return shlex.split(js_text(d, "curl"))[-1]


def form_request(d):
    """The request the form holds, as the page's JSON panel shows it (the panel is opened, read, closed)."""
    d.execute_script("const p = document.getElementById('json-panel'); p.open = false;"
                     "document.getElementById('request-json').value = ''; p.open = true;")
    WebDriverWait(d, WAIT).until(lambda drv: drv.execute_script("return document.getElementById('request-json').value"))
    text = d.execute_script("return document.getElementById('request-json').value")
    d.execute_script("document.getElementById('json-panel').open = false")
    return text


def paste_request(d, text):
    """A whole request pasted into the emptied JSON panel (a real paste event carrying the text)."""
    d.execute_script("""
        const p = document.getElementById('json-panel'); p.open = true;
        const ta = document.getElementById('request-json'); ta.value = ''; ta.focus();
        const dt = new DataTransfer(); dt.setData('text/plain', arguments[0]);
        ta.dispatchEvent(new ClipboardEvent('paste', {clipboardData: dt, bubbles: true, cancelable: true}));""", text)


def data_url(path, mime):
    with open(path, "rb") as f:
        return "data:%s;base64,%s" % (mime, base64.b64encode(f.read()).decode())


def phone_rounds(d, origin):
    """At 390x844: the form filled by hand, three answers and one refusal, then a video; the form kept
    across a reload."""
    open_page(d, origin + "/", PHONE)
    shot(d, "phone-start.png")
    check("ready" in d.find_element(By.ID, "server").text, "the header says the model is ready: %r"
          % d.find_element(By.ID, "server").text)

    # ---- round 1: text state, a PNG, noul (the page's own) + choice + score
    state = "A kettle whistles in the kitchen; steam fills the room."
    fill(d.find_element(By.ID, "state"), state)
    d.find_element(By.ID, "file").send_keys(PNG)
    WebDriverWait(d, WAIT).until(lambda drv: len(drv.find_elements(By.CSS_SELECTOR, "#images li img")) == 1)
    click(d, d.find_element(By.ID, "add-choice"))
    ch = d.find_elements(By.CSS_SELECTOR, "#questions fieldset.question")[-1]
    fill(ch.find_element(By.CSS_SELECTOR, ".q-id"), "room")
    fill(ch.find_element(By.CSS_SELECTOR, ".q-instructions"), "Where is this?")
    click(d, ch.find_element(By.CSS_SELECTOR, ".add-option"))
    rows = ch.find_elements(By.CSS_SELECTOR, ".option")
    check(len(rows) == 3, "choice has its two default rows + one added: %d" % len(rows))
    for row, (oid, desc) in zip(rows, [("kitchen", "A room for cooking"), ("garden", ""), ("3", "Somewhere else")]):
        fill(row.find_element(By.CSS_SELECTOR, ".o-id"), oid)
        fill(row.find_element(By.CSS_SELECTOR, ".o-description"), desc)
    click(d, d.find_element(By.ID, "add-score"))
    sc = d.find_elements(By.CSS_SELECTOR, "#questions fieldset.question")[-1]
    fill(sc.find_element(By.CSS_SELECTOR, ".q-id"), "heat")
    levels = [r.find_element(By.CSS_SELECTOR, ".o-description").get_attribute("value")
              for r in sc.find_elements(By.CSS_SELECTOR, ".option")]
    check(levels == ["low", "medium", "high"], "score's default levels: %r" % levels)
    # typed values look like values (the text colour), placeholders do not
    colors = d.execute_script("""
        const i = document.querySelector('#questions .q-instructions'), o = document.querySelector('#questions .o-description');
        return [getComputedStyle(document.body).color, getComputedStyle(i).color, getComputedStyle(o).color,
                getComputedStyle(document.querySelector('#questions fieldset:last-child .q-instructions'), '::placeholder').color]""")
    check(colors[1] == colors[0] and colors[2] == colors[0] and colors[3] != colors[0],
          "input values in the text colour, placeholders not (body, instructions, description, placeholder): %r" % colors)
    png_url = data_url(PNG, "image/png")
    req1 = {"model": "clef-flash", "state": state,
            "questions": {"hot": {"type": "noul", "instructions": "Is the water hot?"},
                          "room": {"type": "choice", "instructions": "Where is this?",
                                   "criteria": {"kitchen": "A room for cooking", "garden": None, "3": "Somewhere else"}},
                          "heat": {"type": "score", "criteria": ["low", "medium", "high"]}},
            "images": [png_url]}
    check(severe(d) == [], "no console errors while filling the form")
    submit_and_wait(d, "answers")
    answers_in_view(d, "390x844 round 1")
    shot(d, "phone-answers.png")
    body1 = page_request(d)
    check(ordered(body1) == ordered(json.dumps(req1)), "round 1: the page's request is the test's\n page: %s\n test: %s"
          % (body1[:400], json.dumps(req1)[:400]))
    check(js_text(d, "curl").startswith("curl -s '%s/v1/systemone' -H 'Content-Type: application/json' --data-binary '" % origin),
          "the curl command names this server: %r" % js_text(d, "curl")[:120])
    n1 = bars_equal_decide(d, req1, decide(req1), "round 1")
    check(n1 == 1 + 3 + 3, "round 1: 7 bars (noul 1, choice 3, score 3): %d" % n1)
    check(js_text(d, "status").startswith("HTTP 200"), "status line: %r" % js_text(d, "status"))
    check(d.find_element(By.ID, "error").get_attribute("hidden") is not None, "no error shown after a good answer")
    overflow = d.execute_script("return [document.documentElement.scrollWidth, window.innerWidth]")
    check(overflow[0] <= overflow[1], "no horizontal scrolling at phone width: %r" % overflow)
    check(severe(d) == [], "no console errors in round 1")

    # ---- round 2: JSON state; invalid first (refused on the page, the field marked), then valid; no image
    click(d, d.find_element(By.ID, "kind-json"))
    fill(d.find_element(By.ID, "state"), '{"temp": 97, "unit": "C",')
    status_before = js_text(d, "status")
    d.find_element(By.ID, "submit").click()
    err = d.find_element(By.ID, "error")
    check(err.get_attribute("hidden") is None and "not valid JSON" in js_text(d, "error"),
          "invalid JSON state: a readable error on the page: %r" % js_text(d, "error"))
    check(d.execute_script("return document.activeElement.id") == "state"
          and "invalid" in d.find_element(By.ID, "state").get_attribute("class")
          and "not valid JSON" in d.execute_script("return document.querySelector('#state + .field-note').textContent"),
          "invalid JSON state: the state field is focused, marked, and says why")
    check(js_text(d, "status") == status_before, "invalid JSON state: nothing was sent")
    big = '{"temp": 97, "unit": "C", "serial": 12345678901234567890}'
    fill(d.find_element(By.ID, "state"), big)
    check(d.find_elements(By.CSS_SELECTOR, "#form .field-note, #form .invalid") == [], "editing the field clears its mark")
    click(d, d.find_element(By.CSS_SELECTOR, "#images .remove-image"))
    check(d.find_elements(By.CSS_SELECTOR, "#images li") == [], "the image is removed")
    click(d, question(d, "room").find_elements(By.CSS_SELECTOR, ".remove-option")[1])  # garden
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

    # ---- round 3: an image the engine refuses: the error is shown readably, in view, without an Answers heading
    d.find_element(By.ID, "file").send_keys(BAD_PNG)
    WebDriverWait(d, WAIT).until(lambda drv: len(drv.find_elements(By.CSS_SELECTOR, "#images li img")) == 1)
    req3 = json.loads(json.dumps(req2))
    req3["images"] = [data_url(BAD_PNG, "image/png")]
    exp3 = json.loads(decide(req3))
    check("error" in exp3, "decide refuses the truncated PNG: %r" % exp3)
    submit_and_wait(d, "error")
    err = js_text(d, "error")
    e3 = exp3.get("error", {})
    check(re.match(r"HTTP 4\d\d", err) is not None and e3.get("type", "?") in err and e3.get("message", "?") in err,
          "the server's refusal is shown readably: %r (decide: %r)" % (err, e3))
    check(d.find_elements(By.CSS_SELECTOR, "#answers .answer") == [], "no stale answers under an error")
    check(d.find_element(By.ID, "answers-heading").get_attribute("hidden") is not None,
          "no Answers heading over an error")
    box = d.execute_script("const b = document.getElementById('error').getBoundingClientRect(); return [b.top, b.bottom]")
    check(box[0] >= 0 and box[1] <= PHONE[1], "the error panel is scrolled into view: %r" % box)
    shot(d, "phone-error.png")
    logs = severe(d)
    check(all("status of 4" in e.get("message", "") for e in logs),
          "round 3: the only console errors are the refused request's own: %r" % logs)

    # ---- round 4: a video through the file picker, answered as `clef decide` answers it
    click(d, d.find_element(By.CSS_SELECTOR, "#images .remove-image"))
    d.find_element(By.ID, "file").send_keys(VIDEO)
    WebDriverWait(d, WAIT).until(lambda drv: len(drv.find_elements(By.CSS_SELECTOR, "#videos li")) == 1)
    req4 = json.loads(json.dumps(req2))
    req4["videos"] = [data_url(VIDEO, "video/mp4")]
    body4 = form_request(d)
    check(ordered(body4) == ordered(json.dumps(req4)), "round 4: the form's request carries the video as a data: URL\n"
          " page: %s\n test: %s" % (body4[:300], json.dumps(req4)[:300]))
    submit_and_wait(d, "answers")
    check(ordered(page_request(d)) == ordered(json.dumps(req4)), "round 4: the page sent the video request")
    n4 = bars_equal_decide(d, req4, decide(req4), "round 4 (video)")
    check(n4 == 6, "round 4: 6 bars: %d" % n4)
    answers_in_view(d, "390x844 round 4")
    check(severe(d) == [], "no console errors in round 4")

    # ---- the form is kept across a reload (the video too)
    d.refresh()
    WebDriverWait(d, WAIT).until(lambda drv: "ready" in drv.find_element(By.ID, "server").text)
    kept = form_request(d)
    check(kept == body4, "after a reload the form holds the same request\n before: %s\n after:  %s" % (body4[:300], kept[:300]))
    check(len(d.find_elements(By.CSS_SELECTOR, "#videos li")) == 1, "after a reload the video is listed")
    # Decide with the page at its top: the answers, far below the form, are brought into view
    d.execute_script("window.scrollTo(0, 0)")
    submit_and_wait(d, "answers")
    answers_in_view(d, "390x844 Decide from the top of the page")
    check(d.execute_script("return window.scrollY") > 0, "from the top of the page: the page scrolled to the answers")


PRESET_KIND = {"ticket": "text", "record": "json", "image": "text"}


def wide_rounds(d, origin):
    """At 1280x800: side by side; each preset fills the form and is answered as decide answers it; a pasted
    request round-trips; a request the form cannot hold is refused naming the place."""
    open_page(d, origin + "/", WIDE)
    f, r = d.execute_script("return [document.getElementById('form').getBoundingClientRect().right,"
                            " document.getElementById('result').getBoundingClientRect().left]")
    check(r >= f, "at 1280 px the answers are beside the form (form right %s, answers left %s)" % (f, r))
    link = d.find_element(By.ID, "openapi-link")
    check(link.get_attribute("href") == origin + "/openapi.json", "a link to /openapi.json: %r" % link.get_attribute("href"))

    for name, kind in PRESET_KIND.items():
        click(d, d.find_element(By.CSS_SELECTOR, ".preset[data-preset='%s']" % name))
        body = form_request(d)
        req = json.loads(body)
        qs = form_questions(d)
        check(len(qs) >= 2 and [(q[0], q[1]) for q in qs] == [(k, v["type"]) for k, v in req["questions"].items()],
              "preset %s: the form's questions %r are the request's %r" % (name, qs, list(req["questions"])))
        check(d.find_element(By.ID, "kind-%s" % kind).is_selected(), "preset %s: the state is %s" % (name, kind))
        typed = d.find_element(By.ID, "state").get_attribute("value")
        if kind == "json":
            check(isinstance(req["state"], dict) and len(req["state"]) >= 3 and json.loads(typed) == req["state"],
                  "preset %s: a JSON record in the state field: %r" % (name, typed[:100]))
        else:
            check(req["state"] == typed and len(typed) > 10, "preset %s: the state text: %r" % (name, typed[:100]))
        if name == "image":
            ims = req.get("images", [])
            png = base64.b64decode(ims[0].split(",", 1)[1]) if ims and ims[0].startswith("data:image/png;base64,") else b""
            check(len(ims) == 1 and png[:8] == b"\x89PNG\r\n\x1a\n" and 1000 > int.from_bytes(png[16:20], "big") > 16,
                  "preset image: one PNG made in the page: %r" % (ims[0][:60] if ims else ims))
            check(len(d.find_elements(By.CSS_SELECTOR, "#images li img")) == 1, "preset image: its thumbnail shows")
        else:
            check("images" not in req and "videos" not in req, "preset %s: no media left from before" % name)
        submit_and_wait(d, "answers")
        if name == "ticket":
            answers_in_view(d, "1280x800 preset ticket")
            shot(d, "wide-answers.png")
        check(ordered(page_request(d)) == ordered(body), "preset %s: Decide sends the form's request" % name)
        bars_equal_decide(d, req, decide(req), "preset " + name)

    # ---- a pasted request round-trips: form fields, the JSON panel, what Decide sends, the answers
    pasted = ('{"model": "clef-flash",\n "state": {"serial": 12345678901234567890, "b": [1, 2.50, {"z": null, "a": true}]},\n'
              ' "questions": {"2": {"type": "choice", "instructions": "", "criteria": {"b": "Bee", "10": null, "a": ""}},\n'
              '   "lvl": {"type": "score", "criteria": [null, "mid", "top"]}, "1": {"type": "noul", "instructions": "On?"}},\n'
              ' "images": ["%s"], "raw": true, "media_kwargs": {}}' % data_url(PNG, "image/png"))
    paste_request(d, pasted)
    qs = form_questions(d)
    check(qs == [["2", "choice", ["b", "10", "a"]], ["lvl", "score", []], ["1", "noul", []]],
          "pasted: the questions and options in the form, in order: %r" % qs)
    check(d.find_element(By.ID, "kind-json").is_selected() and d.find_element(By.ID, "raw").is_selected()
          and len(d.find_elements(By.CSS_SELECTOR, "#images li img")) == 1, "pasted: JSON state, raw, one image")
    extra = js_text(d, "extra-keys")
    check('"media_kwargs"' in extra, "pasted: a key the form has no field for is listed as sent as pasted: %r" % extra)
    shown = form_request(d)
    check(ordered(shown) == ordered(pasted), "pasted: the JSON panel shows the pasted request\n %s" % shown[:400])
    submit_and_wait(d, "answers")
    sent = page_request(d)
    check(ordered(sent) == ordered(pasted) and "12345678901234567890" in sent and "2.50" in sent,
          "pasted: Decide sends the pasted request (order, the big integer, 2.50 as written)\n sent: %s" % sent[:400])
    bars_equal_decide(d, json.loads(pasted), decide(json.loads(pasted)), "pasted")
    paste_request(d, '{"state": "x", "questions": {"q": {"type": "noul", "instruction": "typo"}}}')
    msg = js_text(d, "json-error")
    check(d.find_element(By.ID, "json-error").get_attribute("hidden") is None and "questions.q" in msg
          and '"instruction"' in msg, "a key the form cannot hold is refused, naming the place: %r" % msg)
    check(form_questions(d) == qs, "a refused paste leaves the form as it was")
    # pasted on the page, outside any field: the panel opens with it and the form is filled
    d.execute_script("""
        document.getElementById('json-panel').open = false; document.activeElement.blur();
        const dt = new DataTransfer(); dt.setData('text/plain', arguments[0]);
        document.body.dispatchEvent(new ClipboardEvent('paste', {clipboardData: dt, bubbles: true, cancelable: true}));""",
                     '{"state": "pasted on the page", "questions": {"only": {"type": "noul"}}}')
    check(form_questions(d) == [["only", "noul", []]] and d.find_element(By.ID, "state").get_attribute("value")
          == "pasted on the page" and d.find_element(By.ID, "json-panel").get_attribute("open") is not None,
          "a request pasted outside a field fills the form: %r" % form_questions(d))
    check(js_text(d, "extra-keys") == "" and "media_kwargs" not in json.loads(form_request(d)),
          "a new paste replaces the earlier one's extra keys")
    d.execute_script("document.getElementById('json-panel').open = false")
    check(severe(d) == [], "no console errors at 1280x800")


def key_rounds(d, origin):
    """A server with --api-key: the 401 points at the key field; with the key, answers."""
    open_page(d, origin + "/", WIDE)
    check("API key" in d.find_element(By.ID, "server").text, "the header says the server needs a key: %r"
          % d.find_element(By.ID, "server").text)
    submit_and_wait(d, "error")
    err = js_text(d, "error")
    check(err.startswith("HTTP 401") and "Unauthorized" in err and "API key field" in err,
          "401: the panel says what to do: %r" % err)
    check(d.execute_script("return document.activeElement.id") == "api-key"
          and "invalid" in d.find_element(By.ID, "api-key").get_attribute("class")
          and d.find_element(By.ID, "options").get_attribute("open") is not None,
          "401: the API key field is shown, focused and marked")
    note = d.execute_script("const n = document.querySelector('#options .field-note'); return n && n.textContent")
    check(note and "API key" in note, "401: a note beside the key field: %r" % note)
    check(d.find_element(By.ID, "answers-heading").get_attribute("hidden") is not None, "401: no Answers heading")
    shot(d, "wide-401.png")
    d.find_element(By.ID, "api-key").send_keys(API_KEY)
    submit_and_wait(d, "answers")
    check(d.find_element(By.ID, "error").get_attribute("hidden") is not None
          and d.find_elements(By.CSS_SELECTOR, "#options .field-note, #form .invalid") == [],
          "with the key: answers, the error and the marks gone")
    check(d.find_element(By.ID, "answers-heading").get_attribute("hidden") is None, "with the key: the Answers heading")
    logs = severe(d)
    check(all("status of 401" in e.get("message", "") for e in logs), "only the 401s in the console: %r" % logs)


def network_checks(d, origins):
    """Every request the browser made went to one of the test's servers (or is a data: URL)."""
    urls = []
    for e in d.get_log("performance"):
        m = json.loads(e["message"])["message"]
        if m.get("method") == "Network.requestWillBeSent":
            urls.append(m["params"]["request"]["url"])
    sent = [u for u in urls if any(u == o + "/v1/systemone" for o in origins)]
    check(len(sent) == posts, "the performance log saw the %d POSTs: %d of %d requests" % (posts, len(sent), len(urls)))
    outside = [u for u in urls if not (any(u.startswith(o + "/") for o in origins) or u.startswith("data:"))]
    check(outside == [], "no request leaves the servers: %r" % outside)


def browser_checks(srv, key_srv):
    d = browser()
    origins = ["http://127.0.0.1:%d" % s.port for s in (srv, key_srv)]
    try:
        phone_rounds(d, origins[0])
        wide_rounds(d, origins[0])
        key_rounds(d, origins[1])
        network_checks(d, origins)
    finally:
        d.quit()
    print("screenshots in %s" % SHOTS)


def main():
    srv = Server()
    key_srv = Server("--api-key", API_KEY)
    try:
        http_checks(srv)
        st, _, data = get(srv.port, "/openapi.json")
        check(st == 200 and json.loads(data).get("openapi"), "/openapi.json (the page links to it): %s" % st)
        browser_checks(srv, key_srv)
    finally:
        stop(srv)
        stop(key_srv)
    srv = Server("--no-ui")
    try:
        for path in ("/", "/playground.js", "/playground.css"):
            st, _, data = get(srv.port, path)
            check(st == 404 and json.loads(data)["error"]["type"] == "NotFound", "--no-ui: %s is 404: %s" % (path, st))
        check(get(srv.port, "/health")[0] == 200, "--no-ui: the API is still there")
    finally:
        stop(srv)
    if TALLY.failures:
        print("%d of %d checks failed" % (len(TALLY.failures), TALLY.checks))
        sys.exit(1)
    print("playground: %d checks passed in headless %s" % (TALLY.checks, os.path.basename(CHROMIUM)))


if __name__ == "__main__":
    main()
