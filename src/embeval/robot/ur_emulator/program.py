"""ur_rtde's control script, run natively: its main loop and command handlers on the register protocol.

The command id is read from ``input_int_register_<off>`` (``off`` 0, or 24 with the client's
upper-range flag), parameters from the input double registers; ``output_int_register_<off>`` is 1
when ready for a command and 2 when done with one, ``output_int_register_<off+2>`` carries async
progress. Realtime commands (servo*, speed*, ...) are applied every cycle and leave the register at
1. A command without a handler stops the program with "... is not supported by the UR emulator".
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from embeval.kinematics.transforms import matrix_to_pose, pose_to_matrix
from embeval.robot.ur_emulator.motion import (
    Chain,
    JointMove,
    LinearMove,
    MotionError,
    ServoMotion,
    SpeedJMotion,
    SpeedLMotion,
    StopMotion,
    solve_near,
    tcp_frames,
)

if TYPE_CHECKING:
    from embeval.robot.ur_emulator.controller import Controller

#: ur_rtde's command ids (RTDEControlInterface's RobotCommand) and names for messages
CMD_NAMES = {
    0: "NO_CMD", 1: "moveJ", 2: "moveJ_IK", 3: "moveL", 4: "moveL_FK", 6: "forceMode", 7: "forceModeStop",
    8: "zeroFtSensor", 9: "speedJ", 10: "speedL", 11: "servoJ", 12: "servoC", 15: "speedStop", 16: "servoStop",
    17: "setPayload", 18: "teachMode", 19: "endTeachMode", 20: "forceModeSetDamping",
    21: "forceModeSetGainScaling", 24: "servoL", 25: "toolContact", 26: "getStepTime",
    27: "getActualJointPositionsHistory", 28: "getTargetWaypoint", 29: "setTcp", 30: "getInverseKinematics",
    31: "triggerProtectiveStop", 33: "stopL", 34: "stopJ", 35: "setWatchdog", 36: "isPoseWithinSafetyLimits",
    37: "isJointsWithinSafetyLimits", 38: "getJointTorques", 39: "poseTrans", 40: "getTCPOffset", 41: "jogStart",
    42: "jogStop", 43: "getForwardKinematics", 44: "getForwardKinematics", 45: "moveJ/moveL(path)",
    46: "getInverseKinematics", 47: "isSteady", 51: "moveUntilContact", 52: "freedriveMode",
    53: "endFreedriveMode", 54: "getFreedriveStatus", 55: "setExternalForceTorque", 56: "ftRtdeInputEnable",
    57: "enableExternalFtSensor", 58: "getActualToolFlangePose", 59: "setGravity",
    60: "getInverseKinematicsHasSolution", 61: "getInverseKinematicsHasSolution", 62: "startContactDetection",
    63: "stopContactDetection", 64: "readContactDetection", 65: "setTargetPayload", 66: "directTorque",
    67: "getMassMatrix", 68: "getCoriolisAndCentrifugalTorques", 69: "getTargetJointAccelerations",
    70: "getJacobian", 71: "getJacobianTimeDerivative", 255: "stopScript",
}
#: commands the control script processes every cycle without the ready/done handshake
REALTIME_CMDS = frozenset({6, 9, 10, 11, 24, 25, 26, 27, 38, 58})
#: ur_rtde's stopScript command (the script ends without "done")
STOP_SCRIPT = 255


class ControlProgram:
    """The ur_rtde control script's main loop and command handlers, run natively each control tick."""

    def __init__(self, ctrl: Controller, reg_offset: int = 0):
        self.ctrl, self.off = ctrl, reg_offset
        self.executing = False
        self.blocking: Callable[[], bool] | None = None  # the blocking op's "finished?" test
        self.async_move = False  # a move thread is running
        self.async_wr_count = 0
        self.async_op_id = 0
        self.stale: int | None = None  # the command register's value at start, ignored until it changes

    # registers, relative to the offset, as the script addresses them
    def in_int(self, i: int) -> int:
        return self.ctrl.in_int[i + self.off]

    def in_float(self, i: int) -> float:
        return self.ctrl.in_double[i + self.off]

    def in_vec(self, i: int) -> np.ndarray:
        return np.array([self.ctrl.in_double[i + self.off + k] for k in range(6)])

    def out_int(self, i: int, v: int) -> None:
        self.ctrl.out_int[i + self.off] = int(v)

    def out_float(self, i: int, v: float) -> None:
        self.ctrl.out_double[i + self.off] = float(v)

    def signal_ready(self) -> None:
        self.out_int(0, 1)

    def signal_done(self) -> None:
        self.out_int(0, 2)

    def async_progress(self, value: int) -> None:
        """Async progress register: op id (bits 24-30), write count (16-23), running (15), progress (0-14)."""
        self.async_wr_count = (self.async_wr_count + 1) % 128
        if value == 0:
            self.async_op_id = (self.async_op_id + 1) % 128
        reg = self.async_wr_count * 65536 + self.async_op_id * 16777216
        if value >= 0:
            reg += min(value, 32767) + 32768
        self.out_int(2, reg)

    def start(self) -> None:
        # ur_rtde's stopScript leaves 255 in the register and uploads the next program at once: a controller slow to
        # start a script would have the new program stop itself. That 255 was meant for the program before; the new
        # one acts on the register once it changes. Any other command there is the client's, written while this
        # program started (ur_rtde clears the register after every command): it runs, as the client waits for it.
        cmd = self.in_int(0)
        self.stale = cmd if cmd == STOP_SCRIPT else None
        self.async_progress(-1)
        self.signal_ready()

    # -- one cycle ----------------------------------------------------------------------------
    def tick(self) -> None:
        if self.blocking is not None:
            if not self.blocking():
                return
            self.blocking = None
            self.signal_done()
            return
        if self.async_move and self.ctrl.motion is None:
            self.async_move = False
            self.async_progress(-1)
        cmd = self.in_int(0)
        if self.stale is not None:
            if cmd == self.stale:
                return
            self.stale = None
        if cmd in REALTIME_CMDS:
            self.process(cmd)
            if self.ctrl.program is self:
                self.signal_ready()
        elif cmd == 0:
            self.executing = False
            self.signal_ready()
        elif not self.executing:
            self.executing = True
            if self.process(cmd) and self.blocking is None:
                self.signal_done()

    def process(self, cmd: int) -> bool:
        """Run one command; False when the program ended (stop script, error)."""
        handler = _HANDLERS.get(cmd)
        if handler is None:
            name = CMD_NAMES.get(cmd, f"command {cmd}")
            self.ctrl.program_error(f"{name} (ur_rtde command {cmd}) is not supported by the UR emulator")
            return False
        try:
            return handler(self) is not False
        except MotionError as exc:
            self.ctrl.program_error(str(exc))
            return False

    def block_until_still(self) -> None:
        self.blocking = lambda: self.ctrl.motion is None

    def stop_async_move(self) -> None:
        if self.async_move:
            self.async_move = False
            self.ctrl.motion = None
            self.async_progress(-1)

    # -- handlers -----------------------------------------------------------------------------
    def _move(self, kind: str):
        vec, v, a, is_async = self.in_vec(0), self.in_float(6), self.in_float(7), self.in_int(1) == 1
        ctrl = self.ctrl
        v_joint = min(v, float(np.min(ctrl.max_speed)))

        def build(q):
            if kind == "j":
                return JointMove(q, vec, v_joint, a)
            if kind == "j_ik":
                sol = ctrl.kin.ik_closest(pose_to_matrix(vec), q, frame="base")
                if sol is None:
                    raise MotionError(f"moveJ_IK target {np.round(vec, 4).tolist()} is out of reach")
                return JointMove(q, sol, v_joint, a)
            T = pose_to_matrix(vec) if kind == "l" else tcp_frames(ctrl.kin, vec)[1]  # l_fk: the pose of joints vec
            return LinearMove(ctrl.kin, q, T, v, a, ctrl.max_speed)

        self.stop_async_move()
        if float(np.max(np.abs(ctrl.qd))) > 1e-9:  # still moving (async move, speed, servo): brake at a, then go
            linear = kind in ("l", "l_fk")
            ctrl.motion = Chain(StopMotion(ctrl.qd, a, ctrl.tcp_speed_norm() if linear else None), build)
        else:
            ctrl.motion = build(ctrl.q.copy())
        if is_async:
            self.async_move = True
            self.async_progress(0)
        else:
            self.block_until_still()

    def cmd_movej(self):
        self._move("j")

    def cmd_movej_ik(self):
        self._move("j_ik")

    def cmd_movel(self):
        self._move("l")

    def cmd_movel_fk(self):
        self._move("l_fk")

    def cmd_speedj(self):
        qd, a = self.in_vec(0), self.in_float(6)
        m = self.ctrl.motion
        if isinstance(m, SpeedJMotion):
            m.update(qd, a)
        else:
            self.stop_async_move()
            self.ctrl.motion = SpeedJMotion(qd, a, self.ctrl.qd, self.ctrl.max_speed)

    def cmd_speedl(self):
        xd, a = self.in_vec(0), self.in_float(6)
        m = self.ctrl.motion
        if isinstance(m, SpeedLMotion):
            m.update(xd, a)
        else:
            self.stop_async_move()
            self.ctrl.motion = SpeedLMotion(self.ctrl.kin, xd, a, self.ctrl.max_speed, self.ctrl.tcp_speed)

    def _servo(self, q_target):
        t = self.in_float(8)
        m = self.ctrl.motion
        if isinstance(m, ServoMotion):
            m.update(q_target, t)
        else:
            self.stop_async_move()
            self.ctrl.motion = ServoMotion(q_target, t, self.ctrl.max_speed)

    def cmd_servoj(self):
        self._servo(self.in_vec(0))

    def cmd_servol(self):
        pose = self.in_vec(0)
        m = self.ctrl.motion
        key = tuple(pose)
        if isinstance(m, ServoMotion) and getattr(m, "pose_key", None) == key:
            m.update(m.target, self.in_float(8))  # the same target: no new IK
            return
        near = m.target if isinstance(m, ServoMotion) else self.ctrl.q
        sol = solve_near(self.ctrl.kin, pose_to_matrix(pose), near)
        if sol is None:
            raise MotionError(f"servoL target {np.round(pose, 4).tolist()} is out of reach")
        self._servo(sol)
        self.ctrl.motion.pose_key = key

    def _stop(self, decel: float, linear: bool) -> None:
        ctrl = self.ctrl
        ctrl.motion = StopMotion(ctrl.qd, decel, ctrl.tcp_speed_norm() if linear else None)

    def cmd_speed_stop(self):
        linear = not isinstance(self.ctrl.motion, SpeedJMotion)
        self._stop(self.in_float(0), linear)
        self.block_until_still()

    def cmd_servo_stop(self):
        self._stop(self.in_float(0), True)
        self.block_until_still()

    def _stopl_stopj(self, linear: bool):
        decel, is_async = self.in_float(0), self.in_int(1) == 1
        self.async_move = False
        self._stop(decel, linear)
        if is_async:
            self.async_move = True
            self.async_progress(0)
        else:
            self.block_until_still()

    def cmd_stopl(self):
        self._stopl_stopj(True)

    def cmd_stopj(self):
        self._stopl_stopj(False)

    def cmd_set_watchdog(self):
        f = self.in_float(0)
        if not f > 0:
            raise MotionError(f"setWatchdog needs a minimum frequency > 0 Hz, got {f}")
        self.ctrl.set_watchdog(f, self.off)

    def cmd_protective_stop(self):
        self.ctrl.protective_stop("protective stop triggered by the program (triggerProtectiveStop)")
        return False

    def cmd_stop_script(self):
        self.ctrl.stop_program("stopScript received")
        return False

    def cmd_get_steptime(self):
        self.out_float(0, 1.0 / self.ctrl.config.rate_hz)

    def cmd_set_payload(self):
        self.ctrl.payload = (self.in_float(0), (self.in_float(1), self.in_float(2), self.in_float(3)))

    def cmd_is_steady(self):
        self.out_int(1, int(self.ctrl.motion is None and float(np.max(np.abs(self.ctrl.qd))) < 1e-6))

    def cmd_fk(self):
        q = self.in_vec(0)
        for i, v in enumerate(matrix_to_pose(self.ctrl.kin.fk(q, frame="base"))):
            self.out_float(i, v)

    def cmd_fk_default(self):
        for i, v in enumerate(self.ctrl.tcp_pose):
            self.out_float(i, v)

    def cmd_ik(self):
        pose, near = self.in_vec(0), self.in_vec(6)
        sol = self.ctrl.kin.ik_closest(pose_to_matrix(pose), near, frame="base")
        if sol is None:
            raise MotionError(f"getInverseKinematics: pose {np.round(pose, 4).tolist()} is out of reach")
        for i, v in enumerate(sol):
            self.out_float(i, v)

    def cmd_ik_default(self):
        pose = self.in_vec(0)
        sol = self.ctrl.kin.ik_closest(pose_to_matrix(pose), self.ctrl.q, frame="base")
        if sol is None:
            raise MotionError(f"getInverseKinematics: pose {np.round(pose, 4).tolist()} is out of reach")
        for i, v in enumerate(sol):
            self.out_float(i, v)

    def cmd_move_path(self):
        self.ctrl.program_error("path moves (moveJ/moveL with a list of waypoints, movePath) are not supported by "
                                "the UR emulator; send the waypoints one by one with moveJ/moveL")
        return False


_HANDLERS: dict[int, Callable[[ControlProgram], bool | None]] = {
    1: ControlProgram.cmd_movej, 2: ControlProgram.cmd_movej_ik, 3: ControlProgram.cmd_movel,
    4: ControlProgram.cmd_movel_fk, 9: ControlProgram.cmd_speedj, 10: ControlProgram.cmd_speedl,
    11: ControlProgram.cmd_servoj, 24: ControlProgram.cmd_servol, 15: ControlProgram.cmd_speed_stop,
    16: ControlProgram.cmd_servo_stop, 17: ControlProgram.cmd_set_payload, 26: ControlProgram.cmd_get_steptime,
    31: ControlProgram.cmd_protective_stop, 33: ControlProgram.cmd_stopl, 34: ControlProgram.cmd_stopj,
    35: ControlProgram.cmd_set_watchdog, 43: ControlProgram.cmd_fk_default, 44: ControlProgram.cmd_fk,
    45: ControlProgram.cmd_move_path, 46: ControlProgram.cmd_ik_default, 30: ControlProgram.cmd_ik,
    47: ControlProgram.cmd_is_steady, 255: ControlProgram.cmd_stop_script,
}
