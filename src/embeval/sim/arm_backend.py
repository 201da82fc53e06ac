"""The simulated workcell as an :class:`~embeval.robot.base.ArmBackend` (what the ROS arm node drives with
``backend:=sim``), and how one 7-DoF delta action is executed on it.

Example::

    from embeval.sim.arm_backend import SimArmBackend
    arm = SimArmBackend()                       # empty table scene; or SimArmBackend(scene=SceneSpec(...))
    s = arm.move_tcp([0.5, 0.1, 0.2, 3.14159, 0, 0])
    print(s.tcp_pose, s.safety.ok)

Stepping: how one 7-DoF delta action is executed on the simulated workcell: :meth:`embeval.sim.env.SimEnv.step`
(in process) runs :func:`embeval.robot.base.execute_step`, the rule every arm backend shares (the ROS arm
node's ``backend:=sim``, mock and ur_rtde through :class:`embeval.control.ArmCommander`), on a
:class:`SimArmBackend` view of the cell, so both give the same TCP, gripper and
object poses.

Order and timing: a step longer than ``limits.max_step_translation`` trips a protective stop and
nothing moves; otherwise the TCP moves in a straight line to the delta's target (frame ``base`` or
``tool0``; at ``speed`` m/s, default ``SimConfig.tcp_speed``, lasting at least ``1 / control_hz``
seconds) or, for a zero delta (every component within 1e-9), holds still for ``1 / control_hz``
seconds of physics; then, unless the move stopped the arm, the gripper acts by :func:`actuate_gripper`.
"""
from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence

import numpy as np

from embeval.action import Action, gripper_command
from embeval.robot.base import ArmState, SafetyStatus, as_gripper, execute_step
from embeval.robot.safety import SafetyLimits, check_step, check_step_rotation
from embeval.sim.scene import SceneSpec
from embeval.sim.workcell import SimConfig, Workcell, cell_verdict


