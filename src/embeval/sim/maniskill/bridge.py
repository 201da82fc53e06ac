"""ManiSkill3's BridgeData v2 digital twins (SimplerEnv's Bridge scenes) with the WidowX 250 S.

The envs (ManiSkill 3.0.1 ids, :data:`BRIDGE_ENVS`): ``PutCarrotOnPlateInScene-v1``,
``PutSpoonOnTableClothInScene-v1``, ``StackGreenCubeOnYellowCubeBakedTexInScene-v1`` (flat table) and
``PutEggplantInBasketScene-v1`` (sink). They need two ManiSkill downloads, the env's
``bridge_v2_real2sim`` and the robot's ``widowx250s`` (:func:`require_assets` names the command).

Controller. The Bridge WidowX has one control mode, :data:`CONTROL_MODE`
(``arm_pd_ee_target_delta_pose_align2_gripper_pd_joint_pos``), a 7-vector per control step (5 Hz):

- ``[0:3]`` translation delta in metres in the robot's root frame (ManiSkill's ``root_translation``),
  not normalised (``normalize_action=False``): ``p' = p + d``;
- ``[3:6]`` rotation delta as *intrinsic* XYZ Euler angles in radians
  (``euler_angles_to_matrix(e, "XYZ") = Rx(e0) Ry(e1) Rz(e2)``), applied in the root frame about the
  end effector (``root_aligned_body_rotation``): ``R' = R_e R``;
- both relative to the controller's previous *target* pose (``use_target=True``), not the measured one;
- ``[6]`` gripper, normalised: -1 drives both fingers to 0.014 m (closed), +1 to 0.038 m (open); an
  absolute target each step (``pd_joint_pos``, no delta).

Frame ``base`` of embeval is the robot's root (the WidowX's ``base_link``), so the 7-DoF
:class:`~embeval.action.Action` converts without a change of frame (:func:`widowx_commands`). The flat
table scenes place the root at world ``(0.147, 0.028, 0.870)`` turned 180 deg about z
(:data:`ROBOT_XYZ`; ``BaseBridgeEnv._initialize_episode``).
"""
from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from embeval.action import Action, ActionSpec, Observation, gripper_closed, gripper_command, rpy_to_matrix
from embeval.errors import ConfigError, EmbevalError
from embeval.image_io import MAX_IMAGE_SIDE
from embeval.resize import resize
from embeval.rotations import matrix_to_quat, matrix_to_rotvec, rotvec_to_euler
from embeval.sim.env import ClosingEnv, as_action
from embeval.sim.episode_env import StepResult
from embeval.sim.maniskill.runtime import check_seed, raw_pose_matrix

#: the Bridge WidowX's only control mode in ManiSkill 3.0.1
CONTROL_MODE = "arm_pd_ee_target_delta_pose_align2_gripper_pd_joint_pos"
#: the camera SimplerEnv evaluates with (640x480, a Logitech C920's intrinsics, the real-image overlay)
CAMERA = "3rd_view_camera"
#: the link the arm controller moves (the TCP of the observation state)
EE_LINK = "ee_gripper_link"
#: the WidowX root in the flat-table scenes after reset: world position (m), turned 180 deg about z
ROBOT_XYZ = (0.147, 0.028, 0.870)
#: the flat-table scenes' env ids -> (object carried, target object, the carried object in words)
BRIDGE_ENVS = {
    "PutCarrotOnPlateInScene-v1": ("bridge_carrot_generated_modified", "bridge_plate_objaverse_larger", "carrot"),
    "PutSpoonOnTableClothInScene-v1": ("bridge_spoon_generated_modified", "table_cloth_generated_shorter", "spoon"),
    "StackGreenCubeOnYellowCubeBakedTexInScene-v1": ("baked_green_cube_3cm", "baked_yellow_cube_3cm", "green cube"),
}
#: every Bridge env of ManiSkill 3.0.1 (the sink scene only runs unwrapped: ``embeval sim render``)
ALL_BRIDGE_ENVS = (*BRIDGE_ENVS, "PutEggplantInBasketScene-v1")


def is_bridge_env(env_id: str) -> bool:
    return env_id in ALL_BRIDGE_ENVS


