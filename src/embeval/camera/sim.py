"""Simulated camera sources.

- :class:`SimSource` wraps any renderer with ``render(camera) -> RGB uint8`` (the pybullet workcell
  of :mod:`embeval.sim`) so the camera node publishes what the simulated arm sees.
  With the camera node's ``perturb`` parameter it wraps a :class:`embeval.sim.perturb.live.PerturbedRenderer`
  (camera-side scene perturbations on the live stream; the simulator floor, above this one).
- :class:`SyntheticSource` is a cheap, deterministic numpy scene (table, a cube, the gripper as a
  disc at the TCP's position): no pybullet, constant cost per frame; the latency benchmark and
  the graph tests use it so that they measure the graph, not the renderer.
"""
from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from embeval.action import check_image, gripper_closed
from embeval.camera.base import Frame, Intrinsics

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
