"""The Act2Answer episode spec: two image cards, a cube and the arm, as plain data (YAML).

The same :class:`EpisodeSpec` describes the simulated cell and the real cell: card centres,
card size, the cube's start, the zone radius ``eps`` and the termination rule. Frame: the UR
controller frame ``base`` (metres; +y is the robot's left, see :mod:`embeval.sim.scene`).

Protocol (:mod:`embeval.act2answer.protocol`): ``start`` (``grasped``: the cube in the gripper at the
first step, the gripper held closed for ``hold_steps``; ``table``: resting at ``cube_xy``), ``rule``
(``board``: card extent grown by ``board_margin``; ``disc``: radius ``eps``), ``max_steps``; the defaults
are the Act2Answer reference harness's (docs/act2answer.md lists each number and its source).

Termination rules (:data:`TERMINATIONS`), always recorded with each result:

- ``release_after_lift``: the episode ends at the first step where the gripper opens after the
  cube was lifted at least ``lift_m`` above the table (the answer is "put down"; a grasped start
  counts as lifted, its gripper held closed for ``hold_steps``); otherwise at ``max_steps``;
- ``max_steps``: the episode always runs ``max_steps`` policy steps.

A protective stop (arm or gripper touching the table/wall, workspace limit: the e-stop of the
real cell) ends any episode; its zone is read where the cube then lies.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from embeval.act2answer.items import BinaryItem
from embeval.config import from_mapping
from embeval.errors import ConfigError, MissingFileError, load_yaml

TERMINATIONS = ("release_after_lift", "max_steps")

#: the most policy steps an episode may take (the UR5 cell uses 24, ManiSkill's Panda ~45, the Bridge scenes 60)
MAX_EPISODE_STEPS = 10_000

#: Instruction template used when an item has no instruction of its own.
DEFAULT_INSTRUCTION = "{question} Put the cube on the correct picture."


@dataclass
class EpisodeSpec:
    """Geometry and rules of one Act2Answer episode (metres, seconds)."""

    left_card_xy: tuple[float, float] = (0.55, 0.15)
    right_card_xy: tuple[float, float] = (0.55, -0.15)
    card_size: float = 0.12  # square card edge, m
    context_card_xy: tuple[float, float] = (0.74, 0.0)  # third card for an item's question image
    cube_xy: tuple[float, float] = (0.42, 0.0)
    cube_size: float = 0.04
    cube_color: str = "red"
    eps: float = 0.08  # zone radius around each card centre, m
    termination: str = "release_after_lift"
    max_steps: int = 80  # policy steps per episode (cap; the reference's episode_len)
    start: str = "grasped"  # "grasped": the cube in the closed gripper at the first step; "table": at cube_xy
    hold_steps: int = 25  # grasped start: first policy steps with the gripper forced closed (the reference's 10 + 15)
    rule: str = "board"  # success rule: "board" (card extent + board_margin) or "disc" (radius eps)
    board_margin: float = 0.08  # m the card's extent grows by in x and y under the board rule (margin_xy)
    lift_m: float = 0.02  # cube height above its start that counts as "lifted"
    settle_s: float = 0.3  # physics after the last step before the zone is read
    instruction_template: str = DEFAULT_INSTRUCTION

    def __post_init__(self):
        import math
        from numbers import Integral, Real

        def number(v) -> bool:
            return isinstance(v, Real) and not isinstance(v, bool) and math.isfinite(float(v))

        for k in ("left_card_xy", "right_card_xy", "context_card_xy", "cube_xy"):
            v = getattr(self, k)
            if isinstance(v, (str, bytes)) or not isinstance(v, (list, tuple)) or len(v) != 2 or not all(map(number, v)):
                raise ConfigError(f"episode spec {k} must be (x, y), two finite numbers in metres, got {v!r}"[:200])
            setattr(self, k, tuple(float(x) for x in v))
        for k, zero, hi in (("card_size", False, 1.0), ("cube_size", False, 0.5), ("eps", False, 1.0),
                            ("lift_m", True, 1.0), ("settle_s", True, 60.0)):
            v = getattr(self, k)
            if not number(v) or not (0.0 <= float(v) if zero else 0.0 < float(v)) or float(v) > hi:
                rng = f"{'[' if zero else '('}0, {hi}]"
                raise ConfigError(f"episode spec {k} must be a number in {rng}, got {v!r}"[:200])
            setattr(self, k, float(v))
        for k in ("cube_color", "termination", "instruction_template", "start", "rule"):
            if not isinstance(getattr(self, k), str):
                raise ConfigError(f"episode spec {k} must be a string, got {getattr(self, k)!r}"[:200])
        if self.termination not in TERMINATIONS:
            raise ConfigError(f"episode spec termination must be one of {TERMINATIONS}, got {self.termination!r}")
        if not isinstance(self.max_steps, Integral) or isinstance(self.max_steps, bool) or \
                not 1 <= self.max_steps <= MAX_EPISODE_STEPS:
            raise ConfigError(f"episode spec max_steps must be a whole number in 1..{MAX_EPISODE_STEPS} (policy steps per "
                              f"episode), got {self.max_steps!r}"[:200])
        self.max_steps = int(self.max_steps)
        from embeval.act2answer.protocol import RULES, STARTS, check_boards_apart

        if self.start not in STARTS:
            raise ConfigError(f"episode spec start must be one of {STARTS}, got {self.start!r}")
        if self.rule not in RULES:
            raise ConfigError(f"episode spec rule must be one of {RULES}, got {self.rule!r}")
        if not isinstance(self.hold_steps, Integral) or isinstance(self.hold_steps, bool) or \
                not 0 <= self.hold_steps <= MAX_EPISODE_STEPS:
            raise ConfigError(f"episode spec hold_steps must be a whole number in 0..{MAX_EPISODE_STEPS} (policy steps; "
                              f"more than max_steps holds the whole episode), got {self.hold_steps!r}"[:200])
        self.hold_steps = int(self.hold_steps)
        if not number(self.board_margin) or not 0.0 <= float(self.board_margin) <= 1.0:
            raise ConfigError(f"episode spec board_margin must be a number in [0, 1] (m), got {self.board_margin!r}"[:200])
        self.board_margin = float(self.board_margin)
        check_boards_apart(self.left_card_xy, self.right_card_xy, self.card_size, self.board_margin)
        try:
            self.instruction_template.format(question="q")
        except (KeyError, IndexError, ValueError) as exc:
            raise ConfigError(f"episode spec instruction_template must use only {{question}}, got "
                              f"{self.instruction_template!r} ({type(exc).__name__}: {exc})"[:240]) from None
        from embeval.act2answer.zones import classify

        classify(self.cube_xy, self.left_card_xy, self.right_card_xy, "left", self.eps)  # eps sanity

    def card_xy(self, side: str) -> tuple[float, float]:
        return self.left_card_xy if side == "left" else self.right_card_xy

    # -- serialisation -------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> EpisodeSpec:
        return from_mapping(cls, d, "episode spec")

    @classmethod
    def from_yaml(cls, path: str | Path) -> EpisodeSpec:
        p = Path(path)
        if not p.is_file():
            raise MissingFileError(f"episode spec {p} not found; see config/act2answer/episode.yaml for an example")
        data = load_yaml(p, "episode spec") or {}
        if not isinstance(data, Mapping):
            raise ConfigError(f"episode spec {p} must be a mapping of episode fields, got {type(data).__name__}; "
                              "see config/act2answer/episode.yaml")
        try:
            return cls.from_dict(data.get("episode", data))
        except ConfigError as exc:  # name the file
            raise ConfigError(f"{p}: {exc}") from None

    def to_yaml(self, path: str | Path | None = None) -> str:
        text = yaml.safe_dump({"episode": self.to_dict()}, sort_keys=False)
        if path is not None:
            Path(path).write_text(text)
        return text


def instruction_for(item: BinaryItem, spec: EpisodeSpec | None = None) -> str:
    """The policy's instruction: the item's own (e.g. LLM-rewritten) or the template on its question."""
    if item.instruction.strip():
        return item.instruction.strip()
    tpl = (spec or EpisodeSpec()).instruction_template
    return tpl.format(question=item.question.strip())


def build_scene(item: BinaryItem, layout: str, spec: EpisodeSpec | None = None, base=None):
    """``(SceneSpec, TaskSpec)`` of ``item`` in ``layout``: two fixed textured cards, a cube, the arm.

    ``base``: a :class:`embeval.sim.scene.SceneSpec` to add the objects to (table colour,
    cameras, lighting of a calibrated real cell); default: the standard workcell.
    """
    from embeval.sim.scene import COLORS, ObjectSpec, SceneSpec
    from embeval.sim.tasks import TaskSpec

    spec = spec or EpisodeSpec()
    left, right = item.images_in(layout)
    s, h = spec.card_size, 0.003
    objs = [
        ObjectSpec("card_left", "card", position=spec.left_card_xy, size=(s, s, h), texture=str(left), fixed=True,
                   category="image card"),
        ObjectSpec("card_right", "card", position=spec.right_card_xy, size=(s, s, h), texture=str(right), fixed=True,
                   category="image card"),
        ObjectSpec("cube", "box", position=spec.cube_xy, size=(spec.cube_size,) * 3,
                   color=COLORS.get(spec.cube_color, COLORS["red"]), color_name=spec.cube_color, category="cube"),
    ]
    if item.context_image:
        objs.append(ObjectSpec("card_context", "card", position=spec.context_card_xy, size=(s, s, h),
                               texture=str(item.context_image), fixed=True, category="question card"))
    scene = (base or SceneSpec(name=f"act2answer-{item.id}-{layout}")).with_objects(*objs)
    correct = item.correct_side_in(layout)
    # verb Move with the correct card as goal; the episode runner applies its own zones and termination
    task = TaskSpec("Move", instruction_for(item, spec), 3, "cube", goal=spec.card_xy(correct), tolerance=spec.eps,
                    max_steps=10 ** 6)
    return scene, task


def export_scenes(items, out_dir: str | Path, spec: EpisodeSpec | None = None,
                  layouts: tuple[str, ...] = ("original", "swapped")) -> Path:
    """Write, for the ROS graph and the real cell, one scene YAML per item x layout
    (``<item>@<layout>.yaml``: cards, cube, arm; card textures as absolute paths), the episode spec
    (``episode.yaml``) and ``conductor.yaml`` (the conductor node's ``items``/``instructions`` lists
    in the same order). Returns ``out_dir``."""
    spec = spec or EpisodeSpec()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ids, instr, rows = [], [], []
    for item in items:
        for layout in layouts:
            scene, task = build_scene(item, layout, spec)
            uid = f"{item.id}@{layout}"
            for o in scene.objects:
                if o.texture:
                    o.texture = str(Path(o.texture).resolve())
            scene.to_yaml(out / f"{uid}.yaml")
            ids.append(uid)
            instr.append(task.instruction)
            rows.append({"unit": uid, "correct_side": item.correct_side_in(layout), "category": item.category,
                         "item": item.id, "layout": layout, "instruction": task.instruction, "scene": f"{uid}.yaml"})
    spec.to_yaml(out / "episode.yaml")
    conductor = {"embeval_conductor": {"ros__parameters": {
        "items": ids, "instructions": instr, "distortions": ["none"] * len(ids), "levels": [0] * len(ids),
        "steps_per_episode": spec.max_steps}}}
    (out / "conductor.yaml").write_text(yaml.safe_dump(conductor, sort_keys=False, width=200))
    (out / "manifest.yaml").write_text(yaml.safe_dump(rows, sort_keys=False))
    return out


@dataclass(frozen=True)
class SceneUnit:
    """One exported episode (item x layout) of a scene folder: what the ROS graph needs to run and score it."""

    unit: str  # "<item id>@<layout>"
    item: str
    layout: str  # "original" | "swapped"
    correct_side: str  # in this layout
    category: str
    instruction: str
    scene: Path  # the scene YAML (cards, cube, arm)


@dataclass(frozen=True)
class SceneSet:
    """A folder written by :func:`export_scenes`: the episode spec and its units in conductor order."""

    folder: Path
    spec: EpisodeSpec
    units: dict[str, SceneUnit]

    def unit(self, uid: str) -> SceneUnit:
        try:
            return self.units[uid]
        except KeyError:
            raise ConfigError(f"episode {uid!r} is not in the scene folder {self.folder} (it has {len(self.units)}: "
                              f"{', '.join(list(self.units)[:4])}...); run `embeval act2answer scenes` for its items"
                              ) from None


def load_scene_set(folder: str | Path) -> SceneSet:
    """Read a folder written by :func:`export_scenes` (``episode.yaml``, ``manifest.yaml``, scene YAMLs)."""
    d = Path(folder).expanduser()
    if not (d / "manifest.yaml").is_file() or not (d / "episode.yaml").is_file():
        raise MissingFileError(f"{d} is not an Act2Answer scene folder (no manifest.yaml / episode.yaml); write one with "
                               f"`embeval act2answer scenes --items ITEMS.jsonl --out {d}`")
    rows = load_yaml(d / "manifest.yaml", "scene manifest") or []
    units: dict[str, SceneUnit] = {}
    for r in rows:
        if "scene" not in r:
            raise ConfigError(f"{d}/manifest.yaml was written by an older embeval (no scene/instruction fields); "
                              f"write it again with `embeval act2answer scenes --out {d}`")
        scene = d / r["scene"]
        if not scene.is_file():
            raise MissingFileError(f"scene {scene} listed in {d}/manifest.yaml is missing; run `embeval act2answer scenes` again")
        units[r["unit"]] = SceneUnit(r["unit"], r["item"], r["layout"], r["correct_side"], r["category"], r["instruction"],
                                     scene)
    return SceneSet(d, EpisodeSpec.from_yaml(d / "episode.yaml"), units)
