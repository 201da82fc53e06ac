"""The pybullet workcell (:class:`embeval.sim.workcell.Workcell`) behind the ArmBackend protocol.

A thin adapter: motion, gripper and safety are the workcell's own (contacts, workspace box, joint
limits latch a protective stop); this class returns :class:`~embeval.robot.base.ArmState` snapshots
and serialises access with a lock, so a camera thread can :meth:`render` while the arm moves.
Frame ``base``, metres, radians; time is simulation time.
"""
from __future__ import annotations

import threading
from typing import Sequence

import numpy as np

from embeval.robot.base import ArmState
from embeval.robot.safety import SafetyLimits


class WorkcellArm:
    """A simulated UR5 in a generated task scene (``task`` verb, ``seed``)."""

    name = "sim"

    def __init__(self, limits: SafetyLimits | None = None, task: str = "Pick", seed: int = 0):
        from embeval.sim.env import SimEnv

        self.env = SimEnv(limits=limits)
        self.env.reset(seed=int(seed), task=task)
        self.cell = self.env.cell
        self.home_q = self.cell.q.copy()
        self.lock = threading.RLock()

    def state(self) -> ArmState:
        with self.lock:
            c = self.cell
            return ArmState(c.q.copy(), c.tcp_pose(), float(c.gripper), c.status(), float(c.time))

    def move_tcp(self, pose: Sequence[float], speed: float | None = None) -> ArmState:
        with self.lock:
            self.cell.move_tcp(pose, speed)
            return self.state()

    def move_joints(self, q: Sequence[float], speed: float | None = None) -> ArmState:
        with self.lock:
            self.cell.move_joints(q, speed)
            return self.state()

    def set_gripper(self, opening: float) -> ArmState:
        with self.lock:
            self.cell.set_gripper(opening)
            return self.state()

    def stop(self) -> ArmState:
        return self.state()

    def protective_stop(self, reason: str) -> ArmState:
        with self.lock:
            self.cell.safety.trip(reason)
            return self.state()

    def reset_safety(self) -> ArmState:
        with self.lock:
            self.cell.reset_safety()
            return self.state()

    def render(self, camera: str = "third_person", width: int | None = None, height: int | None = None) -> np.ndarray:
        with self.lock:
            return self.cell.render(camera, width, height)

    def close(self) -> None:
        with self.lock:
            self.env.close()
