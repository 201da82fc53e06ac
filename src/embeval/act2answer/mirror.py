"""A render-only copy of a simulated cell that follows published state (the camera of a separate process).

With ``ros2 launch`` every node is its own process, so the camera node cannot render the arm node's
pybullet world. :class:`CellMirror` loads the same scene YAML into its own kinematic workcell (no
physics), sets the arm's joints and gripper from ``/joint_states`` and each object's pose from its
topic (the Act2Answer cube from ``/embeval/act2answer/cube_pose``), and renders the scene cameras.
Frames: ``base`` (metres), quaternions xyzw, joints in radians, gripper 0..1 (1 = open).
"""
from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np


class CellMirror:
    """A kinematic :class:`~embeval.sim.workcell.Workcell` showing what another process simulates."""

    def __init__(self, scene=None):
        from embeval.sim.scene import SceneSpec
        from embeval.sim.workcell import SimConfig, Workcell

        self.lock = threading.Lock()
        self.cell = Workcell(SimConfig(mode="kinematic"))
        self.scene_path = ""
        self.cell.load(scene or SceneSpec(name="empty"))

    def load(self, scene: str | Path) -> None:
        """Load a scene YAML (the arm process loads the same file); the robot starts at the scene's home."""
        from embeval.sim.scene import SceneSpec

        with self.lock:
            self.cell.load(SceneSpec.from_yaml(scene))
            self.scene_path = str(scene)

    def set_robot(self, q: Sequence[float], gripper: float | None = None) -> None:
        """Joint angles (rad, UR order shoulder_pan..wrist_3) and gripper opening (0..1, None: unchanged)."""
        with self.lock:
            self.cell.set_robot(q, gripper)

    def set_object(self, name: str, position: Sequence[float], quaternion: Sequence[float] = (0, 0, 0, 1)) -> bool:
        """Place object ``name`` (m, quaternion xyzw); False when the loaded scene has no such object."""
        with self.lock:
            if not self.cell.has_object(name):
                return False
            self.cell.set_object_pose(name, position, quaternion)
            return True

    def render(self, camera: str = "third_person", width: int | None = None, height: int | None = None) -> np.ndarray:
        """RGB uint8 (H, W, 3) image of a scene camera."""
        with self.lock:
            return self.cell.render(camera, width, height)

    def close(self) -> None:
        with self.lock:
            self.cell.close()
