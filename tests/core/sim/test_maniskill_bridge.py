"""SimplerEnv-style Bridge scenes (WidowX) offline: the action conversion to the WidowX controller, judged
by ManiSkill's own controller code and config; the asset detection and its message (CLI included); and
the Act2Answer staging (item -> scene spec, frames, table area, zones, swap). Running a Bridge env needs
ManiSkill's asset download, which this machine does not have."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from embeval.act2answer import maniskill_bridge as B
from embeval.act2answer.items import BinaryItem
from embeval.action import Action, rpy_to_matrix
from embeval.errors import ConfigError
from embeval.sim.maniskill import bridge as W

pytest.importorskip("mani_skill")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
PANDA_WIDOWX_CONTROL = "embeval_test_panda_widowx_control"
CMD = ("python -m mani_skill.utils.download_asset bridge_v2_real2sim -y && "
       "python -m mani_skill.utils.download_asset widowx250s -y")


@pytest.fixture
def item(tmp_path):
    return BinaryItem("b1", "Which picture shows a cat?", str(tmp_path / "cat.png"), str(tmp_path / "dog.png"), "left", "object")


def _offline() -> bool:
    return bool(W.asset_problems("PutCarrotOnPlateInScene-v1"))


# ----------------------------------------------------------------------------- the controller
def test_limits_and_conventions_are_the_installed_controller_config():
    cfg = W.widowx_controller_configs()
    arm, grip = cfg["arm"], cfg["gripper"]
    assert W.widowx_limits(cfg) == W.WIDOWX_LIMITS == W.widowx_limits()
    # what widowx_commands' docstring states: metres and radians unscaled, root frame, relative to the target
    assert (arm.normalize_action, arm.use_delta, arm.use_target) == (False, True, True)
    assert arm.frame == "root_translation:root_aligned_body_rotation" and arm.ee_link == W.EE_LINK
    assert grip.normalize_action and not grip.use_delta
    # gripper -1 / +1 -> finger targets through ManiSkill's own scaling: -1 closed (0.014 m), +1 open (0.038 m)
    import torch
    from mani_skill.utils.gym_utils import clip_and_scale_action

    lo, hi = torch.tensor([grip.lower]), torch.tensor([grip.upper])
    assert clip_and_scale_action(torch.tensor([-1.0]), lo, hi).item() == pytest.approx(0.014)
    assert clip_and_scale_action(torch.tensor([1.0]), lo, hi).item() == pytest.approx(0.038)
    # the flat-table WidowX's sensor is the camera SimplerEnv uses
    from mani_skill.envs.tasks.digital_twins.bridge_dataset_eval.base_env import WidowX250SBridgeDatasetFlatTable as WX

    assert [c.uid for c in WX._sensor_configs.fget(object.__new__(WX))] == [W.CAMERA]


def test_translation_passes_unscaled_in_the_root_frame():
    c = W.widowx_commands([0.01, 0, 0, 0, 0, 0, 1.0], gripper=1.0)
    assert len(c.vectors) == 1 and not c.clipped and c.gripper == 1.0
    assert np.allclose(c.vectors[0], [0.01, 0, 0, 0, 0, 0, 1.0])
    c = W.widowx_commands(Action(np.array([-0.02, 0.03, -0.015, 0, 0, 0, 0.2])), gripper=0.0)
    assert np.allclose(c.vectors[0], [-0.02, 0.03, -0.015, 0, 0, 0, -1.0]) and c.gripper == 0.0


def test_rotation_through_maniskills_own_controller_math():
    """The target pose ManiSkill's PDEEPoseController computes from the converted action (with the installed
    WidowX arm config) equals embeval's meaning of the action: p' = p + d, R' = R_delta R (frame base)."""
    import torch
    from mani_skill.agents.controllers.pd_ee_pose import PDEEPoseController
    from mani_skill.utils.geometry.rotation_conversions import euler_angles_to_matrix
    from mani_skill.utils.structs.pose import Pose

    ctrl = object.__new__(PDEEPoseController)  # only its target-pose arithmetic is used: no robot, no asset
    ctrl.config = W.widowx_controller_configs()["arm"]
    rng = np.random.default_rng(3)
    for _ in range(25):
        rpy = rng.uniform(-0.6, 0.6, 3)
        d = rng.uniform(-0.05, 0.05, 3)
        R0 = Rotation.random(random_state=int(rng.integers(1 << 30)))
        p0 = rng.uniform(-0.3, 0.3, 3)
        v = W.widowx_commands([*d, *rpy, 1.0], gripper=1.0).vectors[0]
        # the Euler angles are the controller's intrinsic XYZ of R_delta (ManiSkill's converter and scipy agree)
        assert np.allclose(euler_angles_to_matrix(torch.tensor(v[3:6]), "XYZ").numpy(), rpy_to_matrix(rpy), atol=1e-9)
        assert np.allclose(Rotation.from_euler("XYZ", v[3:6]).as_matrix(), Rotation.from_euler("xyz", rpy).as_matrix())
        q0 = R0.as_quat()  # x y z w
        prev = Pose.create_from_pq(torch.tensor(p0[None]), torch.tensor(np.r_[q0[3], q0[:3]][None]))
        tgt = ctrl.compute_target_pose(prev, torch.tensor(v[None, :6]))
        q = tgt.q[0].numpy()
        assert np.allclose(tgt.p[0].numpy(), p0 + d, atol=1e-9)
        assert np.allclose(Rotation.from_quat([*q[1:], q[0]]).as_matrix(), rpy_to_matrix(rpy) @ R0.as_matrix(), atol=1e-6)


