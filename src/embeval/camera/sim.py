"""Simulated camera sources.

- :class:`SimSource` wraps any renderer with ``render(camera) -> RGB uint8`` (the pybullet workcell
  of :mod:`embeval.sim`) so the camera node publishes what the simulated arm sees.
- :class:`PerturbedRenderer` renders a workcell through camera-side scene perturbations (camera pose, field of
  view, lights; :data:`CAMERA_SIDE_AXES`) drawn from the episode seed, without changing the world the arm acts
  in: the camera node's ``perturb`` parameter on the ``sim`` source. :func:`check_live_perturb` refuses them
  for the other sources in one line (a real camera cannot be moved, nor its lights changed, by software).
- :class:`SyntheticSource` is a cheap, deterministic numpy scene (table, a cube, the gripper as a
  disc at the TCP's position): no pybullet, constant cost per frame; the latency benchmark and
  the graph tests use it so that they measure the graph, not the renderer.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from embeval.action import check_image, gripper_closed
from embeval.camera.base import Frame, Intrinsics
from embeval.errors import ConfigError

if TYPE_CHECKING:
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
    from embeval.sim.perturb import Perturbations

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


class SimSource:
    """Frames from ``renderer.render(camera)`` (or ``renderer(camera)``), stamped with wall time."""

    name = "sim"

    def __init__(self, renderer: Any, camera: str = "third_person", intrinsics: Intrinsics | None = None):
        self.renderer, self.camera = renderer, camera
        self._render: Callable[[str], np.ndarray] = getattr(renderer, "render", renderer)
        first = check_image(np.asarray(self._render(camera)), f"render({camera!r})")
        self.intrinsics = intrinsics or Intrinsics.from_fov(first.shape[1], first.shape[0])
        self._n = 0

    def read(self) -> Frame:
        img = check_image(np.asarray(self._render(self.camera)), f"render({self.camera!r})")
        self._n += 1
        return Frame(img, time.time_ns(), self.intrinsics, self._n - 1)

    def close(self) -> None:
        pass


class SyntheticSource:
    """A top-down numpy render of a tabletop: ``width`` x ``height`` RGB, deterministic given ``seed``.

    Call :meth:`set_tcp` with the arm's TCP position (m, frame base) to draw the gripper where
    the arm is; the view spans x in [0.1, 0.9] m (image up) and y in [-0.5, 0.5] m (image left).
    """

    name = "synthetic"

    def __init__(self, width: int = 640, height: int = 480, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.intrinsics = Intrinsics.from_fov(width, height)
        base = np.empty((height, width, 3), dtype=np.float32)
        base[:] = np.array([150, 110, 70], dtype=np.float32)  # table
        base += rng.normal(0, 6, size=(height, width, 1)).astype(np.float32)  # wood grain
        self._base = np.clip(base, 0, 255).astype(np.uint8)
        self.cube_xy = np.array([0.55 + rng.uniform(-0.1, 0.1), rng.uniform(-0.2, 0.2)])
        self.tcp_xy = np.array([0.45, 0.0])
        self.gripper = 1.0
        yy, xx = np.mgrid[0:height, 0:width]
        self._yy, self._xx = yy, xx
        self._n = 0

    def _px(self, xy) -> tuple[float, float]:
        h, w = self._base.shape[:2]
        row = (0.9 - xy[0]) / 0.8 * (h - 1)
        col = (0.5 - xy[1]) / 1.0 * (w - 1)
        return row, col

    def set_tcp(self, tcp_pose, gripper: float | None = None) -> None:
        self.tcp_xy = np.asarray(tcp_pose, dtype=np.float64)[:2].copy()
        if gripper is not None:
            self.gripper = float(gripper)

    def render(self, camera: str = "third_person") -> np.ndarray:
        img = self._base.copy()
        h = img.shape[0]
        s = max(2, h // 24)
        r, c = (int(round(v)) for v in self._px(self.cube_xy))
        img[max(r - s, 0): r + s, max(c - s, 0): c + s] = (200, 30, 30)
        r, c = self._px(self.tcp_xy)
        rad = s * (1.0 if gripper_closed(self.gripper) else 1.5)
        r0, r1 = int(max(r - rad, 0)), int(min(r + rad + 1, h))
        c0, c1 = int(max(c - rad, 0)), int(min(c + rad + 1, img.shape[1]))
        if r0 < r1 and c0 < c1:
            disc = (self._yy[r0:r1, c0:c1] - r) ** 2 + (self._xx[r0:r1, c0:c1] - c) ** 2 <= rad * rad
            img[r0:r1, c0:c1][disc] = (60, 60, 70)
        return img

    def read(self) -> Frame:
        self._n += 1
        return Frame(self.render(), time.time_ns(), self.intrinsics, self._n - 1)

    def close(self) -> None:
        pass
