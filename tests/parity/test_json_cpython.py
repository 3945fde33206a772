#!/usr/bin/env python3
"""Parity: our JSON parser/renderer and pyfmt against CPython's own json, repr, round and sum.

Generates deterministic cases (random nested documents with unicode, astral characters and
surrogate escapes, duplicate keys, big integers up to 4,300 digits and just over, floats of every
kind, NaN/Infinity, whitespace variants; malformed documents; doubles for repr/round; float lists for
sum), runs tests/tools/json_bridge once per mode over all of them, and compares byte for byte with
what this CPython computes in the same process:

  render / render-unsorted: json.dumps(json.loads(doc), ensure_ascii=False, separators=(",", ":"),
      sort_keys=...) encoded with surrogatepass (our strings keep lone surrogates as WTF-8); a
      refused document must be refused by us too, with the same message (JSONDecodeError's text,
      or the int digit-limit ValueError's), type BadJson; bytes that are not UTF-8 -> InvalidUtf8.
  repr, round, sum: repr(x), repr(round(x, n)), repr(sum(xs)).

Known, intended divergences (not compared): nesting deeper than our limit (512; Python raises
RecursionError somewhere near 1000), and round() results that overflow (CPython raises
OverflowError, we return inf) - the latter are compared against inf.

Env: CLEF_BUILD (default: <repo>/build), JSON_PARITY_SEED (default 20260), JSON_PARITY_SCALE
(default 1.0: multiplies the number of generated cases). Last line: "N cases: N equal".
"""
import json
import math
import os
import random
import struct
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("CLEF_BUILD", os.path.join(ROOT, "build"))
BRIDGE = os.path.join(BUILD, "tests", "json_bridge")
SEED = int(os.environ.get("JSON_PARITY_SEED", "20260"))
SCALE = float(os.environ.get("JSON_PARITY_SCALE", "1.0"))

sys.set_int_max_str_digits(4300)  # the default; make it explicit (the parse limit we mirror)


def n_of(k):
    return max(1, int(k * SCALE))


# ---------------------------------------------------------------- strings

RAW_CLASSES = [
    (40, lambda r: chr(r.randint(0x20, 0x7E))),
    (4, lambda r: r.choice('"\\/')),
    (3, lambda r: chr(r.randint(0, 0x1F))),          # must be escaped
    (2, lambda r: "\x7f"),
    (6, lambda r: chr(r.randint(0xA0, 0x7FF))),
    (6, lambda r: chr(r.randint(0x800, 0xD7FF))),
    (3, lambda r: chr(r.randint(0xE000, 0xFFFF))),
    (2, lambda r: r.choice("\u2028\u2029\ufeff\uffff\ue000\u00e9\u0301")),
    (6, lambda r: chr(r.randint(0x10000, 0x10FFFF))),
    (3, lambda r: r.choice("😀🎉𝄞\U0010ffff\U00010000")),
    (3, lambda r: "\x00"),
]
_W = [w for w, _ in RAW_CLASSES]
_F = [f for _, f in RAW_CLASSES]


def rand_char(r):
    return r.choices(_F, weights=_W)[0](r)


SHORT = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}


def u_escape(r, cp):
    h = "%04x" % cp
    if r.random() < 0.5:
        h = h.upper()
    elif r.random() < 0.3:
        h = "".join(c.upper() if r.random() < 0.5 else c for c in h)
    return "\\u" + h


def encode_char(r, ch):
    """One character as JSON source text (raw where allowed, else or randomly escaped)."""
    cp = ord(ch)
    must = cp < 0x20 or ch in '"\\'
    if not must and r.random() < 0.8:
        return ch
    if ch in SHORT and r.random() < 0.7:
        return SHORT[ch]
    if ch == "/" and r.random() < 0.5:
        return "\\/"
    if cp >= 0x10000:
        v = cp - 0x10000
        return u_escape(r, 0xD800 + (v >> 10)) + u_escape(r, 0xDC00 + (v & 0x3FF))
    return u_escape(r, cp)


def rand_string_src(r, maxlen=12):
    """JSON string literal source; may hold lone / odd surrogate escapes."""
    parts = []
    for _ in range(r.randint(0, maxlen)):
        x = r.random()
        if x < 0.03:
            parts.append(u_escape(r, r.randint(0xD800, 0xDBFF)))  # lone high
        elif x < 0.05:
            parts.append(u_escape(r, r.randint(0xDC00, 0xDFFF)))  # lone low
        elif x < 0.06:  # high followed by a non-low escape
            parts.append(u_escape(r, r.randint(0xD800, 0xDBFF)) + u_escape(r, r.randint(0, 0xD7FF)))
        elif x < 0.07:  # high, then a full pair
            parts.append(u_escape(r, r.randint(0xD800, 0xDBFF)) + u_escape(r, 0xD83D) + u_escape(r, 0xDE00))
        elif x < 0.08:  # low then high (two lone ones)
            parts.append(u_escape(r, 0xDC00) + u_escape(r, 0xD800))
        else:
            parts.append(encode_char(r, rand_char(r)))
    return '"' + "".join(parts) + '"'


