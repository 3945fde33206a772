#!/usr/bin/env python3
"""clef gate on the tiny checkpoint with tests/fixtures/gate_tiny (the reference's fp32 run on models/tiny
over a subset of the author's fixture requests, in the author's schema; tools/reference/
make_gate_fixture.py).

 1. every arm (text, and g256 / g448 / native with --images tests/fixtures/images): pass, exit 0;
 2. one probability of the fixture moved by 1e-3 (a modified copy in a temp dir): FAIL, exit 1, the
    max |dp| reported at that run;
 3. one response value of the fixture changed (a choice, in another run): FAIL, that run named;
 4. without --images: the image arms skipped with a line saying why
    (2-4 are one run of the modified fixture: each is a whole text arm, minutes under ASan);
 5. an image whose bytes differ from the fixture's sha256: its runs skipped, named;
 6. the built-in fixture (the author's, compiled in) parses: 216 records, 254 runs; a missing model
    folder is exit 3;
 7. --help on stdout, exit 0; an unknown option exit 2.
Runs with .venv-test's python; the binary from $CLEF_BUILD (default build/)."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("CLEF_BUILD", os.path.join(ROOT, "build")).rstrip("/")
CLEF = os.path.join(BUILD, "clef")
MODEL = os.path.join(ROOT, "models", "tiny")
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "gate_tiny", "fixtures-gate-tiny.json")
IMAGES = os.path.join(ROOT, "tests", "fixtures", "images")
failures = []


def skip(why):
    if os.environ.get("CI") == "true":
        print(f"FAIL (CI): {why}")
        sys.exit(1)
    print(f"skip: {why}")
    sys.exit(77)


def check(cond, what, detail=""):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)
        if detail:
            print("     " + detail.replace("\n", "\n     "))


def gate(*args):
    env = dict(os.environ)
    env.setdefault("CLEF_THREADS", "2")
    p = subprocess.run([CLEF, "gate", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=1200, env=env)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def arm_line(out, arm):
    return next((l for l in out.splitlines() if l.startswith(arm + " ")), "")


def main():
    if not os.access(CLEF, os.X_OK):
        skip(f"no {CLEF} (build first)")
    if not os.path.isfile(os.path.join(MODEL, "config.json")):
        skip(f"no {MODEL} (make tiny)")
    with open(FIXTURE, encoding="utf-8") as f:
        fx = json.load(f)
    n_text = sum(1 for r in fx["runs"] if r["arm"] == "text")
    n_img = {a: sum(1 for r in fx["runs"] if r["arm"] == a) for a in ("g256", "g448", "native")}
    tmp = tempfile.mkdtemp(prefix="clef-gate-test-")
    try:
        # 1. the reference's own numbers: pass
        rc, out, err = gate("--model", MODEL, "--fixture", FIXTURE, "--images", IMAGES)
        check(rc == 0 and out.rstrip().splitlines()[-1].startswith("gate: pass"), "1: the tiny fixture passes",
              out + err[-2000:])
        line = arm_line(out, "text")
        check(line.split()[1:2] == [f"{n_text}/{n_text}"] and " pass" in line,
              f"1: text arm: {n_text} runs compared, pass", out)
        for a, n in n_img.items():
            line = arm_line(out, a)
            check(line.split()[1:2] == [f"{n}/{n}"] and " pass" in line, f"1: {a} arm: {n} runs, pass", out)

        # 2-4 in one run (each is a whole text arm): one probability moved in one run, one response
        # value changed in another, and no --images
        bad = json.loads(json.dumps(fx))
        moved = next(r for r in bad["runs"] if r["arm"] == "text")
        moved["questions"][0]["probs"][0] += 1e-3
        changed = next(r for r in bad["runs"] if r["arm"] == "text" and r is not moved and
                       any(a.get("type") == "choice" for a in r["systemone_response"]["answers"].values()))
        ans = next(a for a in changed["systemone_response"]["answers"].values() if a.get("type") == "choice")
        others = [k for k in ans["probabilities"] if k != ans["choice"]]
        ans["choice"] = others[0]
        p2 = os.path.join(tmp, "moved.json")
        with open(p2, "w", encoding="utf-8") as f:
            json.dump(bad, f, ensure_ascii=False)
        rc, out, err = gate("--model", MODEL, "--fixture", p2)
        line = arm_line(out, "text")
        check(rc == 1 and "FAIL" in line and "max |dp| over 1e-04 at " + moved["id"] + "/text" in line and
              out.rstrip().splitlines()[-1].startswith("gate: FAIL"),
              "2: one probability moved by 1e-3: FAIL, exit 1, the run named", out + err[-1500:])
        check(f"{changed['id']}/text: response differs" in err and f"{moved['id']}/text: response differs" not in err,
              "3: one response value changed: FAIL, that run named", out + err[-1500:])
        check(all("skipped: image arm: give --images DIR" in arm_line(out, a) for a in n_img),
              "4: without --images the image arms are skipped", out + err[-1500:])

        # 5. an image that is not the fixture's
        imgs = os.path.join(tmp, "images")
        os.makedirs(imgs)
        names = sorted({im["file"] for im in fx["images"]})
        for n in names:
            shutil.copy(os.path.join(IMAGES, n), os.path.join(imgs, n))
        with open(os.path.join(imgs, names[0]), "ab") as f:
            f.write(b"\0")
        rc, out, err = gate("--model", MODEL, "--fixture", FIXTURE, "--images", imgs, "--arm", "g256")
        line = arm_line(out, "g256")
        n_bad = sum(1 for r in fx["runs"] if r["arm"] == "g256" and names[0] in r["image_files"])
        check(f"{n_bad} runs skipped (images)" in line and f"{names[0]}: sha256" in err and
              line.split()[1] == f"{n_img['g256'] - n_bad}/{n_img['g256']}",
              "5: an image with other bytes: its runs skipped, named", out + err[-1500:])

        # 6. the built-in fixture
        rc, out, err = gate("--model", os.path.join(tmp, "no-such-model"))
        check(rc == 3 and "the author's fixture (built in): 216 records, 254 runs" in err,
              "6: the built-in author's fixture parses (216 records, 254 runs); a missing model is exit 3", err[-800:])

        # 7. options
        p = subprocess.run([CLEF, "gate", "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        check(p.returncode == 0 and p.stdout.startswith(b"usage: clef gate"), "7: --help on stdout, exit 0")
        p = subprocess.run([CLEF, "gate", "--model", MODEL, "--bogus", "1"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
        check(p.returncode == 2 and b"unknown option '--bogus'" in p.stderr, "7: an unknown option: exit 2")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("all gate checks pass" if not failures else f"{len(failures)} gate checks FAIL")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
