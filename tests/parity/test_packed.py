#!/usr/bin/env python3
"""Packed forwards and the state cache give every request the bits it gets alone (issue #16).

Every corpus request of the tiny checkpoint (text and images; the two longest left out for time:
clef_server.MANY_PASS_SKIP)
with "raw": true inserted (the unrounded fp32 probabilities are printed, so any bit shows), plus
requests built here to try the state cache's key:
  - the same long state asked three different question sets (hits must answer as alone);
  - the same ids with different images (two PNGs of one size: the pad ids are equal, the pixels
    are not; a hit across them would answer with the other image's state);
  - states that share a long prefix and differ in their tail;
  - the same state with and without an image.
tests/tools/pack_tool runs them alone (cache off: the reference bytes), in random packed groups of
1..32 records (cache off, then cache on: groups mix hits and misses; one round of groups per run),
and one by one twice more with the cache on; every answer must equal the alone bytes. Runs: the default path on 3
threads, the parity path (CLEF_LINEAR=double) on 2 threads, and the default path on 2 threads with a
1 MiB cache (it evicts), and the int8 precision (CLEF_PRECISION=int8, CLEF_UNGATED=int8) on 2 threads; under ASan (CLEF_BUILD ending in -asan) the 1 MiB run only (it hits and
evicts; ASan's slowdown makes each run minutes). The 1-thread run is test_threads.py's (1 vs 3
threads on the whole corpus). Exit 0 pass, 1 fail, 77 skip."""
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


def png(w, h, seed):
    """A w x h RGB PNG whose pixels depend on seed (zlib + struct only)."""
    rows = bytearray()
    for y in range(h):
        rows.append(0)
        for x in range(w):
            rows += bytes(((x * 7 + y * 3 + seed * 91) % 256, (x * y + seed * 13) % 256, (x + 2 * y + seed * 57) % 256))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(bytes(rows))) + chunk(b"IEND", b""))


def built_requests():
    long_state = " ".join("The ticket %d says the printer on floor %d jams after %d pages." % (i, i % 7, 10 + i)
                          for i in range(12))
    qsets = [
        {"urgent": {"type": "noul", "instructions": "Is this urgent?"}},
        {"team": {"type": "choice", "instructions": "Which team?", "criteria": {"hardware": None, "software": None, "facilities": None}}},
        {"sev": {"type": "score", "instructions": "How severe?", "criteria": ["low", "medium", "high"]},
         "reply": {"type": "noul"}},
    ]
    out = []
    for i, q in enumerate(qsets):
        out.append(("same_state_q%d" % i, {"model": "clef-flash", "state": long_state, "questions": q, "raw": True}))
    img_a = "data:image/png;base64," + base64.b64encode(png(64, 64, 1)).decode()
    img_b = "data:image/png;base64," + base64.b64encode(png(64, 64, 2)).decode()
    for name, img in (("img_a", img_a), ("img_b", img_b)):
        for i, q in enumerate(qsets[:2]):
            out.append(("%s_q%d" % (name, i), {"model": "clef-flash", "state": long_state, "images": [img],
                                               "questions": q, "raw": True}))
    for i, tail in enumerate(("The fix was a new roller.", "Nobody has looked at it yet, and the queue is long.")):
        out.append(("tail_%d" % i, {"model": "clef-flash", "state": long_state + " " + tail, "questions": qsets[0],
                                    "raw": True}))
    return out


def main():
    tool = os.path.join(BUILD, "tests", "pack_tool")
    if not os.path.exists(tool) or not os.path.exists(os.path.join(MODEL, "config.json")):
        print("skip: pack_tool or models/tiny missing (make; make tiny)")
        return 77
    asan = BUILD.rstrip("/").endswith("-asan")
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for name in sorted(os.listdir(CORPUS)):
            path = os.path.join(CORPUS, name)
            if name[:-len(".json")] in clef_server.MANY_PASS_SKIP:  # minutes of CPU over the passes
                continue
            raw = open(path, "rb").read()
            try:
                doc = json.loads(raw)
                if isinstance(doc, dict):
                    doc["raw"] = True
                    raw = json.dumps(doc, ensure_ascii=False).encode()
            except ValueError:
                pass
            dst = os.path.join(tmp, name)
            open(dst, "wb").write(raw)
            files.append(dst)
        for name, doc in built_requests():
            dst = os.path.join(tmp, "built_" + name + ".json")
            open(dst, "w").write(json.dumps(doc))
            files.append(dst)
        # (label, threads, env, rounds, cache MiB): the last run's 1 MiB cache holds a few entries, so it evicts
        clef = os.path.join(BUILD, "clef")
        for f in files:  # the built requests must be answered, or they test nothing
            if os.path.basename(f).startswith("built_"):
                d = subprocess.run([clef, "decide", "--model", MODEL, "--request", f], capture_output=True, text=True)
                if d.returncode != 0:
                    print("FAIL: %s is refused: %s" % (os.path.basename(f), d.stdout.strip() or d.stderr.strip()))
                    return 1
        runs = [("default", "2", {}, "1", "1")] if asan else [("default", "3", {}, "1", "1024"),
            ("parity", "2", {"CLEF_LINEAR": "double"}, "1", "1024"), ("default", "2", {}, "1", "1"),
            ("int8", "2", {"CLEF_PRECISION": "int8", "CLEF_UNGATED": "int8"}, "1", "1024")]
        failed = 0
        for label, threads, env_extra, rounds, cache_mb in runs:
            env = dict(os.environ, **env_extra)
            p = subprocess.run([tool, "--model", MODEL, "--threads", threads, "--rounds", rounds, "--max-batch", "32",
                                "--seed", "7", "--cache-mb", cache_mb] + files, env=env, capture_output=True, text=True)
            summary = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else p.stderr.strip()
            print("%s path, %s threads, cache %s MiB: %s" % (label, threads, cache_mb, summary))
            if p.returncode != 0:
                print(p.stdout[-4000:])
                print(p.stderr[-2000:])
                failed += 1
            elif " 0 hits" in summary:
                print("FAIL: the state cache never hit")
                failed += 1
            elif cache_mb == "1" and " 0 evictions" in summary:
                print("FAIL: a 1 MiB cache never evicted")
                failed += 1
        print("%s: %d runs, %d failed" % ("PASS" if not failed else "FAIL", len(runs), failed))
        return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
