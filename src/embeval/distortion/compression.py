"""Compression: JPEG, JPEG 2000, lost macro-blocks (packet loss) with interpolation concealment."""
from __future__ import annotations

import io

import cv2
import numpy as np
from PIL import Image

from embeval.distortion._util import scratch
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
    """Encode and decode with libjpeg at ``quality`` (libjpeg's scale, as Pillow's), 4:2:0 subsampling,
    baseline, no optimised Huffman tables. Runs through OpenCV's libjpeg-turbo, which writes the same
    bytes as Pillow's ``save(format="JPEG", quality=q, subsampling=2)`` (tests compare) in about half
    the time."""
    params = [cv2.IMWRITE_JPEG_QUALITY, int(quality), cv2.IMWRITE_JPEG_SAMPLING_FACTOR, cv2.IMWRITE_JPEG_SAMPLING_FACTOR_420]
    bgr = cv2.cvtColor(img, cv2.COLOR_RGB2BGR, dst=scratch("jpeg_bgr", img.shape))  # private buffer, no page faults
    ok, enc = cv2.imencode(".jpg", bgr, params)
    if not ok:  # pragma: no cover - OpenCV without a JPEG codec: Pillow gives the same bytes
        return _roundtrip(img, format="JPEG", quality=int(quality), subsampling=2)
    if _IMREAD_RGB is not None:
        return cv2.imdecode(enc, _IMREAD_RGB)
    return cv2.cvtColor(cv2.imdecode(enc, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)  # pragma: no cover - OpenCV < 4.10


_IMREAD_RGB = getattr(cv2, "IMREAD_COLOR_RGB", None)


@register("jpeg2000", "compression", (24, 48, 96, 160, 280), param="compression ratio (uncompressed : compressed)",
          description="JPEG 2000 compression (OpenJPEG via Pillow)")
def jpeg2000(img, ratio, rng):
    """Encode and decode with OpenJPEG (via Pillow) at a fixed compression ``ratio``, one quality layer.

    The codestream is Pillow's; it is decoded by OpenCV's OpenJPEG (the same pixels as Pillow's decoder,
    tests compare; 5 ms instead of 7.5 ms at 640x480). Pillow's encoder (~76 ms at 640x480, OpenJPEG's
    code-block coding and rate allocation) is the floor: see docs/distortion.md, Speed."""
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="JPEG2000", quality_mode="rates", quality_layers=[float(ratio)], irreversible=True)
    if _IMREAD_RGB is not None:
        out = cv2.imdecode(np.frombuffer(buf.getbuffer(), np.uint8), _IMREAD_RGB)
        if out is not None and out.shape == img.shape and out.dtype == np.uint8:
            return out
    buf.seek(0)  # pragma: no cover - OpenCV without a JPEG 2000 decoder
    with Image.open(buf) as im:
        return np.asarray(im.convert("RGB")).copy()


MACROBLOCK = 16  # pixels, as in H.264/MPEG


#: what an H.264/MPEG decoder shows for a macro-block it never received and does not conceal:
#: Y = Cb = Cr = 0, i.e. RGB (0, 135, 0) after full-range BT.601 conversion
UNDECODED_RGB = (0.0, 135.0, 0.0)


@register("packet_loss", "compression", (0.01, 0.03, 0.06, 0.1, 0.16), param="fraction of 16x16 macro-blocks lost",
          description="lost macro-blocks of a video stream: green undecoded blocks and interpolated concealment",
          stochastic=True, kadid=False)
def packet_loss(img, fraction, rng):
    """Lose runs of 16x16 macro-blocks (raster order, mean run 4 blocks; about ``fraction`` of all
    blocks). Half of the runs (drawn from the seed; always the first) stay undecoded and show the
    decoder's green block (Y = Cb = Cr = 0); the others are concealed as a decoder does, by block
    interpolation: each block is interpolated linearly, column by column, between the pixel row above
    and the row below it (blocks processed in raster order; a lost neighbour below is not used).

    At least one run is lost at every level; with one seed the lost runs at a higher level include
    the lower level's."""
    h, w = img.shape[:2]
    by, bx = -(-h // MACROBLOCK), -(-w // MACROBLOCK)
    n = by * bx
    mean_run = 4.0
    u = rng.random(n)
    run = rng.geometric(1.0 / mean_run, n)
    undecoded_run = rng.random(n) < 0.5
    first = int(np.argmin(u))
    undecoded_run[first] = True
    start = u < fraction / mean_run
    start[first] = True  # at least one run is lost at every level (the first to go at any level)
    lost = np.zeros(n, dtype=bool)
    undecoded = np.zeros(n, dtype=bool)
    for b in np.flatnonzero(start):
        lost[b:b + run[b]] = True
        undecoded[b:b + run[b]] |= undecoded_run[b]  # overlapping runs: undecoded wins (severity only grows)
    out = img.astype(np.float32)
    for b in np.flatnonzero(lost):
        y0, x0 = (b // bx) * MACROBLOCK, (b % bx) * MACROBLOCK
        y1, x1 = min(y0 + MACROBLOCK, h), min(x0 + MACROBLOCK, w)
        if undecoded[b]:
            out[y0:y1, x0:x1] = UNDECODED_RGB
            continue
        top = out[y0 - 1, x0:x1] if y0 > 0 else None
        below_ok = y1 < h and not lost[b + bx] if b + bx < n else False  # the block below arrived
        bot = img[y1, x0:x1].astype(np.float32) if below_ok else None
        if top is None and bot is None:
            out[y0:y1, x0:x1] = 128.0
            continue
        top = bot if top is None else top
        bot = top if bot is None else bot
        t = ((np.arange(y0, y1) - y0 + 1) / (y1 - y0 + 1)).astype(np.float32)[:, None, None]
        out[y0:y1, x0:x1] = (1 - t) * top[None] + t * bot[None]
    return np.clip(out + 0.5, 0, 255).astype(np.uint8)
