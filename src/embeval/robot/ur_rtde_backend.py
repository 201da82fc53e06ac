"""The real UR5 over ``ur_rtde`` (RTDE control/receive + dashboard), behind the ArmBackend protocol.

Every command is checked against :class:`~embeval.robot.safety.SafetyLimits` *before* it is sent
(workspace box, joint limits, speed caps); a violation triggers the controller's protective stop
(``triggerProtectiveStop``) and nothing moves. The controller's own safety mode (UR numbering:
1 NORMAL, 2 REDUCED, 3 PROTECTIVE_STOP, 5 SAFEGUARD_STOP, 6/7 EMERGENCY_STOP, 8 VIOLATION, 9 FAULT)
is read on every state() call. Frame ``base`` (ur_rtde's frame), metres, radians, seconds.

A joint move is checked along its whole path: moveJ interpolates linearly in joint space, so the TCP
of the target and of samples along the path (at most 1 cm of TCP travel apart, FK of
:class:`embeval.kinematics.UR5` with the controller's TCP offset) must lie in the workspace box.

Moves are sent asynchronously and polled: a dead-man watchdog (ur_rtde ``setWatchdog``, kicked by a
background thread and the poll loop) stops the controller's program, and with it the arm, when embeval
dies or stalls for ``1 / watchdog_hz`` s; Ctrl-C (or any exception) during a move decelerates it
(``stopL``/``stopJ``) before it propagates; a move that outlasts its expected duration, or a receive
stream that goes silent or disconnects for ``link_timeout_s``, ends the move with a latched stop
naming the cause (a lost connection: :attr:`URRtdeArm.link_lost`).

The gripper is driven through a tool digital output (``gripper_output``; True closes) or disabled
(``gripper_output=None``); integrate another gripper by subclassing and overriding :meth:`set_gripper`.

``ur_rtde`` is imported lazily: constructing :class:`URRtdeArm` without the package or without a
reachable robot raises :class:`~embeval.errors.ServerUnavailableError` naming the fix.
"""
from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Sequence

import numpy as np

from embeval.action import as_pose6, gripper_closed
from embeval.errors import ConfigError, SafetyError, ServerUnavailableError
from embeval.kinematics.dh import PRESETS
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
    check_workspace,
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

#: how far (m) the backend's kinematics (``ur_type``) may place the TCP from the controller's own calibrated FK
#: (nominal D-H against a calibrated arm: a few mm; another model: centimetres)
KINEMATICS_TOLERANCE_M = 0.01
#: joint offsets (rad) from the current joints where the first joint move compares both FKs (no motion)
KINEMATICS_PROBES = (np.array([0.6, -0.5, 0.7, -0.6, 0.8, 0.0]), np.array([-0.7, 0.4, -0.6, 0.9, -0.5, 0.0]))


