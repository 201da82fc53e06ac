"""Measurement helpers shared by ``embeval sim expert``, bench/bench_sim.py and the tests."""
from __future__ import annotations

import time
from typing import Any

from embeval.sim.env import SimEnv
from embeval.sim.workcell import SimConfig


def run_expert_episode(env: SimEnv, verb: str, seed: int, render: bool | None = None):
    """One seeded expert episode; returns the last :class:`~embeval.sim.episode_env.StepResult`. Under an open
    episode video (:mod:`embeval.recording.video`) each step's third-person view is recorded (rendered for
    the video when the observations carry no image)."""
    from embeval.recording.video import video_last, video_step

    obs = env.reset(seed=seed, task=verb, render=render)
    expert = env.expert()
    result = None

    def view() -> dict:
        return {"third_person": env.cell.render("third_person", env.config.obs_width, env.config.obs_height)}

    while not env.done:
        action = expert.act(obs)
        video_step(obs, action, render=view)
        result = env.step(action, render=render)
        obs = result.observation
    video_last(obs, render=view)
    return result


def expert_success(verb: str, episodes: int, seed0: int = 0, config: SimConfig | None = None,
                   videos=None, perturb=None) -> dict[str, Any]:
    """Success rate of the scripted expert on ``episodes`` seeded episodes (seeds seed0 .. seed0+episodes-1);
    ``videos``: an :class:`~embeval.recording.video.EpisodeRecorder` (one ``<verb>_seed<s>.mp4`` per episode it keeps);
    ``perturb``: scene-level perturbations applied at each reset (:class:`embeval.sim.perturb.Perturbations`)."""
    from embeval.recording.video import maybe_episode

    ok, steps, substeps, failures = 0, 0, 0, []
    t0 = time.perf_counter()
    with SimEnv(config or SimConfig(render=False), perturb=perturb) as env:
        for s in range(seed0, seed0 + episodes):
            with maybe_episode(videos, f"{verb}_seed{s:04d}") as video:
                r = run_expert_episode(env, verb, s)
                if video is not None:
                    video.finish(bool(r.success), r.reason)
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
