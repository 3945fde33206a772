#!/usr/bin/env python3
"""Each flag's default is written once (issue #37 item 2, "defaults in one place per flag"):

- `clef VERB --help` prints every default from the value the verb starts from (cli_format_default in
  src/cli/cli_opts.c), so the option tables hold no default of their own: no `.def` in src/cli/.
- For every default that a verb's --help shows (a number above 1, or a string such as --host's), the
  value is written at most once in src/ and include/ on a line naming the option's field (the flag's
  name with '_' for '-', or its `.dst`'s last member): a number, a shift (`16u << 20`) or a size
  (`16 MiB`; a comment's `(default 32)` counts too), or the string as a C literal. Two such lines are two homes: one must use the other's name (a constant in
  serve/scheduler.h, serve/server.h, or clef_options_default's value).
- The Python package (python/src/clef) writes none of these defaults: it reads them from the library
  (clef/_defaults.py: clef_options_default, clef_batch_options_default). A line of a .py file there
  naming the option's field (or the flag: `--max-batch`; `max_ongoing`, a Ray Serve replica's
  requests, is max_batch's value) together with its default value fails.
- The flags table of docs/serving.md (a second copy for readers) shows the defaults `clef serve
  --help` prints.
- --help shows the defaults, not what the options before it set: `clef serve --port 9 --help` says
  the default port, as `clef serve --help` does.
Needs build/clef (CLEF_BUILD); exits 0 pass, 1 fail, 77 skip without a build."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("CLEF_BUILD", os.path.join(ROOT, "build")).rstrip("/")
CLEF = os.path.join(BUILD, "clef")
VERBS = ["decide", "serve", "batch", "bench", "tokenize", "encode", "state-key", "respond", "preprocess"]
UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}

fails = []


def check(ok, what):
    if not ok:
        fails.append(what)
        print("FAIL:", what)


def read(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8", errors="replace") as f:
        return f.read()


def sources(tops=("src", "include"), exts=(".c", ".h", ".cu", ".cuh")):
    for top in tops:
        for dirpath, _, files in os.walk(os.path.join(ROOT, top)):
            for f in sorted(files):
                if f.endswith(exts):
                    yield os.path.relpath(os.path.join(dirpath, f), ROOT)


def help_defaults(verb, *extra):
    """{flag: (default text, argument)} from `clef VERB [extra] --help`."""
    p = subprocess.run([CLEF, verb] + list(extra) + ["--help"], capture_output=True, text=True, timeout=30)
    check(p.returncode == 0, "clef %s %s--help: exit %d" % (verb, " ".join(extra) + " " if extra else "", p.returncode))
    out = {}
    for line in p.stdout.splitlines():
        m = re.match(r"^  (?:-\w, |    )(--\S+)( \S+)?  +.*? \(default (.*?)\)(?: \[env \S+\])?$", line)
        if m:
            out[m.group(1)] = (m.group(3), (m.group(2) or "").strip())
    return out


def number(text):
    """The value of a default as the flags read it (K/M/G are powers of 1024), or None."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMG]?)", text)
    if not m:
        return None
    v = float(m.group(1)) * (UNITS[m.group(2)] if m.group(2) else 1)
    return int(v) if v == int(v) else v


def values_in(line):
    """Every number the line writes: 32, 0.05, 16u << 20, (size_t)16 << 20, 16 MiB, 32K."""
    vals = []
    for m in re.finditer(r"\b(\d+)[uUlL]*\s*<<\s*(\d+)\b", line):
        vals.append(int(m.group(1)) << int(m.group(2)))
    line = re.sub(r"\b\d+[uUlL]*\s*<<\s*\d+\b", " ", line)
    for m in re.finditer(r"\b(\d+(?:\.\d+)?)\s*(KiB|MiB|GiB|[KMG])\b", line):
        vals.append(float(m.group(1)) * UNITS[m.group(2)])
    line = re.sub(r"\b\d+(?:\.\d+)?\s*(?:KiB|MiB|GiB|[KMG])\b", " ", line)
    for m in re.finditer(r"(?<![\w.])(\d+(?:\.\d+)?)(?:[uUlLfF]*)\b", line):
        vals.append(float(m.group(1)))
    return vals


def dst_fields():
    """{flag: {field names}} from the option tables: the flag's own name and its .dst's last member."""
    fields = {}
    for rel in sources(("src/cli",)):
        text = read(rel)
        for m in re.finditer(r'\.name = "(--[\w-]+)"([^}]*)', text):
            names = fields.setdefault(m.group(1), {m.group(1)[2:].replace("-", "_")})
            d = re.search(r"\.dst = &?\(?([\w>.-]+)", m.group(2))
            if d and d.group(1) not in ("p",):  # CLI_OPT_* macros: (p), the caller's field
                names.add(re.split(r"->|\.", d.group(1))[-1])
    return fields


def names_field(line, field):
    """The line has an identifier whose '_'-separated parts (any case) hold the field's parts in order."""
    want = field.lower().split("_")
    for ident in re.findall(r"[A-Za-z_]\w*", line):
        parts = ident.lower().split("_")
        for i in range(len(parts) - len(want) + 1):
            if parts[i:i + len(want)] == want:
                return True
    return False


