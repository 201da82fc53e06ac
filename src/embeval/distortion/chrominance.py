"""Chrominance: colour diffusion, colour shift, colour quantisation, saturation in HSV and in CIELAB."""
from __future__ import annotations

import functools

import cv2
import numpy as np
from PIL import Image

from embeval.distortion._util import lab8_to_rgb, lut, per_color, rgb_to_lab8
from embeval.distortion.registry import register


@register("color_diffusion", "chrominance", (1.0, 3.0, 6.0, 8.0, 12.0), param="Gaussian sigma on a*, b* (pixels)",
          description="colour bleeding: chroma blurred, lightness kept")
def color_diffusion(img, sigma, rng):
    """Gaussian blur of the CIELAB a* and b* channels with ``sigma`` pixels; L* untouched."""
    lab = rgb_to_lab8(img)
    k = 2 * int(np.ceil(3 * sigma)) + 1
    lab[..., 1:] = cv2.GaussianBlur(np.ascontiguousarray(lab[..., 1:]), (k, k), sigma, borderType=cv2.BORDER_REFLECT_101)
    return lab8_to_rgb(lab)


@register("color_shift", "chrominance", (1.0, 3.0, 6.0, 8.0, 12.0), param="green-channel displacement (pixels); direction from the seed",
          description="colour fringes: green misregistered at edges", stochastic=True)
def color_shift(img, amount, rng):
    """Translate the green channel by ``amount`` pixels in a seeded direction, blended in where the
    image has edges (weight = gradient magnitude normalised by its 99th percentile)."""
    t = rng.uniform(0, 2 * np.pi)
    h, w = img.shape[:2]
    m = np.float32([[1, 0, amount * np.cos(t)], [0, 1, amount * np.sin(t)]])
    g = img[..., 1]
    shifted = cv2.warpAffine(g, m, (w, h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT_101).astype(np.float32)
    gray = cv2.cvtColor(img, cv2.COLOR_RGB2GRAY).astype(np.float32)
    mag = cv2.magnitude(cv2.Sobel(gray, cv2.CV_32F, 1, 0), cv2.Sobel(gray, cv2.CV_32F, 0, 1))
    mag = cv2.GaussianBlur(mag, (0, 0), 1.0 + amount / 4)
    wgt = np.clip(mag / max(float(np.percentile(mag, 99)), 1e-6), 0, 1)
    out = img.copy()
    out[..., 1] = np.clip(g + wgt * (shifted - g) + 0.5, 0, 255).astype(np.uint8)
    return out


@register("color_quantization", "chrominance", (64, 40, 24, 12, 6), param="palette size (colours)",
          description="palette reduction (median cut, no dithering)")
def color_quantization(img, colors, rng):
    """Reduce to ``colors`` colours: a median-cut palette (Pillow) built on a 4x area-downsampled copy
    (for speed), every pixel mapped to its nearest palette colour, no dithering."""
    h, w = img.shape[:2]
    small = cv2.resize(img, (max(1, w // 4), max(1, h // 4)), interpolation=cv2.INTER_AREA)
    pal = Image.fromarray(small).quantize(colors=int(colors), method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    q = Image.fromarray(img).quantize(palette=pal, dither=Image.Dither.NONE)
    return np.asarray(q.convert("RGB"))


@register("color_saturation_hsv", "chrominance", (0.8, 0.6, 0.4, 0.2, 0.0), param="factor on HSV saturation",
          description="desaturation in HSV")
def color_saturation_hsv(img, factor, rng):
    """Multiply HSV saturation by ``factor`` (0 = grey); hue and value kept. Computed without the HSV
    round trip: with V = max(R, G, B), scaling S by f while keeping H and V is ``c <- V + f (c - V)``."""
    r, g, b = cv2.split(img)
    v = cv2.max(cv2.max(r, g), b)
    return cv2.addWeighted(img, float(factor), cv2.cvtColor(v, cv2.COLOR_GRAY2RGB), 1.0 - float(factor), 0.0)  # rounds, saturates


@register("color_saturation_lab", "chrominance", (1.3, 1.7, 2.3, 3.2, 4.5), param="factor on CIELAB a*, b*",
          description="over-saturation in CIELAB")
@per_color
def color_saturation_lab(img, factor, rng):
    """Multiply the CIELAB chroma channels a*, b* by ``factor``; out-of-gamut colours clip."""
    lab = rgb_to_lab8(img)
    lab[..., 1:] = cv2.LUT(np.ascontiguousarray(lab[..., 1:]), _chroma_table(factor))
    return lab8_to_rgb(lab)


@functools.lru_cache(maxsize=64)
def _chroma_table(factor: float) -> np.ndarray:
    return lut(lambda v: 128.0 + factor * (v - 128.0))