# ----------------------------------------------------------------------------- action conversion
@dataclass(frozen=True)
class WidowXLimits:
    """The controller's action box (from ``WidowX250SBridgeDatasetFlatTable._controller_configs``)."""

    pos_lower: float = -1.0  # m per step (ManiSkill calls these dummies: the arm is not normalised)
    pos_upper: float = 1.0
    rot_lower: float = -math.pi / 2  # rad, per Euler angle
    rot_upper: float = math.pi / 2
    finger_closed: float = 0.015 - 0.001  # m, finger joint target at gripper action -1 (with ManiSkill's clearance)
    finger_open: float = 0.037 + 0.001  # m, at +1


#: the limits of ManiSkill 3.0.1 (``tests/core/sim/test_maniskill_bridge.py`` checks them against the installed config)
WIDOWX_LIMITS = WidowXLimits()


def widowx_controller_configs() -> dict[str, Any]:
    """ManiSkill's own controller configs of the flat-table WidowX (``{"arm": ..., "gripper": ...}``).

    Read from the installed agent class without building it (needs no downloaded asset)."""
    from embeval.sim.maniskill.runtime import import_sapien

    import_sapien()
    from mani_skill.envs.tasks.digital_twins.bridge_dataset_eval.base_env import WidowX250SBridgeDatasetFlatTable as W

    return W._controller_configs.fget(object.__new__(W))[CONTROL_MODE]


def widowx_limits(configs: dict[str, Any] | None = None) -> WidowXLimits:
    """:class:`WidowXLimits` from ``configs`` (default :func:`widowx_controller_configs`)."""
    c = configs or widowx_controller_configs()
    arm, grip = c["arm"], c["gripper"]
    return WidowXLimits(float(arm.pos_lower), float(arm.pos_upper), float(arm.rot_lower), float(arm.rot_upper),
                        float(grip.lower), float(grip.upper))


@dataclass
class WidowXCommand:
    """What one embeval action becomes: 1 or 2 controller vectors (7,) in order, the commanded opening
    after them (0 closed, 1 open), and whether the motion was clipped to the controller's box."""

    vectors: list[np.ndarray]
    gripper: float
    clipped: bool = False


def gripper_action(opening: float) -> float:
    """embeval's commanded opening (0 closed .. 1 open; the 0.5 rule) -> the controller's -1 / +1."""
    return -1.0 if gripper_closed(opening) else 1.0


def widowx_commands(action: Action | Sequence[float], gripper: float, limits: WidowXLimits = WIDOWX_LIMITS) -> WidowXCommand:
    """One 7-DoF :class:`~embeval.action.Action` in frame ``base`` (= the WidowX root) -> the control steps
    of :data:`CONTROL_MODE`, given the gripper's commanded opening ``gripper`` before it.

    - translation: ``[dx, dy, dz]`` metres, unchanged (same frame, the arm is not normalised), each
      clipped to ``[pos_lower, pos_upper]``;
    - rotation: ``R_delta = Rz(yaw) Ry(pitch) Rx(roll)`` (embeval's ``R' = R_delta R`` in frame base)
      becomes the intrinsic XYZ Euler angles ``e`` with ``Rx(e0) Ry(e1) Rz(e2) = R_delta`` (the
      controller applies ``R' = R_e R`` in the root frame); a turn beyond ``rot_upper`` (pi/2) is
      scaled down to it about the same axis and each angle clipped to ``[rot_lower, rot_upper]``;
    - gripper (:func:`~embeval.action.gripper_command`): the move carries the present opening
      (-1 closed / +1 open); when the command crosses 0.5 a second step with no motion drives the
      fingers fully closed (-1) or open (+1), as every embeval backend runs it (move, then gripper);
      no motion and no gripper change is one hold step (zeros, present opening).
    """
    a = as_action(action)
    clipped = False
    rotvec = matrix_to_rotvec(rpy_to_matrix(a.rotation))
    angle = float(np.linalg.norm(rotvec))
    if angle > limits.rot_upper:
        rotvec, clipped = rotvec * (limits.rot_upper / angle), True
    euler = rotvec_to_euler(rotvec, "XYZ")
    e = np.clip(euler, limits.rot_lower, limits.rot_upper)
    d = np.clip(a.translation, limits.pos_lower, limits.pos_upper)
    clipped = clipped or bool(np.any(e != euler) or np.any(d != a.translation))
    now = gripper_action(gripper)
    vectors = [np.concatenate([d, e, [now]])] if a.moves else []
    new = gripper_command(a.gripper, gripper)
    if new is not None:
        vectors.append(np.array([0, 0, 0, 0, 0, 0, gripper_action(new)], dtype=np.float64))
    if not vectors:
        vectors.append(np.array([0, 0, 0, 0, 0, 0, now], dtype=np.float64))
    return WidowXCommand(vectors, float(gripper if new is None else new), clipped)


