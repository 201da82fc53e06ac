"""Luminance: brighten, darken, mean shift, overexposure with clipping."""
from __future__ import annotations

import functools

import cv2
import numpy as np

from embeval.distortion._util import apply_lut, lab8_to_rgb, linear_to_srgb, lut, per_color, rgb_to_lab8, srgb_to_linear, to_uint8
from embeval.distortion.registry import register


@functools.lru_cache(maxsize=64)
def _power_table(gamma: float) -> np.ndarray:
    return lut(lambda v: 255.0 * (v / 255.0) ** gamma)


def _lightness_curve(img: np.ndarray, gamma: float) -> np.ndarray:
    lab = rgb_to_lab8(img)
    lab[..., 0] = cv2.LUT(np.ascontiguousarray(lab[..., 0]), _power_table(gamma))
    return lab8_to_rgb(lab)


@register("brighten", "luminance", (1.1, 1.3, 1.6, 2.0, 2.6), param="gamma g; L* <- 100 (L*/100)^(1/g)",
          description="brighter tone curve on CIELAB lightness")
@per_color
def brighten(img, g, rng):
    """Brighten: lightness L* (CIELAB) mapped through a concave power curve, chroma kept."""
    return _lightness_curve(img, 1.0 / g)


@register("darken", "luminance", (1.1, 1.3, 1.6, 2.0, 2.6), param="gamma g; L* <- 100 (L*/100)^g",
          description="darker tone curve on CIELAB lightness")
@per_color
def darken(img, g, rng):
    """Darken: lightness L* (CIELAB) mapped through a convex power curve, chroma kept."""
    return _lightness_curve(img, g)


@functools.lru_cache(maxsize=64)
def _offset_table(offset: float) -> np.ndarray:
    return lut(lambda v: v + offset)


@register("mean_shift", "luminance", (6, 14, 24, 36, 50), param="offset added to every channel (digital numbers, 0..255)",
          description="constant intensity offset with clipping")
def mean_shift(img, offset, rng):
    """Add ``offset`` to all channels and clip to 0..255 (the mean rises by up to ``offset``)."""
    return apply_lut(img, _offset_table(offset))


@functools.lru_cache(maxsize=64)
def _exposure_table(gain: float) -> np.ndarray:
    return to_uint8(linear_to_srgb(srgb_to_linear(np.arange(256, dtype=np.float32) / 255.0) * gain))


@register("overexposure", "luminance", (1.25, 1.6, 2.2, 3.2, 5.0), param="exposure gain in linear light",
          description="overexposed sensor: linear gain, highlights clipped", kadid=False)
def overexposure(img, gain, rng):
    """Multiply linear-light intensities (sRGB decoded) by ``gain``; values above full scale clip to white."""
    return apply_lut(img, _exposure_table(gain))
