"""The ManiSkill3 backend on the CPU (software Vulkan): runtime environment, action conversion
(judged by ManiSkill's own rotation code and by the TCP's measured motion), observations,
distortion seeding, success from the env's evaluate(), and the scripted experts.

One state-only env and one 64x64-camera env are shared by the module (building one takes seconds).
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from embeval.action import Action, rpy_to_matrix
from embeval.errors import ConfigError
from embeval.sim.maniskill import runtime
from embeval.sim.maniskill.env import ManiSkillConfig, ManiSkillEnv, split_delta, to_controller_action

pytest.importorskip("mani_skill")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # ManiSkill 3.0.1 on NumPy 2


@pytest.fixture(scope="module")
def state_env():
    env = ManiSkillEnv(ManiSkillConfig("PickCube-v1", render=False))
    yield env
    env.close()


@pytest.fixture(scope="module")
def cam_env():
    env = ManiSkillEnv(ManiSkillConfig("PickCube-v1", width=64, height=64, aliases={"third_person": "base_camera"}))
    yield env
    env.close()


# ----------------------------------------------------------------------------- runtime
def test_configure_sets_only_what_is_unset(tmp_path):
    root = tmp_path / "venv"
    (root / "vulkan").mkdir(parents=True)
    (root / "vulkan" / "lvp_icd.json").write_text("{}")
    env: dict[str, str] = {}
    done = runtime.configure(env, root=root, icd_dirs=())
    assert env == {"MS_ASSET_DIR": str(root / "maniskill"), "MS_SKIP_ASSET_DOWNLOAD_PROMPT": "1",
                   "VK_ICD_FILENAMES": str(root / "vulkan" / "lvp_icd.json")} == done
    # a user's own values win
    env = {"VK_ICD_FILENAMES": "/x/nvidia.json", "MS_ASSET_DIR": "/data/ms"}
    assert runtime.configure(env, root=root, icd_dirs=()) == {"MS_SKIP_ASSET_DOWNLOAD_PROMPT": "1"}
    assert env["VK_ICD_FILENAMES"] == "/x/nvidia.json" and env["MS_ASSET_DIR"] == "/data/ms"
    # a machine with its own (GPU) driver keeps it; Debian's old lavapipe does not count as one
    icd = tmp_path / "icd.d"
    icd.mkdir()
    (icd / "lvp_icd.x86_64.json").write_text("{}")
    env = {}
    runtime.configure(env, root=root, icd_dirs=(str(icd),))
    assert "VK_ICD_FILENAMES" in env
    (icd / "nvidia_icd.json").write_text("{}")
    env = {}
    runtime.configure(env, root=root, icd_dirs=(str(icd),))
    assert "VK_ICD_FILENAMES" not in env


def test_diagnose_names_the_missing_piece(tmp_path):
    assert "does not exist" in runtime.diagnose({"VK_ICD_FILENAMES": str(tmp_path / "none.json")})
    bad = tmp_path / "icd.json"
    bad.write_text('{"ICD": {"library_path": "%s"}}' % (tmp_path / "libvulkan_lvp.so"))
    msg = runtime.diagnose({"VK_ICD_FILENAMES": str(bad)})
    assert "libvulkan_lvp.so" in msg and "is missing" in msg and "install.sh" in msg


def test_vulkan_failure_is_one_clear_error(tmp_path):
    env = dict(os.environ, VK_ICD_FILENAMES=str(tmp_path / "gone.json"))
    code = "from embeval.sim.maniskill import check_vulkan\ntry:\n check_vulkan()\nexcept Exception as e:\n print(type(e).__name__, e)"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120).stdout
    assert out.startswith("VulkanUnavailableError") and "gone.json" in out and "install.sh" in out


def test_environment_is_set_for_child_processes():
    runtime.configure()  # what building an env does first (importing the package sets nothing)
    assert os.environ["MS_SKIP_ASSET_DOWNLOAD_PROMPT"] == "1"
    code = "import os; print(os.environ.get('MS_ASSET_DIR'), os.environ.get('VK_ICD_FILENAMES'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout.split()
    assert out == [os.environ["MS_ASSET_DIR"], os.environ.get("VK_ICD_FILENAMES", "None")]
    assert "Supported: 1" in runtime.check_vulkan()


# ----------------------------------------------------------------------------- action conversion
def test_conversion_matches_maniskills_rotation_code(state_env):
    """ManiSkill's own controller code is the judge: its action scaling and target pose, from our action."""
    import torch

    from embeval.sim.maniskill.runtime import raw_pose_matrix as pose_to_matrix  # ManiSkill's raw pose [p, q (wxyz)] -> 4x4

    ctrl = state_env.env.unwrapped.agent.controller.controllers["arm"]
    rng = np.random.default_rng(0)
    worst = 0.0
    for _ in range(40):
        rpy = rng.uniform(-0.09, 0.09, 3)
        parts, _ = split_delta([0.01, -0.02, 0.03, *rpy])
        R = np.eye(3)
        for p in parts:
            a = to_controller_action(p)
            assert np.allclose(a[:3], np.asarray(p[:3]) / 0.1)
            scaled = ctrl._clip_and_scale_action(torch.tensor(a[None], dtype=torch.float32))[0].numpy()
            assert np.allclose(scaled[:3], p[:3], atol=1e-7)
            prev = ctrl.ee_pose_at_base
            tgt = ctrl.compute_target_pose(prev, torch.tensor(scaled[None]))
            T0 = pose_to_matrix(np.r_[prev.p[0].numpy(), prev.q[0].numpy()])
            T1 = pose_to_matrix(np.r_[tgt.p[0].numpy(), tgt.q[0].numpy()])
            R = (T1[:3, :3] @ T0[:3, :3].T) @ R  # the turn the controller commands, frame base
        err = np.linalg.norm(Rotation.from_matrix(R.T @ rpy_to_matrix(rpy)).as_rotvec())
        worst = max(worst, err)
    assert worst < 1e-5, worst  # float32 in ManiSkill; the old transposed-Euler form was off by ~5e-3 rad here


