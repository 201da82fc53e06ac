"""The real UR5 over ``ur_rtde`` (RTDE control/receive + dashboard), behind the ArmBackend protocol.

Every command is checked against :class:`~embeval.robot.safety.SafetyLimits` *before* it is sent
(workspace box, joint limits, speed caps); a violation triggers the controller's protective stop
(``triggerProtectiveStop``) and nothing moves. The controller's own safety mode (UR numbering:
1 NORMAL, 2 REDUCED, 3 PROTECTIVE_STOP, 5 SAFEGUARD_STOP, 6/7 EMERGENCY_STOP, 8 VIOLATION, 9 FAULT)
is read on every state() call. Frame ``base`` (ur_rtde's frame), metres, radians, seconds.

The gripper is driven through a tool digital output (``gripper_output``; True closes) or disabled
(``gripper_output=None``); integrate another gripper by subclassing and overriding :meth:`set_gripper`.

``ur_rtde`` is imported lazily: constructing :class:`URRtdeArm` without the package or without a
reachable robot raises :class:`~embeval.errors.ServerUnavailableError` naming the fix.
"""
from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence

import numpy as np

from embeval.action import as_pose6, gripper_closed
from embeval.errors import ConfigError, ServerUnavailableError
from embeval.robot.base import (
    ArmState,
    SafetyMode,
    SafetyStatus,
    as_gripper,
    as_joints6,
)
from embeval.robot.safety import (
    ProtectiveStop,
    SafetyLimits,
    check_command,
    check_joint_limits,
    check_range,
)

#: UR safety modes (RTDE ``safety_mode`` / ``ur_dashboard_msgs/msg/SafetyMode``) -> embeval mode
UR_MODE_MAP = {
    1: SafetyMode.NORMAL, 2: SafetyMode.NORMAL,  # REDUCED is still allowed to move
    3: SafetyMode.PROTECTIVE_STOP, 4: SafetyMode.PROTECTIVE_STOP, 5: SafetyMode.PROTECTIVE_STOP,
    6: SafetyMode.EMERGENCY_STOP, 7: SafetyMode.EMERGENCY_STOP, 8: SafetyMode.EMERGENCY_STOP,
    9: SafetyMode.EMERGENCY_STOP, 10: SafetyMode.PROTECTIVE_STOP, 11: SafetyMode.PROTECTIVE_STOP,
    12: SafetyMode.PROTECTIVE_STOP, 13: SafetyMode.PROTECTIVE_STOP,
}
UR_MODE_NAMES = {1: "NORMAL", 2: "REDUCED", 3: "PROTECTIVE_STOP", 4: "RECOVERY", 5: "SAFEGUARD_STOP",
                 6: "SYSTEM_EMERGENCY_STOP", 7: "ROBOT_EMERGENCY_STOP", 8: "VIOLATION", 9: "FAULT",
                 10: "VALIDATE_JOINT_ID", 11: "UNDEFINED_SAFETY_MODE", 12: "AUTOMATIC_MODE_SAFEGUARD_STOP",
                 13: "SYSTEM_THREE_POSITION_ENABLING_STOP"}


def _import_rtde():
    try:
        import dashboard_client
        import rtde_control
        import rtde_io
        import rtde_receive
    except ImportError as exc:
        raise ServerUnavailableError(
            f"the ur_rtde package is missing ({exc}); install it with `pip install ur-rtde` to drive a real UR5"
        ) from None
    return rtde_control, rtde_receive, rtde_io, dashboard_client


def _bad_speed(speed, command: str, unit: str) -> str | None:
    """Why a commanded speed is refused (None: fine): it must be None (the default) or a finite number > 0
    (above the limit it is capped). A zero speed would block ur_rtde for good, a NaN reach the controller."""
    if speed is None:
        return None
    ok = not isinstance(speed, (bool, np.bool_)) and isinstance(speed, (int, float, np.integer, np.floating))
    if ok and np.isfinite(speed) and speed > 0:
        return None
    return f"{command} refused: speed must be a finite number > 0 {unit}, got {speed!r}"


