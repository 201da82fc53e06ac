"""ArmCommander: every backend (sim, mock, ur_rtde) executes an action by the one rule
:func:`embeval.robot.base.execute_step` (SimEnv.step's order and timing: the move lasting at least one control
period, or a hold; then the gripper, only across 0.5) behind the same guards (workspace box, step limit, speed
cap, latched protective stop)."""
from __future__ import annotations

import numpy as np
import pytest

from embeval.control import ArmCommander
from embeval.robot.mock_backend import MockArm
from embeval.robot.safety import SafetyLimits
from embeval.sim.arm_backend import SimArmBackend


@pytest.fixture
def sim():
    arm = SimArmBackend()
    yield arm
    arm.close()


def test_sim_path_timing_follows_the_capped_speed(sim):
    """A 2 cm move at 0.1 m/s lasts 0.2 s of sim time; 5 mm lasts the control period 0.1 s; a zero move idles 0.1 s."""
    c = ArmCommander(sim, SafetyLimits(max_tcp_speed=0.1), speed=5.0)
    assert c.speed == 0.1
    durations = []
    for a in ([0.02, 0, 0, 0, 0, 0, 1], [0, 0.005, 0, 0, 0, 0, 1], [0, 0, 0, 0, 0, 0, 1]):
        t0, p0 = sim.cell.time, sim.state().tcp_pose
        r = c.step(a)
        assert r.executed, r.reason
        durations.append(sim.cell.time - t0)
        np.testing.assert_allclose(r.state.tcp_pose[:3] - p0[:3], a[:3], atol=1e-6)
    np.testing.assert_allclose(durations, [0.2, 0.1, 0.1], atol=1.5 / sim.cell.config.physics_hz)


def test_sim_path_moves_before_the_gripper_acts(sim):
    """Gripper after the move: the fingers close at the new TCP height (its own gripper_time added to the step)."""
    c = ArmCommander(sim)
    t0 = sim.cell.time
    r = c.step([0, 0, 0.01, 0, 0, 0, 0.2])
    assert r.executed and r.state.gripper == 0.0
    assert sim.cell.time - t0 == pytest.approx(0.1 + sim.cell.config.gripper_time, abs=1.5 / sim.cell.config.physics_hz)
    r = c.step([0, 0, 0, 0, 0, 0, 1.3])  # outside [0, 1]: clipped to open, as for every backend
    assert r.executed and r.state.gripper == 1.0


@pytest.mark.parametrize("action,limits,cause", [
    ([0.6, 0, 0, 0, 0, 0, 1], SafetyLimits(), "workspace"),  # x beyond 0.90 m
    ([0.03, 0, 0, 0, 0, 0, 0], SafetyLimits(max_step_translation=0.02), "step limit"),
    ([0, 0, -0.5, 0, 0, 0, 0], SafetyLimits(), "workspace"),  # below the table top
])
def test_sim_path_refuses_without_moving_and_latches(sim, action, limits, cause):
    c = ArmCommander(sim, limits)
    s0 = sim.state()
    r = c.step(action)
    assert not r.executed and cause in r.reason and sim.state().safety.stopped
    s1 = sim.state()
    np.testing.assert_allclose(s1.tcp_pose, s0.tcp_pose, atol=1e-9)  # not a millimetre, not a tick of sim time
    assert s1.gripper == s0.gripper and s1.timestamp == s0.timestamp
    r2 = c.step([0.01, 0, 0, 0, 0, 0, 1])
    assert not r2.executed and "reset first" in r2.reason and sim.state().timestamp == s0.timestamp
    assert c.reset().safety.ok and c.step([0.01, 0, 0, 0, 0, 0, 1]).executed


def test_sim_path_stops_on_a_watchdog_and_on_malformed_actions(sim):
    c = ArmCommander(sim)
    c.protective_stop("stale command: 2.00 s old > max_command_age_s 1.00")  # what the arm node's watchdog does
    assert not c.step([0.01, 0, 0, 0, 0, 0, 1]).executed and c.stop_reason.startswith("stale command")
    c.reset()
    r = c.step([np.nan, 0, 0, 0, 0, 0, 1])
    assert not r.executed and "7 finite numbers" in r.reason and sim.state().safety.stopped


