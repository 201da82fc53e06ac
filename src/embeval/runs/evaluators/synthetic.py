"""``synthetic``: a cheap, deterministic evaluator for testing and benchmarking the run machinery.

Each unit draws numbers from a generator seeded with the unit seed and (optionally) spends
``params.work_ms`` milliseconds of CPU. Subjects are of kind ``synthetic`` (no model). Knobs for
tests: ``params.fail_items`` fail while the file ``params.fail_flag`` exists (or always when no
flag is given); ``params.hang_items`` sleep ``params.hang_s`` seconds (the watchdog's business; with
``params.hang_holds_gil: true`` in C with the GIL held, which only the Ray driver's watchdog ends);
``params.setup_ms`` simulates loading a model once per subject and worker; ``params.crash_items``
end the worker process (``os._exit``: for testing the loss of Ray workers, never use it locally).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from embeval import checks
from embeval.config import number
from embeval.errors import ConfigError
from embeval.runs.registry import Evaluator, EvaluatorParams, ReportSection
from embeval.runs.spec import SubjectEntry

#: the most a per-unit time may be: an hour (``*_ms``, milliseconds), a week (``hang_s``, seconds)
_TIME_LIMITS = {"work_ms": 3.6e6, "sleep_ms": 3.6e6, "setup_ms": 3.6e6, "hang_s": 7 * 24 * 3600.0}


@dataclass(frozen=True)
class SyntheticParams(EvaluatorParams):
    """``spec.params`` of ``synthetic`` (module docstring); times in milliseconds (``hang_s``: seconds)."""

    work_ms: float = 0.0
    sleep_ms: float = 0.0
    fail_items: tuple[str, ...] = ()
    fail_flag: str | None = None
    hang_items: tuple[str, ...] = ()
    hang_s: float = 3600.0
    setup_ms: float = 0.0
    group_by: str = "item"  # "item" (all units of an item share a group) or "unit"
    crash_items: tuple[str, ...] = ()
    hang_holds_gil: bool = False

    @classmethod
    def parse(cls, params: dict[str, Any]) -> SyntheticParams:
        for k, hi in _TIME_LIMITS.items():
            if k in params:  # a time per unit: finite, and at most an hour (hang_s: a week)
                params[k] = float(number(params[k], f"spec.params.{k}", minimum=0, maximum=hi,
                                         why="milliseconds, at most an hour" if k.endswith("_ms") else "seconds, at most a week"))
        if params.get("group_by", "item") not in ("item", "unit"):
            raise ConfigError("spec.params.group_by: must be 'item' (all units of an item together) or 'unit'")
        for k in ("fail_items", "hang_items", "crash_items"):
            if k in params:
                params[k] = checks.strings(params[k], f"spec.params.{k}", empty=True, fix="item ids such as [item00001]")
        if params.get("fail_flag") is not None:
            checks.string(params["fail_flag"], "spec.params.fail_flag", fix="a file path")
        if "hang_holds_gil" in params:
            checks.flag(params["hang_holds_gil"], "spec.params.hang_holds_gil")
        return cls(**params)


class SyntheticEvaluator(Evaluator):
    subject_kinds = ("synthetic",)
    batches = True
    params_type = SyntheticParams

    def default_subjects(self, spec):
        return (SubjectEntry(id="synthetic", kind="synthetic"),)

    def group_key(self, unit) -> str:
        return f"{unit.subject}|{unit.item}"

    def units(self, spec):
        units = super().units(spec)
        if self.params(spec).group_by == "unit":
            from dataclasses import replace

            units = [replace(u, group="|".join(map(str, u.key))) for u in units]
        return units

    def setup(self, spec, subject) -> dict[str, Any]:
        p = self.params(spec)
        if p.setup_ms:
            time.sleep(p.setup_ms / 1000)
        return {"subject": subject.id, "offset": len(subject.id) * 0.01 + float(subject.params.get("offset", 0.0)),
                "params": p}

    def run_unit(self, spec, state, unit, unit_seed) -> dict[str, Any]:
        p: SyntheticParams = state["params"]
        if unit.item in p.crash_items:
            os._exit(3)  # a worker lost mid-unit (segfault, OOM kill, preempted node)
        if unit.item in p.hang_items:
            if p.hang_holds_gil:
                import ctypes

                ctypes.PyDLL(None).sleep(int(p.hang_s))  # libc sleep, GIL held: no Python thread runs
            else:
                time.sleep(p.hang_s)
        if unit.item in p.fail_items:
            if p.fail_flag is None or os.path.exists(spec.resolve_path(p.fail_flag)):
                raise RuntimeError(f"synthetic failure on item {unit.item}")
        if p.sleep_ms:
            time.sleep(p.sleep_ms / 1000)
        work = p.work_ms / 1000
        if work:
            t_end = time.perf_counter() + work
            while time.perf_counter() < t_end:
                pass
        rng = np.random.default_rng(unit_seed)
        score = float(rng.normal() + state["offset"] - 0.1 * unit.level)
        return {"score": score, "u": rng.random(3).round(12).tolist(), "unit_seed": int(unit_seed)}

    def report_sections(self, spec, frame, stamp):
        if frame.empty or "out.score" not in frame:
            return []
        import matplotlib.pyplot as plt

        table = frame.groupby(["subject", "level"])["out.score"].agg(["count", "mean", "std"]).reset_index()
        fig, ax = plt.subplots(figsize=(5, 3.2))
        for sid, g in table.groupby("subject"):
            ax.errorbar(g["level"], g["mean"], yerr=g["std"], marker="o", capsize=3, label=sid)
        ax.set_xlabel("level")
        ax.set_ylabel("mean score")
        ax.legend(fontsize=7)
        ax.set_title(f"synthetic score by level\n{stamp}", fontsize=8)
        fig.tight_layout()
        return [ReportSection("Synthetic scores", html=table.to_html(index=False, float_format="%.4f"), figures=[fig])]
