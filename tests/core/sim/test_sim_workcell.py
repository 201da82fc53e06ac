"""The pybullet workcell: kinematics agreement, safety stops, determinism, cameras, expert."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from embeval.errors import SafetyError
from embeval.robot.base import ArmBackend
from embeval.robot.safety import SafetyLimits
from embeval.scoring.execution import execution_score
from embeval.sim import SimConfig, SimEnv, Workcell, make_task
from embeval.sim.bench_util import run_expert_episode
from embeval.sim.execute import execute_pair, run_actions
from embeval.sim.expert import PLANNERS
from embeval.sim.scene import CameraSpec, LightingSpec, ObjectSpec, SceneSpec
from embeval.sim.textures import texture_file

OPEN_LIMITS = SafetyLimits(workspace_lower=(-2, -2, -2), workspace_upper=(2, 2, 2))  # contact checks only


@pytest.fixture(scope="module")
def env():
    e = SimEnv(SimConfig(render=False))
    yield e
    e.close()


def test_bullet_urdf_chain_agrees_with_dh_kinematics(env):
    """The URDF in pybullet and the D-H FK of embeval.kinematics are independent: they must agree."""
    cell = env.cell
    env.reset(0, "Pick")
    rng = np.random.default_rng(0)
    for _ in range(5):
        q = rng.uniform(-np.pi, np.pi, 6)
        cell._set_robot(q, 1.0)
        st = cell.p.getLinkState(cell.robot, cell.tcp_link, computeForwardKinematics=True, physicsClientId=cell.client)
        T = cell.kin.fk(q, frame="base")
        assert np.allclose(st[4], T[:3, 3], atol=1e-5)
        assert np.allclose(Rotation.from_quat(st[5]).as_matrix(), T[:3, :3], atol=1e-5)


def test_commanded_table_collision_stops_and_scores_zero():
    scene, task = make_task("Pick", seed=3)
    with SimEnv(SimConfig(render=False), limits=OPEN_LIMITS) as e:
        out = run_actions(e, scene, task, [[0.0, 0.0, -0.40, 0, 0, 0, 1]], seed=3)
        assert out.stopped and "with table" in out.stop_reason
        assert out.final_tcp_pose[2] > -0.02  # stopped at the contact, did not pass through the table
        # the arm no longer moves after the stop
        with pytest.raises(SafetyError):
            e.cell.move_tcp([0.5, 0, 0.3, np.pi, 0, 0])
        ref = run_actions(e, scene, task, [[0.0, 0.0, -0.10, 0, 0, 0, 1]], seed=3)
        assert not ref.stopped
    rec = execution_score(ref, out)
    assert rec.score == 0.0 and rec.reason == "estop" and "table" in rec.detail


def test_commanded_wall_collision_stops():
    scene, task = make_task("Pick", seed=3)
    scene = dataclasses.replace(scene, wall_back_x=0.62, wall_side_y=-0.30)
    with SimEnv(SimConfig(render=False), limits=OPEN_LIMITS) as e:
        back = run_actions(e, scene, task, [[0.25, 0.0, -0.1, 0, 0, 0, 1]], seed=3)
        side = run_actions(e, scene, task, [[0.0, -0.35, 0.0, 0, 0, 0, 1]], seed=3)
    assert back.stopped and "wall0" in back.stop_reason
    assert side.stopped and "wall1" in side.stop_reason


def test_workspace_and_joint_limit_violations_stop_without_moving(env):
    scene, task = make_task("Pick", seed=1)
    env.reset(1, task, scene)
    start = env.cell.tcp_pose()
    r = env.step([0.0, 0.0, -0.35, 0, 0, 0, 1])
    assert r.stopped and r.done and r.reason.startswith("workspace limit")
    assert np.allclose(env.cell.tcp_pose(), start)
    rec = execute_pair(env, scene, task, [0.05, 0, -0.1, 0, 0, 0, 1], [0.0, 0.0, -0.35, 0, 0, 0, 1], seed=1)
    assert rec.score == 0.0 and rec.reason == "estop"
    env.reset(1, task, scene)
    q = env.cell.q.copy()
    q[2] = 3.5  # elbow beyond +-pi
    env.cell.move_joints(q)
    assert env.cell.status().reason.startswith("joint limit")
    env.cell.reset_safety()
    assert env.cell.status().ok


def test_execution_failure_score_uses_final_tcp_distance(env):
    scene, task = make_task("Pick", seed=3)
    rec = execute_pair(env, scene, task, [0.05, 0.0, -0.1, 0, 0, 0, 1], [0.02, 0.03, -0.1, 0, 0, 0, 1], seed=3)
    assert rec.reason == "failure"
    assert rec.distance_cm == pytest.approx(100 * np.hypot(0.03, 0.03), abs=1e-3)
    assert rec.score == pytest.approx(100 - rec.distance_cm)


def _episode(verb: str, seed: int, render: bool):
    with SimEnv(SimConfig(render=render, obs_width=64, obs_height=48)) as e:
        obs = e.reset(seed, verb)
        ex = e.expert()
        frames = []
        while not e.done:
            obs = e.step(ex.act(obs)).observation
            if render:
                frames.append(obs.images["third_person"])
        poses = {k: (v.position.copy(), v.orientation.copy()) for k, v in e.cell.world_state().objects.items()}
        return e.cell.tcp_pose(), poses, frames


def test_same_seed_gives_identical_final_poses_and_images():
    a = _episode("Push", 5, render=True)  # contact-rich: the cube is pushed under physics
    b = _episode("Push", 5, render=True)
    assert np.array_equal(a[0], b[0])
    for k in a[1]:
        assert np.array_equal(a[1][k][0], b[1][k][0]) and np.array_equal(a[1][k][1], b[1][k][1])
    assert len(a[2]) == len(b[2]) and all(np.array_equal(x, y) for x, y in zip(a[2], b[2]))
    c = _episode("Push", 6, render=False)
    assert not np.array_equal(a[1]["cube"][0], c[1]["cube"][0])


@pytest.mark.parametrize("verb", sorted(PLANNERS))
def test_expert_solves_each_implemented_task(env, verb):
    # the full 100-episode measurement is `embeval sim expert --task all --episodes 100` / make bench
    seeds = range(200, 203)
    results = [run_expert_episode(env, verb, s) for s in seeds]
    assert all(r.success for r in results), [r.reason for r in results]


def test_expert_actions_are_bounded_base_frame_deltas(env):
    obs = env.reset(7, "Place")
    ex = env.expert()
    n = 0
    while not env.done:
        a = ex.act(obs)
        assert np.linalg.norm(a.translation) <= ex.max_step + 1e-9 and a.gripper in (0.0, 1.0)
        before = env.cell.tcp_pose()
        obs = env.step(a).observation
        if env.cell.safety.ok:
            assert np.allclose(env.cell.tcp_pose()[:3], before[:3] + a.translation, atol=1e-6)
        n += 1
    assert env.success() and n == env.n_steps


def test_observation_layout():
    with SimEnv(SimConfig(obs_width=80, obs_height=60)) as e:
        obs = e.reset(0, "Pick")
    assert set(obs.images) == {"third_person", "wrist"}
    for img in obs.images.values():
        assert img.dtype == np.uint8 and img.shape == (60, 80, 3)
    assert obs.state["joint_positions"].shape == (6,) and obs.state["tcp_pose"].shape == (7,)
    q = obs.state["tcp_pose"][3:]
    assert np.isclose(np.linalg.norm(q), 1.0)
    assert np.allclose(Rotation.from_quat(q).apply([0, 0, 1]), [0, 0, -1], atol=1e-6)  # TCP points down at home
    assert obs.instruction.startswith("pick up the")


def test_pinhole_projection_and_card_texture_orientation():
    tex = np.zeros((64, 64, 3), np.uint8)
    tex[:32, :32] = (255, 0, 0)
    tex[:32, 32:] = (0, 255, 0)
    tex[32:, :32] = (0, 0, 255)
    tex[32:, 32:] = (255, 255, 0)
    f = 95.65
    cam = CameraSpec("top", width=160, height=120, fx=f, fy=f, position=(0.5, 0, 1.0), target=(0.5, 0, 0), up=(1, 0, 0))
    scene = SceneSpec(objects=[ObjectSpec("card", "card", position=(0.5, 0.0), size=(0.3, 0.3, 0.003), texture=texture_file(tex)),
                               ObjectSpec("dot", "marker", position=(0.62, 0.15), size=(0.01,), color=(1, 0, 1, 1))],
                      cameras=[cam], lighting=LightingSpec(ambient=1.0, diffuse=0.0, specular=0.0),
                      home_tcp=(0.3, 0.3, 0.4, np.pi, 0, 0))
    with Workcell(SimConfig(mode="kinematic")) as cell:
        cell.load(scene)
        img = cell.render("top").astype(int)
    # camera looks down with image-up = +x, image-right = -y: a point (0.5 + dx, dy, 0) at depth 1 m
    # projects to u = cx - f*dy, v = cy - f*dx
    mask = (img[:, :, 0] > 200) & (img[:, :, 2] > 200) & (img[:, :, 1] < 80)
    vs, us = np.nonzero(mask)
    assert abs(us.mean() - (80 - f * 0.15)) < 1.5 and abs(vs.mean() - (60 - f * 0.12)) < 1.5
    # texture: image up = card +x, image right = card -y -> the picture appears upright from this camera
    s = 7
    quads = {(60 - s, 80 - s): (255, 0, 0), (60 - s, 80 + s): (0, 255, 0), (60 + s, 80 - s): (0, 0, 255), (60 + s, 80 + s): (255, 255, 0)}
    for (v, u), rgb in quads.items():
        assert np.abs(img[v, u] - np.array(rgb)).max() < 60, ((v, u), img[v, u], rgb)


def test_sim_backend_is_an_arm_backend():
    from embeval.sim.arm_backend import SimArmBackend

    arm = SimArmBackend()
    try:
        assert isinstance(arm, ArmBackend)
        s = arm.move_tcp([0.5, 0.1, 0.2, np.pi, 0, 0])
        assert s.safety.ok and np.allclose(s.tcp_pose[:3], [0.5, 0.1, 0.2], atol=1e-6)
        s = arm.apply_action([0.0, -0.05, 0.02, 0, 0, 0.2, 0.0])
        assert np.allclose(s.tcp_pose[:3], [0.5, 0.05, 0.22], atol=1e-6) and s.gripper == 0.0
        s = arm.apply_action([0.0, 0.0, -0.5, 0, 0, 0, 0.0])
        assert s.safety.stopped
        with pytest.raises(SafetyError):
            arm.move_joints(s.joint_positions)
        assert arm.reset_safety().safety.ok
    finally:
        arm.close()


def test_kinematic_mode_pick():
    with SimEnv(SimConfig(render=False, mode="kinematic")) as e:
        assert run_expert_episode(e, "Pick", 2).success


class _HoldPolicy:
    """A policy that never moves: the episode must end at its step budget, unsuccessful."""

    id = "hold"

    def __init__(self):
        from embeval.action import ActionSpec

        self.action_spec = ActionSpec()
        self.instructions = []

    def reset(self, instruction):
        self.instructions.append(instruction)

    def act(self, observation):
        from embeval.action import Action

        return Action.hold(1.0)


def test_rollout_of_a_policy_and_sequence_stops_at_the_first_violation(env):
    from embeval.sim.execute import run_policy

    pol = _HoldPolicy()
    out = run_policy(env, pol, task="Press", seed=4, max_steps=5)
    assert pol.instructions == [env.task.instruction] and out.n_actions == 5
    assert not out.success and not out.stopped and out.extra["task"] == "Press"
    scene, task = make_task("Pick", seed=2)
    seq = [[0, 0, -0.05, 0, 0, 0, 1], [0, 0, -0.5, 0, 0, 0, 1], [0, 0, 0.1, 0, 0, 0, 1]]
    out = run_actions(env, scene, task, seq, seed=2)
    assert out.stopped and out.n_actions == 2 and out.final_tcp_pose[2] == pytest.approx(scene.home_tcp[2] - 0.05)


def test_unreachable_home_and_unknown_kind_are_config_errors():
    from embeval.errors import ConfigError

    with Workcell() as cell:
        with pytest.raises(ConfigError, match="not reachable"):
            cell.load(SceneSpec(home_tcp=(2.0, 0.0, 0.3, np.pi, 0, 0)))
        with pytest.raises(ConfigError, match="unknown kind"):
            cell.load(SceneSpec(objects=[ObjectSpec("x", "teapot")]))


def test_grasp_needs_the_object_between_the_fingers_and_release_drops_it(env):
    from embeval.sim.expert import topdown

    scene = SceneSpec(objects=[ObjectSpec("cube", "box", position=(0.5, 0.0), size=(0.04, 0.04, 0.04))])
    env.reset(0, make_task("Pick", 0)[1], scene)
    cell = env.cell
    cell.move_tcp(topdown([0.5, 0.08, 0.10]))  # high first: the open fingers never touch the cube
    cell.move_tcp(topdown([0.5, 0.08, 0.02]))  # 8 cm beside the cube
    cell.set_gripper(0.0)
    assert cell.grasp is None  # nothing between the fingers
    assert np.allclose(cell.object_pose("cube")[0], [0.5, 0.0, 0.02], atol=1e-3)  # untouched
    cell.set_gripper(1.0)
    cell.move_tcp(topdown([0.5, 0.08, 0.10]))  # up, over, down
    cell.move_tcp(topdown([0.5, 0.0, 0.10]))
    cell.move_tcp(topdown([0.5, 0.0, 0.02]))
    cell.set_gripper(0.0)
    assert cell.grasp is not None and cell.grasp.body.name == "cube"
    assert 0.4 < cell.gripper < 0.55  # fingers stop on the 4 cm cube (8.5 cm stroke)
    cell.move_tcp(topdown([0.45, 0.05, 0.15]))
    held = cell.world_state().objects["cube"]
    assert held.bottom_z > 0.10 and np.allclose(held.position[:2], [0.45, 0.05], atol=1e-3)
    cell.set_gripper(1.0)
    cell.idle(0.6)
    dropped = cell.world_state().objects["cube"]
    assert cell.grasp is None and dropped.bottom_z < 0.005 and np.allclose(dropped.position[:2], [0.45, 0.05], atol=0.02)


def test_tool_frame_deltas():
    with SimEnv(SimConfig(render=False), action_frame="tool0") as e:
        e.reset(0, "Pick")
        start = e.cell.tcp_pose()
        e.step([0.0, 0.0, 0.05, 0, 0, 0, 1])  # +z of the tool points down at home
        assert np.allclose(e.cell.tcp_pose()[:3], start[:3] + [0, 0, -0.05], atol=1e-6)
        from embeval.errors import ConfigError

        with pytest.raises(ConfigError, match="frame-base"):
            e.expert()
