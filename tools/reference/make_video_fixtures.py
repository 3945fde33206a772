#!/usr/bin/env python3
"""Writes tests/fixtures/video/: small license-clean clips (synthetic frames drawn with numpy, encoded
with PyAV 18.1.0's bundled FFmpeg 8.1.2: H.264 (libx264), VP9 (libvpx-vp9), AV1 (libsvtav1) in
MP4/WebM/MKV, several sizes, frame rates (one variable), lengths and pixel formats) and index.json
recording, for each clip, what the reference video processor (transformers 5.17.0
Qwen3VLVideoProcessor from models/tiny's video_preprocessor_config.json; frames from
torchvision 0.24.0 io.read_video over PyAV) produces: video_grid_thw, the sampled indices, the
stream's fps, the timestamp texts, sha256 of pixel_values_videos (float32 little-endian) and a few
values of the first and last rows, or the error it raises. "requests": encode_record's input ids and
spans and systemone()'s probabilities on the tiny checkpoint for a few requests carrying clips.

Run with the reference venv:  .venv-ref/bin/python tools/reference/make_video_fixtures.py [--remake-clips]
Needs models/tiny (`make tiny`). Existing clips are kept (the encoders are not byte-reproducible from run
to run); --remake-clips encodes them again. "requests" also holds each answered request's unrounded
probabilities (probs32) and those of the float64 oracle of make_fixtures64.py (probs64).
"""
import base64
import fractions
import hashlib
import json
import os
import re
import sys
import warnings

import av
import numpy as np
import torch

warnings.filterwarnings("ignore")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fixtures", "video")


