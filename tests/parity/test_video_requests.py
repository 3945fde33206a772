#!/usr/bin/env python3
"""Requests carrying videos, encoded by build/tests/decision_bridge (parse + encode_record with src/video on
Debian's FFmpeg, models/tiny's tokenizer) against what the reference's encode_record / systemone() did with
them (tests/fixtures/video/index.json "requests", written by tools/reference/make_video_fixtures.py).

Entries "@F" name fixture clip F: the reference got its path; here it is sent as bare base64 of the
file's bytes (what the HTTP API carries) and, in a second pass, as the path with paths allowed (the CLI's
--allow-image-paths). "data:@F" / "b64:@F" are a data: URL / bare base64 in both.
  - an answered request: input_ids, question spans, option spans and video_grid_thw equal;
  - a refused one: the engine name of docs/errors.md and, where we copy the reference's text, the same
    message (the processor's and load_video's errors, the forward's "Video features and video tokens do
    not match"); the reference's image errors are the image path's (UnsupportedMedia, our text).
KNOWN: where we part from the reference on purpose (ours answers or refuses with our text), checked to
stay so. Exit 0 pass, 1 fail, 77 skip."""
import base64
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIX = os.path.join(ROOT, "tests", "fixtures", "video")
BUILD = os.environ.get("CLEF_BUILD", os.path.join(ROOT, "build"))
TOKENIZER = os.path.join(ROOT, "models", "tiny", "tokenizer.json")

# name -> (what we do, why)
KNOWN = {
    "data_url": ("answer", "ours: the HTTP API carries video bytes as data: URLs (the reference takes URLs and paths only)"),
    "bare_base64": ("answer", "ours: bare base64, as for images"),
    "good_then_int": ("refuse", "the reference raises a bare StopIteration (no message); ours names the entry"),
}
COPIED = ("Incorrect format used for video", "'video_fps'", "t:", "list index out of range", "0",
          "'int' object is not iterable", "'bool' object is not iterable")


def expected(r):
    """(engine name, message or None for our text) of a reference failure; None when it answered."""
    if "error" not in r:
        return None
    cls, m = r["error"], r["message"]
    if m.startswith("Video features and video tokens do not match") or m.startswith("Image features and image"):
        return "MediaTokenMismatch", m
    if m.startswith("schema requires "):
        return "SchemaTooLong", m
    if m == "0" and cls == "KeyError":
        return "UnsupportedMedia", m
    if m.startswith(COPIED) and m != "0":
        return "UnsupportedMedia", m
    return "UnsupportedMedia", None


def entry(v, png, as_path):
    if isinstance(v, list):
        return [entry(x, png, as_path) for x in v]
    if isinstance(v, dict):
        return {k: entry(x, png, as_path) for k, x in v.items()}
    if v == "PNG48x40":
        return png
    if isinstance(v, str) and v.startswith(("@", "data:@", "b64:@")):
        path = os.path.join(FIX, v.split("@", 1)[1])
        if v.startswith("@") and (as_path or not os.path.exists(path)):
            return path  # a missing file is sent as its path in both passes
        b = base64.b64encode(open(path, "rb").read()).decode("ascii")
        return ("data:video/mp4;base64," + b) if v.startswith("data:") else b
    return v


def main():
    bridge = os.path.join(BUILD, "tests", "decision_bridge")
    if not os.access(bridge, os.X_OK):
        print(f"skip: no {bridge} (build first)")
        return 77
    if not os.path.exists(TOKENIZER):
        print(f"skip: no {TOKENIZER} (make tiny)")
        return 77
    index = json.load(open(os.path.join(FIX, "index.json")))
    reqs = index["requests"]
    png = index["png48x40"]
    bad, n_eq, n_msg, n_name, n_known = [], 0, 0, 0, 0
    for as_path in (False, True):
        lines = []
        for r in reqs:
            req = json.loads(r["request_text"])  # the request in its own key order
            for k in ("images", "videos"):
                if k in req:
                    req[k] = entry(req[k], png, as_path)
            lines.append(json.dumps({"request": req, "allow_paths": as_path}) + "\n")
        p = subprocess.run([bridge, "--tokenizer", TOKENIZER], input="".join(lines).encode(), capture_output=True,
                           timeout=600)
        if p.returncode != 0:
            print(p.stderr.decode("utf-8", "replace")[-2000:])
            return 1
        outs = [json.loads(x) for x in p.stdout.decode().splitlines()]
        assert len(outs) == len(reqs)
        how = "path" if as_path else "base64"
        for r, o in zip(reqs, outs):
            enc = o["encode"]
            name = f"{r['name']} ({how})"
            got_err = enc.get("error")
            if r["name"] in KNOWN:
                what = KNOWN[r["name"]][0]
                if (what == "answer") == (got_err is None):
                    n_known += 1
                else:
                    bad.append(f"{name}: expected ours to {what} ({KNOWN[r['name']][1]}), got {got_err or 'a record'}")
                continue
            want = expected(r)
            if want is None:
                if got_err:
                    bad.append(f"{name}: the reference answers; we refuse {got_err}")
                    continue
                qs = [{"question_id": q["question_id"], "question_span": q["question_span"],
                       "option_spans": q["option_spans"]} for q in enc["questions"]]
                ref_qs = [{k: q[k] for k in ("question_id", "question_span", "option_spans")} for q in r["questions"]]
                grids = [v["grid_thw"] for v in enc.get("videos", [])]
                if enc["input_ids"] != r["input_ids"]:
                    diff = next((i for i, (a, b) in enumerate(zip(enc["input_ids"], r["input_ids"])) if a != b),
                                min(len(enc["input_ids"]), len(r["input_ids"])))
                    bad.append(f"{name}: input_ids differ at {diff} (lengths {len(enc['input_ids'])}, {len(r['input_ids'])})")
                elif qs != ref_qs:
                    bad.append(f"{name}: spans differ")
                elif grids != r.get("video_grid_thw", []):
                    bad.append(f"{name}: video_grid_thw {grids} != {r.get('video_grid_thw')}")
                else:
                    n_eq += 1
                continue
            typ, msg = want
            if got_err is None:
                bad.append(f"{name}: the reference fails ({r['error']}: {r['message']}); we answered a record")
            elif got_err["type"] != typ or (msg is not None and got_err["message"] != msg):
                bad.append(f"{name}: want {typ}: {msg or '(our text)'}\n   got  {got_err['type']}: {got_err['message']}")
            elif msg is None:
                n_name += 1
            else:
                n_msg += 1
    for b in bad:
        print("MISMATCH", b)
    print(f"{len(reqs)} video requests x 2 (base64, paths): {n_eq} ids and spans equal, {n_msg} refusals with the "
          f"reference's name and message, {n_name} with its name (our text), {n_known} known divergences, "
          f"{len(bad)} different")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