# ---------------------------------------------------------------- numbers

def rand_digits(r, n, lead_nonzero=True):
    d = [str(r.randint(1 if lead_nonzero else 0, 9))] + [str(r.randint(0, 9)) for _ in range(n - 1)]
    return "".join(d)


SPECIAL_FLOATS = [
    "1E5", "1e-7", "0.00001", "0.0001", "1e16", "1e15", "12345678901234567.0", "5e-324", "-0.0",
    "2.5E+3", "1e400", "-1e400", "2e-324", "3e-324", "2.4703282292062328e-324", "2.4703282292062327e-324",
    "1.7976931348623157e308", "1.7976931348623158e308", "1.7976931348623159e308", "2.2250738585072014e-308",
    "2.2250738585072011e-308", "9007199254740993.0", "9007199254740993", "0.1", "0.2", "0.30000000000000004",
    "100.0", "1e22", "1e23", "123456789012345680000.0", "0.1000000000000000055511151231257827021181583404541015625",
    "0.5", "2.5", "1.0", "-1.5e-10", "4.35", "0.0e0", "0E0", "-0e-0", "1.e5", "0.1e+0001", "1e-4", "1e-5",
    "9.999999999999999e15", "9999999999999998.0", "1e+16", "0.000123", "123e-7",
]


def rand_float_src(r):
    x = r.random()
    if x < 0.15:
        return r.choice(SPECIAL_FLOATS)
    if x < 0.35:  # repr of a random double
        return repr(rand_double(r))
    # random literal shape
    s = "-" if r.random() < 0.3 else ""
    s += "0" if r.random() < 0.3 else rand_digits(r, r.randint(1, 20))
    has_frac = r.random() < 0.7
    if has_frac:
        s += "." + rand_digits(r, r.randint(1, 25), lead_nonzero=False)
    if not has_frac or r.random() < 0.5:
        s += r.choice("eE") + r.choice(["", "+", "-"]) + str(r.choice([r.randint(0, 30), r.randint(0, 400)]))
    return s


def rand_int_src(r):
    x = r.random()
    if x < 0.1:
        return r.choice(["0", "-0", "1", "-1", "9007199254740993", "-9223372036854775809", "18446744073709551616"])
    if x < 0.97:
        return ("-" if r.random() < 0.3 else "") + rand_digits(r, r.randint(1, 30))
    n = r.choice([4299, 4300, r.randint(100, 4300)])
    return ("-" if r.random() < 0.3 else "") + rand_digits(r, n)


def rand_double(r):
    x = r.random()
    if x < 0.3:
        return struct.unpack("<d", struct.pack("<Q", r.getrandbits(64)))[0]
    if x < 0.45:
        return r.uniform(-1, 1) * 10 ** r.randint(-30, 30)
    if x < 0.55:
        return float(r.randint(-10 ** 6, 10 ** 6)) / r.choice([1, 2, 4, 8, 16, 10, 100, 1000, 3])
    if x < 0.65:
        return math.ldexp(1.0, r.randint(-1074, 1023)) * r.choice([1, -1])
    if x < 0.75:  # subnormals
        return math.ldexp(r.randint(1, 2 ** 52 - 1), -1074) * r.choice([1, -1])
    if x < 0.85:  # short decimals
        return float("%d.%de%d" % (r.randint(0, 999), r.randint(0, 999), r.randint(-320, 308)))
    if x < 0.92:
        return float(r.randint(-2 ** 60, 2 ** 60))
    return r.choice([0.0, -0.0, 1.0, -1.0, 0.5, 1e16, 1e15, 1e-4, 1e-5, 5e-324, 1.7976931348623157e308,
                     float("inf"), float("-inf"), float("nan"), 2.5, 0.1, 0.3, 123456789.0])


# ---------------------------------------------------------------- documents

WS_CHARS = [" ", "\t", "\n", "\r"]


def ws(r):
    if r.random() < 0.75:
        return ""
    return "".join(r.choice(WS_CHARS) for _ in range(r.randint(1, 3)))


