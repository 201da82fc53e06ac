"""Scripted privileged experts for the ManiSkill tasks, acting only through embeval 7-DoF actions.

Each expert reads the true object poses from the env (privileged state) and servoes the TCP through
a list of phases (a target TCP pose in frame base and a gripper opening per phase): every step emits
``[gain * position error (clipped to the controller bound), the rotation error as roll-pitch-yaw
(norm clipped to the bound), gripper]`` and moves to the next phase once the TCP is within the
phase's tolerance (or after its step budget). Because the actions pass through
:class:`~embeval.sim.maniskill.env.ManiSkillEnv`'s conversion to ``pd_ee_delta_pose``, the success
rate of these experts is the check of that conversion (docs/sim.md gives the 20-episode numbers).

Grasps are top-down; the closing axis (the TCP's y axis) is turned about the vertical onto the
object's nearest symmetric axis.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from embeval.action import Action, ActionSpec
from embeval.errors import ConfigError
from embeval.rotations import matrix_to_rotvec, rotvec_to_euler

Target = Callable[[], np.ndarray]  # -> 4x4 TCP target in frame base


@dataclass
class Phase:
    name: str
    target: Target
    gripper: float  # 1 open, 0 closed
    tol: float = 0.01  # m, position error to leave the phase
    rot_tol: float = 0.05  # rad
    min_steps: int = 0  # steps spent in the phase at least (e.g. letting the fingers close)
    max_steps: int = 25
    speed: float | None = None  # m per action at most (slow, careful motion), None = the controller bound
    ki: float = 0.0  # integral gain on the position error (removes the last millimetres of steady error)


def _rz(a: float) -> np.ndarray:
    c, s = math.cos(a), math.sin(a)
    return np.array([[c, -s, 0], [s, c, 0], [0, 0, 1.0]])


def _wrap(a: float, period: float) -> float:
    """``a`` wrapped into [-period/2, period/2)."""
    return (a + period / 2) % period - period / 2


def _pose(R: np.ndarray, p) -> np.ndarray:
    T = np.eye(4)
    T[:3, :3] = R
    T[:3, 3] = np.asarray(p, dtype=np.float64)
    return T


class PhaseExpert:
    """Runs a list of :class:`Phase` closed-loop; ``act(obs)`` returns the next :class:`Action`."""

    id = "maniskill-expert"
    action_spec = ActionSpec(frame="base")

    def __init__(self, env, gain: float = 1.2):
        self.env, self.gain = env, float(gain)
        self.R0 = env.tcp_matrix()[:3, :3].copy()  # the start orientation (gripper pointing down)
        self.phases: list[Phase] = self.plan()
        self.i = 0
        self.k = 0  # steps in the current phase
        self.integral = np.zeros(3)

    def reset(self, instruction: str = "") -> None:
        self.R0 = self.env.tcp_matrix()[:3, :3].copy()
        self.phases, self.i, self.k = self.plan(), 0, 0
        self.integral = np.zeros(3)

    # --------------------------------------------------------------- helpers
    def obj(self, name: str) -> np.ndarray:
        """An actor's pose in frame base (4x4)."""
        from embeval.sim.maniskill.runtime import _np

        return self.env.to_base(_np(getattr(self.env.unwrapped, name).pose.raw_pose))

    def top_grasp(self, obj_T: np.ndarray, axis: int = 0, period: float = math.pi / 2) -> np.ndarray:
        """The start orientation turned about z so the closing axis lies along the object's ``axis``."""
        y = self.R0[:, 1]
        a = obj_T[:3, axis]
        d = _wrap(math.atan2(a[1], a[0]) - math.atan2(y[1], y[0]), period)
        return _rz(d) @ self.R0

    def plan(self) -> list[Phase]:  # pragma: no cover - overridden
        raise NotImplementedError

    @property
    def phase(self) -> str:
        return self.phases[min(self.i, len(self.phases) - 1)].name

    # --------------------------------------------------------------- control
    def act(self, obs=None) -> Action:
        T = self.env.tcp_matrix()
        while True:
            ph = self.phases[min(self.i, len(self.phases) - 1)]
            tgt = ph.target()
            e = tgt[:3, 3] - T[:3, 3]
            rv = matrix_to_rotvec(tgt[:3, :3] @ T[:3, :3].T)
            last = self.i >= len(self.phases) - 1
            if not last and ((np.linalg.norm(e) < ph.tol and np.linalg.norm(rv) < ph.rot_tol and self.k >= ph.min_steps)
                             or self.k >= ph.max_steps):
                self.i, self.k, self.integral = self.i + 1, 0, np.zeros(3)
                continue
            break
        self.k += 1
        b = self.env.pos_bound
        self.integral += e
        d = self.gain * e + ph.ki * self.integral
        if ph.speed is not None and np.linalg.norm(d) > ph.speed:
            d *= ph.speed / np.linalg.norm(d)
        d = np.clip(d, -b, b)
        rv = rv * self.gain
        n = np.linalg.norm(rv)
        if n > self.env.rot_bound:
            rv *= self.env.rot_bound / n
        rpy = rotvec_to_euler(rv, "xyz")
        return Action(np.concatenate([d, rpy, [ph.gripper]]))


