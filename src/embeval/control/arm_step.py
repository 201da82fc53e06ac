"""One guarded arm step: a 7-DoF delta action becomes a checked TCP move; any doubt is a protective stop.

Frame ``base`` (UR controller frame), metres, radians. UR safety-mode numbers follow
``ur_dashboard_msgs/msg/SafetyMode`` (1 NORMAL, 3 PROTECTIVE_STOP, 7 ROBOT_EMERGENCY_STOP, ...).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np

from embeval.action import Action
from embeval.errors import EmbevalError, SafetyError
from embeval.robot.base import (
    ArmBackend,
    ArmState,
    SafetyMode,
    SafetyStatus,
    apply_delta,
    execute_step,
)
from embeval.robot.safety import SafetyLimits, check_command

#: ur_dashboard_msgs/msg/SafetyMode numbering
UR_SAFETY_MODES = {
    "NORMAL": 1, "REDUCED": 2, "PROTECTIVE_STOP": 3, "RECOVERY": 4, "SAFEGUARD_STOP": 5,
    "SYSTEM_EMERGENCY_STOP": 6, "ROBOT_EMERGENCY_STOP": 7, "VIOLATION": 8, "FAULT": 9,
    "VALIDATE_JOINT_ID": 10, "UNDEFINED_SAFETY_MODE": 11, "AUTOMATIC_MODE_SAFEGUARD_STOP": 12,
    "SYSTEM_THREE_POSITION_ENABLING_STOP": 13,
}


def ur_safety_mode(status: SafetyStatus) -> int:
    """Map an embeval :class:`SafetyStatus` to the UR controller's safety-mode number."""
    return {SafetyMode.NORMAL: 1, SafetyMode.PROTECTIVE_STOP: 3, SafetyMode.EMERGENCY_STOP: 7}[status.mode]


@dataclass(frozen=True)
class ArmStepResult:
    state: ArmState
    executed: bool
    reason: str = ""  # why not executed (or the stop cause)


class ArmCommander:
    """Apply delta actions to an :class:`ArmBackend` within :class:`SafetyLimits`.

    Before each move the target is checked (step size, workspace box, joint limits via the
    backend); a violation, a non-finite action, an unknown frame or a backend error trips the
    backend's protective stop (:meth:`ArmBackend.protective_stop`, latched until :meth:`reset`)
    and the arm does not move. ``speed`` (m/s) is capped at ``limits.max_tcp_speed``.

    Execution: every backend (sim, mock, ur_rtde) runs the one rule :func:`embeval.robot.base.execute_step`,
    the order and timing of :meth:`embeval.sim.env.SimEnv.step`: the move (lasting at least
    ``1 / backend.control_hz``), or a hold that long on a zero delta; then the gripper rule
    (:func:`embeval.action.gripper_command`: only a command across 0.5 drives the gripper, fully closed
    or open). The gripper value is clipped to [0, 1] first.
    """

    def __init__(self, backend: ArmBackend, limits: SafetyLimits | None = None, frame: str = "base",
                 speed: float | None = None):
        self.backend, self.limits, self.frame = backend, limits or SafetyLimits(), frame
        self.speed = min(speed or self.limits.default_tcp_speed, self.limits.max_tcp_speed)
        self.last_state: ArmState | None = None  # the last state read from the backend

    def _state(self) -> ArmState:
        self.last_state = self.backend.state()
        return self.last_state

    @property
    def stop_reason(self) -> str:
        """Why the arm is stopped (the backend's latched cause); empty while it may move."""
        return self._state().safety.reason

    def protective_stop(self, reason: str) -> ArmStepResult:
        """Trip the backend's protective stop with ``reason``.

        Never raises while the backend's state can still be read: when stopping fails, the arm is
        also told to :meth:`~ArmBackend.stop` and the failure is added to the reason.
        """
        try:
            return ArmStepResult(self.backend.protective_stop(reason), False, reason)
        except Exception as exc:  # noqa: BLE001 - stopping must not raise further
            reason = f"{reason} (protective stop failed: {type(exc).__name__}: {exc})"
        with contextlib.suppress(Exception):
            self.backend.stop()
        try:
            state = self._state()
        except Exception:  # noqa: BLE001
            if self.last_state is None:
                raise SafetyError(f"{reason}; the arm's state cannot be read either: check the connection") from None
            state = self.last_state
        return ArmStepResult(state, False, reason)

    def step(self, vector) -> ArmStepResult:
        """Execute one 7-DoF action ``[dx,dy,dz,droll,dpitch,dyaw,gripper]`` (frame :attr:`frame`)."""
        try:
            state = self._state()
        except Exception as exc:  # noqa: BLE001
            return self.protective_stop(f"cannot read arm state: {exc}")
        if state.safety.stopped:
            return ArmStepResult(state, False, f"arm stopped: {state.safety.reason}; reset first")
        v = np.asarray(vector, dtype=np.float64).reshape(-1)
        if v.shape != (7,) or not np.all(np.isfinite(v)):
            return self.protective_stop(f"invalid action {v.tolist()}: need 7 finite numbers")
        if self.frame not in ("base", "tool0"):
            return self.protective_stop(f"unknown action frame {self.frame!r}")
        target = apply_delta(state.tcp_pose, v[:6], self.frame)
        delta_world = target[:3] - state.tcp_position
        status = check_command(self.limits, tcp_target=target[:3], delta_translation=delta_world,
                               delta_rotation=v[3:6])
        if status.stopped:
            return self.protective_stop(status.reason)
        try:
            action = Action(np.concatenate([v[:6], [np.clip(v[6], 0.0, 1.0)]]))
            state = execute_step(self.backend, action, self.frame, self.speed, state=state)
        except EmbevalError as exc:
            return self.protective_stop(str(exc))
        except Exception as exc:  # noqa: BLE001 - any doubt: stop
            return self.protective_stop(f"backend error: {type(exc).__name__}: {exc}")
        self.last_state = state
        if state.safety.stopped:
            return ArmStepResult(state, False, state.safety.reason)
        return ArmStepResult(state, True, "")

    def reset(self, home_q=None) -> ArmState:
        """Clear a protective stop and (optionally) move home (joint move, rad)."""
        state = self.backend.reset_safety()
        if home_q is not None:
            state = self.backend.move_joints(home_q)
        return state
