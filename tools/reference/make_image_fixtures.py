#!/usr/bin/env python3
"""Writes tests/fixtures/images/: deterministic test images (PNG, JPEG, WebP, GIF in many modes and
sizes, a few corrupt files) and index.json recording, for each, what the reference image processor
(transformers 5.17.0 Qwen2VLImageProcessor, torchvision backend, clef-flash's processor settings)
produces when the image arrives as a request string (a data: URL, or bare base64), exactly as
systemone() passes it: grid_thw and the sha256 of pixel_values as float32 little-endian bytes, or the
error it raises. Also the fixed-tile arms (load_image, PIL BICUBIC resize to 256x256 / 448x448, then
the processor) and a few min_pixels/max_pixels runs. For an entry the processor turns into several
images (an animated GIF's frames) also what systemone() answers for a request carrying it, on the tiny
checkpoint (needs models/tiny: `make tiny`), and (index "requests") what it answers for requests with
several images where one is an animated GIF (first or later; with a bad state, an over-long schema or
literal <|image_pad|> tokens in the state).

Run with the reference venv:  .venv-ref/bin/python tools/reference/make_image_fixtures.py
Deterministic: same images and index on every run (numpy default_rng seeds, Pillow encoders).
"""
import base64
import hashlib
import io
import json
import os
import re
import struct
import sys
import tempfile
import zlib

import numpy as np
import PIL
import torch
import torchvision
import transformers
from PIL import Image
from transformers import AutoImageProcessor
from transformers.image_utils import load_image

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fixtures", "images")

PROCESSOR_CONFIG = {  # clef-flash processor_config.json, image_processor part (model.md §2.4)
    "do_convert_rgb": True, "do_normalize": True, "do_rescale": True, "do_resize": True,
    "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
    "image_processor_type": "Qwen2VLImageProcessorFast", "merge_size": 2, "patch_size": 16,
    "resample": 3, "rescale_factor": 0.00392156862745098,
    "size": {"longest_edge": 16777216, "shortest_edge": 65536}, "temporal_patch_size": 2,
}


