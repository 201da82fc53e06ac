"""Act2Answer items in SimplerEnv-style Bridge scenes (ManiSkill's BridgeData v2 digital twins, WidowX 250 S).

An item becomes a :class:`BridgeScene`: the Bridge env it is staged in (e.g. ``PutCarrotOnPlateInScene-v1``),
the object the robot carries (the env's source object: the carrot, the spoon, ...), the two candidate
images as cards on the table (the layout's left / right image; the swap exchanges them), and the item's
instruction (``instruction_for``). Its :attr:`BridgeScene.spec` is an ordinary
:class:`~embeval.act2answer.scene.EpisodeSpec` in the WidowX's base frame (+x forward, +y left, metres), so
the zones, the termination rule and the episode record are the UR5 cell's
(:func:`~embeval.act2answer.episode.episode_result`).

Geometry (flat-table scenes). ManiSkill places the WidowX base at world ``(0.127, 0.060, 0.85)``
turned 180 deg about z, so base ``(x, y)`` is world ``(0.127 - x, 0.060 - y)``; the Bridge objects start on
a 0.15 m grid centred at world ``(-0.16, 0)`` = base ``(0.287, 0.06)``. The carried object starts at the
grid's near edge (base ``(0.22, 0.06)``), the cards (7 cm) lie at the far edge, 0.15 m apart (base
``(0.34, 0.135)`` left, ``(0.34, -0.015)`` right), zone radius ``eps`` 0.05 m. The env's target object
(the plate, the towel, ...) would be a third answer: it is parked under the table.

Building the env needs ManiSkill's downloaded assets (``bridge_v2_real2sim`` and ``widowx250s``);
without them :func:`require_assets` raises a one-line error with the exact download command. The
env keeps the Bridge envs' own observation (``rgb+segmentation``, the ``3rd_view_camera`` with the
real-image overlay) and control mode, as SimplerEnv evaluates VLAs.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from embeval.act2answer.scene import EpisodeSpec
from embeval.errors import ConfigError

#: the WidowX base in the Bridge scenes' world: position (m), turned 180 deg about z
ROBOT_XYZ = (0.127, 0.060, 0.85)
#: the table top's height in the flat-table world (m): the objects' configured z minus their half heights
TABLE_Z = 0.87
#: ManiSkill data sources every Bridge scene needs
ASSETS = ("bridge_v2_real2sim", "widowx250s")


@dataclass(frozen=True)
class BridgeTask:
    """One ManiSkill Bridge env: the object carried (its source object) and the one to park (its target)."""

    env_id: str
    carried: str
    parked: str


#: the Bridge digital twins an item can be staged in (flat-table scenes; ManiSkill 3.0.1 ids)
BRIDGE_TASKS = {t.env_id: t for t in (
    BridgeTask("PutCarrotOnPlateInScene-v1", "bridge_carrot_generated_modified", "bridge_plate_objaverse_larger"),
    BridgeTask("PutSpoonOnTableClothInScene-v1", "bridge_spoon_generated_modified", "table_cloth_generated_shorter"),
    BridgeTask("StackGreenCubeOnYellowCubeBakedTexInScene-v1", "baked_green_cube_3cm", "baked_yellow_cube_3cm"),
)}


def bridge_episode_spec(**overrides) -> EpisodeSpec:
    """The Act2Answer geometry on the Bridge flat table, in the WidowX base frame (see the module doc)."""
    base = EpisodeSpec(left_card_xy=(0.34, 0.135), right_card_xy=(0.34, -0.015), card_size=0.07,
                       context_card_xy=(0.40, 0.06), cube_xy=(0.22, 0.06), cube_size=0.03, eps=0.05, max_steps=60)
    return replace(base, **overrides) if overrides else base


def base_to_world(xy) -> tuple[float, float]:
    """WidowX base-frame ``(x, y)`` -> Bridge world ``(x, y)`` (m)."""
    return (ROBOT_XYZ[0] - float(xy[0]), ROBOT_XYZ[1] - float(xy[1]))


def world_to_base(xy) -> tuple[float, float]:
    """Bridge world ``(x, y)`` -> WidowX base-frame ``(x, y)`` (m); the inverse of :func:`base_to_world`."""
    return (ROBOT_XYZ[0] - float(xy[0]), ROBOT_XYZ[1] - float(xy[1]))


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

    def card_world_xyz(self, name: str) -> tuple[float, float, float]:
        """World centre of a card's top face (m)."""
        xy = {"card_left": self.spec.left_card_xy, "card_right": self.spec.right_card_xy,
              "card_context": self.spec.context_card_xy}[name]
        return (*base_to_world(xy), TABLE_Z + 0.003)


