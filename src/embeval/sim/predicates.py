"""Task definitions and their success predicates: :class:`TaskSpec` (plain data; it also describes a task on the
real cell), the default difficulty of each verb, and one predicate per verb reading a
:class:`~embeval.sim.task_state.WorldState`, so the same definition scores the sim and the cell.

Pour is a geometric proxy (no liquid is simulated; the cup is tipped with its mouth over the bowl). A verb
without a predicate reports ``implemented = False``. Frame base == world; the table top is z = 0; "left" is +y
and "in front of" is towards the robot (-x).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from embeval.config import from_mapping
from embeval.errors import ConfigError
from embeval.sim.scene import VERBS, SceneSpec
from embeval.sim.task_state import ObjectState, WorldState

#: Default difficulty (1 easiest .. 5 hardest) of each verb.
DIFFICULTY: dict[str, int] = {
    "Pick": 1, "Press": 1, "Push": 2, "Place": 2, "Move": 3, "Pull": 3, "Cover": 4, "Twist": 4, "Insert": 5, "Pour": 5,
}


@dataclass
class TaskSpec:
    """One task instance on a scene."""

    verb: str
    instruction: str
    difficulty: int
    target: str  # the object acted on
    reference: str = ""  # second object: receptacle, goal marker, anchor for relative moves
    goal: tuple[float, ...] = ()  # (x, y) goal for Move / Push, metres
    tolerance: float = 0.04  # m, goal radius (Move, Push) or inner-radius margin (Place)
    threshold: float = 0.0  # verb-specific: lift height (Pick), joint travel (Press, Pull)
    max_steps: int = 120  # episode budget at the default control rate

    def __post_init__(self):
        if self.verb not in VERBS:
            raise ConfigError(f"unknown task verb {self.verb!r}; use one of {', '.join(VERBS)}")
        if not 1 <= int(self.difficulty) <= 5:
            raise ConfigError(f"task difficulty must be 1..5, got {self.difficulty}")
        self.difficulty = int(self.difficulty)
        self.goal = tuple(float(g) for g in self.goal)

    @property
    def implemented(self) -> bool:
        return self.verb in PREDICATES

    def success(self, world: WorldState, scene: SceneSpec | None = None) -> bool:
        """Whether the task is achieved in ``world``; :class:`ConfigError` for verbs without a predicate."""
        if not self.implemented:
            raise ConfigError(f"task {self.verb!r} has no success predicate yet (implemented: {', '.join(PREDICATES)})")
        return bool(PREDICATES[self.verb](self, world, scene))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["goal"] = list(self.goal)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TaskSpec:
        return from_mapping(cls, d, "task")


# ---------------------------------------------------------------------------------------------
# success predicates
Predicate = Callable[[TaskSpec, WorldState, "SceneSpec | None"], bool]
PREDICATES: dict[str, Predicate] = {}


def predicate(verb: str):
    def deco(fn: Predicate) -> Predicate:
        PREDICATES[verb] = fn
        return fn

    return deco


def _obj(world: WorldState, name: str) -> ObjectState:
    try:
        return world.objects[name]
    except KeyError:
        raise ConfigError(f"world state has no object {name!r}; objects: {sorted(world.objects)}") from None


def _xy_dist(a: np.ndarray, b) -> float:
    return float(np.linalg.norm(np.asarray(a)[:2] - np.asarray(b)[:2]))


@predicate("Pick")
def _pick(task: TaskSpec, world: WorldState, scene=None) -> bool:
    """Lifted: the target's bottom is at least ``threshold`` (default 5 cm) above the table."""
    return _obj(world, task.target).bottom_z >= (task.threshold or 0.05)


@predicate("Place")
def _place(task: TaskSpec, world: WorldState, scene=None) -> bool:
    """Released inside/on the receptacle: xy within its radius minus ``tolerance``/2, not held, resting low."""
    t, r = _obj(world, task.target), _obj(world, task.reference)
    radius = 0.07
    if scene is not None:
        spec = scene.object(task.reference)
        radius = spec.size[0] if spec.size else radius
    return (world.grasped != task.target and _xy_dist(t.position, r.position) <= radius - task.tolerance / 2
            and t.bottom_z <= r.bottom_z + 0.06)


