"""Task instances and what success predicates read: :class:`TaskSpec` (plain data; it also describes a task on
the real cell) and the helpers predicates share. Each verb's predicate reads a
:class:`~embeval.sim.task_state.WorldState`, so the same definition scores the sim and the cell; it lives in
the verb's :class:`~embeval.sim.task_registry.Task` record (``embeval/sim/tasks/<verb>.py``).
:data:`DIFFICULTY` and :data:`PREDICATES` are live views of the task registry.

A verb without a predicate reports ``implemented = False``. Frame base == world; the table top is z = 0;
"left" is +y and "in front of" is towards the robot (-x).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from embeval.config import from_mapping
from embeval.errors import ConfigError
from embeval.sim.scene import VERBS, SceneSpec
from embeval.sim.task_registry import Predicate, TaskTable
from embeval.sim.task_state import ObjectState, WorldState

#: Default difficulty (1 easiest .. 5 hardest) of each verb: a live view of the task registry.
DIFFICULTY: Mapping[str, int] = TaskTable("difficulty")
#: verb -> success predicate ``fn(task, world, scene) -> bool`` of every implemented verb (live view).
PREDICATES: Mapping[str, Predicate] = TaskTable("success")


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
# helpers of the success predicates (embeval/sim/tasks/<verb>.py)
def object_state(world: WorldState, name: str) -> ObjectState:
    """The measured state of object ``name``; :class:`ConfigError` naming the objects when absent."""
    try:
        return world.objects[name]
    except KeyError:
        raise ConfigError(f"world state has no object {name!r}; objects: {sorted(world.objects)}") from None


def xy_distance(a: np.ndarray, b) -> float:
    """Distance (m) between two positions in the table plane (x, y)."""
    return float(np.linalg.norm(np.asarray(a)[:2] - np.asarray(b)[:2]))


def up_axis(orientation_xyzw) -> np.ndarray:
    """The object's local +z axis in the world frame (orientation as a quaternion x, y, z, w)."""
    from embeval.rotations import Turn, apply

    return apply(Turn.quat(orientation_xyzw), [0.0, 0.0, 1.0])
