"""A mock UR5 (no simulator, no network): the mock-hardware tier of the HIL tests and a dry stand-in.

It moves instantly (or in real time with ``realtime=True``), enforces the shared
:class:`~embeval.robot.safety.SafetyLimits` like the real controller would refuse a move
(target outside the workspace box or joint limits, speed above the limit -> protective stop,
no motion), and records every command in :attr:`MockArm.log`. Faults can be injected
(:meth:`MockArm.inject_fault`) to test the stop paths. Frame ``base``; metres, radians, seconds.

Joint angles follow the TCP through the analytic IK of :mod:`embeval.kinematics` when it offers
``UR5().ik_closest``; otherwise they stay at their last commanded values (the mock is Cartesian).
"""
from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from embeval.errors import ConfigError
from embeval.robot.base import (
    ArmState,
    SafetyMode,
    SafetyStatus,
    as_gripper,
    as_joints6,
    as_pose6,
)
from embeval.robot.safety import (
    ProtectiveStop,
    SafetyLimits,
    check_command,
    check_joint_limits,
    check_tcp_speed,
    motion_duration,
)

#: a home pose above the table, gripper pointing down (x, y, z m; rotation vector rad)
HOME_TCP: tuple[float, ...] = (0.45, 0.0, 0.30, np.pi, 0.0, 0.0)
#: UR5 "up-ish" home joints used when no kinematics are available (rad)
HOME_Q: tuple[float, ...] = (0.0, -1.5708, 1.5708, -1.5708, -1.5708, 0.0)


def _kinematics():
    try:
        from embeval.kinematics import UR5

        kin = UR5()
        return kin if hasattr(kin, "ik_closest") and hasattr(kin, "fk") else None
    except Exception:  # noqa: BLE001 - kinematics optional for the mock
        return None


class MockArm:
    """In-memory :class:`~embeval.robot.base.ArmBackend` with UR-like safety behaviour."""

    name = "mock"

    def __init__(self, limits: SafetyLimits | None = None, home_tcp: Sequence[float] = HOME_TCP,
                 home_q: Sequence[float] = HOME_Q, realtime: bool = False, use_kinematics: bool = True,
                 control_hz: float = 10.0):
        self.limits = limits or SafetyLimits()
        self.realtime = realtime
        if not control_hz > 0:
            raise ConfigError(f"control_hz must be > 0 (Hz), got {control_hz}")
        self.control_hz = float(control_hz)  # one action lasts at least 1 / control_hz s (clock _t)
        self._kin = _kinematics() if use_kinematics else None
        self.home_tcp = as_pose6(home_tcp, "home_tcp")
        self.home_q = as_joints6(home_q, "home_q")
        if self._kin is not None:  # joints that really reach home_tcp
            from embeval.kinematics.transforms import pose_to_matrix

            sol = self._kin.ik_closest(pose_to_matrix(self.home_tcp), self.home_q, frame="base")
            if sol is not None and len(np.atleast_1d(sol)):
                self.home_q = np.asarray(sol, dtype=np.float64).reshape(6)
        self._tcp = self.home_tcp.copy()
        self._q = self.home_q.copy()
        self._gripper = 1.0
        self._t = 0.0
        self._latch = ProtectiveStop()
        self.log: list[tuple[str, tuple]] = []
        self.closed = False

    # -- protocol ---------------------------------------------------------------------------
    def state(self) -> ArmState:
        return ArmState(self._q.copy(), self._tcp.copy(), self._gripper, self._latch.status, self._t, np.zeros(6))

    def _advance(self, seconds: float) -> None:
        self._t += seconds
        if self.realtime:
            time.sleep(seconds)

    def move_tcp(self, pose: Sequence[float], speed: float | None = None, min_duration: float = 0.0) -> ArmState:
        self._latch.require_ok()
        p = as_pose6(pose, "TCP target")
        speed = self.limits.default_tcp_speed if speed is None else float(speed)
        self.log.append(("move_tcp", (p.tolist(), speed)))
        status = check_command(self.limits, tcp_target=p[:3])
        if status.ok:
            status = check_tcp_speed(speed, self.limits)
        q_new = self._q
        if status.ok and self._kin is not None:
            from embeval.kinematics.transforms import pose_to_matrix

            sol = self._kin.ik_closest(pose_to_matrix(p), self._q, frame="base")
            if sol is None or len(np.atleast_1d(sol)) == 0:
                status = SafetyStatus(SafetyMode.PROTECTIVE_STOP, "target unreachable (no IK solution)")
            else:
                q_new = np.asarray(sol, dtype=np.float64).reshape(6)
                status = check_joint_limits(q_new, self.limits)
        if status.stopped:
            self._latch.trip(status)
            return self.state()
        self._advance(motion_duration(float(np.linalg.norm(p[:3] - self._tcp[:3])), speed, min_duration))
        self._tcp, self._q = p, q_new
        return self.state()

    def hold(self, seconds: float) -> ArmState:
        self._latch.require_ok()
        self.log.append(("hold", (float(seconds),)))
        self._advance(float(seconds))
        return self.state()

    def move_joints(self, q: Sequence[float], speed: float | None = None) -> ArmState:
        self._latch.require_ok()
        qv = as_joints6(q)
        speed = self.limits.default_joint_speed if speed is None else float(speed)
        self.log.append(("move_joints", (qv.tolist(), speed)))
        status = check_joint_limits(qv, self.limits)
        if status.ok and speed > min(self.limits.max_joint_speed) * (1 + 1e-9):
            status = SafetyStatus(SafetyMode.PROTECTIVE_STOP, f"joint speed limit: {speed:.3f} rad/s")
        tcp = self._tcp
        if status.ok and self._kin is not None:
            from embeval.kinematics.transforms import matrix_to_pose

            tcp = np.asarray(matrix_to_pose(self._kin.fk(qv, frame="base")), dtype=np.float64)
        elif status.ok and np.allclose(qv, self.home_q):
            tcp = self.home_tcp.copy()
        if status.stopped:
            self._latch.trip(status)
            return self.state()
        self._advance(motion_duration(float(np.max(np.abs(qv - self._q))), speed))
        self._q, self._tcp = qv, tcp
        return self.state()

    def set_gripper(self, opening: float) -> ArmState:
        self._latch.require_ok()
        g = as_gripper(opening)
        self.log.append(("set_gripper", (g,)))
        self._advance(0.1)
        self._gripper = g
        return self.state()

    def stop(self) -> ArmState:
        self.log.append(("stop", ()))
        return self.state()

    def protective_stop(self, reason: str) -> ArmState:
        """Latch a protective stop (what the controller does on a fault); the arm holds."""
        self.log.append(("protective_stop", (reason,)))
        self._latch.trip(reason)
        return self.state()

    def reset_safety(self) -> ArmState:
        self.log.append(("reset_safety", ()))
        self._latch.reset()
        return self.state()

    def close(self) -> None:
        self.closed = True

    # -- test hooks -------------------------------------------------------------------------
    def inject_fault(self, reason: str = "injected fault", emergency: bool = False) -> None:
        """Simulate a controller-side stop (e.g. contact): the next commands raise SafetyError."""
        self._latch.trip(reason, SafetyMode.EMERGENCY_STOP if emergency else SafetyMode.PROTECTIVE_STOP)
