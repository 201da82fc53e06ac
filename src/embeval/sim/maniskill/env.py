"""ManiSkill3 tasks behind embeval's episode API (the same ``reset`` / ``step`` / ``observe`` as
:class:`embeval.sim.SimEnv`): any subject that acts in the pybullet cell acts here unchanged.

Frames. ``base`` is the robot's root link (ManiSkill's Panda stands at world x = -0.615 m, axes
parallel to the world's). Observation state, all in frame base: ``tcp_pose`` (7,)
``[x, y, z, qx, qy, qz, qw]`` of the TCP (``panda_hand_tcp``), ``joint_positions`` (7,) the arm
joints (rad), ``gripper`` (1,) the commanded opening (0 closed, 1 open), ``gripper_width`` (1,)
the finger gap (m). Images: RGB uint8 under the env's own camera names (``base_camera``,
``hand_camera``, ...), each optionally also under an alias (``aliases={"third_person": "base_camera"}``).

Action conversion. An :class:`~embeval.action.Action` ``[dx, dy, dz, droll, dpitch, dyaw, g]`` in
frame base (rotation ``R_delta = Rz(yaw) Ry(pitch) Rx(roll)``, applied as ``R' = R_delta R``) is sent
to ManiSkill's ``pd_ee_delta_pose`` controller (frame ``root_translation:root_aligned_body_rotation``:
``p' = p + dp``; the rotation from *intrinsic* XYZ Euler angles, which this version multiplies by the
negative lower bound, see :func:`to_controller_action`), normalised by the
controller's bounds: translation / 0.1 m per axis, Euler angles / 0.1 rad (their norm clipped at 1).
A delta beyond the bounds is split into ``n`` equal control steps (``n = ceil(max(|dp|_inf / 0.1 m,
|rotvec| / 0.1 rad))``), so an action keeps its meaning "move the TCP by this much"; beyond
:attr:`ManiSkillConfig.max_substeps` steps it is scaled down along its direction (``info["clipped"]``). The gripper follows :func:`embeval.action.gripper_command` against the
commanded opening: after the move, one control step with no motion drives the fingers fully closed
(ManiSkill -1) or open (+1). The episode ends at the env's own ``evaluate()["success"]`` or when its
control-step budget (the registered ``max_episode_steps``, 50 for PickCube-v1) is used up.
"""
from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from embeval.action import (
    Action,
    ActionSpec,
    Observation,
    gripper_closed,
    gripper_command,
    rpy_to_matrix,
)
from embeval.errors import ConfigError
from embeval.image_io import MAX_IMAGE_SIDE
from embeval.rotations import Turn, compose, matrix_to_euler, matrix_to_quat, matrix_to_rotvec, rotvec_to_euler
from embeval.sim.env import ClosingEnv, as_action
from embeval.sim.episode_env import StepResult
from embeval.sim.maniskill.runtime import (
    VulkanUnavailableError,
    _np,
    auto_render_backend,
    check_seed,
    diagnose,
    download_command,
    import_sapien,
    raw_pose_matrix,
)

#: the tasks whose scripted expert, Decision and Execution scoring are covered (docs/sim.md)
TASKS = ("PickCube-v1", "PushCube-v1", "StackCube-v1", "PullCube-v1", "PlaceSphere-v1", "PegInsertionSide-v1")
CONTROL_MODE = "pd_ee_delta_pose"
#: ManiSkill asset downloads that envs need (not shipped in the wheel): env id suffix / robot uid -> data source
#: (the Bridge envs ask :mod:`embeval.sim.maniskill.bridge`, which reads ManiSkill's own registry)
ASSET_NEEDS = {"widowx": ("widowx250s",), "ur10e": ("ur10e",), "YCB": ("ycb",)}


@dataclass
class ManiSkillConfig:
    """How a ManiSkill env is built. ``render=False`` builds it state-only (no camera is rendered)."""

    env_id: str = "PickCube-v1"
    render: bool = True
    width: int = 128  # camera image size (every sensor camera), pixels
    height: int = 128
    aliases: dict[str, str] = field(default_factory=dict)  # extra image key -> env camera name
    max_steps: int | None = None  # control-step budget; None = the env's registered max_episode_steps
    max_substeps: int = 10  # control steps one action may be split into
    render_backend: str = "auto"  # "cpu" (software Vulkan), "gpu", or "auto" (gpu only with a system driver and CUDA)
    robot: str | None = None  # ManiSkill robot uid; None = the task's default (Panda)

    def __post_init__(self):
        for k in ("width", "height"):
            v = getattr(self, k)
            if not isinstance(v, int) or not 16 <= v <= MAX_IMAGE_SIDE:
                raise ConfigError(f"ManiSkillConfig.{k} must be an integer of pixels in 16..{MAX_IMAGE_SIDE}, got {v!r}")
        if self.max_steps is not None and (not isinstance(self.max_steps, int) or self.max_steps < 1):
            raise ConfigError(f"ManiSkillConfig.max_steps must be a positive integer or None, got {self.max_steps!r}")
        if self.render_backend not in ("auto", "cpu", "gpu"):
            raise ConfigError(f"ManiSkillConfig.render_backend must be 'auto', 'cpu' or 'gpu', got {self.render_backend!r}")


