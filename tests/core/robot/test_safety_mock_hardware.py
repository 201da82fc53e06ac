"""Safety, tested on the mock-hardware tier (always runs): dry run by default, workspace and speed limits,
stale-input watchdogs, protective stop on any doubt, the ur_rtde backend against a fake controller."""
from __future__ import annotations

import time

import numpy as np
import pytest

from embeval.control import (
    ArmCommander,
    PolicyStepper,
    StepperConfig,
    Watchdog,
    clip_action,
    ur_safety_mode,
)
from embeval.errors import InvalidInputError, SafetyError, ServerUnavailableError
from embeval.robot.base import ArmBackend, SafetyMode
from embeval.robot.mock_backend import MockArm
from embeval.robot.safety import SafetyLimits
from embeval.subjects.scripted import ConstantPolicy, ImageStatsPolicy

IMG = np.full((8, 8, 3), 200, np.uint8)


def test_mock_arm_is_an_arm_backend_and_tracks_kinematics():
    arm = MockArm()
    assert isinstance(arm, ArmBackend)
    s = arm.state()
    np.testing.assert_allclose(s.tcp_pose[:3], [0.45, 0.0, 0.30])
    from embeval.kinematics import UR5
    from embeval.kinematics.transforms import matrix_to_pose

    # the joints reported really reach the reported TCP (independent check through forward kinematics)
    np.testing.assert_allclose(matrix_to_pose(UR5().fk(s.joint_positions, frame="base"))[:3], s.tcp_pose[:3], atol=1e-9)
    s2 = arm.move_tcp([0.5, 0.1, 0.25, np.pi, 0, 0])
    np.testing.assert_allclose(matrix_to_pose(UR5().fk(s2.joint_positions, frame="base"))[:3], [0.5, 0.1, 0.25], atol=1e-9)


def test_workspace_violation_is_a_protective_stop_without_motion():
    arm = MockArm()
    c = ArmCommander(arm)
    r = c.step([0.6, 0, 0, 0, 0, 0, 1])  # x = 1.05 m: outside the box
    assert not r.executed and "workspace" in r.reason
    assert arm.state().safety.mode is SafetyMode.PROTECTIVE_STOP
    np.testing.assert_allclose(arm.state().tcp_pose[:3], [0.45, 0.0, 0.30])  # did not move
    assert ur_safety_mode(arm.state().safety) == 3
    # latched: a harmless command is refused until reset
    assert not c.step([0.01, 0, 0, 0, 0, 0, 1]).executed
    with pytest.raises(SafetyError):
        arm.move_tcp([0.46, 0, 0.3, np.pi, 0, 0])
    c.reset()
    assert c.step([0.01, 0, 0, 0, 0, 0, 1]).executed and ur_safety_mode(arm.state().safety) == 1


def test_step_and_speed_limits():
    limits = SafetyLimits(max_step_translation=0.02, max_tcp_speed=0.1, default_tcp_speed=0.05)
    arm = MockArm(limits)
    c = ArmCommander(arm, limits, speed=5.0)
    assert c.speed == 0.1  # a requested speed above the limit is capped
    r = c.step([0.03, 0, 0, 0, 0, 0, 1])
    assert not r.executed and "step limit" in r.reason
    c.reset()
    assert c.step([0.015, 0, 0, 0, 0, 0, 1]).executed
    assert arm.log[-1][0] == "move_tcp" and arm.log[-1][1][1] == pytest.approx(0.1)
    # the backend itself refuses an over-speed move (protective stop, no motion)
    arm2 = MockArm(limits)
    s = arm2.move_tcp([0.46, 0, 0.3, np.pi, 0, 0], speed=0.5)
    assert s.safety.stopped and "speed" in s.safety.reason and s.tcp_pose[0] == pytest.approx(0.45)


@pytest.mark.parametrize("bad", [[np.nan, 0, 0, 0, 0, 0, 1], [0, 0, 0], [np.inf] * 7])
def test_malformed_action_stops(bad):
    arm = MockArm()
    r = ArmCommander(arm).step(bad)
    assert not r.executed and arm.state().safety.stopped