class URRtdeArm:
    """A UR5 (or any e-Series/CB3 arm) at ``robot_ip`` driven by ur_rtde.

    ``acceleration`` in m/s^2 (Cartesian) and rad/s^2 (joint); ``speed_scaling`` (0, 1] scales
    every commanded speed on top of the limits (the controller's own slider still applies).
    ``control_hz``: the action rate; one action (:func:`embeval.robot.base.execute_step`) lasts at least
    ``1 / control_hz`` s (a short move waits out the rest of the period, a hold sleeps it).
    """

    name = "ur_rtde"

    def __init__(self, robot_ip: str, limits: SafetyLimits | None = None, *, acceleration: float = 0.5,
                 speed_scaling: float = 1.0, gripper_output: int | None = 0, frequency: float = 125.0,
                 control_hz: float = 10.0, modules=None):
        if not robot_ip:
            raise ConfigError("robot_ip is empty; pass the UR controller's IP address (e.g. robot_ip:=192.168.1.102)")
        if not 0 < speed_scaling <= 1:
            raise ConfigError(f"speed_scaling must lie in (0, 1], got {speed_scaling}")
        self.control_hz = check_range("control_hz", control_hz)
        self.robot_ip, self.limits = robot_ip, limits or SafetyLimits()
        acceleration = check_range("acceleration", acceleration, 0.0, self.limits.max_acceleration, "m/s^2 (rad/s^2 for joint moves)")
        self.acceleration, self.speed_scaling, self.gripper_output = acceleration, speed_scaling, gripper_output
        rc, rr, rio, dash = modules or _import_rtde()
        try:
            self._recv = rr.RTDEReceiveInterface(robot_ip, frequency)
            mode = int(self._recv.getSafetyMode())
        except Exception as exc:  # noqa: BLE001 - ur_rtde raises RuntimeError for every connection failure
            raise ServerUnavailableError(
                f"cannot connect to the UR controller at {robot_ip}: {exc}. Check the network cable and IP, that the "
                "robot is powered on and in remote control mode, and that no other program holds RTDE"
            ) from None
        if mode in (3, 4, 5):  # a stopped controller does not start ur_rtde's control script
            with contextlib.suppress(Exception):
                self._recv.disconnect()
            raise ServerUnavailableError(
                f"the UR controller at {robot_ip} is in {UR_MODE_NAMES.get(mode, mode)}: remove the cause, then unlock it "
                "on the teach pendant or through the dashboard server ('unlock protective stop' on port 29999) and start again")
        try:
            self._ctrl = rc.RTDEControlInterface(robot_ip, frequency)
            self._io = rio.RTDEIOInterface(robot_ip)
            self._dash = dash.DashboardClient(robot_ip)
            self._dash.connect()
        except Exception as exc:  # noqa: BLE001 - ur_rtde raises RuntimeError for every connection failure
            raise ServerUnavailableError(
                f"cannot connect to the UR controller at {robot_ip}: {exc}. Check the network cable and IP, that the "
                "robot is powered on and in remote control mode, and that no other program holds RTDE"
            ) from None
        self._latch = ProtectiveStop()
        self._gripper = 1.0
        self._t0 = time.monotonic()

    # -- state --------------------------------------------------------------------------------
    def ur_safety_mode(self) -> int:
        """The controller's safety mode number (UR numbering)."""
        return int(self._recv.getSafetyMode())

    def speed_scaling_state(self) -> float:
        """The controller's combined speed scaling in [0, 1] (the UR driver's speed_scaling topic)."""
        return float(self._recv.getSpeedScalingCombined())

    def _safety(self) -> SafetyStatus:
        mode = self.ur_safety_mode()
        m = UR_MODE_MAP.get(mode, SafetyMode.PROTECTIVE_STOP)
        if m is not SafetyMode.NORMAL:
            self._latch.trip(SafetyStatus(m, f"controller safety mode {UR_MODE_NAMES.get(mode, mode)}"))
        return self._latch.status

    def state(self) -> ArmState:
        return ArmState(
            np.asarray(self._recv.getActualQ(), dtype=np.float64),
            np.asarray(self._recv.getActualTCPPose(), dtype=np.float64),
            self._gripper,
            self._safety(),
            time.monotonic() - self._t0,
            np.asarray(self._recv.getActualQd(), dtype=np.float64),
        )

    # -- motion -------------------------------------------------------------------------------
    def move_tcp(self, pose: Sequence[float], speed: float | None = None, min_duration: float = 0.0) -> ArmState:
        t0 = time.monotonic()
        self._safety()
        self._latch.require_ok()
        p = as_pose6(pose, "TCP target")
        if (bad := _bad_speed(speed, "move_tcp", "m/s")) is not None:
            return self.protective_stop(bad)
        speed = min(self.limits.default_tcp_speed if speed is None else float(speed), self.limits.max_tcp_speed)
        status = check_command(self.limits, tcp_target=p[:3])
        if status.stopped:
            return self.protective_stop(status.reason)
        if not self._ctrl.moveL(p.tolist(), speed * self.speed_scaling, self.acceleration):
            self._latch.trip(self._rejected("moveL"))
            return self.state()
        self._settled_state()
        self._wait_until(t0 + float(min_duration))
        return self._settled_state()

    def _rejected(self, command: str) -> str:
        """Why the controller refused or aborted ``command``: its safety mode when that is not NORMAL."""
        try:  # the receive interface reports a stop a packet after the command returns: wait for it (<= 0.5 s)
            self._wait(lambda: UR_MODE_MAP.get(self.ur_safety_mode()) is not SafetyMode.NORMAL, 0.5)
            mode = self.ur_safety_mode()
        except Exception:  # noqa: BLE001 - the connection may be what failed
            return f"{command} was rejected by the controller (no state: check the connection)"
        if UR_MODE_MAP.get(mode, SafetyMode.PROTECTIVE_STOP) is SafetyMode.NORMAL:
            return f"{command} was rejected by the controller"
        return f"{command} stopped by the controller: safety mode {UR_MODE_NAMES.get(mode, mode)}"

    def hold(self, seconds: float) -> ArmState:
        """Keep still for ``seconds`` (nothing is sent; the controller holds the last target)."""
        t0 = time.monotonic()
        self._safety()
        self._latch.require_ok()
        self._wait_until(t0 + float(seconds))
        return self.state()

    @staticmethod
    def _wait_until(deadline: float) -> None:
        rest = deadline - time.monotonic()
        if rest > 0:
            time.sleep(rest)

    def move_joints(self, q: Sequence[float], speed: float | None = None) -> ArmState:
        self._safety()
        self._latch.require_ok()
        qv = as_joints6(q)
        if (bad := _bad_speed(speed, "move_joints", "rad/s")) is not None:
            return self.protective_stop(bad)
        speed = min(self.limits.default_joint_speed if speed is None else float(speed), min(self.limits.max_joint_speed))
        status = check_joint_limits(qv, self.limits)
        if status.stopped:
            return self.protective_stop(status.reason)
        if not self._ctrl.moveJ(qv.tolist(), speed * self.speed_scaling, self.acceleration):
            self._latch.trip(self._rejected("moveJ"))
            return self.state()
        return self._settled_state()

    def _settled_state(self, timeout: float = 0.2) -> ArmState:
        """The state once the receive stream shows the arm at rest: the control connection reports a move done
        a few packages before the separate receive connection delivers the final joints."""
        deadline = time.monotonic() + timeout
        while np.max(np.abs(self._recv.getActualQd())) > 1e-6 and time.monotonic() < deadline:
            time.sleep(0.002)
        return self.state()

    def set_gripper(self, opening: float) -> ArmState:
        self._latch.require_ok()
        g = as_gripper(opening)
        if self.gripper_output is not None:
            self._io.setToolDigitalOut(int(self.gripper_output), gripper_closed(g))
            time.sleep(0.3)  # finger travel; a digital gripper gives no feedback
        self._gripper = 0.0 if gripper_closed(g) else 1.0
        return self.state()

    def stop(self) -> ArmState:
        self._ctrl.stopL(2.0)
        return self.state()

    def protective_stop(self, reason: str) -> ArmState:
        """Latch ``reason``, then trigger the controller's protective stop (``triggerProtectiveStop``);
        when the controller does not accept it, decelerate with ``stopL`` instead."""
        self._latch.trip(reason)
        # ur_rtde answers False for the stop it caused (its command waits for "done", and a stopped
        # controller never says done): the safety mode tells whether the controller stopped
        if not self._ctrl.triggerProtectiveStop() and self.ur_safety_mode() not in (3, 4, 5):
            self._ctrl.stopL(2.0)
        else:  # the receive interface reports the stop a packet later: wait for it (at most 0.5 s)
            self._wait(lambda: UR_MODE_MAP.get(self.ur_safety_mode()) is not SafetyMode.NORMAL, 0.5)
        return self.state()

    def reset_safety(self, timeout: float = 10.0) -> ArmState:
        """Unlock a protective stop through the dashboard server (needs remote control mode) and restart the
        control script.

        The controller refuses an unlock during the first 5 s of a stop ("Cannot unlock protective stop
        until 5s after occurrence"): retried until ``timeout`` seconds. A protective stop also stops the
        program running ur_rtde's control script, so it is uploaded again before motion is accepted.
        """
        if self.ur_safety_mode() in (6, 7, 8, 9):
            raise ServerUnavailableError("the robot is in an emergency stop / fault: release the e-stop on the "
                                         "teach pendant and restart safety before resetting")
        deadline = time.monotonic() + timeout
        if self.ur_safety_mode() in (3, 4, 5):
            self._dash.closeSafetyPopup()
            while True:
                try:
                    self._dash.unlockProtectiveStop()
                    break
                except RuntimeError as exc:  # ur_rtde raises when the reply is not "Protective stop releasing"
                    if "Cannot unlock" not in str(exc) or time.monotonic() > deadline:
                        raise ServerUnavailableError(f"the controller refused to unlock the protective stop: {exc}. "
                                                     "Clear the cause on the teach pendant") from None
                    time.sleep(0.2)
            while self.ur_safety_mode() != 1 and time.monotonic() < deadline:
                time.sleep(0.01)
        if not self._ctrl.isConnected():
            self._ctrl.reconnect()
        if not self._ctrl.isProgramRunning():
            self._ctrl.reuploadScript()
            while not self._ctrl.isProgramRunning() and time.monotonic() < deadline:
                time.sleep(0.01)
            if not self._ctrl.isProgramRunning():
                raise ServerUnavailableError("the ur_rtde control script did not start again after the reset; check "
                                             "the teach pendant for a popup and that the robot is in remote control")
        self._latch.reset()
        return self.state()

    @staticmethod
    def _wait(condition, timeout_s: float) -> bool:
        """Poll ``condition()`` every 5 ms until it holds (True) or ``timeout_s`` passes (False)."""
        deadline = time.monotonic() + timeout_s
        while not condition():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        return True

    def close(self) -> None:
        # the IO interface too: ur_rtde's destructor of a still-connected RTDEIOInterface sends a pause and
        # reads the reply, which aborts the whole process (std::terminate) when the controller is gone by then
        for fn in (lambda: self._ctrl.stopScript(), lambda: self._ctrl.disconnect(), lambda: self._recv.disconnect(),
                   lambda: self._io.disconnect(), lambda: self._dash.disconnect()):
            with contextlib.suppress(Exception):  # best effort on shutdown
                fn()
