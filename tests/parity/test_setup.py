#!/usr/bin/env python3
"""The set-up split (issue #36 item 5): `tools/setup.sh` installs what running clef needs,
`tools/setup.sh --dev` adds what `make check` and CI use; CI and the README use them so.

- `tools/setup.sh --list` / `--dev --list` print the package lists without installing anything: the
  run list holds the compiler, the -dev libraries, python3 + python3-venv and ca-certificates and none of the test-only packages (clang,
  chromium, OpenBLAS); the dev list is the run list plus those;
- an unknown argument is refused (exit 2) before anything is done;
- .ci/run calls `tools/setup.sh --dev`; the README shows both commands and `make check`.
Plain text and --list only: installs and builds nothing."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SETUP = os.path.join(ROOT, "tools", "setup.sh")
RUN_NEEDS = {"build-essential", "pkg-config", "libonig-dev", "libutf8proc-dev", "libmicrohttpd-dev", "libpng-dev",
             "libcurl4-openssl-dev", "libavformat-dev",
             # a fresh (minbase) Debian 12 has none of these: the venv that writes models/tiny/, https
             "python3", "python3-venv", "ca-certificates"}
DEV_ONLY = {"clang", "libclang-rt-14-dev", "chromium", "chromium-driver", "libopenblas-dev"}
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)


def main():
    text = open(SETUP, encoding="utf-8").read()
    # never run a setup.sh that does not know --list: it would install and build
    if "--list" not in text or "--dev" not in text:
        check(False, "tools/setup.sh has no --dev / --list modes")
    else:
        run = subprocess.run(["bash", SETUP, "--list"], capture_output=True, text=True, timeout=30)
        dev = subprocess.run(["bash", SETUP, "--dev", "--list"], capture_output=True, text=True, timeout=30)
        run_pkgs, dev_pkgs = set(run.stdout.split()), set(dev.stdout.split())
        check(run.returncode == 0 and RUN_NEEDS <= run_pkgs, "the run list has the compiler and the libraries: %s"
              % sorted(RUN_NEEDS - run_pkgs))
        check(not (run_pkgs & DEV_ONLY), "the run list has no test-only package: %s" % sorted(run_pkgs & DEV_ONLY))
        check(dev.returncode == 0 and run_pkgs | DEV_ONLY <= dev_pkgs, "the dev list is the run list plus the test-only "
              "packages: missing %s" % sorted((run_pkgs | DEV_ONLY) - dev_pkgs))
        q = subprocess.run(["bash", SETUP, "--bogus"], capture_output=True, text=True, timeout=30)
        check(q.returncode == 2 and "usage" in q.stderr, "an unknown argument: exit 2 (rc %d)" % q.returncode)
    ci = open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8").read()
    check(re.search(r"^bash tools/setup\.sh --dev$", ci, re.M), ".ci/run calls tools/setup.sh --dev")
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    for cmd in ("tools/setup.sh", "tools/setup.sh --dev", "make check"):
        check(re.search(r"^%s(\s+#.*)?$" % re.escape(cmd), readme, re.M), "the README shows `%s`" % cmd)
    print("%d failed" % len(failures))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
