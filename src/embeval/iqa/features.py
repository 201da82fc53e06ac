"""No-reference image features for the trained feature metrics.

- ``nss``: BRISQUE's natural-scene statistics (Mittal et al. 2012) of the luma channel at 2 scales
  (36 numbers), computed with pyiqa's implementation (``natural_scene_statistics``); they are blind
  to the overall brightness and colour by construction (mean-subtracted, contrast-normalised);
- ``colour``: mean and standard deviation of R, G, B in [0, 1] and the mean HSV saturation (7
  numbers): what the mean-normalised NSS cannot see (exposure, colour casts);
- ``stats``: log variance of the Laplacian (sharpness), mean hue and saturation spread (OpenCV HSV),
  an 8-bin grey-level histogram and the 5/50/95 % percentiles of R, G, B (20 numbers);
- ``signal``: distortion-type-agnostic signal statistics of the grey image (14 numbers): log noise
  sigma (Immerkaer 1996), log1p of the 50/90/99 % Sobel gradient magnitude, log energy shares of 4
  radial spatial-frequency bands (0-0.05, 0.05-0.15, 0.15-0.3, 0.3+ cycles/pixel), blockiness on
  the 8-pixel grid (horizontal, vertical: mean step across grid lines / mean step), shares of
  clipped dark (<= 2) and bright (>= 253) pixels, grey-level entropy (bits) and colourfulness
  (Hasler & Suesstrunk 2003, / 100).

Feature values depend on the image size (sharpness, noise, frequency bands): a predictor resizes
frames to the size it was trained at (:func:`resize_to`).
"""
from __future__ import annotations

import functools
from typing import Sequence

import numpy as np

from embeval.action import check_image

FEATURE_SETS = ("nss", "colour", "stats", "signal")


def nss_features(images: Sequence[np.ndarray], batch_size: int = 16) -> np.ndarray:
    """(N, 36) BRISQUE NSS features (2 scales x 18) of RGB uint8 images, ``batch_size`` equal-size images per
    torch call (16: 1.2 ms per 128x96 image on one thread, against 2.1 ms one at a time and with 64;
    the values do not depend on it, bit for bit)."""
    import torch

    images = [check_image(im, f"images[{i}]") for i, im in enumerate(images)]
    out = np.zeros((len(images), 36))
    by_shape: dict[tuple, list[int]] = {}
    for i, im in enumerate(images):
        by_shape.setdefault(im.shape, []).append(i)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # 1 thread is about 3x faster than 2 for these small tensors on a busy machine
    try:
        _nss_batches(images, by_shape, batch_size, out)
    finally:
        torch.set_num_threads(threads)
    return np.where(np.isfinite(out), out, 0.0)  # NaN and +-inf -> 0


def _nss_batches(images, by_shape, batch_size, out) -> None:
    import torch

    with torch.no_grad():
        for idx in by_shape.values():  # equal-size images in batches (the statistics are per image)
            for k in range(0, len(idx), batch_size):
                b = idx[k:k + batch_size]
                x = torch.from_numpy(np.stack([images[i] for i in b]).astype(np.float32)).permute(0, 3, 1, 2) / 255.0
                y = _luma(x)
                feats = [_nss(y).reshape(len(b), -1), _nss(_half(y)).reshape(len(b), -1)]
                out[b] = torch.cat(feats, dim=-1).double().numpy()


@functools.lru_cache(maxsize=8)
def _nss_tables(dtype) -> tuple:
    """pyiqa's BRISQUE constants, computed once with the same operations it repeats on every call: the
    7x7 Gaussian window (sigma 7/6), the shape grid 0.2:0.001:10 and its GGD and AGGD moment ratios."""
    import torch
    from pyiqa.matlab_utils import fspecial

    gam = torch.arange(0.2, 10 + 0.001, 0.001).to(dtype)
    l1, l2, l3 = torch.lgamma(1.0 / gam), torch.lgamma(2.0 / gam), torch.lgamma(3.0 / gam)
    ggd = (l1 + l3 - 2 * l2).exp()
    aggd = (2 * l2 - (l1 + l3)).exp()
    return fspecial(7, 7.0 / 6, 1).to(dtype), gam, ggd[None], aggd[None]


def _luma(x):
    """pyiqa's ``to_y_channel(x, 255.0)`` (YIQ luma, rounded) of a (B, 3, h, w) batch in [0, 1], with the
    YIQ matrix made once: the same matmul and rounding, bit for bit."""
    y = (x.permute(0, 2, 3, 1) @ _yiq_matrix(x.dtype)).permute(0, 3, 1, 2)[:, [0], :, :] * 255.0
    return y - y.detach() + y.round()