def test_split_keeps_the_total_motion():
    parts, clipped = split_delta([0.25, 0.0, -0.05, 0.0, 0.0, 0.35])
    assert len(parts) == 4 and not clipped  # 0.35 rad / 0.1 -> 4 steps; 0.25 m / 0.1 -> 3
    assert np.allclose(np.sum([p[:3] for p in parts], axis=0), [0.25, 0.0, -0.05])
    R = np.eye(3)
    for p in parts:
        R = rpy_to_matrix(p[3:6]) @ R
        assert np.max(np.abs(p[:3])) <= 0.1 and np.linalg.norm(Rotation.from_matrix(rpy_to_matrix(p[3:6])).as_rotvec()) <= 0.1
    assert np.allclose(R, rpy_to_matrix([0, 0, 0.35]))
    parts, clipped = split_delta([2.0, 0.5, 0, 0, 0, 0])  # a wild action: 10 full steps along its direction
    assert clipped and len(parts) == 10
    assert np.allclose(np.sum(parts, axis=0)[:3], [1.0, 0.25, 0.0])


def test_tcp_moves_the_way_the_action_says(state_env):
    env = state_env
    env.reset(seed=1)
    p0 = env.tcp_pose()
    for _ in range(6):  # servo 4 cm along base +y with 3 cm down
        e = p0[:3] + [0, 0.04, -0.03] - env.tcp_pose()[:3]
        env.step(np.r_[e, 0, 0, 0, 1])
    assert np.allclose(env.tcp_pose()[:3] - p0[:3], [0, 0.04, -0.03], atol=0.004)
    R0 = Rotation.from_rotvec(env.tcp_pose()[3:])
    env.step([0, 0, 0, 0, 0, 0.08, 1])  # +yaw about base z: the TCP turns counter-clockwise seen from above
    turn = (Rotation.from_rotvec(env.tcp_pose()[3:]) * R0.inv()).as_rotvec()
    assert turn[2] > 0.02 and abs(turn[0]) < 0.01 and abs(turn[1]) < 0.01


