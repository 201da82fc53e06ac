"""Seeded scene generation: each task's maker (its :class:`~embeval.sim.task_registry.Task` record,
``embeval/sim/tasks/<verb>.py``) places its objects (and the :class:`~embeval.sim.predicates.TaskSpec`) with a
:class:`Layout` rejection sampler and the helpers here (:func:`pick_color`, :func:`seeded_cube`); :func:`scene_style`
samples background and lighting, :func:`make_task` builds one task scene, :func:`make_reference_scene` five at
once. :data:`MAKERS` and :data:`LEVEL_VERBS` are live views of the task registry.
Frame base == world; metres; "left" is +y and "in front of" is towards the robot (-x).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from embeval.errors import ConfigError
from embeval.sim.predicates import TaskSpec
from embeval.sim.scene import COLORS, ObjectSpec, SceneSpec
from embeval.sim.task_registry import LevelVerbs, SceneMaker, TaskTable, get_task

#: Table area where objects are placed (frame base, metres).
TABLE_AREA = ((0.36, 0.68), (-0.28, 0.28))
#: The larger area used by reference scenes (five tasks' objects at once).
REFERENCE_AREA = ((0.30, 0.80), (-0.42, 0.42))

#: Backgrounds (table surface colour + category) sampled for scenes.
BACKGROUNDS: dict[str, tuple[float, float, float, float]] = {
    "wood": (0.62, 0.47, 0.33, 1.0),
    "white": (0.88, 0.88, 0.86, 1.0),
    "grey": (0.50, 0.50, 0.52, 1.0),
    "dark": (0.18, 0.18, 0.20, 1.0),
    "green_mat": (0.20, 0.42, 0.28, 1.0),
    "blue_mat": (0.22, 0.30, 0.48, 1.0),
}
#: Textured backgrounds: category -> procedural texture kind (embeval.sim.textures).
TEXTURED_BACKGROUNDS: dict[str, str] = {"wood_grain": "wood_grain", "checker": "checker", "speckle": "speckle",
                                        "fabric": "fabric"}


class Layout:
    """Rejection sampler of non-overlapping object footprints on the table (seeded)."""

    def __init__(self, rng: np.random.Generator, area=TABLE_AREA):
        self.rng, self.area, self.placed = rng, area, []  # (x, y, radius)

    def place(self, radius: float, near: tuple[float, float] | None = None, within: float = 0.0) -> tuple[float, float]:
        (x0, x1), (y0, y1) = self.area
        for _ in range(500):
            if near is not None:
                a, d = self.rng.uniform(0, 2 * np.pi), self.rng.uniform(0.5 * within, within)
                x, y = near[0] + d * np.cos(a), near[1] + d * np.sin(a)
                if not (x0 <= x <= x1 and y0 <= y <= y1):
                    continue
            else:
                x, y = self.rng.uniform(x0 + radius * 0.5, x1 - radius * 0.5), self.rng.uniform(y0 + radius * 0.5, y1 - radius * 0.5)
            if all(np.hypot(x - px, y - py) >= radius + pr + 0.02 for px, py, pr in self.placed):
                self.placed.append((x, y, radius))
                return float(x), float(y)
        raise ConfigError("could not place all objects without overlap; use fewer or smaller objects")

    def reserve(self, x: float, y: float, radius: float) -> None:
        self.placed.append((x, y, radius))

    def inside(self, xy: tuple[float, float]) -> bool:
        """Whether ``xy`` (m) lies within the sampling area."""
        (x0, x1), (y0, y1) = self.area
        return x0 <= xy[0] <= x1 and y0 <= xy[1] <= y1

    def is_free(self, xy: tuple[float, float], clearance: float) -> bool:
        """Whether ``xy`` is more than ``clearance`` (m) beyond every placed footprint's radius."""
        return all(np.hypot(xy[0] - px, xy[1] - py) > pr + clearance for px, py, pr in self.placed)


def pick_color(rng: np.random.Generator, exclude: set[str] = frozenset()) -> str:
    """A seeded colour name of :data:`~embeval.sim.scene.COLORS` (not white or black, not in ``exclude``)."""
    names = [c for c in COLORS if c not in exclude and c not in ("white", "black")]
    return str(rng.choice(names))


def seeded_cube(name: str, xy, color: str, rng: np.random.Generator, category: str = "cube") -> ObjectSpec:
    """A seeded 3.6-4.4 cm cube of colour ``color`` at ``xy`` (m), yaw within +-0.6 rad."""
    s = float(rng.uniform(0.036, 0.044))
    return ObjectSpec(name=name, kind="box", position=xy, yaw=float(rng.uniform(-0.6, 0.6)), size=(s, s, s),
                      color=COLORS[color], color_name=color, category=category, mass=0.08)