# ----------------------------------------------------------------------------- assets
def asset_ids(env_id: str) -> list[str]:
    """ManiSkill's data-source uids ``env_id`` needs: the env's and its WidowX's ``asset_download_ids``."""
    _import_maniskill()
    from mani_skill.agents.registration import REGISTERED_AGENTS
    from mani_skill.utils.registration import REGISTERED_ENVS

    spec = REGISTERED_ENVS[env_id]
    robot = ("widowx250s_bridgedataset_sink" if getattr(spec.cls, "scene_setting", "flat_table") == "sink"
             else "widowx250s_bridgedataset_flat_table")
    out: list[str] = []
    for uid in [*(spec.asset_download_ids or []), *REGISTERED_AGENTS[robot].asset_download_ids]:
        if uid not in out:
            out.append(uid)
    return out


def required_files(env_id: str) -> dict[str, list[str]]:
    """Per data-source uid, the files (relative to ManiSkill's asset folder) the env opens first."""
    carried, target = BRIDGE_ENVS.get(env_id, (None, None, ""))[:2]
    bridge = "tasks/bridge_v2_real2sim_dataset"
    table = {"PutEggplantInBasketScene-v1": ("stages/bridge_table_1_v2.glb", "real_inpainting/bridge_sink.png")}
    stage, overlay = table.get(env_id, ("stages/bridge_table_1_v1.glb", "real_inpainting/bridge_real_eval_1.png"))
    model_json = ("info_bridge_custom_baked_tex_v0.json" if env_id.startswith("StackGreenCube") else "info_bridge_custom_v0.json")
    files = [f"{bridge}/custom/{model_json}", f"{bridge}/{stage}", f"{bridge}/{overlay}"]
    files += [f"{bridge}/custom/models/{m}/collision.obj" for m in (carried, target) if m]
    return {"bridge_v2_real2sim": files, "widowx250s": ["robots/widowx/wx250s.urdf"]}


def asset_dir() -> Path:
    """ManiSkill's asset folder as this process sees it: ``$MS_ASSET_DIR/data`` (fixed when mani_skill is imported)."""
    _import_maniskill()
    from mani_skill import ASSET_DIR

    return Path(ASSET_DIR)


#: cheap validity checks of the files the env opens first, by extension: ``(bytes) -> True when it looks right``
_HEADER_CHECKS = {
    ".glb": lambda b: b[:4] == b"glTF",
    ".png": lambda b: b[:8] == b"\x89PNG\r\n\x1a\n",
    ".urdf": lambda b: b.lstrip()[:1] == b"<",
    ".obj": lambda b: bool(b.strip()) and b"\0" not in b,
}


def _damaged(path: Path) -> str | None:
    """Why ``path`` (a file the Bridge env opens first) is not what ManiSkill expects, or None: the model json must
    parse as a JSON object, a .glb/.png start with its magic bytes, a .urdf with ``<``, a .obj be non-empty text."""
    import json

    if path.suffix == ".json":
        try:
            ok = isinstance(json.loads(path.read_bytes()), dict)
        except (ValueError, UnicodeDecodeError):
            ok = False
        return None if ok else "is not a JSON object"
    check = _HEADER_CHECKS.get(path.suffix)
    with open(path, "rb") as f:
        head = f.read(4096)
    return None if check is None or check(head) else f"is not a valid {path.suffix} file"


def asset_problems(env_id: str) -> dict[str, str]:
    """uid -> what is wrong ("not downloaded", "incomplete: <file> missing" or "damaged: <file> is not ...") for
    every asset ``env_id`` lacks."""
    root, need, out = asset_dir(), required_files(env_id), {}
    from mani_skill.utils.assets.data import DATA_SOURCES

    for uid in asset_ids(env_id):
        folder = root / DATA_SOURCES[uid].target_path
        if not folder.is_dir() or not any(folder.iterdir()):
            out[uid] = "not downloaded"
            continue
        gone = [f for f in need.get(uid, []) if not (root / f).is_file()]
        if gone:
            out[uid] = f"incomplete: {gone[0]} missing"
            continue
        bad = [(f, why) for f in need.get(uid, []) if (why := _damaged(root / f))]
        if bad:
            out[uid] = f"damaged: {bad[0][0]} {bad[0][1]}"
    return out