def content(w, h, seed, noise=6, kind="smooth"):
    """Smooth gradients and a few shapes plus a little noise (small files, but every resampler
    weight matters)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    fx, fy = (xx + 0.5) / w, (yy + 0.5) / h
    r = 255 * fx
    g = 255 * fy
    b = 127.5 + 127.5 * np.sin(2 * np.pi * (fx * (1 + seed % 3) + fy * (2 + seed % 2)))
    img = np.stack([r, g, b], -1)
    # a few hard-edged rectangles (ringing for the bicubic)
    for _ in range(3):
        x0, y0 = int(rng.integers(0, w)), int(rng.integers(0, h))
        x1, y1 = min(w, x0 + int(rng.integers(1, max(2, w // 3 + 1)))), min(h, y0 + int(rng.integers(1, max(2, h // 3 + 1))))
        img[y0:y1, x0:x1] = rng.integers(0, 256, 3)
    if kind == "noise":
        img = rng.integers(0, 256, (h, w, 3)).astype(np.float64)
    elif noise:
        img = img + rng.normal(0, noise, img.shape)
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def png_bytes(im, **kw):
    b = io.BytesIO()
    im.save(b, "PNG", **kw)
    return b.getvalue()


def enc(im, fmt, **kw):
    b = io.BytesIO()
    im.save(b, fmt, **kw)
    return b.getvalue()


def png_chunk(t, data):
    return struct.pack(">I", len(data)) + t + data + struct.pack(">I", zlib.crc32(t + data) & 0xFFFFFFFF)


def png_raw(w, h, color_type, depth, rows_fn, interlace=False, extra_chunks=(), plte=None, trns=None, up=False):
    """A minimal PNG writer (Pillow cannot write Adam7, gAMA or 16-bit RGB): rows_fn(y, xs) gives the raw
    bytes of the pixels at x in xs of row y. up: PNG filter 2 (Up) on every row but the first (not with
    interlace), for smaller files of smooth 16-bit content."""
    out = [b"\x89PNG\r\n\x1a\n", png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, color_type, 0, 0, 1 if interlace else 0))]
    for c in extra_chunks:
        out.append(c)
    if plte is not None:
        out.append(png_chunk(b"PLTE", plte))
    if trns is not None:
        out.append(png_chunk(b"tRNS", trns))
    raw = bytearray()
    passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)] if interlace else [(0, 0, 1, 1)]
    for x0, y0, dx, dy in passes:
        xs = list(range(x0, w, dx))
        if not xs:
            continue
        prev = None
        for y in range(y0, h, dy):
            row = rows_fn(y, xs)
            if up and prev is not None and not interlace:
                raw += b"\x02" + bytes((a - b) & 255 for a, b in zip(row, prev))
            else:
                raw += b"\x00" + row
            prev = row
    out.append(png_chunk(b"IDAT", zlib.compress(bytes(raw), 9)))
    out.append(png_chunk(b"IEND", b""))
    return b"".join(out)


def exif_with_orientation(o):
    ex = Image.Exif()
    ex[0x0112] = o
    return ex.tobytes()


def wide(w, h, ch, seed, kind):
    """16-bit samples (big-endian, [h, w, ch]): noise over the full range, smooth full-range gradients,
    or hard 0/65535 blocks (the bicubic overshoots past both ends there)."""
    rng = np.random.default_rng(seed)
    if kind == "noise":
        a = rng.integers(0, 65536, (h, w, ch))
    elif kind == "edges":
        a = np.where(((np.arange(w)[None, :] // 3 + np.arange(h)[:, None] // 2) % 2)[:, :, None] == 1, 65535, 0)
        a = np.broadcast_to(a, (h, w, ch)).copy()
        a[::5, ::7] = rng.integers(0, 65536, a[::5, ::7].shape)
    else:
        yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
        base = [65535 * (xx + 0.5) / w, 65535 * (yy + 0.5) / h, 32767.5 + 32767.5 * np.sin(2 * np.pi * xx / w)]
        a = np.stack([base[c % 3] for c in range(ch)], -1)
        a[h // 3: h // 2, w // 4: w // 3] = 65535 - a[h // 3: h // 2, w // 4: w // 3]
        a = np.clip(np.rint(a), 0, 65535)
    return a.astype(">u2")


def gif_lzw(indices, bits):
    """GIF LZW data that never grows the code table: a clear code before the table would widen (valid
    for any decoder; size does not matter here)."""
    clear, end = 1 << bits, (1 << bits) + 1
    width, out, acc, nacc = bits + 1, bytearray(), 0, 0
    codes, run = [clear], 0
    for v in indices:
        codes.append(int(v))
        run += 1
        if run == (1 << bits) - 2:
            codes.append(clear)
            run = 0
    codes.append(end)
    for c in codes:
        acc |= c << nacc
        nacc += width
        while nacc >= 8:
            out.append(acc & 255)
            acc >>= 8
            nacc -= 8
    if nacc:
        out.append(acc & 255)
    blocks = bytearray([bits])
    for i in range(0, len(out), 255):
        blocks += bytes([len(out[i:i + 255])]) + out[i:i + 255]
    return bytes(blocks + b"\x00")


def gif_frames_raw():
    """A 6-frame GIF covering torchvision's canvas rules: frames smaller than the screen at offsets,
    disposal 1 (drawn over the previous frame), 2 and 3 (both restart from the background colour
    there), a frame without a control block, transparent indices, a local colour table with an
    interlaced frame, and two control blocks before one frame (giflib uses the first)."""
    rng = np.random.default_rng(90)
    W, H = 40, 30
    gct = bytes(rng.integers(0, 256, 16 * 3, dtype=np.uint8))
    out = bytearray(b"GIF89a" + struct.pack("<HH", W, H) + bytes([0xF3, 5, 0]) + gct)

    def gce(disposal, trans=None):
        flags = (disposal << 2) | (1 if trans is not None else 0)
        return b"\x21\xF9\x04" + bytes([flags, 10, 0, trans or 0]) + b"\x00"

    def frame(x, y, w, h, bits=4, lct=None, interlace=False, seed=0):
        idx = np.random.default_rng(seed).integers(0, 1 << bits, (h, w))
        rows = list(range(h))
        if interlace:
            rows = list(range(0, h, 8)) + list(range(4, h, 8)) + list(range(2, h, 4)) + list(range(1, h, 2))
        flags = (0x40 if interlace else 0) | ((0x80 | (bits - 1)) if lct is not None else 0)
        d = b"\x2C" + struct.pack("<HHHH", x, y, w, h) + bytes([flags]) + (lct or b"")
        return d + gif_lzw(idx[rows].reshape(-1), max(bits, 2))

    out += gce(0) + frame(0, 0, W, H, seed=1)
    out += gce(1, trans=2) + frame(5, 7, 20, 10, seed=2)
    out += gce(2, trans=3) + frame(30, 20, 10, 10, seed=3)
    out += frame(3, 3, 12, 12, seed=4)                      # no control block
    lct = bytes(rng.integers(0, 256, 8 * 3, dtype=np.uint8))
    out += gce(3) + frame(8, 2, 17, 19, bits=3, lct=lct, interlace=True, seed=5)
    out += gce(1, trans=0) + gce(2) + frame(0, 10, 25, 20, seed=6)
    out += b"\x3B"
    return bytes(out)


def build_images():
    """(name, bytes, entry_form) in a fixed order."""
    items = []

    def add(name, data, form="data_url"):
        items.append((name, data, form))

    # PNG RGB: small and odd sizes (noise content: every pixel matters), upscaling ones
    for i, (w, h) in enumerate([(1, 1), (1, 2), (2, 1), (3, 3), (5, 9), (10, 10), (16, 16), (17, 23), (31, 33), (32, 32),
                                (33, 31), (48, 64), (63, 65), (100, 37), (127, 129), (150, 200), (200, 150), (255, 257),
                                (257, 259), (256, 256)]):
        kind = "noise" if w * h <= 4096 else "smooth"
        add(f"png_rgb_{w}x{h}.png", png_bytes(Image.fromarray(content(w, h, i, kind=kind, noise=6 if w * h < 40000 else 1.5))))
    # rounding and aspect-ratio cases
    for i, (w, h) in enumerate([(400, 560), (560, 400), (224, 224), (300, 200), (16, 500), (500, 16), (90, 2000),
                                (1000, 250), (333, 777), (640, 480), (1, 200), (200, 1), (1, 201), (2, 401), (3, 600),
                                (10, 2000), (10, 2001), (25, 5000), (24, 5000), (5000, 25), (600, 3), (17, 3401),
                                (1, 199)]):
        # light noise on the big ones keeps the files small; the smooth content still exercises every weight
        add(f"png_rgb_{w}x{h}.png", png_bytes(Image.fromarray(content(w, h, 100 + i, noise=3 if w * h < 40000 else 0.6)),
                                            optimize=True))
    # PNG modes
    base = content(97, 61, 7, noise=4)
    im = Image.fromarray(base)
    a = np.random.default_rng(8).integers(0, 256, (61, 97), dtype=np.uint8)
    rgba = Image.fromarray(np.dstack([base, a]), "RGBA")
    add("png_rgba.png", png_bytes(rgba))
    add("png_la.png", png_bytes(rgba.convert("LA")))
    add("png_l.png", png_bytes(im.convert("L")))
    add("png_p.png", png_bytes(im.quantize(64)))
    pt = im.quantize(32)
    pt.info["transparency"] = 3
    add("png_p_trns.png", png_bytes(pt, transparency=3))
    add("png_p_16colors.png", png_bytes(im.quantize(16), bits=4))
    add("png_1bit.png", png_bytes(im.convert("1")))
    g = np.asarray(im.convert("L"))
    add("png_grey2.png", png_raw(97, 61, 0, 2, lambda y, xs: bytes(np.packbits(np.unpackbits(np.array([g[y, x] >> 6 for x in xs], np.uint8)[:, None], axis=1)[:, 6:].reshape(-1)).tobytes())))
    add("png_grey4.png", png_raw(97, 61, 0, 4, lambda y, xs: bytes(np.packbits(np.unpackbits(np.array([g[y, x] >> 4 for x in xs], np.uint8)[:, None], axis=1)[:, 4:].reshape(-1)).tobytes())))
    w16 = (base.astype(np.uint16) * 257 + np.random.default_rng(9).integers(0, 257, base.shape)).astype(">u2")
    add("png_rgb16.png", png_raw(97, 61, 2, 16, lambda y, xs: w16[y, xs].tobytes()))
    a16 = (a.astype(np.uint16) * 257).astype(">u2")
    add("png_rgba16.png", png_raw(97, 61, 6, 16, lambda y, xs: np.dstack([w16, a16])[y, xs].tobytes()))
    gl = (np.asarray(im.convert("L")).astype(np.uint16) * 3).astype(">u2")  # values 0..765: I;16 clamps
    add("png_grey16.png", png_raw(97, 61, 0, 16, lambda y, xs: gl[y, xs].tobytes()))
    add("png_la16.png", png_raw(97, 61, 4, 16, lambda y, xs: np.dstack([w16[:, :, 0], a16])[y, xs].tobytes()))
    add("png_interlaced_rgb.png", png_raw(97, 61, 2, 8, lambda y, xs: base[y, xs].tobytes(), interlace=True))
    add("png_interlaced_rgba.png", png_raw(45, 38, 6, 8, lambda y, xs: np.dstack([base, a])[y, xs].tobytes(), interlace=True))
    add("png_interlaced_p4.png", png_raw(23, 11, 3, 4, lambda y, xs: np.packbits(np.unpackbits(np.array([(x * 7 + y) % 16 for x in xs], np.uint8)[:, None], axis=1)[:, 4:].reshape(-1)).tobytes(),
                                         interlace=True, plte=bytes(np.random.default_rng(3).integers(0, 256, 48, dtype=np.uint8))))
    add("png_gamma_srgb.png", png_raw(97, 61, 2, 8, lambda y, xs: base[y, xs].tobytes(),
                                      extra_chunks=[png_chunk(b"gAMA", struct.pack(">I", 100000)), png_chunk(b"sRGB", b"\x00")]))
    add("png_exif_rot6.png", png_bytes(im, exif=exif_with_orientation(6)))
    from PIL import PngImagePlugin
    xmp = ('<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">'
           '<rdf:Description xmlns:tiff="http://ns.adobe.com/tiff/1.0/" tiff:Orientation="8"/></rdf:RDF></x:xmpmeta>')
    pi = PngImagePlugin.PngInfo()
    pi.add_itxt("XML:com.adobe.xmp", xmp)
    add("png_xmp_rot8.png", png_bytes(Image.fromarray(content(50, 30, 12, noise=3)), pnginfo=pi))
    add("png_short_palette.png", png_raw(20, 10, 3, 8, lambda y, xs: bytes([(x + y) % 12 for x in xs]), plte=bytes(range(24))))
    add("png_base64_bare.png", png_bytes(Image.fromarray(content(70, 50, 11))), "base64")
    # JPEG
    for name, w, h, kw in [("jpeg_420_640x480.jpg", 640, 480, dict(quality=85, subsampling=2)),
                           ("jpeg_444_333x222.jpg", 333, 222, dict(quality=90, subsampling=0)),
                           ("jpeg_422_201x99.jpg", 201, 99, dict(quality=80, subsampling=1)),
                           ("jpeg_420_odd_33x17.jpg", 33, 17, dict(quality=75, subsampling=2)),
                           ("jpeg_progressive_500x375.jpg", 500, 375, dict(quality=80, progressive=True)),
                           ("jpeg_1920x1080.jpg", 1920, 1080, dict(quality=70)),
                           ("jpeg_1080x1920.jpg", 1080, 1920, dict(quality=70)),
                           ("jpeg_5000x300.jpg", 5000, 300, dict(quality=70)),
                           ("jpeg_300x5000.jpg", 300, 5000, dict(quality=70)),
                           ("jpeg_4500x3800.jpg", 4500, 3800, dict(quality=25)),
                           ("jpeg_1x1.jpg", 1, 1, dict(quality=90)),
                           ("jpeg_7x5.jpg", 7, 5, dict(quality=90))]:
        add(name, enc(Image.fromarray(content(w, h, hash(name) % 1000 if False else len(name) + w, noise=2)), "JPEG", **kw))
    jb = Image.fromarray(content(120, 80, 21, noise=4))
    add("jpeg_grey.jpg", enc(jb.convert("L"), "JPEG", quality=85))
    add("jpeg_cmyk.jpg", enc(jb.convert("CMYK"), "JPEG", quality=90))
    for o in range(1, 9):
        add(f"jpeg_exif_orient{o}.jpg", enc(Image.fromarray(content(72, 40, 30 + o, noise=3)), "JPEG", quality=88, exif=exif_with_orientation(o)))
    add("jpeg_xmp_rot6.jpg", enc(Image.fromarray(content(56, 24, 39, noise=3)), "JPEG", quality=88, xmp=xmp.replace('"8"', '"6"').encode()))
    add("jpeg_base64_bare.jpg", enc(jb, "JPEG", quality=80), "base64")
    # WebP
    wb = Image.fromarray(content(211, 133, 41, noise=4))
    add("webp_lossy.webp", enc(wb, "WEBP", quality=80))
    add("webp_lossless.webp", enc(wb, "WEBP", lossless=True))
    wa = np.random.default_rng(42).integers(0, 256, (133, 211), dtype=np.uint8)
    add("webp_lossy_alpha.webp", enc(Image.fromarray(np.dstack([np.asarray(wb), wa]), "RGBA"), "WEBP", quality=80))
    add("webp_lossless_alpha.webp", enc(Image.fromarray(np.dstack([np.asarray(wb), wa]), "RGBA"), "WEBP", lossless=True))
    add("webp_odd_31x17.webp", enc(Image.fromarray(content(31, 17, 43)), "WEBP", quality=70))
    add("webp_exif_rot8.webp", enc(wb, "WEBP", quality=80, exif=exif_with_orientation(8)))
    fr = [Image.fromarray(content(64, 48, 50 + k, noise=2)) for k in range(3)]
    add("webp_animated.webp", enc(fr[0], "WEBP", save_all=True, append_images=fr[1:], duration=100, quality=80))
    # GIF
    gb = Image.fromarray(content(150, 100, 61, noise=4))
    add("gif_p.gif", enc(gb.quantize(256), "GIF"))
    add("gif_small_8x8.gif", enc(Image.fromarray(content(8, 8, 62, kind="noise")).quantize(64), "GIF"))
    add("gif_transparent.gif", enc(gb.quantize(64), "GIF", transparency=5))
    gf = [Image.fromarray(content(80, 60, 63 + k, noise=2)).quantize(128) for k in range(3)]
    add("gif_animated.gif", enc(gf[0], "GIF", save_all=True, append_images=gf[1:], duration=100))
    add("gif_grey.gif", enc(gb.convert("L"), "GIF"))
    # 16-bit PNGs at the native grid: torchvision keeps uint16 and the processor resizes in float32
    for name, w, h, ct, kind in [("png16_rgb_45x37.png", 45, 37, 2, "noise"), ("png16_rgba_61x29.png", 61, 29, 6, "noise"),
                                 ("png16_grey_33x65.png", 33, 65, 0, "noise"), ("png16_la_50x50.png", 50, 50, 4, "noise"),
                                 ("png16_rgb_edges_40x24.png", 40, 24, 2, "edges"),
                                 ("png16_grey_256x256.png", 256, 256, 0, "smooth"),  # no resize
                                 ("png16_rgb_300x256.png", 300, 256, 2, "smooth"),   # horizontal pass only
                                 ("png16_rgb_256x300.png", 256, 300, 2, "smooth"),   # vertical pass only
                                 ("png16_grey_1200x300.png", 1200, 300, 0, "smooth")]:
        px = wide(w, h, 4 if ct == 6 else 2 if ct == 4 else 1 if ct == 0 else 3, 200 + w + h, kind)
        add(name, png_raw(w, h, ct, 16, lambda y, xs, px=px: px[y, xs].tobytes(), up=kind == "smooth"))
    px = wide(37, 23, 3, 301, "noise")
    add("png16_rgb_interlaced_37x23.png", png_raw(37, 23, 2, 16, lambda y, xs: px[y, xs].tobytes(), interlace=True))
    px2 = wide(30, 20, 3, 302, "noise")
    add("png16_rgb_trns_30x20.png", png_raw(30, 20, 2, 16, lambda y, xs: px2[y, xs].tobytes(),
                                            trns=bytes(px2[0, 0].astype(">u2").tobytes())))
    # animated GIFs at the native grid: one processor image per frame (torchvision's canvas rules)
    add("gif_anim_dispose.gif", gif_frames_raw())
    pf = [Image.fromarray(content(50, 40, 80 + k, noise=2)).quantize(64) for k in range(2)]
    add("gif_anim_pillow_2.gif", enc(pf[0], "GIF", save_all=True, append_images=pf[1:], duration=80, disposal=2,
                                     transparency=3, optimize=False))
    # errors the reference raises
    good = png_bytes(Image.fromarray(content(64, 64, 70)))
    add("bad_truncated.png", good[: len(good) // 2])
    gj = enc(Image.fromarray(content(64, 64, 71)), "JPEG", quality=90)
    add("bad_truncated.jpg", gj[: len(gj) // 2])
    add("bad_random.bin", bytes(np.random.default_rng(72).integers(0, 256, 300, dtype=np.uint8)))
    add("bad_text.txt", b"this is not an image\n")
    return items


def err_rec(e):
    """The reference's error by class and message (object addresses removed: the file is deterministic)."""
    return {"error": type(e).__name__, "message": re.sub(r" at 0x[0-9a-f]+", "", str(e))[:300]}


