"""The URDFs reproduce the D-H model: pybullet's link states and ikpy's chain against UR.fk / UR.ik."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from embeval.kinematics import (
    JOINT_NAMES,
    UR,
    UR5,
    DHParams,
    gripper_tcp,
    pose_error,
    preset,
    quat_to_matrix,
    rot_z,
    urdf_path,
)
from embeval.kinematics.urdf import GRIPPER_STROKE, table_urdf, ur_urdf


def test_shipped_urdfs_are_generated_from_dh():
    assert urdf_path("ur5").read_text() == ur_urdf("ur5")
    assert urdf_path("ur5_gripper.urdf").read_text() == ur_urdf("ur5", gripper=True)
    assert urdf_path("table").read_text() == table_urdf()


@pytest.fixture(scope="module")
def pb():
    import pybullet

    cid = pybullet.connect(pybullet.DIRECT)
    yield pybullet, cid
    pybullet.disconnect(cid)


def _load(pb, path):
    p, cid = pb
    rid = p.loadURDF(str(path), useFixedBase=True, physicsClientId=cid)
    links = {p.getJointInfo(rid, j, physicsClientId=cid)[12].decode(): j for j in range(p.getNumJoints(rid, physicsClientId=cid))}
    joints = {p.getJointInfo(rid, j, physicsClientId=cid)[1].decode(): j for j in range(p.getNumJoints(rid, physicsClientId=cid))}
    return rid, links, joints


def _link_pose(pb, rid, link):
    p, cid = pb
    ls = p.getLinkState(rid, link, computeForwardKinematics=True, physicsClientId=cid)
    T = np.eye(4)
    T[:3, :3] = quat_to_matrix(ls[5])
    T[:3, 3] = ls[4]
    return T


def _check_chain(pb, path, arm, link_tools, n=40, seed=0):
    p, cid = pb
    rid, links, joints = _load(pb, path)
    rng = np.random.default_rng(seed)
    worst = 0.0
    for _ in range(n):
        q = rng.uniform(-np.pi, np.pi, 6)
        for i, name in enumerate(JOINT_NAMES):
            p.resetJointState(rid, joints[name], q[i], physicsClientId=cid)
        for link, tool in link_tools.items():
            ref = (arm if tool is None else UR(arm.params, tool=tool)).fk(q)
            dp, dr = pose_error(_link_pose(pb, rid, links[link]), ref)
            worst = max(worst, float(dp), float(dr))
    p.removeBody(rid, physicsClientId=cid)
    return worst


def test_pybullet_tool0_matches_fk(pb):
    arm = UR5()
    # pybullet reports link states in single precision: 1e-6 m / rad
    assert _check_chain(pb, urdf_path("ur5"), arm, {"tool0": None, "wrist_3_link": None}) < 1e-6
    rid, links, _ = _load(pb, urdf_path("ur5"))
    assert np.allclose(_link_pose(pb, rid, links["base"]), rot_z(np.pi), atol=1e-7)


def test_pybullet_gripper_tcp_matches_tool_fk(pb):
    arm = UR5()
    worst = _check_chain(pb, urdf_path("ur5_gripper"), arm, {"tool0": None, "tcp": gripper_tcp()})
    assert worst < 1e-6
    p, cid = pb
    rid, links, joints = _load(pb, urdf_path("ur5_gripper"))
    info = p.getJointInfo(rid, joints["left_finger_joint"], physicsClientId=cid)
    assert info[2] == p.JOINT_PRISMATIC and info[8] == 0.0 and info[9] == pytest.approx(GRIPPER_STROKE)
    # open fingers: an 85 mm gap centred on the tcp
    for side in ("left", "right"):
        p.resetJointState(rid, joints[f"{side}_finger_joint"], GRIPPER_STROKE, physicsClientId=cid)
    left = _link_pose(pb, rid, links["left_finger_link"])
    right = _link_pose(pb, rid, links["right_finger_link"])
    assert np.linalg.norm(left[:3, 3] - right[:3, 3]) == pytest.approx(2 * GRIPPER_STROKE, abs=1e-6)


def test_generated_urdf_for_calibrated_ur5e_matches_fk(pb, tmp_path):
    base = preset("ur5e")
    params = DHParams(
        a=(0.0, base.a[1] + 2e-4, base.a[2] - 1e-4, 0.0, 0.0, 3e-4),
        d=base.d,
        alpha=(np.pi / 2, 0.0, 0.0, np.pi / 2, -np.pi / 2, 1e-3),
        theta_offset=(1e-3, -2e-3, 0.0, 5e-4, 0.0, -1e-3),
        name="ur5e_cal",
    )
    path = tmp_path / "ur5e_cal.urdf"
    path.write_text(ur_urdf(params))
    arm = UR(params)
    assert _check_chain(pb, path, arm, {"tool0": None}, n=20) < 1e-6
    # and the closed form stays exact for it
    rng = np.random.default_rng(1)
    Q = rng.uniform(-np.pi, np.pi, (500, 6))
    T = arm.fk(Q)
    S, V = arm.ik_batch(T)
    dp, dr = pose_error(arm.fk(S), T[:, None])
    assert dp[V].max() < 1e-9 and dr[V].max() < 1e-9 and V.any(axis=1).all()


def test_table_urdf_loads_static_with_top_at_origin(pb):
    p, cid = pb
    tid = p.loadURDF(str(urdf_path("table")), physicsClientId=cid)
    lo, hi = p.getAABB(tid, -1, physicsClientId=cid)
    assert hi[2] == pytest.approx(0.0, abs=2e-3) and lo[2] == pytest.approx(-0.75, abs=2e-3)
    assert p.getDynamicsInfo(tid, -1, physicsClientId=cid)[0] == 0.0  # static
    p.removeBody(tid, physicsClientId=cid)


# ------------------------------------------------------------------ ikpy, built from the same URDF
@pytest.fixture(scope="module")
def ikpy_chain():
    from ikpy.chain import Chain

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        chain = Chain.from_urdf_file(str(urdf_path("ur5")), base_elements=["base_link", "shoulder_pan_joint"])
        mask = [link.joint_type == "revolute" for link in chain.links]
        chain = Chain.from_urdf_file(
            str(urdf_path("ur5")), base_elements=["base_link", "shoulder_pan_joint"], active_links_mask=mask
        )
    idx = [i for i, m in enumerate(mask) if m]
    assert len(idx) == 6 and chain.links[-1].name == "flange-tool0"
    return chain, idx


def test_ikpy_fk_equals_ours(ikpy_chain):
    chain, idx = ikpy_chain
    arm = UR5()
    rng = np.random.default_rng(2)
    for _ in range(100):
        q = rng.uniform(-2 * np.pi, 2 * np.pi, 6)
        full = np.zeros(len(chain.links))
        full[idx] = q
        dp, dr = pose_error(chain.forward_kinematics(full), arm.fk(q))
        assert dp < 1e-12 and dr < 1e-12


def test_ikpy_numeric_ik_lands_on_one_of_our_solutions(ikpy_chain):
    chain, idx = ikpy_chain
    arm = UR5()
    rng = np.random.default_rng(4)
    compared = 0
    for _ in range(6):
        q = rng.uniform(-np.pi, np.pi, 6)
        T = arm.fk(q)
        init = np.zeros(len(chain.links))
        init[idx] = q + rng.normal(0, 0.15, 6)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sol = chain.inverse_kinematics_frame(T, initial_position=init, orientation_mode="all")
        dp, dr = pose_error(chain.forward_kinematics(sol), T)
        if dp > 1e-6 or dr > 1e-6:  # ikpy's optimiser did not converge: nothing to compare
            continue
        d = np.abs(arm.ik(T) - sol[idx]) % (2 * np.pi)
        d = np.minimum(d, 2 * np.pi - d).max(axis=1)
        assert d.min() < 1e-4  # ikpy stops at ~1e-7 pose error; joints agree to its precision
        compared += 1
    assert compared >= 4


def test_urdf_path_env_override_and_errors(tmp_path, monkeypatch):
    from embeval.errors import MissingFileError
    from embeval.kinematics.urdf import write_shipped

    write_shipped(tmp_path)
    monkeypatch.setenv("EMBEVAL_URDF_DIR", str(tmp_path))
    assert urdf_path("ur5_gripper") == tmp_path / "ur5_gripper.urdf"
    with pytest.raises(MissingFileError, match="available: table, ur5, ur5_gripper"):
        urdf_path("ur10")