def check_no_def():
    for rel in sources(("src/cli",)):
        for n, line in enumerate(read(rel).splitlines(), 1):
            check(not re.search(r"\.def\s*=", line), "%s:%d: a default written in the option table (.def): "
                  "--help prints the value the verb starts from" % (rel, n))


def check_one_home(defaults, fields):
    lines = [(rel, n, line) for rel in sources() for n, line in enumerate(read(rel).splitlines(), 1)]
    seen = set()
    for verb, flags in sorted(defaults.items()):
        for flag, (text, arg) in sorted(flags.items()):
            if "|" in arg:  # a choice's name is the choice itself, not a second home of the default
                continue
            v = number(text)
            if flag in seen or (v is None and len(text) < 2) or (v is not None and v <= 1):
                continue
            seen.add(flag)
            names = fields.get(flag, {flag[2:].replace("-", "_")})
            if v is None:  # a string: the C literal "text"
                writes = lambda line: ('"%s"' % text) in line  # noqa: E731
            else:
                writes = lambda line: any(x == v for x in values_in(line))  # noqa: E731
            homes = [(rel, n, line.strip()) for rel, n, line in lines
                     if any(names_field(line, f) for f in names) and writes(line)]
            check(len(homes) <= 1, "%s's default %s is written in %d places (one home: name it once, use the "
                  "name elsewhere):\n  %s" % (flag, text, len(homes),
                                             "\n  ".join("%s:%d: %s" % h for h in homes)))
    print("checked %d defaults against %d lines of src/ and include/" % (len(seen), len(lines)))


# The Python package's own names of a value a flag's default sets (see the docstring).
PY_ALIASES = {"--max-batch": {"max_ongoing"}}


def py_values_in(line):
    """values_in, and products such as 16 * 1024 * 1024."""
    vals = []
    for m in re.finditer(r"\b\d+(?:\s*\*\s*\d+)+\b", line):
        v = 1
        for x in re.findall(r"\d+", m.group(0)):
            v *= int(x)
        vals.append(v)
    return vals + values_in(line)


def check_python_writes_none(defaults, fields):
    """No default that clef's --help prints is written in python/src/clef (it reads the library's)."""
    lines = []
    for dirpath, _, files in os.walk(os.path.join(ROOT, "python", "src", "clef")):
        for f in sorted(files):
            if f.endswith(".py"):
                rel = os.path.relpath(os.path.join(dirpath, f), ROOT)
                # a flag's name is its field's: --max-batch names max_batch
                lines += [(rel, n, line, re.sub(r"(?<=\w)-(?=\w)", "_", line))
                          for n, line in enumerate(read(rel).splitlines(), 1)]
    check(len(lines) > 500, "read only %d lines of python/src/clef" % len(lines))
    n, seen = 0, set()
    for verb, flags in sorted(defaults.items()):
        for flag, (text, arg) in sorted(flags.items()):
            v = number(text)
            if flag in seen or "|" in arg or v is None or v <= 1:
                continue
            seen.add(flag)
            names = fields.get(flag, {flag[2:].replace("-", "_")}) | PY_ALIASES.get(flag, set())
            for rel, ln, line, named in lines:
                if any(names_field(named, f) for f in names) and v in py_values_in(line):
                    n += 1
                    check(False, "%s:%d: %s's default %s written in the Python package (read it from the library: "
                          "clef._defaults):\n  %s" % (rel, ln, flag, text, line.strip()))
    print("checked python/src/clef (%d lines) for copies of %d defaults: %d found" % (len(lines), len(seen), n))


def check_serving_md(serve):
    n = 0
    for line in read("docs/serving.md").splitlines():
        m = re.match(r"^\| `(--[\w-]+)(?: [^`]*)?` \| `([^`]*)` \|", line)
        if not m:
            continue
        flag, doc = m.groups()
        n += 1
        if doc.startswith("--"):  # another flag's value (--prepare-threads: `--http-threads`)
            continue
        check(flag in serve, "docs/serving.md shows a default for %s, which clef serve --help does not" % flag)
        if flag in serve:
            text = serve[flag][0]
            a, b = number(doc), number(text)
            check(doc == text or (a is not None and a == b),
                  "docs/serving.md: %s's default `%s`, clef serve --help says %s" % (flag, doc, text))
    check(n >= 20, "read only %d defaults from docs/serving.md's flags table" % n)


def main():
    check_no_def()
    if not os.access(CLEF, os.X_OK):
        print("SKIP: no %s (make): the defaults --help prints were not checked" % CLEF)
        return 1 if fails else 77
    defaults = {verb: help_defaults(verb) for verb in VERBS}
    check(len(defaults["serve"]) >= 25, "read %d defaults from clef serve --help" % len(defaults["serve"]))
    fields = dst_fields()
    check_one_home(defaults, fields)
    check_python_writes_none(defaults, fields)
    check_serving_md(defaults["serve"])
    after = help_defaults("serve", "--port", "9", "--max-batch", "7")
    check(after == defaults["serve"], "clef serve --port 9 --max-batch 7 --help shows other defaults: %r"
          % {k: v for k, v in after.items() if defaults["serve"].get(k) != v})
    if fails:
        print("FAIL: %d problem(s)" % len(fails))
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