def test_observation_state_and_episode_limit(state_env):
    env = state_env
    obs = env.reset(seed=0)
    assert obs.images == {}
    assert obs.state["joint_positions"].shape == (7,) and obs.state["tcp_pose"].shape == (7,)
    assert obs.state["gripper"].tolist() == [1.0] and 0.07 < obs.state["gripper_width"][0] <= 0.081
    # the TCP pose is in the robot base frame: ManiSkill's world TCP minus the Panda's base at x = -0.615
    world = env.unwrapped.agent.tcp.pose.raw_pose[0].numpy()
    assert np.allclose(obs.state["tcp_pose"][:3], world[:3] - [-0.615, 0, 0], atol=1e-5)
    r = env.step(Action.hold(0.0))  # close: the gripper rule acts
    assert r.observation.state["gripper"].tolist() == [0.0]
    n = 1
    while not r.done:
        r = env.step(Action.hold(0.0))
        n += 1
    assert r.reason == "max_steps" and env.control_steps == env.max_steps == 50  # PickCube-v1's registered limit
    assert r.success == env.success() == bool(env.unwrapped.evaluate()["success"][0]) is False


# ----------------------------------------------------------------------------- cameras and distortion
def test_images_under_env_camera_names_with_per_frame_distortion():
    """ManiSkill episodes: the env's camera names (and aliases), each frame distorted at the episode seam with its own
    seed (embeval.distortion.frame_seed), the clean frames kept; a replay gives the same frames."""
    from embeval.distortion import distort, frame_seed
    from embeval.sim.backends import make_episode_env

    env = make_episode_env({"backend": "maniskill", "env": "PickCube-v1", "width": 64, "height": 64,
                            "aliases": {"third_person": "base_camera"}})
    request = ("white_noise", 3, 11)
    obs = env.reset(4, request)
    assert env.cameras == ("base_camera",)
    img = obs.images["base_camera"]
    assert img.shape == (64, 64, 3) and img.dtype == np.uint8 and img.std() > 10  # a rendered scene, not a blank
    assert obs.images["third_person"] is img
    first_clean = env.clean_images["base_camera"]
    assert np.array_equal(img, distort(first_clean, "white_noise", 3, frame_seed(11, "base_camera", 0, "white_noise", 3)))
    obs2 = env.step(Action.hold()).observation
    expect = distort(env.clean_images["base_camera"], "white_noise", 3, frame_seed(11, "base_camera", 1, "white_noise", 3))
    assert np.array_equal(obs2.images["base_camera"], expect)
    assert not np.array_equal(obs2.images["base_camera"] - env.clean_images["base_camera"], img - first_clean)
    # a replay of the episode gives the same frames
    assert np.array_equal(env.reset(4, request).images["base_camera"], img)
    first = env.clean_images["base_camera"]
    for _ in range(3):  # the frames are rendered after each control step: a moving arm changes them
        env.step([0.0, 0.08, -0.05, 0, 0, 0, 1])
    assert np.abs(env.clean_images["base_camera"].astype(int) - first).mean() > 1.0
    env.close()


def test_bad_config_is_refused():
    with pytest.raises(ConfigError, match="unknown ManiSkill env"):
        ManiSkillEnv(ManiSkillConfig("NoSuchTask-v9", render=False))
    with pytest.raises(ConfigError, match="pixels"):
        ManiSkillConfig(width=3)


# ----------------------------------------------------------------------------- experts
@pytest.mark.parametrize("task", ["PickCube-v1", "PushCube-v1", "StackCube-v1", "PullCube-v1", "PlaceSphere-v1",
                                  "PegInsertionSide-v1"])
def test_expert_succeeds_through_the_conversion(task, state_env):
    from embeval.sim.maniskill.expert import run_expert

    env = state_env if task == "PickCube-v1" else ManiSkillEnv(ManiSkillConfig(task, render=False))
    try:
        for seed in (0, 1):
            r = run_expert(env, seed)
            assert r.success and r.reason == "success", (task, seed, env.evaluate())
            assert env.control_steps <= env.max_steps
    finally:
        if env is not state_env:
            env.close()


@pytest.mark.slow
@pytest.mark.parametrize("task", ["PickCube-v1", "PushCube-v1", "StackCube-v1", "PullCube-v1", "PlaceSphere-v1",
                                  "PegInsertionSide-v1"])
