#!/usr/bin/env python3
"""No Python file of tests/parity imports a test file (issue #37 item 2): what two tests share (the
`clef serve` helper, image entries, the near-tie rule) lives in a helper module that is not named
test_*, so running, editing or removing one test never changes another. Plain text, no build needed.
Exit 0 pass, 1 fail."""
import ast
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def imported_modules(path):
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.lineno, node.module


def main():
    tests = {n[:-3] for n in os.listdir(HERE) if n.startswith("test_") and n.endswith(".py")}
    bad = []
    for name in sorted(os.listdir(HERE)):
        if not name.endswith(".py"):
            continue
        for line, module in imported_modules(os.path.join(HERE, name)):
            if module.split(".")[0] in tests:
                bad.append("tests/parity/%s:%d imports the test %s" % (name, line, module))
    for b in bad:
        print("FAIL:", b)
    print("%d Python files, %d imports of a test file" % (len([n for n in os.listdir(HERE) if n.endswith(".py")]), len(bad)))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
