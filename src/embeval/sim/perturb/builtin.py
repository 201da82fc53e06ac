"""Registers the built-in axes: every module of :mod:`embeval.sim.perturb` that defines ``AXIS = Axis(...)``, image
axes first, then start-state axes, then the instruction (alphabetical within each)."""
from __future__ import annotations

import importlib
import pkgutil

import embeval.sim.perturb as _pkg
from embeval.sim.perturb.axis import AXES, Axis

_KINDS = ("image", "state", "instruction")


def _builtin_axes() -> list[Axis]:
    found = []
    for info in pkgutil.iter_modules(_pkg.__path__):
        axis = getattr(importlib.import_module(f"{_pkg.__name__}.{info.name}"), "AXIS", None)
        if isinstance(axis, Axis):
            found.append(axis)
    return sorted(found, key=lambda a: (_KINDS.index(a.changes), a.name))


for _axis in _builtin_axes():
    AXES.register(_axis.name, _axis, description=_axis.description)
