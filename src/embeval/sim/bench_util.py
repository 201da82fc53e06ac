"""Measurement helpers shared by ``embeval sim expert``, bench/bench_sim.py and the tests."""
from __future__ import annotations

import time
from typing import Any

from embeval.sim.env import SimEnv
from embeval.sim.workcell import SimConfig


def run_expert_episode(env: SimEnv, verb: str, seed: int, render: bool | None = None):
    """One seeded expert episode; returns the last :class:`~embeval.sim.env.StepResult`."""
    obs = env.reset(seed=seed, task=verb, render=render)
    expert = env.expert()
    result = None
    while not env.done:
        result = env.step(expert.act(obs), render=render)
        obs = result.observation
    return result


def expert_success(verb: str, episodes: int, seed0: int = 0, config: SimConfig | None = None) -> dict[str, Any]:
    """Success rate of the scripted expert on ``episodes`` seeded episodes (seeds seed0 .. seed0+episodes-1)."""
    ok, steps, substeps, failures = 0, 0, 0, []
    t0 = time.perf_counter()
    with SimEnv(config or SimConfig(render=False)) as env:
        for s in range(seed0, seed0 + episodes):
            r = run_expert_episode(env, verb, s)
            ok += bool(r.success)
            steps += env.n_steps
            substeps += env.cell.steps
            if not r.success:
                failures.append((s, r.reason))
    dt = time.perf_counter() - t0
    return {"task": verb, "episodes": episodes, "successes": ok, "rate": ok / max(episodes, 1),
            "steps_per_episode": steps / max(episodes, 1), "seconds_per_episode": dt / max(episodes, 1),
            "physics_steps_per_s": substeps / dt if dt > 0 else float("nan"), "failures": failures}


def maniskill_expert_success(task: str, episodes: int, seed0: int = 0) -> dict:
    """Success rate of the ManiSkill expert (:mod:`embeval.sim.maniskill.expert`) on seeds ``seed0 .. seed0 + episodes - 1`` (state-only env)."""
    from embeval.sim.maniskill.env import ManiSkillConfig, ManiSkillEnv
    from embeval.sim.maniskill.expert import run_expert

    ok, steps, failures = 0, 0, []
    with ManiSkillEnv(ManiSkillConfig(task, render=False)) as env:
        t0 = time.perf_counter()
        for s in range(seed0, seed0 + episodes):
            r = run_expert(env, s)
            ok += bool(r.success)
            steps += env.control_steps
            if not r.success:
                failures.append((s, r.reason))
        dt = time.perf_counter() - t0
    return {"task": task, "episodes": episodes, "successes": ok, "rate": ok / max(episodes, 1),
            "control_steps_per_episode": steps / max(episodes, 1), "seconds_per_episode": dt / max(episodes, 1),
            "failures": failures}