def frame(w, h, i, seed):
    rng = np.random.default_rng(seed * 1000 + i)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    r = 255 * (xx + 0.5) / w
    g = 255 * (yy + 0.5) / h
    b = 127.5 + 127.5 * np.sin(2 * np.pi * ((xx + 3 * i) / max(8, w / 3) + yy / max(8, h / 2)))
    img = np.stack([r, g, b], -1)
    x0, y0 = (7 * i + seed) % max(1, w - w // 4), (5 * i + 2 * seed) % max(1, h - h // 4)
    img[y0:y0 + h // 4, x0:x0 + w // 4] = [(40 * i) % 256, 255 - (30 * i) % 256, (seed * 50) % 256]
    img += rng.normal(0, 4, img.shape)
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


CODEC_OPTS = {
    "libx264": {"preset": "veryfast", "crf": "30", "threads": "1"},
    "libvpx-vp9": {"crf": "40", "b": "0", "threads": "1", "deadline": "realtime", "cpu-used": "8"},
    "libsvtav1": {"preset": "12", "crf": "50"},
    "mpeg4": {"bf": "2", "qscale": "4", "threads": "1"},  # MPEG-4 Part 2 with B-frames (AVI stores no pts)
}


def make_clip(path, codec, container, w, h, n, rate, pix_fmt="yuv420p", pts=None, seed=0, colour=None):
    out = av.open(path, "w", format=container)
    s = out.add_stream(codec, rate=rate, options=dict(CODEC_OPTS[codec]))
    s.width, s.height, s.pix_fmt = w, h, pix_fmt
    if codec == "libsvtav1":
        s.codec_context.options = dict(CODEC_OPTS[codec], **{"svtav1-params": "lp=1"})
    for k, v in (colour or {}).items():  # colorspace / color_range tags: the stream's and the frames'
        setattr(s.codec_context, k, v)
    for i in range(n):
        f = av.VideoFrame.from_ndarray(frame(w, h, i, seed), format="rgb24")
        for k, v in (colour or {}).items():
            setattr(f, k, v)
        if pts is not None:
            f.pts = pts[i]
            f.time_base = fractions.Fraction(1, rate) if isinstance(rate, int) else 1 / rate
        for p in s.encode(f):
            out.mux(p)
    for p in s.encode():
        out.mux(p)
    out.close()


# (name, codec, container, w, h, frames, rate, pix_fmt, pts[, colour tags])
CLIPS = [
    ("h264_64x48_10fps_15.mp4", "libx264", "mp4", 64, 48, 15, 10, "yuv420p", None),
    ("h264_96x64_25fps_50.mp4", "libx264", "mp4", 96, 64, 50, 25, "yuv420p", None),
    ("h264_130x70_24fps_30.mkv", "libx264", "matroska", 130, 70, 30, 24, "yuv420p", None),
    ("h264_2frames.mp4", "libx264", "mp4", 64, 64, 2, 10, "yuv420p", None),
    ("h264_1frame.mp4", "libx264", "mp4", 64, 64, 1, 10, "yuv420p", None),
    ("h264_3frames.mkv", "libx264", "matroska", 48, 48, 3, 30, "yuv420p", None),
    ("h264_ntsc_45.mp4", "libx264", "mp4", 80, 60, 45, fractions.Fraction(30000, 1001), "yuv420p", None),
    ("h264_60fps_90.mp4", "libx264", "mp4", 64, 36, 90, 60, "yuv420p", None),
    ("h264_444_64x64.mkv", "libx264", "matroska", 66, 50, 12, 12, "yuv444p", None),
    ("h264_tall_20x300.mp4", "libx264", "mp4", 20, 300, 8, 8, "yuv420p", None),
    ("h264_small_16x12.mp4", "libx264", "mp4", 16, 12, 6, 6, "yuv420p", None),
    ("h264_vfr.mkv", "libx264", "matroska", 64, 48, 20, 30, "yuv420p",
     [0, 1, 2, 4, 8, 9, 10, 15, 20, 21, 22, 30, 31, 32, 40, 50, 51, 52, 60, 70]),
    ("h264_vfr.mp4", "libx264", "mp4", 64, 48, 16, 30, "yuv420p",
     [0, 3, 4, 5, 9, 20, 21, 22, 23, 30, 45, 46, 47, 60, 61, 90]),
    ("h264_320x180_30fps_40.mp4", "libx264", "mp4", 320, 180, 40, 30, "yuv420p", None),
    ("vp9_64x48_10fps_15.webm", "libvpx-vp9", "webm", 64, 48, 15, 10, "yuv420p", None),
    ("vp9_98x54_24fps_40.webm", "libvpx-vp9", "webm", 98, 54, 40, 24, "yuv420p", None),
    ("vp9_5frames.mkv", "libvpx-vp9", "matroska", 64, 64, 5, 10, "yuv420p", None),
    ("vp9_444.webm", "libvpx-vp9", "webm", 64, 48, 8, 8, "yuv444p", None),
    ("vp9_422.webm", "libvpx-vp9", "webm", 64, 48, 8, 8, "yuv422p", None),
    ("vp9_vfr.webm", "libvpx-vp9", "webm", 64, 48, 12, 20, "yuv420p", [0, 1, 2, 6, 7, 8, 15, 16, 30, 31, 32, 40]),
    ("av1_128x64_10fps_15.mp4", "libsvtav1", "mp4", 128, 64, 15, 10, "yuv420p", None),
    ("av1_96x72_25fps_30.mkv", "libsvtav1", "matroska", 96, 72, 30, 25, "yuv420p", None),
    ("av1_64x64_7frames.webm", "libsvtav1", "webm", 64, 64, 7, 14, "yuv420p", None),
    ("av1_10bit.mkv", "libsvtav1", "matroska", 64, 48, 8, 8, "yuv420p10le", None),
    # the RGB conversion's paths (src/video/rgb24.c): high bit depth (H.264 10-bit 4:2:0 / 4:2:2 / 4:4:4,
    # chroma sited left), colour tags (BT.709, full range), odd sizes (unscaled path at odd width; scaled
    # path at odd height; odd width on the scaled path: KNOWN in test_video_processor.py)
    ("h264_10bit_48x36.mp4", "libx264", "mp4", 48, 36, 6, 6, "yuv420p10le", None),
    ("h264_422_10bit.mkv", "libx264", "matroska", 50, 30, 6, 6, "yuv422p10le", None),
    ("h264_444_10bit.mkv", "libx264", "matroska", 34, 26, 6, 6, "yuv444p10le", None),
    ("h264_422_50x40.mkv", "libx264", "matroska", 50, 40, 6, 6, "yuv422p", None),
    ("h264_bt709.mp4", "libx264", "mp4", 64, 48, 6, 6, "yuv420p", None, {"colorspace": 1}),
    ("h264_full_range.mp4", "libx264", "mp4", 64, 48, 6, 6, "yuv420p", None, {"color_range": 2}),
    ("h264_10bit_bt709_full.mp4", "libx264", "mp4", 40, 30, 6, 6, "yuv420p10le", None,
     {"colorspace": 1, "color_range": 2}),
    ("vp9_33x32.webm", "libvpx-vp9", "webm", 33, 32, 6, 6, "yuv420p", None),
    ("vp9_64x47.webm", "libvpx-vp9", "webm", 64, 47, 6, 6, "yuv420p", None),
    ("av1_10bit_66x50.mkv", "libsvtav1", "matroska", 66, 50, 6, 6, "yuv420p10le", None),
    ("av1_10bit_35x27.mkv", "libsvtav1", "matroska", 35, 27, 6, 6, "yuv420p10le", None),
    ("vp9_65x47.webm", "libvpx-vp9", "webm", 65, 47, 6, 6, "yuv420p", None),
    # MPEG-4 Part 2 with B-frames in AVI: without AVFMT_FLAG_GENPTS (PyAV sets it on every input) the
    # I/P packets have no pts; raw elementary streams, which cannot seek (torchvision seeks to 0 first)
    ("mpeg4_bframes_64x48.avi", "mpeg4", "avi", 64, 48, 15, 10, "yuv420p", None),
    ("mpeg4_bframes_98x54.avi", "mpeg4", "avi", 98, 54, 40, 24, "yuv420p", None),
    ("h264_raw_64x48.h264", "libx264", "h264", 64, 48, 15, 10, "yuv420p", None),
    ("mpeg4_raw_64x48.m4v", "mpeg4", "m4v", 64, 48, 15, 10, "yuv420p", None),
]


def err_rec(e):
    return {"error": type(e).__name__, "message": re.sub(r" at 0x[0-9a-f]+", "", str(e))[:300]}


def rows(pv):
    a = pv.numpy()
    return {"first": [float(x) for x in a[0, :4]], "last": [float(x) for x in a[-1, :4]]}


def png_data_url(w, h):
    import io

    from PIL import Image
    buf = io.BytesIO()
    Image.fromarray(frame(w, h, 3, 9)).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


QUESTIONS = {"moving": {"type": "noul", "instructions": "Is something moving?"},
             "color": {"type": "choice", "criteria": {"red": "mostly red", "green": "mostly green",
                                                      "blue": "mostly blue"}}}
# (name, request fields over the base request). Entry strings: "@F" is fixture clip F (the reference gets its
# path; the tests send its bytes as base64, and once more as a path with paths allowed); "data:@F" a data:
# URL and "b64:@F" bare base64 of F (both here and in the tests); anything else is literal.
REQUESTS = [
    ("one_video", {"videos": ["@h264_64x48_10fps_15.mp4"]}),
    ("two_videos", {"videos": ["@vp9_64x48_10fps_15.webm", "@av1_128x64_10fps_15.mp4"]}),
    ("odd_frames", {"videos": ["@vp9_5frames.mkv"]}),
    ("vfr", {"videos": ["@h264_vfr.mkv"]}),
    ("two_frames", {"videos": ["@h264_2frames.mp4"]}),
    ("three_frames", {"videos": ["@h264_3frames.mkv"]}),
    ("wide_320x180", {"videos": ["@h264_320x180_30fps_40.mp4"]}),
    ("ntsc_60fps", {"videos": ["@h264_ntsc_45.mp4", "@h264_60fps_90.mp4"]}),
    ("image_then_video", {"images": ["PNG48x40"], "videos": ["@vp9_444.webm"]}),
    ("image_pads_in_state", {"videos": ["@vp9_422.webm"], "state": "look <|image_pad|> here"}),
    ("video_pads_in_state", {"videos": ["@vp9_422.webm"], "state": "look <|video_pad|> here"}),
    ("media_kwargs", {"videos": ["@h264_64x48_10fps_15.mp4"], "media_kwargs": {"min_pixels": 3136, "max_pixels": 12544}}),
    ("missing_path", {"videos": ["@missing.mp4"]}),
    ("empty_string", {"videos": [""]}),
    ("data_url", {"videos": ["data:@h264_64x48_10fps_15.mp4"]}),
    ("bare_base64", {"videos": ["b64:@h264_64x48_10fps_15.mp4"]}),
    ("bad_bytes", {"videos": ["@bad_bytes.mp4"]}),
    ("one_frame", {"videos": ["@h264_1frame.mp4"]}),
    ("one_frame_then_bad", {"videos": ["@h264_1frame.mp4", "@bad_bytes.mp4"]}),
    ("good_then_one_frame", {"videos": ["@h264_64x48_10fps_15.mp4", "@h264_1frame.mp4"]}),
    ("int_entry", {"videos": [123]}),
    ("none_entry", {"videos": [None]}),
    ("dict_entry", {"videos": [{"url": "@h264_64x48_10fps_15.mp4"}]}),
    ("good_then_int", {"videos": ["@h264_64x48_10fps_15.mp4", 123]}),
    ("videos_int", {"videos": 5}),
    ("videos_true", {"videos": True}),
    ("videos_empty", {"videos": []}),
    ("bad_image_and_bad_video", {"images": ["not an image"], "videos": ["@bad_bytes.mp4"]}),
    ("nested_list", {"videos": [["@h264_64x48_10fps_15.mp4"]]}),
    ("avi_bframes", {"videos": ["@mpeg4_bframes_98x54.avi"]}),
    ("raw_h264", {"videos": ["@h264_raw_64x48.h264"]}),
    ("raw_m4v_then_avi", {"videos": ["@mpeg4_raw_64x48.m4v", "@mpeg4_bframes_64x48.avi"]}),
]


def expand(v, png):
    """A request value as the reference gets it (see REQUESTS)."""
    if isinstance(v, list):
        return [expand(x, png) for x in v]
    if isinstance(v, dict):
        return {k: expand(x, png) for k, x in v.items()}
    if v == "PNG48x40":
        return png
    if isinstance(v, str) and v.startswith(("@", "data:@", "b64:@")):
        name = v.split("@", 1)[1]
        path = os.path.join(OUT, name)
        if v.startswith("@"):
            return path
        b = base64.b64encode(open(path, "rb").read()).decode("ascii")
        return ("data:video/mp4;base64," + b) if v.startswith("data:") else b
    return v


def base_request(extra):
    req = {"model": "clef-flash", "state": {"event": "clip", "n": 1}, "questions": QUESTIONS}
    req.update(extra)
    return req


def run_requests(index, model, processor, jsm):
    png = png_data_url(48, 40)
    index["png48x40"] = png
    captured = []
    inner_answer = jsm.systemone_answer

    def answer(question, probabilities):  # the unrounded fp32 probabilities, head order
        captured.append(dict(probabilities))
        return inner_answer(question, probabilities)
    jsm.systemone_answer = answer
    for rname, extra in REQUESTS:
        req = base_request(extra)
        ref_req = expand(req, png)
        # index.json is written with sorted keys: the request's own order (questions!) is kept as text
        r = {"name": rname, "request": req, "request_text": json.dumps(req)}
        try:
            enc = jsm.encode_record(processor.tokenizer, ref_req, processor=processor)
            r["input_ids"] = list(enc.input_ids)
            r["questions"] = [{"question_id": q.question_id, "question_span": list(q.question_span),
                               "option_spans": [list(s) for s in q.option_spans], "option_ids": list(q.option_ids)}
                              for q in enc.questions]
            if enc.media and "video_grid_thw" in enc.media:
                r["video_grid_thw"] = enc.media["video_grid_thw"].tolist()
            if enc.media and "image_grid_thw" in enc.media:
                r["image_grid_thw"] = enc.media["image_grid_thw"].tolist()
            captured.clear()
            with torch.no_grad():
                resp = jsm.systemone(model, processor, ref_req)
            r["response"] = resp
            r["response_text"] = json.dumps(resp, ensure_ascii=False, separators=(",", ":"))
            r["probs32"] = [[float(p[o]) for o in q["option_ids"]] for p, q in zip(captured, r["questions"])]
        except Exception as e:
            r.update(err_rec(e))
        index["requests"].append(r)
        print(rname, r.get("error", "ok"), r.get("message", "")[:80], file=sys.stderr)
    jsm.systemone_answer = inner_answer


def run_requests64(index, jsm):
    """The same answered requests through the float64 oracle of make_fixtures64.py (its patches P1-P4):
    probs64, what the tests bound the fp32 reference's own rounding by (docs/fidelity.md)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import make_fixtures64 as m64
    model, processor = jsm.load_release_model(os.path.join(ROOT, "models", "tiny"), dtype=torch.float64,
                                              device="cpu")
    m64.install_patches()
    for m in model.modules():
        for name in ("inv_freq", "original_inv_freq"):
            t = getattr(m, name, None)
            if isinstance(t, torch.Tensor) and t.dtype == torch.float32:
                setattr(m, name, t.to(torch.float64))
    systemone = m64.wrap_scopes()
    png = index["png48x40"]
    captured = []
    inner_answer = jsm.systemone_answer

    def answer(question, probabilities):
        captured.append(dict(probabilities))
        return inner_answer(question, probabilities)
    jsm.systemone_answer = answer
    for r in index["requests"]:
        if "probs32" not in r:
            continue
        captured.clear()
        with torch.no_grad():
            systemone(model, processor, expand(r["request"], png))
        r["probs64"] = [[float(p[o]) for o in q["option_ids"]] for p, q in zip(captured, r["questions"])]
    jsm.systemone_answer = inner_answer


def main():
    torch.set_num_threads(1)
    os.makedirs(OUT, exist_ok=True)
    sys.path.insert(0, os.path.join(ROOT, ".venv-ref", "clef_vendor"))
    import joint_schema_model as jsm
    model, processor = jsm.load_release_model(os.path.join(ROOT, "models", "tiny"), dtype=torch.float32,
                                              device="cpu")
    vp = processor.video_processor
    index = {"what": __doc__.strip().splitlines()[0], "av": av.__version__, "ffmpeg": av.ffmpeg_version_info,
             "clips": [], "requests": []}
    for name, codec, cont, w, h, n, rate, pf, pts, *tags in CLIPS:
        colour = tags[0] if tags else None
        path = os.path.join(OUT, name)
        if not os.path.exists(path) or "--remake-clips" in sys.argv:
            # the encoders are not byte-reproducible from run to run (libvpx's realtime deadline adapts
            # to the time taken; some x264/svt-av1 clips differ too): the committed clips are the data,
            # made once, and the reference's outputs are recomputed from them
            make_clip(path, codec, cont, w, h, n, rate, pf, pts, seed=len(index["clips"]), colour=colour)
        data = open(path, "rb").read()
        rec = {"file": name, "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data), "codec": codec,
               "container": cont, "size": [w, h], "frames_encoded": n, "rate": str(rate), "pix_fmt": pf,
               "vfr": pts is not None}
        if colour:
            rec["colour"] = colour
        try:
            out = vp(videos=[path], return_tensors="pt", return_metadata=True)
            pv = out["pixel_values_videos"]
            md = out["video_metadata"][0]
            ts = processor._calculate_timestamps(md.frames_indices, md.fps, vp.temporal_patch_size)
            rec.update({"grid_thw": out["video_grid_thw"].tolist()[0], "shape": list(pv.shape),
                        "fps": md.fps, "total_frames": md.total_num_frames,
                        "indices": [int(i) for i in md.frames_indices],
                        "timestamps": [f"<{t:.1f} seconds>" for t in ts],
                        "pixel_values_sha256": hashlib.sha256(pv.contiguous().numpy().astype("<f4").tobytes()).hexdigest(),
                        "rows": rows(pv)})
        except Exception as e:
            rec.update(err_rec(e))
        index["clips"].append(rec)
        print(name, rec.get("grid_thw", rec.get("error")), file=sys.stderr)
    bad = os.path.join(OUT, "bad_bytes.mp4")
    open(bad, "wb").write(b"this is not a video\n")
    try:
        vp(videos=[bad], return_tensors="pt")
        index["clips"].append({"file": "bad_bytes.mp4"})
    except Exception as e:
        index["clips"].append(dict({"file": "bad_bytes.mp4", "sha256": hashlib.sha256(open(bad, "rb").read()).hexdigest()}, **err_rec(e)))
    run_requests(index, model, processor, jsm)
    run_requests64(index, jsm)
    with open(os.path.join(OUT, "index.json"), "w") as f:
        json.dump(index, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
