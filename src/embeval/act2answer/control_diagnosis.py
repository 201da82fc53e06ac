"""How a policy's Act2Answer episodes end when they end off both cards (control failures), per category.

:func:`diagnose_control` runs items in both layouts in the pybullet cell through the ordinary
:func:`~embeval.act2answer.episode.run_episode` (same zones, termination, seeds), watching every step:
the TCP position, the gripper and the cube. Per episode (:class:`EpisodeTrace`): what ended it, whether
the cube was ever lifted, the closest the carried cube came to each card, where the cube ended relative
to the nearer card, and the TCP's drift after its closest approach. :func:`control_summary` aggregates
these per category (distances in metres, frame base; +y is the robot's left).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from embeval.act2answer.items import BinaryItem
from embeval.act2answer.scene import EpisodeSpec


@dataclass
class EpisodeTrace:
    """One episode seen step by step (metres, frame base)."""

    item: str
    category: str
    layout: str
    zone: str
    end_reason: str  # "released", "max_steps" or the protective stop's reason
    steps: int
    lifted: bool  # the cube rose >= spec.lift_m above its start at some step
    cube_xy: tuple[float, float]  # where the cube rested at the end
    nearest_card: str  # "left" / "right": the card centre nearest the final cube
    offset_xy: tuple[float, float]  # final cube minus that card's centre
    closest_carried: dict  # side -> closest table-plane distance of the *lifted* cube to that card (inf if never lifted)
    tcp_drift: float  # TCP table-plane distance travelled away from its closest approach to a card, to the end
    correct_side: str
    tcp_to_cube: float  # closest 3-D distance of the TCP to the cube's start, before the cube was first lifted
    first_close: int  # first step at which the gripper was commanded closed (-1: never)
    tcp_path: list  # TCP (x, y, z) after every step, rounded to mm

    def to_dict(self) -> dict:
        return asdict(self)


class _Watch:
    """Forwards to the env; after every step records the TCP (tcp_pose), the gripper and the cube's position."""

    def __init__(self, env):
        self._env, self.tcp, self.cube, self.grip = env, [], [], []

    def __getattr__(self, name):
        return getattr(self._env, name)

    def reset(self, *a, **kw):
        self.tcp, self.cube, self.grip = [], [], []
        obs = self._env.reset(*a, **kw)
        self._record(obs)
        return obs

    def step(self, action):
        vec = getattr(action, "vector", action)
        self.grip.append(float(np.asarray(vec, dtype=float)[6]))
        res = self._env.step(action)
        self._record(res.observation)
        return res

    def _record(self, obs) -> None:
        from embeval.subjects.embedded.preprocess import state_vector

        self.tcp.append(state_vector(obs.state, ["ee_pos"]).astype(float))
        self.cube.append(np.asarray(self._env.cell.object_pose("cube")[0], dtype=float)[:3].copy())


def trace_episode(env, policy, item: BinaryItem, layout: str, spec: EpisodeSpec, seed: int) -> EpisodeTrace:
    """Run one episode (:func:`~embeval.act2answer.episode.run_episode`) on the pybullet ``env`` and trace it."""
    from embeval.act2answer.episode import run_episode

    watch = _Watch(env)
    res = run_episode(watch, policy, item, layout, spec, seed=seed, keep_actions=False)
    tcp, cube = np.stack(watch.tcp), np.stack(watch.cube)
    cards = {"left": np.asarray(spec.left_card_xy), "right": np.asarray(spec.right_card_xy)}
    lifted_mask = cube[:, 2] - cube[0, 2] >= spec.lift_m
    closest = {s: float(np.min(np.linalg.norm(cube[lifted_mask, :2] - c, axis=1))) if lifted_mask.any() else math.inf
               for s, c in cards.items()}
    end = np.asarray(res.cube_xy)
    near = min(cards, key=lambda s: float(np.linalg.norm(end - cards[s])))
    d_tcp = np.min(np.stack([np.linalg.norm(tcp[:, :2] - c, axis=1) for c in cards.values()]), axis=0)
    k = int(np.argmin(d_tcp))
    first_lift = int(np.argmax(lifted_mask)) if lifted_mask.any() else len(cube)
    closed = [i for i, g in enumerate(watch.grip) if g < 0.5]
    return EpisodeTrace(item.id, item.category, layout, res.zone, res.end_reason, res.steps, bool(lifted_mask.any()),
                        (float(end[0]), float(end[1])), near, tuple(float(v) for v in end - cards[near]),  # type: ignore[arg-type]
                        closest, float(np.linalg.norm(tcp[-1, :2] - tcp[k, :2])), res.correct_side,
                        float(np.min(np.linalg.norm(tcp[:first_lift + 1] - cube[0], axis=1))), closed[0] if closed else -1,
                        np.round(tcp, 3).tolist())


