#!/usr/bin/env python3
"""Every shell command of README.md runs, as written, and succeeds (issue #19: the README cannot rot).

Each ```sh block of the README is run with `bash -euo pipefail` in a scratch folder holding links
to build/ (CLEF_BUILD, so the ASan build runs them too), models/, examples/ and tests/ — the layout
of a fresh clone after tools/setup.sh — with one change: port 8080 becomes a free port, so that a
busy machine cannot fail the test. A block passes when it exits 0 and prints no {"error" body; the
serve block must print /health's answer and a response, the batch block must write one line per
request. The only command lines not run here are listed with the reason: RUN_BY_CI (the
quickstart's tools/setup.sh and make check are what CI itself runs, and this test runs inside them)
and REAL_RELEASE (what needs huggingface.co and the 19 GB release: tests/parity/test_pull.py runs
`clef pull` against a local hub and test_gate.py runs `clef gate` on the tiny checkpoint's fixture);
every other line of a block runs, with models/clef-flash read as models/tiny (the same code on
the tiny checkpoint). The install and Python blocks run against the whole checkout (make, make
install into a scratch HOME, pip into a fresh venv), on the optimized build only. A README line
that is neither run here nor listed fails the test, so a new command cannot go untested."""
import os
import re
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clef_server import BUILD, ROOT, free_port  # noqa: E402

README = os.environ.get("CLEF_README", os.path.join(ROOT, "README.md"))  # override: to see the test red on an old README
RUN_BY_CI = {  # exact command lines (comments stripped) -> why this test does not run them
    "tools/setup.sh": "CI runs it first (.ci/run); it builds what this test uses",
    "tools/setup.sh --dev": "CI runs it first (.ci/run); it builds what this test uses",
    "make check": "CI runs it (.ci/run); this test is part of it",
}
REAL_RELEASE = {  # exact command lines -> why not here, and where the same command is tested
    "build/clef pull --dir models/clef-flash": "needs huggingface.co and 19 GB; test_pull.py pulls from a local hub",
    "build/clef gate --model models/clef-flash": "needs the real weights; test_gate.py gates the tiny checkpoint",
}
SKIP = dict(RUN_BY_CI, **REAL_RELEASE)
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)


def blocks(text):
    return re.findall(r"^```(?:sh|bash|shell|console)\n(.*?)^```", text, flags=re.S | re.M)


def commands(block):
    """The block's command lines without comments (a trailing \\ joins lines)."""
    out = []
    for line in block.replace("\\\n", " ").splitlines():
        line = re.sub(r"\s+#.*$", "", line).strip()
        if line and not line.startswith("#"):
            out.append(line)
    return out


def built(build):
    """Path -> (inode, mtime) of the build's programs and libraries: a test that relinks one while
    other tests run it makes them fail (execve of a half-written file)."""
    out = {}
    for sub in ("", "dist"):
        d = os.path.join(build, sub)
        for name in sorted(os.listdir(d)) if os.path.isdir(d) else []:
            st = os.stat(os.path.join(d, name))
            if os.path.isfile(os.path.join(d, name)):
                out[os.path.join(sub, name)] = (st.st_ino, st.st_mtime_ns)
    return out