def test_conversion_in_physics_with_the_widowx_controller_on_the_panda():
    """The WidowX arm controller's config (same class and flags: metres and radians unscaled, target-relative,
    root-aligned rotation) on ManiSkill's Panda, which needs no download, in a real CPU simulation: the TCP
    moves and turns the way the embeval action says (R' = R_delta R, not its inverse), fingers follow -1 / +1."""
    import dataclasses

    from embeval.sim.maniskill.runtime import raw_pose_matrix as pose_to_matrix
    from embeval.sim.maniskill.runtime import _np, import_sapien

    import_sapien()
    import gymnasium as gym
    from mani_skill.agents.registration import REGISTERED_AGENTS, register_agent
    from mani_skill.agents.robots.panda.panda import Panda

    uid = PANDA_WIDOWX_CONTROL
    if uid not in REGISTERED_AGENTS:
        @register_agent()
        class PandaWithWidowXControl(Panda):
            uid = PANDA_WIDOWX_CONTROL

            @property
            def _controller_configs(self):
                arm = dataclasses.replace(W.widowx_controller_configs()["arm"], joint_names=self.arm_joint_names,
                                          ee_link=self.ee_link_name, urdf_path=self.urdf_path, stiffness=self.arm_stiffness,
                                          damping=self.arm_damping, force_limit=self.arm_force_limit)
                return {W.CONTROL_MODE: dict(arm=arm, gripper=super()._controller_configs["pd_joint_pos"]["gripper"])}
    env = gym.make("Empty-v1", robot_uids=uid, control_mode=W.CONTROL_MODE, obs_mode="state_dict", sim_backend="cpu",
                   render_backend="cpu")
    try:
        u = env.unwrapped
        env.reset(seed=0)
        u.agent.reset(u.agent.keyframes["rest"].qpos)
        u.agent.controller.reset()

        def tcp():
            return np.linalg.inv(pose_to_matrix(_np(u.agent.robot.pose.raw_pose))) @ pose_to_matrix(_np(u.agent.tcp.pose.raw_pose))

        def run(a, g=1.0, holds=3):
            for act in [a] + [[0] * 6 + [a[6]]] * holds:
                c = W.widowx_commands(act, g)
                for v in c.vectors:
                    u.step(v.astype(np.float32)[None])
                g = c.gripper
            return g
        T0 = tcp()
        run([0.02, 0, 0, 0, 0, 0, 1])
        T1 = tcp()
        run([0, 0.03, -0.02, 0, 0, 0, 1])
        T2 = tcp()
        assert np.allclose(T1[:3, 3] - T0[:3, 3], [0.02, 0, 0], atol=0.004)
        assert np.allclose(T2[:3, 3] - T1[:3, 3], [0, 0.03, -0.02], atol=0.004)
        rpy = [0.15, -0.1, 0.25]
        run([0, 0, 0, *rpy, 1], holds=4)
        T3 = tcp()
        err = Rotation.from_matrix(T3[:3, :3] @ (rpy_to_matrix(rpy) @ T2[:3, :3]).T).magnitude()
        err_inverse = Rotation.from_matrix(T3[:3, :3] @ (rpy_to_matrix(rpy).T @ T2[:3, :3]).T).magnitude()
        assert err < 0.05 and err_inverse > 0.5, (err, err_inverse)
        assert np.linalg.norm(T3[:3, 3] - T2[:3, 3]) < 0.004  # turned about the TCP
        assert np.allclose(_np(u.agent.robot.get_qpos())[-2:], 0.04, atol=1e-3)  # open
        run([0] * 6 + [0.0])
        assert np.allclose(_np(u.agent.robot.get_qpos())[-2:], 0.0, atol=1e-3)  # closed
    finally:
        env.close()


