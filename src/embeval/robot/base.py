"""The arm backend protocol shared by the simulated workcell, the mock arm and the real UR5 (ur_rtde).

Conventions (docs/kinematics.md, Frames and conventions):

- every pose is in the UR controller frame ``base`` (what ur_rtde reports), metres and radians;
- a TCP pose is ``[x, y, z, rx, ry, rz]`` with ``(rx, ry, rz)`` a rotation vector (axis * angle),
  the same layout as ``ur_rtde``'s ``getActualTCPPose``;
- joint vectors are the 6 UR5 joints in the order of :data:`JOINT_NAMES`, radians;
- the gripper opening is in [0, 1], 1 = fully open (OpenVLA's convention);
- a 7-DoF delta action and the pose helpers (:func:`apply_delta`, :func:`pose_delta`) are defined in
  :mod:`embeval.action`, re-exported here for the arm backends;
- :func:`execute_step` is the one meaning of a 7-DoF action on every backend: the move (lasting at
  least ``1 / control_hz``) or a hold, then the gripper rule (:func:`embeval.action.gripper_command`).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol, runtime_checkable

import numpy as np

from embeval.action import (
    Action,
    apply_delta,
    as_pose6,
    gripper_command,
    matrix_to_rpy,
    pose_delta,
    rpy_to_matrix,
)
from embeval.errors import InvalidInputError
from embeval.kinematics import JOINT_NAMES

__all__ = ["JOINT_NAMES", "ArmBackend", "ArmState", "SafetyMode", "SafetyStatus", "apply_delta", "as_gripper", "as_joints6", "as_pose6",
           "execute_step", "matrix_to_rpy", "pose_delta", "rpy_to_matrix"]


class SafetyMode(str, Enum):
    """Safety state of an arm, a subset of the UR controller's safety modes."""

    NORMAL = "normal"
    PROTECTIVE_STOP = "protective_stop"  # contact or limit violation; cleared by reset_safety()
    EMERGENCY_STOP = "emergency_stop"  # operator e-stop / unrecoverable; also cleared by reset_safety() in sim


@dataclass(frozen=True)
class SafetyStatus:
    """Whether the arm may move, and why not."""

    mode: SafetyMode = SafetyMode.NORMAL
    reason: str = ""  # human-readable cause, e.g. "contact: wrist_3_link with table"

    @property
    def ok(self) -> bool:
        return self.mode is SafetyMode.NORMAL

    @property
    def stopped(self) -> bool:
        return not self.ok

    def to_dict(self) -> dict:
        return {"mode": self.mode.value, "reason": self.reason}


@dataclass(frozen=True)
class ArmState:
    """A snapshot of the arm (frame ``base``)."""

    joint_positions: np.ndarray  # (6,) rad
    tcp_pose: np.ndarray  # (6,) [x, y, z, rx, ry, rz], metres + rotation vector
    gripper: float  # opening in [0, 1], 1 = open
    safety: SafetyStatus = field(default_factory=SafetyStatus)
    timestamp: float = 0.0  # seconds since the backend started (sim time for the simulator)
    joint_velocities: np.ndarray | None = None  # (6,) rad/s when the backend knows them

    @property
    def tcp_position(self) -> np.ndarray:
        return np.asarray(self.tcp_pose[:3], dtype=np.float64)

    def to_dict(self) -> dict:
        return {
            "joint_positions": np.asarray(self.joint_positions, dtype=float).tolist(),
            "tcp_pose": np.asarray(self.tcp_pose, dtype=float).tolist(),
            "gripper": float(self.gripper),
            "safety": self.safety.to_dict(),
            "timestamp": float(self.timestamp),
        }


