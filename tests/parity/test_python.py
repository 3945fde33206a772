"""The Python package (python/, `import clef`) against `clef decide`, on models/tiny.

1. ctypes layout: python/src/clef/_lib.py's structs have clef.h's offsets and sizes (a C program
   prints them); the defaults the package reads from the library (clef._defaults) are the ones
   `clef serve --help` and `clef batch --help` print.
2. The package as a user gets it: a wheel built from python/ (its setup.py runs make for
   <build>/dist/libclef.so and bundles it) installed with pip into a fresh venv; that venv's python
   answers a request byte-equal to `clef decide`.
3. In this process (PYTHONPATH=python/src, CLEF_LIBRARY=<build>/dist/libclef.so): decide_raw is
   byte-equal to `clef decide` on text requests (str, bytes, dict) and on an image given as base64,
   as bytes and as a path; refusals raise clef.Error with the contract's type, the HTTP status, the
   message and the exact error body; a bad model folder raises BadModel; precision "fast" on the CPU
   runs fp32 with a note and a RuntimeWarning, "int8" raises BadModel (not offered); 8 threads calling one engine
   at once get the sequential answers; decide_many equals decide one by one (one batch, and many
   batches of a small token budget), refusals in place with return_exceptions, raised without;
   close() makes later calls raise ValueError.
"""
import base64
import ctypes
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("CLEF_BUILD", ROOT / "build"))
LIB = BUILD / "dist" / "libclef.so"
MODEL = ROOT / "models" / "tiny"
CLI = BUILD / "clef"
IMAGE = ROOT / "tests" / "corpus" / "images" / "small_100x80.png"

if not LIB.exists():
    print(f"skip: no {LIB} (the sanitizer build ships no shared library; make builds it)")
    sys.exit(77)
if not (MODEL / "config.json").exists():
    print("skip: no models/tiny (make tiny)")
    sys.exit(77)

os.environ["CLEF_LIBRARY"] = str(LIB)
sys.path.insert(0, str(ROOT / "python" / "src"))
import clef  # noqa: E402
from clef import _lib  # noqa: E402
from clef._defaults import defaults as clef_defaults  # noqa: E402

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def cli_decide(body: bytes):
    p = subprocess.run([str(CLI), "decide", "--model", str(MODEL), "--request", "-"], input=body,
                       capture_output=True, timeout=300)
    assert p.stdout.endswith(b"\n"), (p.returncode, p.stdout, p.stderr)
    return p.stdout[:-1].decode("utf-8"), p.returncode


KETTLE = {"model": "clef-flash", "state": "The kettle is boiling.",
          "questions": {"hot": {"type": "noul", "instructions": "Is the water hot?"}}}
TEXT_REQUESTS = [
    KETTLE,
    json.dumps(KETTLE, indent=1),
    {"model": "clef-flash", "state": {"ticket": "refund please", "lang": "en", "n": 3, "x": 1.5},
     "questions": {"intent": {"type": "choice", "criteria": {"refund": "wants money back", "other": None}},
                   "urgency": {"type": "score", "criteria": ["low", "mid", "high"]}}},
    {"model": "clef-flash", "state": "Ünïcödé ✓ 日本語", "raw": True,
     "questions": {"ok": {"type": "noul"}, "mood": {"type": "choice", "criteria": {"glad": "", "sad": ""}}}},
    (ROOT / "tests" / "corpus" / "requests" / "t001_basic.json").read_bytes(),
]


def body_of(req) -> bytes:
    return clef.encode_request(req)


# ---- 1. the ctypes structs have clef.h's layout
def check_layout(tmp: pathlib.Path):
    fields = {"clef_options": _lib.Options, "clef_result": _lib.Result, "clef_cache_info": _lib.CacheInfo,
              "clef_batch_options": _lib.BatchOptions}
    lines = ['#include <stddef.h>', '#include <stdio.h>', '#include "clef.h"', "int main(void) {"]
    for cname, cls in fields.items():
        lines.append(f'printf("{cname} sizeof %zu\\n", sizeof({cname}));')
        for f in cls._fields_:
            if f[0].startswith("_"):
                continue
            lines.append(f'printf("{cname} {f[0]} %zu\\n", offsetof({cname}, {f[0]}));')
    lines.append("return 0; }")
    src = tmp / "layout.c"
    src.write_text("\n".join(lines) + "\n")
    cc = os.environ.get("CC", "cc")
    subprocess.run([cc, "-std=c11", "-I", str(ROOT / "include"), str(src), "-o", str(tmp / "layout")], check=True)
    got = subprocess.run([str(tmp / "layout")], capture_output=True, text=True, check=True).stdout.split("\n")
    n = 0
    for line in filter(None, got):
        cname, field, value = line.split()
        cls = fields[cname]
        if field == "sizeof":
            # Options and BatchOptions end with a reserve past the C struct (_lib.py): the C size is where it starts
            want = cls._reserve.offset if hasattr(cls, "_reserve") else ctypes.sizeof(cls)
            check(int(value) == want, f"{cname}: sizeof {value} in C, {want} in python/src/clef/_lib.py")
        else:
            check(int(value) == getattr(cls, field).offset,
                  f"{cname}.{field}: offset {value} in C, {getattr(cls, field).offset} in _lib.py")
        n += 1
    print(f"layout: {n} sizes and offsets equal")