@functools.lru_cache(maxsize=4)
def _yiq_matrix(dtype):
    """pyiqa's RGB -> YIQ matrix (3 x 3, applied as ``x @ M``), read off its ``rgb2yiq`` with unit colours."""
    import torch
    from pyiqa.utils.color_util import rgb2yiq

    eye = torch.eye(3, dtype=dtype).reshape(3, 3, 1, 1)  # 3 one-pixel images: pure R, G, B
    return rgb2yiq(eye).reshape(3, 3).contiguous()  # row i = the YIQ of unit colour i = row i of M


def _half(y):
    """pyiqa's ``imresize(y, scale=0.5, antialiasing=True)`` (MATLAB bicubic with antialiasing) of a
    (B, 1, h, w) float32 batch, with the per-size weights and paddings computed once (the same
    operations as pyiqa's ``resize_1d`` apply them; bit-identical)."""
    import math

    from pyiqa.matlab_utils.resize import padding, reshape_tensor

    b, c, h, w = y.shape
    x = y.reshape(-1, 1, h, w).float()
    for dim, n_in in ((-2, h), (-1, w)):
        weight, pad_pre, pad_post, base, k = _resize_plan(n_in, math.ceil(n_in * 0.5), 0.5, x.dtype)
        unfold = reshape_tensor(padding(x, dim, pad_pre, pad_post, padding_type="reflect"), dim, k)
        if dim == -2:
            sample = unfold[..., base, :]
            wv = weight.view(1, k, sample.size(2), 1)
        else:
            sample = unfold[..., base]
            wv = weight.view(1, k, 1, sample.size(3))
        x = (sample * wv).sum(dim=1, keepdim=True)
    return x.view(b, c, x.size(-2), x.size(-1))