@runtime_checkable
class ArmBackend(Protocol):
    """What every arm (simulated, mock, real UR5 over ur_rtde) offers.

    Motion commands block until the motion ends or a safety stop trips; they never raise for a
    safety stop (the returned :class:`ArmState` carries it) but raise
    :class:`embeval.errors.SafetyError` when called while the arm is already stopped, and
    :class:`embeval.errors.InvalidInputError` for malformed commands (NaN, wrong shape).
    A 7-DoF action is executed on any backend by :func:`execute_step` (move or hold, then gripper).
    """

    name: str
    #: the action rate (Hz): one executed action lasts at least ``1 / control_hz`` seconds
    control_hz: float

    def state(self) -> ArmState:
        """The current joint positions, TCP pose, gripper opening and safety status."""
        ...

    def move_joints(self, q: Sequence[float], speed: float | None = None) -> ArmState:
        """Joint-space move to ``q`` (rad) at ``speed`` rad/s (backend default when None)."""
        ...

    def move_tcp(self, pose: Sequence[float], speed: float | None = None, min_duration: float = 0.0) -> ArmState:
        """Linear Cartesian move of the TCP to ``pose`` ``[x,y,z,rx,ry,rz]`` (frame base) at ``speed`` m/s;
        the call lasts at least ``min_duration`` seconds (a short move is slowed or waits out the rest)."""
        ...

    def hold(self, seconds: float) -> ArmState:
        """Keep the arm still for ``seconds`` (the simulator runs that much physics); raises
        :class:`~embeval.errors.SafetyError` while stopped, like a motion command."""
        ...

    def set_gripper(self, opening: float) -> ArmState:
        """Open (1) or close (0) the gripper; blocks until the fingers stop."""
        ...

    def stop(self) -> ArmState:
        """Decelerate and hold the current position (not a safety stop)."""
        ...

    def protective_stop(self, reason: str) -> ArmState:
        """Latch a protective stop with ``reason`` (the first cause is kept) and halt the arm.

        Until :meth:`reset_safety` the returned and later states report ``PROTECTIVE_STOP`` and
        motion commands raise :class:`~embeval.errors.SafetyError`. Implementations latch first,
        then talk to the hardware (ur_rtde: ``RTDEControlInterface.triggerProtectiveStop()``), so a
        failing connection cannot leave the arm unlatched.
        """
        ...

    def reset_safety(self) -> ArmState:
        """Clear a protective stop (after the cause was removed)."""
        ...

    def close(self) -> None:
        """Release the connection / simulator."""
        ...


def as_joints6(q: Sequence[float], name: str = "joint vector") -> np.ndarray:
    v = np.asarray(q, dtype=np.float64).reshape(-1)
    if v.shape != (6,) or not np.all(np.isfinite(v)):
        raise InvalidInputError(f"{name} must be 6 finite joint angles in radians ({', '.join(JOINT_NAMES)}), got {q!r}")
    return v


def as_gripper(opening: float) -> float:
    """Validate a gripper opening in [0, 1] (1 = open); raise :class:`InvalidInputError` otherwise."""
    g = float(opening)
    if not np.isfinite(g) or not 0.0 <= g <= 1.0:
        raise InvalidInputError(f"gripper opening must lie in [0, 1] (1 = open), got {opening!r}")
    return g


def execute_step(arm: ArmBackend, action: Action, frame: str = "base", speed: float | None = None,
                 state: ArmState | None = None) -> ArmState:
    """Execute one 7-DoF delta ``action`` on ``arm``: the same order and timing on every backend.

    1. the move: the TCP goes in a straight line to ``apply_delta(tcp_pose, action[:6], frame)`` at ``speed``
       m/s (the backend's default when None), the call lasting at least ``1 / arm.control_hz`` seconds; a
       zero delta (every component within 1e-9, :attr:`Action.moves`) holds still that long instead;
    2. unless the move stopped the arm, the gripper rule: :func:`embeval.action.gripper_command` of the
       commanded opening against the opening *after* the move; when it crosses 0.5 the gripper is driven fully
       closed (0) or open (1) with :meth:`ArmBackend.set_gripper`, otherwise nothing is sent.

    ``state``: the arm's state just read (saves a read). Safety checks are the caller's
    (:class:`embeval.control.ArmCommander`); a stop during the move is in the returned state.
    """
    state = arm.state() if state is None else state
    period = 1.0 / float(arm.control_hz)
    if action.moves:
        state = arm.move_tcp(apply_delta(state.tcp_pose, action.vector[:6], frame), speed=speed, min_duration=period)
    else:
        state = arm.hold(period)
    if state.safety.ok:
        target = gripper_command(action.gripper, state.gripper)
        if target is not None:
            state = arm.set_gripper(target)
    return state
