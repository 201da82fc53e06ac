"""ManiSkill3 on the CPU (software Vulkan) next to the pybullet UR5 cell, measured in the same run.

Baseline (ratio 1.0): embeval actions/s in the pybullet cell (Pick, the scripted expert's actions,
no rendering). ManiSkill rows: PickCube-v1 control steps/s through :class:`ManiSkillEnv` (one
``pd_ee_delta_pose`` step per action) state-only, with its one camera at 128x128 and at 640x480;
the scripted expert's episodes/s; the time to build an env.
"""
from __future__ import annotations

import time

import numpy as np


def _pybullet_actions_per_s(n_episodes: int, render: bool) -> float:
    from embeval.sim.bench_util import run_expert_episode
    from embeval.sim.env import SimEnv
    from embeval.sim.workcell import SimConfig

    with SimEnv(SimConfig(render=render)) as env:
        run_expert_episode(env, "Pick", 10_000)  # warm-up
        t0, steps = time.perf_counter(), 0
        for s in range(n_episodes):
            run_expert_episode(env, "Pick", s)
            steps += env.n_steps
        return steps / (time.perf_counter() - t0)


def _maniskill_steps_per_s(n: int, render: bool, w: int = 128, h: int = 128) -> tuple[float, float]:
    from embeval.action import Action
    from embeval.sim.maniskill.env import ManiSkillConfig, ManiSkillEnv

    t0 = time.perf_counter()
    env = ManiSkillEnv(ManiSkillConfig("PickCube-v1", render=render, width=w, height=h, max_steps=10**6))
    build = time.perf_counter() - t0
    try:
        env.reset(seed=0)
        rng = np.random.default_rng(0)
        acts = [Action(np.r_[rng.uniform(-0.01, 0.01, 3), 0, 0, 0, 1]) for _ in range(n)]
        env.step(acts[0])  # warm-up
        t0 = time.perf_counter()
        for a in acts:
            env.step(a)
        return n / (time.perf_counter() - t0), build
    finally:
        env.close()


def run(quick: bool = False) -> list[dict]:
    from embeval.sim.bench_util import maniskill_expert_success as expert_success

    rows: list[dict] = []
    base = _pybullet_actions_per_s(2 if quick else 10, render=False)
    rows.append({"case": "pybullet cell: actions/s (Pick expert, no render)", "value": base, "ratio": 1.0})
    cam = _pybullet_actions_per_s(1 if quick else 3, render=True)
    rows.append({"case": "pybullet cell: actions/s (2 cameras 128x96)", "value": cam, "ratio": cam / base})
    for label, render, w, h, n in (("state only", False, 128, 128, 100 if quick else 500),
                                   ("one camera 128x128", True, 128, 128, 10 if quick else 60),
                                   ("one camera 640x480", True, 640, 480, 5 if quick else 30)):
        sps, build = _maniskill_steps_per_s(n, render, w, h)
        rows.append({"case": f"ManiSkill PickCube-v1: steps/s, {label}", "value": sps, "ratio": sps / base,
                     "build_s": build})
    r = expert_success("PickCube-v1", 3 if quick else 20)
    rows.append({"case": "ManiSkill PickCube-v1: expert episodes/s (state only)", "value": 1.0 / r["seconds_per_episode"],
                 "ratio": "", "success": f"{r['successes']}/{r['episodes']}",
                 "steps/episode": r["control_steps_per_episode"]})
    return rows
