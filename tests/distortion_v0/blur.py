"""Blur: Gaussian, lens (disc), motion, and camera defocus with chromatic aberration."""
from __future__ import annotations

import functools

import cv2
import numpy as np

from distortion_v0._util import disk_kernel, filter_rgb
from distortion_v0.registry import register


@register("gaussian_blur", "blur", (0.5, 1.0, 2.0, 3.0, 5.0), param="sigma (pixels)",
          description="Gaussian low-pass filter", )
def gaussian_blur(img, sigma, rng):
    """Gaussian blur with standard deviation ``sigma`` pixels (kernel +-3 sigma, reflect border)."""
    k = 2 * int(np.ceil(3 * sigma)) + 1
    return cv2.GaussianBlur(img, (k, k), sigmaX=sigma, sigmaY=sigma, borderType=cv2.BORDER_REFLECT_101)


@register("lens_blur", "blur", (1.0, 2.0, 4.0, 6.0, 8.0), param="disc radius (pixels)",
          description="circular (pillbox) lens blur")
def lens_blur(img, radius, rng):
    """Convolution with a uniform disc of ``radius`` pixels (KADID-10k's lens blur)."""
    return filter_rgb(img, disk_kernel(radius))


@functools.lru_cache(maxsize=256)
def _motion_kernel(length: int, angle_deg: int) -> np.ndarray:
    n = length if length % 2 else length + 1
    k = np.zeros((n * 4, n * 4), np.float32)
    c = (n * 4 - 1) / 2.0
    t = np.deg2rad(angle_deg)
    dx, dy = np.cos(t) * (length * 4 - 1) / 2.0, np.sin(t) * (length * 4 - 1) / 2.0
    sh = 4  # sub-pixel line drawing: coordinates scaled by 2**sh
    p0 = (int(round((c - dx) * 2 ** sh)), int(round((c - dy) * 2 ** sh)))
    p1 = (int(round((c + dx) * 2 ** sh)), int(round((c + dy) * 2 ** sh)))
    cv2.line(k, p0, p1, 1.0, thickness=4, lineType=cv2.LINE_AA, shift=sh)
    k = cv2.resize(k, (n, n), interpolation=cv2.INTER_AREA)
    return (k / k.sum()).astype(np.float32)


@register("motion_blur", "blur", (3, 5, 9, 13, 21), param="blur length (pixels); direction drawn from the seed",
          description="linear camera-motion blur", stochastic=True)
def motion_blur(img, length, rng):
    """Convolution with an anti-aliased line of ``length`` pixels at a seeded angle (whole degrees)."""
    angle = int(rng.integers(0, 180))
    return filter_rgb(img, _motion_kernel(int(length), angle))


@functools.lru_cache(maxsize=64)
def _bokeh_kernel(radius: float) -> np.ndarray:
    disc = disk_kernel(radius)
    n = disc.shape[0] // 2
    yy, xx = np.mgrid[-n:n + 1, -n:n + 1]
    rr = np.hypot(xx, yy)
    ring = np.clip(1.0 - np.abs(rr - radius * 0.85) / max(radius * 0.2, 0.75), 0, 1) * (disc > 0)
    k = 0.6 * disc / disc.sum() + 0.4 * ring / max(ring.sum(), 1e-9)
    return (k / k.sum()).astype(np.float32)


@register("defocus", "blur", (1.5, 2.5, 4.0, 6.0, 9.0), param="blur-circle radius of green (pixels)",
          description="out-of-focus camera: bright-rimmed bokeh PSF, axial chromatic aberration", kadid=False)
def defocus(img, radius, rng):
    """Out-of-focus optics: a disc PSF with a bright rim (spherical aberration), the red and blue
    channels blurred 15% more and less than green (axial chromatic aberration)."""
    out = np.empty_like(img)
    for c, scale in enumerate((1.15, 1.0, 0.85)):
        out[..., c] = cv2.filter2D(img[..., c], -1, _bokeh_kernel(round(radius * scale * 4) / 4),
                                   borderType=cv2.BORDER_REFLECT_101)
    return out