def test_sim_path_contact_during_the_move_is_a_stop():
    """With the workspace box reaching below the table, 5 cm steps down from z = 0.30 m run at 0.25 m/s (0.2 s each)
    until the fingers touch the table: the simulated contact stops the arm part-way through the sixth step."""
    limits = SafetyLimits(workspace_lower=(0.1, -0.5, -0.2))
    arm = SimArmBackend(limits=limits)
    try:
        c = ArmCommander(arm, limits)
        results = [c.step([0, 0, -0.05, 0, 0, 0, 1]) for _ in range(7)]
        assert [r.executed for r in results] == [True] * 5 + [False, False]
        assert "contact" in results[5].reason and "table" in results[5].reason
        assert "reset first" in results[6].reason
        assert 0.0 < arm.state().tcp_pose[2] < 0.05  # stopped at the touch, not at the 0.0 m target
    finally:
        arm.close()


def test_mock_path_moves_then_grips_at_the_capped_speed():
    arm = MockArm(SafetyLimits(max_tcp_speed=0.1))
    c = ArmCommander(arm, arm.limits, speed=0.3)
    t0 = arm.state().timestamp
    assert c.step([0.01, 0, 0, 0, 0, 0, 0.0]).executed
    assert [e[0] for e in arm.log] == ["move_tcp", "set_gripper"] and arm.log[0][1][1] == pytest.approx(0.1)
    assert arm.log[1][1] == (0.0,)  # the crossing drives the gripper fully closed
    # 1 cm at 0.1 m/s is 0.1 s, the control period; then the gripper's 0.1 s
    assert arm.state().timestamp - t0 == pytest.approx(0.2)
    assert c.step([0, 0, 0, 0, 0, 0, 0.3]).executed  # still closed (same side of 0.5): one period held, no gripper
    assert [e[0] for e in arm.log[2:]] == ["hold"] and arm.state().gripper == 0.0
    assert c.step([0.002, 0, 0, 0, 0, 0, 0.5]).executed  # 0.5 counts as open: a 2 mm move lasting the period, then open
    assert [e[0] for e in arm.log[3:]] == ["move_tcp", "set_gripper"] and arm.state().gripper == 1.0
    assert arm.state().timestamp - t0 == pytest.approx(0.2 + 0.1 + 0.1 + 0.1)


def test_ur_rtde_path_moves_then_grips(monkeypatch):
    """On the ur_rtde backend (fake controller) a step is one moveL at the capped speed, then the tool output;
    a short move and a hold wait out the control period."""
    from test_safety_mock_hardware import _FakeRTDE

    from embeval.robot import ur_rtde_backend as ur

    slept = []
    monkeypatch.setattr(ur.time, "sleep", slept.append)
    fake = _FakeRTDE()
    arm = ur.URRtdeArm("10.0.0.2", SafetyLimits(max_tcp_speed=0.1), modules=fake.modules)
    try:
        c = ArmCommander(arm, arm.limits, speed=0.5)
        n = len(fake.calls)
        assert c.step([0.01, 0, 0, 0, 0, 0, 0.0]).executed
        sent = [call for call in fake.calls[n:] if call[0] in ("tool_out", "moveL")]
        assert [call[0] for call in sent] == ["moveL", "tool_out"] and sent[1][1:] == (0, True)
        assert sent[0][1][0] == pytest.approx(0.46) and sent[0][2] == pytest.approx(0.1)
        assert 0.0 < slept[0] <= 0.1 and slept[1] == 0.3  # the rest of the 0.1 s period, then the finger travel
        n, slept[:] = len(fake.calls), []
        assert c.step([0, 0, 0, 0, 0, 0, 0.2]).executed  # zero delta, still closed: a hold, nothing sent
        assert not [call for call in fake.calls[n:] if call[0] in ("tool_out", "moveL")]
        assert len(slept) == 1 and 0.09 < slept[0] <= 0.1
        assert c.step([0, 0, 0, 0, 0, 0, 0.9]).executed and fake.calls[-1] == ("tool_out", 0, False)  # opens
        assert not c.step([0.6, 0, 0, 0, 0, 0, 0]).executed and ("triggerProtectiveStop",) in fake.calls
    finally:
        arm.close()
