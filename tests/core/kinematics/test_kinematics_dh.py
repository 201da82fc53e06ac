"""D-H presets and files, rotation / pose conversions (against pybullet's and hand-derived values), CLI."""
from __future__ import annotations

import numpy as np
import pytest

from embeval.errors import ConfigError, MissingFileError
from embeval.kinematics import (
    PRESETS,
    UR,
    UR5,
    DHParams,
    matrix_to_pose,
    matrix_to_quat,
    matrix_to_rotvec,
    pose_to_matrix,
    preset,
    quat_to_matrix,
    rotvec_to_matrix,
    wrap_angle,
)

# ur_description's config/ur5/default_kinematics.yaml layout (joint origins of the URDF)
UR5_DEFAULT_KINEMATICS = """
kinematics:
  shoulder: {x: 0, y: 0, z: 0.089159, roll: 0, pitch: 0, yaw: 0}
  upper_arm: {x: 0, y: 0, z: 0, roll: 1.570796327, pitch: 0, yaw: 0}
  forearm: {x: -0.425, y: 0, z: 0, roll: 0, pitch: 0, yaw: 0}
  wrist_1: {x: -0.39225, y: 0, z: 0.10915, roll: 0, pitch: 0, yaw: 0}
  wrist_2: {x: 0, y: -0.09465, z: 1.94397e-11, roll: 1.570796327, pitch: 0, yaw: 0}
  wrist_3: {x: 0, y: 0.0823, z: 1.688e-11, roll: 1.570796326794, pitch: 3.14159265, yaw: 3.14159265}
  hash: calib_12345
"""


def test_default_ur5_matches_design():
    p = UR5().params
    assert p.a == (0, -0.425, -0.39225, 0, 0, 0)
    assert p.d == (0.089159, 0, 0, 0.10915, 0.09465, 0.0823)
    assert np.allclose(p.alpha, [np.pi / 2, 0, 0, np.pi / 2, -np.pi / 2, 0])
    assert {"ur5", "ur5e", "ur3", "ur10", "ur3e", "ur10e"} <= set(PRESETS)
    assert UR("UR5e").params.d[0] == 0.1625
    with pytest.raises(ConfigError, match="ur5e"):
        preset("ur7")


def test_default_kinematics_yaml_converts_to_dh(tmp_path):
    f = tmp_path / "default_kinematics.yaml"
    f.write_text(UR5_DEFAULT_KINEMATICS)
    p = DHParams.from_yaml(f)
    ref = preset("ur5")
    assert np.allclose(p.a, ref.a, atol=1e-9) and np.allclose(p.d, ref.d, atol=1e-9)
    assert np.allclose(wrap_angle(np.array(p.alpha) - ref.alpha), 0, atol=1e-8)
    assert np.allclose(p.theta_offset, 0, atol=1e-8)
    assert p.structure_deviation() == 0.0 and not UR(p).refined  # rounded pi/2 snapped: pure closed form
    q = np.array([0.1, -1.2, 1.3, -0.4, 0.5, 0.6])
    assert np.allclose(UR(p).fk(q), UR5().fk(q), atol=1e-8)


def test_yaml_dh_table_with_calibration_deltas(tmp_path):
    f = tmp_path / "cal.yaml"
    f.write_text(
        "name: my_ur5e\nbase: ur5e\n"
        "delta_theta: [1.0e-4, -2.0e-4, 0, 0, 0, 3.0e-4]\n"
        "delta_d: [1.0e-4, 0, 0, -1.0e-4, 0, 0]\n"
        "limits: {lower: [-3, -3, -3, -3, -3, -3], upper: [3, 3, 3, 3, 3, 3]}\n"
    )
    p = DHParams.from_yaml(f)
    assert p.name == "my_ur5e"
    assert p.d[0] == pytest.approx(0.1626) and p.d[3] == pytest.approx(0.1332)
    assert p.theta_offset[5] == pytest.approx(3e-4) and p.limits.upper == (3.0,) * 6
    arm = UR(p)
    q = np.array([0.3, -1.0, 1.1, -1.5, -1.4, 0.2])
    # a theta offset is a joint zero shift: same pose as the nominal arm at q + offset
    assert np.allclose(arm.fk(q), UR(p.__class__(a=p.a, d=p.d, name="n")).fk(q + p.theta_offset), atol=1e-15)
    sols = arm.ik(arm.fk(q))
    assert np.abs(sols - q).max(axis=1).min() < 1e-9
    # plain table
    g = tmp_path / "plain.yaml"
    g.write_text("dh:\n  a: [0, -0.425, -0.39225, 0, 0, 0]\n  d: [0.089159, 0, 0, 0.10915, 0.09465, 0.0823]\n")
    assert DHParams.from_yaml(g).a == preset("ur5").a


def test_bad_kinematics_files(tmp_path):
    with pytest.raises(MissingFileError):
        DHParams.from_yaml(tmp_path / "nope.yaml")
    f = tmp_path / "bad.yaml"
    f.write_text("dh:\n  a: [0, 1, 2]\n  d: [0, 0, 0, 0, 0, 0]\n")
    with pytest.raises(ConfigError, match="6 numbers"):
        DHParams.from_yaml(f)
    f.write_text(UR5_DEFAULT_KINEMATICS.replace("forearm: {x: -0.425, y: 0", "forearm: {x: -0.425, y: 0.01"))
    with pytest.raises(ConfigError, match="not D-H-consistent"):
        DHParams.from_yaml(f)
    with pytest.raises(ConfigError, match="structure"):
        DHParams(a=(0, -0.4, -0.4, 0.1, 0, 0), d=(0.1, 0, 0, 0.1, 0.1, 0.1))


def test_rotation_conversions_against_pybullet():
    import pybullet as p

    rng = np.random.default_rng(0)
    for _ in range(20):
        rpy = rng.uniform(-np.pi, np.pi, 3)
        quat = np.array(p.getQuaternionFromEuler(rpy))  # xyzw
        R_pb = np.array(p.getMatrixFromQuaternion(quat)).reshape(3, 3)
        assert np.allclose(quat_to_matrix(quat), R_pb, atol=1e-12)
        q2 = matrix_to_quat(R_pb)
        assert np.allclose(q2, quat * np.sign(quat[3]), atol=1e-12) and q2[3] >= 0
        rv = matrix_to_rotvec(R_pb)
        assert np.linalg.norm(rv) <= np.pi + 1e-12
        assert np.allclose(rotvec_to_matrix(rv), R_pb, atol=1e-12)


def test_ur_pose_convention():
    # UR pose [x, y, z, rx, ry, rz]: a pi turn about x points the tool down
    T = pose_to_matrix([0.4, -0.1, 0.3, np.pi, 0, 0])
    assert np.allclose(T[:3, :3], np.diag([1, -1, -1]), atol=1e-15)
    assert np.allclose(T[:3, 3], [0.4, -0.1, 0.3])
    # hand-derived: 90 degrees about z
    R = rotvec_to_matrix([0, 0, np.pi / 2])
    assert np.allclose(R, [[0, -1, 0], [1, 0, 0], [0, 0, 1]], atol=1e-15)
    assert np.allclose(matrix_to_quat(R), [0, 0, np.sqrt(0.5), np.sqrt(0.5)])
    rng = np.random.default_rng(1)
    poses = np.concatenate([rng.uniform(-1, 1, (50, 3)), rng.uniform(-1.5, 1.5, (50, 3))], axis=1)
    assert np.allclose(matrix_to_pose(pose_to_matrix(poses)), poses, atol=1e-12)
