"""Scripted expert: solves every implemented task from privileged state with Cartesian moves.

The expert plans a list of stages (TCP waypoint + gripper) per verb, re-reading object poses when a
stage starts (closed loop), and emits 7-DoF delta actions in frame ``base`` clipped to
``max_step`` metres / ``max_rot`` radians per step: exactly what a policy would output, so its
episodes serve as demonstrations. Grasps are top-down (TCP z axis pointing down), fingers closing
along the TCP y axis.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.spatial.transform import Rotation

from embeval.action import Action, ActionSpec, Observation, gripper_closed, pose_delta
from embeval.errors import ConfigError

OPEN, CLOSED = 1.0, 0.0


def topdown(xyz, yaw: float = 0.0) -> np.ndarray:
    """TCP pose ``[x,y,z,rx,ry,rz]`` pointing straight down, rotated by ``yaw`` about z."""
    R = Rotation.from_euler("z", yaw) * Rotation.from_euler("x", math.pi)
    return np.concatenate([np.asarray(xyz, dtype=float), R.as_rotvec()])


def _fold_yaw(yaw: float, period: float = math.pi / 2) -> float:
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
        yaw = Rotation.from_quat(orn).as_euler("xyz")[2]
        return pos, yaw

    def top(self, name: str) -> float:
        b = self.env.cell.bodies[name]
        aabb = self.env.cell.p.getAABB(b.body_id, b.grasp_link if b.joint >= 0 else -1, physicsClientId=self.env.cell.client)
        return float(aabb[1][2])


PLANNERS: dict[str, Callable[[ScriptedExpert], list[Stage]]] = {}


def planner(verb: str):
    def deco(fn):
        PLANNERS[verb] = fn
        return fn

    return deco


def _grasp_stages(e: ScriptedExpert, name: str) -> list[Stage]:
    spec = e.env.cell.bodies[name].spec
    size = spec.size if spec is not None else ()

    def yaw():
        y = e.obj(name)[1]
        if len(size) == 3 and abs(size[0] - size[1]) > 1e-3:  # elongated box: close across its short side
            return _fold_yaw(y + (math.pi / 2 if size[0] < size[1] else 0.0), math.pi)
        return _fold_yaw(y)

    def above():
        p, _ = e.obj(name)
        return topdown([p[0], p[1], e.top(name) + 0.07], yaw())

    def grasp():
        p, _ = e.obj(name)
        return topdown([p[0], p[1], max(e.top(name) - 0.02, 0.02)], yaw())

    return [Stage("above", above, OPEN, tol=LOOSE, rot_tol=LOOSE_ROT), Stage("descend", grasp, OPEN, max_step=SLOW),
            Stage("close", None, CLOSED)]


def _vertical(e: ScriptedExpert, name: str, gripper: float, z: float | None = None, dz: float = 0.0, **stage) -> Stage:
    """Straight up/down from wherever the TCP is: to height ``z`` or by ``dz`` metres (``stage``: more
    :class:`Stage` fields, e.g. tolerances)."""

    def target():
        p = e.env.cell.tcp_pose()
        return np.concatenate([[p[0], p[1], p[2] + dz if z is None else z], p[3:]])

    return Stage(name, target, gripper, **stage)


def _lift(e: ScriptedExpert, z: float = 0.16) -> Stage:
    return _vertical(e, "lift", CLOSED, z=z, tol=LOOSE, rot_tol=LOOSE_ROT)


def _place_at(e: ScriptedExpert, name: str, xy_fn: Callable[[], np.ndarray], surface_z: Callable[[], float]) -> list[Stage]:
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
            _vertical(e, "retreat", OPEN, z=0.16)]


@planner("Pick")
def _plan_pick(e: ScriptedExpert) -> list[Stage]:
    return [*_grasp_stages(e, e.env.task.target), _lift(e)]


@planner("Cover")  # the plate is placed onto the bowl's rim
@planner("Place")
def _plan_place(e: ScriptedExpert) -> list[Stage]:
    t = e.env.task
    return [*_grasp_stages(e, t.target), _lift(e),
            *_place_at(e, t.target, lambda: e.obj(t.reference)[0][:2], lambda: e.top(t.reference))]


@planner("Move")
def _plan_move(e: ScriptedExpert) -> list[Stage]:
    t = e.env.task
    return [*_grasp_stages(e, t.target), _lift(e), *_place_at(e, t.target, lambda: np.asarray(t.goal[:2]), lambda: 0.0)]


@planner("Push")
def _plan_push(e: ScriptedExpert) -> list[Stage]:
    t = e.env.task
    cell = e.env.cell
    goal = np.asarray(t.goal[:2]) if t.goal else e.obj(t.reference)[0][:2]
    z_push = 0.02

    def geom():
        p, _ = e.obj(t.target)
        u = goal - p[:2]
        u = u / max(np.linalg.norm(u), 1e-9)
        aabb = cell.p.getAABB(cell.bodies[t.target].body_id, -1, physicsClientId=cell.client)
        half = 0.5 * float(np.max(np.array(aabb[1][:2]) - np.array(aabb[0][:2])))
        yaw = math.atan2(u[1], u[0])  # fingers (TCP y) across the push direction
        return p, u, half, _fold_yaw(yaw, math.pi)

    def pre_above():
        p, u, half, yaw = geom()
        xy = p[:2] - u * (half + 0.035)
        return topdown([xy[0], xy[1], 0.10], yaw)

    def pre():
        p, u, half, yaw = geom()
        xy = p[:2] - u * (half + 0.035)
        return topdown([xy[0], xy[1], z_push], yaw)

    def push():
        _, u, half, yaw = geom()
        xy = goal - u * (half + 0.012)
        return topdown([xy[0], xy[1], z_push], yaw)

    return [Stage("close", None, CLOSED), Stage("pre_above", pre_above, CLOSED), Stage("pre", pre, CLOSED),
            Stage("push", push, CLOSED), _vertical(e, "retreat", CLOSED, z=0.12)]


@planner("Press")
def _plan_press(e: ScriptedExpert) -> list[Stage]:
    t = e.env.task
    cell = e.env.cell

    def above():
        g = cell.grasp_point(t.target)
        return topdown([g[0], g[1], g[2] + 0.07])

    def press():
        g = cell.grasp_point(t.target)
        b = cell.bodies[t.target]
        travel = -b.joint_range[0]
        return topdown([g[0], g[1], g[2] + 0.01 - travel * 0.9])  # fingertips 1 cm below the TCP

    return [Stage("close", None, CLOSED), Stage("above", above, CLOSED), Stage("press", press, CLOSED, wait=1),
            Stage("release", above, CLOSED)]


@planner("Pull")
def _plan_pull(e: ScriptedExpert) -> list[Stage]:
    t = e.env.task
    cell = e.env.cell
    _, yaw = e.obj(t.target)

    def above():
        g = cell.grasp_point(t.target)
        return topdown([g[0], g[1], g[2] + 0.07], yaw)

    def grasp():
        g = cell.grasp_point(t.target)
        return topdown([g[0], g[1], g[2]], yaw)

    def pull():
        p = cell.tcp_pose()
        axis = Rotation.from_euler("z", yaw).apply([1.0, 0.0, 0.0])
        xy = p[:2] - axis[:2] * (t.threshold or 0.08) * 1.4
        return np.concatenate([[xy[0], xy[1], p[2]], p[3:]])

    return [Stage("above", above, OPEN), Stage("descend", grasp, OPEN), Stage("close", None, CLOSED),
            Stage("pull", pull, CLOSED), Stage("release", None, OPEN), _vertical(e, "retreat", OPEN, dz=0.08)]


@planner("Twist")
def _plan_twist(e: ScriptedExpert) -> list[Stage]:
    t = e.env.task
    cell = e.env.cell
    turn = 1.45  # rad, a bit less than a quarter turn, above the 1.2 rad success threshold

    def knob_yaw():
        return _fold_yaw(e.obj(t.target)[1] + (cell.joint_value(t.target) or 0.0), math.pi)

    def above():
        g = cell.grasp_point(t.target)
        return topdown([g[0], g[1], g[2] + 0.07], knob_yaw())

    def grasp():
        g = cell.grasp_point(t.target)
        return topdown([g[0], g[1], g[2]], knob_yaw())

    def twist():
        p = cell.tcp_pose()
        yaw = Rotation.from_rotvec(p[3:]).as_euler("ZYX")[0]
        return topdown(p[:3], yaw + (turn if yaw < 0 else -turn))  # turn towards the wrist's centre

    return [Stage("above", above, OPEN), Stage("descend", grasp, OPEN), Stage("close", None, CLOSED),
            Stage("twist", twist, CLOSED), Stage("release", None, OPEN), _vertical(e, "retreat", OPEN, dz=0.08)]


@planner("Insert")
def _plan_insert(e: ScriptedExpert) -> list[Stage]:
    t = e.env.task
    cell = e.env.cell
    z_carry = 0.20

    def align():  # turn the held peg so its faces line up with the hole's
        p = cell.tcp_pose()
        yaw = Rotation.from_rotvec(p[3:]).as_euler("ZYX")[0]
        d = _fold_yaw(e.obj(t.reference)[1] - e.obj(t.target)[1])
        return topdown([p[0], p[1], z_carry], yaw + d)

    def above_hole():
        p = cell.tcp_pose()
        off = p[:2] - e.obj(t.target)[0][:2]  # TCP relative to the peg's centre
        xy = e.obj(t.reference)[0][:2] + off
        return np.concatenate([[xy[0], xy[1], z_carry], p[3:]])

    def lower():
        p = cell.tcp_pose()
        aabb = cell.p.getAABB(cell.bodies[t.target].body_id, -1, physicsClientId=cell.client)
        return np.concatenate([[p[0], p[1], p[2] - (aabb[0][2] - 0.004)], p[3:]])

    return [*_grasp_stages(e, t.target), _lift(e, z_carry), Stage("align", align, CLOSED),
            Stage("above_hole", above_hole, CLOSED), Stage("lower", lower, CLOSED), Stage("release", None, OPEN, wait=2),
            _vertical(e, "retreat", OPEN, z=0.16)]


@planner("Pour")
def _plan_pour(e: ScriptedExpert) -> list[Stage]:
    t = e.env.task
    cell = e.env.cell
    z_pour = 0.20
    tilt = math.radians(100)

    def geometry():
        bowl = e.obj(t.reference)[0]
        side = 1.0 if bowl[1] < 0 else -1.0  # tip the mouth towards the robot's centre line
        return bowl, side

    def above_bowl():
        p = cell.tcp_pose()
        bowl, side = geometry()
        return np.concatenate([[bowl[0], bowl[1] - side * 0.04, z_pour], p[3:]])

    def tip():
        p = cell.tcp_pose()
        _, side = geometry()
        R = Rotation.from_euler("x", -side * tilt) * Rotation.from_rotvec(p[3:])
        return np.concatenate([p[:3], R.as_rotvec()])

    return [*_grasp_stages(e, t.target), _lift(e, z_pour), Stage("above_bowl", above_bowl, CLOSED),
            Stage("tip", tip, CLOSED, wait=1)]
