#!/usr/bin/env python3
"""Every shell command of README.md runs, as written, and succeeds (issue #19: the README cannot rot).

Each ```sh block of the README is run with `bash -euo pipefail` in a scratch folder holding links
to build/ (CLEF_BUILD, so the ASan build runs them too), models/, examples/ and tests/ — the layout
of a fresh clone after tools/setup.sh — with one change: port 8080 becomes a free port, so that a
busy machine cannot fail the test. A block passes when it exits 0 and prints no {"error" body; the
serve block must print /health's answer and a response, the batch block must write one line per
request. The only blocks not run here are listed in RUN_BY_CI with the reason: the quickstart's
tools/setup.sh and make check are what CI itself runs (.ci/run), and this test runs inside them. A
README block that is neither run here nor listed fails the test, so a new command cannot go untested."""
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("CLEF_BUILD", os.path.join(ROOT, "build")).rstrip("/")
README = os.environ.get("CLEF_README", os.path.join(ROOT, "README.md"))  # override: to see the test red on an old README
RUN_BY_CI = {  # exact command lines (comments stripped) -> why this test does not run them
    "tools/setup.sh": "CI runs it first (.ci/run); it builds what this test uses",
    "make check": "CI runs it (.ci/run); this test is part of it",
}
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


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


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
    os.symlink(BUILD, os.path.join(work, "build"))
    for d in ("models", "examples", "tests"):
        os.symlink(os.path.join(ROOT, d), os.path.join(work, d))
    ran = 0
    for block in found:
        cmds = commands(block)
        if cmds and all(c in RUN_BY_CI for c in cmds):
            print("not run here (%s): %s" % ("; ".join(RUN_BY_CI[c] for c in cmds), cmds), flush=True)
            continue
        check(not any(c in RUN_BY_CI for c in cmds), "a block mixes CI-run and other commands: %s" % cmds)
        script = block.replace("8080", str(free_port()))
        with tempfile.TemporaryFile() as fo, tempfile.TemporaryFile() as fe:
            p = subprocess.Popen(["bash", "-euo", "pipefail", "-c", script], cwd=work, stdout=fo, stderr=fe,
                                 start_new_session=True)
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
        first = cmds[0] if cmds else ""
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
    print("%d README blocks run, %d failed" % (ran, len(failures)))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
