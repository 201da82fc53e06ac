"""Execution backends: ``local`` (in-process, the default) and ``ray`` (a Ray cluster).

A backend runs the given units of a :class:`~embeval.runs.plan.Plan` and hands every finished
batch to ``on_results([(unit, UnitResult), ...])`` as soon as it finishes (the runner writes them
to the store). Add one with a line in :data:`BACKENDS` (``"name": "module:Class"``).
"""
from __future__ import annotations

import importlib
from typing import Any, Callable, Protocol, Sequence

from embeval.errors import ConfigError

#: name -> "module:Class" (imported on first use, so `ray` loads only for the Ray backend)
BACKENDS: dict[str, str] = {
    "local": "embeval.runs.backends.local:LocalBackend",
    "ray": "embeval.runs.backends.ray_backend:RayBackend",
}

OnResults = Callable[[list], None]


class Backend(Protocol):
    name: str

    def execute(self, plan: Any, units: Sequence[Any], on_results: OnResults) -> None: ...


def get_backend(name: str) -> Backend:
    try:
        target = BACKENDS[name]
    except KeyError:
        raise ConfigError(f"backend: unknown backend {name!r}; choose from {', '.join(BACKENDS)}") from None
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)()
