"""The end-to-end demo run by ``make demo`` / ``embeval demo``.

Stages run in order; each is ``"module:function"`` taking a :class:`DemoContext`
and printing what it shows. Add a stage by appending one line to ``STAGES``.
"""
from __future__ import annotations

import importlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: (name, "module:function") in run order.
STAGES: list[tuple[str, str]] = [
    ("kinematics", "embeval.kinematics.demo:run"),
    ("workcell", "embeval.sim.demo:run"),
    ("maniskill", "embeval.sim.maniskill.demo:run"),
    ("distortion", "embeval.distortion.demo:run"),
    ("subjects", "embeval.subjects.demo:run"),
    ("embedded", "embeval.subjects.embedded.demo:run"),
    ("runs", "embeval.runs.demo:run"),
    ("iqa", "embeval_analysis.iqa.demo:run"),
    ("act2answer", "embeval.act2answer.demo:run"),
    ("a2eval", "embeval_analysis.a2eval.demo:run"),
    ("ros", "embeval_ros.demo:run"),
]


@dataclass
class DemoContext:
    out_dir: Path
    seed: int = 0
    quick: bool = False
    #: stages may leave results here for later stages (e.g. trained subjects)
    shared: dict[str, Any] = field(default_factory=dict)


def resolve(target: str):
    module, func = target.split(":")
    return getattr(importlib.import_module(module), func)


def run(ctx: DemoContext, only: list[str] | None = None, skip: list[str] | None = None) -> dict[str, float]:
    """Run the selected stages; returns seconds per stage."""
    names = [n for n, _ in STAGES]
    for sel in (only or []) + (skip or []):
        if sel not in names:
            from embeval.errors import ConfigError

            raise ConfigError(f"unknown demo stage {sel!r}; choose from {', '.join(names)}")
    timings: dict[str, float] = {}
    ctx.out_dir.mkdir(parents=True, exist_ok=True)
    for name, target in STAGES:
        if only and name not in only:
            continue
        if skip and name in skip:
            continue
        print(f"\n=== embeval demo: {name} " + "=" * max(0, 60 - len(name)), flush=True)
        t0 = time.perf_counter()
        resolve(target)(ctx)
        timings[name] = time.perf_counter() - t0
        print(f"--- {name} done in {timings[name]:.1f} s", flush=True)
    return timings
