"""The reference's failures as our error bodies, for the tests that compare them (test_contract_errors,
test_error_bodies): the engine names a reference exception maps to and whether its message is ours
to copy (docs/errors.md), the reference's error requests of tests/fixtures/tiny/index.json (the real
reference run over tests/corpus: stage, exception class and str() of each), and the error body's
shape as docs/errors.md states it, filled in byte for byte."""
import json
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INDEX = os.path.join(ROOT, "tests", "fixtures", "tiny", "index.json")
CORPUS = os.path.join(ROOT, "tests", "corpus", "requests")
ERRORS_DOC = os.path.join(ROOT, "docs", "errors.md")


def ref_name(err):
    """The engine names that a reference exception maps to (docs/errors.md)."""
    cls, m = err["class"], err["message"]
    if err["stage"] == "parse":
        return {"InvalidUtf8"} if cls == "UnicodeDecodeError" else {"BadJson"}
    if m == "model and state are required":
        return {"MissingModelOrState"}
    if m == "at least one question is required":
        return {"NoQuestions"}
    if m.endswith(": type must be noul, choice, or score"):
        return {"BadQuestionType"}
    if m.endswith(": criteria must not be empty"):
        return {"EmptyCriteria"}
    if m.startswith("schema requires "):
        return {"SchemaTooLong"}
    if m.endswith("has no attribute 'get'"):
        return {"BadJson", "BadQuestion"}
    if m.startswith("unhashable type"):
        return {"BadQuestionType", "BadCriteria"}
    if ("has no attribute 'items'" in m or "is not iterable" in m or "dictionary update sequence" in m):
        return {"BadCriteria"}
    if "surrogate" in m or m.startswith("TextEncodeInput must be"):
        return {"LoneSurrogate"}
    if "Image features and image tokens do not match" in m:
        return {"MediaTokenMismatch"}
    return {"UnsupportedMedia"}


def compare_message(err):
    """Messages we copy exactly (docs/errors.md): everything but media decoder/processor failures."""
    if err["stage"] == "parse":
        return True
    return ref_name(err) != {"UnsupportedMedia"}


def reference_errors():
    """[(name, request bytes, the reference's error {stage, class, message})] for every corpus request
    the reference failed, in corpus order; None when the fixture is absent."""
    if not os.path.exists(INDEX):
        return None
    with open(INDEX, encoding="utf-8") as f:
        index = json.load(f)
    out = []
    for e in index["requests"]:
        if not e.get("ok"):
            with open(os.path.join(os.path.dirname(CORPUS), e["file"]), "rb") as f:
                out.append((e["name"], f.read(), e["error"]))
    return out


def body_template():
    """The error body as docs/errors.md's first paragraph writes it: `{"error":{...}}` with the
    placeholders "<Name>" and "<text>"."""
    text = open(ERRORS_DOC, encoding="utf-8").read()
    m = re.search(r'`(\{"error":\{[^`]*\}\})`', text)
    if not m or '"<Name>"' not in m.group(1) or '"<text>"' not in m.group(1):
        raise SystemExit("docs/errors.md states no error body with \"<Name>\" and \"<text>\"")
    return m.group(1)


def json_string(s):
    """s as the error body writes a string: Python's json.dumps(ensure_ascii=False), a lone surrogate
    as its \\uXXXX escape (docs/errors.md "The body is always valid UTF-8")."""
    return re.sub("[\ud800-\udfff]", lambda m: "\\u%04x" % ord(m.group(0)), json.dumps(s, ensure_ascii=False))


def error_body(template, name, message):
    """The body's bytes for engine name `name` and `message`."""
    body = template.replace('"<Name>"', json_string(name), 1).replace('"<text>"', json_string(message), 1)
    return body.encode("utf-8")
