"""Shared checks of the texture axes on LIBERO and ManiSkill (tests/core/sim/test_perturb_libero.py, test_perturb_maniskill.py)."""
from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest


def contrast_pct(rgb) -> float:
    """RMS contrast (% of full scale) of an image's luminance (the mean of R, G, B: the texture axes' measure)."""
    return float(np.asarray(rgb, dtype=np.float64)[..., :3].mean(axis=-1).std() / 255 * 100)


def check_texture(tex, params) -> None:
    """A texture the backend renders has the drawn contrast (%) around the surface's mean colour: clipping at 0/255
    takes up to 1 % and a few grey levels of the mean (as on pybullet); tiling the 256 px pattern over a larger
    texture adds partial tiles (0.5 % from the image sent)."""
    from embeval.sim.perturb._texture import pattern_image

    got = contrast_pct(tex)
    assert got == pytest.approx(params["contrast_pct"], abs=1.0)
    assert got == pytest.approx(contrast_pct(pattern_image(params["mean_rgb"], params)), abs=0.5)
    np.testing.assert_allclose(np.asarray(tex)[..., :3].reshape(-1, 3).mean(axis=0) / 255, params["mean_rgb"], atol=0.03)


class RenderedSpread:
    """Renders of one seed at rising levels: the surface's pixels are those changed from the clean render at any level."""

    def __init__(self, clean):
        self.clean = np.asarray(clean, dtype=np.float64)
        self.renders, self.contrasts, self.mask = [], [], None

    def add(self, img, contrast_pct: float) -> None:
        img = np.asarray(img, dtype=np.float64)
        changed = np.abs(img - self.clean).max(axis=2) > 0
        assert changed.mean() > 0.02  # the surface is in view
        self.renders.append(img)
        self.contrasts.append(contrast_pct)
        self.mask = changed if self.mask is None else self.mask | changed

    def check_grows(self) -> None:
        """One seed, one pattern, only its gain grows: the rendered pattern (the change from the first level over
        the surface's pixels, grey levels) grows with the drawn contrast (at 64 px the renderer averages the fine
        pattern, so the texture's own contrast is the measure in the axis's unit)."""
        assert all(a < b for a, b in pairwise(self.contrasts))
        amp = [float(np.std((img - self.renders[0]).mean(axis=2)[self.mask])) for img in self.renders[1:]]
        assert 0 < amp[0] and all(a < b for a, b in pairwise(amp)), amp
