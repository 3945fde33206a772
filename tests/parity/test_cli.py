#!/usr/bin/env python3
"""The clef command line against docs/cli.md (issue #19):

- every verb's --help goes to stdout with exit 0 and lists exactly the flags of that verb's table in
  docs/cli.md, each with the same argument, default and environment mirror;
- the mirrors in the per-verb tables are exactly those of the one "Environment mirrors" table;
- for every flag whose argument is a number or a choice, a bad value ('abc', and an out-of-range
  number) is refused with exit 2 and one stderr line naming the flag and the value, before any
  model is loaded; the same for a bad mirror value, naming the variable;
- an unknown flag is named; a missing value is refused; --version and `clef version` print the
  version, a commit and the backends.
Needs no model (every check fails before loading one). CLEF_BIN overrides the binary."""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clef_server  # noqa: E402
from clef_server import BUILD, ROOT, TALLY, check  # noqa: E402

CLEF = os.environ.get("CLEF_BIN", os.path.join(BUILD, "clef"))
DOC = os.path.join(ROOT, "docs", "cli.md")
VERBS = ["decide", "serve", "batch", "bench", "tokenize", "encode", "state-key", "respond", "preprocess",
         "version"]


def doc_tables():
    """{verb: {flag: (arg, default, env)}} and the env table {var: flag} from docs/cli.md."""
    text = open(DOC, encoding="utf-8").read()
    tables, env, verb, section = {}, {}, None, None
    for line in text.splitlines():
        m = re.match(r"^#+ (.*)$", line)
        if m:
            section = m.group(1)
            mv = re.match(r"^### `clef ([\w-]+)`$", line)
            verb = mv.group(1) if mv else None
            if verb:
                tables[verb] = {}
            continue
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        cells = [c.replace("\\|", "|").strip("`") for c in cells]
        if section == "Environment mirrors":
            env[cells[0]] = cells[1]
        elif verb:
            flag, arg, default, _meaning, mirror = cells
            tables[verb][flag] = (arg, default, mirror)
    return tables, env


def help_flags(verb):
    p = subprocess.run([CLEF, verb, "--help"], capture_output=True, text=True, timeout=30)
    flags = {}
    for line in p.stdout.splitlines():
        m = re.match(r"^  (?:-\w, |    )(--\S+)(?: (\S+))?  +(.*)$", line)
        if not m:
            continue
        name, arg, rest = m.groups()
        if name == "--help":  # every verb's, not in the tables
            continue
        mirror = ""
        me = re.search(r" \[env (\S+)\]$", rest)
        if me:
            mirror, rest = me.group(1), rest[:me.start()]
        md = re.search(r" \((default (.*)|required)\)$", rest)
        default = (md.group(2) or "required") if md else ""
        flags[name] = (arg or "", default, mirror)
    return p, flags


def bad_values(arg):
    """Values the flag must refuse, from its argument's name."""
    if arg in ("N", "R", "W", "SECONDS", "BYTES"):
        return ["abc", "-5", "99999999999999999999"]
    if "|" in arg and arg != "F|-":
        return ["abc"]
    return []


def main():
    clef_server.need_clef(CLEF, model=False)
    tables, env = doc_tables()
    check(set(tables) == set(VERBS), "docs/cli.md has a table for each verb: %s" % sorted(tables))
    check(env == {"CLEF_DEVICE": "--device", "CLEF_PRECISION": "--precision", "CLEF_MODEL": "--model",
                  "CLEF_THREADS": "--threads", "CLEF_HOST": "--host", "CLEF_PORT": "--port",
                  "CLEF_API_KEY": "--api-key"}, "the env table: %r" % env)
    for verb in VERBS:
        p, flags = help_flags(verb)
        check(p.returncode == 0 and p.stdout.startswith("usage: clef %s" % verb) and not p.stderr,
              "%s --help: usage on stdout, exit 0 (rc %d)" % (verb, p.returncode))
        p2 = subprocess.run([CLEF, verb, "-h"], capture_output=True, text=True, timeout=30)
        check(p2.returncode == 0 and p2.stdout == p.stdout, "%s -h == --help" % verb)
        doc = tables.get(verb, {})
        check(set(flags) == set(doc), "%s: --help flags == docs/cli.md; only in help %s, only in docs %s"
              % (verb, sorted(set(flags) - set(doc)), sorted(set(doc) - set(flags))))
        for f in sorted(set(flags) & set(doc)):
            check(flags[f] == doc[f], "%s %s: help says %r, docs/cli.md %r" % (verb, f, flags[f], doc[f]))
            if flags[f][2]:
                check(env.get(flags[f][2]) == f, "%s %s: its mirror %s is in the env table" % (verb, f, flags[f][2]))
        # bad values, named
        for f, (arg, _d, mirror) in sorted(flags.items()):
            for bad in bad_values(arg):
                q = subprocess.run([CLEF, verb, f, bad], capture_output=True, text=True, timeout=30)
                line = q.stderr.strip()
                check(q.returncode == 2 and line.startswith("clef %s: %s: '%s'" % (verb, f, bad)) and "\n" not in line,
                      "%s %s %s: refused naming the flag and value (rc %d, %r)" % (verb, f, bad, q.returncode, line))
                q = subprocess.run([CLEF, verb, "%s=%s" % (f, bad)], capture_output=True, text=True, timeout=30)
                check(q.returncode == 2 and ("%s: '%s'" % (f, bad)) in q.stderr, "%s %s=%s refused" % (verb, f, bad))
            if mirror and bad_values(arg):
                q = subprocess.run([CLEF, verb], capture_output=True, text=True, timeout=30,
                                   env=dict(os.environ, **{mirror: "abc"}))
                check(q.returncode == 2 and mirror in q.stderr and "'abc'" in q.stderr,
                      "%s: %s=abc refused naming the variable (%r)" % (verb, mirror, q.stderr.strip()))
            if arg:
                q = subprocess.run([CLEF, verb, f], capture_output=True, text=True, timeout=30)
                check(q.returncode == 2 and f in q.stderr and "needs a value" in q.stderr,
                      "%s %s without its value refused (%r)" % (verb, f, q.stderr.strip()))
        q = subprocess.run([CLEF, verb, "--no-such-flag"], capture_output=True, text=True, timeout=30)
        check(q.returncode == 2 and "'--no-such-flag'" in q.stderr, "%s: an unknown flag is named (%r)"
              % (verb, q.stderr.strip()))
    # the example of the issue, verbatim
    q = subprocess.run([CLEF, "decide", "--threads", "abc"], capture_output=True, text=True, timeout=30)
    check(q.returncode == 2 and q.stderr == "clef decide: --threads: 'abc' is not an integer in [0, 4096]\n",
          "clef decide --threads abc: %r" % q.stderr)
    # version
    for cmd in (["--version"], ["version"]):
        q = subprocess.run([CLEF] + cmd, capture_output=True, text=True, timeout=30)
        check(q.returncode == 0 and re.match(r"^clef \d+\.\d+\.\d+\ncommit: \S+\nbackends: cpu", q.stdout)
              and "cpu features:" in q.stdout, "clef %s: %r" % (cmd[0], q.stdout))
    q = subprocess.run([CLEF, "--help"], capture_output=True, text=True, timeout=30)
    check(q.returncode == 0 and all(v in q.stdout for v in VERBS), "clef --help lists every verb")
    print("%d checks, %d failed" % (TALLY.checks, len(TALLY.failures)))
    sys.exit(1 if TALLY.failures else 0)


if __name__ == "__main__":
    main()