def help_default(verb: str, flag: str) -> int:
    """The default `clef VERB --help` prints for flag, as a number (K/M/G: powers of 1024)."""
    out = subprocess.run([str(CLI), verb, "--help"], capture_output=True, text=True, timeout=60).stdout
    for line in out.splitlines():
        m = re.match(r"^\s+(?:-\w, )?" + re.escape(flag) + r" .*\(default (\d+)([KMG]?)\)", line)
        if m:
            return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]
    check(False, f"clef {verb} --help shows no default for {flag}")
    return -1


def check_defaults():
    d = clef_defaults()
    for verb, flag, got in (("serve", "--batch-tokens", d.batch_tokens), ("serve", "--max-batch", d.max_batch),
                            ("serve", "--queue", d.queue_len), ("serve", "--max-body", d.max_body),
                            ("serve", "--max-length", d.max_length), ("serve", "--state-cache-mb", d.state_cache_mb),
                            ("batch", "--max-line", d.max_body), ("batch", "--batch-tokens", d.batch_tokens),
                            ("batch", "--max-batch", d.max_batch)):
        want = help_default(verb, flag)
        check(got == want, f"the package's default for clef {verb} {flag} is {got}, --help says {want}")
    print(f"defaults: the library's, as clef serve/batch --help print them: {d}")


# ---- 2. pip: a wheel built from python/ into a fresh venv
def check_wheel(tmp: pathlib.Path, want: str):
    import importlib.util
    if importlib.util.find_spec("setuptools") is None:
        check(False, f"no setuptools in {sys.executable}'s venv: tools/reference/make_venv.sh test installs it")
        return
    pkg = tmp / "pkg"
    shutil.copytree(ROOT / "python", pkg, ignore=shutil.ignore_patterns("build", "*.egg-info", "libclef.so*"))
    env = {k: v for k, v in os.environ.items() if k not in ("CLEF_LIBRARY", "PYTHONPATH")}
    env.update(CLEF_SOURCE_DIR=str(ROOT), CLEF_BUILD=str(BUILD), CLEF_MAKE_JOBS="2")
    if (BUILD / "obj" / "src" / "compute" / "cuda").is_dir():
        # a CUDA=1 build: make without its variables would rebuild it for the CPU; bundle it as is
        env["CLEF_LIBRARY"] = str(LIB)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps",
                    "--no-index", str(pkg), "-w", str(tmp / "wheel")], check=True, env=env, cwd=tmp,
                   capture_output=True)
    wheels = list((tmp / "wheel").glob("clef-*.whl"))
    check(len(wheels) == 1 and "-py3-none-linux_" in wheels[0].name, f"wheel: {wheels}")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp / "venv")], check=True)
    py = tmp / "venv" / "bin" / "python"
    # the fresh venv has no pip: this python's pip installs into it (--python, pip >= 22.3)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-index",
                    "--no-deps", str(wheels[0])], check=True, env=env, capture_output=True)
    code = ("import clef, sys; e = clef.Engine(sys.argv[1]); "
            "sys.stdout.write(e.decide_raw(sys.stdin.read())); e.close(); "
            "print('', clef.__file__, file=sys.stderr)")
    p = subprocess.run([str(py), "-c", code, str(MODEL)], input=json.dumps(KETTLE), capture_output=True,
                       text=True, env=env, cwd=tmp, timeout=300)
    check(p.returncode == 0, f"fresh venv: exit {p.returncode}: {p.stderr[-2000:]}")
    check(str(tmp / "venv") in p.stderr, f"fresh venv imported clef from elsewhere: {p.stderr}")
    check(p.stdout == want, f"fresh venv answered {p.stdout!r}, clef decide {want!r}")
    print("wheel:", wheels[0].name, "installed into a fresh venv: byte-equal to clef decide")


