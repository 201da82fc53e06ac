"""Closed-loop evaluation of a policy in the simulator: success rate with confidence intervals,
and how much its actions change under image distortions."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from embeval.datasets.demos import episode_seed
from embeval.scoring.record import EpisodeRecord


def binomial_ci(k: int, n: int, confidence: float = 0.95) -> dict[str, tuple[float, float]]:
    """Wilson and Clopper-Pearson (exact) intervals for ``k`` successes in ``n`` trials (scipy)."""
    from scipy.stats import binomtest

    if n == 0:
        return {"wilson": (0.0, 1.0), "clopper_pearson": (0.0, 1.0)}
    r = binomtest(k, n)
    w, e = r.proportion_ci(confidence, method="wilson"), r.proportion_ci(confidence, method="exact")
    return {"wilson": (float(w.low), float(w.high)), "clopper_pearson": (float(e.low), float(e.high))}


@dataclass
class EvalReport:
    policy: str
    episodes: list[EpisodeRecord] = field(default_factory=list)  # item: the verb; seed: the scene seed
    seconds: float = 0.0

    @property
    def successes(self) -> int:
        return sum(e.success for e in self.episodes)

    @property
    def rate(self) -> float:
        return self.successes / max(1, len(self.episodes))

    def by_verb(self) -> dict[str, tuple[int, int]]:
        out: dict[str, tuple[int, int]] = {}
        for e in self.episodes:
            k, n = out.get(e.item, (0, 0))
            out[e.item] = (k + e.success, n + 1)
        return out

    def summary(self) -> dict:
        ci = binomial_ci(self.successes, len(self.episodes))
        return {"policy": self.policy, "episodes": len(self.episodes), "successes": self.successes,
                "rate": self.rate, "wilson95": ci["wilson"], "clopper_pearson95": ci["clopper_pearson"],
                "by_verb": {v: {"successes": k, "episodes": n} for v, (k, n) in self.by_verb().items()},
                "seconds": self.seconds}

    def to_dict(self) -> dict:
        return {**self.summary(), "per_episode": [{"verb": e.item, "scene_seed": e.seed, "success": e.success,
                                                    "steps": e.steps, "reason": e.end_reason} for e in self.episodes]}


def evaluate_policy(policy, episodes: int = 20, seed: int = 0, verbs: Sequence[str] = ("Pick", "Place"),
                    log: Callable[[str], None] | None = None, env=None) -> EvalReport:
    """Run ``episodes`` seeded episodes (verbs alternating, scene seeds from the "eval" stream,
    disjoint from the training demonstrations) and record success per episode."""
    from embeval.sim.env import SimEnv
    from embeval.sim.rollout import rollout
    from embeval.sim.workcell import SimConfig

    own = env is None
    if own:
        cams = tuple(getattr(getattr(policy, "cfg", None), "cameras", ("third_person", "wrist")))
        env = SimEnv(SimConfig(obs_cameras=cams))
    rep, t0 = EvalReport(getattr(policy, "id", type(policy).__name__)), time.perf_counter()
    try:
        for i in range(episodes):
            verb = verbs[i % len(verbs)]
            s = episode_seed(seed, i, "eval")
            obs = env.reset(seed=s, task=verb)
            policy.reset(env.task.instruction)
            result = rollout(env, policy, obs).last
            rep.episodes.append(EpisodeRecord(item=verb, instruction=env.task.instruction, subject=rep.policy, seed=s,
                                              success=bool(result and result.success), success_source="sim",
                                              steps=env.n_steps, end_reason=env.reason))
            if log:
                log(f"eval {i + 1}/{episodes}: {verb} seed {s}: {'success' if rep.episodes[-1].success else 'fail (' + env.reason + ')'}")
    finally:
        if own:
            env.close()
    rep.seconds = time.perf_counter() - t0
    return rep


def probe_observations(n: int, seed: int = 0, verbs: Sequence[str] = ("Pick", "Place"), every: int = 4,
                       cameras: Sequence[str] = ("third_person", "wrist")):
    """``n`` (instruction, observation) pairs sampled every ``every`` steps of expert rollouts on
    held-out scenes (the "probe" seed stream)."""
    from embeval.sim.env import SimEnv
    from embeval.sim.workcell import SimConfig

    out = []
    with SimEnv(SimConfig(obs_cameras=tuple(cameras))) as env:
        i = 0
        while len(out) < n:
            obs = env.reset(seed=episode_seed(seed, i, "probe"), task=verbs[i % len(verbs)])
            ex, k = env.expert(), 0
            while not env.done and len(out) < n:
                if k % every == 0:
                    out.append((env.task.instruction, obs))
                obs = env.step(ex.act(obs)).observation
                k += 1
            i += 1
    return out


def action_sensitivity(policy, observations, distortions: Sequence[str], levels: Sequence[int] = (1, 3, 5),
                       seed: int = 0) -> list[dict]:
    """How much ``policy``'s action changes when every camera image is distorted.

    For each distortion type and level: mean/max translation change (mm), mean rotation change
    (rad, L2 of the rotation-delta difference) and the share of flipped gripper commands, over
    ``observations`` ((instruction, Observation) pairs). Distortions come from
    :func:`embeval.distortion.distort` with a seed derived per observation.
    """
    from embeval.action import Observation
    from embeval.distortion import distort
    from embeval.distortion import get as get_distortion
    from embeval.provenance import derive_seed

    ref = []
    for instr, ob in observations:
        policy.reset(instr)
        ref.append(policy.act(ob).vector)
    rows = []
    for name in distortions:
        for level in levels:
            dt, dr, flips = [], [], []
            for j, ((instr, ob), a0) in enumerate(zip(observations, ref)):
                imgs = {c: distort(im, name, level, seed=derive_seed(seed, name, level, j, c)) for c, im in ob.images.items()}
                policy.reset(instr)
                a = policy.act(Observation(imgs, ob.instruction, ob.state, ob.timestamp)).vector
                dt.append(1000 * np.linalg.norm(a[:3] - a0[:3]))
                dr.append(np.linalg.norm(a[3:6] - a0[3:6]))
                flips.append((a[6] > 0.5) != (a0[6] > 0.5))
            rows.append({"distortion": name, "category": get_distortion(name).category, "level": level,
                         "translation_change_mm": float(np.mean(dt)), "translation_change_max_mm": float(np.max(dt)),
                         "rotation_change_rad": float(np.mean(dr)), "gripper_flip_rate": float(np.mean(flips)),
                         "observations": len(observations)})
    return rows
