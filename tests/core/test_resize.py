"""embeval.resize, the one resize helper: every method equals the OpenCV / Pillow call its call site made
before (bit for bit, shrinking and enlarging), and the call sites use it."""
from __future__ import annotations

import cv2
import numpy as np
import pytest
from PIL import Image

from embeval.errors import ConfigError, InvalidInputError
from embeval.resize import METHODS, resize

IMG = np.random.default_rng(0).integers(0, 256, (48, 64, 3), dtype=np.uint8)
SIZES = [(24, 32), (96, 128), (30, 100), (100, 30), (48, 40)]  # (h, w): shrink, grow, and mixed


def _old(method, img, h, w):
    """What each call site did before embeval.resize."""
    if method == "cv2_area_linear":  # subjects/embedded/preprocess.py
        return cv2.resize(img, (w, h), interpolation=cv2.INTER_AREA if img.shape[0] > h else cv2.INTER_LINEAR)
    if method == "cv2_area_cubic":  # distortion/samples.py
        return cv2.resize(img, (w, h), interpolation=cv2.INTER_AREA if w < img.shape[1] else cv2.INTER_CUBIC)
    if method == "cv2_area_nearest":  # contact_sheet.py
        return cv2.resize(img, (w, h), interpolation=cv2.INTER_NEAREST if w >= img.shape[1] else cv2.INTER_AREA)
    if method == "cv2_area":  # cli/distort.py
        return cv2.resize(img, (w, h), interpolation=cv2.INTER_AREA)
    if method == "pil_lanczos":  # subjects/adapters/openvla_rest.py, openvla_hf.py
        return np.asarray(Image.fromarray(img).resize((w, h), Image.LANCZOS), dtype=np.uint8)
    if method == "pil_bilinear":  # sim/maniskill/bridge.py
        return np.asarray(Image.fromarray(img).resize((w, h), Image.BILINEAR))
    if method == "pil_bicubic":  # act2answer/baseline.py: Pillow's default
        return np.asarray(Image.fromarray(img).resize((w, h)), dtype=np.uint8)
    raise AssertionError(method)


@pytest.mark.parametrize("method", sorted(METHODS))
def test_each_method_equals_its_old_call(method):
    for h, w in SIZES:
        out = resize(IMG, h, w, method)
        assert out.shape == (h, w, 3) and out.dtype == np.uint8
        np.testing.assert_array_equal(out, _old(method, IMG, h, w))
    assert resize(IMG, 48, 64, method) is IMG  # already at the size: unchanged, no copy


def test_methods_differ_where_they_should():
    grown = {m: resize(IMG, 96, 128, m) for m in METHODS}
    assert not np.array_equal(grown["cv2_area_nearest"], grown["cv2_area_cubic"])
    assert not np.array_equal(grown["pil_lanczos"], grown["pil_bilinear"])
    # nearest keeps every enlarged pixel an input pixel value
    assert set(map(tuple, grown["cv2_area_nearest"].reshape(-1, 3))) <= set(map(tuple, IMG.reshape(-1, 3)))


def test_hostile_input():
    with pytest.raises(ConfigError, match="unknown resize method 'bogus'; choose from cv2_area_linear"):
        resize(IMG, 8, 8, "bogus")
    with pytest.raises(InvalidInputError, match="at least 1 pixel"):
        resize(IMG, 0, 8, "cv2_area")


def test_call_sites_use_the_helper():
    from embeval.act2answer.baseline import composite
    from embeval.distortion.samples import photo
    from embeval.subjects.adapters.openvla_rest import resize_image as openvla_resize
    from embeval.subjects.embedded.preprocess import resize_image as model_resize

    np.testing.assert_array_equal(model_resize(IMG, [24, 40]), _old("cv2_area_linear", IMG, 24, 40))
    np.testing.assert_array_equal(model_resize(IMG, 96), _old("cv2_area_linear", IMG, 96, 96))
    np.testing.assert_array_equal(openvla_resize(IMG, 32), _old("pil_lanczos", IMG, 32, 32))
    assert openvla_resize(IMG, None) is IMG
    from skimage import data

    raw = np.ascontiguousarray(data.astronaut()[..., :3])
    np.testing.assert_array_equal(photo("astronaut", (320, 240)), _old("cv2_area_cubic", raw, 240, 320))
    small = IMG[:24, :32]
    both = composite(IMG, small, gap=4)
    assert both.shape == (48, 64 + 4 + 64, 3)
    np.testing.assert_array_equal(both[:, 68:], _old("pil_bicubic", small, 48, 64))
