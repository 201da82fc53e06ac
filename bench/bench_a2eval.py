"""A2Eval benchmarks: evaluation cost of the curated subset vs the full pool (same subjects, same run),
and the sandbox's per-run overhead vs calling the same function in process.

Ratios only: speed-up = full-pool seconds / subset seconds, measured in this run."""
from __future__ import annotations

import time


def run(quick: bool) -> list[dict]:
    import warnings

    import numpy as np

    warnings.filterwarnings("ignore")
    from embeval_analysis.a2eval.data_agent import DataAgentConfig, VoterConfig, curate
    from embeval_analysis.a2eval.procedural import procedural_pool
    from embeval_analysis.a2eval.sandbox import run_sandboxed
    from embeval_analysis.a2eval.subjects import collect_results, embedded_population

    rows = []
    n, k = (240, 6) if quick else (600, 12)
    items = procedural_pool(n_items=n, seed=0)
    subjects = embedded_population(10)
    t0 = time.perf_counter()
    collect_results(subjects, items)
    t_full = time.perf_counter() - t0
    voters = [VoterConfig("llm", "rules", 0), VoterConfig("llm", {"preset": "rules", "variant": 1}, 1),
              VoterConfig("llm", {"preset": "rules", "variant": 2}, 2), VoterConfig("embedding")]
    t0 = time.perf_counter()
    cur = curate(items, DataAgentConfig(voters=voters, k_per_dim=k))
    t_curate = time.perf_counter() - t0
    subset = [items[i] for i in cur.selection.indices]
    from embeval_analysis.a2eval import subjects as S

    S.clear_memo()  # no memoised answers from the full run
    t0 = time.perf_counter()
    collect_results(subjects, subset)
    t_sub = time.perf_counter() - t0
    rows.append({"case": f"evaluate 10 subjects: full pool ({n}) vs A2Eval subset ({len(subset)})",
                 "baseline_s": t_full, "a2eval_s": t_sub, "speedup": t_full / max(t_sub, 1e-9),
                 "items_ratio": n / len(subset), "curation_s (one-off)": t_curate})
    code = "def f(x):\n    return sum(i * i for i in range(x))\n"
    ns: dict = {}
    exec(code, ns)
    reps = 3 if quick else 10
    t0 = time.perf_counter()
    for _ in range(reps):
        ns["f"](1000)
    t_in = (time.perf_counter() - t0) / reps
    t0 = time.perf_counter()
    for _ in range(reps):
        r = run_sandboxed(code, "f", [[1000]])
        assert r.ok
    t_sb = (time.perf_counter() - t0) / reps
    rows.append({"case": "one sandbox run (spawn, limits, guard) vs in-process call", "baseline_s": t_in,
                 "a2eval_s": t_sb, "speedup": t_in / t_sb, "items_ratio": float("nan")})
    return rows
