"""The compiled float32 normal draw (embeval.distortion._fastnormal) gives numpy's numbers bit for bit
and leaves the generator exactly as numpy's own draw leaves it; the fused noise kernels equal the
numpy arithmetic they replace. numpy itself is the judge."""
from __future__ import annotations

import numpy as np
import pytest

from embeval.distortion import _fastnormal as fn


def _pair(seed: int, lead: int):
    a, b = np.random.default_rng(seed), np.random.default_rng(seed)
    for g in (a, b):  # leave a buffered 32-bit word (or not) before the draw
        g.standard_normal(lead, dtype=np.float32)
    return a, b


def test_compiled_path_in_use():
    pytest.importorskip("numba")
    assert fn.available(), "numba is installed but the ziggurat tables did not match numpy's"


@pytest.mark.parametrize("seed,lead,n", [(0, 0, 4096), (1, 1, 4097), (2, 2, 100_001), (3, 3, 2_000_000), (4, 0, 3_000_003)])
def test_same_numbers_and_state_as_numpy(seed, lead, n):
    """Several million draws: about 0.7 % take the wedge test, 0.03 % the tail; all equal numpy's."""
    a, b = _pair(seed, lead)
    want = a.standard_normal(n, dtype=np.float32)
    got = fn.normal_f32(b, n)
    assert got.dtype == np.float32 and np.array_equal(got, want)
    assert a.bit_generator.state == b.bit_generator.state
    assert np.array_equal(a.random(5), b.random(5))


def test_fused_noise_equals_numpy_arithmetic():
    img = np.random.default_rng(9).integers(0, 256, (97, 131, 3), dtype=np.uint8)
    img[:10] = 0
    img[10:20] = 255
    for sigma in (0.06, 0.32, 5.0, 28.0, 200.0):
        a, b = _pair(int(sigma * 100), 1)
        n = a.standard_normal(img.shape, dtype=np.float32) * np.float32(sigma)
        want = np.clip(n + img + np.float32(0.5), 0, 255).astype(np.uint8)
        assert np.array_equal(fn.apply_noise(img, sigma, b), want)
        assert a.bit_generator.state == b.bit_generator.state
        a, b = _pair(int(sigma * 100), 0)
        n = a.standard_normal(img.shape, dtype=np.float32) * np.float32(sigma) + np.float32(1.0)
        want = np.clip(n * img + np.float32(0.5), 0, 255).astype(np.uint8)
        assert np.array_equal(fn.apply_noise(img, sigma, b, multiplicative=True), want)
        assert a.bit_generator.state == b.bit_generator.state


def test_other_bit_generators_fall_back_to_numpy():
    a, b = np.random.Generator(np.random.MT19937(5)), np.random.Generator(np.random.MT19937(5))
    assert np.array_equal(fn.normal_f32(b, 10_000), a.standard_normal(10_000, dtype=np.float32))


def test_numpy_fallback_gives_the_same_bytes(monkeypatch):
    """Without the compiled path (no numba) the noise types, the contrast table and the colour-table gather
    take numpy's route: the same bytes as with it."""
    from embeval.distortion import _util, distort

    img = np.random.default_rng(2).integers(0, 256, (64, 80, 3), dtype=np.uint8)
    names = ("white_noise", "multiplicative_noise", "color_noise", "denoise", "contrast_change")
    fast = {n: distort(img, n, 4, 7) for n in names}
    monkeypatch.setitem(fn._STATE, "kernels", None)
    monkeypatch.setattr(_util, "_COMPILED", {"contrast_table": None, "gather_rgb": None})
    for n in names:
        assert np.array_equal(distort(img, n, 4, 7), fast[n]), n
    table = (np.arange(1 << 24, dtype=np.uint32) * np.uint32(2654435761)) & np.uint32(0xFFFFFF)
    monkeypatch.undo()
    compiled_map = _util.apply_color_table(img, table)
    monkeypatch.setattr(_util, "_COMPILED", {"gather_rgb": None})
    assert np.array_equal(_util.apply_color_table(img, table), compiled_map)
    assert np.array_equal(_util.apply_color_table(img[::-1], table), compiled_map[::-1])
