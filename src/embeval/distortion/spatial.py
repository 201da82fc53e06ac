"""Spatial: jitter, non-eccentricity patches, pixelation, intensity quantisation, colour blocks,
rolling-shutter skew and wobble."""
from __future__ import annotations

import functools

import cv2
import numpy as np

from embeval.distortion._util import apply_lut
from embeval.distortion.registry import register


def _grid(h: int, w: int) -> tuple[np.ndarray, np.ndarray]:
    return np.meshgrid(np.arange(w, dtype=np.float32), np.arange(h, dtype=np.float32))


@register("jitter", "spatial", (1.0, 1.5, 2.5, 4.0, 6.0), param="maximum pixel displacement (pixels)",
          description="random per-pixel displacement", stochastic=True)
def jitter(img, amount, rng):
    """Move each pixel by a displacement drawn uniformly in [-amount, amount] on each axis
    (nearest-neighbour sampling, reflect border)."""
    h, w = img.shape[:2]
    xx, yy = _grid(h, w)
    d = rng.uniform(-1.0, 1.0, (2, h, w)).astype(np.float32) * np.float32(amount)
    return cv2.remap(img, xx + d[0], yy + d[1], interpolation=cv2.INTER_NEAREST, borderMode=cv2.BORDER_REFLECT_101)


_PATCH = 16  # pixels


@register("non_eccentricity_patch", "spatial", (0.002, 0.004, 0.007, 0.011, 0.016),
          param="patch density: 16x16 patches per 16 pixels of image area (0.004 -> 77 patches at 640x480)",
          description="patches replaced by nearby patches", stochastic=True)
def non_eccentricity_patch(img, density, rng):
    """Replace ``density * H * W / 16`` random 16x16 patches with the patch displaced by a random offset of
    8..24 pixels (patch positions drawn once per seed: a higher level's patches include the lower's).
    Images under 64 pixels on a side use proportionally smaller patches and offsets."""
    h, w = img.shape[:2]
    size = max(2, min(_PATCH, h // 4, w // 4))
    n_max = int(round(0.016 * h * w / _PATCH))
    n = max(1, int(round(density * h * w / _PATCH)))
    n_max = max(n, n_max)
    ys = rng.integers(0, h - size + 1, n_max)
    xs = rng.integers(0, w - size + 1, n_max)
    lo, hi = max(1, size // 2), max(2, 3 * size // 2 + 1)
    off = rng.integers(lo, hi, (n_max, 2)) * rng.choice((-1, 1), (n_max, 2))
    out = img.copy()
    for y, x, (dy, dx) in zip(ys[:n], xs[:n], off[:n]):
        sy = int(np.clip(y + dy, 0, h - size))
        sx = int(np.clip(x + dx, 0, w - size))
        out[y:y + size, x:x + size] = img[sy:sy + size, sx:sx + size]
    return out


@register("pixelate", "spatial", (2, 3, 5, 8, 12), param="block size (pixels)",
          description="mosaic: area-averaged blocks, nearest upsampling")
def pixelate(img, block, rng):
    """Downsample by ``block`` with area averaging, upsample back with nearest neighbour."""
    h, w = img.shape[:2]
    sh = max(1, round(h / block))
    small = cv2.resize(img, (max(1, round(w / block)), sh), interpolation=cv2.INTER_AREA)
    # cv2.resize(small, (w, h), INTER_NEAREST) in two steps, the same bytes in a quarter of the time: OpenCV
    # widens the rows, then whole rows are copied by OpenCV's nearest row map (tests compare)
    wide = cv2.resize(small, (w, sh), interpolation=cv2.INTER_NEAREST)
    return wide[_nearest_rows(h, sh)]


@functools.lru_cache(maxsize=64)
def _nearest_rows(h: int, sh: int) -> np.ndarray:
    """OpenCV's INTER_NEAREST source row for each of ``h`` output rows from ``sh`` rows:
    min(floor(y * (1 / (h / sh))), sh - 1), in its double arithmetic."""
    rows = np.minimum(np.floor(np.arange(h) * (1.0 / (h / sh))).astype(np.intp), sh - 1)
    rows.setflags(write=False)
    return rows


@register("quantization", "spatial", (20, 14, 10, 7, 4), param="intensity levels per channel",
          description="per-channel intensity quantisation (posterisation)")
def quantization(img, levels, rng):
    """Quantise each channel uniformly to ``levels`` levels (bin centres)."""
    return apply_lut(img, _level_table(levels))


@functools.lru_cache(maxsize=64)
def _level_table(levels: int) -> np.ndarray:
    step = 256.0 / levels
    return np.clip(np.floor(np.arange(256) / step) * step + step / 2, 0, 255).round().astype(np.uint8)


@register("color_block", "spatial", (2, 4, 7, 11, 16), param="number of blocks (32x32 at 640x480, side scaled with sqrt(area))",
          description="random solid-colour blocks", stochastic=True)
def color_block(img, count, rng):
    """Paint ``count`` random square blocks in random solid colours; the side is 32 pixels at 640x480
    and scales with the square root of the image area (drawn once per seed: a higher level's blocks
    include the lower's)."""
    h, w = img.shape[:2]
    size = max(2, min(int(round(32 * np.sqrt(h * w / (640 * 480)))), h // 2, w // 2))
    n_max, n = 16, int(count)
    ys = rng.integers(0, h - size + 1, n_max)
    xs = rng.integers(0, w - size + 1, n_max)
    cols = rng.integers(0, 256, (n_max, 3), dtype=np.uint8)
    out = img.copy()
    for y, x, c in zip(ys[:n], xs[:n], cols[:n]):
        out[y:y + size, x:x + size] = c
    return out


@register("rolling_shutter", "spatial", (3.0, 6.0, 12.0, 20.0, 32.0), param="horizontal skew over the frame height (pixels)",
          description="rolling-shutter skew and wobble during camera motion", stochastic=True, kadid=False)
def rolling_shutter(img, skew, rng):
    """Rows read out one after another while the camera moves: row ``y`` is shifted horizontally by
    ``skew * y / H`` plus a wobble of amplitude ``skew / 4`` with a seeded period and phase
    (bilinear sampling, reflect border). The sign of the motion comes from the seed."""
    h, w = img.shape[:2]
    sign = rng.choice((-1.0, 1.0))
    period = rng.uniform(h / 3, h)
    phase = rng.uniform(0, 2 * np.pi)
    y = np.arange(h, dtype=np.float32)
    shift = sign * skew * (y / h - 0.5) + skew / 4 * np.sin(2 * np.pi * y / period + phase)
    xx, yy = _grid(h, w)
    return cv2.remap(img, xx + shift[:, None].astype(np.float32), yy, interpolation=cv2.INTER_LINEAR,
                     borderMode=cv2.BORDER_REFLECT_101)