def test_backend_fault_and_unknown_frame_stop():
    arm = MockArm()
    arm.inject_fault("contact: wrist with table")
    r = ArmCommander(arm).step([0.01, 0, 0, 0, 0, 0, 1])
    assert not r.executed and "contact" in r.reason
    arm2 = MockArm()
    r2 = ArmCommander(arm2, frame="world").step([0.01, 0, 0, 0, 0, 0, 1])
    assert not r2.executed and arm2.state().safety.stopped


def test_gripper_command():
    arm = MockArm()
    c = ArmCommander(arm)
    assert c.step([0, 0, 0, 0, 0, 0, 0.0]).state.gripper == 0.0
    assert arm.log == [("hold", (0.1,)), ("set_gripper", (0.0,))]  # no motion for a zero delta: one control period held


def test_policy_dry_run_by_default_and_watchdogs():
    st = PolicyStepper(ConstantPolicy(vector=(0.01, 0, 0, 0, 0, 0, 1)))
    assert st.config.dry_run is True
    assert st.step(now=0.0).status == "hold"  # nothing received yet
    st.set_instruction("push the button", now=0.0)
    assert "stale image" in st.step(now=0.1).reason
    st.set_image(IMG, now=0.1)
    r = st.step(now=0.2)
    assert r.status == "dry_run" and not r.command and r.action is not None
    r = st.step(now=0.1 + 0.6)  # the image is now 0.6 s old > 0.5 s
    assert r.status == "hold" and r.action is None and "stale image" in r.reason
    live = PolicyStepper(ImageStatsPolicy(), StepperConfig(dry_run=False, max_instruction_age_s=5.0))
    live.set_instruction("pick", 0.0)
    live.set_image(IMG, 0.0)
    assert live.step(0.1).command
    live.set_image(IMG, 5.5)
    assert "stale instruction" in live.step(5.6).reason


def test_per_step_clipping():
    v, clipped = clip_action([0.3, 0.4, 0.0, 0.0, 0.0, 2.0, 1.5], 0.05, 0.25)
    assert clipped
    np.testing.assert_allclose(np.linalg.norm(v[:3]), 0.05)
    np.testing.assert_allclose(v[:3] / np.linalg.norm(v[:3]), [0.6, 0.8, 0.0])  # direction kept
    np.testing.assert_allclose(v[3:6], [0, 0, 0.25])
    assert v[6] == 1.0
    v2, c2 = clip_action([0.01, 0, 0, 0, 0, 0.1, 0.5], 0.05, 0.25)
    assert not c2 and np.allclose(v2, [0.01, 0, 0, 0, 0, 0.1, 0.5])


def test_broken_policy_holds_instead_of_crashing():
    class Broken:
        id = "broken"

        def reset(self, instruction):
            pass

        def act(self, obs):
            raise RuntimeError("CUDA out of memory")

    st = PolicyStepper(Broken(), StepperConfig(dry_run=False))
    st.set_instruction("pick", 0)
    st.set_image(IMG, 0)
    r = st.step(0.01)
    assert r.status == "error" and not r.command and "out of memory" in r.reason


def test_watchdog_ages():
    w = Watchdog({"image": 0.5, "command": 1.0})
    assert w.stale(0.0) == ["image", "command"]
    w.feed("image", 1.0)
    w.feed("command", 1.0)
    assert w.stale(1.4) == [] and w.stale(1.6) == ["image"] and w.stale(2.1) == ["image", "command"]
    assert "never received" in Watchdog({"x": 1.0}).reason(0.0)