def to_controller_action(delta: Sequence[float], pos_bound: float = 0.1, rot_bound: float = 0.1) -> np.ndarray:
    """One 6-DoF base-frame delta (within the bounds) -> the normalised ``pd_ee_delta_pose`` arm action (6,).

    Translation is divided by ``pos_bound`` (m); the rotation ``R_delta = Rz(yaw) Ry(pitch) Rx(roll)``
    becomes ManiSkill's intrinsic XYZ Euler angles ``e`` (``Rx(e0) Ry(e1) Rz(e2) = R_delta``). ManiSkill
    3.0.1's ``pd_ee_delta_pose`` scales the normalised rotation by its *lower* bound (``-rot_bound``;
    ``PDEEPoseController._clip_and_scale_action``), so ``-e / rot_bound`` is sent and the controller
    turns the TCP by exactly ``R_delta`` (``tests/core/sim/test_maniskill.py`` checks this with ManiSkill's own
    controller code). Both parts must lie within the bounds (:func:`split_delta` makes them).
    """
    d = np.asarray(delta, dtype=np.float64).reshape(-1)[:6]
    euler = matrix_to_euler(rpy_to_matrix(d[3:6]), "XYZ")
    return np.concatenate([np.clip(d[:3] / pos_bound, -1.0, 1.0), -euler / rot_bound])


def split_delta(delta: Sequence[float], pos_bound: float = 0.1, rot_bound: float = 0.1,
                max_parts: int = 10) -> tuple[list[np.ndarray], bool]:
    """Split a base-frame delta into ``n`` equal parts each within the bounds (same total motion).

    At most ``max_parts`` parts: a larger delta (a policy gone wild) is scaled down to
    ``max_parts`` full-bound steps along the same direction; the flag says so. The controller bounds
    the norm of the *Euler* angles, which can exceed the rotation angle by up to 1 %: a part at the
    full bound may then be turned up to 1 % less (ManiSkill rescales it).
    """
    d = np.asarray(delta, dtype=np.float64).reshape(-1)[:6]
    rotvec = matrix_to_rotvec(rpy_to_matrix(d[3:6]))
    need = max(np.max(np.abs(d[:3])) / pos_bound, np.linalg.norm(rotvec) / rot_bound)
    n = max(1, math.ceil(need - 1e-9))
    clipped = n > max_parts
    scale = max_parts / need if clipped else 1.0
    n = min(n, max_parts)
    part_rpy = rotvec_to_euler(rotvec * scale / n, "xyz")
    return [np.concatenate([d[:3] * scale / n, part_rpy]) for _ in range(n)], clipped


def missing_assets(env_id: str, robot: str | None = None) -> list[str]:
    """ManiSkill data sources ``env_id`` (with ``robot``) needs that are not in ``MS_ASSET_DIR`` (see :data:`ASSET_NEEDS`)."""
    from embeval.sim.maniskill import bridge

    if bridge.is_bridge_env(env_id):
        return list(bridge.asset_problems(env_id))
    from mani_skill.utils.assets.data import DATA_SOURCES

    need: list[str] = []
    for key, sources in ASSET_NEEDS.items():
        if key in env_id or (robot and key in robot):
            need += [s for s in sources if s not in need]

    def present(uid: str) -> bool:  # an empty folder (left by a failed download) is not an asset
        src = DATA_SOURCES.get(uid)
        p = Path(src.output_dir) / src.target_path if src is not None else None
        return p is not None and p.exists() and (p.is_file() or any(p.iterdir()))
    return [s for s in need if not present(s)]


def assets_error(what: str, missing: Sequence[str]) -> ConfigError:
    """The one-line error for ``what`` (an env id) lacking the ManiSkill data sources ``missing``."""
    return ConfigError(f"{what} needs ManiSkill assets that are not downloaded ({', '.join(missing)}, looked in "
                       f"MS_ASSET_DIR={os.environ.get('MS_ASSET_DIR') or '~/.maniskill'}); on a networked machine run "
                       f"`{download_command(missing)}` with the same MS_ASSET_DIR, then copy that folder here")


