"""The end-to-end demo run by ``make demo`` / ``embeval demo``.

Stages run in registration order; each is ``"module:function"`` taking a :class:`DemoContext`
and printing what it shows. Add a stage by appending one line to ``STAGES`` (a package of your own
can add one through the entry-point group ``embeval.demo_stages``; it runs after the built-ins).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from embeval.registry import Registry

#: name -> "module:function", in run order.
STAGES: Registry = Registry("demo stage", group="embeval.demo_stages", entries={
    "kinematics": "embeval.kinematics.demo:run",
    "workcell": "embeval.sim.demo:run",
    "maniskill": "embeval.sim.maniskill.demo:run",
    "distortion": "embeval.distortion.demo:run",
    "subjects": "embeval.subjects.demo:run",
    "embedded": "embeval.subjects.embedded.demo:run",
    "runs": "embeval.runs.demo:run",
    "iqa": "embeval_analysis.iqa.demo:run",
    "act2answer": "embeval.act2answer.demo:run",
    "a2eval": "embeval_analysis.a2eval.demo:run",
    "ros": "embeval_ros.demo:run",
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
