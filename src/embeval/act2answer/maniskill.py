"""Act2Answer in ManiSkill3: the two image cards and the cube on ManiSkill's table with the Panda,
with the same :class:`~embeval.act2answer.scene.EpisodeSpec` (card centres, zone radius ``eps``,
termination rule, swap of the two images) as the UR5 cell.

Geometry: the spec's coordinates are in frame ``base`` (the robot's root, +x forward, +y left), so a
card at base ``(0.55, 0.15)`` lies at ManiSkill world ``(-0.065, 0.15)`` (the Panda stands at world
x = -0.615). A card is a fixed 3 mm slab with the image on its top face: image up = +x, image right =
-y (as in the UR5 cell). The env ``EmbevalAct2Answer-v1`` (registered by :func:`register_env_once`)
reads its cards from ``env.unwrapped.configure(...)`` and rebuilds them at ``reset(options={"reconfigure":
True})``; :func:`run_episode` does that and returns the same
:class:`~embeval.act2answer.episode.Act2AnswerRecord` as the UR5 cell's episode runner.
"""
from __future__ import annotations

import numpy as np

ENV_ID = "EmbevalAct2Answer-v1"
BASE_X = -0.615  # the Panda's root in ManiSkill's world (m)
_registered = False


def _card_quad(size: float, z: float, texture: str):
    import sapien

    h = size / 2
    v = np.array([[h, h, z], [h, -h, z], [-h, -h, z], [-h, h, z]], dtype=np.float32)
    # image up = +x, image right = -y: u grows with -y, v (image rows, top = 0) grows with -x
    uv = np.stack([(h - v[:, 1]) / size, (h - v[:, 0]) / size], axis=1).astype(np.float32)
    mat = sapien.render.RenderMaterial()
    mat.base_color_texture = sapien.render.RenderTexture2D(filename=str(texture))
    return sapien.render.RenderShapeTriangleMesh(vertices=v, triangles=np.array([[0, 2, 1], [0, 3, 2]], dtype=np.uint32),
                                                 normals=np.tile([[0, 0, 1.0]], (4, 1)).astype(np.float32),
                                                 uvs=uv, material=mat)