class ManiSkillEnv(ClosingEnv):
    """One ManiSkill task, one episode at a time, with embeval's action and observation conventions.

    Example::

        from embeval.sim.maniskill import ManiSkillEnv, ManiSkillConfig
        env = ManiSkillEnv(ManiSkillConfig("PickCube-v1", width=64, height=64))
        obs = env.reset(seed=0)
        expert = env.expert()
        while not env.done:
            r = env.step(expert.act(obs)); obs = r.observation
        print(r.success, env.control_steps)
    """

    def __init__(self, config: ManiSkillConfig | None = None, perturb=None):
        """``perturb``: scene perturbations (:class:`embeval.sim.perturb.Perturbations`; ManiSkill applies every axis but
        distractors, :func:`embeval.sim.perturb.backends.supported`) drawn from the episode seed at every reset."""
        from embeval.sim.perturb.backends import check

        #: scene perturbations applied at every reset (None: none); settable between episodes
        self.perturb = check(perturb, "maniskill")
        #: what each axis drew for the current episode (``{axis: {"level", params...}}``)
        self.perturbation: dict[str, Any] = {}
        self._scene_base: dict[str, Any] | None = None
        self._distractors: list[tuple[Any, Any]] = []  # (block, can) actors per distractor slot, built when first asked
        self.config = config or ManiSkillConfig()
        self.action_spec = ActionSpec(frame="base")
        self.env = self._build()
        try:
            self._setup()
        except Exception:
            self.env.close()
            raise

    def _setup(self) -> None:
        u = self.env.unwrapped
        arm = u.agent.controller.controllers["arm"].config
        self.pos_bound, self.rot_bound = float(arm.pos_upper), float(arm.rot_upper)
        import gymnasium as gym

        registered = gym.spec(self.config.env_id).max_episode_steps or 100
        self.max_steps = self.config.max_steps or int(registered)
        self.cameras: tuple[str, ...] = tuple(u._sensors.keys()) if self.config.render else ()
        for alias, cam in self.config.aliases.items():
            if self.config.render and cam not in self.cameras:
                raise ConfigError(f"alias {alias!r} names camera {cam!r}; {self.config.env_id} has {', '.join(self.cameras)}")
        self.instruction = ""
        self.seed = 0
        self.n_steps = self.control_steps = 0
        self.done, self.reason = False, ""
        self.gripper = 1.0
        self._raw_obs = None  # ManiSkill's observation of the last reset / control step

    # ------------------------------------------------------------------ build
    def _build(self):
        import_sapien()  # sets the Vulkan / asset environment first
        import logging

        import gymnasium as gym
        import mani_skill.envs  # noqa: F401  (registers the tasks)

        logging.getLogger("mani_skill").setLevel(logging.ERROR)  # its "no initial pose set" warnings are noise here

        c = self.config
        if c.env_id not in gym.registry:
            known = ", ".join(TASKS)
            raise ConfigError(f"unknown ManiSkill env {c.env_id!r}; e.g. {known} (ManiSkill 3.0.1 task ids)")
        from embeval.sim.maniskill import bridge

        if bridge.is_bridge_env(c.env_id):  # the WidowX's own controller and observation: bridge.BridgeEnv
            bridge.require_assets(c.env_id)
            raise ConfigError(f"{c.env_id} runs with the WidowX's {bridge.CONTROL_MODE} controller, not {CONTROL_MODE}: "
                              "use `embeval sim render --backend maniskill --task ...` or `embeval act2answer run "
                              "--backend maniskill-bridge` (embeval.sim.maniskill.bridge.BridgeEnv)")
        missing = missing_assets(c.env_id, c.robot)
        if missing:
            raise assets_error(c.env_id, missing)
        backend = auto_render_backend(c.render_backend)
        kw: dict[str, Any] = dict(obs_mode="rgb" if c.render else "state_dict", control_mode=CONTROL_MODE,
                                  sim_backend="cpu", render_backend=backend, reward_mode="none")
        if c.render:
            kw["sensor_configs"] = dict(width=c.width, height=c.height)
        if c.robot:
            kw["robot_uids"] = c.robot
        try:
            return gym.make(c.env_id, **kw)
        except RuntimeError as exc:
            if "device" in str(exc).lower() or "vulkan" in str(exc).lower() or "vk::" in str(exc):
                raise VulkanUnavailableError(f"ManiSkill cannot start Vulkan ({exc}): {diagnose()}") from None
            raise
        except OSError as exc:  # a missing asset: FileNotFoundError, or URLError from an attempted download offline
            raise ConfigError(f"{c.env_id} needs ManiSkill assets that are not here ({exc}); on a networked machine run "
                              f"`python -m mani_skill.utils.download_asset {c.env_id}` with MS_ASSET_DIR set to the same "
                              "folder, then copy it here") from None

    def close(self) -> None:
        self.env.close()

    @property
    def unwrapped(self):
        return self.env.unwrapped

    # ------------------------------------------------------------------ episode
    def reset(self, seed: int = 0, task: str | None = None, instruction: str | None = None) -> Observation:
        """Start the seeded episode (ManiSkill's own seeded initial state). ``task`` must match the env id if given."""
        if task is not None and task != self.config.env_id:
            raise ConfigError(f"this env runs {self.config.env_id}; build another ManiSkillEnv for {task}")
        self._raw_obs = self.env.reset(seed=check_seed(seed))[0]
        self.instruction = instruction if instruction is not None else default_instruction(self.config.env_id)
        if self._perturb_scene(int(seed)):
            self._raw_obs = self.env.unwrapped.get_obs()  # the sensors again: perturbed cameras, lights, materials, arm
        self.seed = int(seed)
        self.n_steps = self.control_steps = 0
        self.done, self.reason = False, ""
        self.gripper = 1.0
        return self.observe()

    def step(self, action: Action | Sequence[float]) -> StepResult:
        """Execute one 7-DoF base-frame action (see the module docstring). Steps after ``done`` still execute
        while control steps remain (an Execution run plays its whole sequence)."""
        a = as_action(action)
        parts, clipped = (split_delta(a.vector, self.pos_bound, self.rot_bound, self.config.max_substeps) if a.moves
                          else ([], False))
        grip = gripper_command(a.gripper, self.gripper)
        if grip is not None:
            self.gripper = grip
        g = 1.0 if not gripper_closed(self.gripper) else -1.0
        old_g = g if grip is None else -g
        cmds = [np.concatenate([to_controller_action(p, self.pos_bound, self.rot_bound), [old_g]]) for p in parts]
        if grip is not None or not cmds:
            cmds.append(np.array([0, 0, 0, 0, 0, 0, g], dtype=np.float64))
        for cmd in cmds:
            if self.control_steps >= self.max_steps:
                break
            self._raw_obs = self.env.unwrapped.step(cmd.astype(np.float32)[None])[0]
            self.control_steps += 1
        self.n_steps += 1
        success = self.success()
        if not self.done:
            if success:
                self.done, self.reason = True, "success"
            elif self.control_steps >= self.max_steps:
                self.done, self.reason = True, "max_steps"
        info = {"steps": self.n_steps, "control_steps": self.control_steps, "evaluate": self.evaluate(), "clipped": clipped}
        return StepResult(self.observe(), success, self.done, False, self.reason, info)

    def evaluate(self) -> dict[str, Any]:
        """The env's own ``evaluate()`` as plain Python values."""
        return {k: (_np(v).tolist() if hasattr(v, "shape") else v) for k, v in self.env.unwrapped.evaluate().items()}

    def success(self) -> bool:
        return bool(_np(self.env.unwrapped.evaluate()["success"]))

    # ------------------------------------------------------------------ scene perturbations
    def scene_params(self) -> dict[str, Any]:
        """The SAPIEN cameras and lights now: ``cameras`` {uid: {"pose": [x y z qw qx qy qz] (world, m), "fovx",
        "fovy" (deg), "mounted"}}, ``lights`` [{"direction" (3,), "color" (3,)}] (directional lights, scene order),
        ``ambient`` (3,)."""
        from embeval.sim.maniskill.runtime import import_sapien

        sapien = import_sapien()
        u = self.unwrapped
        cams = {}
        for uid, sensor in u._sensors.items():
            comp = sensor.camera._render_cameras[0]
            p = comp.get_local_pose() if hasattr(comp, "get_local_pose") else comp.local_pose
            cams[uid] = {"pose": [*map(float, p.p), *map(float, p.q)], "fovx": math.degrees(comp.fovx),
                         "fovy": math.degrees(comp.fovy), "mounted": sensor.config.mount is not None
                         or getattr(sensor, "entity", None) is not None}
        lights = []
        for light in self._lights(sapien):
            R = light.pose.to_transformation_matrix()[:3, :3]
            lights.append({"direction": (R @ np.array([1.0, 0.0, 0.0])).tolist(), "color": list(map(float, light.color))})
        return {"cameras": cams, "lights": lights, "ambient": list(map(float, u.scene.ambient_light))}

    def _lights(self, sapien) -> list:
        comps = []
        for e in self.unwrapped.scene.sub_scenes[0].entities:
            c = e.find_component_by_type(sapien.render.RenderDirectionalLightComponent)
            if c is not None:
                comps.append(c)
        return comps

    def _surface_materials(self, sapien) -> dict[str, list]:
        """Surface -> its textured render materials: ``table`` (the table builder's table top), ``background`` (its
        ground, the only thing behind the table in ManiSkill's tabletop scenes); empty lists without a table scene."""
        out: dict[str, list] = {"table": [], "background": []}
        builder = getattr(self.unwrapped, "table_scene", None)
        for surface, actor in (("table", getattr(builder, "table", None)), ("background", getattr(builder, "ground", None))):
            for entity in getattr(actor, "_objs", ())[:1]:  # sub-scene 0 (embeval runs one environment)
                body = entity.find_component_by_type(sapien.render.RenderBodyComponent)
                for shape in body.render_shapes if body is not None else ():
                    for part in getattr(shape, "parts", ()):
                        if part.material.base_color_texture is not None and part.material not in out[surface]:
                            out[surface].append(part.material)
        return out

    def _distractor_view(self) -> dict[str, Any]:
        """What the distractors' sampler needs (:class:`~embeval.sim.perturb.backends.SceneView`), in the world frame
        (ManiSkill's table top is z = 0): :data:`DISTRACTOR_AREA`, the task's objects (their collision footprint plus
        5 cm; a visual-only goal 4 cm plus 5 cm), the target's straight path to its goal (its footprint plus 6 cm),
        the robot base (25 cm), and the colour names nearest the task objects' render colours."""
        from embeval.sim.perturb.distractors import CLEARANCE, PATH_CLEARANCE
        from embeval.sim.scene import COLORS

        u, clear, found, colors = self.unwrapped, [], {}, set()
        for name in (*_TARGETS, *_GOALS):
            actor = getattr(u, name, None)
            if actor is None or not hasattr(actor, "pose"):
                continue
            xy = _np(actor.pose.p).reshape(-1)[:2].astype(float)
            mesh = actor.get_first_collision_mesh(to_world_frame=True)
            r = 0.5 * float(np.hypot(*np.ptp(mesh.vertices[:, :2], axis=0))) if mesh is not None else 0.04
            found[name] = (xy, r)
            clear.append((*xy, *xy, r + CLEARANCE))
            for shape in _render_shapes(actor):
                rgb = np.asarray(shape.material.base_color[:3])
                colors.add(min(COLORS, key=lambda c: float(np.sum((np.asarray(COLORS[c][:3]) - rgb) ** 2))))
        target = next((n for n in _TARGETS if n in found), None)
        for goal in (g for g in _GOALS if g in found and target is not None):
            clear.append((*found[target][0], *found[goal][0], found[target][1] + PATH_CLEARANCE))
        base_xy = self.base_matrix()[:2, 3]
        clear.append((*base_xy, *base_xy, 0.25))
        return {"table_area": DISTRACTOR_AREA, "keep_clear": tuple(tuple(float(v) for v in c) for c in clear),
                "colors": tuple(sorted(colors))}

    def _distractor_actors(self, n: int, sapien) -> list[tuple[Any, Any]]:
        """``n`` (block, can) actor pairs, built into the live scene once (parked: kinematic, far from the table)."""
        from embeval.sim.perturb.distractors import BLOCK, CAN

        scene = self.unwrapped.scene
        while len(self._distractors) < n:
            i, pair = len(self._distractors), []
            for kind, (add_collision, add_visual, size) in (("block", _BOX), ("can", _CYLINDER)):
                b = scene.create_actor_builder()
                dims = BLOCK if kind == "block" else CAN
                pose = sapien.Pose() if kind == "block" else sapien.Pose(q=[math.sqrt(0.5), 0, math.sqrt(0.5), 0])
                getattr(b, add_collision)(pose, *size(dims))
                getattr(b, add_visual)(pose, *size(dims), material=sapien.render.RenderMaterial(base_color=[1, 1, 1, 1]))
                b.initial_pose = _parked(i, kind, sapien)
                pair.append(b.build(name=f"perturb_distractor{i}_{kind}"))
            self._distractors.append(tuple(pair))
        return self._distractors[:n]

    def _park_distractors(self) -> None:
        from embeval.sim.maniskill.runtime import import_sapien

        sapien = import_sapien()
        for i, pair in enumerate(self._distractors):
            for kind, actor in zip(("block", "can"), pair):
                _rigid(actor, sapien).kinematic = True
                actor.set_pose(_parked(i, kind, sapien))

    def _surface_colours(self, base) -> dict[str, tuple[float, float, float]]:
        """Surface -> its unperturbed mean colour (0..1), read from the textures once, when a texture axis first asks."""
        from embeval.sim.perturb.backends import TEXTURE_SURFACES

        if "surfaces" not in base and any(p.axis in TEXTURE_SURFACES for p in self.perturb or ()):
            base["surfaces"] = {k: _surface_mean_rgb(mats) for k, mats in base["materials"].items() if mats}
        return base.get("surfaces", {})

    def _perturb_scene(self, seed: int) -> bool:
        """Restore the cameras, lights and surface materials the env built, then apply :attr:`perturb` drawn for
        ``seed`` (the arm's joints after ManiSkill's own seeded start); True when something was applied (the
        observation must be rendered again)."""
        from embeval.sim.perturb.backends import (
            CameraRef,
            LightingRef,
            SceneView,
            draw,
            record,
        )
        from embeval.sim.maniskill.runtime import import_sapien

        sapien = import_sapien()
        u = self.unwrapped
        comps = {uid: s.camera._render_cameras[0] for uid, s in u._sensors.items()}
        lights = self._lights(sapien)
        base, restored = self._scene_base, False
        if base is None or any(base["cameras"].get(k, (None,))[0] is not c for k, c in comps.items()):
            self._distractors = []  # a rebuilt scene has none of the old actors
            base = self._scene_base = {  # built (or rebuilt by a reconfigure): these are the unperturbed values
                "cameras": {k: (c, c.local_pose, c.fovy) for k, c in comps.items()},
                "lights": [(li, li.pose, np.array(li.color)) for li in lights], "ambient": np.array(u.scene.ambient_light),
                "materials": {surface: [(m, m.base_color_texture, list(m.base_color)) for m in mats]
                              for surface, mats in self._surface_materials(sapien).items()}}
        elif self.perturbation:
            for c, pose, fovy in base["cameras"].values():
                c.local_pose = pose
                c.set_fovy(fovy, compute_x=True)
            for li, pose, color in base["lights"]:
                li.pose, li.color = pose, color.tolist()
            u.scene.ambient_light = base["ambient"].tolist()
            for mats in base["materials"].values():
                for m, tex, color in mats:
                    m.base_color_texture, m.base_color = tex, color
            self._park_distractors()
            restored = True
        self.perturbation = {}
        if not self.perturb:
            return restored
        world = tuple(CameraRef(uid) for uid, s in u._sensors.items()
                      if getattr(s, "entity", None) is None and s.config.mount is None)
        key = self.scene_params()["lights"][0]["direction"] if lights else [0.0, 0.0, -1.0]
        view = SceneView(self.config.env_id, world, LightingRef(tuple(key)),
                         arm_joints=len(u.agent.controller.controllers["arm"].joints), instruction=self.instruction,
                         surfaces=self._surface_colours(base),
                         **(self._distractor_view() if any(p.axis == "distractors" for p in self.perturb) else {}))
        draws = draw(self.perturb, seed, "maniskill", view)
        applied = {}
        for d in draws:
            got = _MS_APPLY[d["axis"]](self, comps, lights, {"level": d["level"], **d["params"]}, sapien)
            if got:
                applied[d["axis"]] = got
        self.perturbation = record(draws, applied)
        return True

    # ------------------------------------------------------------------ state
    def base_matrix(self) -> np.ndarray:
        return raw_pose_matrix(self.unwrapped.agent.robot.pose.raw_pose)

    def to_base(self, raw_pose: Sequence[float]) -> np.ndarray:
        """A world pose ``[x,y,z,qw,qx,qy,qz]`` -> 4x4 in frame base."""
        return np.linalg.inv(self.base_matrix()) @ raw_pose_matrix(raw_pose)

    def tcp_matrix(self) -> np.ndarray:
        """The TCP pose in frame base (4x4)."""
        return self.to_base(_np(self.unwrapped.agent.tcp.pose.raw_pose))

    def tcp_pose(self) -> np.ndarray:
        """``[x, y, z, rx, ry, rz]`` of the TCP in frame base (m, rotation vector), like the UR controller's."""
        T = self.tcp_matrix()
        return np.concatenate([T[:3, 3], matrix_to_rotvec(T[:3, :3])])

    def final_tcp_pose(self) -> np.ndarray:
        return self.tcp_pose()

    def gripper_width(self) -> float:
        q = _np(self.unwrapped.agent.robot.get_qpos())
        return float(q[-1] + q[-2]) if q.shape[0] >= 9 else float("nan")

    def observe(self) -> Observation:
        u = self.unwrapped
        images: dict[str, np.ndarray] = {}
        if self.config.render:
            raw = getattr(self, "_raw_obs", None)
            if raw is None:  # no step or reset yet: render now
                raw = u.get_obs()
            for c in self.cameras:  # the frames the env rendered for its own observation of this step
                images[c] = np.ascontiguousarray(_np(raw["sensor_data"][c]["rgb"])[..., :3]).astype(np.uint8)
            for alias, cam in self.config.aliases.items():
                images[alias] = images[cam]
        T = self.tcp_matrix()
        q = _np(u.agent.robot.get_qpos()).astype(np.float64)
        state = {
            "joint_positions": q[:7].copy(),
            "tcp_pose": np.concatenate([T[:3, 3], matrix_to_quat(T[:3, :3], canonical=False)]),
            "gripper": np.array([self.gripper]),
            "gripper_width": np.array([self.gripper_width()]),
        }
        return Observation(images=images, instruction=self.instruction, state=state,
                           timestamp=self.control_steps * float(u.control_timestep))

    def expert(self, **kw: Any):
        """The scripted privileged expert of this task (:mod:`embeval.sim.maniskill.expert`)."""
        from embeval.sim.maniskill.expert import make_expert

        return make_expert(self, **kw)

    def object_poses(self) -> dict[str, dict[str, list[float]]]:
        """Task objects' poses in frame base (position m, orientation quaternion xyzw)."""
        out = {}
        for name in ("cube", "cubeA", "cubeB", "obj", "peg", "box", "goal_region", "goal_site", "bin"):
            actor = getattr(self.unwrapped, name, None)
            if actor is None or not hasattr(actor, "pose"):
                continue
            T = self.to_base(_np(actor.pose.raw_pose))
            out[name] = {"position": T[:3, 3].tolist(), "orientation_xyzw": matrix_to_quat(T[:3, :3], canonical=False).tolist()}
        return out