def result(proc, images, **kw):
    try:
        out = proc(images=images, return_tensors="pt", **kw)
    except Exception as e:  # the reference's error, recorded by class and message
        return err_rec(e)
    pv = out["pixel_values"]
    assert pv.dtype == torch.float32
    grids = out["image_grid_thw"].tolist()
    r = {"grid_thw": grids[0], "shape": list(pv.shape),
         "pixel_values_sha256": hashlib.sha256(pv.contiguous().numpy().astype("<f4").tobytes()).hexdigest()}
    if len(grids) > 1:  # several processor images from one entry (an animated GIF's frames)
        r["image_grid_thw"] = grids
    return r


_tiny = []


def tiny():
    """(joint_schema_model, model, processor) of the tiny checkpoint (models/tiny, `make tiny`), loaded once."""
    if not _tiny:
        import joint_schema_model as jsm
        model, processor = jsm.load_release_model(os.path.join(ROOT, "models", "tiny"), dtype=torch.float32,
                                                  device="cpu")
        _tiny.extend([jsm, model, processor])
    return _tiny


def request_outcome(entry, request=None):
    """What systemone() does with a request carrying this one entry (or with `request`), on the tiny checkpoint:
    its response's usage, or its error by class and message."""
    jsm, model, processor = tiny()
    req = request or {"model": "clef-flash", "state": "x", "images": [entry], "questions": {"q": {"type": "noul"}}}
    try:
        return {"usage": jsm.systemone(model, processor, req)["usage"]}
    except Exception as e:
        return err_rec(e)


