"""Safety limits and protective-stop logic, shared by every arm backend (sim, mock, ur_rtde, ROS arm node).

Pure functions and small classes: no simulator, no ROS. Frame ``base``, metres, radians, seconds.

A command is checked *before* it is executed (:func:`check_command`): a target outside the TCP
workspace box, outside the joint limits, or a step larger than ``max_step_translation`` (m) or
``max_step_rotation`` (rad) trips a stop and the arm does not move. Every limit is checked when
:class:`SafetyLimits` is built (finite, within :data:`LIMIT_RANGES`): a NaN would disable a comparison. During motion the backend reports contacts and measured speeds to
:class:`ProtectiveStop` (:meth:`ProtectiveStop.trip`); the first cause is latched until
:meth:`ProtectiveStop.reset`.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from embeval import checks
from embeval.config import from_mapping
from embeval.errors import ConfigError, SafetyError
from embeval.robot.base import SafetyMode, SafetyStatus

OK = SafetyStatus()

#: UR5 joint range: +-360 deg on every joint except the elbow (+-180 deg, self-collision), as in ur_description.
UR5_JOINT_LOWER: tuple[float, ...] = (-2 * np.pi, -2 * np.pi, -np.pi, -2 * np.pi, -2 * np.pi, -2 * np.pi)
UR5_JOINT_UPPER: tuple[float, ...] = (2 * np.pi, 2 * np.pi, np.pi, 2 * np.pi, 2 * np.pi, 2 * np.pi)
#: UR5 maximum joint speeds, rad/s (180 deg/s on every joint).
UR5_MAX_JOINT_SPEED: tuple[float, ...] = (np.pi,) * 6


#: the fastest TCP speed a UR5 (and ur_rtde's moveL) accepts, m/s
UR_MAX_TCP_SPEED = 3.0
#: the highest acceleration embeval sends (m/s^2 for Cartesian moves, rad/s^2 for joint moves); ur_rtde allows more
UR_MAX_ACCELERATION = 10.0
#: the largest workspace-box coordinate (m, frame base): a UR5 reaches 0.85 m, a UR10 1.3 m
MAX_WORKSPACE_COORD = 2.0
#: name -> (low, high, unit): the range every numeric safety limit must lie in (low excluded, high included)
LIMIT_RANGES: dict[str, tuple[float, float, str]] = {
    "max_tcp_speed": (0.0, UR_MAX_TCP_SPEED, "m/s"),
    "default_tcp_speed": (0.0, UR_MAX_TCP_SPEED, "m/s"),
    "default_joint_speed": (0.0, np.pi, "rad/s"),
    "max_joint_speed": (0.0, np.pi, "rad/s"),
    "max_acceleration": (0.0, UR_MAX_ACCELERATION, "m/s^2 or rad/s^2"),
    "max_step_translation": (0.0, 1.0, "m"),
    "max_step_rotation": (0.0, np.pi, "rad"),
    "max_command_age_s": (0.0, 60.0, "s"),
    "control_hz": (0.0, 500.0, "Hz"),
    "state_rate_hz": (0.0, 1000.0, "Hz"),
}


def check_range(name: str, value: Any, low: float | None = None, high: float | None = None, unit: str = "") -> float:
    """``value`` as a float when it is a finite number with ``low < value <= high`` (defaults from
    :data:`LIMIT_RANGES`), else a ConfigError naming ``name``, the range and the fix (:func:`embeval.checks.number`).
    NaN, inf, booleans, strings and None are refused: a NaN limit compares False and would disable the check it guards."""
    lo, hi, u = LIMIT_RANGES.get(name, (low, high, unit))
    lo, hi, unit = (lo if low is None else low), (hi if high is None else high), (unit or u)
    return checks.number(value, f"safety limit {name}", lo, hi, unit=unit, lo_open=True,
                         fix=f"set {name} to a value in that range")


def _tuple(v: Any, n: int, name: str) -> tuple[float, ...]:
    return checks.vector(v, f"safety limit {name}", n)


@dataclass(frozen=True)
class SafetyLimits:
    """Limits every backend enforces (frame base; metres, radians, seconds).

    The default workspace box is the simulated workcell's table area above the table top
    (z = 0 is the table surface). For a real cell, measure the box and pass it in the scene spec
    or the arm node's parameters.
    """

    workspace_lower: tuple[float, float, float] = (0.10, -0.50, 0.0)
    workspace_upper: tuple[float, float, float] = (0.90, 0.50, 0.70)
    joint_lower: tuple[float, ...] = UR5_JOINT_LOWER
    joint_upper: tuple[float, ...] = UR5_JOINT_UPPER
    max_joint_speed: tuple[float, ...] = UR5_MAX_JOINT_SPEED  # rad/s
    max_tcp_speed: float = 1.0  # m/s, a measured TCP speed above this trips a stop
    default_tcp_speed: float = 0.25  # m/s, Cartesian moves when no speed is given
    default_joint_speed: float = 1.0  # rad/s, joint moves when no speed is given
    max_step_translation: float | None = None  # m, refuse a single delta action longer than this (None: no limit)
    max_step_rotation: float | None = None  # rad, refuse a single delta action rotating more than this (None: no limit)
    max_acceleration: float = 2.0  # m/s^2 (Cartesian) / rad/s^2 (joint): the most a backend may command

    def __post_init__(self):
        for name, n in (("workspace_lower", 3), ("workspace_upper", 3), ("joint_lower", 6), ("joint_upper", 6), ("max_joint_speed", 6)):
            object.__setattr__(self, name, _tuple(getattr(self, name), n, name))
        for name in ("max_tcp_speed", "default_tcp_speed", "default_joint_speed", "max_acceleration"):
            object.__setattr__(self, name, check_range(name, getattr(self, name)))
        for name in ("max_step_translation", "max_step_rotation"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, check_range(name, getattr(self, name)))
        for i, v in enumerate(self.max_joint_speed):
            check_range(f"max_joint_speed[{i}]", v, *LIMIT_RANGES["max_joint_speed"])
        lo, hi = np.array(self.workspace_lower), np.array(self.workspace_upper)
        if np.any(np.abs(np.concatenate([lo, hi])) > MAX_WORKSPACE_COORD):
            raise ConfigError(f"workspace box {self.workspace_lower} .. {self.workspace_upper} reaches beyond "
                              f"{MAX_WORKSPACE_COORD} m from the base; measure the cell and set workspace_lower/workspace_upper")
        if np.any(lo >= hi):
            raise ConfigError(f"workspace_lower {self.workspace_lower} must be below workspace_upper {self.workspace_upper} on every axis")
        if np.any(np.array(self.joint_lower) >= np.array(self.joint_upper)):
            raise ConfigError("joint_lower must be below joint_upper for every joint")

    def to_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> SafetyLimits:
        return from_mapping(cls, d, "safety limits")


def check_workspace(tcp_position: Sequence[float], limits: SafetyLimits) -> SafetyStatus:
    """Stop when the TCP position (m, frame base) lies outside the workspace box."""
    p = np.asarray(tcp_position, dtype=np.float64).reshape(-1)[:3]
    lo, hi = np.array(limits.workspace_lower), np.array(limits.workspace_upper)
    bad = [f"{ax}={v:.3f} not in [{l:.3f}, {h:.3f}]" if abs(v) < 1e6 else f"{ax}={v:.3g} not in [{l:.3f}, {h:.3f}]" for ax, v, l, h in zip("xyz", p, lo, hi) if not (l <= v <= h)]
    if bad:
        return SafetyStatus(SafetyMode.PROTECTIVE_STOP, "workspace limit: TCP " + ", ".join(bad))
    return OK


def check_joint_limits(q: Sequence[float], limits: SafetyLimits) -> SafetyStatus:
    """Stop when a joint angle (rad) lies outside [joint_lower, joint_upper]."""
    q = np.asarray(q, dtype=np.float64).reshape(-1)
    lo, hi = np.array(limits.joint_lower), np.array(limits.joint_upper)
    bad = [f"joint {i} = {v:.3f} rad not in [{l:.3f}, {h:.3f}]" for i, (v, l, h) in enumerate(zip(q, lo, hi)) if not (l <= v <= h)]
    if bad:
        return SafetyStatus(SafetyMode.PROTECTIVE_STOP, "joint limit: " + "; ".join(bad))
    return OK


def check_joint_speed(qd: Sequence[float], limits: SafetyLimits) -> SafetyStatus:
    """Stop when a joint speed (rad/s) exceeds ``max_joint_speed``."""
    qd = np.abs(np.asarray(qd, dtype=np.float64).reshape(-1))
    mx = np.array(limits.max_joint_speed)
    bad = np.nonzero(~(qd <= mx * (1 + 1e-9)))[0]  # NaN refused too
    if bad.size:
        i = int(bad[0])
        return SafetyStatus(SafetyMode.PROTECTIVE_STOP, f"joint speed limit: joint {i} at {qd[i]:.3f} rad/s > {mx[i]:.3f}")
    return OK


def check_tcp_speed(speed: float, limits: SafetyLimits) -> SafetyStatus:
    """Stop when the TCP speed (m/s) exceeds ``max_tcp_speed``."""
    if not speed <= limits.max_tcp_speed * (1 + 1e-9):  # NaN refused too
        return SafetyStatus(SafetyMode.PROTECTIVE_STOP, f"TCP speed limit: {speed:.3f} m/s > {limits.max_tcp_speed:.3f}")
    return OK


def check_step(translation: Sequence[float], limits: SafetyLimits) -> SafetyStatus:
    """Refuse a single delta action whose translation (m) is longer than ``max_step_translation``, or not finite
    (refused with no limit set too)."""
    v = np.asarray(translation, dtype=np.float64).reshape(-1)[:3]
    if not np.isfinite(v).all():
        return SafetyStatus(SafetyMode.PROTECTIVE_STOP, f"step limit: delta translation {v.tolist()} is not finite")
    n = float(np.linalg.norm(v))
    if limits.max_step_translation is None:
        return OK
    if n > limits.max_step_translation * (1 + 1e-9):  # a policy clipped to exactly the limit passes (rounding)
        return SafetyStatus(SafetyMode.PROTECTIVE_STOP, f"step limit: delta of {n:.3f} m > {limits.max_step_translation:.3f} m")
    return OK


def check_step_rotation(rotation: Sequence[float], limits: SafetyLimits) -> SafetyStatus:
    """Refuse a single delta action whose rotation ``|[droll, dpitch, dyaw]|`` (rad, the norm the policy node
    clips with its own ``max_step_rotation``) is larger than ``max_step_rotation``."""
    v = np.asarray(rotation, dtype=np.float64).reshape(-1)[:3]
    if not np.isfinite(v).all():
        return SafetyStatus(SafetyMode.PROTECTIVE_STOP, f"step limit: delta rotation {v.tolist()} is not finite")
    n = float(np.linalg.norm(v))
    if limits.max_step_rotation is None:
        return OK
    if not n <= limits.max_step_rotation * (1 + 1e-9):  # NaN refused too
        return SafetyStatus(SafetyMode.PROTECTIVE_STOP,
                            f"step limit: rotation of {n:.3f} rad > max_step_rotation {limits.max_step_rotation:.3f} rad")
    return OK


def check_command(
    limits: SafetyLimits,
    tcp_target: Sequence[float] | None = None,
    q_target: Sequence[float] | None = None,
    delta_translation: Sequence[float] | None = None,
    delta_rotation: Sequence[float] | None = None,
) -> SafetyStatus:
    """All pre-motion checks for one command; the first violation wins (step, step rotation, workspace, joints)."""
    if delta_translation is not None and (s := check_step(delta_translation, limits)).stopped:
        return s
    if delta_rotation is not None and (s := check_step_rotation(delta_rotation, limits)).stopped:
        return s
    if tcp_target is not None and (s := check_workspace(tcp_target, limits)).stopped:
        return s
    if q_target is not None and (s := check_joint_limits(q_target, limits)).stopped:
        return s
    return OK


def motion_duration(distance: float, speed: float, min_duration: float = 0.0) -> float:
    """Seconds for a trapezoid-free constant-speed move of ``distance`` (m or rad) at ``speed``."""
    if speed <= 0:
        raise ConfigError(f"speed must be > 0, got {speed}")
    return max(min_duration, abs(distance) / speed)


@dataclass
class ProtectiveStop:
    """A latch: the first stop cause is kept until :meth:`reset`.

    Backends call :meth:`trip` with any non-OK status (contact, limit, speed) and
    :meth:`require_ok` before accepting a motion command.
    """

    status: SafetyStatus = field(default_factory=SafetyStatus)
    history: list[SafetyStatus] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status.ok

    def trip(self, status: SafetyStatus | str, mode: SafetyMode = SafetyMode.PROTECTIVE_STOP) -> SafetyStatus:
        """Latch ``status`` (or a reason string) unless already stopped; returns the latched status."""
        if isinstance(status, str):
            status = SafetyStatus(mode, status)
        if status.stopped:
            self.history.append(status)
            if self.status.ok:
                self.status = status
        return self.status

    def reset(self) -> SafetyStatus:
        self.status = OK
        return self.status

    def require_ok(self) -> None:
        """Raise :class:`SafetyError` when stopped (motion commands call this first)."""
        if self.status.stopped:
            raise SafetyError(
                f"arm is in {self.status.mode.value} ({self.status.reason}); remove the cause and call reset_safety() "
                "(sim: reset the episode) before commanding motion"
            )
