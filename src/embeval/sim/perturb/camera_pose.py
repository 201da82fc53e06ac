"""camera_pose: the world-mounted cameras (third_person) moved by a seeded translation (cm) and turned by a
seeded rotation (degrees) about their own position; the wrist camera stays on the TCP."""
from __future__ import annotations

import numpy as np

from embeval.sim.perturb._util import rotate, unit_vector, with_cameras, world_cameras
from embeval.sim.perturb.axis import Axis, Quantity

TRANSLATION = Quantity("translation", "cm", ((1, 2), (2, 4), (4, 7), (7, 11), (11, 16)))
ROTATION = Quantity("rotation", "deg", ((1, 2), (2, 4), (4, 7), (7, 11), (11, 16)))


def sample(rng, level, scene, task):
    ut, ur = rng.uniform(size=2)
    direction, axis = unit_vector(rng), unit_vector(rng)
    return {"translation_cm": TRANSLATION.magnitude(level, ut), "rotation_deg": ROTATION.magnitude(level, ur),
            "direction": direction.tolist(), "axis": axis.tolist(), "cameras": world_cameras(scene)}


def apply(scene, task, params):
    from dataclasses import replace

    t = np.asarray(params["direction"]) * params["translation_cm"] / 100.0

    def move(cam):
        pos = np.asarray(cam.position) + t
        view = rotate(np.asarray(cam.target) - np.asarray(cam.position), params["axis"], params["rotation_deg"])
        up = rotate(cam.up, params["axis"], params["rotation_deg"])
        return replace(cam, position=tuple(pos.tolist()), target=tuple((pos + view).tolist()), up=tuple(up.tolist()))

    return with_cameras(scene, params["cameras"], move), task


AXIS = Axis("camera_pose", (TRANSLATION, ROTATION), sample, scene=apply, changes="image",
            description="world cameras moved (cm, seeded direction) and turned (deg, seeded axis)",
            direction="camera displacement from the calibrated pose",
            note=lambda p: f"{p['translation_cm']:.1f} cm, {p['rotation_deg']:.1f} deg")
