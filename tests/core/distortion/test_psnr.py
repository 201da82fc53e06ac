"""The one PSNR (embeval.distortion.measures.psnr): inf for identical images, bit-equal to scikit-image's,
pyiqa's documented difference (float32 + eps: 80 dB for identical images), and each caller's stated
convention for identical images (run outputs: null; IQA bench: capped at PSNR_CAP_DB; ROS node: inf)."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from embeval.distortion import distort
from embeval.distortion.measures import PSNR_CAP_DB, psnr
from embeval.errors import InvalidInputError


def _pairs(n=40, seed=0):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        h, w = rng.integers(8, 64, 2)
        a = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        b = np.clip(a.astype(int) + rng.integers(-30, 31, a.shape), 0, 255).astype(np.uint8)
        yield a, b


def test_psnr_formula_and_identical_images():
    a = np.zeros((4, 4, 3), np.uint8)
    b = a.copy()
    b[0, 0, 0] = 255  # MSE = 255^2 / 48
    assert psnr(a, b) == pytest.approx(10 * math.log10(48))
    assert psnr(a, a) == math.inf and psnr(b, b.copy()) == math.inf
    assert psnr(a.astype(np.float64) / 255, b.astype(np.float64) / 255, peak=1.0) == pytest.approx(10 * math.log10(48))
    with pytest.raises(InvalidInputError, match="same shape"):
        psnr(a, np.zeros((4, 5, 3), np.uint8))


def test_equals_skimage_bit_for_bit():
    from skimage.metrics import peak_signal_noise_ratio

    for a, b in _pairs():
        assert psnr(a, b) == peak_signal_noise_ratio(a, b, data_range=255)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # skimage divides by zero
        assert peak_signal_noise_ratio(a, a, data_range=255) == psnr(a, a) == math.inf


def test_pyiqa_differs_as_documented():
    pytest.importorskip("pyiqa")
    import torch
    from pyiqa.archs.psnr_arch import psnr as pyiqa_psnr

    def theirs(a, b):
        t = lambda x: torch.from_numpy(x).permute(2, 0, 1)[None].float() / 255.0
        return float(pyiqa_psnr(t(a), t(b)))

    diffs = [abs(theirs(a, b) - psnr(a, b)) for a, b in _pairs(20)]
    assert max(diffs) < 1e-3 and max(diffs) > 0  # float32 rounding: close, not equal
    a = next(_pairs(1))[0]
    assert theirs(a, a) == pytest.approx(80.0, abs=1e-3)  # eps = 1e-8 on the MSE: 10 log10(1 / 1e-8), not inf


def test_run_outputs_keep_null_for_identical_images():
    from embeval.runs.evaluators.distortion_quality import METRICS

    img = np.random.default_rng(1).integers(0, 256, (32, 48, 3), dtype=np.uint8)
    assert METRICS["psnr"](img, img.copy()) is None
    d = distort(img, "white_noise", 3, seed=0)
    assert METRICS["psnr"](img, d) == psnr(img, d)


def test_iqa_bench_caps_identical_images_at_the_documented_cap():
    pytest.importorskip("pyiqa")
    from embeval_analysis.iqa.metric_registry import zero_shot_record
    from embeval_analysis.iqa.metrics import zero_shot_scores

    assert zero_shot_record("psnr").cap == PSNR_CAP_DB == 60.0
    img = np.random.default_rng(2).integers(0, 256, (24, 32, 3), dtype=np.uint8)
    d = distort(img, "white_noise", 2, seed=0)
    v, missing, hib = zero_shot_scores([img, d], [img, img], names=("psnr",))
    assert not missing and hib["psnr"]
    assert v["psnr"][0] == PSNR_CAP_DB and abs(v["psnr"][1] - psnr(img, d)) < 1e-3
