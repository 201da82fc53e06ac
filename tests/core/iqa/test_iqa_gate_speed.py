"""The faster no-reference gate features give today's predictions.

The previous implementation is kept here as the reference: BRISQUE NSS through pyiqa's own
``natural_scene_statistics`` (2 scales) and the per-pixel float64 colour moments. The NSS must match
bit for bit, the colour moments and grey statistics to 1e-12, and a fitted nr-fusion gate's predictions on distorted
640x480 frames to 1e-6."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from embeval.distortion import distort, list_distortions
from embeval.distortion.samples import photo, synthetic_tabletop
from embeval.iqa import features
from embeval.iqa.predictor import FeatureSVRPredictor


def _old_nss(images):
    from pyiqa.archs.brisque_arch import natural_scene_statistics
    from pyiqa.matlab_utils import imresize
    from pyiqa.utils.color_util import to_y_channel

    out = []
    with torch.no_grad():
        for im in images:
            y = to_y_channel(torch.from_numpy(im[None].astype(np.float32)).permute(0, 3, 1, 2) / 255.0, 255.0)
            f = []
            for _ in range(2):
                f.append(natural_scene_statistics(y, 7, 7 / 6).reshape(1, -1))
                y = imresize(y, scale=0.5, antialiasing=True)
            out.append(torch.cat(f, dim=-1).double().numpy()[0])
    return np.nan_to_num(np.array(out), nan=0.0, posinf=0.0, neginf=0.0)


def _old_colour(images):
    out = []
    for im in images:
        x = im.reshape(-1, 3).astype(np.float64) / 255.0
        mx, mn = x.max(1), x.min(1)
        sat = np.where(mx > 0, (mx - mn) / np.maximum(mx, 1e-9), 0.0)
        out.append(np.concatenate([x.mean(0), x.std(0), [sat.mean()]]))
    return np.stack(out)


def _old_stats(images):
    import cv2

    out = []
    for im in images:
        g = cv2.cvtColor(im, cv2.COLOR_RGB2GRAY)
        hsv = cv2.cvtColor(im, cv2.COLOR_RGB2HSV)
        hist = np.histogram(g, bins=8, range=(0, 256))[0] / g.size
        pct = np.percentile(im.reshape(-1, 3), [5, 50, 95], axis=0).ravel() / 255.0
        out.append(np.r_[np.log1p(cv2.Laplacian(g.astype(np.float32), cv2.CV_32F).var()), hsv[..., 0].mean() / 180.0,
                         hsv[..., 1].std() / 255.0, hist, pct])
    return np.asarray(out, dtype=np.float64)


def _frames(n, w, h):
    types = list_distortions()
    return [distort(synthetic_tabletop(w, h, seed=i), types[i % 30], 1 + i % 5, seed=i) for i in range(n)]


@pytest.fixture(scope="module")
def frames():
    warnings.filterwarnings("ignore")
    rng = np.random.default_rng(0)
    return _frames(16, 128, 96) + [photo("coffee", (97, 61)), rng.integers(0, 256, (40, 56, 3), dtype=np.uint8)]


def test_nss_bit_identical_to_pyiqa(frames):
    new = features.nss_features(frames)
    assert np.array_equal(new, _old_nss(frames))
    assert np.array_equal(features.nss_features(frames[:7]), new[:7])  # batched as per image


def test_colour_moments_match_previous(frames):
    new, old = features.colour_features(frames), _old_colour(frames)
    assert np.abs(new - old).max() <= 1e-12
    assert np.array_equal(new[:, 6], old[:, 6])  # saturation: same values, same summation order


def test_grey_statistics_match_previous(frames):
    tiny = [np.full((1, 1, 3), 200, np.uint8), np.random.default_rng(2).integers(0, 256, (3, 5, 3), dtype=np.uint8)]
    new, old = features.stats_features(frames + tiny), _old_stats(frames + tiny)
    assert np.abs(new - old).max() <= 1e-12


def test_gate_predictions_within_1e6_of_previous(frames, monkeypatch):
    train = _frames(30, 128, 96)
    X_old = np.concatenate([_old_nss(train), _old_colour(train), _old_stats(train), features.signal_features(train)], 1)
    y = np.random.default_rng(1).random(len(train)) * 5
    svr = FeatureSVRPredictor(input_size=[96, 128]).fit_features(X_old, y)
    big = _frames(4, 640, 480)
    new = svr.predict(big)
    monkeypatch.setattr(features, "nss_features", _old_nss)
    monkeypatch.setattr(features, "colour_features", _old_colour)
    monkeypatch.setattr(features, "stats_features", _old_stats)
    old = svr.predict(big)
    assert np.abs(new - old).max() <= 1e-6
    assert np.ptp(old) > 0.01  # the frames do get different scores


def test_zero_shot_scores_per_image_and_batched_paths_agree():
    """SSIM runs one image per call (faster in pyiqa), the others in batches: both give pyiqa's own
    per-image values."""
    import pyiqa
    from embeval_analysis.iqa.metrics import BATCH_SIZE, _tensor, zero_shot_scores

    assert BATCH_SIZE["ssim"] == 1
    refs = [synthetic_tabletop(64, 48, seed=i) for i in range(6)]
    dist = [distort(r, "jpeg", 1 + i % 5, seed=i) for i, r in enumerate(refs)]
    vals, missing, _ = zero_shot_scores(dist, refs, ["ssim", "gmsd"])
    assert not missing
    with torch.no_grad():
        for name in ("ssim", "gmsd"):
            m = pyiqa.create_metric(name, device="cpu", as_loss=False)
            one = np.array([float(m(_tensor(d), _tensor(r))) for d, r in zip(dist, refs)])
            assert np.abs(vals[name] - one).max() <= 1e-6 and np.ptp(one) > 0
