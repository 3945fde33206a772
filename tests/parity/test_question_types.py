#!/usr/bin/env python3
"""The question-type table (src/base/question_type.h, CLEF_QUESTION_TYPES) is the one home of the
question types (issue #37 item 2; docs/development.md "Adding a question type"):

- No type's name appears in src/ or web/ outside the table: no file (C, CUDA, JavaScript, HTML,
  CSS) holds a name as a word outside its comments (in a string, an identifier, a selector). A name the code needs comes from the table (clef_qtype_name, #name in an
  X-macro, or /question_types.js for the playground, which goes by each type's shape).
- The built clef reads the table: a bad "type" is refused with every name of the table, in table
  order, in the message; a request with one question of each type encodes each with its row's index
  as question_type (the row of type_embedding the head adds).
- The walk-through in docs/development.md names every file that reads the table (includes
  base/question_type.h or uses CLEF_QUESTION_TYPES), every path it names exists, and every function
  it promises per row (resolve_<name>, answer_<name>) exists for each row.

Plain text over the sources, then build/clef (CLEF_BUILD) with models/tiny; exits 0 pass, 1 fail,
77 skip (no build or no models/tiny) for the part that needs them."""
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("CLEF_BUILD", os.path.join(ROOT, "build")).rstrip("/")
CLEF = os.path.join(BUILD, "clef")
MODEL = os.path.join(ROOT, "models", "tiny")
TABLE = "src/base/question_type.h"
DOC = "docs/development.md"

fails = []


def check(ok, what):
    if not ok:
        fails.append(what)
        print("FAIL:", what)


