"""Textures of a given RMS contrast around a given mean colour (table and background axes)."""
from __future__ import annotations

import numpy as np

from embeval.sim.perturb.axis import Quantity

#: RMS contrast of the pattern, % of full scale (0..255)
CONTRAST = Quantity("texture RMS contrast", "%", ((3, 6), (6, 10), (10, 15), (15, 22), (22, 30)))


def sample(rng: np.random.Generator, level: int) -> dict:
    from embeval.sim.textures import TEXTURES

    u = rng.uniform()
    kinds = sorted(TEXTURES)
    return {"contrast_pct": CONTRAST.magnitude(level, u), "pattern": kinds[int(rng.integers(len(kinds)))],
            "pattern_seed": int(rng.integers(0, 2**31 - 1))}


def pattern_image(mean_rgb, params: dict) -> np.ndarray:
    """RGB uint8 256x256: the procedural pattern ``params["pattern"]`` (its luminance, zero mean, unit spread)
    at ``params["contrast_pct"]`` % RMS of full scale (luminance) around ``mean_rgb`` (0..1); the spread and the
    offset are corrected for what clipping to 0..255 takes away (a few fixed-point steps)."""
    from embeval.sim.textures import procedural

    lum = procedural(params["pattern"], params["pattern_seed"]).astype(np.float64).mean(axis=2)
    z = (lum - lum.mean()) / max(float(lum.std()), 1e-9)
    mean = np.asarray(mean_rgb, float)[:3] * 255.0
    want = params["contrast_pct"] / 100.0 * 255.0
    gain, shift = want, np.zeros(3)
    for _ in range(8):
        img = np.clip(mean[None, None] + shift + gain * z[..., None], 0, 255)
        got = img.mean(axis=2).std()
        shift += mean - img.reshape(-1, 3).mean(axis=0)
        gain *= want / max(got, 1e-9)
    return np.clip(np.rint(mean[None, None] + shift + gain * z[..., None]), 0, 255).astype(np.uint8)


def file_for(mean_rgb, params: dict) -> str:
    from embeval.sim.textures import texture_file

    return texture_file(pattern_image(mean_rgb, params))
