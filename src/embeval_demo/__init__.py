"""The end-to-end demo run by ``make demo`` / ``embeval demo``.

Stages run in registration order; each is ``"module:function"`` taking a :class:`DemoContext`
and printing what it shows. Add a stage by appending one line to ``STAGES`` (a package of your own
can add one through the entry-point group ``embeval.demo_stages``; it runs after the built-ins).

Layering: ``embeval_demo`` is a top layer, like ``embeval_cli``. Its stages (one module each in this
package) tour the whole suite, so they may import anything: the core layers, the analysis package
(``embeval_analysis``) and the ROS adapters (``embeval_ros``). Nothing in the library imports this
package, which keeps the layering rule (tests/project/test_layering.py) free to forbid imports that run from
the lower layers up into ``subjects``, ``runs``, ``act2answer``, ``serving`` and the analysis package.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from embeval.registry import Registry

#: name -> "module:function", in run order.
STAGES: Registry = Registry("demo stage", group="embeval.demo_stages", entries={
    "kinematics": "embeval_demo.kinematics:run",
    "workcell": "embeval_demo.workcell:run",
    "maniskill": "embeval_demo.maniskill:run",
    "libero": "embeval_demo.libero:run",
    "distortion": "embeval_demo.distortion:run",
    "subjects": "embeval_demo.subjects:run",
    "embedded": "embeval_demo.embedded:run",
    "runs": "embeval_demo.runs:run",
    "iqa": "embeval_demo.iqa:run",
    "act2answer": "embeval_demo.act2answer:run",
    "a2eval": "embeval_demo.a2eval:run",
    "perturbations": "embeval_demo.perturbations:run",
    "ros": "embeval_demo.ros:run",
    "report": "embeval_demo.report:run",  # last: the report shows every stage's episode videos
})


@dataclass
class DemoContext:
    out_dir: Path
    seed: int = 0
    quick: bool = False
    #: stages may leave results here for later stages (e.g. trained subjects)
    shared: dict[str, Any] = field(default_factory=dict)


def run(ctx: DemoContext, only: list[str] | None = None, skip: list[str] | None = None) -> dict[str, float]:
    """Run the selected stages; returns seconds per stage."""
    for sel in (only or []) + (skip or []):
        if sel not in STAGES:
            raise STAGES.unknown(sel)
    timings: dict[str, float] = {}
    ctx.out_dir.mkdir(parents=True, exist_ok=True)
    for name in STAGES.names():
        if only and name not in only:
            continue
        if skip and name in skip:
            continue
        print(f"\n=== embeval demo: {name} " + "=" * max(0, 60 - len(name)), flush=True)
        t0 = time.perf_counter()
        STAGES.get(name)(ctx)
        timings[name] = time.perf_counter() - t0
        print(f"--- {name} done in {timings[name]:.1f} s", flush=True)
    return timings
