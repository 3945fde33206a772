#!/usr/bin/env python3
"""Write the corpus test images into tests/corpus/images/ (numpy + Pillow, deterministic content).

    .venv-ref/bin/python tests/corpus/make_images.py

The pixel content depends only on numpy's PCG64 stream for the seed below; the encoded bytes also
depend on the Pillow/libpng/libjpeg/libwebp versions, so the committed files are the reference
(the requests embed them) and this script is only needed to make new ones.
Sizes and modes cover: RGB, RGBA, palette (P), grayscale (L), gray+alpha (LA), baseline and
progressive JPEG (4:2:0 and 4:4:4), lossless WebP, an image smaller than 256x256 (upscaled by
min_pixels), a very wide and a very tall one, odd sizes, and a large one (> 256 image tokens).
"""
import os

import numpy as np
from PIL import Image

SEED = 20261129
HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "images")


def pattern(w, h, seed):
    """Smooth gradients (compress well) + an 8px checkerboard band + a disc + a small noise patch."""
    rng = np.random.default_rng([SEED, seed])
    y, x = np.mgrid[0:h, 0:w]
    r = (x * 255 // max(w - 1, 1)).astype(np.int32)
    g = (y * 255 // max(h - 1, 1)).astype(np.int32)
    b = ((x + 2 * y) * 3 % 256).astype(np.int32)
    img = np.stack([r, g, b], axis=-1)
    band = (y >= h // 3) & (y < h // 3 + max(h // 6, 4))
    checker = (((x // 8) + (y // 8)) % 2).astype(bool)
    img[band & checker] = [250, 245, 10]
    img[band & ~checker] = [5, 20, 60]
    cx, cy, rad = int(w * 0.7), int(h * 0.6), max(min(w, h) // 5, 3)
    disc = (x - cx) ** 2 + (y - cy) ** 2 <= rad * rad
    img[disc] = rng.integers(0, 256, size=3)
    ph, pw = min(24, h), min(24, w)
    oy, ox = int(rng.integers(0, h - ph + 1)), int(rng.integers(0, w - pw + 1))
    img[oy:oy + ph, ox:ox + pw] = rng.integers(0, 256, size=(ph, pw, 3))
    return img.astype(np.uint8)


def main():
    os.makedirs(OUT, exist_ok=True)
    made = []

    def save(name, im, **kw):
        path = os.path.join(OUT, name)
        im.save(path, **kw)
        made.append((name, im.mode, im.size, os.path.getsize(path)))

    save("rgb_640x480.png", Image.fromarray(pattern(640, 480, 1)), optimize=False, compress_level=9)
    save("small_100x80.png", Image.fromarray(pattern(100, 80, 2)), compress_level=9)
    save("wide_1200x60.png", Image.fromarray(pattern(1200, 60, 3)), compress_level=9)
    rgba = np.dstack([pattern(300, 200, 4), (np.mgrid[0:200, 0:300][1] * 255 // 299).astype(np.uint8)])
    save("rgba_300x200.png", Image.fromarray(rgba, "RGBA"), compress_level=9)
    pal = Image.fromarray(pattern(256, 256, 5)).quantize(colors=16, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    save("palette_256x256.png", pal, compress_level=9)
    save("photo_400x300.jpg", Image.fromarray(pattern(400, 300, 6)), quality=90, subsampling=2)
    save("prog_333x500.jpg", Image.fromarray(pattern(333, 500, 7)), quality=85, progressive=True, subsampling=2)
    save("gray_200x150.png", Image.fromarray(pattern(200, 150, 8)[:, :, 1], "L"), compress_level=9)
    save("tall_48x900.png", Image.fromarray(pattern(48, 900, 9)), compress_level=9)
    save("odd_257x259.jpg", Image.fromarray(pattern(257, 259, 10)), quality=95, subsampling=0)
    save("lossless_320x240.webp", Image.fromarray(pattern(320, 240, 11)), lossless=True, quality=100, method=4)
    la = np.dstack([pattern(64, 64, 12)[:, :, 0], np.full((64, 64), 200, np.uint8)])
    save("gray_alpha_64x64.png", Image.fromarray(la, "LA"), compress_level=9)
    for name, mode, size, nbytes in made:
        print(f"{name:28s} {mode:5s} {size[0]}x{size[1]}  {nbytes} bytes")


if __name__ == "__main__":
    main()