def test_gripper_rule_at_both_ends_and_the_threshold():
    move = [0.01, 0, 0, 0, 0, 0.1]
    # open and commanded open: one step, +1
    c = W.widowx_commands([*move, 1.0], 1.0)
    assert [v[6] for v in c.vectors] == [1.0] and c.gripper == 1.0
    # open, commanded closed: the move with the fingers still open, then a still step closing them
    c = W.widowx_commands([*move, 0.0], 1.0)
    assert [v[6] for v in c.vectors] == [1.0, -1.0] and np.allclose(c.vectors[1][:6], 0) and c.gripper == 0.0
    assert np.allclose(c.vectors[0][:3], move[:3])
    # the 0.5 rule: 0.5 is open, just below it closed (embeval.action.GRIPPER_CLOSED_BELOW)
    assert W.widowx_commands([*move, 0.5], 1.0).gripper == 1.0 and len(W.widowx_commands([*move, 0.5], 1.0).vectors) == 1
    c = W.widowx_commands([*move, 0.4999], 1.0)
    assert c.gripper == 0.0 and c.vectors[-1][6] == -1.0
    c = W.widowx_commands([*move, 0.5], 0.0)  # closed, commanded 0.5: opens after the move
    assert [v[6] for v in c.vectors] == [-1.0, 1.0] and c.gripper == 1.0
    c = W.widowx_commands([*move, 0.3], 0.0)  # closed stays closed
    assert [v[6] for v in c.vectors] == [-1.0] and c.gripper == 0.0
    # no motion, no change: one hold step; no motion with a change: only the gripper step
    assert [list(v) for v in W.widowx_commands([0] * 6 + [0.2], 0.0).vectors] == [[0, 0, 0, 0, 0, 0, -1.0]]
    assert [list(v) for v in W.widowx_commands([0] * 6 + [0.9], 0.0).vectors] == [[0, 0, 0, 0, 0, 0, 1.0]]
    assert W.gripper_action(0.0) == -1.0 and W.gripper_action(1.0) == 1.0