KEY_POOL = ["a", "b", "Z", "_", "é", "10", "9", "", "a\u0000b", "\U0001F600", "\ue000", "\uffff", "key", "\ud7ff"]


def rand_value_src(r, depth):
    x = r.random()
    if depth > 0 and x < 0.18:
        items = [ws(r) + rand_value_src(r, depth - 1) + ws(r) for _ in range(r.randint(0, 6))]
        return "[" + ws(r) + ",".join(items) + "]"
    if depth > 0 and x < 0.36:
        members = []
        for _ in range(r.randint(0, 7)):
            if r.random() < 0.45:
                k = '"' + "".join(encode_char(r, c) for c in r.choice(KEY_POOL)) + '"'  # collisions
            elif r.random() < 0.1:
                k = '"' + r.choice(["\\ud800", "\\udfff", "\\ud83d\\ude00", "\\uDBFF\\uDFFF"]) + '"'
            else:
                k = rand_string_src(r, 6)
            members.append(ws(r) + k + ws(r) + ":" + ws(r) + rand_value_src(r, depth - 1) + ws(r))
        return "{" + ws(r) + ",".join(members) + "}"
    if x < 0.55:
        return rand_string_src(r)
    if x < 0.70:
        return rand_int_src(r)
    if x < 0.88:
        return rand_float_src(r)
    return r.choice(["null", "true", "false", "NaN", "Infinity", "-Infinity"])


def rand_doc(r):
    return ws(r) + rand_value_src(r, r.randint(0, 5)) + ws(r)


MALFORMED = [
    "", " ", "[", "]", "{", "}", "[1,]", '{"a":1,}', "[,1]", '{"a" 1}', '{"a":}', '{1:2}', "{'a':1}",
    "nul", "tru", "fals", "nan", "inf", "-inf", "+1", "01", "-01", "1.", ".5", "1e", "1e+", "1E-", "-",
    "--1", "0x10", "1_000", "[1 2]", '"abc', '"\\', '"\\u12', '"\\u12345', '"\\uXYZW"', '"\\ud800\\uXYZW"',
    '"\\ud800\\u12"', '"\\x41"', '"\\a"', '"\x01"', '"a\tb"', '"\x1f"', "\x0b1", "\x0c1", "\u00a01", "1\u00a0",
    "\ufeff1", "\ufeff{}", "[1]]", "{}}", "1 2", "[] []", "\u20281", "NaNx", "Infinit", "-Infinityx",
    '{"a":1 "b":2}', '["a" "b"]', '{"a"}', '{"a",}', '{,}', "[" * 30 + "]" * 29, "[" * 30, '"\\u00"',
    '"\\ud800\\u"', '"\\ud800\\', '"\\ud800"x', "1e400x", "-", "- 1", "1.5.5", "1e5e5", "[1.]", "[-]",
    '"\\ud800\\udc00', '"\\ud800\\udc0"', "tRue", "NULL", "None", "True", "\x00", "[\x00]", "1\x00",
]


def mutate(r, doc):
    if not doc:
        return r.choice(MALFORMED)
    i = r.randrange(len(doc))
    op = r.random()
    if op < 0.3:
        return doc[:i] + doc[i + 1:]
    if op < 0.6:
        return doc[:i] + r.choice('{}[],:"\\ 0-.eE\x01\x0btnfNI\u00a0') + doc[i:]
    if op < 0.8:
        return doc[:i]
    j = r.randrange(len(doc))
    lst = list(doc)
    lst[i], lst[j] = lst[j], lst[i]
    return "".join(lst)


# ---------------------------------------------------------------- expectations

def py_render(data, sort_keys):
    """(kind, payload) for one document given as bytes."""
    try:
        s = data.decode("utf-8")
    except UnicodeDecodeError as e:
        return ("error", "InvalidUtf8", str(e))
    try:
        v = json.loads(s)
    except json.JSONDecodeError as e:
        return ("error", "BadJson", str(e))
    except RecursionError:
        return ("skip", None, None)
    except ValueError as e:  # the int digit limit
        return ("error", "BadJson", str(e))
    out = json.dumps(v, ensure_ascii=False, separators=(",", ":"), sort_keys=sort_keys, allow_nan=True)
    return ("ok", out.encode("utf-8", "surrogatepass"), None)


def bits(x):
    return "%016x" % struct.unpack("<Q", struct.pack("<d", x))[0]


