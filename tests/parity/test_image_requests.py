#!/usr/bin/env python3
"""Requests carrying an entry the processor makes several images of (an animated GIF at the native grid:
one per frame), against what the reference's systemone() did with them on the tiny checkpoint
(tests/fixtures/images/index.json, written by tools/reference/make_image_fixtures.py):

  - every image record with native.request (the GIF as the request's only image);
  - every case of "requests": the GIF first or after single images, with other GIFs, a bad entry, a bad
    state, an over-long schema, media_kwargs, literal <|image_pad|> tokens in the state; and entries that
    fail at different steps (a later entry's decoder failure outranks an earlier entry's aspect ratio).

Each request is encoded by build/tests/decision_bridge (encode_record with the real image path, models/tiny's
tokenizer). A reference failure must be ours with the engine name of docs/errors.md and, where we copy the
reference's text (MediaTokenMismatch, SchemaTooLong, LoneSurrogate, the processor's own ValueErrors), the
same message; a decoder failure (torchvision's RuntimeError) must be UnsupportedMedia (our text).

Known divergence (KNOWN): where literal <|image_pad|> tokens in the text make up the count, the reference's
forward scatters the frames' features over them and answers; we refuse with UnsupportedMedia (our text).
"""
import json
import os
import subprocess
import sys

from image_entries import FIX, entry_for  # the same image entries (base64 / data URL) as test_image_processor.py

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("CLEF_BUILD", os.path.join(ROOT, "build"))
TOKENIZER = os.path.join(ROOT, "models", "tiny", "tokenizer.json")

# case name -> why we refuse where the reference answers; the refusal must be UnsupportedMedia with KNOWN_MSG
KNOWN = {
    "gif_alone_pads_balanced": "literal <|image_pad|> tokens take the frames' features (model placement)",
    "gif_first_pads_balanced": "literal <|image_pad|> tokens take the other images' features (model placement)",
}
KNOWN_MSG = "literal <|image_pad|> tokens in the text stand in for image features of an animated GIF"

# reference messages we copy for UnsupportedMedia (the processor's own ValueErrors)
COPIED_MEDIA = ("too many values to unpack (expected 4)", "absolute aspect ratio must be smaller than 200")


def expected(out):
    """(engine name, message or None when the text is ours) for a reference outcome; None when it answers."""
    if "usage" in out:
        return None
    cls, m = out["error"], out["message"]
    if m.startswith("Image features and image tokens do not match"):
        return "MediaTokenMismatch", m
    if m.startswith("schema requires "):
        return "SchemaTooLong", m
    if m.startswith("TextEncodeInput must be"):
        return "LoneSurrogate", m
    if cls == "ValueError" and m.startswith(COPIED_MEDIA):
        return "UnsupportedMedia", m
    return "UnsupportedMedia", None


def main():
    bridge = os.path.join(BUILD, "tests", "decision_bridge")
    if not os.access(bridge, os.X_OK):
        print(f"skip: no {bridge} (build first)")
        return 77
    if not os.path.exists(TOKENIZER):
        print(f"skip: no {TOKENIZER} (make tiny)")
        return 77
    index = json.load(open(os.path.join(FIX, "index.json")))
    recs = {r["file"]: r for r in index["images"]}
    cases = []  # (name, request, reference outcome)
    for r in index["images"]:
        if "request" in r["native"]:
            req = {"model": "clef-flash", "state": "x", "images": [entry_for(r)], "questions": {"q": {"type": "noul"}}}
            cases.append((r["file"] + " alone", req, r["native"]["request"]))
    for c in index["requests"]:
        cases.append((c["name"], dict(c["request"], images=[entry_for(recs[f]) for f in c["images"]]), c["outcome"]))
    if not index["requests"]:
        print("index.json has no requests: regenerate it (tools/reference/make_image_fixtures.py)")
        return 1
    text = "".join(json.dumps({"request": req}, ensure_ascii=True) + "\n" for _, req, _ in cases)
    p = subprocess.run([bridge, "--tokenizer", TOKENIZER], input=text.encode("ascii"), capture_output=True,
                       timeout=600)
    if p.returncode != 0:
        print(p.stderr.decode("utf-8", "replace")[-2000:])
        return 1
    outs = [json.loads(line) for line in p.stdout.decode("utf-8", "surrogatepass").splitlines()]
    assert len(outs) == len(cases), (len(outs), len(cases))
    bad, n_equal, n_known, n_type = [], 0, 0, 0
    for (name, _, ref), res in zip(cases, outs):
        got = res.get("encode", {}).get("error")
        want = expected(ref)
        if want is None:
            if name not in KNOWN:
                bad.append(f"{name}: the reference answers ({ref['usage']}); we answered {got or 'a record'}")
            elif got and got["type"] == "UnsupportedMedia" and got["message"].startswith(KNOWN_MSG):
                n_known += 1
            else:
                bad.append(f"{name}: expected our refusal ({KNOWN[name]}), got {got or 'a record'}")
            continue
        typ, msg = want
        if got is None:
            bad.append(f"{name}: the reference fails ({ref['error']}: {ref['message']}); we answered a record")
        elif got["type"] != typ or (msg is not None and got["message"] != msg):
            bad.append(f"{name}: want {typ}: {msg or '(our text)'}\n   got  {got['type']}: {got['message']}")
        elif msg is None and got["message"].startswith(COPIED_MEDIA + (KNOWN_MSG,)):
            # the reference's decoder failed first: ours must be the decoder's refusal, not a later step's
            bad.append(f"{name}: want the decoder's refusal ({ref['error']}: {ref['message']}), got {got['message']}")
        elif msg is None:
            n_type += 1
        else:
            n_equal += 1
    for b in bad:
        print("MISMATCH", b)
    print(f"{len(cases)} requests (an animated GIF, or entries failing at different steps): {n_equal} same name and message, {n_type} same name "
          f"(decoder failure: our text), {n_known} known divergence(s) answered with our refusal, {len(bad)} different")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