def _ms_camera_pose(env, comps, lights, p, sapien) -> None:
    """Move each world camera by ``translation_cm`` along ``direction`` and turn it by ``rotation_deg`` about
    world ``axis`` through its own position."""
    R_d = Turn.rotvec(math.radians(p["rotation_deg"]) * np.asarray(p["axis"]))
    for uid in p["cameras"]:
        c = comps[uid]
        pose = c.local_pose
        q = compose(R_d, Turn.quat(np.roll(pose.q, -1)), to="quat", canonical=False)  # SAPIEN wxyz <-> xyzw
        c.local_pose = sapien.Pose(np.asarray(pose.p) + np.asarray(p["direction"]) * p["translation_cm"] / 100.0,
                                   np.roll(q, 1))


def _ms_fov(env, comps, lights, p, sapien) -> None:
    """Change each world camera's horizontal field of view by ``fov_change_deg`` (square pixels kept)."""
    for uid in p["cameras"]:
        c = comps[uid]
        fovx = c.fovx + math.radians(p["fov_change_deg"])
        c.set_fovy(2 * math.atan(math.tan(fovx / 2) * c.height / c.width), compute_x=True)


def _ms_light_intensity(env, comps, lights, p, sapien) -> None:
    """Scale every directional light's colour and the ambient light by ``1 + intensity_change_pct / 100``."""
    k = 1.0 + p["intensity_change_pct"] / 100.0
    for li in lights:
        li.color = (np.asarray(li.color) * k).tolist()
    env.unwrapped.scene.ambient_light = (np.asarray(env.unwrapped.scene.ambient_light) * k).tolist()


