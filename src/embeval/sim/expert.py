"""Scripted expert: solves every implemented task from privileged state with Cartesian moves.

The expert plans a list of stages (TCP waypoint + gripper) per verb, with the planner of the verb's
:class:`~embeval.sim.task_registry.Task` record (``embeval/sim/tasks/<verb>.py``, built from the stage
helpers here: :func:`grasp_stages`, :func:`lift`, :func:`place_at`, :func:`vertical`), re-reading object
poses when a stage starts (closed loop), and emits 7-DoF delta actions in frame ``base`` clipped to
``max_step`` metres / ``max_rot`` radians per step: exactly what a policy would output, so its
episodes serve as demonstrations. Grasps are top-down (TCP z axis pointing down), fingers closing
along the TCP y axis.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from embeval.action import Action, ActionSpec, Observation, gripper_closed, pose_delta
from embeval.errors import ConfigError
from embeval.rotations import Turn, compose, quat_to_euler
from embeval.sim.task_registry import Planner, TaskTable

OPEN, CLOSED = 1.0, 0.0


def topdown(xyz, yaw: float = 0.0) -> np.ndarray:
    """TCP pose ``[x,y,z,rx,ry,rz]`` pointing straight down, rotated by ``yaw`` about z."""
    return np.concatenate([np.asarray(xyz, dtype=float), compose(Turn.euler("z", yaw), Turn.euler("x", math.pi))])


def fold_yaw(yaw: float, period: float = math.pi / 2) -> float:
    """Equivalent yaw of a symmetric object nearest 0 (cubes: period pi/2)."""
    return float((yaw + period / 2) % period - period / 2)


@dataclass
class Stage:
    """Go to ``pose()`` (computed when the stage starts) with the gripper at ``gripper``."""

    name: str
    pose: Callable[[], np.ndarray] | None  # None: stay (gripper-only stage)
    gripper: float
    wait: int = 0  # extra steps to hold after reaching
    #: reached within this many metres / radians (None: the expert's ``tol`` / 0.01 rad). Approach
    #: waypoints in free space (above the object, above the goal) are loose: the next stage's
    #: straight line absorbs the rest, and a cloned policy, which cannot be millimetre-precise,
    #: sees the expert move on from where it will be too (no hovering short of a 2 mm target).
    tol: float | None = None
    rot_tol: float | None = None
    max_step: float | None = None  # m per step (None: the expert's ``max_step``); final approaches go slower


LOOSE, LOOSE_ROT = 0.015, 0.15  # m, rad: tolerance of approach waypoints
SLOW = 0.025  # m per step of the final descent to a grasp or a release


class ScriptedExpert:
    """Expert policy for a :class:`~embeval.sim.env.SimEnv` episode (a :class:`~embeval.subjects.protocols.Policy`)."""

    id = "scripted-expert"
    action_spec = ActionSpec(frame="base")

    def __init__(self, env, max_step: float = 0.05, max_rot: float = 0.3, tol: float = 0.002):
        self.env, self.max_step, self.max_rot, self.tol = env, max_step, max_rot, tol
        task = env.task
        if task is None:
            raise ConfigError("reset the environment before creating the expert")
        if env.action_spec.frame != "base":
            raise ConfigError("the scripted expert emits frame-base deltas; use SimEnv(action_frame='base')")
        if task.verb not in PLANNERS:
            raise ConfigError(f"the scripted expert cannot solve {task.verb!r} (implemented: {', '.join(PLANNERS)})")
        self.stages: list[Stage] = PLANNERS[task.verb](self)
        self.i = 0
        self._target: np.ndarray | None = None
        self._held = 0

    # Policy protocol ----------------------------------------------------------------------
    def reset(self, instruction: str = "") -> None:
        self.__init__(self.env, self.max_step, self.max_rot, self.tol)

    @property
    def finished(self) -> bool:
        return self.i >= len(self.stages)

    def act(self, observation: Observation | None = None) -> Action:
        cell = self.env.cell
        while not self.finished:
            st = self.stages[self.i]
            if self._target is None:
                self._target = cell.tcp_pose() if st.pose is None else st.pose()
            cur = cell.tcp_pose()
            d = pose_delta(cur, self._target)
            grip_ok = gripper_closed(cell.gripper) == gripper_closed(st.gripper)
            tol = self.tol if st.tol is None else st.tol
            rot_tol = 0.01 if st.rot_tol is None else st.rot_tol
            if np.linalg.norm(d[:3]) <= tol and np.linalg.norm(d[3:]) <= rot_tol and grip_ok:
                if self._held < st.wait:
                    self._held += 1
                    return Action.hold(st.gripper)
                self.i, self._target, self._held = self.i + 1, None, 0
                continue
            n = np.linalg.norm(d[:3])
            max_step = self.max_step if st.max_step is None else min(st.max_step, self.max_step)
            if n > max_step:
                d[:3] *= max_step / n
            r = np.linalg.norm(d[3:])
            if r > self.max_rot:
                d[3:] *= self.max_rot / r
            return Action(np.concatenate([d, [st.gripper]]))
        return Action.hold(cell.gripper)

    @property
    def waypoint(self) -> np.ndarray:
        """The TCP pose ``[x, y, z, rx, ry, rz]`` (frame base) the expert is heading for: its current
        stage's target, or the TCP pose itself before the first :meth:`act` and once finished."""
        return self.env.cell.tcp_pose() if self._target is None else np.asarray(self._target, dtype=np.float64)

    def resume(self, xy_tol: float = 0.015, z_tol: float = 0.005) -> int:
        """Skip the leading stages that the TCP has already done, for an expert planned mid-episode
        (DAgger relabelling): a stage counts as done when the TCP is within ``xy_tol`` metres of its
        target in xy and at most ``z_tol`` above it (e.g. a TCP already lowered over the object
        descends on, instead of rising back to the approach pose). Returns the stage index."""
        cell = self.env.cell
        while not self.finished and self.stages[self.i].pose is not None:
            target, cur = self.stages[self.i].pose(), cell.tcp_pose()
            if np.linalg.norm(cur[:2] - target[:2]) > xy_tol or cur[2] > target[2] + z_tol:
                break
            self.i += 1
        self._target = None
        return self.i

    # helpers for planners ----------------------------------------------------------------
    def obj(self, name: str):
        pos, orn = self.env.cell.object_pose(name)
        yaw = quat_to_euler(orn, "xyz")[2]
        return pos, yaw

    def top(self, name: str) -> float:
        b = self.env.cell.bodies[name]
        aabb = self.env.cell.p.getAABB(b.body_id, b.grasp_link if b.joint >= 0 else -1, physicsClientId=self.env.cell.client)
        return float(aabb[1][2])


