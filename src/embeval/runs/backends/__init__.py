"""Execution backends: ``local`` (in-process, the default) and ``ray`` (a Ray cluster).

A backend runs the given units of a :class:`~embeval.runs.plan.Plan` and hands every finished
batch to ``on_results([(unit, UnitResult), ...])`` as soon as it finishes (the runner writes them
to the store). Add one with a line in :data:`BACKENDS` (``"name": "module:Class"``), or from your own
package through the entry-point group ``embeval.run_backends``.
"""
from __future__ import annotations

from typing import Any, Callable, Protocol, Sequence

from embeval.registry import Registry

#: name -> "module:Class" (imported on first use, so `ray` loads only for the Ray backend)
BACKENDS: Registry = Registry("backend", group="embeval.run_backends", entries={
    "local": "embeval.runs.backends.local:LocalBackend",
    "ray": "embeval.runs.backends.ray_backend:RayBackend",
})

OnResults = Callable[[list], None]


class Backend(Protocol):
    name: str

    def execute(self, plan: Any, units: Sequence[Any], on_results: OnResults) -> None: ...


def get_backend(name: str) -> Backend:
    return BACKENDS.get(name, field="backend")()
