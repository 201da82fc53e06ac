"""Simulation throughput: physics steps/s and expert episodes/s with and without rendering.

Baselines measured in the same run: bare ``pybullet.stepSimulation`` on the same scene (for the
workcell's substep overhead: kinematic arm update, carry, contact checks) and the no-render
episode rate (for the cost of rendering observations).
"""
from __future__ import annotations

import time

from embeval.sim.bench_util import run_expert_episode
from embeval.sim.env import SimEnv
from embeval.sim.expert import PLANNERS
from embeval.sim.workcell import SimConfig

VERBS = tuple(PLANNERS)  # every implemented task


def _episodes(config: SimConfig, verb: str, n: int) -> tuple[float, float, int]:
    with SimEnv(config) as env:
        run_expert_episode(env, verb, 10_000)  # warm-up
        t0 = time.perf_counter()
        substeps = ok = 0
        for s in range(n):
            r = run_expert_episode(env, verb, s)
            substeps += env.cell.steps
            ok += bool(r.success)
        dt = time.perf_counter() - t0
    return n / dt, substeps / dt, ok


def run(quick: bool = False) -> list[dict]:
    n = 3 if quick else 20
    rows: list[dict] = []

    # physics steps/s: bare pybullet vs the workcell substep (arm update + carry + contact checks)
    with SimEnv(SimConfig(render=False)) as env:
        env.reset(0, "Place")
        cell, p = env.cell, env.cell.p
        k = 300 if quick else 2000
        t_bare = t_ours = 0.0
        for _ in range(k // 100):  # interleaved blocks so machine load hits both alike
            t0 = time.perf_counter()
            for _ in range(100):
                p.stepSimulation(physicsClientId=cell.client)
            t_bare += time.perf_counter() - t0
            t0 = time.perf_counter()
            for _ in range(100):
                cell._substep(cell.q, cell.gripper)
            t_ours += time.perf_counter() - t0
        bare, ours = k / t_bare, k / t_ours
        rows.append({"case": "physics steps/s, bare pybullet (Place scene)", "value": bare, "ratio": 1.0})
        rows.append({"case": "physics steps/s, workcell substep", "value": ours, "ratio": ours / bare})
        full_fps = None
        for w, h in ((640, 480), (128, 96)):  # ratio against the 640x480 reference-image render
            m = 3 if quick else 10
            t0 = time.perf_counter()
            for _ in range(m):
                cell.render("third_person", w, h)
            fps = m / (time.perf_counter() - t0)
            full_fps = full_fps or fps
            rows.append({"case": f"renders/s third_person {w}x{h}", "value": fps, "ratio": fps / full_fps})

    for verb in (VERBS[:2] if quick else VERBS):
        base_eps, base_sps, ok = _episodes(SimConfig(render=False), verb, n)
        rows.append({"case": f"{verb}: episodes/s, no render", "value": base_eps, "ratio": 1.0, "steps/s": base_sps,
                     "success": f"{ok}/{n}"})
        eps, sps, ok = _episodes(SimConfig(render=True), verb, max(2, n // 4))
        rows.append({"case": f"{verb}: episodes/s, render 2 cams 128x96 each step", "value": eps, "ratio": eps / base_eps,
                     "steps/s": sps, "success": f"{ok}/{max(2, n // 4)}"})
    # Act2Answer-like: a Move episode with both cameras rendered only at reset and at the end
    with SimEnv(SimConfig(render=False)) as env:
        t0 = time.perf_counter()
        for s in range(n):
            run_expert_episode(env, "Move", s, render=False)
            env.observe(render=True)  # the cost of the two observations (start and end), 2 cameras each
            env.observe(render=True)
        per = (time.perf_counter() - t0) / n
    rows.append({"case": "Act2Answer-like Move episode, 2 renders (s/episode)", "value": per, "ratio": per / 0.5,
                 "success": "target 0.5 s (ratio = measured / target)"})
    eps, sps, ok = _episodes(SimConfig(render=False, mode="kinematic"), "Pick", n)
    base_eps = next(r["value"] for r in rows if r["case"].startswith("Pick: episodes/s, no render"))
    rows.append({"case": "Pick: episodes/s, kinematic mode", "value": eps, "ratio": eps / base_eps, "steps/s": sps,
                 "success": f"{ok}/{n}"})
    return rows