def test_clipped_to_the_controller_box():
    lim = W.widowx_limits()
    c = W.widowx_commands([1.5, -2.0, 0.1, 0, 0, 0, 1], 1.0, lim)
    assert c.clipped and np.allclose(c.vectors[0][:3], [1.0, -1.0, 0.1])
    c = W.widowx_commands([0, 0, 0, 0, 0, 2.5, 1], 1.0, lim)  # a 2.5 rad yaw: pi/2 about the same axis
    assert c.clipped and np.allclose(c.vectors[0][3:6], [0, 0, np.pi / 2])
    c = W.widowx_commands([0, 0, 0, 0.8, -0.6, 0.5, 1], 1.0, lim)  # a 1.20 rad turn (< pi/2): unchanged
    assert not c.clipped and np.allclose(Rotation.from_euler("XYZ", c.vectors[0][3:6]).as_matrix(), rpy_to_matrix([0.8, -0.6, 0.5]))
    c = W.widowx_commands([0, 0, 0, 1.2, -0.9, 0.4, 1], 1.0, lim)  # a 1.65 rad turn: pi/2 about the same axis
    rv = Rotation.from_euler("XYZ", c.vectors[0][3:6]).as_rotvec()
    want = Rotation.from_matrix(rpy_to_matrix([1.2, -0.9, 0.4])).as_rotvec()
    assert c.clipped and np.allclose(rv, want / np.linalg.norm(want) * np.pi / 2)
    c = W.widowx_commands([0, 0, 0, 1.5, -1.2, 0.4, 1], 1.0, lim)
    e = c.vectors[0][3:6]
    assert c.clipped and np.linalg.norm(Rotation.from_euler("XYZ", e).as_rotvec()) == pytest.approx(np.pi / 2, abs=1e-6)
    assert np.all(np.abs(e) <= np.pi / 2 + 1e-12)


# ----------------------------------------------------------------------------- assets
def test_asset_uids_come_from_maniskills_registry():
    from mani_skill.utils.assets.data import DATA_SOURCES

    for env_id in W.ALL_BRIDGE_ENVS:
        assert W.asset_ids(env_id) == ["bridge_v2_real2sim", "widowx250s"], env_id
        assert set(W.required_files(env_id)) <= set(DATA_SOURCES)
        for uid, files in W.required_files(env_id).items():  # every file lies under its data source's folder
            assert all(f.startswith(DATA_SOURCES[uid].target_path + "/") for f in files)
    with pytest.raises(ConfigError, match="PutCarrotOnPlateInScene-v1"):
        W.require_assets("PutCarrotOnPlate-v9")


