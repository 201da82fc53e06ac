"""Severity yardsticks for distorted images against their reference."""
from __future__ import annotations

import numpy as np

from embeval.errors import InvalidInputError

#: The finite stand-in for an infinite PSNR (identical images) where a caller needs a number: the IQA
#: bench's zero-shot ``psnr`` record caps at it (rank statistics and gates need finite values).
PSNR_CAP_DB = 60.0


def psnr(ref: np.ndarray, img: np.ndarray, peak: float = 255.0) -> float:
    """Peak signal-to-noise ratio in dB, ``10 log10(peak^2 / MSE)``: the one PSNR of embeval.

    Conventions: MSE over all pixels and channels as they are (RGB, no colour conversion), in float64;
    ``peak`` is the data range (255 for uint8). Identical images give ``inf``, as the formula says;
    callers that need a finite number apply their documented convention themselves: :data:`PSNR_CAP_DB`
    (the IQA bench's record cap), or null in JSON (the ``distortion-quality`` evaluator).

    Equal bit for bit to ``skimage.metrics.peak_signal_noise_ratio(ref, img, data_range=peak)`` (which also
    gives inf for identical images). pyiqa's ``psnr`` differs: float32 in [0, 1] and ``eps = 1e-8`` added to
    the MSE, so identical images give 80 dB (not inf) and other values differ by float32 rounding (about
    1e-4 dB); no colour conversion there either (its ``psnry`` is the luma-only variant). The IQA bench's
    zero-shot ``psnr`` is pyiqa's (its published numbers), capped at :data:`PSNR_CAP_DB`.
    tests/core/distortion/test_psnr.py checks all three."""
    if ref.shape != img.shape:
        raise InvalidInputError(f"PSNR needs two images of the same shape, got {ref.shape} and {img.shape}; "
                                "resize the distorted image to the reference first")
    mse = float(np.mean((ref.astype(np.float64) - img.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10.0 * np.log10(peak * peak / mse)


def mean_abs_shift(ref: np.ndarray, img: np.ndarray) -> float:
    """|mean(img) - mean(ref)| in digital numbers: the severity of a mean (brightness) shift."""
    return abs(float(img.mean()) - float(ref.mean()))


def rms_contrast_loss(ref: np.ndarray, img: np.ndarray) -> float:
    """1 - std(img) / std(ref) over all pixels (grey-level RMS contrast): the severity of a contrast drop."""
    s = float(ref.astype(np.float64).std())
    return 0.0 if s == 0 else 1.0 - float(img.astype(np.float64).std()) / s