class _FakeRTDE:
    """A fake UR controller: records calls, reports a configurable safety mode."""

    def __init__(self):
        self.calls = []
        self.mode = 1
        self.accept_stop = True  # triggerProtectiveStop() returns this (ur_rtde: bool)
        self.tcp = [0.45, 0.0, 0.3, np.pi, 0.0, 0.0]
        self.running = True  # the control script's program flag (isProgramRunning)
        self.late_mode: tuple[int, int] | None = None  # (mode, reads): the receive stream reports mode that many reads late
        self.on_move = None  # called after each moveL: the controller's side of the move
        fake = self

        class Recv:
            def __init__(self, ip, freq=125.0):
                fake.calls.append(("connect", ip))

            def getActualQ(self):
                return [0.0] * 6

            def getActualQd(self):
                return [0.0] * 6

            def getActualTCPPose(self):
                return list(fake.tcp)

            def getSafetyMode(self):
                if fake.late_mode is not None:
                    mode, reads = fake.late_mode
                    fake.late_mode = (mode, reads - 1) if reads > 1 else None
                    fake.mode = fake.mode if reads > 1 else mode
                return fake.mode

            def getSpeedScalingCombined(self):
                return 0.5

            def isConnected(self):
                return True

            def getTimestamp(self):
                return time.monotonic()  # a live stream: the controller's clock advances

        class Ctrl:
            def __init__(self, ip, freq=125.0):
                pass

            def moveL(self, pose, speed, acc, asynchronous=False):
                fake.calls.append(("moveL", tuple(pose), speed))
                fake.tcp = list(pose)
                if fake.on_move is not None:
                    fake.on_move()
                return True

            def moveJ(self, q, speed, acc, asynchronous=False):
                fake.calls.append(("moveJ", tuple(q), speed))
                return True

            def getAsyncOperationProgress(self):
                return -1  # the move is done as soon as it is sent

            def setWatchdog(self, hz):
                fake.calls.append(("setWatchdog", hz))
                return True

            def kickWatchdog(self):
                return True

            def triggerProtectiveStop(self):
                fake.calls.append(("triggerProtectiveStop",))
                fake.mode = 3 if fake.accept_stop else fake.mode
                return fake.accept_stop

            def stopL(self, a):
                fake.calls.append(("stopL",))

            def isConnected(self):
                return True

            def isProgramRunning(self):
                return fake.running

            def stopScript(self):
                pass

            def disconnect(self):
                pass

        class IO:
            def __init__(self, ip):
                pass

            def setToolDigitalOut(self, pin, level):
                fake.calls.append(("tool_out", pin, level))

        class Dash:
            def __init__(self, ip):
                pass

            def connect(self):
                pass

            def closeSafetyPopup(self):
                pass

            def unlockProtectiveStop(self):
                fake.calls.append(("unlock",))
                fake.mode = 1

            def disconnect(self):
                pass

        ns = type("M", (), {})
        self.modules = (type("rc", (), {"RTDEControlInterface": Ctrl}), type("rr", (), {"RTDEReceiveInterface": Recv}),
                        type("rio", (), {"RTDEIOInterface": IO}), type("dash", (), {"DashboardClient": Dash}))
        del ns


def test_ur_rtde_backend_checks_before_sending(monkeypatch):
    from embeval.robot import ur_rtde_backend as ur

    monkeypatch.setattr(ur.time, "sleep", lambda s: None)
    fake = _FakeRTDE()
    limits = SafetyLimits(max_tcp_speed=0.1)
    arm = ur.URRtdeArm("10.0.0.2", limits, modules=fake.modules, speed_scaling=0.5)
    assert isinstance(arm, ArmBackend) and arm.speed_scaling_state() == 0.5
    arm.move_tcp([0.5, 0.0, 0.3, np.pi, 0, 0], speed=1.0)
    moves = [c for c in fake.calls if c[0] == "moveL"]
    assert moves and moves[0][2] == pytest.approx(0.1 * 0.5)  # capped at max_tcp_speed, then scaled
    s = arm.move_tcp([1.5, 0.0, 0.3, np.pi, 0, 0])  # outside the box: never sent, protective stop triggered
    assert len([c for c in fake.calls if c[0] == "moveL"]) == 1
    assert ("triggerProtectiveStop",) in fake.calls and s.safety.stopped
    with pytest.raises(SafetyError):
        arm.move_tcp([0.5, 0.0, 0.3, np.pi, 0, 0])
    arm.reset_safety()
    assert ("unlock",) in fake.calls and arm.state().safety.ok
    arm.set_gripper(0.0)
    assert ("tool_out", 0, True) in fake.calls
    fake.mode = 7  # e-stop pressed on the pendant
    assert arm.state().safety.mode is SafetyMode.EMERGENCY_STOP
    with pytest.raises(ServerUnavailableError, match="emergency"):
        arm.reset_safety()