#: verb -> planner ``fn(expert) -> stages`` of every verb the expert solves (live view of the task registry)
PLANNERS: Mapping[str, Planner] = TaskTable("plan")


def grasp_stages(e: ScriptedExpert, name: str) -> list[Stage]:
    """Top-down grasp of object ``name``: above it (7 cm over its top), descend slowly, close."""
    spec = e.env.cell.bodies[name].spec
    size = spec.size if spec is not None else ()

    def yaw():
        y = e.obj(name)[1]
        if len(size) == 3 and abs(size[0] - size[1]) > 1e-3:  # elongated box: close across its short side
            return fold_yaw(y + (math.pi / 2 if size[0] < size[1] else 0.0), math.pi)
        return fold_yaw(y)

    def above():
        p, _ = e.obj(name)
        return topdown([p[0], p[1], e.top(name) + 0.07], yaw())

    def grasp():
        p, _ = e.obj(name)
        return topdown([p[0], p[1], max(e.top(name) - 0.02, 0.02)], yaw())

    return [Stage("above", above, OPEN, tol=LOOSE, rot_tol=LOOSE_ROT), Stage("descend", grasp, OPEN, max_step=SLOW),
            Stage("close", None, CLOSED)]


def vertical(e: ScriptedExpert, name: str, gripper: float, z: float | None = None, dz: float = 0.0, **stage) -> Stage:
    """Straight up/down from wherever the TCP is: to height ``z`` or by ``dz`` metres (``stage``: more
    :class:`Stage` fields, e.g. tolerances)."""

    def target():
        p = e.env.cell.tcp_pose()
        return np.concatenate([[p[0], p[1], p[2] + dz if z is None else z], p[3:]])

    return Stage(name, target, gripper, **stage)


def lift(e: ScriptedExpert, z: float = 0.16) -> Stage:
    """Straight up to height ``z`` (m) with the gripper closed."""
    return vertical(e, "lift", CLOSED, z=z, tol=LOOSE, rot_tol=LOOSE_ROT)


def place_at(e: ScriptedExpert, name: str, xy_fn: Callable[[], np.ndarray], surface_z: Callable[[], float]) -> list[Stage]:
    """Carry the held object above ``xy``, lower it until its bottom is 1.5 cm above ``surface_z``, release, retreat."""

    def carry():
        p = e.env.cell.tcp_pose()
        xy = xy_fn()
        return np.concatenate([[xy[0], xy[1], 0.16], p[3:]])

    def lower():
        cell = e.env.cell
        p = cell.tcp_pose()
        aabb = cell.p.getAABB(cell.bodies[name].body_id, -1, physicsClientId=cell.client)
        hang = p[2] - aabb[0][2]  # TCP height above the object's bottom
        return np.concatenate([[p[0], p[1], surface_z() + 0.015 + hang], p[3:]])

    return [Stage("carry", carry, CLOSED, tol=LOOSE, rot_tol=LOOSE_ROT), Stage("lower", lower, CLOSED, max_step=SLOW),
            Stage("release", None, OPEN, wait=3),
            vertical(e, "retreat", OPEN, z=0.16)]


def carry_to_reference(e: ScriptedExpert) -> list[Stage]:
    """Grasp the task's target, lift it, set it down on the reference object and retreat (Place into a bowl or
    onto a plate; Cover: a plate onto a bowl's rim)."""
    t = e.env.task
    return [*grasp_stages(e, t.target), lift(e),
            *place_at(e, t.target, lambda: e.obj(t.reference)[0][:2], lambda: e.top(t.reference))]
