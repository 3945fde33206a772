"""Every error case of contract.md §3 answers with its engine name and the reference's message
(docs/errors.md), in the reference's order; then, when tests/fixtures/tiny/index.json (the real
reference run over tests/corpus) is present, every corpus request: a failure of the reference must be
our failure with the matching name and the same message; a success must be our success with the same
ids, spans, option ids, and (from the recorded logits) the same response bytes.

Runs with .venv-test's python; binaries from $CLEF_BUILD (default build/); needs models/tiny's
tokenizer.json (make tiny).
"""
import json
import os
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_errors import compare_message, ref_name  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("CLEF_BUILD", os.path.join(ROOT, "build"))
TOKENIZER = os.path.join(ROOT, "models", "tiny", "tokenizer.json")
CORPUS = os.path.join(ROOT, "tests", "corpus")
INDEX = os.path.join(ROOT, "tests", "fixtures", "tiny", "index.json")

Q = {"q": {"type": "noul"}}


def req(**kw):
    r = {"model": "m", "state": "s", "questions": Q}
    r.update(kw)
    return {k: v for k, v in r.items() if v is not DROP}


DROP = object()
# the reference's error for tokenized text with a lone surrogate: the HF tokenizer's TypeError
LONE = "TextEncodeInput must be Union[TextInputSequence, Tuple[InputSequence, InputSequence]]"
LONG = {f"q{i}": {"type": "choice", "instructions": "word " * 50, "criteria": {"a": "x " * 40, "b": None}}
        for i in range(40)}