def test_ur_rtde_unreachable_names_the_fix():
    from embeval.robot.ur_rtde_backend import URRtdeArm

    class Boom:
        def __init__(self, *a, **k):
            raise RuntimeError("timeout")

    mods = (type("rc", (), {"RTDEControlInterface": Boom}), type("rr", (), {"RTDEReceiveInterface": Boom}),
            type("rio", (), {"RTDEIOInterface": Boom}), type("d", (), {"DashboardClient": Boom}))
    with pytest.raises(ServerUnavailableError, match="remote control"):
        URRtdeArm("10.0.0.3", modules=mods)


def _backend(kind: str, monkeypatch):
    if kind == "mock":
        return MockArm(), None
    if kind == "sim":
        from embeval.sim.arm_backend import SimArmBackend

        return SimArmBackend(), None
    from embeval.robot import ur_rtde_backend as ur

    monkeypatch.setattr(ur.time, "sleep", lambda s: None)
    fake = _FakeRTDE()
    return ur.URRtdeArm("10.0.0.2", modules=fake.modules), fake


def test_ur_rtde_backend_names_a_controller_stop_whose_safety_mode_arrives_late(monkeypatch):
    """The program flag and the safety mode come on two RTDE connections: a protective stop raised by the controller
    during a move ends the program some packets before the receive stream reports mode 3 (seen under load on the
    emulator). The latched reason names the controller's stop; a stop with no safety mode stays the script's."""
    arm, fake = _backend("ur_rtde", monkeypatch)

    def controller_stops():
        fake.running, fake.late_mode = False, (3, 5)  # mode 3 (PROTECTIVE_STOP) on the 5th read from now

    fake.on_move = controller_stops
    s = arm.move_tcp([0.5, 0.0, 0.3, np.pi, 0, 0])
    assert s.safety.stopped and "stopped by the controller: safety mode PROTECTIVE_STOP" in s.safety.reason
    assert not arm.stopped_outside  # a controller stop, not an unexplained end of the script

    arm, fake = _backend("ur_rtde", monkeypatch)
    fake.on_move = lambda: setattr(fake, "running", False)  # the script ends and the controller stays NORMAL
    s = arm.move_tcp([0.5, 0.0, 0.3, np.pi, 0, 0])
    assert s.safety.stopped and "control script stopped during the move" in s.safety.reason and arm.stopped_outside


@pytest.mark.parametrize("kind", ["mock", "sim", "ur_rtde"])
def test_every_backend_latches_protective_stop_until_reset(kind, monkeypatch):
    arm, fake = _backend(kind, monkeypatch)
    try:
        assert isinstance(arm, ArmBackend)
        for bad in (1.5, -0.1, float("nan")):  # one validation (robot.base.as_gripper) for every backend
            with pytest.raises(InvalidInputError, match=r"\[0, 1\]"):
                arm.set_gripper(bad)
        start = arm.state()
        target = start.tcp_pose.copy()
        target[0] += 0.01
        s = arm.protective_stop("operator pressed stop")
        assert s.safety.mode is SafetyMode.PROTECTIVE_STOP and s.safety.reason == "operator pressed stop"
        arm.protective_stop("second cause")  # the first cause is kept
        assert arm.state().safety.reason == "operator pressed stop" and ur_safety_mode(arm.state().safety) == 3
        with pytest.raises(SafetyError):
            arm.move_tcp(target)
        np.testing.assert_allclose(arm.state().tcp_pose[:3], start.tcp_pose[:3], atol=1e-6)  # did not move
        if fake is not None:
            assert fake.calls.count(("triggerProtectiveStop",)) == 2 and fake.mode == 3
        assert arm.reset_safety().safety.ok
        np.testing.assert_allclose(arm.move_tcp(target).tcp_pose[:3], target[:3], atol=2e-3)
    finally:
        arm.close()


