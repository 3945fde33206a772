#!/usr/bin/env python3
"""No op reads memory it did not write (issue #20 item 4): the tiny corpus answered with every buffer
poisoned gives the bytes of the plain run.

Poisoning: CLEF_ARENA_POISON=1 (docs/knobs.md) hands out every CPU activation buffer (ops->alloc,
fresh or reused) filled with NaN; the kernels' own scratch comes from malloc, which is poisoned too:
glibc's MALLOC_PERTURB_ fills every block malloc returns with 0xfe bytes (-1.7e38 as a float,
-5.3e303 as a double) and MALLOC_MMAP_THRESHOLD_ keeps blocks up to 32 MiB out of fresh (zeroed)
mappings; under ASan (CLEF_BUILD ending in -asan) ASan's allocator does the same
(malloc_fill_byte, max_malloc_fill_size). calloc'd memory stays zero, as promised.

Requests: every corpus request of the tiny checkpoint (text, images, refusals; the 16,384-token one
left out for time, and the 4,300-digit one: clef_server.MANY_PASS_SKIP) with "raw": true (the unrounded probabilities, so any bit shows), plus three
question sets on one long state and the same state with an image (state-cache hits). Runs, with
`clef batch --threads 2`: the plain run one request at a time, cache off (the reference bytes);
poisoned, packed (--max-batch 32) with the state cache on; poisoned, one at a time with the cache on
(the later requests on a state resume from it); and the parity path (CLEF_LINEAR=double, the double
attention and delta-rule kernels) plain vs poisoned and packed. Each poisoned run must be
byte-equal to its plain run. Exit 0 pass, 1 fail, 77 skip."""
import base64
import json
import os
import struct
import subprocess
import sys
import tempfile
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clef_server  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("CLEF_BUILD", os.path.join(ROOT, "build"))
MODEL = os.environ.get("CLEF_TINY", os.path.join(ROOT, "models", "tiny"))
CORPUS = os.path.join(ROOT, "tests", "corpus", "requests")
ASAN = BUILD.rstrip("/").endswith("-asan")


def png(w, h, seed):
    rows = bytearray()
    for y in range(h):
        rows.append(0)
        for x in range(w):
            rows += bytes(((x * 5 + y * 3 + seed * 91) % 256, (x * y + seed * 13) % 256, (x + 2 * y + seed * 57) % 256))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(bytes(rows))) + chunk(b"IEND", b""))


def requests():
    lines = []
    for k, name in enumerate(sorted(os.listdir(CORPUS))):
        if not name.endswith(".json") or name[:-len(".json")] in clef_server.MANY_PASS_SKIP:
            continue
        if ASAN and k % 3:  # under ASan a third of the corpus (its allocator fills every block too)
            continue
        body = open(os.path.join(CORPUS, name), "rb").read().strip().replace(b"\n", b" ")
        if body.startswith(b"{") and not body[1:].lstrip().startswith(b"}"):
            body = b'{"raw":true,' + body[1:]
        lines.append(body)
    state = " ".join("Ticket %d: the printer on floor %d jams after %d pages." % (i, i % 5, 20 + i) for i in range(10))
    qsets = [
        {"urgent": {"type": "noul", "instructions": "Is this urgent?"}},
        {"team": {"type": "choice", "instructions": "Which team?", "criteria": {"hardware": None, "software": None}}},
        {"sev": {"type": "score", "instructions": "How severe?", "criteria": ["low", "medium", "high"]}, "reply": {"type": "noul"}},
    ]
    img = "data:image/png;base64," + base64.b64encode(png(48, 40, 3)).decode()
    for q in qsets:
        lines.append(json.dumps({"model": "clef-flash", "state": state, "questions": q, "raw": True}).encode())
    for q in qsets[:2]:
        lines.append(json.dumps({"model": "clef-flash", "state": state, "questions": q, "images": [img], "raw": True}).encode())
    return lines


def run(tmp, name, inp, extra_env, args):
    out = os.path.join(tmp, name + ".jsonl")
    env = dict(os.environ)
    env.update(extra_env)
    cmd = [os.path.join(BUILD, "clef"), "batch", "--model", MODEL, "--threads", "2", "--allow-errors"] + args + [inp, out]
    r = subprocess.run(cmd, env=env, capture_output=True, timeout=1200)
    if r.returncode != 0:
        print("%s: clef batch exited %d: %s" % (name, r.returncode, r.stderr.decode(errors="replace")[-2000:]))
        return None
    return open(out, "rb").read().split(b"\n")


def poison_env():
    env = {"CLEF_ARENA_POISON": "1", "MALLOC_PERTURB_": "1", "MALLOC_MMAP_THRESHOLD_": "33554432"}
    if ASAN:
        opts = os.environ.get("ASAN_OPTIONS", "")
        env["ASAN_OPTIONS"] = (opts + ":" if opts else "") + "malloc_fill_byte=254:max_malloc_fill_size=2147483647"
    return env


def main():
    if not os.path.exists(os.path.join(MODEL, "config.json")):
        print("skip: no tiny model at %s (make tiny)" % MODEL)
        return 77
    if not os.path.exists(os.path.join(BUILD, "clef")):
        print("skip: no %s/clef (build first)" % BUILD)
        return 77
    lines = requests()
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        inp = os.path.join(tmp, "in.jsonl")
        with open(inp, "wb") as f:
            f.write(b"\n".join(lines) + b"\n")
        alone = ["--max-batch", "1", "--state-cache-mb", "0"]
        packed = ["--max-batch", "32", "--state-cache-mb", "64"]
        one_cached = ["--max-batch", "1", "--state-cache-mb", "64"]
        plans = [
            ("fp32", {}, [("packed+cache", packed), ("alone+cache", one_cached)]),
            ("double", {"CLEF_LINEAR": "double"}, [("packed+cache", packed)]),
        ]
        for path, penv, runs in plans:
            want = run(tmp, path + "-plain", inp, penv, alone)
            if want is None:
                return 1
            answered = sum(1 for l in want if l.startswith(b"{") and not l.startswith(b'{"error"'))
            for rname, args in runs:
                env = dict(penv)
                env.update(poison_env())
                got = run(tmp, path + "-poison-" + rname.replace("+", "-"), inp, env, args)
                if got is None:
                    return 1
                diff = [i for i in range(max(len(want), len(got))) if i >= len(want) or i >= len(got) or want[i] != got[i]]
                if diff:
                    bad += 1
                    i = diff[0]
                    print("FAIL %s poisoned %s: %d of %d lines differ; first, line %d:\n  plain:    %s\n  poisoned: %s" %
                          (path, rname, len(diff), len(want) - 1, i + 1, want[i][:300] if i < len(want) else b"(none)",
                           got[i][:300] if i < len(got) else b"(none)"))
                else:
                    print("ok %s poisoned %s: %d lines byte-equal (%d answers)" % (path, rname, len(want) - 1, answered))
    print("%d of 3 poisoned runs differ from the plain runs" % bad)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
