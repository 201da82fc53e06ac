"""A2Eval benchmarks: evaluation cost of the curated subset vs the full pool (same subjects, same run),
and the sandbox's start-up cost per job (plain subprocess vs bubblewrap) and per batched item.

Ratios only: speed-up = full-pool seconds / subset seconds, measured in this run."""
from __future__ import annotations

import time


def run(quick: bool) -> list[dict]:
    import warnings

    warnings.filterwarnings("ignore")
    from embeval_analysis.a2eval.data_agent import DataAgentConfig, VoterConfig, curate
    from embeval_analysis.a2eval.procedural import procedural_pool
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
    rows += _sandbox_rows(quick)
    rows += _model_training_rows(quick)
    return rows


def _sandbox_rows(quick: bool) -> list[dict]:
    """Sandbox start-up per job: the same runner as a plain subprocess (no isolation: the floor of
    the old design, which also preloaded every allowed module on each job) vs the bubblewrap job
    (namespaces, read-only view, seccomp). Median of ``reps`` jobs; target under 0.3 s per job."""
    import statistics

    from embeval_analysis.a2eval import sandbox as S

    reps = 5 if quick else 15
    lim = S.SandboxLimits()
    S.sandbox_view(S.ALLOWED_MODULES)  # the one-off probe of what a job needs, not a per-job cost
    S.check_bwrap()

    def per_job(code: str, isolate: bool, n_inputs: int = 1) -> float:
        ts = []
        for _ in range(reps):
            r = S._run(code, "f", [[k] for k in range(n_inputs)], lim, {}, S.ALLOWED_MODULES, False, None, False,
                       isolate)
            assert r.ok, r.first_error()
            ts.append(r.seconds)
        return statistics.median(ts)

    empty = "def f(x):\n    return x * x\n"
    preload = "import " + ", ".join(S.ALLOWED_MODULES) + "\n" + empty
    rows = []
    for name, code in (("empty job", empty), ("job importing every allowed module (numpy included)", preload)):
        plain, boxed = per_job(code, False), per_job(code, True)
        rows.append({"case": f"sandbox start-up per job, {name}: plain subprocess vs bubblewrap", "baseline_s": plain,
                     "a2eval_s": boxed, "speedup": plain / boxed, "target": "a2eval_s < 0.3"})
    n = 200
    boxed = per_job(preload, True, n)
    rows.append({"case": f"sandbox cost per item, {n} items batched in one job (numpy imported)",
                 "a2eval_s": boxed / n, "items_ratio": n, "target": "a2eval_s < 0.3"})
    ns: dict = {}
    exec(empty, ns)
    t0 = time.perf_counter()
    for _ in range(1000):
        ns["f"](7)
    t_in = (time.perf_counter() - t0) / 1000
    rows.append({"case": "one sandboxed job (empty) vs the same call in process", "baseline_s": t_in,
                 "a2eval_s": rows[0]["a2eval_s"], "speedup": t_in / rows[0]["a2eval_s"]})
    return rows


def _model_training_rows(quick: bool) -> list[dict]:
    """Training throughput of the A2Eval model subjects (``embeval train a2eval``): the widest member
    (a2eval-wide) against the reference member (a2eval-base), same items, one thread, in this run.
    Ratio = wide ms per step / base ms per step; items/s = batch / seconds per step."""
    from dataclasses import asdict

    import torch

    from embeval.subjects.embedded.training import TrainConfig
    from embeval_analysis.a2eval.models import member_config, recipe, scene_qa_arrays, train_scene_qa

    steps = 5 if quick else 40
    threads = torch.get_num_threads()
    out, base_ms = [], None
    try:
        for name in ("a2eval-base", "a2eval-wide"):
            r = recipe(name)
            cfg = member_config(r)
            tc = TrainConfig(**{**asdict(TrainConfig()), **r.train, "steps": steps, "log_every": steps})
            data = scene_qa_arrays(cfg, 20, r.data_seed, r.dimensions or None)
            _, res = train_scene_qa(data, cfg, tc, seed=0, id=name)
            ms = 1000 * res.seconds / steps
            base_ms = base_ms or ms
            out.append({"case": f"{name} train step b{tc.batch_size} (1 thread): {tc.batch_size * 1000 / ms:.0f} items/s",
                        "ms": ms, "ratio": ms / base_ms, "full recipe steps": r.train.get("steps")})
    finally:
        torch.set_num_threads(threads)
    return out
