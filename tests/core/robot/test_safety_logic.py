"""robot.base / robot.safety: delta-action conventions and the shared safety logic (pure, no simulator)."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from embeval.action import apply_delta, pose_delta
from embeval.errors import ConfigError, SafetyError
from embeval.robot.base import SafetyMode
from embeval.robot.safety import (
    ProtectiveStop,
    SafetyLimits,
    check_command,
    check_joint_limits,
    check_joint_speed,
    check_step,
    check_tcp_speed,
    check_workspace,
)


def _rx(a):
    c, s = np.cos(a), np.sin(a)
    return np.array([[1, 0, 0], [0, c, -s], [0, s, c]])


def _ry(a):
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]])


def _rz(a):
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]])


@pytest.mark.parametrize("seed", range(5))
def test_apply_delta_matches_hand_composed_matrices(seed):
    rng = np.random.default_rng(seed)
    pose = np.concatenate([rng.uniform(-0.5, 0.5, 3), Rotation.random(random_state=seed).as_rotvec()])
    d = np.concatenate([rng.uniform(-0.05, 0.05, 3), rng.uniform(-0.4, 0.4, 3)])
    R = Rotation.from_rotvec(pose[3:]).as_matrix()
    Rd = _rz(d[5]) @ _ry(d[4]) @ _rx(d[3])  # extrinsic x-y-z roll-pitch-yaw
    base = apply_delta(pose, d, "base")
    assert np.allclose(base[:3], pose[:3] + d[:3])
    assert np.allclose(Rotation.from_rotvec(base[3:]).as_matrix(), Rd @ R)
    tool = apply_delta(pose, d, "tool0")
    assert np.allclose(tool[:3], pose[:3] + R @ d[:3])
    assert np.allclose(Rotation.from_rotvec(tool[3:]).as_matrix(), R @ Rd)
    # pose_delta inverts apply_delta (base frame)
    assert np.allclose(apply_delta(pose, pose_delta(pose, base)), base)


def test_workspace_and_joint_checks_name_the_axis():
    L = SafetyLimits()
    assert check_workspace([0.5, 0.0, 0.2], L).ok
    s = check_workspace([0.5, 0.0, -0.01], L)
    assert s.mode is SafetyMode.PROTECTIVE_STOP and "z=-0.010" in s.reason
    assert check_joint_limits([0, 0, 3.2, 0, 0, 0], L).stopped  # elbow limited to +-pi
    assert check_joint_limits([6.0, -6.0, 3.0, 0, 0, 0], L).ok
    assert check_joint_speed([0, 0, 0, 0, 0, 3.5], L).stopped
    assert check_tcp_speed(1.5, L).stopped and check_tcp_speed(0.5, L).ok
    assert check_step([0.3, 0, 0], L).ok  # no step limit by default
    assert check_step([0.3, 0, 0], SafetyLimits(max_step_translation=0.1)).stopped
    # a step clipped to exactly the limit (as the policy node clips) passes despite float rounding
    from embeval.control.policy_step import clip_action

    clipped, _ = clip_action(np.array([-0.03139228145364278, 0.14580206835369589, 0.19602583164499648, 0, 0, 0, 1.0]), 0.05, 0.25)
    assert np.linalg.norm(clipped[:3]) > 0.05  # by one rounding step
    assert check_step(clipped[:3], SafetyLimits(max_step_translation=0.05)).ok
    assert check_step([0.0501, 0, 0], SafetyLimits(max_step_translation=0.05)).stopped


def test_check_command_first_violation_wins():
    L = SafetyLimits(max_step_translation=0.05)
    s = check_command(L, tcp_target=[0.5, 0, -1], q_target=[0, 0, 4, 0, 0, 0], delta_translation=[0.1, 0, 0])
    assert s.reason.startswith("step limit")
    assert check_command(L, tcp_target=[0.5, 0, -1], q_target=[0, 0, 4, 0, 0, 0]).reason.startswith("workspace")
    assert check_command(L, q_target=[0, 0, 4, 0, 0, 0]).reason.startswith("joint limit")


def test_protective_stop_latches_first_cause():
    ps = ProtectiveStop()
    ps.require_ok()
    ps.trip("contact: tcp with table")
    ps.trip("workspace limit: later")
    assert ps.status.reason == "contact: tcp with table" and len(ps.history) == 2
    with pytest.raises(SafetyError, match="reset_safety"):
        ps.require_ok()
    ps.reset()
    assert ps.ok


def test_limits_validation_and_round_trip():
    L = SafetyLimits(workspace_lower=(0, -1, 0), workspace_upper=(1, 1, 1), max_step_translation=0.1)
    assert SafetyLimits.from_dict(L.to_dict()) == L
    with pytest.raises(ConfigError):
        SafetyLimits(workspace_lower=(1, 0, 0), workspace_upper=(0, 1, 1))
    with pytest.raises(ConfigError, match="unknown"):
        SafetyLimits.from_dict({"max_speed": 1})
