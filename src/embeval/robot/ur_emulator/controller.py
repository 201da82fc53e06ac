"""The emulated UR controller: robot state, safety, the 500 Hz control loop and the ur_rtde control program.

The uploaded ur_rtde control script is not interpreted as URScript; the controller recognises it and
runs its register protocol natively (:class:`~embeval.robot.ur_emulator.program.ControlProgram`).

Safety as the real controller reports it: a tick that would put the TCP (or a link frame) below the
table plane, the TCP outside the workspace box, or a joint outside its limits is not executed; the
arm stops there, ``safety_mode`` becomes 3 (PROTECTIVE_STOP), ``safety_status_bits`` bit 2 is set
(bit 0 cleared, bit 10 "stopped due to safety" set) and the running program is stopped
(``runtime_state`` 1). The dashboard's ``unlock protective stop`` clears it once
``unlock_delay`` seconds have passed (5 s on a real controller).
"""
from __future__ import annotations

import logging
import math
import re
import threading
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from embeval.kinematics import UR, UR5
from embeval.kinematics.transforms import pose_to_matrix
from embeval.robot.safety import SafetyLimits, check_joint_limits, check_workspace
from embeval.robot.ur_emulator.motion import (
    MotionError,
    StopMotion,
    pose_of,
    rotvec_of,
    tcp_frames,
)
from embeval.robot.ur_emulator.program import ControlProgram
from embeval.robot.ur_rtde_backend import UR_MODE_NAMES as SAFETY_MODE_NAMES

log = logging.getLogger("embeval.ur_emulator")

# UR numbering (RTDE guide)
ROBOT_MODE_POWER_OFF, ROBOT_MODE_IDLE, ROBOT_MODE_RUNNING = 3, 5, 7
SAFETY_NORMAL, SAFETY_PROTECTIVE_STOP = 1, 3
RUNTIME_STOPPED, RUNTIME_PLAYING = 1, 2
JOINT_MODE_RUNNING, JOINT_MODE_POWER_OFF = 253, 239
ROBOT_MODE_NAMES = {-1: "NO_CONTROLLER", 0: "DISCONNECTED", 1: "CONFIRM_SAFETY", 2: "BOOTING", 3: "POWER_OFF",
                    4: "POWER_ON", 5: "IDLE", 6: "BACKDRIVE", 7: "RUNNING"}

CONTROL_SCRIPT_MARKERS = ("def rtde_control():", "def rtde_cmd():", "def signal_ready():")


@dataclass
class EmulatorConfig:
    """What the emulated controller is: version, limits, the table and how strict it is.

    ``version`` is what RTDE and the dashboard report (major, minor, bugfix, build); ``table_z`` the
    table plane height in frame base (m); ``tool`` a 4x4 tool0 -> TCP transform (None: TCP = tool0,
    the controller default). ``unlock_delay`` is the time (s) a protective stop must last before the
    dashboard unlocks it.
    """

    version: tuple[int, int, int, int] = (5, 15, 0, 116447)
    limits: SafetyLimits = field(default_factory=SafetyLimits)
    table_z: float | None = 0.0
    home_tcp: tuple[float, ...] = (0.45, 0.0, 0.30, math.pi, 0.0, 0.0)
    home_q_near: tuple[float, ...] = (math.pi, -math.pi / 2, math.pi / 2, -math.pi / 2, -math.pi / 2, 0.0)  # elbow up
    tool: np.ndarray | None = None
    rate_hz: float = 500.0
    unlock_delay: float = 5.0
    serial_number: str = "20235500042"
    robot_model: str = "UR5"