def _probe_poses(q_now: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """``(name, joints)`` of the :data:`KINEMATICS_PROBES` around ``q_now``."""
    return [(f"probe joints {i}", q_now + d) for i, d in enumerate(KINEMATICS_PROBES)]


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
    from embeval import checks

    if speed is None:
        return None
    try:
        checks.number(speed, "speed", 0, None, unit=unit, lo_open=True)
    except ConfigError as exc:
        return f"{command} refused: {exc}"
    return None


class URRtdeArm:
    """A UR arm (CB3 or e-Series, ``ur_type``) at ``robot_ip`` driven by ur_rtde.

    ``acceleration`` in m/s^2 (Cartesian) and rad/s^2 (joint); ``speed_scaling`` (0, 1] scales
    every commanded speed on top of the limits (the controller's own slider still applies).
    ``control_hz``: the action rate; one action (:func:`embeval.robot.base.execute_step`) lasts at least
    ``1 / control_hz`` s (a short move waits out the rest of the period, a hold sleeps it).
    ``ur_type``: the robot's model (``ur5``, ``ur5e``, ...): its kinematics check joint paths against the workspace.
    """

    name = "ur_rtde"
    hardware = True  # a real controller: a run that ends in a stop or without it is a failed run (embeval graph exits 1)

    def __init__(self, robot_ip: str, limits: SafetyLimits | None = None, *, acceleration: float = 0.5,
                 speed_scaling: float = 1.0, gripper_output: int | None = 0, frequency: float = 125.0,
                 control_hz: float = 10.0, watchdog_hz: float = 2.0, link_timeout_s: float = 0.5, ur_type: str = "ur5",
                 modules=None):
        if not robot_ip:
            raise ConfigError("robot_ip is empty; pass the UR controller's IP address (e.g. robot_ip:=192.168.1.102)")
        speed_scaling = check_range("speed_scaling", speed_scaling, 0.0, 1.0, "(a fraction of every commanded speed)")
        # a NaN rate makes ur_rtde's receive interface reconnect for ever, 0 fails with a misleading message
        frequency = check_range("frequency", frequency, 0.0, 500.0, "Hz (RTDE: 500 on e-Series, 125 on CB3)")
        if gripper_output is not None and not (type(gripper_output) is int and gripper_output in (0, 1)):
            # another number reached no output (the controller ignores it) while the state said closed
            raise ConfigError(f"gripper_output must be the tool digital output 0 or 1 (None: no gripper), got {gripper_output!r}")
        self.control_hz = check_range("control_hz", control_hz)
        if not (math.isfinite(watchdog_hz) and 1.0 <= watchdog_hz <= 100.0):
            raise ConfigError(f"watchdog_hz must lie in [1, 100] Hz (the dead-man watchdog's minimum kick rate), got {watchdog_hz}")
        if not (math.isfinite(link_timeout_s) and 0.05 <= link_timeout_s <= 10.0):
            raise ConfigError(f"link_timeout_s must lie in [0.05, 10] s, got {link_timeout_s}")
        self.watchdog_hz, self.link_timeout_s = float(watchdog_hz), float(link_timeout_s)
        self.ur_type = str(ur_type).lower()
        if self.ur_type not in PRESETS:
            raise ConfigError(f"ur_type must be one of {', '.join(PRESETS)} (the robot's model: its kinematics check "
                              f"every joint path), got {ur_type!r}")
        self.link_lost = False  # set when the controller stopped answering (latched with the stop)
        self.robot_ip, self.limits = robot_ip, limits or SafetyLimits()
        acceleration = check_range("acceleration", acceleration, 0.0, self.limits.max_acceleration, "m/s^2 (rad/s^2 for joint moves)")
        self.acceleration, self.speed_scaling, self.gripper_output = acceleration, speed_scaling, gripper_output
        rc, rr, rio, dash = modules or _import_rtde()
        self._rio, self._dash_mod = rio, dash
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
        self._kin = None  # embeval.kinematics.UR5, made on the first joint move
        self._lock = threading.RLock()  # one ur_rtde control call at a time (the kicker thread and the caller)
        self._closing = threading.Event()
        self._moving = threading.Event()  # set while _move polls: then only the poll loop kicks the watchdog
        self._frozen_s = 0.0  # the longest time the kicker thread could not run (this process frozen), s
        self._script_stopped = False  # the kicker saw the control script stopped (cleared by reset_safety only)
        #: the latched stop is a control script stopped at the controller while embeval had not stopped anything (the
        #: pendant's Stop, the RTDE watchdog, a program error): the arm node's reset leaves it to a person
        self.stopped_outside = False
        self._command = "moveL"  # the async move being polled (halt decelerates it with the matching stop)
        self._halted = ""  # why halt() ended this backend's motion for good ('' : not halted)
        try:
            self._arm_watchdog()
        except BaseException:
            for fn in (self._ctrl.stopScript, self._ctrl.disconnect, self._recv.disconnect, self._io.disconnect,
                       self._dash.disconnect):
                with contextlib.suppress(Exception):  # best effort: the error being raised is the news
                    fn()
            raise
        self._kicker = threading.Thread(target=self._kick_loop, name="ur_rtde-watchdog", daemon=True)
        self._kicker.start()

    @property
    def stop_history(self) -> list[SafetyStatus]:
        """Every stop latched since the backend started (reset clears the latch, not this), oldest first."""
        return list(self._latch.history)

    # -- dead-man watchdog --------------------------------------------------------------------
    def _arm_watchdog(self) -> None:
        """Enable the controller's RTDE watchdog for the running control script: it stops the program (and the
        arm) when no kick arrives for 1 / watchdog_hz s. A restarted script needs it again."""
        with self._lock:
            if not self._ctrl.setWatchdog(self.watchdog_hz):
                raise ServerUnavailableError(f"the UR controller at {self.robot_ip} refused setWatchdog({self.watchdog_hz}); "
                                             "check that the ur_rtde control script runs (remote control mode)")

    def _kick(self) -> None:
        with self._lock:
            if self._ctrl.isConnected():
                if self._ctrl.isProgramRunning():
                    self._ctrl.kickWatchdog()
                else:  # seen while idle: a script restarted behind our back (pendant Play) runs without the watchdog
                    self._script_stopped = True

    def _kick_loop(self) -> None:
        """Kick the watchdog at 4x its minimum rate while connected (a daemon thread: it dies with the process,
        and so does the arm's permission to move)."""
        period = 0.25 / self.watchdog_hz
        last = time.monotonic()
        while not self._closing.wait(period):
            now = time.monotonic()
            self._frozen_s, last = max(self._frozen_s, now - last - period), now
            if self._moving.is_set():  # during a move only the poll loop kicks: a hung poll lets the watchdog stop it
                continue
            with contextlib.suppress(Exception):  # a lost connection is the poll loop's to report
                self._kick()

    # -- state --------------------------------------------------------------------------------
    def ur_safety_mode(self) -> int:
        """The controller's safety mode number (UR numbering)."""
        return int(self._recv.getSafetyMode())

    def speed_scaling_state(self) -> float:
        """The controller's combined speed scaling in [0, 1] (the UR driver's speed_scaling topic)."""
        return float(self._recv.getSpeedScalingCombined())

    def _safety(self) -> SafetyStatus:
        if not self._link_ok():  # a silent controller's last safety mode is no news: latched as lost
            return self._latch.status
        mode = self.ur_safety_mode()
        m = UR_MODE_MAP.get(mode, SafetyMode.PROTECTIVE_STOP)
        if m is not SafetyMode.NORMAL:
            self._latch.trip(SafetyStatus(m, f"controller safety mode {UR_MODE_NAMES.get(mode, mode)}"))
        elif self._script_stopped:
            self._trip_script_stop()
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
        if not self._program_ok():
            return self.state()
        speed = min(self.limits.default_tcp_speed if speed is None else float(speed), self.limits.max_tcp_speed)
        status = check_command(self.limits, tcp_target=p[:3])
        if status.stopped:
            return self.protective_stop(status.reason)
        travel = float(np.linalg.norm(p[:3] - np.asarray(self._recv.getActualTCPPose())[:3]))
        if not self._move("moveL", p.tolist(), speed * self.speed_scaling, travel / (speed * self.speed_scaling)):
            return self.state()
        self._settled_state()
        self._wait_until(t0 + float(min_duration))
        return self._settled_state()

    def _move(self, command: str, target: list, speed: float, expected_s: float) -> bool:
        """Send ``moveL``/``moveJ`` asynchronously and poll it to the end, kicking the watchdog; True when it
        finished. A refusal, a controller stop, a silent or lost connection or a move running far past
        ``expected_s`` latches a stop (False); an exception while polling (Ctrl-C) decelerates the arm first."""
        with self._lock:
            sent = getattr(self._ctrl, command)(target, speed, self.acceleration, True)
        if not sent:
            self._latch.trip(self._rejected(command))
            return False
        # the trapezoid's ramps add speed / acceleration; the rest is margin for a slowed speed slider
        budget = 2.0 * (expected_s + speed / self.acceleration) + 2.0
        deadline = time.monotonic() + budget
        self._command = command
        self._moving.set()
        try:
            while True:
                if not self._link_ok():
                    self._halt(command)
                    return False
                with self._lock:
                    # a stopped program (watchdog, protective stop) leaves the progress register as it was
                    running = self._ctrl.getAsyncOperationProgress() >= 0 and self._ctrl.isProgramRunning()
                    if running:
                        self._ctrl.kickWatchdog()
                if not running:
                    break
                if UR_MODE_MAP.get(self.ur_safety_mode(), SafetyMode.PROTECTIVE_STOP) is not SafetyMode.NORMAL:
                    self._latch.trip(self._rejected(command))
                    return False
                if time.monotonic() > deadline:
                    self._halt(command)
                    self.protective_stop(f"{command} did not finish within {budget:.1f} s (expected {expected_s:.1f} s; "
                                         "speed slider at 0? controller busy?)")
                    return False
                time.sleep(0.004)
        except RuntimeError as exc:  # ur_rtde raises when the link broke mid-call (its reconnect timed out)
            self._halt(command)
            self._lose_link(f"{command} polling failed: {exc}")
            return False
        except BaseException:
            self._halt(command)  # Ctrl-C / SystemExit: the arm decelerates before the exception goes on
            raise
        finally:
            self._moving.clear()
        if not self._program_ok(moving=True):  # the program stopped during the move (watchdog, pendant, controller)
            return False
        return True

    def halt(self, reason: str) -> ArmState:
        """Latch ``reason`` and decelerate a move in progress (stopL/stopJ) without the controller's protective stop:
        the operator ended the run (Ctrl-C of ``embeval graph``). Callable from another thread than the move's; the
        move returns at once, stopped, and nothing more is sent until :meth:`reset_safety`."""
        self._halted = reason  # for good: a reset already waiting on the controller must not clear it
        self._latch.trip(reason)
        self._halt(self._command if self._moving.is_set() else "moveL")
        return self.state()

    def _halt(self, command: str) -> None:
        """Decelerate a running async move (stopL for moveL, stopJ for moveJ); best effort on a broken link."""
        with contextlib.suppress(Exception), self._lock:
            if self._ctrl.isConnected():
                (self._ctrl.stopL if command == "moveL" else self._ctrl.stopJ)(2.0 if command == "moveL" else 4.0, False)

    def _link_ok(self) -> bool:
        """Whether the controller still answers: both connections up and the receive stream's controller timestamp
        advanced within ``link_timeout_s``; otherwise latch the stop (link_lost) and return False."""
        now = time.monotonic()
        with self._lock:  # the node's state timer calls this from another thread than the moves
            ok = self._recv.isConnected() and self._ctrl.isConnected()
        if ok:
            ts = float(self._recv.getTimestamp())
            if ts != getattr(self, "_last_ts", None):
                self._last_ts, self._last_ts_at = ts, now
            ok = now - getattr(self, "_last_ts_at", now) <= self.link_timeout_s
        if not ok:
            self._lose_link(f"no state for over {self.link_timeout_s:g} s")
        return ok

    def _lose_link(self, detail: str) -> None:
        """Latch the stop for a controller that stopped answering (``detail`` says how we know)."""
        self.link_lost = True
        self._latch.trip(f"lost the connection to the UR controller at {self.robot_ip} ({detail}): "
                         "check the network and the controller, then reset (it reconnects)")

    def _program_ok(self, moving: bool = False) -> bool:
        """Whether ur_rtde's control script runs; a stopped one latches a stop, never a silent restart: from here the
        RTDE watchdog (this process stalled), the pendant's Stop and a program error look the same, and restarting
        would override an operator. :meth:`reset_safety` restarts it."""
        if not self._link_ok():
            return False
        with self._lock:
            if self._ctrl.isProgramRunning() and not self._script_stopped:
                return True
        # The program flag comes on the control interface's RTDE connection, the safety mode on the receive
        # interface's: a controller's stop can end the program some packets before its mode arrives (more on a busy
        # machine). Waited for (<= 0.5 s), so that such a stop is named as the controller's, not as a watchdog's.
        if self._wait(lambda: UR_MODE_MAP.get(self.ur_safety_mode(), SafetyMode.PROTECTIVE_STOP)
                      is not SafetyMode.NORMAL, 0.5):
            self._latch.trip(self._rejected("the move"))
            return False
        self._trip_script_stop(moving)
        return False

    def _trip_script_stop(self, moving: bool = False) -> None:
        if self._latch.ok:  # the first cause: not a stop embeval itself triggered (that one is latched already)
            self.stopped_outside = True
        self._latch.trip(self._script_stop_reason(moving))

    def _script_stop_reason(self, moving: bool = False) -> str:
        frozen = (f"; this process was frozen for up to {self._frozen_s:.2f} s, over the watchdog's {1 / self.watchdog_hz:g} s"
                  if self._frozen_s > 1.0 / self.watchdog_hz else "")
        with self._lock:
            running = not moving and self._ctrl.isProgramRunning()
        again = "; it runs again, started from the pendant or dashboard without embeval's dead-man watchdog" if running else ""
        return ("the ur_rtde control script stopped" + (" during the move" if moving else "") + " (the RTDE "
                f"watchdog: this process stalled or died; or the pendant's Stop / a program error{frozen}){again}: "
                "call reset to restart it")

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
        if not self._program_ok():
            return self.state()
        speed = min(self.limits.default_joint_speed if speed is None else float(speed), min(self.limits.max_joint_speed))
        q0 = np.asarray(self._recv.getActualQ(), dtype=np.float64)
        status = check_joint_limits(qv, self.limits)
        if status.ok:
            status = self.check_joint_path(q0, qv)
        if status.stopped:
            return self.protective_stop(status.reason)
        joint_speed = speed * self.speed_scaling
        if not self._move("moveJ", qv.tolist(), joint_speed, float(np.max(np.abs(qv - q0))) / joint_speed):
            return self.state()
        return self._settled_state()

    def check_joint_path(self, q0: Sequence[float], q1: Sequence[float], step_m: float = 0.01):
        """The workspace check of a joint move from ``q0`` to ``q1`` (rad): moveJ interpolates linearly in joint
        space, so the TCP at the target and at samples along the path (50, more until neighbours lie at most
        ``step_m`` apart, up to 2000) must lie in the box. The TCP offset is the controller's (actual TCP pose
        against the flange's FK). The model (``ur_type``) must agree with the controller's own calibrated FK
        (``getForwardKinematics``) within :data:`KINEMATICS_TOLERANCE_M` at the target, and once at spread-out
        probe joints, or the move is refused: a path checked on another robot's kinematics proves nothing.
        Returns the first violation, naming where on the path it lies."""
        from embeval.kinematics import UR

        first = self._kin is None
        if first:
            self._kin = UR(self.ur_type)
        q0, q1 = np.asarray(q0, dtype=np.float64), np.asarray(q1, dtype=np.float64)
        q_now, tool = self._tcp_offset(self._kin)
        probes = [("target", q1)] + (_probe_poses(q_now) if first else [])
        why = self._fk_disagreement(probes, tool)
        if why:
            if first:
                self._kin = None  # checked again, probes included, on the next move
            return SafetyStatus(SafetyMode.PROTECTIVE_STOP, why + "; nothing was sent")
        n = 50
        while True:
            s = np.linspace(0.0, 1.0, n + 1)
            tcp = (self._kin.fk(q0 + s[:, None] * (q1 - q0), frame="base") @ tool)[:, :3, 3]
            gap = float(np.max(np.linalg.norm(np.diff(tcp, axis=0), axis=1)))
            if gap <= step_m or n >= 2000:
                break
            n = min(2000, int(math.ceil(n * gap / step_m)))
        for k in [n, *range(n + 1)]:  # the target first: its reason is the one a user expects
            st = check_workspace(tcp[k], self.limits)
            if st.stopped:
                where = "target" if k == n else f"joint path at {100 * s[k]:.0f}% of the move"
                return type(st)(st.mode, f"{st.reason} ({where}; moveJ moves in a straight line in joint space)")
        return st

    def _tcp_offset(self, kin) -> tuple[np.ndarray, np.ndarray]:
        """``(current joints (rad), the controller's TCP offset)``: the flange-to-TCP transform that maps ``kin``'s
        flange FK at the current joints onto the actual TCP pose."""
        from embeval.kinematics.transforms import inv_transform, pose_to_matrix

        q_now = np.asarray(self._recv.getActualQ(), dtype=np.float64)
        return q_now, inv_transform(kin.fk(q_now, frame="base")) @ pose_to_matrix(self._recv.getActualTCPPose())

    def _fk_disagreement(self, probes, tool) -> str:
        """Where the ``ur_type`` kinematics (with the TCP offset ``tool``) place the TCP more than
        :data:`KINEMATICS_TOLERANCE_M` from the controller's ``getForwardKinematics`` at a ``(where, q)`` of ``probes``
        ('' when they agree everywhere). Queries only: nothing moves."""
        for where, q in probes:
            with self._lock:
                theirs = np.asarray(self._ctrl.getForwardKinematics(q.tolist()), dtype=np.float64)[:3]
            err = float(np.linalg.norm((self._kin.fk(q, frame="base") @ tool)[:3, 3] - theirs))
            if not err <= KINEMATICS_TOLERANCE_M:
                return (f"the {self.ur_type} kinematics (ur_type) disagree with the controller's own by {1000 * err:.0f} mm "
                        f"at the {where}: set ur_type to this robot's model ({', '.join(PRESETS)})")
        return ""

    def check_kinematics(self) -> str:
        """'' when the ``ur_type`` kinematics agree with the controller's own FK at the current joints' probe poses,
        else why not (no motion; the arm node calls it at start so that a wrong ur_type fails before a dry run
        that never moves a joint hides it)."""
        from embeval.kinematics import UR

        kin = UR(self.ur_type)
        q_now, tool = self._tcp_offset(kin)
        self._kin = kin
        why = self._fk_disagreement(_probe_poses(q_now), tool)
        if why:
            self._kin = None  # the first joint move probes again
        return why

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
        with self._lock:
            self._ctrl.stopL(2.0)
        return self.state()

    def protective_stop(self, reason: str) -> ArmState:
        """Latch ``reason``, then trigger the controller's protective stop (``triggerProtectiveStop``);
        when the controller does not accept it, decelerate with ``stopL`` instead."""
        self._latch.trip(reason)
        if self.link_lost or not self._ctrl.isConnected():
            return self.state()  # nothing to send it to; the controller's watchdog stops the program
        # ur_rtde answers False for the stop it caused (its command waits for "done", and a stopped
        # controller never says done): the safety mode tells whether the controller stopped
        with self._lock:
            self._ctrl.triggerProtectiveStop()
        # the receive interface reports the stop a few packets later: wait for it (at most 0.5 s), else decelerate
        if not self._wait(lambda: UR_MODE_MAP.get(self.ur_safety_mode()) is not SafetyMode.NORMAL, 0.5):
            with self._lock:
                self._ctrl.stopL(2.0)
        return self.state()

    def reset_safety(self, timeout: float = 10.0) -> ArmState:
        """Unlock a protective stop through the dashboard server (needs remote control mode) and restart the
        control script.

        The controller refuses an unlock during the first 5 s of a stop ("Cannot unlock protective stop
        until 5s after occurrence"): retried until ``timeout`` seconds. A protective stop also stops the
        program running ur_rtde's control script, so it is uploaded again before motion is accepted.
        A connection that breaks during the reset latches a lost link (the next reset reconnects everything).
        """
        self._refuse_if_halted()
        try:
            return self._reset(timeout)
        except SafetyError:  # halted meanwhile (a RuntimeError too, but no connection trouble)
            raise
        except RuntimeError as exc:  # ur_rtde: a socket broke mid-reset (controller gone, cable pulled)
            self._lose_link(f"during reset: {exc}")
            raise ServerUnavailableError(f"lost the connection to the UR controller at {self.robot_ip} during the reset "
                                         f"({exc}); check the network and the controller, then reset again") from None

    def _reset(self, timeout: float) -> ArmState:
        if self.link_lost:  # the controller came back (or not): connect again before anything else
            try:
                with self._lock:
                    ok = _reconnect(self._recv) and _reconnect(self._ctrl)
            except Exception as exc:  # noqa: BLE001 - ur_rtde raises RuntimeError for every connection failure
                ok, why = False, str(exc)
            else:
                why = "reconnect failed"
            if not ok:
                raise ServerUnavailableError(f"the UR controller at {self.robot_ip} is still unreachable ({why}); check the "
                                             "network cable and that the controller is on, then reset again")
            _never_destroy(self._io)  # its socket died with the link: a fresh IO interface and dashboard
            try:
                self._io = self._rio.RTDEIOInterface(self.robot_ip)
                self._dash = self._dash_mod.DashboardClient(self.robot_ip)
                self._dash.connect()
            except Exception as exc:  # noqa: BLE001 - ur_rtde raises RuntimeError for every connection failure
                raise ServerUnavailableError(f"the UR controller at {self.robot_ip} answers RTDE but not its IO/dashboard "
                                             f"({exc}); check the controller, then reset again") from None
            self.link_lost = False
            self._last_ts = None
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
                    if "protective stop" not in str(exc).lower():
                        raise  # not the controller's reply: the connection broke
                    if "Cannot unlock" not in str(exc) or time.monotonic() > deadline:
                        raise ServerUnavailableError(f"the controller refused to unlock the protective stop: {exc}. "
                                                     "Clear the cause on the teach pendant") from None
                    time.sleep(0.2)
            while self.ur_safety_mode() != 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            # the stop ended the program, but the control interface reads its own RTDE stream, which can trail the
            # receive interface's: wait for it to say so (<= 0.5 s) rather than skip the restart on a stale bit
            self._wait(lambda: not self._program_running(), 0.5)
        with self._lock:
            _reconnect(self._ctrl)
            restart = not self._ctrl.isProgramRunning()
            if restart:
                self._ctrl.reuploadScript()
        if restart:
            while not self._ctrl.isProgramRunning() and time.monotonic() < deadline:
                time.sleep(0.01)
            if not self._ctrl.isProgramRunning():
                raise ServerUnavailableError("the ur_rtde control script did not start again after the reset; check "
                                             "the teach pendant for a popup and that the robot is in remote control")
        with self._lock:  # the kicker checks the script under this lock: it cannot flag the old one after this
            # always: a script restarted by us, or from the pendant/dashboard (Play), runs without the watchdog
            self._arm_watchdog()
            self._refuse_if_halted()  # halted while this reset waited on the controller: the stop stays
            self._script_stopped = self.stopped_outside = False
            self._latch.reset()
        return self.state()

    def _program_running(self) -> bool:
        with self._lock:
            return bool(self._ctrl.isProgramRunning())

    def _refuse_if_halted(self) -> None:
        if self._halted:
            raise SafetyError(f"reset refused: this arm was halted ({self._halted}); start again to move it")

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
        """Stop the control script and disconnect (idempotent)."""
        if not hasattr(self, "_ctrl"):
            return
        self._closing.set()
        self._kicker.join(2.0)
        # the IO interface too: ur_rtde's destructor of a still-connected RTDEIOInterface sends a pause and
        # reads the reply, which aborts the whole process (std::terminate) when the controller is gone by then
        lost = self.link_lost or not self._link_ok()
        calls = [lambda: self._ctrl.disconnect(), lambda: self._recv.disconnect(), lambda: self._dash.disconnect()]
        if not lost:  # stopScript waits for a reply a vanished controller never sends
            calls = [lambda: self._ctrl.stopScript(), *calls, lambda: self._io.disconnect()]
        for fn in calls:
            with contextlib.suppress(Exception):  # best effort on shutdown
                fn()
        if lost:
            _never_destroy(self._io)
        # destroyed now, not whenever the garbage collector gets to them: a ur_rtde destructor holds the GIL for
        # ~0.5 s, which would starve the watchdog kicker of another backend in this process (a new one after a close)
        del self._ctrl, self._recv, self._io, self._dash


def _reconnect(interface) -> bool:
    """Connect a ur_rtde receive or control interface again after its link broke (True: connected).

    ``reconnect()`` starts a new receive thread in place of the old one; an old thread still running then (it had not
    yet seen the broken socket) aborts the process. ``disconnect()`` stops and joins it first (~0.5 s)."""
    if interface.isConnected():
        return True
    interface.disconnect()
    return bool(interface.reconnect())


def _never_destroy(io) -> None:
    """Keep a ur_rtde RTDEIOInterface whose socket died alive for good: its destructor would send a pause on the dead
    socket and abort the whole process (std::terminate); nothing else makes it safe."""
    import ctypes

    ctypes.pythonapi.Py_IncRef(ctypes.py_object(io))