def read(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8", errors="replace") as f:
        return f.read()


def table_rows():
    """(ID, name, shape) of each row of CLEF_QUESTION_TYPES, in order."""
    text = read(TABLE)
    body = text[text.index("#define CLEF_QUESTION_TYPES(X, SEP)"):]
    body = body[:body.index("\n\n")]  # the macro ends at the first empty line
    return [(r[0], r[1], r[4]) for r in re.findall(r"\bX\(\s*(\w+),\s*(\w+),\s*(\w+),\s*(\w+),\s*(\w+),", body)]


def line_of(text, pos):
    return text.count("\n", 0, pos) + 1


# A JavaScript regular expression literal may follow these (a '/' after anything else divides).
REGEX_BEFORE = set("(,=:[!&|?{};") | {""}


def uncommented(text, js):
    """C or JavaScript text with its comments blanked (newlines kept); strings and regular
    expression literals are stepped over whole, so a quote or slash in them starts nothing."""
    out = []
    i, n = 0, len(text)
    prev = ""  # the last character that is not a space, outside comments
    while i < n:
        c = text[i]
        if text.startswith("//", i) or text.startswith("/*", i):
            if c == "/" and text[i + 1] == "/":
                j = text.find("\n", i)
                j = n if j < 0 else j
            else:
                j = text.find("*/", i + 2)
                j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
            continue
        if c in "\"'" or (js and c == "`"):
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
        elif js and c == "/" and prev in REGEX_BEFORE:
            j, cls = i + 1, False  # a regex literal: to the next '/' outside a [class]
            while j < n and (text[j] != "/" or cls) and text[j] != "\n":
                if text[j] == "\\":
                    j += 1
                elif text[j] == "[":
                    cls = True
                elif text[j] == "]":
                    cls = False
                j += 1
        else:
            if not c.isspace():
                prev = c
            out.append(c)
            i += 1
            continue
        out.append(text[i:j + 1])
        i, prev = j + 1, c
    return "".join(out)


def scan_sources(names):
    word = re.compile(r"\b(%s)\b" % "|".join(map(re.escape, names)))
    n_files = 0
    for top in ("src", "web"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, top)):
            for f in sorted(files):
                rel = os.path.relpath(os.path.join(dirpath, f), ROOT)
                if rel == TABLE:
                    continue
                text = read(rel)
                n_files += 1
                if f.endswith((".c", ".h", ".cu", ".cuh", ".inc", ".js")):
                    code = uncommented(text, f.endswith(".js"))
                else:  # HTML, CSS
                    code = re.sub(r"<!--.*?-->|/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
                for m in word.finditer(code):
                    check(False, "%s:%d: the type name %r outside a comment: take it from the table (%s)"
                          % (rel, line_of(code, m.start()), m.group(1), TABLE))
    check(n_files > 50, "scanned only %d files of src/ and web/" % n_files)
    print("scanned %d files of src/ and web/ for %s" % (n_files, ", ".join(names)))


def readers():
    """The files of src/ that read the table."""
    out = []
    for dirpath, _, files in os.walk(os.path.join(ROOT, "src")):
        for f in sorted(files):
            rel = os.path.relpath(os.path.join(dirpath, f), ROOT)
            if rel in (TABLE, "src/base/question_type.c"):
                continue
            text = read(rel)
            if '#include "base/question_type.h"' in text or "CLEF_QUESTION_TYPES(" in text:
                out.append(rel)
    return sorted(out)


def check_walkthrough(rows):
    doc = read(DOC)
    m = re.search(r"^## Adding a question type\n(.*?)(?=^## )", doc, re.S | re.M)
    check(m is not None, DOC + ' has no "## Adding a question type" section')
    if not m:
        return
    sec = m.group(1)
    for rel in readers():
        check(rel in sec, "%s reads the question-type table but the walk-through in %s does not name it" % (rel, DOC))
    for rel in sorted(set(re.findall(r"\b((?:src|web|tests|docs)/[\w./-]+\.\w+)", sec))):
        check(os.path.exists(os.path.join(ROOT, rel)), "the walk-through names %s, which does not exist" % rel)
    check(TABLE in sec, "the walk-through does not name the table " + TABLE)
    for fn, rel in (("resolve_<name>", "src/decision/request.c"), ("answer_<name>", "src/decision/response.c")):
        check(fn in sec, "the walk-through does not say that a type needs %s in %s" % (fn, rel))
        text = read(rel)
        for _, name, _ in rows:
            f = fn.replace("<name>", name)
            check(re.search(r"\bstatic \w+ %s\(" % re.escape(f), text) is not None, "%s has no %s" % (rel, f))


def run(args, body):
    p = subprocess.run([CLEF] + args, input=body.encode(), capture_output=True, timeout=300)
    return p.returncode, p.stdout.decode("utf-8", "replace")


def check_binary(rows):
    names = [r[1] for r in rows]
    want = ", ".join(names[:-1]) + (", or " if len(names) > 2 else " or ") + names[-1]
    rc, out = run(["decide", "--model", MODEL, "--request", "-"],
                  json.dumps({"model": "m", "state": "s", "questions": {"q": {"type": "none of them"}}}))
    err = json.loads(out).get("error", {}) if out.strip() else {}
    check(rc != 0 and err.get("type") == "BadQuestionType" and err.get("message") == "q: type must be " + want,
          "a bad type: %d %r, want BadQuestionType 'q: type must be %s'" % (rc, out[:300], want))
    # one question of each type (criteria that every type takes: a list of two levels or an object)
    qs = {}
    for _, name, shape in rows:
        q = {"type": name, "instructions": "is it " + name}
        if shape == "keyed":
            q["criteria"] = {"a": "first", "b": "second"}
        elif shape == "levels":
            q["criteria"] = ["low", "high"]
        qs["q_" + name] = q
    rc, out = run(["encode", "--model", MODEL, "--request", "-"], json.dumps({"model": "m", "state": "s", "questions": qs}))
    check(rc == 0, "clef encode of one question per type: rc %d %r" % (rc, out[:300]))
    if rc == 0:
        rec = json.loads(out)
        got = [(q.get("question_id"), q.get("question_type")) for q in rec.get("questions", [])]
        check(got == [("q_" + name, i) for i, (_, name, _) in enumerate(rows)],
              "question_type of each row is its index in the table: %r" % (got,))


def main():
    rows = table_rows()
    check(len(rows) >= 2, "read %d rows from %s" % (len(rows), TABLE))
    if not rows:
        return 1
    print("the table: %s" % ", ".join("%s=%s (%s)" % (r[1], i, r[2]) for i, r in enumerate(rows)))
    scan_sources([r[1] for r in rows])
    check_walkthrough(rows)
    skipped = None
    if not os.access(CLEF, os.X_OK) or not os.path.isdir(MODEL):
        skipped = "no %s or no %s: the built binary was not checked" % (CLEF, MODEL)
    else:
        check_binary(rows)
    if fails:
        print("FAIL: %d problem(s)" % len(fails))
        return 1
    if skipped:
        print("SKIP:", skipped)
        return 77
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
