"""What the reference accepts silently, said beside the unchanged answer (docs/errors.md "Warnings and
strict mode"), on models/tiny: `clef decide` on stderr, the server's Clef-Warning headers and log line,
the Python package's clef.RequestWarning; --strict / strict=True refuses the same requests (422
StrictRefused naming the key as a JSON pointer and the nearest known key). The answer bytes stay the
reference's: a request with a misspelt key gets the bytes of the same request without that key, and a
refusal keeps the reference's message while the warning says where and what was expected.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clef_server as cs  # noqa: E402
from clef_server import TALLY, check  # noqa: E402

TMP = tempfile.mkdtemp(prefix="clef-warn-test-")


def decide(req, *extra):
    path = os.path.join(TMP, "req.json")
    with open(path, "w") as f:
        json.dump(req, f)
    p = subprocess.run([cs.CLEF, "decide", "--model", cs.MODEL, "--threads", "1", "--request", path] + list(extra),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    return p.returncode, p.stdout.rstrip(b"\n"), p.stderr.decode("utf-8", "replace")


TYPO = {"model": "m", "state": "The kettle is boiling.",
        "questions": {"hot": {"type": "noul", "instruction": "Is it hot?"}}}
CLEAN = {"model": "m", "state": "The kettle is boiling.", "questions": {"hot": {"type": "noul"}}}
TYPO_LINE = "unknown key /questions/hot/instruction; did you mean instructions?"
LIST_LINE = "/questions must be an object of id -> question, got a list"
EMPTY_SPAN = {"model": "m", "state": "x", "questions": {"": {"type": "noul"}}}


def long_state():
    return " ".join("word%d" % i for i in range(600))


def test_decide():
    rc, out, err = decide(TYPO)
    rc0, out0, _ = decide(CLEAN)
    check(rc == 0 and out == out0, "decide: a misspelt key keeps the answer bytes of the request without it")
    check(TYPO_LINE in err, "decide: stderr names the unknown key and the nearest known one: %r" % err)
    rc, out, err = decide(TYPO, "--strict")
    body = json.loads(out)
    check(rc == 1 and body["error"]["type"] == "StrictRefused" and TYPO_LINE in body["error"]["message"],
          "decide --strict refuses the misspelt key: %r" % out)
    rc, out, err = decide(dict(CLEAN, modle=1))
    check("unknown key /modle; did you mean model?" in err, "decide: a swapped pair of letters is one edit: %r" % err)

    _, _, err = decide(dict(CLEAN, **{"a/b~c\u00e9\\": 1}))
    check("clef: warning: unknown key /a~1b~0c\\xc3\\xa9\\x5c; ignored (known keys: model state questions" in err,
          "a key is written as a JSON pointer in printable ASCII: %r" % err)
    many = dict(CLEAN, **{"extra%d" % i: i for i in range(20)})
    _, _, err = decide(many)
    lines = [ln for ln in err.splitlines() if ln.startswith("clef: warning:")]
    check(len(lines) == 9 and lines[-1] == "clef: warning: 12 more unknown keys",
          "warnings are capped at 8 lines and a count: %r" % lines[-2:])

    rc, out, err = decide({"model": "m", "state": "x", "questions": [{"type": "noul"}]})
    check(json.loads(out)["error"] == {"type": "NoQuestions", "message": "at least one question is required"},
          "questions as a list keeps the reference's bytes: %r" % out)
    check(LIST_LINE in err, "questions as a list: the warning says what was expected: %r" % err)
    _, _, err = decide({"model": "m", "questions": {"q": {"type": "noul"}}})
    check("/state is missing" in err and "/model" not in err, "missing state is named alone: %r" % err)
    _, _, err = decide({"model": 7, "state": "x", "questions": {"q": {"type": "noul"}}})
    check("/model must be a string, got a number" in err, "a non-string model is named: %r" % err)

    rc, out, err = decide(dict(CLEAN, state=long_state()), "--max-length", "300")
    check(rc == 0 and re.search(r"state cut to \d+ tokens \(it has \d+; the limit is 300 tokens", err),
          "decide: truncation is reported: %r" % err)
    rc, out, err = decide(dict(CLEAN, state=long_state()), "--max-length", "300", "--strict")
    check(rc == 1 and b"StrictRefused" in out and b"state cut to" in out, "strict refuses a truncated state: %r" % out)

    rc, out, err = decide(EMPTY_SPAN)
    check(rc == 0 and b"NaN" in out, "an empty question span answers NaN without --strict (parity): %r" % out)
    rc, out, err = decide(EMPTY_SPAN, "--strict")
    body = json.loads(out)
    check(rc == 1 and body["error"]["type"] == "StrictRefused" and body["error"]["message"].startswith("/questions/:")
          and "NaN" in body["error"]["message"], "strict names the question whose answer would be NaN: %r" % out)


def batch(lines_text, name):
    src = os.path.join(TMP, name)
    with open(src, "w") as f:
        f.write(lines_text)
    out = os.path.join(TMP, name + ".out.jsonl")
    p = subprocess.run([cs.CLEF, "batch", "--model", cs.MODEL, "--threads", "1", src, out],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    body = open(out, "rb").read() if os.path.exists(out) else b""
    return p.returncode, body, p.stderr.decode("utf-8", "replace")


def test_encode():
    """clef encode (the inspection verb: the host pipeline alone) says what clef decide says."""
    def encode(req, *extra):
        path = os.path.join(TMP, "enc.json")
        with open(path, "w") as f:
            json.dump(req, f)
        p = subprocess.run([cs.CLEF, "encode", "--model", cs.MODEL, "--request", path] + list(extra),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
        return p.returncode, p.stdout.rstrip(b"\n"), p.stderr.decode("utf-8", "replace")

    rc, out, err = encode(TYPO)
    rc0, out0, err0 = encode(CLEAN)
    check(rc == 0 and out == out0 and err0 == "", "encode: a misspelt key keeps the record of the request without it")
    check("clef: warning: " + TYPO_LINE in err, "encode: stderr names the unknown key: %r" % err)
    rc, out, err = encode({"model": "m", "state": "x", "questions": [{"type": "noul"}]})
    check(rc == 1 and b"NoQuestions" in out and LIST_LINE in err, "encode: questions as a list is explained: %r" % err)
    rc, out, err = encode(dict(CLEAN, state=long_state()), "--max-length", "300")
    check(rc == 0 and "state cut to" in err and "the limit is 300 tokens" in err,
          "encode: truncation is reported: %r" % err)


def test_batch():
    rc, out, err = batch("\n".join(json.dumps(r) for r in (CLEAN, TYPO, TYPO)) + "\n", "warn.jsonl")
    lines = out.splitlines()
    event = json.loads([ln for ln in err.splitlines() if ln.startswith('{"event":"batch"')][-1])
    check(rc == 0 and len(lines) == 3 and lines[0] == lines[1], "batch: answers unchanged: %r" % out)
    check(event.get("warned") == 2 and "clef batch: warning: line 2: " + TYPO_LINE in err,
          "batch: the summary counts the warned requests and shows the first: %r" % err)
    rc, out, err = batch(json.dumps(CLEAN, indent=2) + "\n", "pretty.json")
    check(rc == 2 and b"BadJson" not in out and "pretty-printed JSON" in err and "JSONL" in err,
          "batch: a pretty-printed JSON file stops with advice, no BadJson lines: rc=%d %r" % (rc, err))


def test_errors_teach():
    empty = os.path.join(TMP, "empty-model")
    os.makedirs(empty, exist_ok=True)
    for d, what in ((empty, "an empty model folder"), (os.path.join(TMP, "no-model"), "a missing model folder")):
        p = subprocess.run([cs.CLEF, "decide", "--model", d, "--request", "-"], input=json.dumps(CLEAN).encode(),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
        err = p.stderr.decode()
        check(p.returncode == 3 and "clef pull --dir " + d in err and "make tiny" in err,
              "%s says what to do: %r" % (what, err))
    img = dict(CLEAN, images=[os.path.join(TMP, "no-such.png")])
    rc, out, err = decide(img, "--allow-image-paths")
    check(json.loads(out)["error"]["message"] == "image file '%s' does not exist" % img["images"][0],
          "a missing image file with --allow-image-paths is named as missing: %r" % out)
    vid = dict(CLEAN, videos=["data:video/mp4;base64," + "QUJD" * 200])
    rc, out, err = decide(vid)
    check(json.loads(out)["error"] == {"type": "UnsupportedMedia", "message": "'video_fps'"},
          "a corrupt video keeps the reference's bytes: %r" % out)
    check("could not be opened as a video" in err, "a corrupt video: the warning says what is wrong: %r" % err)
    p = subprocess.run([cs.CLEF, "gate", "--model", cs.MODEL], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=300)
    err = p.stderr.decode()
    check(p.returncode == 2 and "needs the release weights" in err and
          "clef gate --model models/tiny --fixture tests/fixtures/gate_tiny/fixtures-gate-tiny.json" in err,
          "gate on tiny with the built-in fixture names the command that works: rc=%d %r" % (p.returncode, err[-600:]))


def test_server():
    srv = cs.Server(log_dir=TMP, stop_timeout=120)
    try:
        st, hd, data = cs.post(srv.port, json.dumps(TYPO).encode())
        st0, _, data0 = cs.post(srv.port, json.dumps(CLEAN).encode())
        check(st == 200 and data == data0, "serve: the answer bytes do not change")
        check(hd.get("clef-warning") == TYPO_LINE, "serve: Clef-Warning header: %r" % hd.get("clef-warning"))
        check("clef-warning" not in {k.lower() for k in cs.request(srv.port, "POST", "/v1/systemone",
              json.dumps(CLEAN).encode(), {"Content-Type": "application/json"})[1]},
              "serve: no Clef-Warning on a clean request")
        qid = "\u00e9" * 40  # each key byte is written \xHH: 8 such lines pass the log line's 4 KiB
        long_keys = {"model": "m", "state": "x", "questions": {qid: dict(
            {"type": "noul"}, **{("k%02d" % i) + "\u00e9" * 40: i for i in range(20)})}}
        st, _, _ = cs.post(srv.port, json.dumps(long_keys).encode())
        check(st == 200, "serve: a request with 20 long unknown keys is answered")
        st, hd, data = cs.post(srv.port, b'{"model":"m","state":"x","questions":[1]}')
        check(st == 422 and json.loads(data)["error"]["type"] == "NoQuestions" and hd.get("clef-warning") == LIST_LINE,
              "serve: the reference's refusal with our explanation beside it: %r %r" % (data, hd))
    finally:
        srv.stop()
    log = srv.logtext()
    check(TYPO_LINE in log and '"warnings":' in log, "serve: the log line carries the warning")
    check("line too long" not in log and log.count('"event":"request"') >= 4 and "unknown key /questions/\\\\xc3\\\\xa9" in log,
          "serve: many long warnings still leave a whole request log line")
    srv = cs.Server("--strict", log_dir=TMP, stop_timeout=120)
    try:
        st, hd, data = cs.post(srv.port, json.dumps(TYPO).encode())
        check(st == 422 and json.loads(data)["error"]["type"] == "StrictRefused" and TYPO_LINE in data.decode(),
              "serve --strict: 422 naming the key: %r" % data)
    finally:
        srv.stop()


def test_python():
    lib = os.path.join(cs.BUILD, "dist", "libclef.so")
    if not os.path.exists(lib):  # the sanitizer build ships no shared library: the optimized suite runs it
        print(f"python: skipped (no {lib})")
        return
    os.environ["CLEF_LIBRARY"] = lib
    sys.path.insert(0, os.path.join(cs.ROOT, "python", "src"))
    import clef
    with clef.Engine(cs.MODEL, threads=1) as eng:
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            raw = eng.decide_raw(TYPO)
        check(raw == eng.decide_raw(CLEAN), "python: answer unchanged")
        check([str(w.message) for w in got if w.category is clef.RequestWarning] == [TYPO_LINE],
              "python: one RequestWarning naming the key: %r" % [str(w.message) for w in got])
        check(all(w.filename == os.path.abspath(__file__) for w in got),
              "python: the warning points at the caller's line: %r" % [w.filename for w in got])
        try:
            eng.decide(dict(CLEAN, images=["photo.png"]))
            check(False, "python: a str image path is refused")
        except clef.Error as e:
            check("--allow-image-paths" not in e.message and "pathlib.Path" in e.message,
                  "python: the path error names no CLI flag: %r" % e.message)
    with clef.Engine(cs.MODEL, threads=1, strict=True) as eng:
        try:
            eng.decide(TYPO)
            check(False, "python strict=True refuses the misspelt key")
        except clef.Error as e:
            check(e.type == "StrictRefused" and e.status == 422 and TYPO_LINE in e.message, "python strict: %r" % e)


def main():
    if not os.path.exists(os.path.join(cs.MODEL, "config.json")):
        print("skip: no models/tiny")
        return 77
    test_decide()
    test_encode()
    test_batch()
    test_errors_teach()
    test_server()
    test_python()
    if TALLY.failures:
        print("%d failure(s)" % len(TALLY.failures))
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
