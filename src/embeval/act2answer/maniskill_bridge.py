"""Act2Answer items in SimplerEnv-style Bridge scenes (ManiSkill's BridgeData v2 digital twins, WidowX 250 S).

An item becomes a :class:`BridgeScene`: the Bridge env it is staged in (e.g. ``PutCarrotOnPlateInScene-v1``),
the object the robot carries (the env's source object: the carrot, the spoon, the green cube), the two
candidate images as cards on the table (the layout's left / right image; the swap exchanges them), and
the item's instruction (its own, or the template with "the cube" replaced by the carried object). Its
:attr:`BridgeScene.spec` is an ordinary :class:`~embeval.act2answer.scene.EpisodeSpec` in the WidowX's
base frame (its root: +x forward, +y left, metres), so the zones, the termination rule and the episode
record are the UR5 cell's (:func:`~embeval.act2answer.episode.episode_result`).

Geometry (flat-table scenes). After reset the WidowX root stands at world ``(0.147, 0.028, 0.870)``
turned 180 deg about z (:data:`~embeval.sim.maniskill.bridge.ROBOT_XYZ`), so base ``(x, y)`` is world
``(0.147 - x, 0.028 - y)``. ManiSkill's Bridge envs put their objects' centres within world
``x in [-0.26, -0.06], y in [-0.10, 0.10]`` (``StackGreenCube...``'s outer grid; the others use
+-0.075 about ``(-0.16, 0)``): the WidowX picks and places there, so every card lies inside
:data:`TABLE_REGION` (that area grown by half a 3 cm cube). Defaults (:func:`bridge_episode_spec`):
carried object from base ``(0.23, 0.03)``, 7 cm cards at ``(0.36, 0.105)`` left and ``(0.36, -0.045)``
right, question card ``(0.385, 0.03)``, zone radius ``eps`` 0.05 m, 60 steps (the envs' own limit). The
env's target object (plate, cloth, yellow cube) would be a third answer: it is made kinematic and parked
out of view.

Backends ``maniskill-bridge`` (carrot), ``maniskill-bridge-spoon`` and ``maniskill-bridge-cube`` of
:data:`~embeval.act2answer.episode.BACKENDS` run the episodes through
:class:`~embeval.sim.maniskill.bridge.BridgeEnv` (the WidowX's own controller, the ``3rd_view_camera``
with the real-image overlay, as SimplerEnv evaluates VLAs). Building one needs ManiSkill's downloaded
assets (``bridge_v2_real2sim`` and ``widowx250s``); without them a one-line error names the command.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from embeval.act2answer.scene import EpisodeSpec
from embeval.errors import ConfigError
from embeval.sim.maniskill.bridge import BRIDGE_ENVS, ROBOT_XYZ, require_assets
from embeval.sim.maniskill.runtime import episode_seed

#: the table top's height in the flat-table world (m): the objects' configured z minus their half heights
TABLE_Z = 0.87
#: cards: kinematic slabs from 1 mm below :data:`TABLE_Z` to 5 mm above it (the table height is known to ~3 mm)
CARD_THICKNESS = 0.006
#: world ``((x_min, x_max), (y_min, y_max))`` where every card and the start must lie (see the module doc)
TABLE_REGION = ((-0.275, -0.045), (-0.115, 0.115))
#: the WidowX 250 S's reach (Trossen Robotics' specification), m from the root's vertical axis
WIDOWX_REACH = 0.65
#: where the env's target object is parked (world, m): behind the camera, above nothing
PARK_XYZ = (2.0, 2.0, TABLE_Z + 0.05)


#: board-rule margin of the Bridge cards (m): the reference's 0.08 would make the grown extents of these 7 cm
#: cards 15 cm apart overlap (the reference's boards stand 31 cm apart)
BRIDGE_MARGIN = 0.035


def bridge_episode_spec(**overrides) -> EpisodeSpec:
    """The Act2Answer geometry on the Bridge flat table, in the WidowX base frame (see the module doc)."""
    base = EpisodeSpec(left_card_xy=(0.36, 0.105), right_card_xy=(0.36, -0.045), card_size=0.07,
                       context_card_xy=(0.385, 0.03), cube_xy=(0.23, 0.03), cube_size=0.03, eps=0.05, board_margin=BRIDGE_MARGIN)
    return replace(base, **overrides) if overrides else base


def base_to_world(xy) -> tuple[float, float]:
    """WidowX base-frame ``(x, y)`` -> Bridge world ``(x, y)`` (m), flat-table scenes."""
    return (ROBOT_XYZ[0] - float(xy[0]), ROBOT_XYZ[1] - float(xy[1]))


def world_to_base(xy) -> tuple[float, float]:
    """Bridge world ``(x, y)`` -> WidowX base-frame ``(x, y)`` (m); the inverse of :func:`base_to_world`."""
    return (ROBOT_XYZ[0] - float(xy[0]), ROBOT_XYZ[1] - float(xy[1]))


def card_corners(xy, size: float) -> np.ndarray:
    """The 4 corners (base frame, m) of a square card of edge ``size`` centred at ``xy``."""
    h = size / 2
    return np.asarray(xy, dtype=np.float64) + np.array([[h, h], [h, -h], [-h, -h], [-h, h]])


def check_on_table(spec: EpisodeSpec, context: bool = True, region=TABLE_REGION) -> EpisodeSpec:
    """``spec`` if its cards (and the question card when ``context``) and start lie in :data:`TABLE_REGION`
    and within :data:`WIDOWX_REACH`; a ConfigError naming the first that does not otherwise."""
    (x0, x1), (y0, y1) = region
    named = [("left_card_xy", spec.left_card_xy, spec.card_size), ("right_card_xy", spec.right_card_xy, spec.card_size),
             ("cube_xy", spec.cube_xy, 0.0)] + ([("context_card_xy", spec.context_card_xy, spec.card_size)] if context else [])
    for name, xy, size in named:
        for c in card_corners(xy, size):
            wx, wy = base_to_world(c)
            if not (x0 - 1e-9 <= wx <= x1 + 1e-9 and y0 - 1e-9 <= wy <= y1 + 1e-9) or np.hypot(*c) > WIDOWX_REACH:
                ox, oy = world_to_base((x1, y1))
                px, py = world_to_base((x0, y0))
                raise ConfigError(f"episode spec {name} {tuple(xy)} (size {size} m) leaves the Bridge table area the "
                                  f"WidowX works in (base x {ox:.3f}..{px:.3f}, y {oy:.3f}..{py:.3f} m); give positions "
                                  "inside it or leave the spec at the Bridge default")
    return spec


#: the fields :func:`bridge_episode_spec` sets (geometry and step cap)
BRIDGE_FIELDS = ("left_card_xy", "right_card_xy", "card_size", "context_card_xy", "cube_xy", "cube_size", "eps",
                 "board_margin")


#: the reference's ``Act2AnswerV4-v1`` boards, world ``(x, y)`` (m): left, right (its ``board_pose_tensor`` calls)
V4_BOARDS_WORLD = ((-0.25, -0.155), (-0.25, 0.155))
#: square cards standing for the V4 boards (m): the largest whose extents grown by 0.08 m stay apart 31 cm apart
#: (the reference's boards are meshes whose size its model_db.json gives)
V4_CARD_SIZE = 0.14
#: world region the V4 layout's cards and start lie in (its boards grown by half a card)
V4_REGION = ((-0.25 - V4_CARD_SIZE / 2, -0.045), (-0.155 - V4_CARD_SIZE / 2, 0.155 + V4_CARD_SIZE / 2))


def reference_v4_spec(**overrides) -> EpisodeSpec:
    """The reference's ``Act2AnswerV4-v1`` layout in the WidowX base frame: boards at world (-0.25, -+0.155)
    (left = world -y = base +y, as embeval's cards), a 3 cm cube, margin 0.08 m, 80 steps, the grasped start."""
    (lx, ly), (rx, ry) = V4_BOARDS_WORLD
    base = EpisodeSpec(left_card_xy=world_to_base((lx, ly)), right_card_xy=world_to_base((rx, ry)), card_size=V4_CARD_SIZE,
                       context_card_xy=world_to_base((-0.10, 0.0)), cube_xy=world_to_base((-0.16, 0.0)), cube_size=0.03,
                       eps=0.08, board_margin=0.08)
    return replace(base, **overrides) if overrides else base


#: a Bridge backend's geometry: its default spec and the world region its cards must lie in
GEOMETRIES = {"bridge": (bridge_episode_spec, TABLE_REGION), "v4": (reference_v4_spec, V4_REGION)}


def bridge_spec(spec: EpisodeSpec | None, geometry: str = "bridge") -> EpisodeSpec:
    """The spec a Bridge episode runs: ``spec`` with every :data:`BRIDGE_FIELDS` field still at the UR5
    cell's default (what the CLI and run specs pass without ``--episode``) taken from ``geometry``'s default
    (:data:`GEOMETRIES`: :func:`bridge_episode_spec` or :func:`reference_v4_spec`; None: that spec), checked by
    :func:`check_on_table`."""
    default, region = GEOMETRIES[geometry]
    bridge = default()
    if spec is None:
        return bridge
    ur5 = EpisodeSpec()
    geo = {f: getattr(bridge, f) for f in BRIDGE_FIELDS if getattr(spec, f) == getattr(ur5, f)}
    base = {k: v for k, v in spec.to_dict().items() if k not in geo}
    return check_on_table(EpisodeSpec.from_dict({**base, **geo}), region=region)


@dataclass(frozen=True)
class BridgeScene:
    """An Act2Answer item in one layout staged in a Bridge env (positions in the WidowX base frame)."""

    item: str
    category: str
    layout: str
    env_id: str
    carried: str
    parked: str
    instruction: str
    correct_side: str
    spec: EpisodeSpec
    textures: dict[str, str] = field(default_factory=dict)  # card name -> image file

    def card_xy(self, name: str) -> tuple[float, float]:
        return {"card_left": self.spec.left_card_xy, "card_right": self.spec.right_card_xy,
                "card_context": self.spec.context_card_xy}[name]

    def card_world_xyz(self, name: str) -> tuple[float, float, float]:
        """World centre of a card's top face (m)."""
        return (*base_to_world(self.card_xy(name)), TABLE_Z - 0.001 + CARD_THICKNESS)


def bridge_scene(item, layout: str, env_id: str = "PutCarrotOnPlateInScene-v1", spec: EpisodeSpec | None = None,
                 geometry: str = "bridge") -> BridgeScene:
    """Stage ``item`` (a :class:`~embeval.act2answer.items.BinaryItem`) in ``layout`` in the Bridge env ``env_id``
    with ``geometry``'s card layout (:data:`GEOMETRIES`)."""
    from embeval.act2answer.scene import instruction_for

    if env_id not in BRIDGE_ENVS:
        raise ConfigError(f"unknown Bridge scene {env_id!r}; choose one of {', '.join(BRIDGE_ENVS)}")
    if layout not in ("original", "swapped"):
        raise ConfigError(f"layout must be 'original' or 'swapped', got {layout!r}")
    spec = bridge_spec(spec, geometry)
    carried, parked, noun = BRIDGE_ENVS[env_id]
    left, right = item.images_in(layout)
    textures = {"card_left": str(left), "card_right": str(right)}
    if item.context_image:
        textures["card_context"] = str(item.context_image)
    said = replace(spec, instruction_template=spec.instruction_template.replace("the cube", f"the {noun}"))
    return BridgeScene(item.id, item.category, layout, env_id, carried, parked, instruction_for(item, said),
                       item.correct_side_in(layout), spec, textures)


def scene_result(scene: BridgeScene, carried_base_xy, **fields):
    """The episode record of ``scene`` with the carried object resting at base ``carried_base_xy`` (m):
    the same zones and fields as the UR5 cell (:func:`~embeval.act2answer.episode.episode_result`)."""
    from embeval.act2answer.episode import episode_result

    fields.setdefault("instruction", scene.instruction)
    return episode_result(scene.item, scene.category, scene.layout, scene.correct_side, scene.spec,
                          tuple(carried_base_xy)[:3], **fields)


# ----------------------------------------------------------------------------- the ManiSkill env
_CLASSES: dict[str, type] = {}


def act2answer_env_class(env_id: str):
    """ManiSkill's Bridge env ``env_id`` subclassed to stage a :class:`BridgeScene` (set ``a2a_scene`` on the
    instance, then reset with reconfigure): the cards (out of the green screen, image up = base +x, image
    right = base -y as in the UR5 cell), the carried object at the spec's start, the target parked and
    kinematic; ``evaluate()`` gives the zone. With ``a2a_scene`` None it is the plain Bridge env."""
    if env_id in _CLASSES:
        return _CLASSES[env_id]
    require_assets(env_id)
    from embeval.sim.maniskill.runtime import import_sapien

    sapien = import_sapien()
    import torch
    from mani_skill.utils.registration import REGISTERED_ENVS

    from embeval.act2answer.maniskill import _card_quad
    from embeval.act2answer.protocol import answer
    from embeval.sim.maniskill.runtime import raw_pose_matrix

    base_cls = REGISTERED_ENVS[env_id].cls
    parked_id = BRIDGE_ENVS[env_id][1]

    class Act2AnswerBridge(base_cls):
        a2a_scene: BridgeScene | None = None

        def __init__(self, *args, **kwargs):
            # ManiSkill 3.0.1 keeps this list on the class until the first reconfigure: one per instance here,
            # so a second env in the process does not inherit the first one's objects
            self._objects_to_remove_from_greenscreen = []
            super().__init__(*args, **kwargs)

        def _build_actor_helper(self, model_id, scale=1, kinematic=False, initial_pose=None):
            if self.a2a_scene is not None and model_id == parked_id:
                kinematic, initial_pose = True, sapien.Pose(p=list(PARK_XYZ))
            return super()._build_actor_helper(model_id, scale, kinematic, initial_pose)

        def _load_scene(self, options):
            super()._load_scene(options)
            sc, self.cards = self.a2a_scene, {}
            if sc is None:
                return
            # one start: the carried object at the spec's start (its configured height), the target parked
            cx, cy = base_to_world(sc.spec.cube_xy)
            z0 = float(self.xyz_configs[0, 0, 2])
            self.xyz_configs = torch.tensor([[[cx, cy, z0], list(PARK_XYZ)]], dtype=torch.float32, device=self.device)
            t = CARD_THICKNESS
            for name, tex in sc.textures.items():
                b = self.scene.create_actor_builder()
                half = [sc.spec.card_size / 2, sc.spec.card_size / 2, t / 2]
                b.add_box_collision(half_size=half)
                b.add_box_visual(half_size=half, material=sapien.render.RenderMaterial(base_color=[0.9, 0.9, 0.9, 1]))
                x, y, top = sc.card_world_xyz(name)
                b.initial_pose = sapien.Pose(p=[x, y, top - t / 2], q=[0, 0, 0, 1])  # turned like the robot
                card = b.build_kinematic(name=name)
                if self.scene.can_render():
                    for obj in card._objs:
                        comp = sapien.render.RenderBodyComponent()
                        comp.attach(_card_quad(sc.spec.card_size, t / 2 + 0.0001, tex))
                        obj.add_component(comp)
                self.remove_object_from_greenscreen(card)
                self.cards[name] = card

        def carried_base_xyz(self) -> np.ndarray:
            T = np.linalg.inv(raw_pose_matrix(self.agent.robot.pose.raw_pose)) @ raw_pose_matrix(
                self.objs[self.a2a_scene.carried].pose.raw_pose)
            return T[:3, 3]

        def evaluate(self):
            sc = self.a2a_scene
            if sc is None:
                return super().evaluate()
            z = answer(self.carried_base_xyz(), sc.spec, sc.correct_side)
            return {"success": torch.tensor([z.zone == "correct"]), "zone": z.zone}

        def get_language_instruction(self, **kw):
            if self.a2a_scene is None:
                return super().get_language_instruction(**kw)
            return [self.a2a_scene.instruction] * self.num_envs

    Act2AnswerBridge.__name__ = f"Act2Answer{base_cls.__name__}"
    _CLASSES[env_id] = Act2AnswerBridge
    return Act2AnswerBridge


class BridgeSession:
    """The backend's env: one :class:`~embeval.sim.maniskill.bridge.BridgeEnv` of ``env_id``, re-staged per
    episode (:meth:`stage`, then ``reset(..., reconfigure=True)``). Checks the assets first."""

    def __init__(self, env_id: str = "PutCarrotOnPlateInScene-v1", obs_size: tuple[int, int] | None = None,
                 aliases: dict[str, str] | None = None, geometry: str = "bridge"):
        from embeval.sim.maniskill.bridge import CAMERA, BridgeConfig, BridgeEnv

        require_assets(env_id)
        self.env_id, self.scene, self.geometry = env_id, None, geometry
        cfg = BridgeConfig(env_id, obs_size=obs_size, aliases={"third_person": CAMERA, **dict(aliases or {})})
        self.env = BridgeEnv(cfg, env_cls=act2answer_env_class(env_id))

    def stage(self, scene: BridgeScene) -> None:
        if scene.env_id != self.env_id:
            raise ConfigError(f"this session runs {self.env_id}; the scene is staged in {scene.env_id}")
        from embeval.sim.textures import loadable

        self.scene = scene  # the env gets 8-bit RGB PNGs SAPIEN loads (WebP, 16-bit ... converted, one-line errors)
        self.env.unwrapped.a2a_scene = replace(scene, textures={k: loadable(v, f"item {scene.item!r}: card image")
                                                                for k, v in scene.textures.items()})

    def carried_base_xyz(self) -> np.ndarray:
        return self.env.unwrapped.carried_base_xyz()

    def close(self) -> None:
        self.env.close()


def run_episode(session: BridgeSession, policy, item, layout: str, spec: EpisodeSpec | None = None, seed: int = 0,
                keep_actions: bool = True):
    """One Act2Answer episode of ``item`` in ``layout`` in ``session``'s Bridge env: the same termination rule
    (carried object lifted ``lift_m`` then released), settle time and record as the UR5 cell's runner."""
    from embeval.act2answer.episode import closed_loop
    from embeval.act2answer.protocol import IntentTracker

    scene = bridge_scene(item, layout, session.env_id, spec, getattr(session, "geometry", "bridge"))
    session.stage(scene)
    env, s = session.env, scene.spec
    obs = env.reset(episode_seed(seed), scene.instruction, reconfigure=True)  # 32-bit; the record keeps ``seed``
    u = env.unwrapped
    carried = u.objs[scene.carried]
    table_z = float(session.carried_base_xyz()[2])
    holding = lambda: bool(u.agent.is_grasping(carried)[0])  # noqa: E731
    if s.start == "grasped":
        from embeval.act2answer.maniskill import grasp_in_hand
        from embeval.sim.maniskill.bridge import gripper_action

        env._raw = grasp_in_hand(env, carried, lambda cmd: env.env.step(cmd)[0], np.r_[np.zeros(6), gripper_action(0.0)],
                                 holding)
        env.gripper = 0.0
        obs = env.observe()
    policy.reset(scene.instruction)
    intent = IntentTracker(s, scene.correct_side, 1.0 / float(u.control_timestep))
    reason, n, actions = closed_loop(env, policy, obs, s, lambda: session.carried_base_xyz()[2], keep_actions, intent,
                                     lambda: env.tcp_matrix()[:3, 3], holding, table_z)
    env.hold(int(round(s.settle_s / float(u.control_timestep))))
    return scene_result(scene, session.carried_base_xyz(), end_reason=reason, stopped=False, steps=n,
                        subject=str(getattr(policy, "id", "")), seed=int(seed), actions=actions, intent=intent.metrics())


class BridgeCardExpert:
    """Privileged scripted answer (reads the simulator; a control ceiling): a top-down grasp of the carried
    object, carried over the correct card, lowered and released. Not run here (no assets offline)."""

    id = "bridge-card-expert"

    def __init__(self, session: BridgeSession):
        self.session, self.inner = session, None

    @property
    def action_spec(self):
        from embeval.action import ActionSpec

        return ActionSpec(frame="base")

    def reset(self, instruction: str = "") -> None:
        from embeval.sim.maniskill.expert import Phase, PickCubeExpert, _pose
        from embeval.sim.maniskill.runtime import _np

        sc = self.session.scene

        class _Plan(PickCubeExpert):
            def obj(self, name):
                return self.env.to_base(_np(self.env.unwrapped.objs[name].pose.raw_pose))

            def plan(self):
                ph = self.grasp_phases(sc.carried)  # sets the held orientation; a grasped start skips its phases
                ph = ph if sc.spec.start == "table" else []
                R, (cx, cy) = self._held_R, sc.spec.card_xy(sc.correct_side)
                z = float(self.obj(sc.carried)[2, 3])  # the grasp height above the root, kept to put it down
                over = lambda dz: (lambda: _pose(R, [cx, cy, z + dz]))  # noqa: E731
                return ph + [Phase("lift", self._hold_up(R, 0.06), 0.0, tol=0.015, rot_tol=0.1),
                             Phase("carry", over(0.06), 0.0, tol=0.015, rot_tol=0.1),
                             Phase("lower", over(0.01), 0.0, tol=0.006),
                             Phase("release", self._hold(R), 1.0, tol=1.0, rot_tol=9, min_steps=2),
                             Phase("retreat", over(0.08), 1.0, max_steps=10 ** 6)]

            def _hold_up(self, R, dz):
                box = {}

                def f():
                    if "p" not in box:
                        box["p"] = self.env.tcp_matrix()[:3, 3] + [0, 0, dz]
                    return _pose(R, box["p"])
                return f

        self.inner = _Plan(self.session.env)

    def act(self, obs):
        return self.inner.act(obs)


def bridge_backend(env_id: str, name: str, geometry: str = "bridge"):
    """The Act2Answer :class:`~embeval.act2answer.episode.Backend` of the Bridge env ``env_id`` with ``geometry``'s
    card layout (:data:`GEOMETRIES`)."""
    from embeval.act2answer.episode import Backend

    noun = BRIDGE_ENVS[env_id][2]
    from embeval.sim.maniskill.bridge import CAMERA

    what = ("the reference's Act2AnswerV4-v1 layout (boards at world (-0.25, -+0.155), 3 cm cube) on the Bridge flat "
            f"table of {env_id}" if geometry == "v4" else f"ManiSkill3 Bridge scene {env_id} (SimplerEnv-style")
    return Backend(name, lambda obs_size, aliases=None: BridgeSession(env_id, tuple(obs_size), aliases, geometry),
                   run_episode, lambda session, spec: BridgeCardExpert(session),
                   f"{what}, WidowX; the {noun} is carried; needs ManiSkill's asset download)",
                   cameras=(CAMERA, "third_person"), aliases=True)


#: the ``maniskill-bridge*`` entries of :data:`embeval.act2answer.episode.BACKENDS`
BACKEND = bridge_backend("PutCarrotOnPlateInScene-v1", "maniskill-bridge")
BACKEND_SPOON = bridge_backend("PutSpoonOnTableClothInScene-v1", "maniskill-bridge-spoon")
BACKEND_CUBE = bridge_backend("StackGreenCubeOnYellowCubeBakedTexInScene-v1", "maniskill-bridge-cube")
#: the reference's layout: the green cube of the flat-table cube scene carried onto V4's boards
BACKEND_V4 = bridge_backend("StackGreenCubeOnYellowCubeBakedTexInScene-v1", "maniskill-bridge-v4", geometry="v4")
