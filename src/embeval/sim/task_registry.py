"""The tabletop-task registry: one :class:`Task` record per verb, registered once on :data:`TASKS`.

A task's facts live in its record (difficulty, seeded scene maker, success predicate, scripted-expert
planner, the motion words of its VQA answer); every per-verb table elsewhere (``VERBS``, ``DIFFICULTY``,
``LEVEL_VERBS``, ``MAKERS``, ``PREDICATES``, ``PLANNERS``, ``MOTIONS``) is a live read-only view of
:data:`TASKS` made here (:class:`TaskTable`, :class:`VerbList`, :class:`LevelVerbs`), so a task added later
shows up in all of them.

The built-in tasks are the modules of the :mod:`embeval.sim.tasks` package, one file per task, each
defining ``TASK = Task(...)``; that package registers them, easiest first (difficulty, then verb), on the
first use of :data:`TASKS`. Other code adds one with :func:`register_task`, and installed packages through
the ``embeval.tasks`` entry-point group (``my_verb = "my_pkg.tasks:TASK"``). See docs/contributing.md.

This module imports nothing of :mod:`embeval.sim` (the scene, predicate and expert modules import it).
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from embeval.errors import ConfigError
from embeval.registry import RecordKind, Registry

if TYPE_CHECKING:
    import numpy as np

    from embeval.sim.expert import ScriptedExpert, Stage
    from embeval.sim.predicates import TaskSpec
    from embeval.sim.scene import ObjectSpec, SceneSpec
    from embeval.sim.scene_generators import Layout
    from embeval.sim.task_state import WorldState

#: difficulty levels: 1 easiest .. 5 hardest (reference scenes hold one task of each)
LEVELS: tuple[int, ...] = (1, 2, 3, 4, 5)

#: ``maker(rng, layout, difficulty) -> (objects, task spec)``: places the task's objects with ``layout``
SceneMaker = Callable[["np.random.Generator", "Layout", int], "tuple[list[ObjectSpec], TaskSpec]"]
#: ``success(task, world, scene or None) -> bool``: reads measured object poses and joints (sim or real cell)
Predicate = Callable[["TaskSpec", "WorldState", "SceneSpec | None"], bool]
#: ``plan(expert) -> stages``: the scripted expert's waypoints (poses computed when each stage starts)
Planner = Callable[["ScriptedExpert"], "list[Stage]"]


@dataclass(frozen=True)
class Task:
    """Everything embeval knows about one tabletop task verb.

    ``verb`` is the capitalised name used in task specs and on the CLI (``--task`` is case-insensitive).
    ``difficulty`` (1..5) is the default of its task specs and its level in reference scenes.
    ``make`` builds a seeded scene; ``success`` (None: not implemented, episodes report no success)
    and ``plan`` (None: the scripted expert cannot solve it) are optional. ``motion`` and
    ``goal_phrase`` are the VQA answer's words ("grasp and lift ... then raise it up"; an empty
    ``goal_phrase`` says the direction towards the goal or reference object). ``summary`` is the
    success condition in words (the docs table).
    """

    verb: str
    difficulty: int
    make: SceneMaker = field(repr=False)
    success: Predicate | None = field(default=None, repr=False)
    plan: Planner | None = field(default=None, repr=False)
    motion: str = ""
    goal_phrase: str = ""
    summary: str = ""

    def __post_init__(self):
        if not isinstance(self.verb, str) or not self.verb.isidentifier() or not self.verb[0].isupper():
            raise ConfigError(f"task verb must be a capitalised word such as 'Stack', got {self.verb!r}")
        if isinstance(self.difficulty, bool) or not isinstance(self.difficulty, int) or self.difficulty not in LEVELS:
            raise ConfigError(f"task {self.verb}: difficulty must be an integer 1..5, got {self.difficulty!r}")
        for name in ("make", "success", "plan"):
            fn = getattr(self, name)
            if (fn is None and name != "make") or callable(fn):
                continue
            raise ConfigError(f"task {self.verb}: {name} must be a function, got {type(fn).__name__}")
        if not self.motion.strip():
            raise ConfigError(f"task {self.verb}: give motion, the VQA answer's verb phrase (e.g. 'grasp and lift')")

    @property
    def implemented(self) -> bool:
        """Whether episodes of this task can be scored (it has a success predicate)."""
        return self.success is not None


TASKS: Registry[Task] = Registry(
    "tabletop task", group="embeval.tasks", builtins="embeval.sim.tasks",
    record=RecordKind(Task, key="verb", about="summary", home="embeval.sim.tasks", adder="register_task"),
    hint="add one with a file defining TASK = Task(...) in embeval/sim/tasks/, or register_task(); docs/contributing.md")

#: ``register_task(task) -> task``: register under its verb (replacing a task of the same verb)
register_task = TASKS.register_record
#: ``unregister_task(verb)``: remove it (:class:`ConfigError` naming the tasks when absent)
unregister_task = TASKS.remove
#: ``get_task(verb, field="") -> Task``: :class:`ConfigError` (did you mean, the choices) when unknown
get_task = TASKS.get_record
#: ``tasks() -> list[Task]``: in registry order (built-ins easiest first, then registered, then plugins)
tasks = TASKS.records


def resolve_verb(name: str) -> str:
    """The registered verb spelt ``name`` in any case ("pick" -> "Pick"); :class:`ConfigError` otherwise."""
    for verb in TASKS.names():
        if verb.lower() == str(name).lower():
            return verb
    raise TASKS.unknown(name)


V = TypeVar("V")


class TaskTable(Mapping[str, Any]):
    """Live read-only view ``verb -> getattr(task, attr)`` of :data:`TASKS`, in registry order; tasks whose
    value is None or empty are left out (``PREDICATES`` lists only implemented verbs)."""

    def __init__(self, attr: str):
        self.attr = attr

    def _value(self, task: Task) -> Any:
        return getattr(task, self.attr)

    def __getitem__(self, verb: str) -> Any:
        if verb not in TASKS:
            raise KeyError(verb)
        value = self._value(get_task(verb))
        if value is None or value == "":
            raise KeyError(verb)
        return value

    def __iter__(self) -> Iterator[str]:
        return (t.verb for t in tasks() if self._value(t) not in (None, ""))

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"TaskTable({self.attr!r}: {dict(self)!r})"


class VerbList(Sequence[str]):
    """Live read-only view: every registered verb, alphabetically (compares equal to that tuple)."""

    def _verbs(self) -> tuple[str, ...]:
        return tuple(sorted(TASKS.names()))

    def __getitem__(self, i):
        return self._verbs()[i]

    def __len__(self) -> int:
        return len(TASKS.names())

    def __contains__(self, verb: object) -> bool:
        return verb in TASKS

    def __eq__(self, other: object) -> bool:
        return tuple(self) == tuple(other) if isinstance(other, (tuple, list, VerbList)) else NotImplemented

    __hash__ = None  # type: ignore[assignment]  # live: its contents change

    def __repr__(self) -> str:
        return repr(self._verbs())


class LevelVerbs(Mapping[int, tuple[str, ...]]):
    """Live read-only view ``level -> verbs of that difficulty`` (alphabetical) for levels 1..5: the verbs a
    reference scene draws from at each level."""

    def __getitem__(self, level: int) -> tuple[str, ...]:
        if level not in LEVELS:
            raise KeyError(level)
        return tuple(sorted(t.verb for t in tasks() if t.difficulty == level))

    def __iter__(self) -> Iterator[int]:
        return iter(LEVELS)

    def __len__(self) -> int:
        return len(LEVELS)

    def __repr__(self) -> str:
        return f"LevelVerbs({dict(self)!r})"


def markdown_table() -> str:
    """The task table of docs/sim.md: verb, difficulty, success predicate in words, implemented."""
    rows = ["| verb | difficulty | success predicate | implemented |", "|---|---|---|---|"]
    rows += [f"| {t.verb} | {t.difficulty} | {t.summary} | {'yes' if t.implemented else 'no'} |" for t in tasks()]
    return "\n".join(rows)