class SimArmBackend:
    """ArmBackend over a pybullet :class:`~embeval.sim.workcell.Workcell` (blocking moves in sim time).

    The scene: ``scene`` (a :class:`SceneSpec`), or the generated scene of ``task`` (a verb) and
    ``seed``, or an empty table. Calls are serialised with a lock, so a camera thread may
    :meth:`render` while another thread commands the arm. ``control_hz`` (default
    ``SimConfig.control_hz``) sets the action rate of a new cell: one action lasts at least ``1 / control_hz`` s.
    """

    name = "sim"

    def __init__(self, scene: SceneSpec | None = None, config: SimConfig | None = None, limits: SafetyLimits | None = None,
                 cell: Workcell | None = None, task: str | None = None, seed: int = 0, control_hz: float | None = None):
        self.lock = threading.RLock()
        if control_hz is not None and cell is None:
            config = dataclasses.replace(config or SimConfig(), control_hz=float(control_hz))
        self.cell = cell or Workcell(config, limits)
        if scene is None and task is not None:
            from embeval.sim.tasks import make_task

            scene = make_task(task, int(seed))[0]
        if cell is None or cell.scene is None or scene is not None:
            self.cell.load(scene or SceneSpec(name="empty"))
        self.home_q = self.cell.q.copy()

    @classmethod
    def view(cls, cell: Workcell) -> SimArmBackend:
        """The backend over an already loaded ``cell`` as it is (no scene load, no reset): how
        :meth:`embeval.sim.env.SimEnv.step` runs :func:`embeval.robot.base.execute_step` on its own cell."""
        arm = cls.__new__(cls)
        arm.lock, arm.cell, arm.home_q = threading.RLock(), cell, cell.q.copy()
        return arm

    @property
    def control_hz(self) -> float:
        """The cell's action rate (Hz, ``SimConfig.control_hz``)."""
        return float(self.cell.config.control_hz)

    def state(self) -> ArmState:
        with self.lock:
            c = self.cell
            return ArmState(joint_positions=c.q.copy(), tcp_pose=c.tcp_pose(), gripper=float(c.gripper),
                            safety=c.safety.status, timestamp=c.time)

    def move_joints(self, q: Sequence[float], speed: float | None = None) -> ArmState:
        with self.lock:
            self.cell.move_joints(q, speed)
            return self.state()

    def move_tcp(self, pose: Sequence[float], speed: float | None = None, min_duration: float = 0.0) -> ArmState:
        with self.lock:
            self.cell.move_tcp(pose, speed, min_duration)
            return self.state()

    def hold(self, seconds: float) -> ArmState:
        """Hold the arm still for ``seconds`` of physics (objects keep moving)."""
        with self.lock:
            self.cell.safety.require_ok()
            self.cell.idle(float(seconds))
            return self.state()

    def set_gripper(self, opening: float) -> ArmState:
        """The gripper rule of :meth:`embeval.sim.env.SimEnv.step`: ``opening`` (0 closed .. 1 open) acts only
        when it lies on the other side of 0.5 than the current opening; then the fingers close fully (0) or
        open fully (1), stopping at the width of an object they grasp (a held 4 cm cube reads about 0.47).
        Any other command leaves the fingers where they are, so a closed command while holding keeps the grasp.
        """
        g = as_gripper(opening)
        with self.lock:
            self.cell.safety.require_ok()
            actuate_gripper(self.cell, g)
            return self.state()

    def protective_stop(self, reason: str) -> ArmState:
        """Latch a protective stop from outside (watchdog, operator)."""
        with self.lock:
            self.cell.safety.trip(reason)
            return self.state()

    def load_scene(self, scene: SceneSpec) -> np.ndarray:
        """Load ``scene`` into the cell (robot at the scene's home, safety cleared); the home joints (rad) become
        :attr:`home_q` and are returned."""
        with self.lock:
            self.cell.load(scene)
            self.home_q = self.cell.q.copy()
            return self.home_q.copy()

    def grasp_cube(self) -> None:
        """The Act2Answer grasped start: the scene's cube in the closed gripper at the TCP
        (:func:`embeval.sim.workcell.grasp_cube`)."""
        from embeval.sim.workcell import grasp_cube

        with self.lock:
            grasp_cube(self.cell)

    def settle(self, seconds: float) -> None:
        """Run ``seconds`` of physics with the arm still (objects come to rest); nothing while stopped."""
        with self.lock:
            if self.cell.safety.ok and seconds > 0:
                self.cell.idle(float(seconds))

    def object_pose(self, name: str) -> tuple[np.ndarray, np.ndarray] | None:
        """(position (3,) m, quaternion xyzw (4,)) of object ``name`` in frame base; None when the scene has none."""
        with self.lock:
            return self.cell.object_pose(name) if self.cell.has_object(name) else None

    def verdict(self, task, scene: SceneSpec) -> dict:
        """The task's success predicate on the cell's state (:func:`embeval.sim.workcell.cell_verdict`, source sim)."""

        with self.lock:
            return cell_verdict(self.cell, task, scene, "sim")

    def render(self, camera: str = "third_person", width: int | None = None, height: int | None = None) -> np.ndarray:
        """RGB uint8 image of a scene camera (``third_person`` or ``wrist``)."""
        with self.lock:
            return self.cell.render(camera, width, height)

    def apply_action(self, action: Action | Sequence[float], frame: str = "base", speed: float | None = None) -> ArmState:
        """Execute one 7-DoF delta action ``[dx,dy,dz,droll,dpitch,dyaw,gripper]`` (``frame`` base or tool0) exactly
        as :meth:`embeval.sim.env.SimEnv.step` does (:func:`execute_action`): move at ``speed``
        m/s (default ``SimConfig.tcp_speed``) lasting at least 1 / ``control_hz`` s, or hold still that long on a
        zero delta, then the gripper rule. :class:`embeval.control.ArmCommander` runs the same rule
        (:func:`embeval.robot.base.execute_step`) on every backend. Raises :class:`~embeval.errors.SafetyError` while stopped; a too-long step trips a protective stop."""
        a = action if isinstance(action, Action) else Action(action)
        with self.lock:
            self.cell.safety.require_ok()
            execute_action(self.cell, a, frame, speed)
            return self.state()

    def stop(self) -> ArmState:
        return self.state()  # moves are blocking: nothing is in motion between calls

    def reset_safety(self) -> ArmState:
        with self.lock:
            self.cell.reset_safety()
            return self.state()

    def close(self) -> None:
        with self.lock:
            self.cell.close()


def actuate_gripper(cell: Workcell, opening: float) -> None:
    """The gripper rule: ``opening`` (0 closed .. 1 open) acts only when it lies on the other side of 0.5
    than the cell's current opening; then the fingers close fully (0) or open fully (1), stopping at the
    width of an object they grasp. Any other command leaves the fingers where they are."""
    target = gripper_command(opening, cell.gripper)
    if target is not None:
        cell.set_gripper(target)


def execute_action(cell: Workcell, action: Action, frame: str = "base", speed: float | None = None) -> SafetyStatus:
    """Execute one delta ``action`` on ``cell`` (see the module docstring); returns the cell's safety status.

    The caller checks first that the cell is not stopped (a stopped cell refuses motion).
    """
    pre = check_step(action.translation, cell.limits)
    if pre.ok:
        pre = check_step_rotation(action.vector[3:6], cell.limits)
    if pre.stopped:
        return cell.safety.trip(pre)
    execute_step(SimArmBackend.view(cell), action, frame, speed)
    return cell.safety.status