class PickCubeExpert(PhaseExpert):
    cube = "cube"

    def grasp_phases(self, name: str) -> list[Phase]:
        R = self.top_grasp(self.obj(name))
        at = lambda dz: (lambda: _pose(R, self.obj(name)[:3, 3] + [0, 0, dz]))  # noqa: E731
        self._held_R = R
        return [
            Phase("above", at(0.06), 1.0, tol=0.02, rot_tol=0.1),
            Phase("descend", at(0.0), 1.0, tol=0.006),
            Phase("close", self._hold(R), 0.0, tol=1.0, rot_tol=9, min_steps=3),
        ]

    def _hold(self, R):
        box = {}

        def f():
            if "p" not in box:
                box["p"] = self.env.tcp_matrix()[:3, 3].copy()
            return _pose(R, box["p"])
        return f

    def plan(self) -> list[Phase]:
        ph = self.grasp_phases(self.cube)
        R = self._held_R
        goal = lambda: _pose(R, self.obj("goal_site")[:3, 3])  # noqa: E731
        return ph + [Phase("to_goal", goal, 0.0, tol=0.005), Phase("hold", goal, 0.0, max_steps=10**6)]


class StackCubeExpert(PickCubeExpert):
    def plan(self) -> list[Phase]:
        ph = self.grasp_phases("cubeA")
        R = self._held_R
        over = lambda dz: (lambda: _pose(R, self.obj("cubeB")[:3, 3] + [0, 0, 0.04 + dz]))  # noqa: E731
        return ph + [
            Phase("lift", over(0.04), 0.0, tol=0.015, rot_tol=0.1),
            Phase("lower", over(0.003), 0.0, tol=0.004),
            Phase("release", self._hold(R), 1.0, tol=1.0, rot_tol=9, min_steps=3),
            Phase("retreat", over(0.06), 1.0, max_steps=10**6),
        ]


class PlaceSphereExpert(PickCubeExpert):
    def plan(self) -> list[Phase]:
        ph = self.grasp_phases("obj")
        R = self._held_R
        r = float(self.env.unwrapped.radius)
        bottom = float(self.env.unwrapped.block_half_size[0])
        over = lambda dz: (lambda: _pose(R, self.obj("bin")[:3, 3] + [0, 0, r + bottom + dz]))  # noqa: E731
        return ph + [
            Phase("lift", over(0.05), 0.0, tol=0.01, rot_tol=0.1),
            Phase("lower", over(0.004), 0.0, tol=0.003),
            Phase("release", self._hold(R), 1.0, tol=1.0, rot_tol=9, min_steps=3),
            Phase("retreat", over(0.06), 1.0, max_steps=10**6),
        ]


class PushCubeExpert(PhaseExpert):
    direction = 1.0  # +x pushes away from the robot; PullCube uses -1

    def plan(self) -> list[Phase]:
        s = self.direction
        R = self.R0
        cube = lambda: self.obj("obj")[:3, 3]  # noqa: E731
        goal = lambda: self.obj("goal_region")[:3, 3]  # noqa: E731
        behind = lambda dz: (lambda: _pose(R, cube() + [-s * 0.05, 0, dz]))  # noqa: E731
        start = {}

        def push():
            if "y" not in start:
                start["y"] = cube()[1]
            g = goal()
            return _pose(R, [g[0] - s * 0.035, start["y"], 0.02])
        return [
            Phase("behind", behind(0.06), 0.0, tol=0.02),
            Phase("down", lambda: _pose(R, np.r_[cube()[:2] + [-s * 0.05, 0], 0.02]), 0.0, tol=0.008),
            Phase("push", push, 0.0, tol=0.005, max_steps=10**6),
        ]


class PullCubeExpert(PushCubeExpert):
    direction = -1.0