# (label, request (a JSON value, or bytes for raw bodies), extra line fields, type, message or None)
CASES = [
    ("top-level list", [1], {}, "BadJson", "'list' object has no attribute 'get'"),
    ("top-level string", "x", {}, "BadJson", "'str' object has no attribute 'get'"),
    ("top-level null", None, {}, "BadJson", "'NoneType' object has no attribute 'get'"),
    ("bad json", b'{"model":"m",}', {}, "BadJson", None),
    ("invalid utf-8", b'{"model":"\xff"}', {}, "InvalidUtf8", None),
    ("missing model", req(model=DROP), {}, "MissingModelOrState", "model and state are required"),
    ("model not string", req(model=1), {}, "MissingModelOrState", "model and state are required"),
    ("model null", req(model=None), {}, "MissingModelOrState", "model and state are required"),
    ("missing state", req(state=DROP), {}, "MissingModelOrState", "model and state are required"),
    ("missing both", req(model=DROP, state=DROP), {}, "MissingModelOrState", "model and state are required"),
    ("state check before questions", req(state=DROP, questions=DROP), {}, "MissingModelOrState",
     "model and state are required"),
    ("questions missing", req(questions=DROP), {}, "NoQuestions", "at least one question is required"),
    ("questions empty", req(questions={}), {}, "NoQuestions", "at least one question is required"),
    ("questions list", req(questions=[Q]), {}, "NoQuestions", "at least one question is required"),
    ("questions null", req(questions=None), {}, "NoQuestions", "at least one question is required"),
    ("question string", req(questions={"q": "noul"}), {}, "BadQuestion", "'str' object has no attribute 'get'"),
    ("question null", req(questions={"q": None}), {}, "BadQuestion", "'NoneType' object has no attribute 'get'"),
    ("type case", req(questions={"q": {"type": "Noul"}}), {}, "BadQuestionType",
     "q: type must be noul, choice, or score"),
    ("type missing", req(questions={"x y": {}}), {}, "BadQuestionType",
     "x y: type must be noul, choice, or score"),
    ("type number", req(questions={"q": {"type": 0}}), {}, "BadQuestionType",
     "q: type must be noul, choice, or score"),
    ("type list", req(questions={"q": {"type": ["noul"]}}), {}, "BadQuestionType", "unhashable type: 'list'"),
    ("type object", req(questions={"q": {"type": {}}}), {}, "BadQuestionType", "unhashable type: 'dict'"),
    ("choice no criteria", req(questions={"c": {"type": "choice"}}), {}, "EmptyCriteria",
     "c: criteria must not be empty"),
    ("score []", req(questions={"c": {"type": "score", "criteria": []}}), {}, "EmptyCriteria",
     "c: criteria must not be empty"),
    ("choice 0", req(questions={"c": {"type": "choice", "criteria": 0}}), {}, "EmptyCriteria",
     "c: criteria must not be empty"),
    ("choice false", req(questions={"c": {"type": "choice", "criteria": False}}), {}, "EmptyCriteria",
     "c: criteria must not be empty"),
    ("interleaved: q1 criteria before q2 type",
     req(questions={"a": {"type": "choice", "criteria": ""}, "b": {"type": "bad"}}), {}, "EmptyCriteria",
     "a: criteria must not be empty"),
    ("interleaved: q1 type before q2 criteria",
     req(questions={"a": {"type": "bad"}, "b": {"type": "choice"}}), {}, "BadQuestionType",
     "a: type must be noul, choice, or score"),
    ("checks 3/4 before BadCriteria",
     req(questions={"a": {"type": "choice", "criteria": [1]}, "b": {"type": "x"}}), {}, "BadQuestionType",
     "b: type must be noul, choice, or score"),
    ("choice list", req(questions={"c": {"type": "choice", "criteria": ["a"]}}), {}, "BadCriteria",
     "'list' object has no attribute 'items'"),
    ("choice string", req(questions={"c": {"type": "choice", "criteria": "ab"}}), {}, "BadCriteria",
     "'str' object has no attribute 'items'"),
    ("choice number", req(questions={"c": {"type": "choice", "criteria": 3}}), {}, "BadCriteria",
     "'int' object has no attribute 'items'"),
    ("choice true", req(questions={"c": {"type": "choice", "criteria": True}}), {}, "BadCriteria",
     "'bool' object has no attribute 'items'"),
    ("score number", req(questions={"c": {"type": "score", "criteria": 2.5}}), {}, "BadCriteria",
     "'float' object is not iterable"),
    ("score true", req(questions={"c": {"type": "score", "criteria": True}}), {}, "BadCriteria",
     "'bool' object is not iterable"),
    ("noul string", req(questions={"n": {"type": "noul", "criteria": "yes"}}), {}, "BadCriteria",
     "dictionary update sequence element #0 has length 1; 2 is required"),
    ("noul number", req(questions={"n": {"type": "noul", "criteria": 7}}), {}, "BadCriteria",
     "'int' object is not iterable"),
    ("noul true", req(questions={"n": {"type": "noul", "criteria": True}}), {}, "BadCriteria",
     "'bool' object is not iterable"),
    ("noul list of ints", req(questions={"n": {"type": "noul", "criteria": [1, 2]}}), {}, "BadCriteria",
     "cannot convert dictionary update sequence element #0 to a sequence"),
    ("noul 3-char string item", req(questions={"n": {"type": "noul", "criteria": ["abc"]}}), {}, "BadCriteria",
     "dictionary update sequence element #0 has length 3; 2 is required"),
    ("noul pair then bad", req(questions={"n": {"type": "noul", "criteria": [["true", "x"], ["a"]]}}), {},
     "BadCriteria", "dictionary update sequence element #1 has length 1; 2 is required"),
    ("noul unhashable key", req(questions={"n": {"type": "noul", "criteria": [[{}, 1]]}}), {}, "BadCriteria",
     "unhashable type: 'dict'"),
    ("BadCriteria before SchemaTooLong", req(questions=dict(LONG, z={"type": "noul", "criteria": 1})),
     {"max_length": 100}, "BadCriteria", "'int' object is not iterable"),
    ("lone surrogate in instructions before own criteria",
     req(questions={"c": {"type": "choice", "instructions": "x\ud800", "criteria": 5}}), {}, "LoneSurrogate",
     LONE),
    ("criteria of q1 before surrogate of q2",
     req(questions={"c": {"type": "choice", "criteria": 5}, "d\udfff": {"type": "noul"}}), {}, "BadCriteria",
     "'int' object has no attribute 'items'"),
    ("lone surrogate in id", req(questions={"d\udfff": {"type": "noul"}}), {}, "LoneSurrogate",
     LONE),
    ("lone surrogate in option id",
     req(questions={"c": {"type": "choice", "criteria": {"\ud800\ud800": None}}}), {}, "LoneSurrogate",
     LONE),
    ("lone surrogate in state", req(state="ab\udc00"), {}, "LoneSurrogate",
     LONE),
    ("media before state", req(state="\ud800", images=[1]), {}, "UnsupportedMedia", None),
    ("videos", req(videos=["AAAA"]), {}, "UnsupportedMedia", None),
    ("images string", req(images="abc"), {}, "UnsupportedMedia", None),
    ("images number", req(images=3), {}, "UnsupportedMedia", None),
    ("undecodable image", req(images=["bm90IGFuIGltYWdl"]), {}, "UnsupportedMedia", None),
    ("media before SchemaTooLong", req(questions=LONG, images=[1]), {"max_length": 100}, "UnsupportedMedia", None),
    ("state surrogate before SchemaTooLong", req(questions=LONG, state="\ud800"), {"max_length": 100},
     "LoneSurrogate", None),
    ("schema too long", req(questions={"q": {"type": "noul", "instructions": "a"}}), {"max_length": 100},
     "SchemaTooLong", "schema requires {FIXED} tokens before state; maximum is 100"),
    ("fixed == max_length + 1", req(questions={"q": {"type": "noul", "instructions": "a"}}),
     {"max_length": "{FIXED-1}"}, "SchemaTooLong", "schema requires {FIXED} tokens before state; maximum is {FIXED-1}"),
    ("image pad literal with images", req(state="<|image_pad|>", images=["x"]), {"grids": [[1, 4, 4]]},
     "MediaTokenMismatch", "Image features and image tokens do not match, tokens: 5, features: 4"),
    ("model lone surrogate (ours: the response could not be encoded)", req(model="ab\ud800"), {}, "LoneSurrogate",
     "'utf-8' codec can't encode character '\\ud800' in position 2: surrogates not allowed"),
]

