"""Motions the emulated controller executes, one control tick (2 ms) at a time.

Each motion has ``step(q, dt) -> (q_next, finished)``: joint positions in radians, ``dt`` in seconds.
Frame ``base`` (the controller's), metres, rotation vectors. Joint speeds are clamped to the
configured per-joint maxima; a Cartesian move that would exceed them near a singularity slows down
(its clock advances less) instead of jumping.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from embeval.kinematics import UR
from embeval.rotations import matrix_to_rotvec_fast as rotvec_of
from embeval.rotations import rotvec_to_matrix_fast as rotmat_of


def tcp_frames(kin: UR, q) -> tuple[np.ndarray, np.ndarray]:
    """Link frames 0..6 of ``q`` in frame base (the last one carries the tool) and the TCP transform."""
    F = kin.link_frames(q, "base")
    if kin.tool is not None:
        F[6] = F[6] @ kin.tool
    return F, F[6]


def _jacobian(F: np.ndarray) -> np.ndarray:
    """Geometric Jacobian ``[v; omega]`` (6x6, frame base) from frames 0..6: column i = [z_i x (p_6 - p_i); z_i]."""
    z = F[:6, :3, 2]
    d = F[6, :3, 3] - F[:6, :3, 3]
    J = np.empty((6, 6))
    J[0] = z[:, 1] * d[:, 2] - z[:, 2] * d[:, 1]
    J[1] = z[:, 2] * d[:, 0] - z[:, 0] * d[:, 2]
    J[2] = z[:, 0] * d[:, 1] - z[:, 1] * d[:, 0]
    J[3:] = z.T
    return J


def _error(T: np.ndarray, T_target: np.ndarray) -> np.ndarray:
    """``[dp; omega]`` from ``T`` to ``T_target`` (small-angle rotation part; zero exactly at the target)."""
    Re = T_target[:3, :3] @ T[:3, :3].T
    return np.array([*(T_target[:3, 3] - T[:3, 3]), 0.5 * (Re[2, 1] - Re[1, 2]), 0.5 * (Re[0, 2] - Re[2, 0]),
                     0.5 * (Re[1, 0] - Re[0, 1])])


def track(kin: UR, q, T_target: np.ndarray, tol: float = 1e-10, iters: int = 6) -> np.ndarray | None:
    """Joints reaching ``T_target`` (frame base) by Newton steps from the nearby ``q``; None if they do not converge.

    A control cycle moves the TCP by at most millimetres, so one or two steps reach ``tol`` (m, rad)
    and the arm stays on its branch; the closed-form IK (all 8 branches) costs ten times as much.
    """
    q = np.asarray(q, float).copy()
    F, T = tcp_frames(kin, q)
    for _ in range(iters):
        err = _error(T, T_target)
        if float(np.max(np.abs(err))) < tol:
            return q
        try:
            q += np.linalg.solve(_jacobian(F), err)
        except np.linalg.LinAlgError:
            return None
        F, T = tcp_frames(kin, q)
    return q if float(np.max(np.abs(_error(T, T_target)))) < 1e-9 else None


def solve_near(kin: UR, T_target: np.ndarray, q_near) -> np.ndarray | None:
    """IK nearest ``q_near``: Newton tracking when it converges, else the closed form's nearest branch."""
    sol = track(kin, q_near, T_target)
    if sol is not None and float(np.max(np.abs(sol - np.asarray(q_near, float)))) < 0.5:
        return sol
    return kin.ik_closest(T_target, q_near, frame="base")


def pose_of(T: np.ndarray) -> np.ndarray:
    """UR pose ``[x, y, z, rx, ry, rz]`` of a 4x4 transform."""
    return np.concatenate([T[:3, 3], rotvec_of(T[:3, :3])])


class MotionError(RuntimeError):
    """A motion the controller cannot execute (unreachable pose); stops the program like a URScript runtime error."""


