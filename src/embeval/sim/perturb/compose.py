"""Composing axes: parse ``AXIS:LEVEL`` words, sample every axis from the episode seed, apply them at reset.

``Perturbations.parse(["camera_pose:3", "fov:2"])`` (or ``"camera_pose:3,fov:2"``) -> :class:`Perturbations`;
:meth:`Perturbations.prepare` samples each axis with its own generator (:meth:`Axis.rng`, from the episode seed
and the axis name only) and applies the scene hooks in registry order (not the order given: the result does not
depend on it); :meth:`Prepared.after_load` applies the cell hooks once the workcell holds the scene.
An unknown axis, a level outside 1..5, an axis given twice or a combination that leaves the task unsolvable
is a one-line :class:`~embeval.errors.ConfigError`.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from embeval.errors import ConfigError
from embeval.sim.perturb.axis import AXES, LEVELS, Axis, Params, get_axis

if TYPE_CHECKING:
    from embeval.sim.predicates import TaskSpec
    from embeval.sim.scene import SceneSpec
    from embeval.sim.workcell import Workcell


@dataclass(frozen=True)
class Perturbation:
    """One axis at one severity level (1..5)."""

    axis: str
    level: int

    def __post_init__(self):
        get_axis(self.axis)  # unknown: "did you mean", the choices
        if isinstance(self.level, bool) or not isinstance(self.level, int) or self.level not in LEVELS:
            raise ConfigError(f"--perturb {self.axis}: level must be a whole number 1..5, got {self.level!r}")

    def __str__(self) -> str:
        return f"{self.axis}:{self.level}"


@dataclass
class Prepared:
    """The perturbed specs of one episode, what each axis drew, and the cell hooks still to run."""

    scene: SceneSpec
    task: TaskSpec | None
    applied: list[tuple[Axis, int, Params]] = field(default_factory=list)

    def after_load(self, cell: Workcell) -> None:
        """Apply the cell hooks (registry order) to the loaded workcell."""
        for axis, _, params in self.applied:
            if axis.cell is not None:
                axis.cell(cell, params)

    def record(self) -> dict[str, Any]:
        """``{axis: {"level": n, **params}}``: what each axis drew, in its units (for episode JSON)."""
        return {axis.name: {"level": level, **params} for axis, level, params in self.applied}


class Perturbations(tuple):
    """An ordered set of :class:`Perturbation` (one per axis), kept in registry order."""

    def __new__(cls, items: Iterable[Perturbation] = ()):
        items = list(items)
        seen: dict[str, int] = {}
        for p in items:
            if p.axis in seen:
                raise ConfigError(f"--perturb: axis {p.axis!r} given twice ({p.axis}:{seen[p.axis]} and {p}); give each axis once")
            seen[p.axis] = p.level
        order = AXES.names()
        return super().__new__(cls, sorted(items, key=lambda p: order.index(p.axis)))

    @classmethod
    def parse(cls, words: str | Iterable[str] | None) -> Perturbations:
        """``"camera_pose:3"``, ``"camera_pose:3,fov:2"`` or a list of such words -> :class:`Perturbations`."""
        if words is None:
            return cls()
        if isinstance(words, str):
            words = [words]
        items = []
        for word in words:
            for part in str(word).split(","):
                part = part.strip()
                if not part:
                    continue
                name, sep, level = part.partition(":")
                if not sep or not level.strip().lstrip("-").isdigit():
                    raise ConfigError(f"--perturb {part!r}: write AXIS:LEVEL with a level 1..5, e.g. camera_pose:3 "
                                      "(`embeval perturb list` lists the axes)")
                items.append(Perturbation(name.strip(), int(level)))
        return cls(items)

    def __str__(self) -> str:
        return ",".join(str(p) for p in self)

    def prepare(self, scene: SceneSpec, task: TaskSpec | None, seed: int) -> Prepared:
        """Sample every axis for episode ``seed`` and apply the scene hooks (see the module docstring)."""
        prep = Prepared(scene, task)
        for p in self:
            axis = get_axis(p.axis)
            params = axis.sample(axis.rng(seed), p.level, prep.scene, prep.task)
            if axis.scene is not None:
                prep.scene, prep.task = axis.scene(prep.scene, prep.task, params)
            prep.applied.append((axis, p.level, params))
        return prep


def load(cell: Workcell, scene: SceneSpec, task: TaskSpec | None, seed: int,
         perturb: Perturbations | None) -> Prepared:
    """Load ``scene`` into ``cell`` under ``perturb`` (None or empty: as it is) for episode ``seed``; returns what
    was applied (its ``scene`` and ``task`` are the perturbed specs)."""
    prep = perturb.prepare(scene, task, seed) if perturb else Prepared(scene, task)
    cell.load(prep.scene)
    prep.after_load(cell)
    return prep