# Requests with several images where one entry is an animated GIF (several processor images): what
# systemone() does with them depends on the GIF's position and on the checks encode_record makes before the
# model forward. (name, image files in order, request fields besides images). The files' entries are built as
# for the images above (data URL or bare base64, per the file's record).
DIGITS = "7" * 16300  # Qwen's split: one token per digit; with the rest of the prompt over max_length 16384


def request_cases():
    q = {"q": {"type": "noul"}}
    base = {"model": "clef-flash", "state": "x", "questions": q}
    long_q = {"q": {"type": "noul", "instructions": DIGITS}}
    pads = "<|image_pad|>"
    return [
        ("gif_alone", ["gif_animated.gif"], base),
        ("gif_first_still", ["gif_animated.gif", "png_rgb_224x224.png"], base),
        ("gif_first_two_stills", ["gif_anim_pillow_2.gif", "png_l.png", "png_rgb_224x224.png"], base),
        ("gif_first_gif", ["gif_animated.gif", "gif_anim_pillow_2.gif"], base),
        ("gif_first_png16", ["gif_animated.gif", "png16_rgb_45x37.png"], base),
        ("gif_first_single_frame_gif", ["gif_anim_dispose.gif", "gif_p.gif"], base),
        ("gif_first_media_kwargs", ["gif_animated.gif", "png_rgb_48x64.png"],
         dict(base, media_kwargs={"min_pixels": 1024, "max_pixels": 4096})),
        ("still_then_gif", ["png_rgb_224x224.png", "gif_animated.gif"], base),
        ("two_stills_then_gif", ["png_rgb_48x64.png", "png_l.png", "gif_anim_dispose.gif"], base),
        ("gif_then_gif_later", ["png_rgb_48x64.png", "gif_animated.gif", "gif_anim_pillow_2.gif"], base),
        ("gif_first_then_bad", ["gif_animated.gif", "bad_truncated.png"], base),
        ("still_gif_then_bad", ["png_rgb_48x64.png", "gif_animated.gif", "bad_truncated.png"], base),
        ("still_gif_then_aspect", ["png_rgb_48x64.png", "gif_animated.gif", "png_rgb_1x201.png"], base),
        # the processor decodes every entry before it resizes any: a later entry's decoder failure comes first
        ("aspect_then_bad", ["png_rgb_1x201.png", "bad_truncated.png"], base),
        ("still_aspect_then_bad", ["png_rgb_48x64.png", "png_rgb_1x201.png", "png_rgb_224x224.png",
                                   "bad_truncated.png"], base),
        ("bad_then_aspect", ["bad_truncated.png", "png_rgb_1x201.png"], base),
        ("aspect_then_good", ["png_rgb_1x201.png", "png_rgb_48x64.png"], base),
        ("gif_first_animated_webp", ["gif_animated.gif", "webp_animated.webp"], base),
        ("gif_alone_state_surrogate", ["gif_animated.gif"], dict(base, state="a\ud800")),
        ("gif_first_state_surrogate", ["gif_animated.gif", "png_rgb_224x224.png"], dict(base, state="a\ud800")),
        ("still_gif_state_surrogate", ["png_rgb_224x224.png", "gif_animated.gif"], dict(base, state="a\ud800")),
        ("gif_alone_schema_too_long", ["gif_animated.gif"], dict(base, questions=long_q)),
        ("gif_first_schema_too_long", ["gif_anim_pillow_2.gif", "png_l.png", "png_rgb_224x224.png"],
         dict(base, questions=long_q)),
        ("still_gif_schema_too_long", ["png_rgb_224x224.png", "gif_animated.gif"], dict(base, questions=long_q)),
        ("gif_first_pads_short", ["gif_animated.gif", "png_rgb_48x64.png"], dict(base, state=pads * 10)),
        ("gif_alone_pads_balanced", ["gif_animated.gif"], dict(base, state=pads * 140)),
        ("gif_first_pads_balanced", ["gif_animated.gif", "png_rgb_224x224.png"], dict(base, state=pads * 262)),
        ("still_gif_pads", ["png_rgb_224x224.png", "gif_animated.gif"], dict(base, state=pads * 70)),
    ]