def diagnose_control(policy, items: Sequence[BinaryItem], spec: EpisodeSpec | None = None, seed: int = 0,
                     layouts: tuple[str, ...] = ("original", "swapped")) -> list[EpisodeTrace]:
    """Trace every item in every layout with ``policy`` (seeds as :func:`~embeval.act2answer.episode.run_items`)."""
    from embeval.act2answer.episode import PYBULLET, obs_cameras_for, obs_size_for, render_only
    from embeval.provenance import derive_seed

    spec = spec or EpisodeSpec()
    env = PYBULLET.make_env(obs_size_for(policy))
    render_only(env, obs_cameras_for(policy))
    try:
        return [trace_episode(env, policy, it, lay, spec, derive_seed(seed, it.id, lay)) for it in items for lay in layouts]
    finally:
        env.close()


def control_summary(traces: Sequence[EpisodeTrace], eps: float | None = None) -> dict[str, dict]:
    """Per category (and ``"all"``): episodes, success rate, success among on-card endings (None: none), share and
    number off both cards, how many of those never lifted the cube and, among those off both cards: end reasons, share never
    lifted, share whose lifted cube passed within ``eps`` (m; default the spec's) of a card, mean offset of the
    final cube from the nearer card (dx, dy; m) and mean |offset|, mean TCP drift after its closest approach, mean
    closest approach of the TCP to the cube's start before any lift (m)."""
    eps = EpisodeSpec().eps if eps is None else eps
    out: dict[str, dict] = {}
    for cat in sorted({t.category for t in traces}) + ["all"]:
        sub = [t for t in traces if cat == "all" or t.category == cat]
        off = [t for t in sub if t.zone == "out_of_bounds"]
        ok = sum(t.zone == "correct" for t in sub)
        row: dict = {"episodes": len(sub), "success": ok / len(sub) if sub else 0.0,
                     "on_card_success": ok / (len(sub) - len(off)) if len(sub) > len(off) else None,
                     "off_card": len(off) / len(sub) if sub else 0.0, "off_episodes": len(off),
                     "off_never_lifted": sum(not t.lifted for t in off)}
        if off:
            reasons: dict[str, int] = {}
            for t in off:
                reasons[t.end_reason] = reasons.get(t.end_reason, 0) + 1
            off_xy = np.array([t.offset_xy for t in off])
            row.update({
                "end_reasons": reasons,
                "never_lifted": float(np.mean([not t.lifted for t in off])),
                "passed_over_card": float(np.mean([min(t.closest_carried.values()) <= eps for t in off])),
                "mean_offset_xy": [float(v) for v in off_xy.mean(axis=0)],
                "mean_abs_offset": float(np.linalg.norm(off_xy, axis=1).mean()),
                "mean_tcp_drift": float(np.mean([t.tcp_drift for t in off])),
                "mean_tcp_to_cube": float(np.mean([t.tcp_to_cube for t in off])),
            })
        out[cat] = row
    return out