def register_env_once() -> str:
    """Register ``EmbevalAct2Answer-v1`` with ManiSkill (once per process)."""
    global _registered
    if _registered:
        return ENV_ID
    from embeval.sim.maniskill.runtime import import_sapien

    sapien = import_sapien()
    import torch
    from mani_skill.envs.sapien_env import BaseEnv
    from mani_skill.sensors.camera import CameraConfig
    from mani_skill.utils import sapien_utils
    from mani_skill.utils.building import actors
    from mani_skill.utils.registration import register_env
    from mani_skill.utils.scene_builder.table import TableSceneBuilder
    from mani_skill.utils.structs.pose import Pose

    from embeval.act2answer.scene import EpisodeSpec
    from embeval.act2answer.protocol import answer

    class Act2AnswerEnv(BaseEnv):
        SUPPORTED_ROBOTS = ["panda"]

        def __init__(self, *args, robot_uids="panda", **kwargs):
            self.spec = EpisodeSpec()
            self.textures: dict[str, str] = {}  # card name -> image file
            self.correct_side = "left"
            super().__init__(*args, robot_uids=robot_uids, **kwargs)

        def configure(self, spec: EpisodeSpec, textures: dict[str, str], correct_side: str) -> None:
            self.spec, self.textures, self.correct_side = spec, dict(textures), correct_side

        @property
        def _default_sensor_configs(self):
            pose = sapien_utils.look_at(eye=[0.3, 0, 0.6], target=[-0.1, 0, 0.1])  # PickCube's base_camera
            return [CameraConfig("base_camera", pose, 128, 128, np.pi / 2, 0.01, 100)]

        @property
        def _default_human_render_camera_configs(self):
            pose = sapien_utils.look_at(eye=[0.4, 0.0, 0.7], target=[-0.1, 0.0, 0.0])
            return CameraConfig("render_camera", pose, 512, 512, 1, 0.01, 100)

        def _load_agent(self, options):
            super()._load_agent(options, sapien.Pose(p=[BASE_X, 0, 0]))

        def _load_scene(self, options):
            self.table_scene = TableSceneBuilder(self, robot_init_qpos_noise=0.0)
            self.table_scene.build()
            s = self.spec
            self.cards = {}
            for name, xy in (("card_left", s.left_card_xy), ("card_right", s.right_card_xy),
                             ("card_context", s.context_card_xy)):
                if name not in self.textures:
                    continue
                b = self.scene.create_actor_builder()
                half = [s.card_size / 2, s.card_size / 2, 0.0015]
                b.add_box_collision(half_size=half)
                b.add_box_visual(half_size=half, material=sapien.render.RenderMaterial(base_color=[0.9, 0.9, 0.9, 1]))
                b.initial_pose = sapien.Pose(p=[xy[0] + BASE_X, xy[1], 0.0015])
                card = b.build_kinematic(name=name)
                if self.scene.can_render():
                    for obj in card._objs:
                        comp = sapien.render.RenderBodyComponent()
                        comp.attach(_card_quad(s.card_size, 0.0016, self.textures[name]))
                        obj.add_component(comp)
                self.cards[name] = card
            self.cube = actors.build_cube(self.scene, half_size=s.cube_size / 2, color=[1, 0, 0, 1], name="cube",
                                          initial_pose=sapien.Pose(p=[s.cube_xy[0] + BASE_X, s.cube_xy[1], s.cube_size / 2]))

        def _initialize_episode(self, env_idx, options):
            with torch.device(self.device):
                self.table_scene.initialize(env_idx)
                s = self.spec
                p = torch.tensor([[s.cube_xy[0] + BASE_X, s.cube_xy[1], s.cube_size / 2]]).repeat(len(env_idx), 1)
                self.cube.set_pose(Pose.create_from_pq(p))

        def cube_base_xyz(self) -> np.ndarray:
            return self.cube.pose.p[0].cpu().numpy().astype(np.float64) - [BASE_X, 0, 0]

        def evaluate(self):
            c = self.cube_base_xyz()
            z = answer(c, self.spec, self.correct_side)
            return {"success": torch.tensor([z.zone == "correct"]), "zone": z.zone}

        def _get_obs_extra(self, info):
            return dict(tcp_pose=self.agent.tcp.pose.raw_pose)

    register_env(ENV_ID, max_episode_steps=10 ** 6)(Act2AnswerEnv)
    _registered = True
    return ENV_ID


class CardExpert:
    """Privileged scripted answer: pick the cube, put it down on the correct card (``env.unwrapped.correct_side``)."""

    id = "maniskill-card-expert"

    def __init__(self, env):
        self.env = env
        self.inner = None

    @property
    def action_spec(self):
        from embeval.action import ActionSpec

        return ActionSpec(frame="base")

    def reset(self, instruction: str = "") -> None:
        from embeval.sim.maniskill.expert import Phase, PickCubeExpert, _pose

        env = self.env

        class _Plan(PickCubeExpert):
            def plan(self):
                u = env.unwrapped
                ph = self.grasp_phases("cube")  # sets the held orientation; a grasped start skips its phases
                ph = ph if u.spec.start == "table" else []
                R = self._held_R
                cx, cy = u.spec.card_xy(u.correct_side)
                over = lambda dz: (lambda: _pose(R, [cx, cy, u.spec.cube_size / 2 + 0.003 + dz]))  # noqa: E731
                return ph + [Phase("carry", over(0.06), 0.0, tol=0.02, rot_tol=0.1),
                             Phase("lower", over(0.002), 0.0, tol=0.005),
                             Phase("release", self._hold(R), 1.0, tol=1.0, rot_tol=9, min_steps=2),
                             Phase("retreat", over(0.08), 1.0, max_steps=10 ** 6)]

        self.inner = _Plan(env)

    def act(self, obs):
        return self.inner.act(obs)