def run_bridge(mode, lines):
    data = b"".join(l + b"\n" for l in lines)
    p = subprocess.run([BRIDGE, mode], input=data, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if p.returncode != 0:
        print("json_bridge %s exited %d: %s" % (mode, p.returncode, p.stderr.decode(errors="replace")[-2000:]))
        sys.exit(1)
    out = p.stdout.split(b"\n")
    if out and out[-1] == b"":
        out.pop()
    if len(out) != len(lines):
        print("json_bridge %s: %d lines in, %d out" % (mode, len(lines), len(out)))
        sys.exit(1)
    return out


def doc_line(data):
    if b"\n" in data or b"\r" in data or data.startswith(b"#hex:"):
        return b"#hex:" + data.hex().encode()
    return data


def main():
    if not os.access(BRIDGE, os.X_OK):
        print("json_bridge not built: %s" % BRIDGE)
        return 1
    r = random.Random(SEED)
    total = equal = 0
    failures = []

    fail_kinds = {}

    def fail(kind, inp, got, exp):
        fail_kinds[kind] = fail_kinds.get(kind, 0) + 1
        if fail_kinds[kind] <= 8:
            failures.append("%s: input %r\n   got      %r\n   expected %r" % (kind, inp[:300], got[:300], exp[:300]))

    # ---- documents
    docs = []
    for _ in range(n_of(32000)):
        docs.append(rand_doc(r).encode("utf-8", "surrogatepass"))
    for m in MALFORMED:
        docs.append(m.encode("utf-8"))
    for _ in range(n_of(8000)):
        docs.append(mutate(r, rand_doc(r)).encode("utf-8", "surrogatepass"))
    bad_utf8 = [b"\x80", b"\xc1\x80", b"\xe0\x80\x80", b"\xe2\x82", b"\xe2\x82x", b"\xe0", b"\xe0\x80",
                b"\xf0\x9f\x98", b"ab\xf0\x9f\x98", b"\xf0\x9f\x98x", b"\xf4\x8f\xbf\xbf\xf4", b"\xed\x9f\xbf\xed\xa0",
                b"\xff", b'"\xc3"', b'"\xc0\xaf"', b'"\xed\xa0\x80"', b'"\xf4\x90\x80\x80"', b'"\xe2\x82"',
                b'["\xe2\x82\xac", "\x80"]', b'{"a":"\xf0\x9f\x98"}', b"1\xfe", b'"\xef\xbf\xbf"']
    docs += bad_utf8
    for _ in range(n_of(300)):  # random bytes inserted into a valid doc
        d = bytearray(rand_doc(r).encode("utf-8", "surrogatepass"))
        d.insert(r.randint(0, len(d)), r.randint(0x80, 0xFF))
        docs.append(bytes(d))
    # big ints exactly at and over the limit, alone and nested
    for n in (4299, 4300, 4301, 4302, 5000):
        for sign in ("", "-"):
            big = sign + "7" * n
            docs.append(big.encode())
            docs.append(('{"x":[1,%s]}' % big).encode())
    # moderately deep nesting (below Python's and our limits)
    for dpt in (50, 100, 200, 400):
        docs.append(("[" * dpt + "]" * dpt).encode())
        docs.append(('{"a":' * dpt + "1" + "}" * dpt).encode())

    for mode, sort_keys in (("render", True), ("render-unsorted", False)):
        lines = [doc_line(d) for d in docs]
        out = run_bridge(mode, lines)
        for d, got in zip(docs, out):
            kind, a, b = py_render(d, sort_keys)
            if kind == "skip":
                continue
            total += 1
            if kind == "ok":
                if got == a:
                    equal += 1
                else:
                    fail(mode, d, got, a)
                continue
            try:
                e = json.loads(got.decode("utf-8", "surrogatepass"))["error"]
            except Exception:
                fail(mode + " (should fail)", d, got, ("error", a, b))
                continue
            if e["type"] == a and (b is None or e["message"] == b):
                equal += 1
            else:
                fail(mode + " (error)", d, got, repr((a, b)).encode())
    n_docs = len(docs)

    # our depth limit: refused as RequestTooLong, never a crash
    deep = [("[" * 513 + "]" * 513).encode(), ("[" * 100000).encode(), ('{"a":' * 600 + "1" + "}" * 600).encode()]
    for d, got in zip(deep, run_bridge("render", deep)):
        total += 1
        if b'"RequestTooLong"' in got:
            equal += 1
        else:
            fail("depth", d, got, b"RequestTooLong")

    # ---- repr
    xs = [rand_double(r) for _ in range(n_of(30000))]
    xs += [math.ldexp(1.0, k) for k in range(-1074, 1024)]                      # every power of two
    xs += [math.nextafter(math.ldexp(1.0, k), 0) for k in range(-1070, 1024, 7)]
    xs += [float("1e%d" % k) for k in range(-323, 309)]                         # powers of ten
    xs += [math.nextafter(float("1e%d" % k), math.inf) for k in range(-300, 309, 3)]
    lines = [bits(x).encode() for x in xs]
    for x, got in zip(xs, run_bridge("repr", lines)):
        total += 1
        exp = repr(x).encode()
        if got == exp:
            equal += 1
        else:
            fail("repr", bits(x).encode() + b" " + exp, got, exp)

    # ---- round
    cases = []
    for _ in range(n_of(25000)):
        q = r.random()
        if q < 0.35:
            x, nd = rand_double(r), 4
        elif q < 0.55:  # exact binary ties at the 4th..nth decimal
            m = r.randint(0, 10 ** 6)
            x = (m + 0.5) / r.choice([1, 10, 100, 1000, 10000]) if r.random() < 0.5 else m / 2 ** r.randint(1, 20)
            x *= r.choice([1, -1])
            nd = r.choice([0, 1, 2, 3, 4, 5])
        elif q < 0.75:  # probabilities: float32 values widened
            x = struct.unpack("<f", struct.pack("<f", r.random()))[0]
            nd = 4
        elif q < 0.9:
            x, nd = rand_double(r), r.randint(-20, 25)
        else:
            x, nd = rand_double(r), r.choice([-400, -309, -308, -307, -300, 300, 320, 323, 324, 400, 17, 16, 15])
        cases.append((x, nd))
    cases += [(0.03125, 4), (0.5, 0), (1.5, 0), (2.5, 0), (-2.5, 0), (1e16, 4), (-0.00001, 4), (0.00005, 4),
              (0.00015, 4), (0.99995, 4), (float("nan"), 4), (float("inf"), 4), (float("-inf"), 2), (-0.0, 4),
              (5e-324, 323), (5e-324, 324), (125.0, -1), (135.0, -1), (150.0, -2), (250.0, -2), (50.0, -2),
              (5.0, -1), (15.0, -1), (-25.0, -1), (1.7976931348623157e308, -308), (1.7976931348623157e308, -307),
              (4.5e15, -15), (123456.7, -3), (0.0001, 4), (0.00004999, 4)]
    lines = [("%s %d" % (bits(x), nd)).encode() for x, nd in cases]
    for (x, nd), got in zip(cases, run_bridge("round", lines)):
        total += 1
        try:
            exp = repr(round(x, nd)).encode()
        except OverflowError:
            exp = b"inf" if x > 0 else b"-inf"  # intended divergence, see the docstring
        if got == exp:
            equal += 1
        else:
            fail("round", ("%r %d" % (x, nd)).encode(), got, exp)

    # ---- sum
    lists = []
    for _ in range(n_of(12000)):
        q = r.random()
        n = r.randint(0, 12)
        if q < 0.4:
            xs_ = [r.random() for _ in range(n)]
        elif q < 0.7:
            xs_ = [r.uniform(-1, 1) * 10 ** r.randint(-20, 20) for _ in range(n)]
        elif q < 0.85:
            xs_ = [rand_double(r) for _ in range(n)]
        else:
            base = [r.choice([1e16, -1e16, 1.0, -1.0, 1e-16, 0.1, -0.1, 1e308, -1e308, 0.0, -0.0,
                              float("inf"), float("-inf"), float("nan")]) for _ in range(n)]
            xs_ = base
        lists.append(xs_)
    lists += [[], [-0.0], [-0.0, -0.0], [0.1] * 10, [1e308, 1e308, -1e308], [float("inf"), 1.0],
              [1.0, float("inf")], [float("inf"), float("-inf")], [1e16, 1.0, -1e16], [0.1, 0.2, 0.3],
              [1e100, 1.0, -1e100, 1e-100], [1.0, 1e100, 1.0, -1e100]]
    lines = [" ".join(bits(x) for x in l).encode() for l in lists]
    for l, got in zip(lists, run_bridge("sum", lines)):
        total += 1
        exp = repr(float(sum(l))).encode()  # sum([]) is the int 0; clef_py_sum returns 0.0
        if got == exp:
            equal += 1
        else:
            fail("sum", repr(l).encode(), got, exp)

    for f in failures:
        print(f)
    if fail_kinds:
        print("failures by kind: %r" % fail_kinds)
    print("documents %d (x2 modes), doubles %d, rounds %d, sums %d" % (n_docs, len(xs), len(cases), len(lists)))
    print("%d cases: %d equal" % (total, equal))
    if total < 100000 and SCALE >= 1.0:
        print("too few cases: %d" % total)
        return 1
    return 0 if equal == total else 1


if __name__ == "__main__":
    sys.exit(main())
