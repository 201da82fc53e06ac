"""Seeded scene generators for the ten Embodied-IQA verbs: one maker per verb places its objects (and the
:class:`~embeval.sim.predicates.TaskSpec`) with a :class:`Layout` rejection sampler, :func:`scene_style` samples
background and lighting, :func:`make_task` builds one task scene, :func:`make_reference_scene` five at once.
Frame base == world; metres; "left" is +y and "in front of" is towards the robot (-x).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from embeval.errors import ConfigError
from embeval.sim.predicates import DIFFICULTY, TaskSpec
from embeval.sim.scene import COLORS, VERBS, ObjectSpec, SceneSpec


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


def _color(rng: np.random.Generator, exclude: set[str] = frozenset()) -> str:
    names = [c for c in COLORS if c not in exclude and c not in ("white", "black")]
    return str(rng.choice(names))


def _cube(name: str, xy, color: str, rng: np.random.Generator, category: str = "cube") -> ObjectSpec:
    s = float(rng.uniform(0.036, 0.044))
    return ObjectSpec(name=name, kind="box", position=xy, yaw=float(rng.uniform(-0.6, 0.6)), size=(s, s, s),
                      color=COLORS[color], color_name=color, category=category, mass=0.08)


SceneMaker = Callable[[np.random.Generator, Layout, int], tuple[list[ObjectSpec], TaskSpec]]
MAKERS: dict[str, SceneMaker] = {}


def maker(verb: str):
    def deco(fn: SceneMaker) -> SceneMaker:
        MAKERS[verb] = fn
        return fn

    return deco


@maker("Pick")
def _make_pick(rng, lay, d):
    c = _color(rng)
    what = str(rng.choice(["cube", "can", "bar"]))  # main-object variety for reference images
    xy = lay.place(0.04)
    if what == "cube":
        obj = _cube("cube", xy, c, rng)
    elif what == "can":
        obj = ObjectSpec(name="can", kind="cylinder", position=xy, size=(float(rng.uniform(0.02, 0.026)), 0.06),
                         color=COLORS[c], color_name=c, category="can", mass=0.08)
    else:
        obj = ObjectSpec(name="bar", kind="box", position=xy, yaw=float(rng.uniform(-1.5, 1.5)), size=(0.07, 0.03, 0.03),
                         color=COLORS[c], color_name=c, category="bar", mass=0.06)
    return [obj], TaskSpec("Pick", f"pick up the {c} {obj.category}", d, obj.name, threshold=0.05, max_steps=60)


@maker("Place")
def _make_place(rng, lay, d):
    c = _color(rng)
    rc = _color(rng, {c})
    kind = str(rng.choice(["bowl", "plate"]))
    size = (0.075, 0.045, 0.008) if kind == "bowl" else (0.075, 0.012)
    rec = ObjectSpec(name=kind, kind=kind, position=lay.place(0.08), size=size, color=COLORS[rc], color_name=rc, mass=0.4)
    cube = _cube("cube", lay.place(0.035), c, rng)
    prep = "in" if kind == "bowl" else "on"
    return [cube, rec], TaskSpec("Place", f"place the {c} cube {prep} the {rc} {kind}", d, "cube", reference=kind,
                                 tolerance=0.03, max_steps=110)


_RELATIONS = {"left of": (0.0, 1.0), "right of": (0.0, -1.0), "behind": (1.0, 0.0), "in front of": (-1.0, 0.0)}


@maker("Move")
def _make_move(rng, lay, d):
    c = _color(rng)
    ac = _color(rng, {c})
    for _ in range(200):
        rel = str(rng.choice(list(_RELATIONS)))
        anchor_xy = (float(rng.uniform(*lay.area[0])), float(rng.uniform(*lay.area[1])))
        off = 0.10 * np.array(_RELATIONS[rel])
        goal = (anchor_xy[0] + off[0], anchor_xy[1] + off[1])
        if lay.inside(goal) and lay.is_free(anchor_xy, 0.06) and lay.is_free(goal, 0.05):
            break
    else:
        raise ConfigError("could not lay out a Move task")
    lay.reserve(*anchor_xy, 0.03)
    lay.reserve(*goal, 0.03)
    anchor = _cube("anchor", anchor_xy, ac, rng, category="block")
    cube = _cube("cube", lay.place(0.035), c, rng)
    word = "the left of" if rel == "left of" else "the right of" if rel == "right of" else rel.replace(" of", "")
    text = f"move the {c} cube to {word} the {ac} block" if "of" in rel else f"move the {c} cube {rel} the {ac} block"
    return [cube, anchor], TaskSpec("Move", text, d, "cube", reference="anchor", goal=goal, tolerance=0.04, max_steps=110)


@maker("Push")
def _make_push(rng, lay, d):
    c = _color(rng)
    mc = _color(rng, {c})
    for _ in range(200):
        (ax0, ax1), (ay0, ay1) = lay.area
        start = (float(rng.uniform(ax0 + 0.04, ax1 - 0.06)), float(rng.uniform(ay0 + 0.06, ay1 - 0.06)))
        ang = float(rng.choice([0.0, np.pi / 2, np.pi, -np.pi / 2]))
        dist = float(rng.uniform(0.10, 0.15))
        goal = (start[0] + dist * np.cos(ang), start[1] + dist * np.sin(ang))
        if lay.inside(goal) and lay.is_free(start, 0.10) and lay.is_free(goal, 0.08):
            break
    else:
        raise ConfigError("could not lay out a Push task")
    lay.reserve(*start, 0.10)
    lay.reserve(*goal, 0.06)
    cube = _cube("cube", start, c, rng)
    cube.yaw = 0.0
    marker = ObjectSpec(name="target", kind="marker", position=goal, size=(0.035,), color=COLORS[mc], color_name=mc,
                        category="target")
    return [cube, marker], TaskSpec("Push", f"push the {c} cube onto the {mc} target", d, "cube", reference="target",
                                    goal=goal, tolerance=0.04, max_steps=90)


@maker("Press")
def _make_press(rng, lay, d):
    c = _color(rng)
    b = ObjectSpec(name="button", kind="button", position=lay.place(0.06), color=COLORS[c], color_name=c, fixed=True)
    return [b], TaskSpec("Press", f"press the {c} button", d, "button", threshold=0.007, max_steps=50)


@maker("Pull")
def _make_pull(rng, lay, d):
    c = _color(rng)
    for _ in range(200):
        x = float(rng.uniform(max(0.52, lay.area[0][0] + 0.16), lay.area[0][1] - 0.08))
        y = float(rng.uniform(lay.area[1][0] + 0.12, lay.area[1][1] - 0.12))
        if lay.is_free((x, y), 0.14) and lay.is_free((x - 0.14, y), 0.08):
            break
    else:
        raise ConfigError("could not lay out a Pull task")
    lay.reserve(x, y, 0.12)
    lay.reserve(x - 0.14, y, 0.06)  # where the drawer opens to
    dr = ObjectSpec(name="drawer", kind="drawer", position=(x, y), color=COLORS[c], color_name=c, fixed=True)
    return [dr], TaskSpec("Pull", f"pull the {c} drawer open", d, "drawer", threshold=0.08, max_steps=70)


@maker("Cover")
def _make_cover(rng, lay, d):
    bc, pc = _color(rng), _color(rng)
    bowl = ObjectSpec(name="bowl", kind="bowl", position=lay.place(0.045), size=(0.034, 0.04, 0.006), color=COLORS[bc],
                      color_name=bc, mass=0.3)
    # the plate is just narrower than the open gripper (8.5 cm) and wider than the bowl
    plate = ObjectSpec(name="plate", kind="plate", position=lay.place(0.05), size=(0.040, 0.010), color=COLORS[pc],
                       color_name=pc, mass=0.1)
    return [bowl, plate], TaskSpec("Cover", f"cover the {bc} bowl with the {pc} plate", d, "plate", reference="bowl",
                                   tolerance=0.015, max_steps=110)


@maker("Insert")
def _make_insert(rng, lay, d):
    pc, hc = _color(rng), _color(rng)
    peg = ObjectSpec(name="peg", kind="peg", position=lay.place(0.03), color=COLORS[pc], color_name=pc, mass=0.05)
    hole = ObjectSpec(name="hole", kind="hole", position=lay.place(0.07), color=COLORS[hc], color_name=hc, fixed=True,
                      category="block")
    return [peg, hole], TaskSpec("Insert", f"insert the {pc} peg into the hole of the {hc} block", d, "peg", reference="hole",
                                 tolerance=0.008, max_steps=110)


@maker("Pour")
def _make_pour(rng, lay, d):
    cc, bc = _color(rng), _color(rng)
    cup = ObjectSpec(name="cup", kind="cup", position=lay.place(0.045), color=COLORS[cc], color_name=cc, mass=0.15)
    bowl = ObjectSpec(name="bowl", kind="bowl", position=lay.place(0.08), size=(0.075, 0.045, 0.008), color=COLORS[bc],
                      color_name=bc, mass=0.4)
    return [cup, bowl], TaskSpec("Pour", f"pour the {cc} cup into the {bc} bowl", d, "cup", reference="bowl",
                                 threshold=np.radians(80), max_steps=110)


@maker("Twist")
def _make_twist(rng, lay, d):
    c = _color(rng)
    k = ObjectSpec(name="knob", kind="knob", position=lay.place(0.06), color=COLORS[c], color_name=c, fixed=True)
    k.yaw = float(rng.uniform(-0.8, 0.8))
    return [k], TaskSpec("Twist", f"twist the {c} knob a quarter turn", d, "knob", threshold=1.2, max_steps=50)


def _distractor(rng: np.random.Generator, lay: Layout, i: int, exclude: set[str]) -> ObjectSpec:
    c = _color(rng, exclude)
    kind = str(rng.choice(["cylinder", "box"]))
    if kind == "box":
        return ObjectSpec(name=f"distractor{i}", kind="box", position=lay.place(0.03), yaw=float(rng.uniform(-1, 1)),
                          size=(0.03, 0.05, 0.03), color=COLORS[c], color_name=c, category="block", mass=0.05)
    return ObjectSpec(name=f"distractor{i}", kind="cylinder", position=lay.place(0.03), size=(0.02, 0.05), color=COLORS[c],
                      color_name=c, category="can", mass=0.05)


def scene_style(rng: np.random.Generator) -> dict[str, Any]:
    """Sampled background (plain colour or procedural table texture), wall colour and lighting."""
    from embeval.sim.textures import name as texture_name
    from embeval.sim.scene import LightingSpec

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
    if verb not in MAKERS:
        raise ConfigError(f"unknown task verb {verb!r}; use one of {', '.join(VERBS)}")
    rng = np.random.default_rng(seed)
    lay = Layout(rng)
    lay.reserve(0.0, 0.0, 0.25)  # keep clear of the robot base
    objs, task = MAKERS[verb](rng, lay, difficulty or DIFFICULTY[verb])
    n = int(rng.integers(0, 3)) if distractors is None else distractors
    used = {o.color_name for o in objs}
    objs += [_distractor(rng, lay, i, used) for i in range(n)]
    scene = SceneSpec(name=f"{verb.lower()}-{seed}", objects=objs, seed=int(seed), **scene_style(rng))
    return scene, task


#: Verbs eligible at each difficulty level in reference scenes (5 tasks of rising difficulty).
LEVEL_VERBS: dict[int, tuple[str, ...]] = {1: ("Pick", "Press"), 2: ("Place", "Push"), 3: ("Move", "Pull"),
                                            4: ("Cover", "Twist"), 5: ("Insert", "Pour")}


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
                new, task = MAKERS[verb](rng, trial, level)
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
