"""Chrominance: colour diffusion, colour shift, colour quantisation, saturation in HSV and in CIELAB."""
from __future__ import annotations

import functools

import cv2
import numpy as np
from PIL import Image

from embeval.distortion._util import lab8_to_rgb, lut, per_color, percentile, rgb_to_lab8, scratch
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
    g = cv2.extractChannel(img, 1, dst=scratch("cs_g", (h, w)))
    shifted = cv2.warpAffine(g, m, (w, h), dst=scratch("cs_shift", (h, w)), flags=cv2.INTER_LINEAR,
                             borderMode=cv2.BORDER_REFLECT_101)
    # edge weight: the Sobel sums of the 8-bit grey image are small integers, the same in int16 as in float32
    gray = cv2.cvtColor(img, cv2.COLOR_RGB2GRAY, dst=scratch("cs_gray", (h, w)))
    gx = cv2.Sobel(gray, cv2.CV_16S, 1, 0, dst=scratch("cs_gx16", (h, w), np.int16))
    gy = cv2.Sobel(gray, cv2.CV_16S, 0, 1, dst=scratch("cs_gy16", (h, w), np.int16))
    fx, fy = scratch("cs_fx", (h, w), np.float32), scratch("cs_fy", (h, w), np.float32)
    np.copyto(fx, gx)
    np.copyto(fy, gy)
    mag = cv2.magnitude(fx, fy, magnitude=scratch("cs_mag", (h, w), np.float32))
    mag = cv2.GaussianBlur(mag, (0, 0), 1.0 + amount / 4, dst=fx)
    wgt = np.divide(mag, max(float(percentile(mag, 99)), 1e-6), out=mag)  # float32, as mag / p99 was
    np.minimum(wgt, 1.0, out=wgt)  # clip(.., 0, 1): mag >= 0 already
    # g + wgt (shifted - g) + 0.5: the same float32 operations in place. With 0 <= wgt <= 1 the rounded sum
    # lies between g and shifted, so d is in [0.5, 255.5] and the former clip to [0, 255] changed no byte
    d = np.subtract(shifted, g, out=fy, dtype=np.float32)
    d *= wgt
    d += g
    d += np.float32(0.5)
    out = img.copy()
    np.copyto(out[..., 1], d, casting="unsafe")  # truncation, as astype(np.uint8)
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
    h, w = img.shape[:2]
    r, g, b, v = (scratch(f"hsv_{c}", (h, w)) for c in "rgbv")  # private buffers: no per-frame allocation
    cv2.split(img, [r, g, b])
    cv2.max(cv2.max(r, g, dst=v), b, dst=v)
    v3 = cv2.cvtColor(v, cv2.COLOR_GRAY2RGB, dst=scratch("hsv_v3", img.shape))
    return cv2.addWeighted(img, float(factor), v3, 1.0 - float(factor), 0.0)  # rounds, saturates


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