def test_ur_rtde_stop_refused_by_controller_decelerates(monkeypatch):
    arm, fake = _backend("ur_rtde", monkeypatch)
    fake.accept_stop = False
    s = arm.protective_stop("watchdog")
    assert ("stopL",) in fake.calls and s.safety.stopped  # latched on our side even though the controller said no
    with pytest.raises(SafetyError):
        arm.move_tcp([0.46, 0.0, 0.3, np.pi, 0, 0])


def test_commander_uses_the_backend_latch_and_survives_a_failing_stop():
    arm = MockArm()
    c = ArmCommander(arm)
    assert not hasattr(c, "latch")  # one latch: the backend's
    c.protective_stop("stale command")
    assert arm.log[-1] == ("protective_stop", ("stale command",)) and c.stop_reason == "stale command"
    r = c.step([0.01, 0, 0, 0, 0, 0, 1])
    assert not r.executed and "stale command" in r.reason
    c.reset()
    assert c.stop_reason == "" and c.step([0.01, 0, 0, 0, 0, 0, 1]).executed

    class Flaky(MockArm):
        def protective_stop(self, reason):
            raise ConnectionError("socket closed")

    flaky = Flaky()
    r = ArmCommander(flaky).step([np.nan] * 7)
    assert not r.executed and "protective stop failed: ConnectionError" in r.reason
    assert flaky.log[-1] == ("stop", ())  # fell back to a plain stop


def test_arm_node_backend_registry():
    pytest.importorskip("rclpy", reason="the ROS 2 wheels are not installed: run scripts/install.sh")
    from embeval.errors import ConfigError
    from embeval.sim.arm_backend import SimArmBackend
    from embeval_ros.arm_node import make_backend

    limits = SafetyLimits(max_tcp_speed=0.07)
    sim = make_backend("sim", limits, task="Push", seed=2)  # what `ros2 run embeval_ros arm --ros-args -p backend:=sim` builds
    try:
        assert isinstance(sim, SimArmBackend) and sim.cell.limits is limits and sim.cell.scene.name.startswith("push")
    finally:
        sim.close()
    assert isinstance(make_backend("mock", limits), MockArm)
    with pytest.raises(ConfigError, match="choose from"):
        make_backend("kuka", limits)


def test_composed_sim_arm_enforces_the_arm_node_limits():
    """`embeval graph` builds the shared sim arm with the arm node's own workspace box and speeds."""
    pytest.importorskip("rclpy", reason="the ROS 2 wheels are not installed: run scripts/install.sh")
    from embeval_ros.graph import Graph, load_params

    params = load_params({"embeval_arm": {"ros__parameters": {"backend": "sim", "workspace_upper": [0.8, 0.4, 0.5],
                                                              "tcp_speed": 0.3, "max_tcp_speed": 0.2}}})
    with Graph(params) as g:
        node = g.nodes["embeval_arm"]
        assert node.backend is g.shared["arm"] and node.backend.cell.limits == node.limits
        assert node.limits.workspace_upper == (0.8, 0.4, 0.5) and node.commander.speed == pytest.approx(0.2)
        home = node.backend.state().tcp_pose
        s = node.backend.move_tcp([*home[:2], 0.55, *home[3:]])  # inside the default box (z <= 0.7), outside the node's
        assert s.safety.stopped and "workspace" in s.safety.reason
        np.testing.assert_allclose(s.tcp_pose[:3], home[:3], atol=1e-3)  # refused before the sim moved
