"""light_direction: the direction towards the scene light turned by the level's degrees about a seeded axis
perpendicular to it (shading and highlights move)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from embeval.sim.perturb._util import rotate, unit_vector
from embeval.sim.perturb.axis import Axis, Quantity

TURN = Quantity("direction change", "deg", ((10, 20), (20, 35), (35, 50), (50, 65), (65, 80)))


def sample(rng, level, scene, task):
    u = rng.uniform()
    axis = unit_vector(rng, perpendicular_to=np.asarray(scene.lighting.direction))
    return {"direction_change_deg": TURN.magnitude(level, u), "axis": axis.tolist()}


def apply(scene, task, params):
    L = scene.lighting
    d = rotate(L.direction, params["axis"], params["direction_change_deg"])
    return replace(scene, lighting=replace(L, direction=tuple(d.tolist()))), task


AXIS = Axis("light_direction", (TURN,), sample, scene=apply, changes="image",
            description="light direction turned (deg about a seeded axis perpendicular to it)",
            direction="angle between the new and the scene's light direction",
            note=lambda p: f"light turned {p['direction_change_deg']:.0f} deg")