@dataclass(frozen=True)
class Trapezoid:
    """Time-optimal 1-D profile over ``distance`` with speed ``v`` and acceleration ``a`` (triangle when short)."""

    distance: float
    v: float
    a: float

    @property
    def t_acc(self) -> float:
        return min(self.v / self.a, math.sqrt(self.distance / self.a))

    @property
    def duration(self) -> float:
        if self.distance <= 0:
            return 0.0
        ta = self.t_acc
        vpk = self.a * ta
        cruise = max(0.0, self.distance - self.a * ta * ta) / vpk
        return 2 * ta + cruise

    def position(self, t: float) -> float:
        """Distance covered at time ``t`` (clamped to [0, distance])."""
        if self.distance <= 0 or t <= 0:
            return 0.0
        T, ta = self.duration, self.t_acc
        if t >= T:
            return self.distance
        vpk = self.a * ta
        if t < ta:
            return 0.5 * self.a * t * t
        if t <= T - ta:
            return 0.5 * self.a * ta * ta + vpk * (t - ta)
        r = T - t
        return self.distance - 0.5 * self.a * r * r


def clamp_step(q: np.ndarray, q_next: np.ndarray, dt: float, max_speed: np.ndarray) -> np.ndarray:
    """``q_next`` moved back toward ``q`` so that no joint exceeds its maximum speed."""
    dq = q_next - q
    ratio = float(np.max(np.abs(dq) / (max_speed * dt)))
    return q + dq / ratio if ratio > 1.0 else q_next


class JointMove:
    """moveJ: one synchronised trapezoid in joint space (the joint with the longest travel leads)."""

    def __init__(self, q0, q1, v: float, a: float):
        self.q0, self.q1 = np.asarray(q0, float), np.asarray(q1, float)
        span = float(np.max(np.abs(self.q1 - self.q0)))
        self.profile = Trapezoid(span, max(v, 1e-6), max(a, 1e-6))
        self.t = 0.0

    def step(self, q, dt):
        self.t += dt
        d = self.profile.distance
        if d <= 0:
            return self.q1.copy(), True
        s = self.profile.position(self.t) / d
        return self.q0 + s * (self.q1 - self.q0), self.t >= self.profile.duration


def _slerp_rotvec(R0: np.ndarray, R1: np.ndarray):
    """``s -> R0 exp(s log(R0^T R1))`` and the rotation angle."""
    w = rotvec_of(R0.T @ R1)
    ang = float(np.linalg.norm(w))
    return (lambda s: R0 @ rotmat_of(s * w)), ang


class LinearMove:
    """moveL: straight-line TCP path (position linear, orientation slerped) on one trapezoid in path length.

    A pure rotation uses ``v``/``a`` as rad/s and rad/s^2, as the controller does.
    """

    def __init__(self, kin: UR, q0, T1: np.ndarray, v: float, a: float, max_speed: np.ndarray):
        self.kin, self.max_speed = kin, max_speed
        T0 = tcp_frames(kin, np.asarray(q0, float))[1]
        self.p0, self.p1 = T0[:3, 3].copy(), np.asarray(T1[:3, 3], float)
        self.rot, ang = _slerp_rotvec(T0[:3, :3], np.asarray(T1[:3, :3], float))
        length = float(np.linalg.norm(self.p1 - self.p0))
        self.length = length if length > 1e-7 else ang
        self.profile = Trapezoid(self.length, max(v, 1e-6), max(a, 1e-6))
        self.t = 0.0
        if kin.ik_closest(T1, q0, frame="base") is None:  # once per move: the target must be reachable
            raise MotionError(f"moveL target {np.round(self.p1, 4).tolist()} is out of reach (no inverse kinematics solution)")

    def pose(self, s: float) -> np.ndarray:
        T = np.eye(4)
        T[:3, :3] = self.rot(s)
        T[:3, 3] = self.p0 + s * (self.p1 - self.p0)
        return T

    def _q_at(self, t: float, q):
        s = 1.0 if self.length <= 0 else self.profile.position(t) / self.length
        sol = solve_near(self.kin, self.pose(s), q)
        if sol is None:
            raise MotionError(f"moveL path leaves the reachable space at s={s:.3f}")
        return sol

    def step(self, q, dt):
        t_next = self.t + dt
        q_next = self._q_at(t_next, q)
        ratio = float(np.max(np.abs(q_next - q) / (self.max_speed * dt)))
        if ratio > 1.0:  # joint speed limit near a singularity: advance the path clock less
            t_next = self.t + dt / ratio
            q_next = self._q_at(t_next, q)
        self.t = t_next
        return q_next, self.t >= self.profile.duration


