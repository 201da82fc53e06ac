"""The perturbation-axis record and its registry.

An :class:`Axis` is one way to change the simulated world *before* the camera (LIBERO-Plus style), beside the
30 image distortions that change the picture *after* it. It declares the :class:`Quantity` (physical units)
each of its five severity levels draws from, a seeded ``sample`` and how it is applied at reset: ``scene``
changes the scene/task specs before the workcell loads them, ``cell`` changes the loaded workcell (joints,
wall textures). Built-in axes are the other modules of this package, one file per axis, each defining
``AXIS = Axis(...)``; installed packages add one through the ``embeval.perturbations`` entry-point group.
"""
from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from embeval.errors import ConfigError
from embeval.registry import RecordKind, Registry

if TYPE_CHECKING:
    from embeval.sim.predicates import TaskSpec
    from embeval.sim.scene import SceneSpec
    from embeval.sim.workcell import Workcell

#: severity levels: 1 mildest .. 5 most severe
LEVELS: tuple[int, ...] = (1, 2, 3, 4, 5)

Params = dict[str, Any]
#: ``sample(rng, level, scene, task or None) -> params`` (JSON-able, in the axis's units)
Sampler = Callable[[np.random.Generator, int, "SceneSpec", "TaskSpec | None"], Params]
#: ``scene(scene, task or None, params) -> (scene, task)``: new specs (the inputs are not modified)
SceneHook = Callable[["SceneSpec", "TaskSpec | None", Params], "tuple[SceneSpec, TaskSpec | None]"]
#: ``cell(workcell, params) -> None``: changes the loaded workcell; ConfigError when the task became unsolvable
CellHook = Callable[["Workcell", Params], None]


@dataclass(frozen=True)
class Quantity:
    """One measured quantity of an axis: ``name`` in ``unit``, five ``(low, high)`` ranges (level 1..5, rising,
    not overlapping). ``signed``: the sign (e.g. narrower or wider) is drawn from the seed; the level sets the
    magnitude."""

    name: str
    unit: str
    ranges: tuple[tuple[float, float], ...]
    signed: bool = False

    def __post_init__(self):
        if len(self.ranges) != len(LEVELS):
            raise ConfigError(f"quantity {self.name!r}: give {len(LEVELS)} (low, high) ranges, got {len(self.ranges)}")
        prev = -np.inf
        for lo, hi in self.ranges:
            if not (np.isfinite(lo) and np.isfinite(hi) and 0 <= lo <= hi and lo >= prev):
                raise ConfigError(f"quantity {self.name!r}: ranges must be finite, 0 <= low <= high and rising "
                                  f"without overlap, got {self.ranges}")
            prev = hi

    def range(self, level: int) -> tuple[float, float]:
        return self.ranges[level - 1]

    def magnitude(self, level: int, u: float) -> float:
        """The value at fraction ``u`` (0..1) of the level's range: the same ``u`` gives a larger value at a
        higher level (monotone in level for one seed)."""
        lo, hi = self.range(level)
        return float(lo + u * (hi - lo))

    def describe(self, level: int) -> str:
        lo, hi = self.range(level)
        span = f"{lo:g}" if lo == hi else f"{lo:g}-{hi:g}"
        return f"{'±' if self.signed else ''}{span} {self.unit}"


@dataclass(frozen=True)
class Axis:
    """One scene-level perturbation axis (see the module docstring). ``changes`` says what it touches:
    ``"image"`` (what the cameras see; the world state is unchanged), ``"state"`` (the physical start state) or
    ``"instruction"``. ``direction``: the measurable effect that grows with the level (empty: none)."""

    name: str
    quantities: tuple[Quantity, ...]
    sample: Sampler = field(repr=False)
    scene: SceneHook | None = field(default=None, repr=False)
    cell: CellHook | None = field(default=None, repr=False)
    changes: str = "image"
    description: str = ""
    direction: str = ""
    #: ``note(params) -> str``: what one episode drew, in a few words (contact-sheet notes); None: the params
    note: Callable[[Params], str] | None = field(default=None, repr=False)

    def summary(self, params: Params) -> str:
        """What ``params`` drew, in a few words."""
        if self.note is not None:
            return self.note(params)
        return ", ".join(f"{k} {v:.3g}" for k, v in params.items() if isinstance(v, (int, float)))

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.isidentifier() or self.name != self.name.lower():
            raise ConfigError(f"perturbation axis names are lower-case identifiers such as 'camera_pose', got {self.name!r}")
        if not self.quantities or not all(isinstance(q, Quantity) for q in self.quantities):
            raise ConfigError(f"axis {self.name!r}: give at least one Quantity (name, unit, five ranges)")
        if self.scene is None and self.cell is None:
            raise ConfigError(f"axis {self.name!r}: give a scene hook, a cell hook or both")
        if self.changes not in ("image", "state", "instruction"):
            raise ConfigError(f"axis {self.name!r}: changes must be 'image', 'state' or 'instruction', got {self.changes!r}")

    @property
    def unit(self) -> str:
        return ", ".join(f"{q.name} ({q.unit})" for q in self.quantities)

    def level_text(self, level: int) -> str:
        """The level's ranges in words ("±2-4 deg"; "translation 1-2 cm; rotation 1-2 deg")."""
        if len(self.quantities) == 1:
            return self.quantities[0].describe(level)
        return "; ".join(f"{q.name} {q.describe(level)}" for q in self.quantities)

    def rng(self, seed: int) -> np.random.Generator:
        """The axis's generator for an episode ``seed``: independent of the level and of the other axes (one seed
        draws the same direction at every level; composing axes does not change what each draws)."""
        return np.random.default_rng([int(seed), zlib.crc32(self.name.encode())])


AXES: Registry[Axis] = Registry(
    "perturbation axis", group="embeval.perturbations", builtins="embeval.sim.perturb.builtin",
    record=RecordKind(Axis, home="embeval.sim.perturb"),
    hint="`embeval perturb list` lists them; add one with a file defining AXIS = Axis(...) in embeval/sim/perturb/")

#: ``axes() -> list[Axis]``: every registered axis, in registry order
axes = AXES.records


def get_axis(name: str) -> Axis:
    """The axis registered as ``name``; :class:`ConfigError` naming ``--perturb`` (did you mean, the choices) otherwise."""
    return AXES.get_record(name, "--perturb")