def test_partial_asset_folder_is_detected(tmp_path):
    """A fresh process with MS_ASSET_DIR at a temporary folder: nothing, a partial copy, every file the
    checks name; and `embeval act2answer run --backend maniskill-bridge` on the partial one."""
    items = tmp_path / "items.jsonl"
    from PIL import Image

    for n in ("a", "b"):
        Image.new("RGB", (8, 8)).save(tmp_path / f"{n}.png")
    items.write_text(json.dumps({"id": "i1", "question": "Which?", "left_image": str(tmp_path / "a.png"),
                                 "right_image": str(tmp_path / "b.png"), "correct_side": "left", "category": "color"}) + "\n")
    script = textwrap.dedent(f"""
        import json, sys
        from pathlib import Path
        from embeval.sim.maniskill import bridge as W
        out, root = {{}}, W.asset_dir()
        out["root"] = str(root)
        out["empty"] = W.asset_problems("PutCarrotOnPlateInScene-v1")
        (root / "robots/widowx").mkdir(parents=True)
        (root / "robots/widowx/wx250s.urdf").write_text("<robot/>")
        b = root / "tasks/bridge_v2_real2sim_dataset/custom"
        b.mkdir(parents=True)
        (b / "info_bridge_custom_v0.json").write_text("{{}}")
        out["partial"] = W.asset_problems("PutCarrotOnPlateInScene-v1")
        from embeval_cli import main
        out["rc"] = main(["act2answer", "run", "--items", {str(items)!r}, "--policy", "expert",
                          "--backend", "maniskill-bridge", "--out", {str(tmp_path / 'res')!r}])
        for f in W.required_files("PutCarrotOnPlateInScene-v1")["bridge_v2_real2sim"]:
            (root / f).parent.mkdir(parents=True, exist_ok=True)
            (root / f).write_text("junk")  # every file there, none valid (a hostile or broken copy)
        out["junk"] = W.asset_problems("PutCarrotOnPlateInScene-v1")
        heads = {{".json": b"{{}}", ".glb": b"glTF\\x02", ".png": b"\\x89PNG\\r\\n\\x1a\\n", ".obj": b"v 0 0 0\\n"}}
        for f in W.required_files("PutCarrotOnPlateInScene-v1")["bridge_v2_real2sim"]:
            (root / f).write_bytes(heads[Path(f).suffix])
        out["complete"] = W.asset_problems("PutCarrotOnPlateInScene-v1")
        out["spoon"] = W.asset_problems("PutSpoonOnTableClothInScene-v1")
        print("RESULT" + json.dumps(out))
    """)
    env = {**os.environ, "MS_ASSET_DIR": str(tmp_path / "ms")}
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=240)
    out = json.loads(p.stdout.split("RESULT", 1)[1])
    assert out["root"] == str(tmp_path / "ms" / "data")
    assert out["empty"] == {"bridge_v2_real2sim": "not downloaded", "widowx250s": "not downloaded"}
    assert out["partial"] == {"bridge_v2_real2sim": "incomplete: tasks/bridge_v2_real2sim_dataset/stages/bridge_table_1_v1.glb missing"}
    assert out["junk"] == {"bridge_v2_real2sim": "damaged: tasks/bridge_v2_real2sim_dataset/custom/info_bridge_custom_v0.json "
                                                 "is not a JSON object"}
    assert out["complete"] == {}
    assert list(out["spoon"]) == ["bridge_v2_real2sim"] and "bridge_spoon_generated_modified" in out["spoon"]["bridge_v2_real2sim"]
    # the CLI: exit 2, one line naming the asset, where it looked and the command, no traceback
    assert out["rc"] == 2 and "Traceback" not in p.stderr
    err = [ln for ln in p.stderr.splitlines() if ln.startswith("embeval: error:")]
    assert len(err) == 1, p.stderr
    assert "bridge_v2_real2sim incomplete" in err[0] and "widowx250s" not in err[0].split("looked in")[0]
    assert f"looked in {tmp_path / 'ms' / 'data'}" in err[0] and f"MS_ASSET_DIR={tmp_path / 'ms'}" in err[0]
    assert "`python -m mani_skill.utils.download_asset bridge_v2_real2sim -y`" in err[0]


