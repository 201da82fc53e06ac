"""light_intensity: the scene light dimmed or brightened (seeded sign) by the level's percentage: the ambient,
diffuse and specular coefficients of the renderer's light are scaled by ``1 ± change / 100``."""
from __future__ import annotations

from dataclasses import replace

from embeval.sim.perturb._util import sign
from embeval.sim.perturb.axis import Axis, Quantity

CHANGE = Quantity("intensity change", "%", ((10, 20), (20, 35), (35, 50), (50, 65), (65, 80)), signed=True)


def sample(rng, level, scene, task):
    u, s = rng.uniform(), sign(rng)
    return {"intensity_change_pct": s * CHANGE.magnitude(level, u)}


def apply(scene, task, params):
    k = 1.0 + params["intensity_change_pct"] / 100.0
    L = scene.lighting
    return replace(scene, lighting=replace(L, ambient=L.ambient * k, diffuse=L.diffuse * k, specular=L.specular * k)), task


AXIS = Axis("light_intensity", (CHANGE,), sample, scene=apply, changes="image",
            description="light dimmed or brightened (% of the scene's ambient, diffuse and specular, seeded sign)",
            direction="mean image brightness: falls when dimmed, rises when brightened",
            note=lambda p: f"light {p['intensity_change_pct']:+.0f} %")