OK_CASES = [
    ("state null", req(state=None), {}),
    ("model empty", req(model=""), {}),
    ("unknown fields", req(id=5, extra={"x": 1}), {}),
    ("noul criteria pairs", req(questions={"n": {"type": "noul", "criteria": [["true", "x"]]}}), {}),
    ("noul criteria 2-char strings", req(questions={"n": {"type": "noul", "criteria": ["ab", "cd"]}}), {}),
    ("score object", req(questions={"s": {"type": "score", "criteria": {"lo": 1, "hi": 2}}}), {}),
    ("score string", req(questions={"s": {"type": "score", "criteria": "abc"}}), {}),
    ("image pad literal, text only", req(state="<|image_pad|>"), {}),
    ("images falsy", req(images=[], videos=None, media_kwargs=5), {}),
    ("fixed == max_length", req(questions={"q": {"type": "noul", "instructions": "a"}}), {"max_length": "{FIXED}"}),
    ("empty question span", req(questions={"": {"type": "noul"}}), {}),
]


def fixed_length():
    """prefix + schema + suffix of req(questions={"q": noul with instructions "a"}), counted with HF
    tokenizers piece by piece (contract.md §4.2), independently of our encoder."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(TOKENIZER)
    n = lambda s: len(tok.encode(s, add_special_tokens=False).ids)
    sp = ("Read the complete state and schema. Decide every field jointly. Each answer must be exactly one of "
          "that field's allowed options.")
    pieces = [f"<|im_start|>system\n{sp}<|im_end|>\n<|im_start|>user\nSTATE:\n",
              "\n\nSCHEMA FIELDS:\n", "\nFIELD 1\nID: q\nTYPE: noul\nINSTRUCTION: ", "a", "\nALLOWED OPTIONS:\n"]
    for j, (oid, d) in enumerate([("true", "The proposition is true or the answer is yes."),
                                  ("false", "The proposition is false or the answer is no.")]):
        pieces += [f"OPTION {j + 1}: ", json.dumps({"description": d, "option_id": oid}, separators=(",", ":")), "\n"]
    pieces += ["END FIELD\n", "\n<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nJOINT SCHEMA DECISIONS:"]
    return sum(n(p) for p in pieces)


def subst(v, fixed):
    if isinstance(v, str):
        v2 = v.replace("{FIXED-1}", str(fixed - 1)).replace("{FIXED}", str(fixed))
        return int(v2) if v2.isdigit() and v != v2 and v.startswith("{") else v2
    if isinstance(v, dict):
        return {k: subst(x, fixed) for k, x in v.items()}
    return v


def main():
    bridge = os.path.join(BUILD, "tests", "decision_bridge")
    if not os.access(bridge, os.X_OK):
        print(f"skip: no {bridge} (build first)")
        sys.exit(77)
    if not os.path.exists(TOKENIZER):
        print(f"skip: no {TOKENIZER} (make tiny)")
        sys.exit(77)

    fixed = fixed_length()
    lines, meta = [], []
    for label, r, extra, typ, msg in CASES:
        extra = subst(extra, fixed)
        msg = subst(msg, fixed) if msg else msg
        line = dict(extra)
        if isinstance(r, bytes):
            line["request_hex"] = r.hex()
        else:
            line["request"] = r
        lines.append(json.dumps(line, ensure_ascii=True))
        meta.append((label, typ, msg))
    for label, r, extra in OK_CASES:
        extra = subst(extra, fixed)
        lines.append(json.dumps(dict(extra, request=r), ensure_ascii=True))
        meta.append((label, None, None))

    index = None
    if os.path.exists(INDEX):
        with open(INDEX, encoding="utf-8") as f:
            index = json.load(f)
        with open(os.path.join(os.path.dirname(INDEX), index["bin"]["file"]), "rb") as f:
            data = f.read()
        for e in index["requests"]:
            with open(os.path.join(CORPUS, e["file"]), "rb") as f:
                raw = f.read()
            line = {"request_hex": raw.hex()}
            if e.get("ok"):
                lg = []
                for q in e["questions"]:
                    off, shape = q["logits"]["off"], q["logits"]["shape"]
                    n = 1
                    for s in shape:
                        n *= s
                    lg.append(list(struct.unpack_from("<%df" % n, data, off)))
                line["logits"] = lg
            lines.append(json.dumps(line, ensure_ascii=True))
            meta.append(("corpus " + e["name"], e, None))

    # lines are ASCII-escaped: lone surrogates travel as \udXXX escapes (NaN logits as NaN literals)
    text = "\n".join(lines) + "\n"
    p = subprocess.run([bridge, "--tokenizer", TOKENIZER], input=text.encode("ascii"), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=900)
    if p.returncode != 0:
        print(p.stderr.decode("utf-8", "replace"))
        sys.exit(1)
    out = [json.loads(l) for l in p.stdout.decode("utf-8", "surrogatepass").splitlines()]
    assert len(out) == len(meta), (len(out), len(meta))

    fails = []
    n_err = n_ok = 0
    corpus = {"errors": 0, "errors_ok": 0, "ok": 0, "ok_equal": 0}
    for (label, typ, msg), res in zip(meta, out):
        enc = res.get("encode", {})
        got = enc.get("error") if isinstance(enc, dict) else None
        if isinstance(typ, dict):  # corpus entry with the reference's outcome
            e = typ
            if not e.get("ok"):
                corpus["errors"] += 1
                err = e["error"]
                want = ref_name(err)
                if got is None:
                    fails.append(f"{label}: reference fails ({err['class']}: {err['message']}), we do not")
                elif got["type"] not in want:
                    fails.append(f"{label}: {got['type']} not in {want} ({err['class']}: {err['message']})")
                elif compare_message(err) and got["message"] != err["message"]:
                    fails.append(f"{label}: message {got['message']!r} != {err['message']!r}")
                else:
                    corpus["errors_ok"] += 1
                continue
            corpus["ok"] += 1
            if got is not None:
                fails.append(f"{label}: we fail ({got}), the reference answers")
                continue
            problems = []
            if enc["input_ids"] != e["input_ids"]:
                problems.append("input_ids")
            for ours, ref in zip(enc["questions"], e["questions"]):
                for k in ("question_id", "question_type", "question_span", "option_spans", "option_ids"):
                    if ours[k] != ref[k]:
                        problems.append(f"{ref['question_id']}.{k}")
            if len(enc["questions"]) != len(e["questions"]):
                problems.append("question count")
            if res.get("response") != e["response"]:
                problems.append(f"response\n   ours {res.get('response')}\n   ref  {e['response']}")
            if problems:
                fails.append(f"{label}: differs: {', '.join(problems)}")
            else:
                corpus["ok_equal"] += 1
            continue
        if typ is None:
            n_ok += 1
            if got is not None:
                fails.append(f"{label}: expected success, got {got}")
            continue
        n_err += 1
        if got is None:
            fails.append(f"{label}: expected {typ}, got success")
        elif got["type"] != typ or (msg is not None and got["message"] != msg):
            fails.append(f"{label}: expected {typ}: {msg!r}\n   got {got['type']}: {got['message']!r}")

    print(f"contract cases: {n_err} errors, {n_ok} successes")
    if index is None:
        print(f"note: no {os.path.relpath(INDEX, ROOT)}: corpus not compared with the reference")
    else:
        print(f"corpus vs reference: errors {corpus['errors_ok']}/{corpus['errors']} same name+message; "
              f"answers {corpus['ok_equal']}/{corpus['ok']} same ids, spans, option ids and response bytes")
    for f_ in fails:
        print("FAIL", f_)
    print(f"{len(meta) - len(fails)} passed, {len(fails)} failed")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
