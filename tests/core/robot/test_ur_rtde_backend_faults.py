"""Hostile real-arm bring-up, round 3: the ur_rtde backend against ``embeval ur-emulator`` (a fresh emulator per test;
dashboard commands over a plain socket, so no ur_rtde object is destroyed while a backend lives in this process)."""
from __future__ import annotations

import socket
import sys
import time

import numpy as np
import pytest

pytest.importorskip("rtde_control")

from embeval.robot.ur_emulator.process import EmulatorProcess

WAIT = 5.0  # s: the longest a state change may take to show under load


def _until(pred, timeout: float = WAIT) -> bool:
    deadline = time.monotonic() + timeout
    while not pred() and time.monotonic() < deadline:
        time.sleep(0.005)
    return bool(pred())


def _dash(host: str, command: str) -> str:
    """One dashboard command (port 29999), as the pendant's operator or a PLC would send it."""
    with socket.create_connection((host, 29999), 5.0) as s:
        f = s.makefile("rw")
        f.readline()  # the banner
        f.write(command + "\n")
        f.flush()
        return f.readline().strip()


@pytest.fixture
def arm():
    from embeval.robot.ur_rtde_backend import URRtdeArm

    e = EmulatorProcess("--unlock-delay", "0.3")
    a = URRtdeArm(e.host)
    yield a, e
    a.close()
    e.close()


def _freeze(seconds: float) -> None:
    """Hold the GIL (no thread switch) for ``seconds``: the backend's watchdog kicker cannot run."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(seconds + 1.0)
    try:
        t = time.monotonic()
        while time.monotonic() - t < seconds:
            pass
    finally:
        sys.setswitchinterval(old)


def test_operator_stop_then_play_while_idle_latches_and_reset_rearms_the_watchdog(arm):
    """Stop then Play on the pendant while embeval idles: the restarted script has no dead-man watchdog. The backend
    latches the stop (state reports it, nothing moves); reset arms the watchdog again, so a frozen embeval stops it."""
    from embeval.errors import SafetyError

    a, e = arm
    q0 = a.state().joint_positions
    assert _dash(e.host, "stop") == "Stopped"
    assert _until(lambda: a.state().safety.stopped), "a script stopped while idle was not latched"
    assert "control script stopped" in a.state().safety.reason
    assert _dash(e.host, "play").startswith("Starting program")  # the operator restarts it by hand
    assert _until(lambda: e.log().count("control program started") >= 2)
    with pytest.raises(SafetyError, match="control script stopped"):
        a.move_joints(q0 + [0.05, 0, 0, 0, 0, 0])
    assert np.max(np.abs(a.state().joint_positions - q0)) < 1e-6
    assert a.reset_safety().safety.ok
    n = e.log().count("RTDE watchdog")
    _freeze(1.2)  # over the 0.5 s watchdog: the controller must stop the script
    assert _until(lambda: e.log().count("RTDE watchdog") > n), "reset left the script running without the watchdog"


def test_controller_lost_during_reset_latches_a_lost_link_and_the_next_reset_recovers():
    """The controller dies while reset waits out its unlock delay: reset answers 'lost the connection' (not 'refused
    to unlock ... teach pendant', not a raw RuntimeError) and marks the link lost; once the controller is back the next
    reset reconnects every interface: the arm moves and the gripper output reaches the controller."""
    import threading

    from embeval.errors import ServerUnavailableError
    from embeval.robot.ur_rtde_backend import URRtdeArm

    e = EmulatorProcess("--unlock-delay", "3")
    a = URRtdeArm(e.host)
    try:
        far = a.state().tcp_pose.copy()
        far[0] = 2.0
        assert a.move_tcp(far).safety.stopped  # refused, the controller's protective stop triggered
        assert _until(lambda: a.ur_safety_mode() == 3)
        killer = threading.Timer(1.0, e.proc.kill)
        killer.start()
        with pytest.raises(ServerUnavailableError, match="lost the connection to the UR controller"):
            a.reset_safety()
        killer.join()
        assert a.link_lost and a.state().safety.stopped
        e.close()
        e = EmulatorProcess("--unlock-delay", "0.3", host=e.host)  # the controller is back
        assert a.reset_safety().safety.ok and not a.link_lost
        p = a.state().tcp_pose.copy()
        p[0] += 0.02
        assert np.linalg.norm(a.move_tcp(p).tcp_pose[:3] - p[:3]) < 1e-4
        assert a.set_gripper(0.0).gripper == 0.0
        assert _until(lambda: a._recv.getActualDigitalOutputBits() & (1 << 16)), "the gripper output never arrived"
    finally:
        a.close()
        e.close()


@pytest.mark.parametrize("kw, msg", [
    ({"frequency": float("nan")}, "safety limit frequency: must be a finite number in \\(0, 500\\] Hz"),  # ur_rtde reconnected for ever
    ({"frequency": 0}, "frequency: must lie in"),
    ({"frequency": 1e9}, "frequency: must lie in"),
    ({"speed_scaling": "a"}, "speed_scaling: must be a finite number in \\(0, 1\\]"),
    ({"speed_scaling": float("nan")}, "speed_scaling: must be a finite number"),
    ({"gripper_output": 99}, "gripper_output must be the tool digital output 0 or 1"),  # no output, state said closed
    ({"gripper_output": 1.5}, "gripper_output must be"),
    ({"gripper_output": True}, "gripper_output must be"),
    ({"gripper_output": -1}, "gripper_output must be"),
])
def test_backend_arguments_are_refused_before_connecting(kw, msg):
    """Nothing listens at a free loopback address: a ConfigError (not 'cannot connect', not a hang) proves the argument
    is checked before ur_rtde is asked anything."""
    from embeval.errors import ConfigError
    from embeval.robot.ur_emulator.process import free_loopback_host
    from embeval.robot.ur_rtde_backend import URRtdeArm

    t = time.monotonic()
    with pytest.raises(ConfigError, match=msg):
        URRtdeArm(free_loopback_host(), **kw)
    assert time.monotonic() - t < 5.0


def test_halt_during_a_reset_that_waits_on_the_controller_keeps_the_arm_still():
    """Ctrl-C (halt) while a reset waits out the controller's unlock delay before its home move: the reset must not
    clear the halt and move home afterwards; it raises, the stop stays latched, nothing moves."""
    import threading

    from embeval.control import ArmCommander
    from embeval.errors import SafetyError
    from embeval.robot.ur_rtde_backend import URRtdeArm

    e = EmulatorProcess("--unlock-delay", "1.5")
    a = URRtdeArm(e.host)
    try:
        q0 = a.state().joint_positions
        home = q0 + [0.2, 0, 0, 0, 0, 0]
        a.protective_stop("a stop to reset")
        assert _until(lambda: a.ur_safety_mode() == 3)
        out: dict = {}

        def reset():
            try:
                out["state"] = ArmCommander(a, a.limits).reset(home)
            except Exception as exc:  # noqa: BLE001 - the test inspects it
                out["error"] = exc

        t = threading.Thread(target=reset)
        t.start()
        time.sleep(0.3)  # inside the 1.5 s unlock wait (the halt must win whenever it comes before the home move)
        a.halt("embeval graph interrupted (Ctrl-C)")
        t.join(20)
        assert isinstance(out.get("error"), SafetyError) and "halted" in str(out["error"]), out
        assert a.state().safety.stopped
        time.sleep(0.3)
        assert np.max(np.abs(a.state().joint_positions - q0)) < 1e-6  # never moved home
    finally:
        a.close()
        e.close()
