"""Severity yardsticks for distorted images against their reference."""
from __future__ import annotations

import numpy as np


def psnr(ref: np.ndarray, img: np.ndarray, peak: float = 255.0) -> float:
    """Peak signal-to-noise ratio in dB over all pixels and channels (``inf`` for identical images)."""
    mse = float(np.mean((ref.astype(np.float64) - img.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10.0 * np.log10(peak * peak / mse)


def mean_abs_shift(ref: np.ndarray, img: np.ndarray) -> float:
    """|mean(img) - mean(ref)| in digital numbers: the severity of a mean (brightness) shift."""
    return abs(float(img.mean()) - float(ref.mean()))


def rms_contrast_loss(ref: np.ndarray, img: np.ndarray) -> float:
    """1 - std(img) / std(ref) over all pixels (grey-level RMS contrast): the severity of a contrast drop."""
    s = float(ref.astype(np.float64).std())
    return 0.0 if s == 0 else 1.0 - float(img.astype(np.float64).std()) / s
