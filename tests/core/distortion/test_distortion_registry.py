"""Registry contract: 30 types in 7 categories x 5 levels, pure functions, validation."""
from __future__ import annotations

import numpy as np
import pytest

from embeval.distortion import CATEGORIES, DISTORTIONS, categories, distort, get, list_distortions
from embeval.distortion.samples import synthetic_tabletop
from embeval.errors import ConfigError, InvalidInputError

KADID = {"gaussian_blur", "lens_blur", "motion_blur", "color_diffusion", "color_shift", "color_quantization",
         "color_saturation_hsv", "color_saturation_lab", "jpeg2000", "jpeg", "white_noise", "color_noise",
         "impulse_noise", "multiplicative_noise", "denoise", "brighten", "darken", "mean_shift", "jitter",
         "non_eccentricity_patch", "pixelate", "quantization", "color_block", "high_sharpen", "contrast_change"}


@pytest.fixture(scope="module")
def img():
    return synthetic_tabletop(96, 72, seed=1)


def test_thirty_types_in_seven_categories():
    assert len(DISTORTIONS) == 30
    assert tuple(categories()) == CATEGORIES and len(CATEGORIES) == 7
    assert all(categories()[c] for c in CATEGORIES), "every category has at least one type"
    assert sorted(list_distortions()) == sorted(DISTORTIONS)
    assert {n for n, d in DISTORTIONS.items() if d.kadid} == KADID
    assert all(len(d.levels) == 5 and d.description and d.param for d in DISTORTIONS.values())


@pytest.mark.parametrize("name", sorted(DISTORTIONS))
def test_pure_shape_dtype_deterministic(name, img):
    before = img.copy()
    outs = [distort(img, name, level, seed=3) for level in range(1, 6)]
    np.testing.assert_array_equal(img, before)  # input untouched
    for o in outs:
        assert o.shape == img.shape and o.dtype == np.uint8
        assert not np.shares_memory(o, img)
    np.testing.assert_array_equal(distort(img, name, 3, seed=3), outs[2])  # same seed, same output
    assert any(not np.array_equal(o, img) for o in outs), "some level changes the image"
    if DISTORTIONS[name].stochastic:
        assert any(not np.array_equal(distort(img, name, 4, seed=s), outs[3]) for s in (4, 5, 6))


def test_read_only_and_non_contiguous_inputs(img):
    ro = img.copy()
    ro.setflags(write=False)
    view = np.ascontiguousarray(np.concatenate([img, img], axis=1))[:, ::2]  # strided view
    for name in DISTORTIONS:
        distort(ro, name, 5, seed=0)
        out = distort(view, name, 2, seed=0)
        assert out.shape == view.shape


def test_odd_small_sizes():
    small = np.random.default_rng(0).integers(0, 256, (13, 9, 3), dtype=np.uint8)
    for name in DISTORTIONS:
        for level in (1, 5):
            assert distort(small, name, level, seed=1).shape == small.shape


def test_validation_errors(img):
    with pytest.raises(ConfigError, match="unknown distortion"):
        distort(img, "nope", 1)
    for bad in (0, 6, 2.5, True):
        with pytest.raises(ConfigError, match="level"):
            distort(img, "jpeg", bad)
    with pytest.raises(InvalidInputError, match="uint8"):
        distort(img.astype(np.float32), "jpeg", 1)
    with pytest.raises(InvalidInputError, match="uint8"):
        distort(img[..., 0], "jpeg", 1)
    with pytest.raises(InvalidInputError, match="too small"):
        distort(img[:4, :4], "jpeg", 1)
    with pytest.raises(ConfigError):
        list_distortions("colour")
    assert get("jpeg").param_for(1) == DISTORTIONS["jpeg"].levels[0]
