"""Manipulation tasks: the ten Embodied-IQA verbs, one file per task, plus the task API.

Each module of this package is one built-in task: it defines ``TASK = Task(...)`` (verb, difficulty,
seeded scene maker, success predicate, scripted-expert planner, VQA motion words). Importing the package
registers every one of them on :data:`TASKS`, easiest first (difficulty, then verb); a new file here is
a new task everywhere (``embeval sim`` commands, reference scenes, the scripted expert, the VQA answers;
see docs/contributing.md). Code outside embeval calls :func:`register_task`, or an installed package
names its ``Task`` in the ``embeval.tasks`` entry-point group.

Implemented (predicate + scripted expert): all ten (Pour is a geometric proxy: no liquid is simulated;
the cup is tipped with its mouth over the bowl). A task without a predicate reports ``implemented = False``.
Frame base == world; the table top is z = 0; "left" is +y and "in front of" is towards the robot (-x).

Also the public façade of :mod:`embeval.sim.task_state` (what predicates read),
:mod:`embeval.sim.predicates` (:class:`TaskSpec`, difficulty, success predicates) and
:mod:`embeval.sim.scene_generators` (seeded scene makers, :func:`make_task`, :func:`make_reference_scene`).
"""
from __future__ import annotations

import importlib
import pkgutil

from embeval.errors import ConfigError
from embeval.sim.predicates import DIFFICULTY, PREDICATES, TaskSpec
from embeval.sim.scene_generators import (
    BACKGROUNDS,
    LEVEL_VERBS,
    MAKERS,
    REFERENCE_AREA,
    TABLE_AREA,
    TEXTURED_BACKGROUNDS,
    Layout,
    make_reference_scene,
    make_task,
    scene_style,
)
from embeval.sim.task_registry import (
    TASKS,
    Planner,
    Predicate,
    SceneMaker,
    Task,
    get_task,
    markdown_table,
    register_task,
    resolve_verb,
    tasks,
    unregister_task,
)
from embeval.sim.task_state import ObjectState, WorldState

__all__ = [
    "BACKGROUNDS", "DIFFICULTY", "LEVEL_VERBS", "MAKERS", "PREDICATES", "REFERENCE_AREA", "TABLE_AREA", "TASKS",
    "TEXTURED_BACKGROUNDS", "Layout", "ObjectState", "Planner", "Predicate", "SceneMaker", "Task", "TaskSpec",
    "WorldState", "get_task", "make_reference_scene", "make_task", "markdown_table", "register_task", "resolve_verb",
    "scene_style", "tasks", "unregister_task",
]


def _builtin_tasks() -> list[Task]:
    """The ``TASK`` of every module in this package, easiest first (difficulty, then verb)."""
    found = []
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        task = getattr(module, "TASK", None)
        if not isinstance(task, Task):
            raise ConfigError(f"{module.__name__} is in the task folder but defines no TASK = Task(...); "
                              "give it one or move it out of embeval/sim/tasks/")
        found.append(task)
    return sorted(found, key=lambda t: (t.difficulty, t.verb))


for _task in _builtin_tasks():
    register_task(_task)
del _task