def assets_message(env_id: str, problems: dict[str, str]) -> str:
    """The one-line message for ``problems`` (:func:`asset_problems`), with the download command."""
    from embeval.sim.maniskill.runtime import download_command

    what = "; ".join(f"{uid} {p}" for uid, p in problems.items())
    where = os.environ.get("MS_ASSET_DIR") or "~/.maniskill"
    return (f"{env_id} needs ManiSkill assets that are missing or damaged here ({what}; looked in {asset_dir()}, MS_ASSET_DIR={where}); "
            f"on a networked machine run `{download_command(list(problems))}` with the same MS_ASSET_DIR, then copy "
            "that folder here (docs/sim.md: Bridge scenes)")


def require_assets(env_id: str) -> None:
    """Raise the one-line :class:`ConfigError` of :func:`assets_message` when ``env_id``'s assets are missing."""
    if not is_bridge_env(env_id):
        raise ConfigError(f"unknown Bridge env {env_id!r}; choose one of {', '.join(ALL_BRIDGE_ENVS)}")
    problems = asset_problems(env_id)
    if problems:
        raise ConfigError(assets_message(env_id, problems))


def _import_maniskill():
    from embeval.sim.maniskill.runtime import import_sapien

    import_sapien()  # MS_ASSET_DIR and Vulkan set before mani_skill reads them
    import logging

    import mani_skill.envs  # noqa: F401  (registers the envs and agents)

    logging.getLogger("mani_skill").setLevel(logging.ERROR)


# ----------------------------------------------------------------------------- the env
@dataclass
class BridgeConfig:
    """How a :class:`BridgeEnv` is built. ``obs_size`` (width, height) resizes the 640x480 camera image
    (the camera renders at its calibrated size; None keeps it)."""

    env_id: str = "PutCarrotOnPlateInScene-v1"
    obs_size: tuple[int, int] | None = None
    aliases: dict[str, str] = field(default_factory=lambda: {"third_person": CAMERA})
    render_backend: str = "auto"  # "cpu" (software Vulkan), "gpu", or "auto"
    max_steps: int = 60  # control steps (the registered max_episode_steps of the flat-table envs)

    def __post_init__(self):
        if self.obs_size is not None:
            size = tuple(self.obs_size)
            if len(size) != 2 or any(isinstance(v, bool) or not isinstance(v, (int, np.integer))
                                     or not 16 <= v <= MAX_IMAGE_SIDE for v in size):
                raise ConfigError(f"BridgeConfig.obs_size must be (width, height), whole numbers of pixels in "
                                  f"16..{MAX_IMAGE_SIDE}, got {self.obs_size!r}")