class PegInsertionSideExpert(PhaseExpert):
    """Grasp the peg behind its middle, carry it in front of the hole (from a stand-off point, so the
    box face is never crossed), line its head up with the hole axis closed-loop (the peg's pose in
    the gripper is re-read every step), then push it in slowly."""

    def plan(self) -> list[Phase]:
        from embeval.sim.maniskill.runtime import _np

        u = self.env.unwrapped
        L = float(_np(u.peg_half_sizes)[0])
        peg0 = self.obj("peg")
        goal0 = self.env.to_base(_np(u.goal_pose.raw_pose))
        # of the two top grasps (closing axis along +-peg y), take the one that leaves the least total
        # wrist turn once the peg axis is turned onto the hole axis (the Panda's last joint has +-2.9 rad)
        y0 = self.R0[:, 1]
        d0 = _wrap(math.atan2(peg0[1, 1], peg0[0, 1]) - math.atan2(y0[1], y0[0]), math.pi)
        align = _wrap(math.atan2(goal0[1, 0], goal0[0, 0]) - math.atan2(peg0[1, 0], peg0[0, 0]), 2 * math.pi)
        d = min((d0, d0 - math.pi, d0 + math.pi), key=lambda v: abs(v + align))
        R = _rz(d) @ self.R0
        back = L / 2 + 0.01  # grasp point behind the peg's centre (m), keeps the fingers clear of the box
        grasp_p = peg0[:3, 3] - back * peg0[:3, 0]
        at = lambda dz: (lambda: _pose(R, grasp_p + [0, 0, dz]))  # noqa: E731
        goal_T = lambda: self.env.to_base(_np(u.goal_pose.raw_pose))  # noqa: E731  peg pose with the head in the hole

        def tcp_for_peg(shift):
            def f():  # the TCP pose that puts the peg (as held now) at the goal pose shifted along the hole axis
                X = np.linalg.inv(self.env.tcp_matrix()) @ self.obj("peg")
                s = shift() if callable(shift) else shift
                return goal_T() @ _pose(np.eye(3), [s, 0, 0]) @ np.linalg.inv(X)
            return f

        def advance() -> float:
            """Where the head goes next along the hole axis: 2 cm deeper while it is centred on the axis
            (within 1.5 mm), else stay at its depth and centre it first."""
            head = np.asarray(self.env.evaluate()["peg_head_pos_at_hole"], dtype=np.float64).reshape(-1)
            centred = np.max(np.abs(head[1:3])) < 0.0015
            return min(0.02, head[0] + 0.02) if centred else head[0]
        return [
            Phase("above", at(0.08), 1.0, tol=0.02, rot_tol=0.1),
            Phase("descend", at(0.0), 1.0, tol=0.006),
            Phase("close", lambda: _pose(R, grasp_p), 0.0, tol=1.0, rot_tol=9, min_steps=3),
            Phase("lift", at(0.08), 0.0, tol=0.03, rot_tol=9),
            Phase("stand_off", tcp_for_peg(-L - 0.08), 0.0, tol=0.015, rot_tol=0.05, max_steps=30),
            Phase("pre_insert", tcp_for_peg(-L - 0.03), 0.0, tol=0.0015, rot_tol=0.01, max_steps=30, speed=0.03, ki=0.3),
            Phase("insert", tcp_for_peg(advance), 0.0, tol=0.003, rot_tol=0.02, max_steps=10**6, ki=0.3),
        ]


EXPERTS: dict[str, type[PhaseExpert]] = {
    "PickCube-v1": PickCubeExpert,
    "PushCube-v1": PushCubeExpert,
    "StackCube-v1": StackCubeExpert,
    "PullCube-v1": PullCubeExpert,
    "PlaceSphere-v1": PlaceSphereExpert,
    "PegInsertionSide-v1": PegInsertionSideExpert,
}


def check_expert(env_id: str) -> type[PhaseExpert]:
    """The expert class of ``env_id``; a one-line :class:`ConfigError` naming the tasks that have one otherwise
    (callable before the env is built)."""
    cls = EXPERTS.get(env_id)
    if cls is None:
        raise ConfigError(f"no scripted expert for {env_id}; experts exist for {', '.join(EXPERTS)} "
                          "(or give a policy with --subject)")
    return cls


def make_expert(env, **kw) -> PhaseExpert:
    """The expert of ``env``'s task (call after ``env.reset``)."""
    return check_expert(env.config.env_id)(env, **kw)


def run_expert(env, seed: int):
    """One seeded expert episode; returns the last StepResult."""
    obs = env.reset(seed=seed)
    ex = env.expert()
    r = None
    while not env.done:
        r = env.step(ex.act(obs))
        obs = r.observation
    return r
