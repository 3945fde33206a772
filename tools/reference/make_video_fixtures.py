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

Run with the reference venv:  .venv-ref/bin/python tools/reference/make_video_fixtures.py
Needs models/tiny (`make tiny`). Encoders are deterministic at the settings used (threads=1).
"""
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
}


def make_clip(path, codec, container, w, h, n, rate, pix_fmt="yuv420p", pts=None, seed=0):
    out = av.open(path, "w", format=container)
    s = out.add_stream(codec, rate=rate, options=dict(CODEC_OPTS[codec]))
    s.width, s.height, s.pix_fmt = w, h, pix_fmt
    if codec == "libsvtav1":
        s.codec_context.options = dict(CODEC_OPTS[codec], **{"svtav1-params": "lp=1"})
    for i in range(n):
        f = av.VideoFrame.from_ndarray(frame(w, h, i, seed), format="rgb24")
        if pts is not None:
            f.pts = pts[i]
            f.time_base = fractions.Fraction(1, rate) if isinstance(rate, int) else 1 / rate
        for p in s.encode(f):
            out.mux(p)
    for p in s.encode():
        out.mux(p)
    out.close()


# (name, codec, container, w, h, frames, rate, pix_fmt, pts)
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
]


def err_rec(e):
    return {"error": type(e).__name__, "message": re.sub(r" at 0x[0-9a-f]+", "", str(e))[:300]}


def rows(pv):
    a = pv.numpy()
    return {"first": [float(x) for x in a[0, :4]], "last": [float(x) for x in a[-1, :4]]}


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
    for name, codec, cont, w, h, n, rate, pf, pts in CLIPS:
        path = os.path.join(OUT, name)
        make_clip(path, codec, cont, w, h, n, rate, pf, pts, seed=len(index["clips"]))
        data = open(path, "rb").read()
        rec = {"file": name, "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data), "codec": codec,
               "container": cont, "size": [w, h], "frames_encoded": n, "rate": str(rate), "pix_fmt": pf,
               "vfr": pts is not None}
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
    reqs = [
        ("one_video", {"videos": ["h264_64x48_10fps_15.mp4"]}),
        ("two_videos", {"videos": ["vp9_64x48_10fps_15.webm", "av1_128x64_10fps_15.mp4"]}),
        ("odd_frames", {"videos": ["vp9_5frames.mkv"]}),
        ("vfr", {"videos": ["h264_vfr.mkv"]}),
    ]
    for rname, extra in reqs:
        req = {"model": "clef-flash", "state": {"event": "clip", "n": 1},
               "questions": {"moving": {"type": "noul", "instructions": "Is something moving?"},
                             "color": {"type": "choice", "criteria": {"red": "mostly red", "green": "mostly green", "blue": "mostly blue"}}}}
        req.update(extra)
        ref_req = dict(req, videos=[os.path.join(OUT, v) for v in req["videos"]])
        r = {"name": rname, "request": req}
        try:
            enc = jsm.encode_record(processor.tokenizer, ref_req, processor=processor)
            r["input_ids"] = list(enc.input_ids)
            r["questions"] = [{"question_id": q.question_id, "question_span": list(q.question_span),
                               "option_spans": [list(s) for s in q.option_spans]} for q in enc.questions]
            r["video_grid_thw"] = enc.media["video_grid_thw"].tolist()
            with torch.no_grad():
                resp = jsm.systemone(model, processor, ref_req)
            r["response"] = resp
        except Exception as e:
            r.update(err_rec(e))
        index["requests"].append(r)
        print(rname, r.get("error", "ok"), file=sys.stderr)
    with open(os.path.join(OUT, "index.json"), "w") as f:
        json.dump(index, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
