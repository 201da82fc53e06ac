"""Helpers shared by the axis modules: seeded unit vectors and signs, spec copies, world-camera selection."""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from embeval.sim.scene import CameraSpec, SceneSpec


def unit_vector(rng: np.random.Generator, perpendicular_to: np.ndarray | None = None) -> np.ndarray:
    """A seeded random unit vector (3,), optionally perpendicular to ``perpendicular_to``."""
    v = rng.normal(size=3)
    if perpendicular_to is not None:
        n = np.asarray(perpendicular_to, float) / np.linalg.norm(perpendicular_to)
        v = v - (v @ n) * n
    return v / np.linalg.norm(v)


def sign(rng: np.random.Generator) -> int:
    """-1 or +1, seeded."""
    return -1 if rng.uniform() < 0.5 else 1


def world_cameras(scene: SceneSpec) -> list[str]:
    """Names of the scene's world-mounted cameras (the wrist camera rides on the TCP and is left as mounted)."""
    return [c.name for c in scene.cameras if c.mount == "world"]


def with_cameras(scene: SceneSpec, names: list[str], change) -> SceneSpec:
    """A copy of ``scene`` whose cameras named in ``names`` are replaced by ``change(camera)``."""
    cams: list[CameraSpec] = [change(c) if c.name in names else c for c in scene.cameras]
    return replace(scene, cameras=cams)


def rotate(v, axis, degrees: float) -> np.ndarray:
    """``v`` rotated about unit ``axis`` by ``degrees``."""
    from embeval.rotations import Turn, apply

    return apply(Turn.rotvec(np.radians(degrees) * np.asarray(axis, float)), np.asarray(v, float))
