"""Parameter and limit validation of the real-arm path, as a hostile tester probed it.

A doubtful boolean never turns dry run off; a NaN, inf, zero, negative or too large safety limit, a string for a
number, an empty value or a wrong type is refused at startup with one line naming the parameter (exit 2);
the arm refuses a step that rotates more than ``max_step_rotation``; :class:`URRtdeArm` refuses a bad speed
with a latched protective stop. Arm behaviour is judged by the UR controller emulator through the real ur_rtde
client."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from conftest import wait_for

from embeval_cli import main
from embeval.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]
UR5 = str(ROOT / "config" / "embeval_ur5.yaml")
HIL = str(ROOT / "config" / "embeval_hil.yaml")


def _graph(capsys, *argv) -> tuple[int, str]:
    """``embeval graph`` in-process; returns (exit status, the one error line) and asserts no traceback."""
    rc = main(["graph", *argv, "--duration", "0.1"])
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.startswith("embeval: error:")]
    return rc, (lines[0] if len(lines) == 1 else err)


# -- booleans are true or false, nothing else --------------------------------------------------------------------
@pytest.mark.parametrize("value", ["", "null", "'false'", "'true'", "0", "1", "'no'", "~", "[]"])
def test_a_doubtful_dry_run_is_refused_not_read_as_false(capsys, value):
    pytest.importorskip("rclpy")
    rc, line = _graph(capsys, "--params", UR5, "--nodes", "embeval_policy", "--set", f"embeval_policy.dry_run={value}")
    assert rc == 2
    assert "embeval_policy.dry_run: must be true or false" in line, line


@pytest.mark.parametrize("setting,msg", [("rate_hz=.nan", "rate_hz: must be a finite number in 0..1000, got nan"), ("max_step_rotation=.inf", "max_step_rotation"),
                                         ("max_step_translation=0", "max_step_translation"), ("max_steps=-1", "max_steps: must be >= 0, got -1"),
                                         ("rate_hz=2000.0", "rate_hz: must lie in 0..1000, got 2000.0")])
def test_policy_limits_are_finite_and_in_range(capsys, setting, msg):
    pytest.importorskip("rclpy")
    rc, line = _graph(capsys, "--params", UR5, "--nodes", "embeval_policy", "--set", f"embeval_policy.{setting}")
    assert rc == 2 and msg in line, line


def test_dry_run_empty_in_the_params_file_is_refused(tmp_path, capsys):
    pytest.importorskip("rclpy")
    f = tmp_path / "p.yaml"
    f.write_text("embeval_policy:\n  ros__parameters:\n    subject: image_stats\n    dry_run:\n")
    rc, line = _graph(capsys, "--params", str(f))
    assert rc == 2 and "embeval_policy.dry_run: must be true or false, got None" in line, line


@pytest.mark.parametrize("node,param", [
    ("embeval_policy", "sync_to_arm"), ("embeval_arm", "home_on_reset"), ("embeval_arm", "reset_after_outside_stop"),
    ("embeval_conductor", "reset_arm"),
    ("embeval_conductor", "operator_confirm"), ("embeval_distortion", "quality_gate_withhold"),
    ("embeval_distortion", "publish_quality"), ("embeval_scorer", "score_proposed"), ("embeval_camera", "loop"),
])
def test_every_boolean_parameter_is_strict(node, param):
    """Every node's boolean parameters go through the same check (a mock-backed node is built for real)."""
    pytest.importorskip("rclpy")
    from embeval_ros.graph import Graph

    params = {node: {param: None, **({"backend": "mock"} if node == "embeval_arm" else {})}}
    with pytest.raises(ConfigError, match=rf"parameter {node}\.{param}: must be true or false, got None"), \
            Graph(params, nodes=[node]):
        pass


def test_typed_reads_each_kind():
    from embeval_ros.runtime import typed

    assert typed("n.b", False, True) is False
    assert typed("n.f", 30, 1.0) == 30.0 and isinstance(typed("n.f", 30, 1.0), float)
    assert typed("n.i", 4.0, 0) == 4 and isinstance(typed("n.i", 4.0, 0), int)
    assert typed("n.l", "a,b", [""]) == "a,b"  # a string list as ros2 launch passes it
    assert typed("n.q", [0, 1.5, 2], [0.0]) == [0.0, 1.5, 2.0]
    for value, default, msg in [(1, True, "true or false"), ("0.5", 1.0, "must be a finite number"),
                                (None, 1.0, "must be a finite number"), (True, 1.0, "must be a finite number"),
                                (float("nan"), 1.0, "must be a finite number, got nan"),
                                (2.5, 0, "must be an integer, got 2.5"), (12345, "", "must be a string"),
                                ("home", [0.0], "must be a list"), ([0.0, "x"], [0.0], r"n\.x\[1\]: must be a finite number")]:
        with pytest.raises(ConfigError, match=msg):
            typed("n.x", value, default)
    from embeval.control import StepperConfig

    with pytest.raises(ConfigError, match="dry_run: must be true or false, got None"):
        StepperConfig(dry_run=None)


