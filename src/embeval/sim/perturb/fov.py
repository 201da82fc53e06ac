"""fov: the horizontal field of view of the world-mounted cameras narrowed or widened (seeded sign) by the
level's degrees; focal lengths change together (square pixels kept), the principal point stays."""
from __future__ import annotations

import math

from embeval.sim.perturb._util import sign, with_cameras, world_cameras
from embeval.sim.perturb.axis import Axis, Quantity

CHANGE = Quantity("horizontal FOV change", "deg", ((2, 4), (4, 8), (8, 13), (13, 19), (19, 26)), signed=True)


def hfov_deg(cam) -> float:
    """Horizontal field of view (degrees) of a pinhole camera spec."""
    return math.degrees(2 * math.atan(cam.width / (2 * cam.fx)))


def sample(rng, level, scene, task):
    u, s = rng.uniform(), sign(rng)
    return {"fov_change_deg": s * CHANGE.magnitude(level, u), "cameras": world_cameras(scene)}


def apply(scene, task, params):
    from dataclasses import replace

    def widen(cam):
        new = math.radians(hfov_deg(cam) + params["fov_change_deg"])
        fx = cam.width / (2 * math.tan(new / 2))
        return replace(cam, fx=fx, fy=cam.fy * fx / cam.fx)

    return with_cameras(scene, params["cameras"], widen), task


AXIS = Axis("fov", (CHANGE,), sample, scene=apply, changes="image",
            description="world cameras' horizontal field of view narrowed or widened (deg, seeded sign)",
            direction="apparent object size: smaller when wider, larger when narrower",
            note=lambda p: f"FOV {p['fov_change_deg']:+.1f} deg")