class ServoMotion:
    """servoJ/servoL: first-order tracking of the latest target with time constant ``time`` (the servo period)."""

    def __init__(self, target, time: float, max_speed: np.ndarray):
        self.target, self.time, self.max_speed = np.asarray(target, float), max(float(time), 1e-3), max_speed
        self.pose_key: tuple | None = None  # servoL: the Cartesian target the joint target was solved for

    def update(self, target, time: float) -> None:
        self.target, self.time = np.asarray(target, float), max(float(time), 1e-3)

    def step(self, q, dt):
        q_next = q + (self.target - q) * min(1.0, dt / self.time)
        return clamp_step(q, q_next, dt, self.max_speed), False


class SpeedJMotion:
    """speedJ: joint velocity ramped toward ``qd`` at ``a`` rad/s^2 (all joints reach it together)."""

    def __init__(self, qd, a: float, qd0, max_speed: np.ndarray):
        self.qd_target, self.a, self.qd = np.asarray(qd, float), max(a, 1e-6), np.asarray(qd0, float).copy()
        self.max_speed = max_speed

    def update(self, qd, a: float) -> None:
        self.qd_target, self.a = np.asarray(qd, float), max(a, 1e-6)

    def step(self, q, dt):
        diff = self.qd_target - self.qd
        n = float(np.max(np.abs(diff)))
        self.qd = self.qd_target.copy() if n <= self.a * dt else self.qd + diff * (self.a * dt / n)
        self.qd = np.clip(self.qd, -self.max_speed, self.max_speed)
        return q + self.qd * dt, False


class SpeedLMotion:
    """speedL: TCP twist ``[vx, vy, vz, wx, wy, wz]`` (base frame) ramped at ``a`` m/s^2, integrated and solved by IK."""

    def __init__(self, kin: UR, xd, a: float, max_speed: np.ndarray, xd0=None):
        self.kin, self.max_speed = kin, max_speed
        self.xd_target, self.a = np.asarray(xd, float), max(a, 1e-6)
        self.xd = np.zeros(6) if xd0 is None else np.asarray(xd0, float).copy()

    def update(self, xd, a: float) -> None:
        self.xd_target, self.a = np.asarray(xd, float), max(a, 1e-6)

    def step(self, q, dt):
        diff = self.xd_target - self.xd
        n = float(np.linalg.norm(diff[:3]))
        n = max(n, float(np.linalg.norm(diff[3:])))
        self.xd = self.xd_target.copy() if n <= self.a * dt else self.xd + diff * (self.a * dt / n)
        T = tcp_frames(self.kin, q)[1].copy()
        T[:3, 3] += self.xd[:3] * dt
        T[:3, :3] = rotmat_of(self.xd[3:] * dt) @ T[:3, :3]
        sol = solve_near(self.kin, T, q)
        if sol is None:
            raise MotionError("speedL drove the TCP out of the reachable space")
        return clamp_step(q, sol, dt, self.max_speed), False


class StopMotion:
    """stopJ/stopL/speedStop/servoStop: the current joint velocity decelerated linearly to zero.

    ``decel`` is rad/s^2 on the fastest joint (stopJ) or m/s^2 on the TCP (stopL, ``tcp_speed`` given).
    """

    def __init__(self, qd0, decel: float, tcp_speed: float | None = None):
        self.qd0 = np.asarray(qd0, float)
        decel = max(float(decel), 1e-6)
        peak = float(np.max(np.abs(self.qd0))) if tcp_speed is None else float(tcp_speed)
        self.duration = peak / decel
        self.t = 0.0

    def step(self, q, dt):
        if self.t >= self.duration:
            return q, True
        t1 = min(self.t + dt, self.duration)
        # exact integral of qd0 * (1 - t/T) over [t, t1]
        T = self.duration
        dq = self.qd0 * ((t1 - self.t) - (t1 * t1 - self.t * self.t) / (2 * T))
        self.t = t1
        return q + dq, self.t >= T


class Chain:
    """``first`` until it ends, then the motion ``make(q)`` builds from where the arm stopped."""

    def __init__(self, first, make):
        self.first, self.make, self.next = first, make, None

    def step(self, q, dt):
        if self.next is None:
            q1, done = self.first.step(q, dt)
            if done:
                self.next = self.make(q1)
            return q1, False
        return self.next.step(q, dt)