def test_cli_without_assets_names_the_download_command(tmp_path, capsys):
    if not _offline():
        pytest.skip("the Bridge assets are downloaded here")
    from embeval_cli import main

    rc = main(["sim", "render", "--backend", "maniskill", "--task", "PutCarrotOnPlateInScene-v1", "--out", str(tmp_path / "b.png")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and CMD in err and "MS_ASSET_DIR=" in err, err
    assert "bridge_v2_real2sim not downloaded" in err and "widowx250s not downloaded" in err
    from embeval.act2answer.generator import generate_items

    generate_items(tmp_path / "suite", ["color"], per_category=1, seed=0)
    rc = main(["act2answer", "run", "--items", str(tmp_path / "suite" / "items.jsonl"), "--policy", "expert",
               "--backend", "maniskill-bridge-spoon", "--out", str(tmp_path / "res")])
    err2 = capsys.readouterr().err
    assert rc == 2 and CMD in err2 and "PutSpoonOnTableClothInScene-v1" in err2 and err2.count("\n") == 1, err2
    # the Panda path of ManiSkillEnv asked for a Bridge id says the same
    from embeval.sim.maniskill.env import ManiSkillConfig, ManiSkillEnv

    with pytest.raises(ConfigError, match="download_asset bridge_v2_real2sim -y && "):
        ManiSkillEnv(ManiSkillConfig("PutCarrotOnPlateInScene-v1", render=False))


def test_a_partly_copied_folder_is_answered_by_the_same_message(item, monkeypatch):
    """The checks pass (monkeypatched) but a file the Bridge env opens is absent: building the Act2Answer
    subclass of ManiSkill's env gets as far as its first read and answers with the command."""
    if not _offline():
        pytest.skip("the Bridge assets are downloaded here")
    monkeypatch.setattr(W, "asset_problems", lambda env_id: {})
    B._CLASSES.clear()
    with pytest.raises(ConfigError) as e:
        B.BridgeSession("PutCarrotOnPlateInScene-v1", (64, 48))
    msg = str(e.value)
    assert CMD in msg and "FileNotFoundError" in msg and "\n" not in msg
    cls = B._CLASSES.pop("PutCarrotOnPlateInScene-v1")
    from mani_skill.envs.tasks.digital_twins.bridge_dataset_eval import PutCarrotOnPlateInScene

    assert issubclass(cls, PutCarrotOnPlateInScene) and cls.a2a_scene is None


# ----------------------------------------------------------------------------- Act2Answer staging
def test_item_to_scene_spec_and_swap(item):
    o = B.bridge_scene(item, "original")
    s = B.bridge_scene(item, "swapped", "PutSpoonOnTableClothInScene-v1")
    assert (o.env_id, o.carried, o.parked) == ("PutCarrotOnPlateInScene-v1", "bridge_carrot_generated_modified",
                                               "bridge_plate_objaverse_larger")
    assert (s.carried, s.parked) == ("bridge_spoon_generated_modified", "table_cloth_generated_shorter")
    assert item.question in o.instruction and "the carrot" in o.instruction and "cube" not in o.instruction
    assert "the spoon" in s.instruction
    # the swap exchanges the images on the cards and moves the correct side with them
    assert (o.textures["card_left"], o.textures["card_right"], o.correct_side) == (item.left_image, item.right_image, "left")
    assert (s.textures["card_left"], s.textures["card_right"], s.correct_side) == (item.right_image, item.left_image, "right")
    with pytest.raises(ConfigError, match="PutCarrotOnPlateInScene-v1"):
        B.bridge_scene(item, "original", "PutCarrotOnPlate-v9")
    with pytest.raises(ConfigError, match="layout"):
        B.bridge_scene(item, "mirrored")


@pytest.mark.filterwarnings("ignore::UserWarning")  # ManiSkill's own torch.tensor(list of arrays)
def test_the_robot_pose_and_table_area_are_maniskills(monkeypatch):
    """ROBOT_XYZ is the flat-table reset pose in the installed source; TABLE_REGION is the area where the
    flat-table Bridge envs place their objects (their own position grids, read by running their __init__
    up to the base class) grown by half a 3 cm cube."""
    import inspect

    from mani_skill.envs.tasks.digital_twins.bridge_dataset_eval import base_env, put_on_in_scene

    src = inspect.getsource(base_env.BaseBridgeEnv._initialize_episode)
    flat = src.split('if self.scene_setting == "flat_table":')[1].split("elif")[0]
    assert "sapien.Pose([0.147, 0.028, 0.870], q=[0, 0, 0, 1])" in flat and W.ROBOT_XYZ == (0.147, 0.028, 0.870)
    seen = []
    monkeypatch.setattr(base_env.BaseBridgeEnv, "__init__", lambda self, obj_names, xyz_configs, quat_configs, **kw:
                        seen.append(np.asarray(xyz_configs)))
    for env_id in W.BRIDGE_ENVS:
        getattr(put_on_in_scene, {"PutCarrotOnPlateInScene-v1": "PutCarrotOnPlateInScene",
                                  "PutSpoonOnTableClothInScene-v1": "PutSpoonOnTableClothInScene",
                                  "StackGreenCubeOnYellowCubeBakedTexInScene-v1": "StackGreenCubeOnYellowCubeBakedTexInScene"}[env_id])()
    xy = np.concatenate([c.reshape(-1, 3)[:, :2] for c in seen])
    assert np.allclose([xy[:, 0].min(), xy[:, 0].max(), xy[:, 1].min(), xy[:, 1].max()], [-0.26, -0.06, -0.1, 0.1])
    (x0, x1), (y0, y1) = B.TABLE_REGION
    assert np.allclose([x0, x1, y0, y1], [-0.26 - 0.015, -0.06 + 0.015, -0.1 - 0.015, 0.1 + 0.015])
    # the objects' configured heights: the table top lies within a few mm of TABLE_Z, under the cards' top
    z = np.concatenate([c.reshape(-1, 3)[:, 2] for c in seen])
    assert z.min() >= B.TABLE_Z - 0.001 and B.TABLE_Z - 0.001 + B.CARD_THICKNESS > z.min() + 0.005


def test_frames_and_geometry_on_the_bridge_table(item):
    sc = B.bridge_scene(item, "original")
    sp = sc.spec
    # turned 180 deg: base +y (left) is world -y; the grid centre (-0.16, 0) is base (0.307, 0.028)
    assert B.base_to_world((0.307, 0.028)) == pytest.approx((-0.16, 0.0))
    assert B.world_to_base(B.base_to_world((0.31, -0.02))) == pytest.approx((0.31, -0.02))
    lx, ly, lz = sc.card_world_xyz("card_left")
    rx, ry, _ = sc.card_world_xyz("card_right")
    assert ly < ry and lx == pytest.approx(rx) and lz == pytest.approx(B.TABLE_Z + 0.005)
    # every card corner and the start on the table area and within the WidowX's reach
    (x0, x1), (y0, y1) = B.TABLE_REGION
    for xy, size in ((sp.left_card_xy, sp.card_size), (sp.right_card_xy, sp.card_size),
                     (sp.context_card_xy, sp.card_size), (sp.cube_xy, 0.0)):
        for c in B.card_corners(xy, size):
            wx, wy = B.base_to_world(c)
            assert x0 <= wx <= x1 and y0 <= wy <= y1 and np.hypot(*c) < B.WIDOWX_REACH, (xy, c)
    # the cards do not overlap, the zones do not overlap, the start and the question card lie in no zone
    h = sp.card_size

    def apart(a, b):
        return abs(a[0] - b[0]) >= h or abs(a[1] - b[1]) >= h
    assert apart(sp.left_card_xy, sp.right_card_xy) and apart(sp.left_card_xy, sp.context_card_xy)
    assert apart(sp.right_card_xy, sp.context_card_xy)
    assert np.hypot(*np.subtract(sp.left_card_xy, sp.right_card_xy)) > 2 * sp.eps
    for p in (sp.cube_xy, sp.context_card_xy):
        assert min(np.hypot(*np.subtract(p, c)) for c in (sp.left_card_xy, sp.right_card_xy)) > sp.eps


def test_spec_fields_left_at_the_cells_defaults_take_the_bridge_ones():
    from embeval.act2answer.scene import EpisodeSpec

    assert B.bridge_spec(None) == B.bridge_spec(EpisodeSpec()) == B.bridge_episode_spec()
    s = B.bridge_spec(EpisodeSpec(max_steps=30, eps=0.04, settle_s=0.6))
    assert (s.max_steps, s.eps, s.settle_s, s.left_card_xy) == (30, 0.04, 0.6, (0.36, 0.105))
    with pytest.raises(ConfigError, match=r"left_card_xy \(0.6, 0.15\).*Bridge table area"):
        B.bridge_spec(EpisodeSpec(left_card_xy=(0.6, 0.15)))


@pytest.mark.parametrize("layout,on,zone", [("original", "card_left", "correct"), ("original", "card_right", "incorrect"),
                                            ("swapped", "card_left", "incorrect"), ("swapped", "card_right", "correct")])
def test_zones_of_the_carried_object(item, layout, on, zone):
    sc = B.bridge_scene(item, layout)
    x, y = sc.card_xy(on)
    r = B.scene_result(sc, (x + 0.01, y - 0.01), end_reason="released", stopped=False, steps=12, subject="s")
    assert (r.zone, r.choice, r.layout, r.success) == (zone, on.split("_")[1], layout, float(zone == "correct"))
    cx, cy = sc.spec.card_xy(sc.correct_side)
    assert r.distance_correct == pytest.approx(float(np.hypot(x + 0.01 - cx, y - 0.01 - cy)), abs=1e-4)
    assert r.cube_xy == pytest.approx((x + 0.01, y - 0.01), abs=1e-5)
    if zone == "correct":
        assert r.distance_correct == pytest.approx(0.01414, abs=1e-4)
    assert r.instruction == sc.instruction and r.termination == "release_after_lift"
    far = B.scene_result(sc, sc.spec.cube_xy, end_reason="max_steps", stopped=False, steps=60)
    assert (far.zone, far.choice, far.success) == ("out_of_bounds", None, 0.0)


def test_registered_as_act2answer_backends():
    from embeval.act2answer.episode import BACKENDS, get_backend

    for name, env_id in (("maniskill-bridge", "PutCarrotOnPlateInScene-v1"), ("maniskill-bridge-spoon",
                         "PutSpoonOnTableClothInScene-v1"), ("maniskill-bridge-cube", "StackGreenCubeOnYellowCubeBakedTexInScene-v1")):
        be = get_backend(name)
        assert be.name == name and env_id in be.description and name in list(BACKENDS)


def test_reference_v4_layout_in_the_widowx_frame(item):
    """The reference's Act2AnswerV4-v1 boards (world (-0.25, -0.155) left, (-0.25, +0.155) right) as cards in the
    WidowX base frame (left = base +y, as every embeval cell), 3 cm cube, margin 0.08 m, 80 grasped steps; a
    carry onto the correct board is correct under both rules, the held start answers neither."""
    from embeval.act2answer.episode import get_backend

    s = B.reference_v4_spec()
    assert B.base_to_world(s.left_card_xy) == pytest.approx((-0.25, -0.155)) and \
        B.base_to_world(s.right_card_xy) == pytest.approx((-0.25, 0.155))
    assert s.left_card_xy[1] > s.right_card_xy[1]
    assert (s.cube_size, s.board_margin, s.max_steps, s.hold_steps, s.start, s.rule) == (0.03, 0.08, 80, 25, "grasped", "board")
    sc = B.bridge_scene(item, "swapped", "StackGreenCubeOnYellowCubeBakedTexInScene-v1", None, "v4")
    assert sc.spec == s and sc.carried == "baked_green_cube_3cm"
    x, y = s.card_xy(sc.correct_side)
    r = B.scene_result(sc, (x + 0.1, y, 0.02), end_reason="released", stopped=False, steps=40)  # 10 cm off: board only
    assert (r.zone, r.success_board, r.success_disc, r.is_answered) == ("correct", 1.0, 0.0, True)
    held = B.scene_result(sc, (*s.cube_xy, 0.15), end_reason="max_steps", stopped=False, steps=80)
    assert (held.is_answered, held.success) == (False, 0.0)
    be = get_backend("maniskill-bridge-v4")
    assert "Act2AnswerV4-v1" in be.description
    if _offline():  # without the assets the env is a one-line error naming the download
        with pytest.raises(ConfigError, match="download_asset bridge_v2_real2sim -y"):
            be.make_env((64, 48))
