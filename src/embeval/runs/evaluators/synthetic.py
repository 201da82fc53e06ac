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
from typing import Any

import numpy as np

from embeval.config import number
from embeval.errors import ConfigError
from embeval.runs.registry import Evaluator, ReportSection
from embeval.runs.spec import SubjectEntry

_PARAMS = ("work_ms", "sleep_ms", "fail_items", "fail_flag", "hang_items", "hang_s", "setup_ms", "group_by", "crash_items",
           "hang_holds_gil")


class SyntheticEvaluator(Evaluator):
    subject_kinds = ("synthetic",)
    batches = True

    def validate(self, spec) -> None:
        for k in spec.params:
            if k not in _PARAMS:
                raise ConfigError(f"spec.params.{k}: unknown parameter of evaluator 'synthetic'; allowed: {', '.join(_PARAMS)}")
        for k, hi in (("work_ms", 3.6e6), ("sleep_ms", 3.6e6), ("setup_ms", 3.6e6), ("hang_s", 7 * 24 * 3600.0)):
            if k in spec.params:  # a time per unit: finite, and at most an hour (hang_s: a week)
                number(spec.params[k], f"spec.params.{k}", minimum=0, maximum=hi,
                       why="milliseconds, at most an hour" if k.endswith("_ms") else "seconds, at most a week")
        if spec.params.get("group_by", "item") not in ("item", "unit"):
            raise ConfigError("spec.params.group_by: must be 'item' (all units of an item together) or 'unit'")

    def default_subjects(self, spec):
        return (SubjectEntry(id="synthetic", kind="synthetic"),)

    def group_key(self, unit) -> str:
        return f"{unit.subject}|{unit.item}"

    def units(self, spec):
        units = super().units(spec)
        if spec.params.get("group_by", "item") == "unit":
            from dataclasses import replace

            units = [replace(u, group="|".join(map(str, u.key))) for u in units]
        return units

    def setup(self, spec, subject) -> dict[str, Any]:
        ms = float(spec.params.get("setup_ms", 0))
        if ms:
            time.sleep(ms / 1000)
        return {"subject": subject.id, "offset": len(subject.id) * 0.01 + float(subject.params.get("offset", 0.0))}

    def run_unit(self, spec, state, unit, unit_seed) -> dict[str, Any]:
        p = spec.params
        if unit.item in p.get("crash_items", ()):
            os._exit(3)  # a worker lost mid-unit (segfault, OOM kill, preempted node)
        if unit.item in p.get("hang_items", ()):
            if p.get("hang_holds_gil"):
                import ctypes

                ctypes.PyDLL(None).sleep(int(p.get("hang_s", 3600)))  # libc sleep, GIL held: no Python thread runs
            else:
                time.sleep(float(p.get("hang_s", 3600)))
        if unit.item in p.get("fail_items", ()):
            flag = p.get("fail_flag")
            if flag is None or os.path.exists(spec.resolve_path(flag)):
                raise RuntimeError(f"synthetic failure on item {unit.item}")
        if p.get("sleep_ms"):
            time.sleep(float(p["sleep_ms"]) / 1000)
        work = float(p.get("work_ms", 0)) / 1000
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