@predicate("Move")
def _move(task: TaskSpec, world: WorldState, scene=None) -> bool:
    """Released on the table within ``tolerance`` of ``goal`` (x, y)."""
    t = _obj(world, task.target)
    return world.grasped != task.target and _xy_dist(t.position, task.goal) <= task.tolerance and t.bottom_z <= 0.01


@predicate("Push")
def _push(task: TaskSpec, world: WorldState, scene=None) -> bool:
    """Within ``tolerance`` of the goal marker, never grasped (pushed, not carried), on the table."""
    t = _obj(world, task.target)
    goal = task.goal if task.goal else _obj(world, task.reference).position
    return task.target not in world.ever_grasped and _xy_dist(t.position, goal) <= task.tolerance and t.bottom_z <= 0.01


@predicate("Press")
def _press(task: TaskSpec, world: WorldState, scene=None) -> bool:
    """The button cap went down by at least ``threshold`` (default 7 mm) at some point of the episode."""
    b = _obj(world, task.target)
    low = b.joint_min if b.joint_min is not None else b.joint
    return low is not None and -low >= (task.threshold or 0.007)


@predicate("Pull")
def _pull(task: TaskSpec, world: WorldState, scene=None) -> bool:
    """The drawer is open by at least ``threshold`` (default 8 cm)."""
    d = _obj(world, task.target)
    return d.joint is not None and -d.joint >= (task.threshold or 0.08)


@predicate("Twist")
def _twist(task: TaskSpec, world: WorldState, scene=None) -> bool:
    """The knob turned by at least ``threshold`` radians (default 1.2, a quarter turn is 1.57) either way."""
    k = _obj(world, task.target)
    return k.joint is not None and abs(k.joint) >= (task.threshold or 1.2)


@predicate("Insert")
def _insert(task: TaskSpec, world: WorldState, scene=None) -> bool:
    """Released inside the hole: centres within ``tolerance`` (default 8 mm) in xy, peg bottom below 1 cm."""
    peg, hole = _obj(world, task.target), _obj(world, task.reference)
    return (world.grasped != task.target and _xy_dist(peg.position, hole.position) <= (task.tolerance or 0.008)
            and peg.bottom_z <= 0.01)


@predicate("Cover")
def _cover(task: TaskSpec, world: WorldState, scene=None) -> bool:
    """Released on top of the receptacle: centres within ``tolerance`` (1.5 cm) in xy, resting on its rim."""
    lid, rec = _obj(world, task.target), _obj(world, task.reference)
    height = 0.04
    if scene is not None and len(scene.object(task.reference).size) > 1:
        height = scene.object(task.reference).size[1]
    return (world.grasped != task.target and _xy_dist(lid.position, rec.position) <= (task.tolerance or 0.015)
            and lid.bottom_z >= rec.bottom_z + height - 0.012)


def _axis_z(orientation_xyzw) -> np.ndarray:
    from scipy.spatial.transform import Rotation

    return Rotation.from_quat(orientation_xyzw).apply([0.0, 0.0, 1.0])


@predicate("Pour")
def _pour(task: TaskSpec, world: WorldState, scene=None) -> bool:
    """(No liquid is simulated.) The cup is tipped past ``threshold`` (80 deg) with its mouth over the bowl."""
    cup, bowl = _obj(world, task.target), _obj(world, task.reference)
    cup_h, bowl_r = 0.08, 0.075
    if scene is not None:
        cs, bs = scene.object(task.target).size, scene.object(task.reference).size
        cup_h = cs[1] if len(cs) > 1 else cup_h
        bowl_r = bs[0] if bs else bowl_r
    axis = _axis_z(cup.orientation)
    tilt = float(np.arccos(np.clip(axis[2], -1.0, 1.0)))
    mouth = cup.position + axis * cup_h / 2
    return tilt >= (task.threshold or np.radians(80)) and _xy_dist(mouth, bowl.position) <= bowl_r - 0.01
