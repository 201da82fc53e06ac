"""Shared helpers for the distortion functions: conversions, kernels."""
from __future__ import annotations

import functools

import cv2
import numpy as np


def to_uint8(x: np.ndarray) -> np.ndarray:
    """float in [0, 1] -> uint8 with rounding and clipping."""
    return np.clip(x * 255.0 + 0.5, 0, 255).astype(np.uint8)


def clip_uint8(x: np.ndarray) -> np.ndarray:
    """float in [0, 255] -> uint8 with rounding and clipping."""
    return np.clip(x + 0.5, 0, 255).astype(np.uint8)


def rgb_to_lab8(img: np.ndarray) -> np.ndarray:
    """uint8 RGB -> OpenCV's 8-bit CIELAB (sRGB, D65): L* scaled by 255/100, a* and b* offset by 128.
    Fast (integer tables); an unchanged round trip is within about 50 dB PSNR of the input."""
    return cv2.cvtColor(img, cv2.COLOR_RGB2Lab)


def lab8_to_rgb(lab8: np.ndarray) -> np.ndarray:
    return cv2.cvtColor(lab8, cv2.COLOR_Lab2RGB)


def lut(f) -> np.ndarray:
    """A 256-entry uint8 lookup table of ``f`` evaluated on 0..255 (rounded, clipped)."""
    return np.clip(f(np.arange(256, dtype=np.float64)) + 0.5, 0, 255).astype(np.uint8)


def srgb_to_linear(x: np.ndarray) -> np.ndarray:
    return np.where(x <= 0.04045, x / 12.92, ((x + 0.055) / 1.055) ** 2.4).astype(np.float32)


def linear_to_srgb(x: np.ndarray) -> np.ndarray:
    x = np.clip(x, 0.0, 1.0)
    return np.where(x <= 0.0031308, 12.92 * x, 1.055 * np.power(x, 1 / 2.4) - 0.055).astype(np.float32)


@functools.lru_cache(maxsize=64)
def disk_kernel(radius: float) -> np.ndarray:
    """Normalised disc (pillbox) kernel of ``radius`` pixels, anti-aliased by 4x supersampling."""
    r = max(float(radius), 0.5)
    n = int(np.ceil(r))
    s = 4
    ax = (np.arange(-(n + 0.5) * s + 0.5, (n + 0.5) * s) / s).astype(np.float64)
    xx, yy = np.meshgrid(ax, ax)
    inside = (xx ** 2 + yy ** 2 <= r * r).astype(np.float64)
    k = inside.reshape(2 * n + 1, s, 2 * n + 1, s).mean(axis=(1, 3))
    k = k / k.sum()
    k.setflags(write=False)
    return k.astype(np.float32)


def filter_rgb(img: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    """Convolve each channel of uint8 RGB with ``kernel`` (reflect border); uint8 out."""
    return cv2.filter2D(img, -1, kernel, borderType=cv2.BORDER_REFLECT_101)


def block_grid(h: int, w: int, block: int) -> tuple[int, int]:
    """Number of (rows, cols) of ``block``-sized tiles that cover an h x w image."""
    return -(-h // block), -(-w // block)
