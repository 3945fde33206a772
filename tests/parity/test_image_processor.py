#!/usr/bin/env python3
"""Image processor parity: for every image in tests/fixtures/images/index.json (written by
tools/reference/make_image_fixtures.py from the reference processor), `clef preprocess` on the same
request string gives the same grid_thw, shape and sha256 of pixel_values (float32 LE) -- at the
native grid, at both fixed tiles, and for the recorded min_pixels/max_pixels runs -- or an error
where the reference raised one. Every run is compared; none is skipped.

An entry the processor turns into several images (an animated GIF at the native grid: one per frame)
must give every image as the processor does: the first grid, image_grid_thw listing them all, and the
shape and hash of all their rows. (What a request carrying such an entry gets -- the fixture's
native.request and "requests" -- is compared by tests/parity/test_image_requests.py.)

Known divergences (ours is a clear refusal where the reference does something we do not reproduce)
would be listed in KNOWN with the reason; each must still answer exactly that refusal. None today."""
import json
import os
import subprocess
import sys
import tempfile

from image_entries import FIX, entry_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("CLEF_BUILD", os.path.join(ROOT, "build"))
CLEF = os.path.join(BUILD, "clef")

# (file, arm) -> why we refuse where the reference answers
KNOWN = {}


def run(model, entry_path, tile=0, kw=None):
    cmd = [CLEF, "preprocess", "--model", model, "--entry", entry_path]
    if tile:
        cmd += ["--tile", str(tile)]
    if kw:
        cmd += ["--min-pixels", str(kw[0]), "--max-pixels", str(kw[1])]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    try:
        return json.loads(p.stdout.strip().splitlines()[-1])
    except Exception:
        return {"error": {"type": "NoOutput", "message": f"exit {p.returncode}: {p.stderr[-300:]}"}}


def compare(name, arm, ref, got, bad):
    if (name, arm) in KNOWN:
        if "error" in got and got["error"]["type"] == "UnsupportedMedia":
            return "known"
        bad.append(f"{name} [{arm}]: expected our refusal ({KNOWN[(name, arm)]}), got {got}")
        return "bad"
    if "error" in ref:
        if "error" in got and got["error"]["type"] in ("UnsupportedMedia", "RequestTooLong"):
            return "equal"
        bad.append(f"{name} [{arm}]: reference raised {ref['error']}: {ref['message'][:80]!r}; we answered {got}")
        return "bad"
    # image_grid_thw: present (in both) only when the processor made several images of the entry
    want = {k: ref.get(k) for k in ("grid_thw", "shape", "pixel_values_sha256", "image_grid_thw")}
    have = {k: got.get(k) for k in want}
    if want == have:
        return "equal"
    bad.append(f"{name} [{arm}]: want {want}, got {got}")
    return "bad"


def main():
    if not os.path.exists(CLEF):
        print(f"missing {CLEF}: build first")
        return 1
    index = json.load(open(os.path.join(FIX, "index.json")))
    bad, counts = [], {"equal": 0, "known": 0, "bad": 0}
    with tempfile.TemporaryDirectory() as d:
        model = os.path.join(d, "model")
        os.mkdir(model)
        with open(os.path.join(model, "processor_config.json"), "w") as f:
            json.dump({"image_processor": index["processor_config"], "processor_class": "Qwen3VLProcessor"}, f)
        ep = os.path.join(d, "entry.txt")
        for rec in index["images"]:
            with open(ep, "w") as f:
                f.write(entry_for(rec))
            runs = [("native", rec["native"], 0, None), ("g256", rec["g256"], 256, None), ("g448", rec["g448"], 448, None)]
            for k in rec.get("kwargs", []):
                runs.append((f"min{k['min_pixels']}/max{k['max_pixels']}", k, 0, (k["min_pixels"], k["max_pixels"])))
            for arm, ref, tile, kw in runs:
                counts[compare(rec["file"], arm, ref, run(model, ep, tile, kw), bad)] += 1
    for b in bad:
        print("MISMATCH", b)
    n = len(index["images"])
    runs_total = sum(counts.values())
    extra = (f", {counts['known']} known divergence(s) answered with our refusal: "
             + "; ".join(f"{a} [{b}]" for a, b in KNOWN)) if counts["known"] else ""
    print(f"{runs_total} runs over {n} images: {counts['equal']} equal, {counts['bad']} different{extra}")
    differing = {b.split(' [')[0] for b in bad}
    known_imgs = {k[0] for k in KNOWN} - differing
    equal_imgs = n - len(differing) - len(known_imgs)
    print(f"{n} images: {equal_imgs} equal in every arm, {len(known_imgs)} with a known divergence, "
          f"{len(differing)} different")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
