#!/usr/bin/env python3
"""Video processor parity: for every clip in tests/fixtures/video/index.json (written by
tools/reference/make_video_fixtures.py from the reference: transformers 5.17.0 Qwen3VLVideoProcessor,
frames from torchvision 0.24.0's io.read_video over PyAV 18.1.0 / FFmpeg 8.1.2), build/tests/video_tool
(src/video on Debian's FFmpeg) gives the same video_grid_thw, sampled indices, fps, timestamp texts and
sha256 of pixel_values_videos (float32 LE), or the same error message where the reference raised one.
Each clip's bytes are checked against the recorded sha256 first. Every clip is compared.

KNOWN: clips whose grid, indices, fps and timestamps are equal but whose pixels are not (the RGB
conversion: Debian's swscale 6.7 vs PyAV's bundled swscale 9.5; docs/spec-corrections.md "Video",
src/video/rgb24.c). None now: the last two (4:2:0 of odd width on swscale's scaled path,
av1_10bit_35x27.mkv and vp9_65x47.webm) are converted by rgb24.c's own full-chroma path. For an entry
the test checks everything but the hash, and fails if the hash becomes equal (then the entry must go)."""
import hashlib
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIX = os.path.join(ROOT, "tests", "fixtures", "video")
BUILD = os.environ.get("CLEF_BUILD", os.path.join(ROOT, "build"))
TOOL = os.path.join(BUILD, "tests", "video_tool")


KNOWN = {}


def main():
    if not os.path.exists(TOOL):
        print(f"SKIP: {TOOL} not built")
        return 77
    index = json.load(open(os.path.join(FIX, "index.json")))
    clips = index["clips"]
    paths = [os.path.join(FIX, c["file"]) for c in clips]
    for c, p in zip(clips, paths):
        if hashlib.sha256(open(p, "rb").read()).hexdigest() != c["sha256"]:
            print(f"FAIL {c['file']}: bytes differ from the recorded sha256")
            return 1
    out = subprocess.run([TOOL] + paths, capture_output=True, text=True, check=True).stdout.splitlines()
    fails = 0
    for c, line in zip(clips, out):
        got = json.loads(line)
        if "error" in c:
            ok = "error" in got and got["message"] == c["message"]
            what = f"reference {c['error']}: {c['message']!r}; ours {got.get('error')}: {got.get('message')!r}"
        else:
            ok = ("error" not in got and got["grid_thw"] == c["grid_thw"] and got["indices"] == c["indices"]
                  and got["fps"] == c["fps"] and got["total_frames"] == c["total_frames"]
                  and got["timestamps"] == c["timestamps"]
                  and (got["pixel_values_sha256"] == c["pixel_values_sha256"]) != (c["file"] in KNOWN))
            what = f"reference {c['grid_thw']} {c['indices']} {c['pixel_values_sha256'][:12]}; ours {got}"
        if not ok:
            fails += 1
            print(f"FAIL {c['file']}: {what}")
    n = len(clips)
    print(f"video processor: {n - fails}/{n} clips as expected ({n - len(KNOWN)} bit-equal, {len(KNOWN)} known pixel divergences)")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