#: verb -> seeded scene maker ``fn(rng, layout, difficulty) -> (objects, task spec)`` (live view of the registry)
MAKERS: Mapping[str, SceneMaker] = TaskTable("make")


def _distractor(rng: np.random.Generator, lay: Layout, i: int, exclude: set[str]) -> ObjectSpec:
    c = pick_color(rng, exclude)
    kind = str(rng.choice(["cylinder", "box"]))
    if kind == "box":
        return ObjectSpec(name=f"distractor{i}", kind="box", position=lay.place(0.03), yaw=float(rng.uniform(-1, 1)),
                          size=(0.03, 0.05, 0.03), color=COLORS[c], color_name=c, category="block", mass=0.05)
    return ObjectSpec(name=f"distractor{i}", kind="cylinder", position=lay.place(0.03), size=(0.02, 0.05), color=COLORS[c],
                      color_name=c, category="can", mass=0.05)


def scene_style(rng: np.random.Generator) -> dict[str, Any]:
    """Sampled background (plain colour or procedural table texture), wall colour and lighting."""
    from embeval.sim.scene import LightingSpec
    from embeval.sim.textures import name as texture_name

    bg = str(rng.choice(list(BACKGROUNDS) + list(TEXTURED_BACKGROUNDS)))
    tex_seed = int(rng.integers(0, 2**31 - 1))
    light = LightingSpec(
        direction=tuple(float(v) for v in (rng.uniform(-0.8, 0.8), rng.uniform(-0.8, 0.8), 1.0)),
        color=tuple(float(v) for v in rng.uniform(0.85, 1.0, 3)),
        ambient=float(rng.uniform(0.45, 0.7)), diffuse=float(rng.uniform(0.35, 0.6)), specular=float(rng.uniform(0.0, 0.2)),
    )
    wall = tuple(float(v) for v in (*rng.uniform(0.6, 0.9, 3), 1.0))
    if bg in TEXTURED_BACKGROUNDS:
        return {"background": bg, "table_color": (1.0, 1.0, 1.0, 1.0), "lighting": light, "wall_color": wall,
                "table_texture": texture_name(TEXTURED_BACKGROUNDS[bg], tex_seed)}
    return {"background": bg, "table_color": BACKGROUNDS[bg], "lighting": light, "wall_color": wall}


def make_task(verb: str, seed: int, distractors: int | None = None, difficulty: int | None = None) -> tuple[SceneSpec, TaskSpec]:
    """A seeded scene + task for ``verb`` (with 0-2 random distractors unless ``distractors`` is given)."""
    spec = get_task(verb)
    rng = np.random.default_rng(seed)
    lay = Layout(rng)
    lay.reserve(0.0, 0.0, 0.25)  # keep clear of the robot base
    objs, task = spec.make(rng, lay, difficulty or spec.difficulty)
    n = int(rng.integers(0, 3)) if distractors is None else distractors
    used = {o.color_name for o in objs}
    objs += [_distractor(rng, lay, i, used) for i in range(n)]
    scene = SceneSpec(name=f"{verb.lower()}-{seed}", objects=objs, seed=int(seed), **scene_style(rng))
    return scene, task


#: Verbs eligible at each difficulty level in reference scenes (5 tasks of rising difficulty): the registered
#: tasks of that difficulty, alphabetically (live view of the registry).
LEVEL_VERBS: Mapping[int, tuple[str, ...]] = LevelVerbs()


def make_reference_scene(seed: int) -> tuple[SceneSpec, list[TaskSpec]]:
    """A scene with five tasks of rising difficulty 1..5 (one verb per level, distinct objects per task).

    The first task's target is the scene's main object. Object names are prefixed ``t<level>_``.
    """
    rng = np.random.default_rng(seed)
    lay = Layout(rng, REFERENCE_AREA)
    lay.reserve(0.0, 0.0, 0.25)
    objs: list[ObjectSpec] = []
    tasks: list[TaskSpec] = []
    for level in range(1, 6):
        verb = str(rng.choice(LEVEL_VERBS[level]))
        for _ in range(20):
            trial = Layout(rng, REFERENCE_AREA)
            trial.placed = list(lay.placed)
            try:
                new, task = get_task(verb).make(rng, trial, level)
                break
            except ConfigError:
                continue
        else:
            raise ConfigError(f"could not lay out reference scene {seed}")
        lay.placed = trial.placed
        rename = {o.name: f"t{level}_{o.name}" for o in new}
        for o in new:
            o.name = rename[o.name]
        task.target = rename.get(task.target, task.target)
        task.reference = rename.get(task.reference, task.reference)
        objs += new
        tasks.append(task)
    scene = SceneSpec(name=f"reference-{seed}", objects=objs, seed=int(seed), **scene_style(rng))
    return scene, tasks