# -- every numeric limit finite and in range, a rotation limit on the arm ---------------------------------------
@pytest.mark.parametrize("field,value", [
    ("max_step_translation", math.nan), ("max_step_translation", math.inf), ("max_step_translation", 0.0),
    ("max_step_translation", -0.1), ("max_step_translation", 2.0), ("max_step_rotation", math.nan),
    ("max_step_rotation", 4.0), ("max_tcp_speed", math.nan), ("max_tcp_speed", math.inf), ("max_tcp_speed", 1e9),
    ("max_tcp_speed", 3.5), ("max_tcp_speed", 0.0), ("default_tcp_speed", math.inf), ("default_joint_speed", -1.0),
    ("max_acceleration", math.nan), ("max_acceleration", 100.0), ("max_tcp_speed", True), ("max_tcp_speed", "1"),
    ("max_joint_speed", (math.pi,) * 5 + (10.0,)), ("workspace_upper", (0.9, 0.5, math.inf)),
    ("workspace_upper", (50.0, 0.5, 0.7)),
])
def test_safety_limits_refuse_nan_inf_and_out_of_range(field, value):
    from embeval.robot.safety import SafetyLimits

    with pytest.raises(ConfigError, match=field.split("_upper")[0]):
        SafetyLimits(**{field: value})
    ok = SafetyLimits(max_tcp_speed=3.0, max_step_translation=1.0, max_step_rotation=math.pi)
    assert ok.max_tcp_speed == 3.0 and ok.max_step_rotation == math.pi


@pytest.mark.parametrize("yaml_line,param", [
    ("max_step_translation: .nan", "max_step_translation"), ("max_command_age_s: .nan", "max_command_age_s"),
    ("max_command_age_s: .inf", "max_command_age_s"), ("control_hz: .inf", "control_hz"),
    ("control_hz: 0", "control_hz"), ("state_rate_hz: -5", "state_rate_hz"),
    ("max_tcp_speed: 1.0e9", "max_tcp_speed"), ("max_tcp_speed: .inf", "max_tcp_speed"), ("tcp_speed: .inf", "tcp_speed"),
    ("max_step_rotation: -1", "max_step_rotation"),
    # types
    ('max_command_age_s: "abc"', "max_command_age_s"), ('max_tcp_speed: "fast"', "max_tcp_speed"),
    ('workspace_lower: "abc"', "workspace_lower"), ("max_tcp_speed:", "max_tcp_speed"), ("robot_ip: 12345", "robot_ip"),
    ("home_joints: [.nan, 0, 0, 0, 0, 0]", "home_joints"), ('home_joints: "home"', "home_joints"),
    ("home_joints: [0.1, 0.2]", "home_joints"), ("workspace_lower: [0.1, -0.5]", "workspace_lower"),
    ('robot_ip: "10.0.0.1; rm"', "robot_ip"), ("home_on_reset:", "home_on_reset"),
])
def test_arm_parameters_are_refused_in_one_line(tmp_path, capsys, yaml_line, param):
    """The tester's params files with ``--nodes embeval_arm``: exit 2 and one line naming the parameter, before
    anything connects (no controller listens at 127.0.0.1 here: a check that came too late would say so)."""
    pytest.importorskip("rclpy")
    f = tmp_path / "p.yaml"
    f.write_text("embeval_arm:\n  ros__parameters:\n    backend: ur_rtde\n    robot_ip: 127.0.0.1\n"
                 f"    {yaml_line}\n")
    rc, line = _graph(capsys, "--params", str(f), "--nodes", "embeval_arm")
    assert rc == 2
    assert param in line and "cannot connect" not in line, line


def test_empty_params_file_is_said_and_runs_defaults(tmp_path, capsys):
    pytest.importorskip("rclpy")
    f = tmp_path / "empty.yaml"
    f.write_text("")
    assert main(["graph", "--params", str(f), "--nodes", "embeval_arm", "--duration", "0.2"]) == 0
    err = capsys.readouterr().err
    assert "sets no parameters; the nodes run with their defaults" in err
    rc, line = _graph(capsys, "--params", str(f))
    assert rc == 2 and "names no node" in line


def test_mock_arm_refuses_a_large_rotation_step():
    from embeval.control import ArmCommander
    from embeval.robot.mock_backend import MockArm
    from embeval.robot.safety import SafetyLimits

    limits = SafetyLimits(max_step_translation=0.05, max_step_rotation=0.25)
    arm = MockArm(limits)
    c = ArmCommander(arm, limits)
    before = arm.state().tcp_pose.copy()
    res = c.step([0, 0, 0, 0, 0, 3.0, 1])
    assert not res.executed and "max_step_rotation" in res.reason
    assert np.allclose(arm.state().tcp_pose, before) and arm.state().safety.stopped
    arm.reset_safety()
    assert c.step([0, 0, 0, 0.1, 0.0, 0.2, 1]).executed  # |rot| = 0.224 <= 0.25


