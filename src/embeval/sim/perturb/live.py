"""Camera-side scene perturbations on a live stream: the camera node's ``perturb`` parameter on the ``sim`` source.

:class:`PerturbedRenderer` renders a workcell through camera-side axes (camera pose, field of view, lights;
:data:`CAMERA_SIDE_AXES`) drawn from the episode seed, without changing the world the arm acts in.
:func:`check_live_perturb` refuses them for the other sources in one line (a real camera cannot be moved, nor its
lights changed, by software).
"""
from __future__ import annotations

import contextlib
from dataclasses import replace
from typing import Any

import numpy as np

from embeval.errors import ConfigError
from embeval.sim.perturb import Perturbations

#: scene axes that change only what the camera sees of the world (where it stands, its lens, the lights): the ones
#: a live stream of the sim can apply while the arm acts in the unchanged world
CAMERA_SIDE_AXES = ("camera_pose", "fov", "light_color", "light_direction", "light_intensity")
#: source kind -> why camera-side axes cannot be applied to it
NOT_MOVABLE = {
    "realsense": "a real camera cannot be moved, zoomed or relit by software",
    "folder": "recorded images cannot be re-rendered from another camera pose or under other lights",
    "bag": "recorded images cannot be re-rendered from another camera pose or under other lights",
    "synthetic": "the synthetic tabletop is a flat numpy drawing with no 3-D camera or lights",
}


def check_live_perturb(words, source: str) -> Perturbations | None:
    """The camera node's ``perturb`` words (``["camera_pose:3", "light_intensity:2"]``, or "a:1,b:2") for image
    source ``source``: None when empty; the parsed :class:`~embeval.sim.perturb.Perturbations` for ``sim``; else a
    one-line ConfigError naming why (a world axis: not the camera's to change; a real or recorded source: not
    movable, apply image distortions instead)."""
    if isinstance(words, (list, tuple)):
        words = [w for w in words if str(w).strip()]
    pert = Perturbations.parse(words or None)
    if not pert:
        return None
    for p in pert:
        if p.axis not in CAMERA_SIDE_AXES:
            raise ConfigError(f"perturb {p}: the camera node applies only camera-side axes ({', '.join(CAMERA_SIDE_AXES)});"
                              f" {p.axis} changes the world, so give it to the simulated episode "
                              f"(`embeval sim episodes --perturb {p}`)")
    if source != "sim":
        why = NOT_MOVABLE.get(source, f"source {source!r} is not the simulated workcell")
        raise ConfigError(f"perturb {pert}: not applicable to source {source}: {why}; apply image distortions instead "
                          f"(the distortion node's distortion/level parameters, `embeval distort list`)")
    return pert


class PerturbedRenderer:
    """``renderer(camera)`` -> RGB uint8 of ``cell`` (a :class:`~embeval.sim.workcell.Workcell`) seen through
    ``perturb`` (camera-side axes only) drawn for episode ``seed``, at ``width`` x ``height`` px (None: the scene
    camera's own size).

    Only the cameras and the lighting of the loaded scene are replaced, for the duration of one render (under
    ``lock``, the lock that guards ``cell``): object and robot poses stay the live ones. The draw is redone when
    ``cell`` loads another scene. :attr:`drawn` holds what each axis drew (``{axis: {"level", params...}}``)."""

    def __init__(self, cell, perturb: Perturbations, seed: int = 0, width: int | None = None,
                 height: int | None = None, lock=None):
        bad = [str(p) for p in perturb if p.axis not in CAMERA_SIDE_AXES]
        if bad:
            raise ConfigError(f"perturb {', '.join(bad)}: a live render applies only {', '.join(CAMERA_SIDE_AXES)}")
        self.cell, self.perturb, self.seed = cell, perturb, int(seed)
        self.width, self.height = width, height
        self.lock = lock if lock is not None else contextlib.nullcontext()
        self._base = self._view = None
        self.drawn: dict[str, Any] = {}

    def view(self):
        """The perturbed copy of the cell's current scene (drawn again when the scene object changed)."""
        base = self.cell.scene
        if base is not self._base:
            prep = self.perturb.prepare(base, None, self.seed)
            self._view = replace(base, cameras=prep.scene.cameras, lighting=prep.scene.lighting)
            self._base, self.drawn = base, prep.record()
        return self._view

    def __call__(self, camera: str) -> np.ndarray:
        with self.lock:
            base = self.cell.scene
            view = self.view()
            self.cell.scene = view
            try:
                return self.cell.render(camera, self.width, self.height)
            finally:
                self.cell.scene = base

    render = __call__
