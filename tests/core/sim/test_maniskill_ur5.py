"""The project's UR5 URDF as a ManiSkill3 agent: its TCP in SAPIEN equals embeval.kinematics' FK, and
its end-effector controller moves the TCP the way the action says."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("mani_skill")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(scope="module")
def ur5_env():
    from embeval.sim.maniskill.runtime import import_sapien
    from embeval.sim.maniskill.ur5 import register_ur5

    import_sapien()
    import gymnasium as gym
    import mani_skill.envs  # noqa: F401

    env = gym.make("Empty-v1", robot_uids=register_ur5(), obs_mode="state_dict", control_mode="pd_ee_delta_pose",
                   sim_backend="cpu", render_backend="cpu")
    env.reset(seed=0)
    yield env.unwrapped
    env.close()


def _tcp_in_root(u) -> np.ndarray:
    from embeval.sim.maniskill.runtime import raw_pose_matrix as pose_to_matrix

    return np.linalg.inv(pose_to_matrix(u.agent.robot.pose.raw_pose[0].numpy())) @ pose_to_matrix(u.agent.tcp.pose.raw_pose[0].numpy())


def test_tcp_equals_embeval_fk_over_100_random_joint_vectors(ur5_env):
    from embeval.kinematics import UR5, gripper_tcp

    u, arm = ur5_env, UR5(tool=gripper_tcp())
    assert [j.name for j in u.agent.robot.get_active_joints()][:6] == list(arm.joint_names if hasattr(arm, "joint_names") else
                                                                          ["shoulder_pan_joint", "shoulder_lift_joint",
                                                                           "elbow_joint", "wrist_1_joint", "wrist_2_joint",
                                                                           "wrist_3_joint"])
    rng = np.random.default_rng(0)
    worst_p = worst_r = 0.0
    for _ in range(100):
        q = rng.uniform(-np.pi, np.pi, 6)
        u.agent.robot.set_qpos(np.r_[q, 0.02, 0.02][None].astype(np.float32))
        T, F = _tcp_in_root(u), arm.fk(q.astype(np.float32).astype(np.float64))
        worst_p = max(worst_p, float(np.linalg.norm(T[:3, 3] - F[:3, 3])))
        worst_r = max(worst_r, float(np.abs(T[:3, :3] - F[:3, :3]).max()))
    assert worst_p < 1e-4 and worst_r < 1e-4, (worst_p, worst_r)


def test_ee_controller_moves_the_ur5_tcp(ur5_env):
    from embeval.sim.maniskill.ur5 import HOME

    u = ur5_env
    u.agent.robot.set_qpos(np.r_[HOME, 0.04, 0.04][None].astype(np.float32))
    u.agent.robot.set_qvel(np.zeros((1, 8), dtype=np.float32))
    u.agent.controller.reset()
    p0 = _tcp_in_root(u)[:3, 3]
    for _ in range(4):
        u.step(np.array([[0.3, 0, 0, 0, 0, 0, 1]], dtype=np.float32))  # +3 cm of x per step (normalised by 0.1 m)
    d = _tcp_in_root(u)[:3, 3] - p0
    assert d[0] > 0.02 and abs(d[1]) < 0.01 and abs(d[2]) < 0.01, d