class Controller:
    """Robot state + control loop. All state is guarded by :attr:`lock`; :meth:`tick` advances one cycle."""

    def __init__(self, config: EmulatorConfig | None = None):
        self.config = cfg = config or EmulatorConfig()
        self.lock = threading.RLock()
        self.kin: UR = UR5(tool=cfg.tool)
        self.limits = cfg.limits
        self.max_speed = np.asarray(cfg.limits.max_joint_speed, float)
        q_near = np.asarray(cfg.home_q_near, float)
        sol = self.kin.ik_closest(pose_to_matrix(np.asarray(cfg.home_tcp, float)), q_near, frame="base")
        self.q = np.asarray(sol if sol is not None else q_near, float)
        self.qd = np.zeros(6)
        self.motion = None
        self.program: ControlProgram | None = None
        self.robot_mode = ROBOT_MODE_RUNNING
        self.safety_mode = SAFETY_NORMAL
        self.safety_reason = ""
        self.stopped_at = 0.0
        self.in_int = [0] * 48
        self.in_double = [0.0] * 48
        self.out_int = [0] * 48
        self.out_double = [0.0] * 48
        self.in_bits = [0, 0]
        self.std_do = 0
        self.conf_do = 0
        self.tool_do = 0
        self.analog_out = [0.0, 0.0]
        self.speed_slider = 1.0
        self.payload = (0.0, (0.0, 0.0, 0.0))
        self.t0 = time.monotonic()
        self.timestamp = 0.0
        self._frames, self._T = tcp_frames(self.kin, self.q)
        self._T_prev: np.ndarray | None = None
        self._state_ok = not self.violation(self.q, self._frames)
        self.tcp_pose = pose_of(self._T)
        self.tcp_speed = np.zeros(6)
        self.watchdog: tuple[float, int] | None = None  # (min frequency, register index)
        self.watchdog_last = 0.0
        self.errors: deque[str] = deque(maxlen=200)  # program errors / refused requests, newest last
        self.events: deque[str] = deque(maxlen=200)  # safety events, newest last
        self.loaded_program = "<none>"
        self.last_script = ""  # the last control script run: what the dashboard's "play" restarts

    # -- helpers ------------------------------------------------------------------------------
    def tcp_speed_norm(self) -> float:
        return float(np.linalg.norm(self.tcp_speed[:3]))

    @property
    def runtime_state(self) -> int:
        return RUNTIME_PLAYING if self.program is not None else RUNTIME_STOPPED

    def safety_status_bits(self) -> int:
        if self.safety_mode == SAFETY_PROTECTIVE_STOP:
            return (1 << 2) | (1 << 10)
        return 1 << 0

    def robot_status_bits(self) -> int:
        on = self.robot_mode != ROBOT_MODE_POWER_OFF
        return (1 << 0 if on else 0) | (1 << 1 if self.program is not None else 0)

    def digital_output_bits(self) -> int:
        return (self.std_do & 0xFF) | ((self.conf_do & 0xFF) << 8) | ((self.tool_do & 0x3) << 16)

    # -- program lifecycle ----------------------------------------------------------------------
    def load_script(self, script: str) -> str:
        """A script arrived on the script port; returns a one-line outcome for the log."""
        with self.lock:
            if all(m in script for m in CONTROL_SCRIPT_MARKERS):
                if self.safety_mode != SAFETY_NORMAL or self.robot_mode != ROBOT_MODE_RUNNING:
                    fix = ("unlock the protective stop first" if self.safety_mode != SAFETY_NORMAL
                           else "power on and release the brakes first (dashboard: power on, brake release)")
                    return self.refuse(f"cannot start the program: robot is in {self.safety_name()} / "
                                        f"{ROBOT_MODE_NAMES.get(self.robot_mode)}; {fix}")
                # ur_rtde injects the offset after the line's comment: "= # int register offset\n24"
                m = re.search(r"global\s+reg_offset_int\s*=\s*(?:#[^\n]*\n)?\s*(\d+)", script)
                off = int(m.group(1)) if m else 0
                if off not in (0, 24):
                    return self.refuse(f"register offset {off} is not 0 or 24")
                self.stop_program(None)
                self.last_script = script
                self.program = ControlProgram(self, off)
                self.program.start()
                self.loaded_program = "rtde_control"
                msg = f"ur_rtde control program started (register offset {off})"
                log.info("ur-emulator: %s", msg)
                return msg
            first = next((ln.strip() for ln in script.splitlines() if ln.strip()), "")
            return self.refuse(f"URScript is not supported by the UR emulator (only the ur_rtde control program "
                                f"runs); refused: {first[:80]!r}")

    def refuse(self, msg: str) -> str:
        """Record and log a refused request or program error; returns ``msg``."""
        self.errors.append(msg)
        log.error("ur-emulator: %s", msg)
        return msg

    def program_error(self, msg: str) -> None:
        """A runtime error in the program: stop it (and the arm) and record why."""
        self.refuse(msg)
        self.stop_program(msg)

    def stop_program(self, reason: str | None) -> None:
        if self.program is None:
            return
        self.program = None
        self.watchdog = None
        if self.motion is not None or np.any(self.qd != 0):
            self.motion = StopMotion(self.qd, 4.0)  # stopj(4) on program stop
        if reason:
            log.info("ur-emulator: program stopped: %s", reason)

    def set_watchdog(self, freq: float, reg: int) -> None:
        self.watchdog = (freq, reg)
        self.watchdog_last = time.monotonic()

    def inputs_received(self, fields: dict) -> None:
        """Apply one input data package (called by an RTDE connection)."""
        with self.lock:
            for name, v in fields.items():
                if name.startswith("input_int_register_"):
                    i = int(name.rsplit("_", 1)[1])
                    self.in_int[i] = int(v)
                    if self.watchdog is not None and i == self.watchdog[1]:
                        self.watchdog_last = time.monotonic()
                elif name.startswith("input_double_register_"):
                    self.in_double[int(name.rsplit("_", 1)[1])] = float(v)
            for mask_name, val_name, attr in (("standard_digital_output_mask", "standard_digital_output", "std_do"),
                                              ("configurable_digital_output_mask", "configurable_digital_output", "conf_do"),
                                              ("tool_digital_output_mask", "tool_digital_output", "tool_do")):
                if mask_name in fields and val_name in fields:
                    mask, val = int(fields[mask_name]), int(fields[val_name])
                    setattr(self, attr, (getattr(self, attr) & ~mask) | (val & mask))
            if "speed_slider_mask" in fields and int(fields["speed_slider_mask"]) == 1:
                self.speed_slider = min(1.0, max(0.0, float(fields.get("speed_slider_fraction", 1.0))))
            if "standard_analog_output_mask" in fields:
                mask = int(fields["standard_analog_output_mask"])
                for k in (0, 1):
                    if mask & (1 << k) and f"standard_analog_output_{k}" in fields:
                        self.analog_out[k] = float(fields[f"standard_analog_output_{k}"])
            for k, name in enumerate(("input_bit_registers0_to_31", "input_bit_registers32_to_63")):
                if name in fields:
                    self.in_bits[k] = int(fields[name])

    # -- safety ---------------------------------------------------------------------------------
    def safety_name(self) -> str:
        return SAFETY_MODE_NAMES.get(self.safety_mode, str(self.safety_mode))

    def violation(self, q, frames: np.ndarray | None = None) -> str:
        """Why joint vector ``q`` is not allowed ('' when it is); ``frames`` from :func:`tcp_frames` if known."""
        s = check_joint_limits(q, self.limits)
        if s.stopped:
            return s.reason
        F = tcp_frames(self.kin, q)[0] if frames is None else frames
        tcp = F[6, :3, 3]
        if self.config.table_z is not None:
            tz = self.config.table_z
            if tcp[2] < tz:
                return f"table plane: TCP z = {tcp[2]:.4f} m below the table at {tz:.3f} m"
            low = [i for i in range(2, 6) if F[i, 2, 3] < tz]
            if low:
                return f"table plane: joint frame {low[0]} at z = {F[low[0], 2, 3]:.4f} m below the table at {tz:.3f} m"
        s = check_workspace(tcp, self.limits)
        return s.reason if s.stopped else ""

    def protective_stop(self, reason: str) -> None:
        if self.safety_mode == SAFETY_PROTECTIVE_STOP:
            return
        self.safety_mode = SAFETY_PROTECTIVE_STOP
        self.safety_reason = reason
        self.stopped_at = time.monotonic()
        self.motion = None
        self.qd = np.zeros(6)
        self.tcp_speed = np.zeros(6)
        self.events.append(f"PROTECTIVE_STOP: {reason}")
        log.warning("ur-emulator: protective stop: %s", reason)
        if self.program is not None:
            self.program = None
            self.watchdog = None

    def unlock_protective_stop(self) -> tuple[bool, str]:
        """Dashboard ``unlock protective stop``; returns (ok, reply line)."""
        with self.lock:
            if self.safety_mode != SAFETY_PROTECTIVE_STOP:
                return True, "Protective stop releasing"
            if time.monotonic() - self.stopped_at < self.config.unlock_delay:
                return False, (f"Protective stop: Cannot unlock protective stop until "
                               f"{self.config.unlock_delay:g}s after occurrence. Always inspect cause of protective "
                               "stop before unlocking")
            self.safety_mode = SAFETY_NORMAL
            self.safety_reason = ""
            self.events.append("NORMAL: protective stop unlocked")
            return True, "Protective stop releasing"

    # -- control loop ---------------------------------------------------------------------------
    def tick(self, dt: float) -> None:
        """One control cycle of ``dt`` seconds: watchdog, program, motion, safety, state."""
        with self.lock:
            now = time.monotonic()
            self.timestamp = now - self.t0
            if self.watchdog is not None and self.program is not None:
                freq, _ = self.watchdog
                if now - self.watchdog_last > 1.0 / freq:
                    self.program_error(f"RTDE watchdog: input_int_register not updated for more than "
                                       f"{1.0 / freq:.3f} s (minimum {freq:g} Hz); program stopped")
            if self.program is not None and self.safety_mode == SAFETY_NORMAL:
                self.program.tick()
            q_prev = self.q
            if self.motion is not None:
                scale = self.speed_slider
                try:
                    q_next, done = self.motion.step(q_prev, dt * scale) if scale > 0 else (q_prev, False)
                except MotionError as exc:
                    self.motion = None
                    self.program_error(str(exc))
                    q_next, done = q_prev, True
                if np.any(q_next != q_prev):
                    F, T = tcp_frames(self.kin, q_next)
                    why = self.violation(q_next, F)
                    if why and self._state_ok:  # stop at the boundary: the violating step is not executed
                        self.protective_stop(why)
                        done = True
                    else:
                        self.q, self._frames, self._T, self._state_ok = np.asarray(q_next, float), F, T, not why
                if done:
                    self.motion = None
            prog = self.program
            if prog is not None and prog.blocking is not None and prog.blocking():
                prog.blocking = None  # the blocking command is done in the cycle its motion ended
                prog.signal_done()
            self.qd = (self.q - q_prev) / dt
            T_prev = pose_to_matrix(self.tcp_pose) if self._T_prev is None else self._T_prev
            if np.any(self.qd != 0):
                w = rotvec_of(self._T[:3, :3] @ T_prev[:3, :3].T) / dt
                self.tcp_speed = np.concatenate([(self._T[:3, 3] - T_prev[:3, 3]) / dt, w])
                self.tcp_pose = pose_of(self._T)
            else:
                self.tcp_speed = np.zeros(6)
            self._T_prev = self._T

    def snapshot(self) -> dict:
        """Every RTDE output field's current value (a dict for :meth:`rtde.Recipe.pack`)."""
        with self.lock:
            q, qd = self.q.tolist(), self.qd.tolist()
            pose, tcp_speed = self.tcp_pose.tolist(), self.tcp_speed.tolist()
            running = self.robot_mode == ROBOT_MODE_RUNNING
            joint_mode = [JOINT_MODE_RUNNING if running else JOINT_MODE_POWER_OFF] * 6
            zero6 = [0.0] * 6
            F = self._frames
            snap = {
                "timestamp": self.timestamp, "target_q": q, "target_qd": qd, "target_qdd": zero6,
                "target_current": zero6, "target_moment": zero6, "actual_q": q, "actual_qd": qd, "actual_qdd": zero6,
                "actual_current": zero6, "actual_current_as_torque": zero6, "actual_moment": zero6,
                "joint_control_output": zero6, "actual_TCP_pose": pose, "actual_TCP_speed": tcp_speed,
                "actual_TCP_force": zero6, "target_TCP_pose": pose, "target_TCP_speed": tcp_speed,
                "joint_temperatures": [30.0] * 6, "actual_joint_voltage": [48.0 if running else 0.0] * 6,
                "ft_raw_wrench": zero6, "payload_inertia": zero6,
                "actual_tool_accelerometer": [0.0, 0.0, -9.81], "elbow_position": F[3, :3, 3].tolist(),
                "elbow_velocity": [0.0, 0.0, 0.0], "payload_cog": list(self.payload[1]),
                "actual_digital_input_bits": 0, "actual_digital_output_bits": self.digital_output_bits(),
                "actual_execution_time": 0.2, "robot_mode": self.robot_mode, "joint_mode": joint_mode,
                "safety_mode": self.safety_mode, "safety_status": self.safety_mode, "speed_scaling": 1.0,
                "target_speed_fraction": self.speed_slider, "actual_momentum": 0.0, "actual_main_voltage": 48.0,
                "actual_robot_voltage": 48.0 if running else 0.0, "actual_robot_current": 0.5 if running else 0.0,
                "runtime_state": self.runtime_state, "robot_status_bits": self.robot_status_bits(),
                "safety_status_bits": self.safety_status_bits(), "analog_io_types": 0,
                "standard_analog_input0": 0.0, "standard_analog_input1": 0.0,
                "standard_analog_output0": self.analog_out[0], "standard_analog_output1": self.analog_out[1],
                "io_current": 0.0, "tool_mode": 0, "tool_analog_input_types": 0, "tool_analog_input0": 0.0,
                "tool_analog_input1": 0.0, "tool_output_voltage": 24, "tool_output_current": 0.0,
                "tool_temperature": 30.0, "tcp_force_scalar": 0.0, "payload": self.payload[0],
                "script_control_line": 0, "output_bit_registers0_to_31": 0, "output_bit_registers32_to_63": 0,
                "input_bit_registers0_to_31": self.in_bits[0], "input_bit_registers32_to_63": self.in_bits[1],
            }
            for i in range(48):
                snap[f"output_int_register_{i}"] = self.out_int[i]
                snap[f"output_double_register_{i}"] = self.out_double[i]
                snap[f"input_int_register_{i}"] = self.in_int[i]
                snap[f"input_double_register_{i}"] = self.in_double[i]
            return snap