@functools.lru_cache(maxsize=32)
def _resize_plan(n_in: int, size: int, scale: float, dtype) -> tuple:
    """Weights, paddings and sample positions of pyiqa's cubic ``resize_1d`` (antialiased downscale)."""
    import math

    import torch
    from pyiqa.matlab_utils.resize import get_padding, get_weight

    k = math.ceil(4 / scale) + 2
    pos = torch.linspace(0, size - 1, steps=size, dtype=dtype)
    pos = (pos + 0.5) / scale - 0.5
    base = pos.floor() - (k // 2) + 1
    weight = get_weight(pos - base, k, kernel="cubic", sigma=2.0, antialiasing_factor=scale)
    pad_pre, pad_post, base = get_padding(base, k, n_in)
    return weight, pad_pre, pad_post, base, k


def _nss(luma):
    """(B, 18) BRISQUE statistics of a (B, 1, h, w) luma batch: the same torch operations as pyiqa's
    ``natural_scene_statistics(luma, 7, 7 / 6)`` (GGD fit of the normalised luma, AGGD fits of its
    products with 4 neighbours), with its constant tables cached instead of rebuilt per call (equal
    outputs, bit for bit; tests/core/iqa/test_iqa_gate_speed.py)."""
    import torch
    from pyiqa.archs.func_util import safe_sqrt
    from pyiqa.matlab_utils import imfilter

    kernel, gam, ggd, aggd = _nss_tables(luma.dtype)
    mu = imfilter(luma, kernel, padding="same")
    var = imfilter(luma ** 2, kernel, padding="same")
    nrm = (luma - mu) / (safe_sqrt((var - mu ** 2).abs()) + 1)
    sigma_sq = nrm.pow(2).mean(dim=(-1, -2))
    sigma = sigma_sq.sqrt().squeeze(dim=-1)
    assert not torch.isclose(sigma, torch.zeros_like(sigma)).all(), "Expected image with non zero variance of pixel values"
    rho = sigma_sq / nrm.abs().mean(dim=(-1, -2)) ** 2
    feats = [gam[(rho - ggd).abs().argmin(dim=-1)], sigma.pow(2)]
    # the 4 neighbour products as one (4 B, 1, h, w) batch: every statistic is per image, so the
    # batched reductions give each image's numbers exactly as one at a time
    n = nrm.shape[0]
    block = torch.empty((4 * n,) + tuple(nrm.shape[1:]), dtype=nrm.dtype)
    for i, shift in enumerate(((0, 1), (1, 0), (1, 1), (-1, 1))):
        torch.mul(nrm, torch.roll(nrm, shifts=shift, dims=(-2, -1)), out=block[i * n:(i + 1) * n])
    left, right = block < 0, block > 0
    left_std = torch.sqrt((block * left).pow(2).sum(dim=(-1, -2)) / left.sum(dim=(-1, -2), dtype=torch.float32))
    right_std = torch.sqrt((block * right).pow(2).sum(dim=(-1, -2)) / right.sum(dim=(-1, -2), dtype=torch.float32))
    gh = left_std / right_std
    rhat = block.abs().mean(dim=(-1, -2)).pow(2) / block.pow(2).mean(dim=(-1, -2))
    rhatnorm = (rhat * (gh.pow(3) + 1) * (gh + 1)) / (gh.pow(2) + 1).pow(2)
    alpha = gam[(aggd - rhatnorm).abs().argmin(dim=-1)]
    sl, sr = left_std.squeeze(-1), right_std.squeeze(-1)
    eta = (sr - sl) * torch.exp(torch.lgamma(2.0 / alpha) - (torch.lgamma(1.0 / alpha) + torch.lgamma(3.0 / alpha)) / 2)
    for i in range(4):
        part = slice(i * n, (i + 1) * n)
        feats.extend((alpha[part], eta[part], sl[part].pow(2), sr[part].pow(2)))
    return torch.stack(feats, dim=-1)


def colour_features(images: Sequence[np.ndarray]) -> np.ndarray:
    """(N, 7): mean and std of R, G, B (0..1) and mean HSV saturation. From per-channel histograms and a
    (max, min) -> saturation table: the means and deviations equal the per-pixel float64 sums up to
    their rounding (about 1e-16 relative), the saturation bit for bit."""
    import cv2

    v = np.arange(256) / 255.0
    out = []
    for i, im in enumerate(images):
        chans = cv2.split(check_image(im, f"images[{i}]"))
        n = chans[0].size
        counts = [np.bincount(c.reshape(-1), minlength=256) for c in chans]
        mean = np.array([c @ v for c in counts]) / n
        std = np.sqrt(np.array([c @ (v - m) ** 2 for c, m in zip(counts, mean)]) / n)
        mx = cv2.max(cv2.max(chans[0], chans[1]), chans[2]).reshape(-1)
        mn = cv2.min(cv2.min(chans[0], chans[1]), chans[2]).reshape(-1)
        sat = _SATURATION[mx, mn].mean()  # the per-pixel values in pixel order: the same sum as before
        out.append(np.concatenate([mean, std, [sat]]))
    return np.stack(out)


def _saturation_table() -> np.ndarray:
    mx, mn = np.meshgrid(np.arange(256) / 255.0, np.arange(256) / 255.0, indexing="ij")
    return np.where(mx > 0, (mx - mn) / np.maximum(mx, 1e-9), 0.0)


_SATURATION = _saturation_table()  # [max, min] -> HSV saturation


def stats_features(images: Sequence[np.ndarray]) -> np.ndarray:
    """(N, 20): sharpness, hue / saturation, grey histogram, RGB percentiles (see module docstring)."""
    import cv2

    out = []
    for i, im in enumerate(images):
        im = check_image(im, f"images[{i}]")
        g = cv2.cvtColor(im, cv2.COLOR_RGB2GRAY)
        hsv = cv2.cvtColor(im, cv2.COLOR_RGB2HSV)
        hist = np.bincount((g >> 5).reshape(-1), minlength=8) / g.size  # 8 bins of 32 grey levels
        pct = _channel_percentiles(im, (5, 50, 95)).ravel() / 255.0
        out.append(_row(np.log1p(cv2.Laplacian(g.astype(np.float32), cv2.CV_32F).var()), hsv[..., 0].mean() / 180.0,
                         hsv[..., 1].std() / 255.0, hist, pct))
    return np.asarray(out, dtype=np.float64)


def _row(*parts) -> np.ndarray:
    """The parts (numbers and arrays) as one float64 row (``np.r_`` without its parsing cost)."""
    return np.concatenate([np.asarray(p, dtype=np.float64).reshape(-1) for p in parts])


def _channel_percentiles(im: np.ndarray, qs) -> np.ndarray:
    """``np.percentile(im.reshape(-1, 3), qs, axis=0)`` (linear interpolation) of uint8 RGB, from the
    channels' cumulative histograms instead of a sort (equal up to the interpolation's rounding)."""
    n = im.shape[0] * im.shape[1]
    out = np.empty((len(qs), 3))
    pos = np.asarray(qs, dtype=np.float64) / 100.0 * (n - 1)
    lo = np.floor(pos)
    t = pos - lo
    lo = lo.astype(np.int64)
    hi = np.minimum(lo + 1, n - 1)
    for c in range(3):
        cum = np.cumsum(np.bincount(im[..., c].reshape(-1), minlength=256))
        a = np.searchsorted(cum, lo, side="right").astype(np.float64)  # value at sorted position lo
        b = np.searchsorted(cum, hi, side="right").astype(np.float64)
        out[:, c] = np.where(t >= 0.5, b - (b - a) * (1 - t), a + (b - a) * t)
    return out


@functools.lru_cache(maxsize=16)
def _band_masks(h: int, w: int) -> tuple:
    """Boolean masks of the rfft2 coefficients in each radial band of :data:`_BANDS`, per image size."""
    r = np.hypot(np.fft.rfftfreq(w)[None, :], np.fft.fftfreq(h)[:, None])
    return tuple((r >= a) & (r < b) for a, b in _BANDS)


_BANDS = ((0.0, 0.05), (0.05, 0.15), (0.15, 0.3), (0.3, 1.0))  # cycles / pixel (radial)


def signal_features(images: Sequence[np.ndarray]) -> np.ndarray:
    """(N, 14): noise, gradients, frequency bands, blockiness, clipping, entropy, colourfulness (module docstring)."""
    import cv2

    lap = np.array([[1, -2, 1], [-2, 4, -2], [1, -2, 1]], np.float32)
    out = []
    for i, im in enumerate(images):
        im = check_image(im, f"images[{i}]")
        g = cv2.cvtColor(im, cv2.COLOR_RGB2GRAY).astype(np.float32)
        h, w = g.shape
        sigma = np.sqrt(np.pi / 2) * np.abs(cv2.filter2D(g, -1, lap)[1:-1, 1:-1]).mean() / 6.0 if min(h, w) > 2 else 0.0
        gm = np.hypot(cv2.Sobel(g, cv2.CV_32F, 1, 0), cv2.Sobel(g, cv2.CV_32F, 0, 1))
        power = np.abs(np.fft.rfft2(g - g.mean())) ** 2
        total = power.sum() + 1e-9
        bands = [power[m].sum() / total for m in _band_masks(h, w)]
        dh, dv = np.abs(np.diff(g, axis=1)), np.abs(np.diff(g, axis=0))
        block = [dh[:, 7::8].mean() / (dh.mean() + 1e-6) if w > 8 else 1.0, dv[7::8].mean() / (dv.mean() + 1e-6) if h > 8 else 1.0]
        hist = np.bincount(g.astype(np.uint8).ravel(), minlength=256) / g.size
        nz = hist[hist > 0]
        rgb = im.astype(np.float32)
        rg, yb = rgb[..., 0] - rgb[..., 1], 0.5 * (rgb[..., 0] + rgb[..., 1]) - rgb[..., 2]
        colourful = np.hypot(rg.std(), yb.std()) + 0.3 * np.hypot(rg.mean(), yb.mean())
        out.append(_row(np.log(sigma + 1e-3), np.log1p(np.percentile(gm, [50, 90, 99])), np.log(np.asarray(bands) + 1e-9),
                         block, (g <= 2).mean(), (g >= 253).mean(), -(nz * np.log2(nz)).sum(), colourful / 100.0))
    return np.asarray(out, dtype=np.float64)


def resize_to(images: Sequence[np.ndarray], size: Sequence[int] | None) -> list[np.ndarray]:
    """Images resized to ``size`` = [height, width] (area interpolation when shrinking); unchanged when
    ``size`` is None or already matches."""
    import cv2

    if size is None:
        return list(images)
    h, w = int(size[0]), int(size[1])
    out = []
    for i, im in enumerate(images):
        im = check_image(im, f"images[{i}]")
        if im.shape[:2] != (h, w):
            im = cv2.resize(im, (w, h), interpolation=cv2.INTER_AREA if im.shape[0] > h else cv2.INTER_LINEAR)
        out.append(im)
    return out


def nr_features(images: Sequence[np.ndarray], sets: Sequence[str] = FEATURE_SETS) -> np.ndarray:
    """Concatenated feature sets (see module docstring), shape (N, F)."""
    fns = {"nss": nss_features, "colour": colour_features, "stats": stats_features, "signal": signal_features}
    bad = [s for s in sets if s not in fns]
    if bad:
        from embeval.errors import ConfigError

        raise ConfigError(f"unknown feature set(s) {bad}; choose from {', '.join(FEATURE_SETS)}")
    return np.concatenate([fns[s](images) for s in sets], axis=1)
