"""light_color: the scene light's colour tinted to a correlated colour temperature (kelvin) warmer or cooler
(seeded sign) than daylight (6500 K) by the level's range: the light colour is multiplied by the RGB of that
temperature on the Planckian locus relative to 6500 K (largest channel 1)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from embeval.sim.perturb._util import sign
from embeval.sim.perturb.axis import Axis, Quantity

DAYLIGHT_K = 6500.0
CHANGE = Quantity("colour temperature change", "K", ((300, 700), (700, 1500), (1500, 2500), (2500, 3500), (3500, 4500)),
                  signed=True)

#: XYZ -> linear sRGB (D65)
_XYZ_TO_RGB = np.array([[3.2406, -1.5372, -0.4986], [-0.9689, 1.8758, 0.0415], [0.0557, -0.2040, 1.0570]])


def planckian_xy(kelvin: float) -> tuple[float, float]:
    """CIE 1931 chromaticity (x, y) of a black body at ``kelvin`` (1667..25000 K; Kim et al.'s cubic fit)."""
    t = float(kelvin)
    if not 1667 <= t <= 25000:
        raise ValueError(f"colour temperature {t} K outside 1667..25000 K")
    if t <= 4000:
        x = -0.2661239e9 / t**3 - 0.2343589e6 / t**2 + 0.8776956e3 / t + 0.179910
    else:
        x = -3.0258469e9 / t**3 + 2.1070379e6 / t**2 + 0.2226347e3 / t + 0.240390
    if t <= 2222:
        y = -1.1063814 * x**3 - 1.34811020 * x**2 + 2.18555832 * x - 0.20219683
    elif t <= 4000:
        y = -0.9549476 * x**3 - 1.37418593 * x**2 + 2.09137015 * x - 0.16748867
    else:
        y = 3.0817580 * x**3 - 5.87338670 * x**2 + 3.75112997 * x - 0.37001483
    return x, y


def _linear_rgb(kelvin: float) -> np.ndarray:
    x, y = planckian_xy(kelvin)
    return _XYZ_TO_RGB @ np.array([x / y, 1.0, (1 - x - y) / y])


def tint(kelvin: float) -> np.ndarray:
    """RGB gain (3,) of a ``kelvin`` light relative to 6500 K, largest channel 1 (6500 K -> (1, 1, 1))."""
    g = np.clip(_linear_rgb(kelvin) / _linear_rgb(DAYLIGHT_K), 0.0, None)
    return g / g.max()


def sample(rng, level, scene, task):
    u, s = rng.uniform(), sign(rng)
    dk = s * CHANGE.magnitude(level, u)
    return {"temperature_change_k": dk, "temperature_k": DAYLIGHT_K + dk}


def apply(scene, task, params):
    L = scene.lighting
    color = np.asarray(L.color) * tint(params["temperature_k"])
    return replace(scene, lighting=replace(L, color=tuple(color.tolist()))), task


AXIS = Axis("light_color", (CHANGE,), sample, scene=apply, changes="image",
            description="light tinted warmer or cooler than 6500 K daylight (K, seeded sign)",
            direction="red/blue balance of the image: redder when warmer, bluer when cooler",
            note=lambda p: f"{p['temperature_k']:.0f} K")
