"""Compression: JPEG, JPEG 2000, lost macro-blocks (packet loss) with interpolation concealment."""
from __future__ import annotations

import io

import numpy as np
from PIL import Image

from embeval.distortion.registry import register


def _roundtrip(img: np.ndarray, **save) -> np.ndarray:
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, **save)
    buf.seek(0)
    with Image.open(buf) as im:
        return np.asarray(im.convert("RGB")).copy()


@register("jpeg", "compression", (40, 20, 10, 6, 3), param="JPEG quality (Pillow/libjpeg scale 1..95)",
          description="JPEG compression (4:2:0 chroma subsampling)")
def jpeg(img, quality, rng):
    """Encode and decode with libjpeg (via Pillow) at ``quality``, 4:2:0 subsampling."""
    return _roundtrip(img, format="JPEG", quality=int(quality), subsampling=2)


@register("jpeg2000", "compression", (24, 48, 96, 160, 280), param="compression ratio (uncompressed : compressed)",
          description="JPEG 2000 compression (OpenJPEG via Pillow)")
def jpeg2000(img, ratio, rng):
    """Encode and decode with OpenJPEG (via Pillow) at a fixed compression ``ratio``, one quality layer."""
    return _roundtrip(img, format="JPEG2000", quality_mode="rates", quality_layers=[float(ratio)], irreversible=True)


MACROBLOCK = 16  # pixels, as in H.264/MPEG


@register("packet_loss", "compression", (0.01, 0.03, 0.06, 0.1, 0.16), param="fraction of 16x16 macro-blocks lost",
          description="lost macro-blocks of a video stream, concealed by interpolation", stochastic=True, kadid=False)
def packet_loss(img, fraction, rng):
    """Lose runs of 16x16 macro-blocks (raster order, mean run 4 blocks; about ``fraction`` of all
    blocks), concealed as a decoder does: each lost block is interpolated linearly, column by column,
    between the pixel row above and the row below it (block interpolation), blocks processed in raster order.

    At least one run is lost at every level; with one seed the lost set at a higher level contains
    the lower level's set."""
    h, w = img.shape[:2]
    by, bx = -(-h // MACROBLOCK), -(-w // MACROBLOCK)
    n = by * bx
    mean_run = 4.0
    u = rng.random(n)
    start = u < fraction / mean_run
    start[np.argmin(u)] = True  # at least one run is lost at every level (the first to go at any level)
    run = rng.geometric(1.0 / mean_run, n)
    lost = np.zeros(n + int(run.max(initial=1)) + 1, dtype=np.int32)
    idx = np.flatnonzero(start)
    np.add.at(lost, idx, 1)
    np.add.at(lost, idx + run[idx], -1)
    lost = np.cumsum(lost)[:n] > 0
    out = img.astype(np.float32)
    for b in np.flatnonzero(lost):
        y0, x0 = (b // bx) * MACROBLOCK, (b % bx) * MACROBLOCK
        y1, x1 = min(y0 + MACROBLOCK, h), min(x0 + MACROBLOCK, w)
        top = out[y0 - 1, x0:x1] if y0 > 0 else None
        below_ok = y1 < h and not lost[b + bx]  # the block below arrived (a lost one is not yet concealed)
        bot = img[y1, x0:x1].astype(np.float32) if below_ok else None
        if top is None and bot is None:
            out[y0:y1, x0:x1] = 128.0
            continue
        top = bot if top is None else top
        bot = top if bot is None else bot
        t = ((np.arange(y0, y1) - y0 + 1) / (y1 - y0 + 1)).astype(np.float32)[:, None, None]
        out[y0:y1, x0:x1] = (1 - t) * top[None] + t * bot[None]
    return np.clip(out + 0.5, 0, 255).astype(np.uint8)