def bridge_scene(item, layout: str, env_id: str = "PutCarrotOnPlateInScene-v1", spec: EpisodeSpec | None = None) -> BridgeScene:
    """Stage ``item`` (a :class:`~embeval.act2answer.items.BinaryItem`) in ``layout`` in the Bridge env ``env_id``."""
    from embeval.act2answer.scene import instruction_for

    if env_id not in BRIDGE_TASKS:
        raise ConfigError(f"unknown Bridge scene {env_id!r}; choose one of {', '.join(BRIDGE_TASKS)}")
    if layout not in ("original", "swapped"):
        raise ConfigError(f"layout must be 'original' or 'swapped', got {layout!r}")
    spec = spec or bridge_episode_spec()
    task = BRIDGE_TASKS[env_id]
    left, right = item.images_in(layout)
    textures = {"card_left": str(left), "card_right": str(right)}
    if item.context_image:
        textures["card_context"] = str(item.context_image)
    return BridgeScene(item.id, item.category, layout, env_id, task.carried, task.parked, instruction_for(item, spec),
                       item.correct_side_in(layout), spec, textures)


def scene_result(scene: BridgeScene, carried_world_xy, **fields):
    """The episode record of ``scene`` with the carried object resting at world ``carried_world_xy``:
    the same zones and fields as the UR5 cell (:func:`~embeval.act2answer.episode.episode_result`)."""
    from embeval.act2answer.episode import episode_result

    fields.setdefault("instruction", scene.instruction)
    return episode_result(scene.item, scene.category, scene.layout, scene.correct_side, scene.spec,
                          world_to_base(carried_world_xy), **fields)


def require_assets(env_id: str = "PutCarrotOnPlateInScene-v1") -> None:
    """Raise the one-line ConfigError with the exact download command when the Bridge assets are missing."""
    from embeval.sim.maniskill.env import assets_error, missing_assets

    missing = [a for a in ASSETS if a in missing_assets(env_id, "widowx")]
    if missing:
        raise assets_error(env_id, missing)


def make_bridge_env(scene: BridgeScene, **kwargs):
    """The gym env of ``scene`` (ManiSkill's Bridge env with the cards, the item's instruction and the
    target object parked): ``kwargs`` go to ``gym.make`` (default obs_mode ``rgb+segmentation``, CPU
    simulation). Reset it with ``options={"reconfigure": True}``; its ``evaluate()`` adds ``zone``."""
    require_assets(scene.env_id)
    from embeval.sim.maniskill.runtime import import_sapien

    sapien = import_sapien()
    import mani_skill.envs  # noqa: F401  (registers the tasks)
    from mani_skill.utils.registration import REGISTERED_ENVS
    from mani_skill.utils.structs.pose import Pose

    from embeval.act2answer.zones import classify
    from embeval.act2answer.maniskill import _card_quad

    base_cls = REGISTERED_ENVS[scene.env_id].cls

    class Act2AnswerBridge(base_cls):
        def _load_scene(self, options):
            super()._load_scene(options)
            s = scene.spec
            self.cards = {}
            for name, tex in scene.textures.items():
                b = self.scene.create_actor_builder()
                half = [s.card_size / 2, s.card_size / 2, 0.0015]
                b.add_box_collision(half_size=half)
                b.add_box_visual(half_size=half, material=sapien.render.RenderMaterial(base_color=[0.9, 0.9, 0.9, 1]))
                x, y, z = scene.card_world_xyz(name)
                b.initial_pose = sapien.Pose(p=[x, y, z - 0.0015], q=[0, 0, 0, 1])  # turned like the robot
                card = b.build_kinematic(name=name)
                if self.scene.can_render():
                    for obj in card._objs:
                        comp = sapien.render.RenderBodyComponent()
                        comp.attach(_card_quad(s.card_size, 0.0016, tex))
                        obj.add_component(comp)
                self.remove_object_from_greenscreen(card)
                self.cards[name] = card

        def _initialize_episode(self, env_idx, options):
            super()._initialize_episode(env_idx, options)
            import torch

            s = scene.spec
            n = len(env_idx)
            cx, cy = base_to_world(s.cube_xy)
            carried = self.objs[scene.carried]
            p = carried.pose.p.clone()
            p[:, 0], p[:, 1] = cx, cy
            carried.set_pose(Pose.create_from_pq(p=p, q=carried.pose.q))
            parked = self.objs[scene.parked]
            parked.set_pose(Pose.create_from_pq(p=torch.tensor([[0.0, 0.0, TABLE_Z - 5.0]]).repeat(n, 1)))

        def evaluate(self):
            import torch

            xy = world_to_base(self.objs[scene.carried].pose.p[0, :2].cpu().numpy())
            z = classify(xy, scene.spec.left_card_xy, scene.spec.right_card_xy, scene.correct_side, scene.spec.eps)
            return {"success": torch.tensor([z.zone == "correct"]), "zone": z.zone}

        def get_language_instruction(self, **kw):
            return [scene.instruction] * self.num_envs

    kw: dict = {"obs_mode": "rgb+segmentation", "sim_backend": "cpu", "render_backend": "cpu", "num_envs": 1}
    kw.update(kwargs)
    try:
        return Act2AnswerBridge(**kw)
    except OSError as exc:  # a partial download: a file the Bridge env opens is absent
        from embeval.sim.maniskill.env import assets_error

        raise assets_error(f"{scene.env_id} ({exc.__class__.__name__}: {exc})".replace("\n", " "), list(ASSETS)) from None