def _ms_light_color(env, comps, lights, p, sapien) -> None:
    """Multiply every light's colour and the ambient light by ``rgb_gain``."""
    g = np.asarray(p["rgb_gain"])
    for li in lights:
        li.color = (np.asarray(li.color) * g).tolist()
    env.unwrapped.scene.ambient_light = (np.asarray(env.unwrapped.scene.ambient_light) * g).tolist()


def _ms_light_direction(env, comps, lights, p, sapien) -> None:
    """Turn every directional light by ``direction_change_deg`` about world ``axis`` (the same rotation for all)."""
    R_d = Turn.rotvec(math.radians(p["direction_change_deg"]) * np.asarray(p["axis"]))
    for li in lights:
        pose = li.pose
        li.pose = sapien.Pose(pose.p, np.roll(compose(R_d, Turn.quat(np.roll(pose.q, -1)), to="quat", canonical=False), 1))


def _ms_initial_state(env, comps, lights, p, sapien) -> dict:
    """Offset the arm joints (after ManiSkill's own seeded start) by the first drawn sign pattern that stays inside
    the joint limits with the TCP no lower than ``min_tcp_z`` above the table (z = 0 in ManiSkill's table scenes;
    or than its unperturbed height, when that is lower); zero joint velocities. Returns what was applied."""
    from embeval.sim.perturb.initial_state import choose

    robot, tcp = env.unwrapped.agent.robot, env.unwrapped.agent.tcp
    q0 = _np(robot.get_qpos()).astype(np.float64).reshape(-1)
    lim = _np(robot.get_qlimits()).astype(np.float64).reshape(-1, 2)
    n = len(p["magnitudes_deg"])
    floor = min(float(_np(tcp.pose.raw_pose).reshape(-1)[2]), p["min_tcp_z"])

    def with_offsets(off) -> np.ndarray:
        q = q0.copy()
        q[:n] += np.radians(off)
        return q

    def fits(off) -> bool:
        q = with_offsets(off)
        if np.any(q[:n] < lim[:n, 0]) or np.any(q[:n] > lim[:n, 1]):
            return False
        robot.set_qpos(q.astype(np.float32))
        return float(_np(tcp.pose.raw_pose).reshape(-1)[2]) >= floor

    try:
        chosen = choose(p, fits, env.config.env_id)
    except ConfigError:
        robot.set_qpos(q0.astype(np.float32))
        raise
    env.unwrapped.agent.reset(with_offsets(chosen["offsets_deg"]).astype(np.float32))  # qpos, zero qvel and forces
    return chosen