class BridgeEnv(ClosingEnv):
    """One Bridge env, one episode at a time, with embeval's action and observation conventions.

    Observation: RGB under :data:`CAMERA` (real-image overlay as SimplerEnv) and its aliases; state in
    frame base: ``tcp_pose`` (7,) of :data:`EE_LINK` ``[x, y, z, qx, qy, qz, qw]``, ``joint_positions`` (6,)
    rad, ``gripper`` (1,) the commanded opening (0 closed, 1 open), ``finger_positions`` (2,) m.
    ``env_cls`` builds the env (default ManiSkill's registered class); extra ``env_kwargs`` go to it.
    """

    action_spec = ActionSpec(frame="base")
    #: per-action motion of the scripted expert (m, rad); the controller itself takes up to 1 m / pi/2
    pos_bound, rot_bound = 0.03, 0.25

    def __init__(self, config: BridgeConfig | None = None, env_cls=None, **env_kwargs: Any):
        self.config = c = config or BridgeConfig()
        require_assets(c.env_id)
        from embeval.sim.maniskill.runtime import auto_render_backend
        from mani_skill.utils.registration import REGISTERED_ENVS

        cls = env_cls or REGISTERED_ENVS[c.env_id].cls
        kw: dict[str, Any] = dict(obs_mode="rgb+segmentation", control_mode=CONTROL_MODE, sim_backend="cpu",
                                  render_backend=auto_render_backend(c.render_backend), num_envs=1)
        kw.update(env_kwargs)
        try:
            self.env = cls(**kw)
        except EmbevalError:
            raise
        except (OSError, ValueError, RuntimeError) as exc:  # a file the checks above do not name or cannot judge
            # (partly copied, junk json, a mesh SAPIEN cannot load): the same one line with the download command
            why = " ".join(f"{exc.__class__.__name__}: {exc}".split())[:200]
            raise ConfigError(assets_message(c.env_id, {u: f"incomplete or damaged ({why})"
                                                        for u in asset_ids(c.env_id)})) from None
        self.limits = widowx_limits({k: v.config for k, v in self.env.agent.controller.controllers.items()})
        self.gripper, self.control_steps, self.instruction, self._raw = 1.0, 0, "", None

    @property
    def unwrapped(self):
        return self.env

    def close(self) -> None:
        self.env.close()

    def reset(self, seed: int = 0, instruction: str | None = None, reconfigure: bool = False) -> Observation:
        """Start the seeded episode (ManiSkill's seeded object orientation; ``reconfigure`` reloads the scene)."""
        self._raw = self.env.reset(seed=check_seed(seed), options={"reconfigure": True} if reconfigure else {})[0]
        self.gripper, self.control_steps = 1.0, 0
        self.instruction = instruction if instruction is not None else str(self.env.get_language_instruction()[0])
        return self.observe()

    def step(self, action: Action | Sequence[float]):
        """Execute one action (:func:`widowx_commands`: one control step, two when the gripper changes)."""
        cmd = widowx_commands(action, self.gripper, self.limits)
        for v in cmd.vectors:
            self._raw = self.env.step(v.astype(np.float32)[None])[0]
            self.control_steps += 1
        self.gripper = cmd.gripper
        ev = self.env.evaluate()
        success = bool(np.asarray(ev["success"]).reshape(-1)[0])
        done = success or self.control_steps >= self.config.max_steps
        reason = "success" if success else ("max_steps" if done else "")
        return StepResult(self.observe(), success, done, False, reason,
                          {"control_steps": self.control_steps, "clipped": cmd.clipped})

    def hold(self, steps: int) -> None:
        """``steps`` control steps with no motion, the gripper kept."""
        for _ in range(int(steps)):
            self._raw = self.env.step(np.r_[np.zeros(6), gripper_action(self.gripper)].astype(np.float32)[None])[0]

    # ------------------------------------------------------------------ state
    def base_matrix(self) -> np.ndarray:
        return raw_pose_matrix(self.env.agent.robot.pose.raw_pose)

    def to_base(self, raw_pose) -> np.ndarray:
        """A world pose ``[x, y, z, qw, qx, qy, qz]`` -> 4x4 in frame base."""
        return np.linalg.inv(self.base_matrix()) @ raw_pose_matrix(raw_pose)

    def tcp_matrix(self) -> np.ndarray:
        return self.to_base(self.env.agent.controller.controllers["arm"].ee_link.pose.raw_pose)

    def observe(self) -> Observation:
        from embeval.sim.maniskill.runtime import _np

        raw = self._raw if self._raw is not None else self.env.get_obs()
        img = np.ascontiguousarray(_np(raw["sensor_data"][CAMERA]["rgb"])[..., :3]).astype(np.uint8)
        size = self.config.obs_size
        if size:
            img = resize(img, int(size[1]), int(size[0]), "pil_bilinear")  # obs_size is (width, height)
        images = {CAMERA: img, **{a: img for a, cam in self.config.aliases.items() if cam == CAMERA}}
        T = self.tcp_matrix()
        q = _np(self.env.agent.robot.get_qpos()).astype(np.float64)
        state = {"tcp_pose": np.concatenate([T[:3, 3], matrix_to_quat(T[:3, :3], canonical=False)]),
                 "joint_positions": q[:6].copy(), "gripper": np.array([self.gripper]), "finger_positions": q[6:8].copy()}
        return Observation(images=images, instruction=self.instruction, state=state,
                           timestamp=self.control_steps * float(self.env.control_timestep))
