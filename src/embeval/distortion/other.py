"""Sharpness and contrast: over-sharpening, contrast change."""
from __future__ import annotations

import cv2
import numpy as np

from embeval.distortion._util import apply_lut, clip_uint8, compiled
from embeval.distortion.registry import register


@register("high_sharpen", "other", (1.0, 2.0, 3.0, 6.0, 12.0), param="unsharp-mask amount",
          description="over-sharpening (unsharp mask, halos)")
def high_sharpen(img, amount, rng):
    """Unsharp mask: ``x + amount (x - G_1.5 * x)`` with a Gaussian of sigma 1.5 pixels; clip."""
    x = img.astype(np.float32)
    blur = cv2.GaussianBlur(x, (0, 0), 1.5, borderType=cv2.BORDER_REFLECT_101)
    return clip_uint8(x + np.float32(amount) * (x - blur))


@register("contrast_change", "other", (0.85, 0.7, 0.55, 0.4, 0.25), param="contrast factor about the mean grey level",
          description="contrast reduction")
def contrast_change(img, factor, rng):
    """``mean + factor (x - mean)`` per pixel with the image's mean grey level; RMS contrast falls with the level."""
    # grey level over all pixels and channels: float(np.mean(cv2.mean(img)[:3])) from the exact channel sums
    # (cv2.mean scales them by 1 / N, np.mean adds the 3 in order and divides by 3: the same bits, a third of the time)
    s = cv2.sumElems(img)
    r = 1.0 / (img.shape[0] * img.shape[1])
    m = ((s[0] * r + s[1] * r) + s[2] * r) / 3
    return apply_lut(img, _contrast_table(m, float(factor)))


def _contrast_table(m: float, factor: float) -> np.ndarray:
    """np.clip(m + factor * (levels - m) + 0.5, 0, 255).astype(uint8): compiled when numba is there
    (the same float64 operations in the same order), numpy otherwise."""
    table = compiled("contrast_table", (0.0, 1.0, np.empty(256, np.uint8)))
    if table is not None:
        return table(m, factor, np.empty(256, np.uint8))
    t = _LEVELS - m  # the same operations in place
    t *= factor
    t += m
    t += 0.5
    np.minimum(np.maximum(t, 0.0, out=t), 255.0, out=t)  # = np.clip for numbers, a little cheaper
    return t.astype(np.uint8)




_LEVELS = np.arange(256, dtype=np.float64)  # exact, as the integer levels were
