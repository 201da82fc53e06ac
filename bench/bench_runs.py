"""Throughput (units/s) of the run machinery: local vs Ray backend, against a bare loop.

The baseline is a bare Python loop calling the evaluator's ``run_unit`` with no store, watchdog
or progress bar, measured in the same process; ``vs_bare_loop`` is the backend's throughput over
the baseline's (1.0 = no overhead; Ray can exceed 1 when it runs on several cores). Ray's
numbers include creating the actors but not starting Ray itself (reported separately). All
numbers are wall clock on a shared machine: compare ratios within one run.
"""
from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path


def _spec(n_items: int, work: dict, batch_size: int):
    from embeval.runs.spec import parse_spec

    return parse_spec({
        "name": "bench", "evaluator": "synthetic",
        "subjects": [{"id": "a", "kind": "synthetic"}, {"id": "b", "kind": "synthetic"}],
        "items": {"source": "synthetic", "count": n_items}, "levels": [0, 1], "seeds": [0],
        "params": work,
        "backend": {"progress": False, "num_workers": 2, "batch_size": batch_size, "unit_timeout_s": 60},
    })


def _bare_loop(spec) -> float:
    from embeval.runs.plan import plan_run

    plan = plan_run(spec)
    ev = plan.evaluator
    states = {sid: ev.setup(spec, s) for sid, s in plan.subjects.items()}
    best = 0.0
    for _ in range(2):  # best of two: the machine is shared
        t0 = time.perf_counter()
        for u in plan.units:
            ev.run_unit(spec, states[u.subject], u, u.unit_seed(spec.evaluator))
        best = max(best, len(plan.units) / (time.perf_counter() - t0))
    return best


def _backend(spec, backend: str, root: Path) -> tuple[int, float]:
    from embeval.runs.runner import run

    t0 = time.perf_counter()
    s = run(spec, root / f"{backend}-{spec.hash}-{spec.backend.batch_size}", backend=backend)
    dt = time.perf_counter() - t0
    assert s.failed == 0 and s.done == s.total
    return s.total, s.total / dt


def run(quick: bool = False) -> list[dict]:
    import ray

    n_items = 100 if quick else 500
    rows: list[dict] = []
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    t0 = time.perf_counter()
    started = False
    if not ray.is_initialized():
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
        started = True
    ray.get(ray.remote(lambda: None).remote())  # wait until Ray's processes have settled
    ray_start = time.perf_counter() - t0
    time.sleep(1.0)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            _backend(_spec(1, {}, 1), "ray", Path(tmp))
            actor_start = time.perf_counter() - t0
            for case, work in (("0 ms units (pure overhead)", {}), ("2 ms CPU units", {"work_ms": 2}),
                               ("2 ms waiting units (model server, GPU)", {"sleep_ms": 2})):
                for batch in (1, 16):
                    spec = _spec(n_items, work, batch)
                    base = _bare_loop(spec)
                    for backend in ("local", "ray"):
                        n, ups = _backend(spec, backend, Path(tmp))
                        rows.append({"case": case, "batch": batch, "backend": backend, "units": n,
                                     "units_per_s": round(ups, 1), "bare_loop_units_per_s": round(base, 1),
                                     "vs_bare_loop": round(ups / base, 3)})
    finally:
        if started:
            ray.shutdown()
    rows.append({"case": "ray.init(num_cpus=2), once", "backend": "ray", "seconds": round(ray_start, 2)})
    rows.append({"case": "ray run of 4 units (2 actors start up)", "backend": "ray", "seconds": round(actor_start, 2)})
    return rows