def _surface_mean_rgb(materials) -> tuple[float, float, float]:
    """The mean colour (0..1) of ``(material, texture, base colour)``: base colour times the texture's mean
    (pixel-weighted over the materials)."""
    total, n = np.zeros(3), 0
    for _m, tex, color in materials:
        img = np.asarray(tex.download())[..., :3].reshape(-1, 3).astype(np.float64)
        total += img.sum(axis=0) / 255.0 * np.asarray(color[:3])
        n += len(img)
    return tuple(round(float(v), 4) for v in total / n)


def _ms_texture(surface: str):
    def apply(env, comps, lights, p, sapien) -> None:
        """Replace the surface's textures by the drawn pattern at the drawn RMS contrast around its mean colour,
        tiled at the texture's own size (the pattern keeps its scale), base colour white."""
        from embeval.sim.perturb._texture import pattern_image

        img = pattern_image(p["mean_rgb"], p)
        for m, tex, _color in env._scene_base["materials"][surface]:
            h, w = tex.height, tex.width
            tiled = np.tile(img, (-(-h // img.shape[0]), -(-w // img.shape[1]), 1))[:h, :w]
            rgba = np.concatenate([tiled, np.full((h, w, 1), 255, np.uint8)], axis=2)
            m.base_color_texture = sapien.render.RenderTexture2D(np.ascontiguousarray(rgba), "R8G8B8A8Unorm", srgb=tex.is_srgb)
            m.base_color = [1.0, 1.0, 1.0, 1.0]
    apply.__doc__ = apply.__doc__.replace("the surface", f"the {surface}")
    return apply


#: task actors (ManiSkill attribute names) a distractor keeps clear of: targets, then goals (the path joins them)
_TARGETS = ("cube", "cubeA", "obj", "peg")
_GOALS = ("goal_site", "goal_region", "cubeB", "bin", "box")
#: where distractors go (m, world = ManiSkill's table frame): the table in front of the robot, in the base camera's view
DISTRACTOR_AREA = ((-0.2, 0.15), (-0.25, 0.25))
#: builder methods and their size arguments: a block (box half sizes), a can (cylinder radius, half length)
_BOX = ("add_box_collision", "add_box_visual", lambda d: ([d[0] / 2, d[1] / 2, d[2] / 2],))
_CYLINDER = ("add_cylinder_collision", "add_cylinder_visual", lambda d: (d[0], d[1] / 2))


def _parked(i: int, kind: str, sapien):
    """Where an unused distractor waits: kinematic, 10 m from the table, out of every camera's view."""
    return sapien.Pose(p=[10.0 + 0.3 * i, 10.0 + (0.3 if kind == "can" else 0.0), 1.0])


def _rigid(actor, sapien):
    return actor._objs[0].find_component_by_type(sapien.physx.PhysxRigidDynamicComponent)


def _render_shapes(actor) -> list:
    from embeval.sim.maniskill.runtime import import_sapien

    body = actor._objs[0].find_component_by_type(import_sapien().render.RenderBodyComponent)
    return list(body.render_shapes) if body is not None else []


def _ms_distractors(env, comps, lights, p, sapien) -> None:
    """Place the drawn blocks and cans (dynamic, on the table top, drawn colour and yaw); the rest stay parked."""
    from embeval.sim.perturb.distractors import BLOCK, CAN
    from embeval.sim.scene import COLORS

    env._park_distractors()
    for (block, can), d in zip(env._distractor_actors(len(p["objects"]), sapien), p["objects"]):
        actor, half_h = (block, BLOCK[2] / 2) if d["kind"] == "block" else (can, CAN[1] / 2)
        for shape in _render_shapes(actor):
            shape.material.base_color = list(COLORS[d["color"]])
        _rigid(actor, sapien).kinematic = False
        actor.set_pose(sapien.Pose(p=[*d["xy"], half_h + 1e-3], q=[math.cos(d["yaw"] / 2), 0, 0, math.sin(d["yaw"] / 2)]))
        actor.set_linear_velocity([0.0, 0.0, 0.0])
        actor.set_angular_velocity([0.0, 0.0, 0.0])


def _ms_instruction(env, comps, lights, p, sapien) -> None:
    """The observation's instruction (embeval's for the task, or the caller's) reworded by the paraphrase bank."""
    env.instruction = p["instruction"]


#: axis name -> ``apply(env, cameras, lights, params, sapien)`` on the live SAPIEN scene (returns what it chose, or None)
_MS_APPLY = {"camera_pose": _ms_camera_pose, "fov": _ms_fov, "light_intensity": _ms_light_intensity,
             "light_color": _ms_light_color, "light_direction": _ms_light_direction,
             "initial_state": _ms_initial_state, "instruction": _ms_instruction, "distractors": _ms_distractors,
             "table_texture": _ms_texture("table"), "background_texture": _ms_texture("background")}


#: language instructions for the covered tasks (ManiSkill tasks carry none)
INSTRUCTIONS: Mapping[str, str] = {
    "PickCube-v1": "pick up the red cube and move it to the goal",
    "PushCube-v1": "push the cube to the goal region",
    "StackCube-v1": "stack the red cube on top of the green cube",
    "PullCube-v1": "pull the cube to the goal region",
    "PlaceSphere-v1": "place the sphere into the bin",
    "PegInsertionSide-v1": "insert the peg into the hole",
}


def default_instruction(env_id: str) -> str:
    return INSTRUCTIONS.get(env_id, env_id.rsplit("-", 1)[0])
