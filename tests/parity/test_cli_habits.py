#!/usr/bin/env python3
"""CLI habits people already have (issue #36 item 4): short flags (-m -p -t -h -V), `clef help [VERB]`,
--help grouped by topic with defaults, the environment mirrors CLEF_MODEL / CLEF_HOST / CLEF_PORT /
CLEF_THREADS / CLEF_API_KEY (the flag wins over the variable).
Needs no model (every check fails before loading one, or loads nothing). CLEF_BIN overrides the binary."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("CLEF_BUILD", os.path.join(ROOT, "build")).rstrip("/")
CLEF = os.environ.get("CLEF_BIN", os.path.join(BUILD, "clef"))
MIRRORS = ("CLEF_MODEL", "CLEF_HOST", "CLEF_PORT", "CLEF_THREADS", "CLEF_API_KEY", "CLEF_DEVICE", "CLEF_PRECISION")
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)


def run(args, **env):
    base = {k: v for k, v in os.environ.items() if k not in MIRRORS}
    base.update(env)
    return subprocess.run([CLEF] + args, capture_output=True, text=True, timeout=30, env=base,
                          stdin=subprocess.DEVNULL)


def main():
    if not os.access(CLEF, os.X_OK):
        print("skip: no %s (build first)" % CLEF)
        sys.exit(77)
    # short flags: the value is checked and named as the long flag's
    for verb, short, long_ in (("decide", "-t", "--threads"), ("serve", "-p", "--port"), ("bench", "-t", "--threads")):
        q = run([verb, short, "abc"])
        check(q.returncode == 2 and q.stderr.startswith("clef %s: %s: 'abc'" % (verb, long_)),
              "%s %s abc: refused as %s (rc %d, %r)" % (verb, short, long_, q.returncode, q.stderr))
    q = run(["decide", "-m", "/nonexistent/clef-model"])
    check(q.returncode != 0 and "/nonexistent/clef-model" in q.stderr and "required" not in q.stderr,
          "decide -m DIR takes DIR as the model (%r)" % q.stderr)
    v = run(["--version"])
    q = run(["-V"])
    check(q.returncode == 0 and q.stdout == v.stdout and q.stdout.startswith("clef "), "clef -V == --version")
    # clef help [VERB]
    top = run(["--help"])
    q = run(["help"])
    check(q.returncode == 0 and q.stdout == top.stdout, "clef help == clef --help (rc %d)" % q.returncode)
    for verb in ("serve", "batch", "decide"):
        h = run([verb, "--help"])
        q = run(["help", verb])
        check(q.returncode == 0 and q.stdout == h.stdout and h.stdout, "clef help %s == clef %s --help" % (verb, verb))
    q = run(["help", "nosuchverb"])
    check(q.returncode == 2 and "'nosuchverb'" in q.stderr, "clef help nosuchverb refused (%r)" % q.stderr)
    check("clef help" in top.stdout, "clef --help mentions clef help")
    # grouped help, in the order, with the short flags and defaults shown
    h = run(["serve", "--help"]).stdout
    heads = [line for line in h.splitlines() if line and not line.startswith(" ") and line.endswith(":")]
    check(heads[:5] == ["model:", "device:", "limits:", "network:", "logging:"],
          "serve --help grouped model, device, limits, network, logging: %r" % heads)
    check("  -m, --model DIR" in h and "  -p, --port N" in h and "  -t, --threads N" in h and "  -h, --help" in h,
          "serve --help shows the short flags")
    check("(default 8080) [env CLEF_PORT]" in h and "(default 127.0.0.1) [env CLEF_HOST]" in h,
          "serve --help shows defaults and mirrors")
    # environment mirrors: used when the flag is absent, checked and named; the flag wins
    q = run(["serve"], CLEF_PORT="abc")
    check(q.returncode == 2 and "CLEF_PORT" in q.stderr and "'abc'" in q.stderr, "CLEF_PORT=abc refused (%r)" % q.stderr)
    q = run(["decide"], CLEF_THREADS="abc")
    check(q.returncode == 2 and "CLEF_THREADS" in q.stderr, "CLEF_THREADS=abc refused (%r)" % q.stderr)
    q = run(["decide", "--threads", "1"], CLEF_THREADS="abc")
    check(q.returncode == 2 and "CLEF_THREADS" not in q.stderr and "--model" in q.stderr,
          "--threads wins over CLEF_THREADS (%r)" % q.stderr)
    q = run(["decide"], CLEF_MODEL="/nonexistent/clef-env-model")
    check(q.returncode != 0 and "/nonexistent/clef-env-model" in q.stderr, "CLEF_MODEL is the model (%r)" % q.stderr)
    q = run(["decide", "-m", "/nonexistent/clef-flag-model"], CLEF_MODEL="/nonexistent/clef-env-model")
    check("/nonexistent/clef-flag-model" in q.stderr and "clef-env-model" not in q.stderr,
          "-m wins over CLEF_MODEL (%r)" % q.stderr)
    print("%d failed" % len(failures))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