def main():
    with tempfile.TemporaryDirectory() as t:
        tmp = pathlib.Path(t)
        check_layout(tmp)
        check_defaults()

        expected = {}  # body -> (CLI answer, exit code)
        for req in TEXT_REQUESTS:
            b = body_of(req)
            expected[b] = cli_decide(b)
            check(expected[b][1] == 0, f"clef decide refused {b[:80]!r}")
        check_wheel(tmp, expected[body_of(KETTLE)][0])

    engine = clef.Engine(MODEL, threads=2)
    check(engine.backend == "cpu", f"backend {engine.backend}")

    # ---- 3a. answers byte-equal to clef decide: str, bytes, dict
    n = 0
    for req in TEXT_REQUESTS:
        want = expected[body_of(req)][0]
        got = engine.decide_raw(req)
        check(got == want, f"decide_raw({str(req)[:60]}...) = {got!r}, clef decide {want!r}")
        check(engine.decide(req) == json.loads(want), "decide() is not json.loads(decide_raw())")
        n += 1
    # the same request as a str, bytes and a dict
    ks = json.dumps(KETTLE)
    check(engine.decide_raw(ks) == engine.decide_raw(ks.encode()) == engine.decide_raw(KETTLE),
          "str, bytes and dict forms differ")

    # an image: base64 in the JSON (what the CLI gets), bytes, a path
    img = IMAGE.read_bytes()
    q = {"colour": {"type": "choice", "instructions": "Dominant colour?",
                    "criteria": {"red": None, "green": "Green tones", "blue": "Blue tones"}}}
    as_b64 = {"model": "clef-flash", "state": "A small icon.", "questions": q,
              "images": ["data:image/png;base64," + base64.b64encode(img).decode()]}
    want_img, rc = cli_decide(json.dumps(as_b64).encode())
    check(rc == 0 and '"answers"' in want_img, f"clef decide on the image: {want_img}")
    for form, images in (("base64", as_b64["images"]), ("bytes", [img]), ("path", [IMAGE])):
        got = engine.decide_raw(dict(as_b64, images=images))
        check(got == want_img, f"image as {form}: {got!r} != clef decide {want_img!r}")
        n += 1
    print(f"answers: {n} requests byte-equal to clef decide (text and an image as base64, bytes, path)")

    # ---- 3b. refusals
    refusals = [
        ('{"model":"clef-flash","state":"x"}', "NoQuestions", 422),
        ("{not json", "BadJson", 400),
        ("[1]", "BadJson", 400),
        (b'{"model":"clef-flash","state":"\xff","questions":{"q":{"type":"noul"}}}', "InvalidUtf8", 400),
        ({"state": "x", "questions": {"q": {"type": "noul"}}}, "MissingModelOrState", 422),
        ({"model": "m", "state": "x", "questions": {"q": {"type": "yes"}}}, "BadQuestionType", 422),
        ({"model": "m", "state": "x", "questions": {"q": {"type": "choice"}}}, "EmptyCriteria", 422),
        ({"model": "m", "state": "x", "questions": {"q": {"type": "noul"}}, "images": [b"not an image"]},
         "UnsupportedMedia", 422),
        ({"model": "m", "state": "x", "questions": {"q": {"type": "noul", "instructions": "word " * 20000}}},
         "SchemaTooLong", 413),
    ]
    for req, etype, status in refusals:
        want_body, rc = cli_decide(body_of(req))
        try:
            engine.decide(req)
            check(False, f"{etype}: no clef.Error for {str(req)[:60]}")
        except clef.Error as e:
            check((e.type, e.status) == (etype, status), f"{str(req)[:50]}: {e.type} {e.status}, want {etype} {status}")
            check(e.body == want_body and rc == 1, f"{etype}: body {e.body!r} != clef decide {want_body!r}")
            check(e.message == json.loads(want_body)["error"]["message"], f"{etype}: message {e.message!r}")
    print(f"refusals: {len(refusals)} raise clef.Error with clef decide's type, status and body")
    try:
        clef.Engine(ROOT / "no-such-model")
        check(False, "no error for a missing model folder")
    except clef.Error as e:
        check(e.type == "BadModel" and e.status == 503 and "no-such-model" in e.message, f"BadModel: {e!r}")
    # precisions (docs/precision.md): fast has no CPU kernel, so it runs fp32 and says so (note + warning);
    # int8 is refused until it passes its gate
    check(engine.note is None, f"fp32 engine has a note: {engine.note!r}")
    if engine.backend == "cpu":
        import warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with clef.Engine(MODEL, threads=1, precision="fast") as ef:
                check(ef.note is not None and "running fp32" in ef.note and
                      any(issubclass(w.category, RuntimeWarning) and ef.note in str(w.message) for w in caught),
                      f"precision fast on the CPU: note {ef.note!r}, warnings {[str(w.message) for w in caught]}")
                check(ef.decide_raw(KETTLE) == engine.decide_raw(KETTLE), "precision fast on the CPU: the fp32 bytes")
        try:
            clef.Engine(MODEL, threads=1, precision="int8")
            check(os.environ.get("CLEF_UNGATED") == "int8", "precision int8 opened without CLEF_UNGATED=int8")
        except clef.Error as e:
            check(e.type == "BadModel" and "not offered" in e.message, f"precision int8: {e!r}")

    # ---- 3c. 8 threads on one engine
    reqs = [r for r in TEXT_REQUESTS] + [dict(as_b64, images=[img])]
    want_by = [engine.decide_raw(r) for r in reqs]
    results, errors = {}, []

    def worker(k):
        try:
            for rep in range(3):
                i = (k + rep) % len(reqs)
                results[(k, rep)] = (i, engine.decide_raw(reqs[i]))
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    # The binding's contract, watched from outside: clef_run_batch never runs twice at once (the
    # engine is not reentrant), clef_job_prepare does (the host side runs in parallel). A spy
    # around the library counts the calls in flight and holds each a little to widen the window.
    class Spy:
        def __init__(self, real):
            self.real, self.lock, self.now, self.most = real, threading.Lock(), {}, {}

        def __getattr__(self, name):
            return getattr(self.real, name)

        def _watch(self, name, *args):
            with self.lock:
                self.now[name] = self.now.get(name, 0) + 1
                self.most[name] = max(self.most.get(name, 0), self.now[name])
            try:
                time.sleep(0.02)
                return getattr(self.real, name)(*args)
            finally:
                with self.lock:
                    self.now[name] -= 1

        def clef_run_batch(self, *args):
            return self._watch("clef_run_batch", *args)

        def clef_job_prepare(self, *args):
            return self._watch("clef_job_prepare", *args)

    spy = Spy(engine._lib)
    engine._lib = spy
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    engine._lib = spy.real
    check(not errors, f"threads: {errors}")
    bad = [(k, i) for k, (i, got) in results.items() if got != want_by[i]]
    check(len(results) == 24 and not bad, f"threads: {len(results)} answers, {len(bad)} differ")
    check(spy.most.get("clef_run_batch") == 1, f"threads: {spy.most.get('clef_run_batch')} clef_run_batch at once")
    check(spy.most.get("clef_job_prepare", 0) > 1, f"threads: prepare never ran concurrently ({spy.most})")
    print(f"threads: 8 threads x 3 requests on one engine, all {len(results)} answers equal the sequential ones; "
          f"at most {spy.most.get('clef_run_batch')} model run and {spy.most.get('clef_job_prepare')} prepares at once")

    # ---- 3d. decide_many
    many = reqs + [refusals[0][0]] + reqs[:2]
    one_by_one = []
    for r in many:
        try:
            one_by_one.append(engine.decide(r))
        except clef.Error as e:
            one_by_one.append(("error", e.type, e.status, e.body))

    def norm(xs):
        return [("error", x.type, x.status, x.body) if isinstance(x, clef.Error) else x for x in xs]

    for budget in (clef_defaults().batch_tokens, 1):  # one batch; every request its own batch
        got = engine.decide_many(many, batch_tokens=budget, return_exceptions=True)
        check(norm(got) == one_by_one, f"decide_many(batch_tokens={budget}) differs from decide one by one")
    raw = engine.decide_many(reqs, raw=True)
    check(raw == want_by, "decide_many(raw=True) is not the bodies")
    try:
        engine.decide_many(many)
        check(False, "decide_many without return_exceptions did not raise")
    except clef.Error as e:
        check(e.type == "NoQuestions", f"decide_many raised {e!r}")
    check(engine.decide_many([]) == [], "decide_many([])")
    print(f"decide_many: {len(many)} requests (one refused) equal decide one by one, in one batch and in many")

    # ---- 3e. close
    engine.close()
    check(engine.closed, "closed")
    try:
        engine.decide(KETTLE)
        check(False, "decide after close did not raise")
    except ValueError:
        pass
    engine.close()
    with clef.Engine(MODEL, threads=1) as e2:
        check(e2.decide_raw(KETTLE) == expected[body_of(KETTLE)][0], "context-managed engine")
    check(e2.closed, "the with block did not close the engine")

    if failures:
        print(f"{len(failures)} failures")
        return 1
    print("python package: layout, fresh-venv wheel, answers, errors, threads, decide_many, close: all pass")
    return 0


if __name__ == "__main__":
    sys.exit(main())
