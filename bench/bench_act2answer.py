"""Act2Answer episode throughput with the embedded tiny VLA, and the full-suite estimate.

The full procedural suite is 1,720 items x 2 layouts = 3,440 episodes (target: <= 30 minutes on a
2-core machine). Quick mode runs a stratified subset and extrapolates; full mode runs all of it.
Baselines measured in the same run on the same items: a model-free "hold" policy (the simulator's
and renderer's share of an episode at the same step cap) and the privileged scripted expert.
Rates are given per wall-clock second and per CPU second of this process (on a shared machine
the CPU rate is the better estimate of an idle machine's wall rate).
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

from bench.timing import restores_torch_threads

FULL_EPISODES = 3440


def _measure(policy_factory, items, spec, obs_size, seed=0):
    from embeval.act2answer.episode import run_items, sim_config
    from embeval.sim import SimEnv

    with SimEnv(sim_config(*obs_size)) as env:
        policy = policy_factory(env)
        list(run_items(policy, items[:1], spec, seed=seed + 99, env=env, layouts=("original",)))  # warm-up
        w0, c0 = time.perf_counter(), time.process_time()
        res = list(run_items(policy, items, spec, seed=seed, env=env, keep_actions=False))
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    steps = sum(r.steps for r in res)
    return res, wall, cpu, steps


@restores_torch_threads
def run(quick: bool = False) -> list[dict]:
    import torch

    from embeval.act2answer.generator import (
        CATEGORIES,
        FULL_SUITE_PER_CATEGORY,
        generate_items,
    )

    torch.set_num_threads(1)
    per_cat = 2 if quick else FULL_SUITE_PER_CATEGORY
    with tempfile.TemporaryDirectory(prefix="bench_a2a_") as tmp:  # the items' rendered images
        return _run_items(generate_items(Path(tmp), list(CATEGORIES), per_cat, seed=0), quick)


def _run_items(items, quick: bool) -> list[dict]:
    from embeval.act2answer.episode import obs_size_for
    from embeval.act2answer.reference_policies import ExpertPolicy
    from embeval.act2answer.scene import EpisodeSpec
    from embeval.act2answer.subjects import embedded_policy
    from embeval.subjects.scripted import ConstantPolicy

    spec = EpisodeSpec()
    vla = embedded_policy("tiny-vla", allow_untrained=True)  # timing only: random weights cost the same
    size = obs_size_for(vla)
    rows = []
    runs = [(vla.id, lambda env: vla, items)]
    base_items = items if quick else items[:: max(1, len(items) // 40)]  # baselines on a subset in full mode
    runs += [("hold (no model)", lambda env: ConstantPolicy(vector=(0, 0, 0, 0, 0, 0, 1)), base_items),
             ("expert (privileged)", lambda env: ExpertPolicy(env, "answer", spec), base_items)]
    ref = None
    for name, factory, its in runs:
        res, wall, cpu, steps = _measure(factory, its, spec, size)
        n = len(res)
        row = {"policy": name, "episodes": n, "obs": f"{size[0]}x{size[1]}", "steps/episode": steps / n,
               "episodes/s (wall)": n / wall, "episodes/s (cpu)": n / cpu,
               "full suite min (wall)": FULL_EPISODES / (n / wall) / 60, "full suite min (cpu)": FULL_EPISODES / (n / cpu) / 60,
               "success": sum(r.success for r in res) / n}
        if ref is None:
            ref = row["episodes/s (cpu)"]
            row["measured"] = "all 3440" if n == FULL_EPISODES else f"subset of {n}, extrapolated"
            row["fits 30 min"] = row["full suite min (cpu)"] <= 30
        else:
            row["speed vs policy (cpu)"] = row["episodes/s (cpu)"] / ref
        rows.append(row)
    return rows