def test_sim_arm_refuses_a_large_rotation_step():
    from embeval.action import Action
    from embeval.robot.safety import SafetyLimits
    from embeval.sim.arm_backend import execute_action
    from embeval.sim.workcell import Workcell

    cell = Workcell(limits=SafetyLimits(max_step_rotation=0.25))
    try:
        before = cell.tcp_pose().copy()
        status = execute_action(cell, Action(np.array([0, 0, 0, 0, 0, 3.0, 1.0])))
        assert status.stopped and "max_step_rotation" in status.reason
        assert np.allclose(cell.tcp_pose(), before)
    finally:
        cell.close()


# -- the real ur_rtde client against the emulator ----------------------------------------------------------------
@pytest.fixture(scope="module")
def ur_arm():
    from conftest import start_ur_emulator

    from embeval.robot.safety import SafetyLimits
    from embeval.robot.ur_rtde_backend import URRtdeArm

    target = start_ur_emulator()
    arm = URRtdeArm(target.ip, SafetyLimits(max_step_translation=0.05, max_step_rotation=0.25), **target.arm_kwargs)
    yield arm, target
    arm.close()
    target.process.close()


def test_ur_arm_refuses_a_3_rad_yaw_with_the_controllers_stop(ur_arm):
    """The tester's ArmCommander.step([0,0,0,0,0,3.0,1]) on the real client: refused, the controller in protective stop."""
    from embeval.control import ArmCommander

    arm, _ = ur_arm
    c = ArmCommander(arm, arm.limits)
    q0 = arm.state().joint_positions.copy()
    res = c.step([0, 0, 0, 0, 0, 3.0, 1])
    assert not res.executed and "max_step_rotation" in res.reason
    wait_for(lambda: arm.ur_safety_mode() == 3, 3.0, "the controller's protective stop")
    assert np.max(np.abs(arm.state().joint_positions - q0)) < 1e-6
    assert arm.reset_safety().safety.ok


@pytest.mark.parametrize("command,speed", [("move_tcp", 0.0), ("move_tcp", math.nan), ("move_joints", -0.1),
                                           ("move_joints", math.inf)])
def test_ur_arm_refuses_a_bad_speed_before_sending(ur_arm, command, speed):
    """speed=0.0 used to be sent and block ur_rtde for good; NaN/negative reached ur_rtde's own ValueError."""
    from embeval.errors import SafetyError

    arm, _ = ur_arm
    s = arm.state()
    target = s.tcp_pose.copy()
    target[2] += 0.02
    out = arm.move_tcp(target, speed=speed) if command == "move_tcp" else arm.move_joints(s.joint_positions + 0.05, speed=speed)
    assert out.safety.stopped and f"{command} refused: speed: must be" in out.safety.reason, out.safety.reason
    wait_for(lambda: arm.ur_safety_mode() == 3, 3.0, "the controller's protective stop (as for a workspace refusal)")
    assert np.max(np.abs(arm.state().joint_positions - s.joint_positions)) < 1e-6
    with pytest.raises(SafetyError):  # latched like any other refusal
        arm.move_joints(s.joint_positions)
    assert arm.reset_safety().safety.ok


def test_bad_speed_reason_names_the_value():
    from embeval.robot.ur_rtde_backend import _bad_speed

    assert _bad_speed(None, "move_tcp", "m/s") is None and _bad_speed(0.1, "move_tcp", "m/s") is None
    for bad, why in ((0.0, "must be > 0 m/s, got 0.0"), (-1, "must be > 0 m/s, got -1"),
                     (math.nan, "must be a finite number > 0 m/s, got nan"),
                     (math.inf, "must be a finite number > 0 m/s, got inf"),
                     ("fast", "must be a finite number > 0 m/s, got 'fast'"),
                     (True, "must be a finite number > 0 m/s, got True")):
        assert _bad_speed(bad, "move_tcp", "m/s") == f"move_tcp refused: speed: {why}"


@pytest.mark.parametrize("acceleration", [0.0, math.nan, -1.0, 100.0])
def test_ur_arm_refuses_a_bad_acceleration_before_connecting(acceleration):
    from embeval.robot.ur_rtde_backend import URRtdeArm

    with pytest.raises(ConfigError, match="safety limit acceleration: must (lie in|be a finite number in) "):
        URRtdeArm("127.0.0.1", acceleration=acceleration, modules=("never", "used", "here", "!"))
    with pytest.raises(ConfigError, match="safety limit control_hz: must be a finite number"):
        URRtdeArm("127.0.0.1", control_hz=math.inf, modules=("never", "used", "here", "!"))