def main():
    if not os.access(os.path.join(BUILD, "clef"), os.X_OK):
        print("skip: no %s/clef (build first)" % BUILD)
        sys.exit(77)
    if not os.path.exists(os.path.join(ROOT, "models", "tiny", "config.json")):
        print("skip: no models/tiny (make tiny)")
        sys.exit(77)
    found = blocks(open(README, encoding="utf-8").read())
    check(len(found) >= 4, "README has its shell blocks (%d found)" % len(found))
    work = tempfile.mkdtemp(prefix="clef-readme-")
    for name in os.listdir(ROOT):  # a fresh clone's layout, build/ being the build under test
        if name in (".git", "build") or name.startswith("build-"):
            continue
        os.symlink(os.path.join(ROOT, name), os.path.join(work, name))
    os.symlink(BUILD, os.path.join(work, "build"))
    os.mkdir(os.path.join(work, "home"))
    asan = not BUILD.endswith("/build") and os.path.basename(BUILD) != "build"
    env = dict(os.environ, HOME=os.path.join(work, "home"))
    # The work tree has no .git: without the build's own commit name `make` would write "unknown"
    # into clef_commit.h and relink the clef binary that the suite's other tests are running.
    stamp = os.path.join(BUILD, "gen", "cli", "clef_commit.h")
    m = re.search(r'"([^"]*)"', open(stamp).read()) if os.path.exists(stamp) else None
    if m:
        env["CLEF_COMMIT"] = m.group(1)
    before = built(BUILD)
    ran = 0
    for block in found:
        cmds = commands(block)
        kept = [c for c in cmds if c not in SKIP]
        for c in cmds:
            if c in SKIP:
                print("not run here (%s): %s" % (SKIP[c], c), flush=True)
        if not kept:
            continue
        packaging = "make install" in block or "pip install" in block
        if packaging and asan:
            print("not run on %s (packaging builds the optimized tree): %s" % (BUILD, kept[0]), flush=True)
            continue
        lines = [ln for ln in block.replace("\\\n", " ").splitlines()
                 if re.sub(r"\s+#.*$", "", ln).strip() not in SKIP]
        script = "\n".join(lines).replace("models/clef-flash", "models/tiny").replace("8080", str(free_port()))
        benv = env
        if "pip install" in block:  # into a fresh venv, as a user would
            venv = os.path.join(work, "venv")
            subprocess.run([sys.executable, "-m", "venv", venv], check=True)
            benv = dict(env, PATH=os.path.join(venv, "bin") + os.pathsep + env.get("PATH", ""), VIRTUAL_ENV=venv)
        with tempfile.TemporaryFile() as fo, tempfile.TemporaryFile() as fe:
            p = subprocess.Popen(["bash", "-euo", "pipefail", "-c", script], cwd=work, stdout=fo, stderr=fe,
                                 start_new_session=True, env=benv)
            try:
                p.wait(timeout=600)
            except subprocess.TimeoutExpired:
                pass
            try:  # nothing a block started may outlive it (a server whose block failed before its kill)
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
            fo.seek(0)
            fe.seek(0)
            out, err = fo.read(), fe.read()
        ran += 1
        first = kept[0]
        text = out.decode("utf-8", "replace")
        check(p.returncode == 0, "README block exits 0: %r (rc %d)\n%s\n%s" % (first, p.returncode, text[-500:],
                                                                          err.decode("utf-8", "replace")[-800:]))
        check('{"error"' not in text, "README block prints no error body: %r: %s" % (first, text[-300:]))
        if "clef serve" in block:
            check('"status":"ok"' in text.replace(" ", "") and '"answers"' in text,
                  "the serve block prints /health and a response: %r" % text[-300:])
        if "clef batch" in block:
            m = re.search(r"clef batch .* (\S+\.jsonl) (\S+\.jsonl)", block)
            inp, outp = (os.path.join(work, m.group(1)), os.path.join(work, m.group(2))) if m else ("", "")
            n_in = sum(1 for _ in open(inp, "rb")) if os.path.exists(inp) else -1
            n_out = sum(1 for _ in open(outp, "rb")) if os.path.exists(outp) else -2
            check(n_in > 0 and n_in == n_out, "the batch block writes one line per request (%d in, %d out)" % (n_in, n_out))
        print("ran: %s (rc %d)" % (first[:70], p.returncode), flush=True)
    changed = sorted(k for k, v in built(BUILD).items() if before.get(k) != v)
    check(not changed, "the README's make rebuilt nothing of the build under test: %s" % changed[:5])
    print("%d README blocks run, %d failed" % (ran, len(failures)))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
