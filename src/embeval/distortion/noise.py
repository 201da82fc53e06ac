"""Noise: white, in a colour component, impulse, multiplicative, denoised, sensor banding.

With a fixed seed the random pattern is the same at every level and only scaled (or, for
impulse noise, a superset), so the error grows with the level pixel by pixel.
"""
from __future__ import annotations

import cv2
import numpy as np

from embeval.distortion._fastnormal import apply_noise, normal_f32
from embeval.distortion._util import add_uint8, clip_uint8
from embeval.distortion.registry import register


def _gauss(rng: np.random.Generator, shape) -> np.ndarray:
    """``rng.standard_normal(shape, dtype=np.float32)`` (the same numbers, through the compiled ziggurat)."""
    return normal_f32(rng, shape)


@register("white_noise", "noise", (5.0, 9.0, 14.0, 20.0, 28.0), param="noise sigma (digital numbers, 0..255)",
          description="additive white Gaussian noise, independent per channel", stochastic=True)
def white_noise(img, sigma, rng):
    """Add i.i.d. Gaussian noise of standard deviation ``sigma`` to every channel; clip."""
    return apply_noise(img, sigma, rng)  # drawn and added in one pass (same float32 operations as before)


# BT.601 full-range YCbCr -> RGB rows for Cb and Cr (chroma noise enters through these)
_CB_CR_TO_RGB = np.array([[0.0, -0.344136, 1.772], [1.402, -0.714136, 0.0]], np.float32)


@register("color_noise", "noise", (4.0, 8.0, 13.0, 19.0, 27.0), param="noise sigma in Cb and Cr (digital numbers)",
          description="white noise in the colour components (YCbCr chroma)", stochastic=True)
def color_noise(img, sigma, rng):
    """Add Gaussian noise of ``sigma`` to the Cb and Cr components (BT.601), luma kept."""
    n = _gauss(rng, img.shape[:2] + (2,))
    n *= np.float32(sigma)
    return add_uint8(img, n @ _CB_CR_TO_RGB)


@register("impulse_noise", "noise", (0.005, 0.015, 0.03, 0.06, 0.1), param="fraction of pixels hit",
          description="salt-and-pepper noise", stochastic=True)
def impulse_noise(img, density, rng):
    """Set a ``density`` fraction of pixels (all channels) to black or white, 50/50."""
    u = rng.random(img.shape[:2], dtype=np.float32)
    salt = rng.random(img.shape[:2], dtype=np.float32) < 0.5
    out = img.copy()
    hit = u < density
    out[hit & salt] = 255
    out[hit & ~salt] = 0
    return out


@register("multiplicative_noise", "noise", (0.06, 0.1, 0.15, 0.22, 0.32), param="relative noise sigma",
          description="speckle: noise proportional to intensity", stochastic=True)
def multiplicative_noise(img, sigma, rng):
    """``x (1 + sigma n)`` with ``n`` standard Gaussian per pixel and channel; clip."""
    return apply_noise(img, sigma, rng, multiplicative=True)  # drawn and applied in one pass (same float32 operations as before)


@register("denoise", "noise", (8.0, 14.0, 20.0, 28.0, 40.0), param="sigma of the noise before denoising (digital numbers)",
          description="noise then edge-preserving denoising (smeared texture)", stochastic=True)
def denoise(img, sigma, rng):
    """Add Gaussian noise of ``sigma``, then denoise with a bilateral filter tuned to it
    (range sigma 2 sigma, spatial sigma 1 + sigma / 10, window at most 9x9): the ISP-style smeared texture."""
    n = _gauss(rng, img.shape)
    n *= np.float32(sigma)
    noisy = add_uint8(img, n)
    s = 1.0 + sigma / 10.0
    return cv2.bilateralFilter(noisy, d=min(2 * int(np.ceil(2 * s)) + 1, 9), sigmaColor=2.0 * sigma, sigmaSpace=s)


@register("sensor_banding", "noise", (2.0, 4.0, 7.0, 11.0, 16.0), param="row-offset sigma (digital numbers)",
          description="fixed-pattern row banding of a CMOS readout", stochastic=True, kadid=False)
def sensor_banding(img, sigma, rng):
    """Row-wise readout offsets: per-row Gaussian offsets (shared by the channels, 20% per-channel
    part) plus a horizontal sinusoidal band of amplitude ``sigma`` and seeded period; clip."""
    h = img.shape[0]
    rows = _gauss(rng, (h, 1, 1)) + 0.2 * _gauss(rng, (h, 1, 3))
    period = rng.uniform(h / 12, h / 4)
    phase = rng.uniform(0, 2 * np.pi)
    band = np.sin(2 * np.pi * np.arange(h, dtype=np.float32) / period + phase).reshape(h, 1, 1)
    return clip_uint8(img + np.float32(sigma) * (rows + band.astype(np.float32)))
