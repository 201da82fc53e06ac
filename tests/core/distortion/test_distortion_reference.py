"""Distortions checked against independent implementations and their stated definitions."""
from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image
from scipy import ndimage
from skimage.color import rgb2lab

from embeval.distortion import DISTORTIONS, distort
from embeval.distortion.samples import photo, synthetic_tabletop

SIZE = (160, 120)


@pytest.fixture(scope="module")
def im():
    return photo("coffee", SIZE)


def _lv(name, level):
    return DISTORTIONS[name].levels[level - 1]


def test_gaussian_blur_matches_scipy(im):
    for level in (2, 4):
        s = _lv("gaussian_blur", level)
        ref = ndimage.gaussian_filter(im.astype(float), sigma=(s, s, 0), mode="mirror", truncate=3.0)
        assert np.abs(distort(im, "gaussian_blur", level).astype(float) - ref).max() <= 1.0


def test_lens_blur_matches_scipy_disc_convolution(im):
    from embeval.distortion._util import disk_kernel

    k = disk_kernel(_lv("lens_blur", 3)).astype(float)
    assert k.sum() == pytest.approx(1.0) and k[k.shape[0] // 2, k.shape[1] // 2] > 0
    ref = np.stack([ndimage.convolve(im[..., c].astype(float), k[::-1, ::-1], mode="mirror") for c in range(3)], axis=2)
    assert np.abs(distort(im, "lens_blur", 3).astype(float) - ref).max() <= 1.0


def test_pixelate_is_block_mean():
    img = synthetic_tabletop(160, 120, seed=3)
    b = _lv("pixelate", 3)  # 5 divides 160 and 120
    out = distort(img, "pixelate", 3).astype(float)
    means = img.reshape(120 // b, b, 160 // b, b, 3).mean(axis=(1, 3))
    ref = np.repeat(np.repeat(means, b, axis=0), b, axis=1)
    assert np.abs(out - ref).max() <= 1.0


def test_jpeg_matches_opencv_encoder(im):
    import cv2

    for level in (1, 4):
        q = _lv("jpeg", level)
        ok, buf = cv2.imencode(".jpg", im[..., ::-1], [cv2.IMWRITE_JPEG_QUALITY, q, cv2.IMWRITE_JPEG_SAMPLING_FACTOR,
                                                      cv2.IMWRITE_JPEG_SAMPLING_FACTOR_420])
        ref = cv2.imdecode(buf, cv2.IMREAD_COLOR)[..., ::-1].astype(float)
        out = distort(im, "jpeg", level).astype(float)
        assert np.sqrt(np.mean((out - ref) ** 2)) < 2.0  # same codec family and tables: near-identical decodes


def test_jpeg2000_honours_compression_ratio():
    img = photo("astronaut", (320, 240))
    for level in (1, 5):
        ratio = _lv("jpeg2000", level)
        buf = io.BytesIO()
        Image.fromarray(img).save(buf, format="JPEG2000", quality_mode="rates", quality_layers=[float(ratio)], irreversible=True)
        achieved = img.nbytes / buf.tell()
        assert ratio * 0.7 < achieved < ratio * 1.6, (ratio, achieved)
        buf.seek(0)
        np.testing.assert_array_equal(np.asarray(Image.open(buf).convert("RGB")), distort(img, "jpeg2000", level))


def test_lab_based_types_change_what_they_say(im):
    lab = rgb2lab(im)  # scikit-image's CIELAB: independent of OpenCV's
    diff = rgb2lab(distort(im, "color_diffusion", 4)) - lab
    assert np.abs(diff[..., 0]).mean() < 0.25 * np.abs(diff[..., 1:]).mean()  # chroma moves, lightness stays
    sat = rgb2lab(distort(im, "color_saturation_lab", 2))
    chroma = np.hypot(lab[..., 1], lab[..., 2])
    assert np.median(np.hypot(sat[..., 1], sat[..., 2])[chroma > 5] / chroma[chroma > 5]) > 1.3
    br = rgb2lab(distort(im, "brighten", 3))[..., 0]
    dk = rgb2lab(distort(im, "darken", 3))[..., 0]
    mid = (lab[..., 0] > 5) & (lab[..., 0] < 95)
    assert (br[mid] > lab[..., 0][mid]).mean() > 0.98 and (dk[mid] < lab[..., 0][mid]).mean() > 0.98
    # the stated curve: L* -> 100 (L*/100)^(1/g)
    g = _lv("brighten", 3)
    expect = 100 * (lab[..., 0] / 100) ** (1 / g)
    assert np.median(np.abs(br - expect)[mid]) < 1.0


def test_overexposure_is_linear_gain_with_clipping(im):
    g = _lv("overexposure", 2)
    x = im / 255.0
    lin = np.where(x <= 0.04045, x / 12.92, ((x + 0.055) / 1.055) ** 2.4) * g
    lin = np.clip(lin, 0, 1)
    ref = np.where(lin <= 0.0031308, 12.92 * lin, 1.055 * lin ** (1 / 2.4) - 0.055) * 255
    assert np.abs(distort(im, "overexposure", 2) - ref).max() <= 0.5 + 1e-6
    assert (distort(im, "overexposure", 5) == 255).mean() > (distort(im, "overexposure", 1) == 255).mean()


def test_color_noise_leaves_luma(im):
    out = distort(im, "color_noise", 4, seed=1).astype(float)
    w = np.array([0.299, 0.587, 0.114])
    mid = np.all((out > 0) & (out < 255), axis=2)  # where no channel clipped
    assert mid.mean() > 0.5
    dy = (out - im) @ w
    dc = out - im
    assert np.abs(dy[mid]).max() <= 1.0 and dc[mid].std() > 5


def test_motion_blur_kernel_length_and_mass():
    from embeval.distortion.blur import _motion_kernel

    for length in DISTORTIONS["motion_blur"].levels:
        k = _motion_kernel(length, 0)
        assert k.sum() == pytest.approx(1.0, abs=1e-5)
        row = k.sum(axis=0)  # horizontal line: its support spans about `length` pixels
        assert abs((row > 1e-3).sum() - length) <= 2