def test_expert_rate_over_20_seeds(task):
    """docs/sim.md's numbers: >= 90 % of seeds 0-19 (measured 20/20, StackCube 19/20)."""
    from embeval.sim.bench_util import maniskill_expert_success as expert_success

    r = expert_success(task, 20)
    assert r["successes"] >= 18, r


def test_lerobot_act_subject_acts_in_maniskill(cam_env, tmp_path):
    """A LeRobot ACT checkpoint (random weights, saved with its processors) loaded through a subject
    spec acts on ManiSkill observations: the env's camera and its 7 arm joints."""
    pytest.importorskip("torch")
    pytest.importorskip("lerobot")
    from conftest import tiny_act_checkpoint

    from embeval.subjects import load_subject

    tiny_act_checkpoint(tmp_path, state=7, action=7, action_std=0.02, chunk=2)
    subject = load_subject({"kind": "policy", "adapter": "lerobot", "path": str(tmp_path),
                            "params": {"camera_map": {"observation.images.top": "base_camera"},
                                       "gripper": "signed_open_positive"}})
    env = cam_env
    obs = env.reset(seed=2)
    subject.reset(env.instruction)
    moved = []
    for _ in range(3):
        a = subject.act(obs)
        assert isinstance(a, Action) and a.vector.shape == (7,)
        p0 = env.tcp_pose()[:3]
        obs = env.step(a).observation
        moved.append(np.linalg.norm(env.tcp_pose()[:3] - p0))
    assert env.n_steps == 3 and max(moved) > 1e-4  # its (random) deltas move the arm


def test_embedded_tiny_vla_acts_in_maniskill(cam_env):
    """The shipped tiny VLA, through the same subject spec as in the UR5 cell, reads the ManiSkill
    camera under its own keys (aliases) and the base-frame TCP state."""
    from embeval.errors import MissingWeightsError
    from embeval.subjects import load_subject

    try:
        vla = load_subject({"id": "tiny-vla", "kind": "policy", "adapter": "embedded", "path": "tiny-vla"})
    except MissingWeightsError as exc:  # pragma: no cover - the package ships it
        pytest.skip(str(exc))
    env = cam_env
    obs = env.reset(seed=0)
    assert obs.images["third_person"] is obs.images["base_camera"]
    obs = type(obs)({**obs.images, "wrist": obs.images["base_camera"]}, obs.instruction, obs.state, obs.timestamp)
    vla.reset(env.instruction)
    a = vla.act(obs)
    assert isinstance(a, Action) and np.all(np.isfinite(a.vector))
    r = env.step(a)
    assert env.n_steps == 1 and not r.done


@pytest.mark.slow
def test_demo_stage_writes_a_contact_sheet(tmp_path, capsys):
    from PIL import Image

    from embeval_demo import DemoContext, run

    run(DemoContext(tmp_path, quick=True), only=["maniskill"])
    out = capsys.readouterr().out
    assert "scripted expert, PickCube-v1 (state only, pd_ee_delta_pose): 2/2 episodes" in out
    assert "white_noise" in out and "decision" in out
    with Image.open(tmp_path / "maniskill" / "contact_sheet.png") as im:
        sheet = np.asarray(im.convert("RGB"))
    h, w = sheet.shape[:2]  # clean | distorted, 64x64 each shown 2x, one episode, with row and column titles
    assert 128 < h < 260 and 2 * 128 + 60 < w < 700, sheet.shape
    assert (sheet[:, : w - 2 * 128 - 8] < 128).any()  # the row title (episode seed, distortion, level) is drawn


def test_bridge_scenes_name_the_asset_download_offline():
    """SimplerEnv-style Bridge scenes (WidowX) need ManiSkill's asset download: a clear message, no download try."""
    from embeval.sim.maniskill.env import missing_assets

    if not missing_assets("PutCarrotOnPlateInScene-v1"):
        pytest.skip("the Bridge assets are downloaded here")
    with pytest.raises(ConfigError, match=r"`python -m mani_skill.utils.download_asset bridge_v2_real2sim -y && "
                                          r"python -m mani_skill.utils.download_asset widowx250s -y`"):
        ManiSkillEnv(ManiSkillConfig("PutCarrotOnPlateInScene-v1", render=False))
    assert missing_assets("PickCube-v1") == []