def grasp_in_hand(wrapper, actor, step, close_action, grasping, steps: int = 12):
    """The grasped start on a ManiSkill env: put ``actor`` (the carried object) at the TCP of ``wrapper``
    (``base_matrix()``, ``tcp_matrix()``: frame base 4x4) at rest and step ``close_action`` (``step(cmd)``: one
    control step, returning the raw observation) until ``grasping()`` holds for two steps (at most ``steps``
    control steps, the object put back at the TCP before each while the fingers close). Returns the last raw
    observation; a ConfigError when the fingers never hold it."""
    import torch
    from mani_skill.utils.structs.pose import Pose

    from embeval.errors import ConfigError

    raw, held = None, 0
    for _ in range(int(steps)):
        if not held:
            T = wrapper.base_matrix() @ wrapper.tcp_matrix()
            actor.set_pose(Pose.create_from_pq(p=torch.tensor(T[:3, 3][None], dtype=torch.float32)))
            actor.set_linear_velocity(torch.zeros((1, 3)))
            actor.set_angular_velocity(torch.zeros((1, 3)))
        raw = step(np.asarray(close_action, dtype=np.float32)[None])
        held = held + 1 if grasping() else 0
        if held >= 2:
            return raw
    raise ConfigError("episode spec start 'grasped': the gripper did not close on the carried object at the TCP; "
                      "give start: table")


def make_env(width: int = 128, height: int = 128, aliases: dict[str, str] | None = None):
    """A :class:`~embeval.sim.maniskill.env.ManiSkillEnv` on ``EmbevalAct2Answer-v1``."""
    from embeval.sim.maniskill.env import ManiSkillConfig, ManiSkillEnv

    register_env_once()
    return ManiSkillEnv(ManiSkillConfig(ENV_ID, width=width, height=height, aliases=dict(aliases or {})))


def run_episode(env, policy, item, layout: str, spec=None, seed: int = 0, keep_actions: bool = True):
    """One Act2Answer episode of ``item`` in ``layout`` on a :func:`make_env` env; same rules and record as
    :func:`embeval.act2answer.episode.run_episode` (zone after the spec's settle time)."""
    from embeval.act2answer.episode import closed_loop, episode_result
    from embeval.act2answer.items import card_textures
    from embeval.act2answer.protocol import IntentTracker
    from embeval.sim.maniskill.runtime import episode_seed
    from embeval.act2answer.scene import EpisodeSpec, instruction_for

    spec = spec or EpisodeSpec()
    textures = card_textures(item, layout)  # 8-bit RGB PNGs SAPIEN loads (WebP, 16-bit ... converted)
    u = env.unwrapped
    u.configure(spec, textures, item.correct_side_in(layout))
    ms_seed = episode_seed(seed)  # ManiSkill takes 32-bit seeds; the record keeps the derived ``seed``
    env.env.reset(seed=ms_seed, options={"reconfigure": True})
    instruction = instruction_for(item, spec)
    obs = env.reset(seed=ms_seed, instruction=instruction)
    table_z = float(u.cube_base_xyz()[2])
    holding = lambda: bool(u.agent.is_grasping(u.cube)[0])  # noqa: E731
    if spec.start == "grasped":
        env._raw_obs = grasp_in_hand(env, u.cube, lambda cmd: u.step(cmd)[0], np.r_[np.zeros(6), -1.0], holding)
        env.gripper = 0.0
        obs = env.observe()
    policy.reset(instruction)
    intent = IntentTracker(spec, item.correct_side_in(layout), float(u.control_freq))
    reason, n, actions = closed_loop(env, policy, obs, spec, lambda: u.cube_base_xyz()[2], keep_actions, intent,
                                     lambda: env.tcp_pose()[:3], holding, table_z)
    for _ in range(int(round(spec.settle_s / float(u.control_timestep)))):  # let the cube settle, arm holding
        u.step(np.r_[np.zeros(6), 1.0 if env.gripper >= 0.5 else -1.0].astype(np.float32)[None])
    xyz = u.cube_base_xyz()
    return episode_result(item.id, item.category, layout, item.correct_side_in(layout), spec, xyz, end_reason=reason,
                          stopped=False, steps=n, subject=str(getattr(policy, "id", "")), instruction=instruction,
                          seed=int(seed), actions=actions, intent=intent.metrics())


def _backend_env(obs_size: tuple[int, int], aliases: dict[str, str] | None = None):
    return make_env(int(obs_size[0]), int(obs_size[1]), aliases)


def _backend():
    from embeval.act2answer.episode import Backend

    return Backend("maniskill", _backend_env, run_episode, lambda env, spec: CardExpert(env),
                   "ManiSkill3 (SAPIEN, CPU): the cards and the cube on ManiSkill's table with the Panda",
                   cameras=("base_camera",), aliases=True)


#: the ``maniskill`` entry of :data:`embeval.act2answer.episode.BACKENDS`
BACKEND = _backend()