def multi_request_outcome(images, fields):
    """systemone() on the tiny checkpoint for a request with these entries: its response's usage or its error,
    and, when encode_record returned, what its prompt holds (length, <|image_pad|> count) and the processor's
    image_grid_thw."""
    jsm, model, _ = tiny()
    seen = []
    orig = jsm.encode_record

    def wrapped(*a, **k):
        rec = orig(*a, **k)
        seen.append(rec)
        return rec
    jsm.encode_record = wrapped
    try:
        outcome = request_outcome(None, request=dict(fields, images=images))
    finally:
        jsm.encode_record = orig
    if seen:
        ids = list(seen[0].input_ids)
        outcome["encoded"] = {"input_tokens": len(ids),
                              "image_pads": ids.count(model.language_model.config.image_token_id),
                              "image_grid_thw": seen[0].media["image_grid_thw"].tolist()}
    return outcome


def tile_result(proc, entry, tile):
    try:
        im = load_image(entry).resize((tile, tile), Image.BICUBIC)
    except Exception as e:
        return err_rec(e)
    return result(proc, [im])


def main():
    torch.set_num_threads(1)
    os.makedirs(OUT, exist_ok=True)
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "preprocessor_config.json"), "w") as f:
            json.dump(PROCESSOR_CONFIG, f)
        proc = AutoImageProcessor.from_pretrained(d)
    mro = [c.__name__ for c in type(proc).__mro__][:4]
    assert mro[0] == "Qwen2VLImageProcessor" and mro[1] == "TorchvisionBackend", mro
    index = {
        "what": "Reference image processor outputs for the images in this folder, each sent as a request string "
                "(entry: data_url = 'data:image/<ext>;base64,...', base64 = bare base64). native: the processor on "
                "the string; g256/g448: transformers load_image, PIL BICUBIC resize to the tile, then the processor; "
                "kwargs runs pass min_pixels/max_pixels to the processor call. sha256 over pixel_values as float32 LE. "
                "grid_thw is image_grid_thw[0]; when the processor made several images of one entry (an animated "
                "GIF's frames) image_grid_thw lists them all and request records what systemone() does with a "
                "request carrying that entry (tiny checkpoint).",
        "generator": "tools/reference/make_image_fixtures.py",
        "versions": {"python": sys.version.split()[0], "transformers": transformers.__version__, "torch": torch.__version__,
                     "torchvision": torchvision.__version__, "pillow": PIL.__version__, "numpy": np.__version__},
        "processor_class": mro[0], "processor_mro": mro, "processor_config": PROCESSOR_CONFIG,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "images": [],
        "requests_what": "requests: systemone() on the tiny checkpoint for requests with several images (one of "
                         "them an animated GIF, or entries that fail at different steps). images: the files of this folder in order, each sent as its record's entry; "
                         "request: the other fields; outcome: usage or error (class, message), and encoded (input "
                         "length, <|image_pad|> count, the processor's image_grid_thw) when encode_record returned.",
        "requests": [],
    }
    mime = {"png": "png", "jpg": "jpeg", "webp": "webp", "gif": "gif", "bin": "png", "txt": "png"}
    kw_runs = {"png_rgb_640x480.png": [(4096, 65536), (65536, 262144)], "jpeg_1920x1080.jpg": [(1024, 200704)],
               "png16_rgb_45x37.png": [(100000, 16777216)], "png16_rgba_61x29.png": [(1024, 4096)],
               "png16_grey_1200x300.png": [(4096, 16384), (16384, 65536)],
               "png_rgb_10x10.png": [(100000, 16777216)]}
    entries = {}
    for name, data, form in build_images():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
        b64 = base64.b64encode(data).decode()
        entry = f"data:image/{mime[name.rsplit('.', 1)[1]]};base64,{b64}" if form == "data_url" else b64
        rec = {"file": name, "entry": form, "bytes": len(data), "file_sha256": hashlib.sha256(data).hexdigest(),
               "native": result(proc, [entry])}
        if "image_grid_thw" in rec["native"]:
            rec["native"]["request"] = request_outcome(entry)
        for t in (256, 448):
            rec[f"g{t}"] = tile_result(proc, entry, t)
        if name in kw_runs:
            rec["kwargs"] = [dict(min_pixels=a, max_pixels=b, **result(proc, [entry], min_pixels=a, max_pixels=b))
                             for a, b in kw_runs[name]]
        index["images"].append(rec)
        entries[name] = entry
        print(name, rec["native"].get("grid_thw", rec["native"].get("error")), flush=True)
    for name, files, fields in request_cases():
        out = multi_request_outcome([entries[f] for f in files], fields)
        index["requests"].append({"name": name, "images": files, "request": fields, "outcome": out})
        print(name, out.get("error", "ok"), out.get("message", out.get("usage")), flush=True)
    with open(os.path.join(OUT, "index.json"), "w") as f:
        json.dump(index, f, indent=1, sort_keys=False)
        f.write("\n")
    total = sum(r["bytes"] for r in index["images"])
    print(f"{len(index['images'])} images, {total} bytes")


if __name__ == "__main__":
    main()
