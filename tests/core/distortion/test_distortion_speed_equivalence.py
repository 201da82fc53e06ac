"""The fast distortion engine gives the same output as the implementation it replaced.

``distortion_v0`` (tests/distortion_v0/) is the engine frozen before the speed work; every one of the
30 types at every level, on photos, a sim-like tabletop, uniform noise and odd sizes, with several
seeds, must match it bit for bit (max abs difference 0: no tolerance was needed)."""
from __future__ import annotations

import numpy as np
import pytest

import distortion_v0
from embeval.distortion import DISTORTIONS, distort, list_distortions
from embeval.distortion import _util
from embeval.distortion.samples import photo, synthetic_tabletop


def _images():
    rng = np.random.default_rng(7)
    return {
        "photo": photo("astronaut", (160, 120)),
        "tabletop": synthetic_tabletop(128, 96),
        "noise": rng.integers(0, 256, (61, 97, 3), dtype=np.uint8),
        "extremes": np.where(rng.random((40, 48, 1)) < 0.5, 0, 255).astype(np.uint8).repeat(3, axis=2),
    }


IMAGES = _images()


@pytest.mark.parametrize("name", list_distortions())
def test_same_output_as_previous_engine(name):
    for key, img in IMAGES.items():
        for level in range(1, 6):
            for seed in ((0, 12345) if DISTORTIONS[name].stochastic else (0,)):
                new = distort(img, name, level, seed)
                old = distortion_v0.distort(img, name, level, seed)
                assert new.dtype == np.uint8 and new.shape == img.shape
                diff = int(np.abs(new.astype(np.int16) - old).max())
                assert diff == 0, f"{name} level {level} seed {seed} on {key}: max abs diff {diff}"


@pytest.mark.parametrize("name", list_distortions())
def test_input_untouched_and_output_private(name):
    img = IMAGES["photo"].copy()
    before = img.copy()
    out = distort(img, name, 3, 1)
    assert np.array_equal(img, before)
    assert not np.may_share_memory(out, img)
    view = IMAGES["photo"][::-1]  # non-contiguous input
    assert np.array_equal(distort(view, name, 3, 1), distortion_v0.distort(view, name, 3, 1))


def test_colour_table_path_is_exact(monkeypatch):
    """The 24-bit colour tables that streams switch to (brighten, darken, CIELAB saturation) hold, for
    every one of the 2^24 colours, what the direct per-pixel path computes (the table is built by that
    path), and images mapped through them equal the previous engine's output."""
    img = np.concatenate([IMAGES["photo"], np.random.default_rng(3).integers(0, 256, (120, 160, 3), dtype=np.uint8)])
    monkeypatch.setattr(_util, "COLOR_TABLE_AFTER_PIXELS", 3 * img.shape[0] * img.shape[1])
    _util.clear_color_tables()
    try:
        for name in ("brighten", "darken", "color_saturation_lab"):
            fn, param = DISTORTIONS[name].fn, DISTORTIONS[name].levels[2]
            ref = distortion_v0.distort(img, name, 3)
            for _ in range(2):
                assert np.array_equal(distort(img, name, 3), ref)
            assert _util.cached_color_table(fn.direct, param) is None  # still the direct path
            for _ in range(2):
                assert np.array_equal(distort(img, name, 3), ref)
            assert _util.cached_color_table(fn.direct, param) is not None  # the stream path is in use
            odd = IMAGES["noise"]
            assert np.array_equal(distort(odd, name, 3), distortion_v0.distort(odd, name, 3))
        assert len(_util._TABLES) == _util.COLOR_TABLES_KEPT  # the oldest table was dropped
    finally:
        _util.clear_color_tables()


def test_jpeg_bytes_equal_pillow():
    """The JPEG type encodes through OpenCV; the files are byte-identical to Pillow's at every quality."""
    import io

    import cv2
    from PIL import Image

    for img in (IMAGES["photo"], IMAGES["noise"], photo("coffee", (33, 17))):
        for q in (1, 3, 6, 10, 20, 40, 75, 95):
            buf = io.BytesIO()
            Image.fromarray(img).save(buf, format="JPEG", quality=q, subsampling=2)
            ok, enc = cv2.imencode(".jpg", cv2.cvtColor(img, cv2.COLOR_RGB2BGR),
                                   [cv2.IMWRITE_JPEG_QUALITY, q, cv2.IMWRITE_JPEG_SAMPLING_FACTOR, cv2.IMWRITE_JPEG_SAMPLING_FACTOR_420])
            assert ok and enc.tobytes() == buf.getvalue(), q


def test_percentile_equals_numpy():
    """The subsample-threshold percentile (colour shift's edge normalisation) returns np.percentile's bits,
    on smooth data, heavy ties, near-constant data and the blurred gradient magnitudes it serves."""
    import cv2

    rng = np.random.default_rng(11)
    grey = cv2.cvtColor(photo("astronaut", (320, 240)), cv2.COLOR_RGB2GRAY).astype(np.float32)
    mag = cv2.GaussianBlur(cv2.magnitude(cv2.Sobel(grey, cv2.CV_32F, 1, 0), cv2.Sobel(grey, cv2.CV_32F, 0, 1)), (0, 0), 2.0)
    arrays = [mag, rng.random(50_001).astype(np.float32), np.round(rng.random(70_000) * 4).astype(np.float32),
              np.zeros(9000, np.float32), (rng.standard_normal(123_457) ** 2).astype(np.float32), rng.random(30_000)]
    arrays[3][[5, 77]] = 1.0
    for x in arrays:
        for q in (99, 99.9, 50, 1):
            _util._PERCENTILE_OK.clear()
            got, want = _util.percentile(x, q), np.percentile(x, q)
            assert got == want and np.asarray(got).dtype == np.asarray(want).dtype, (x.size, q)


def test_contrast_table_equals_numpy():
    """The contrast change's tone table (compiled when numba is there) equals the numpy expression it
    replaces, for means and factors well beyond the registered ones."""
    from embeval.distortion.other import _contrast_table

    rng = np.random.default_rng(5)
    levels = np.arange(256)
    for m, f in [(0.0, 0.25), (255.0, 0.85), (127.5, 1.0), (-3.0, 2.5)] + [(rng.random() * 300 - 20, rng.random() * 3) for _ in range(3000)]:
        want = np.clip(m + f * (levels - m) + 0.5, 0, 255).astype(np.uint8)
        assert np.array_equal(_contrast_table(m, f), want), (m, f)


def test_pixelate_nearest_rows_equal_opencv():
    """Pixelate's two-step nearest upsampling (OpenCV widens, rows copied by OpenCV's row map) equals
    one cv2.resize(INTER_NEAREST), for every source height 1..120 into many target heights."""
    import cv2

    from embeval.distortion.spatial import _nearest_rows

    rng = np.random.default_rng(4)
    for sh in range(1, 121):
        small = rng.integers(0, 256, (sh, 7, 3), dtype=np.uint8)
        for h in {sh, sh + 1, 2 * sh + 1, 3 * sh, 5 * sh - 1, 479, 480, 1080} - {x for x in range(sh)}:
            want = cv2.resize(small, (23, h), interpolation=cv2.INTER_NEAREST)
            got = cv2.resize(small, (23, sh), interpolation=cv2.INTER_NEAREST)[_nearest_rows(h, sh)]
            assert np.array_equal(got, want), (sh, h)
