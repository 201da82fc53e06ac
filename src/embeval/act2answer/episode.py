"""One Act2Answer episode in the simulated cell: the policy answers by moving the cube.

``run_episode`` resets the cell to the item's scene in one layout, resets the policy with the
instruction, steps it closed loop until the spec's termination rule fires (see
:mod:`embeval.act2answer.scene`), lets the cube settle and classifies its zone
(:func:`embeval.act2answer.zones.classify`). The record keeps the raw actions.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from embeval.act2answer.items import BinaryItem
from embeval.act2answer.scene import EpisodeSpec, build_scene
from embeval.act2answer.zones import classify


@dataclass
class EpisodeResult:
    """What one episode produced (metres; ``success`` is 1.0 in the correct zone, else 0.0)."""

    item: str
    category: str
    layout: str  # "original" | "swapped"
    correct_side: str  # correct side in this layout
    zone: str  # "correct" | "incorrect" | "out_of_bounds"
    choice: str | None  # card side holding the cube, or None
    success: float
    cube_xy: tuple[float, float]
    distance_correct: float
    termination: str  # the rule in force ("release_after_lift" | "max_steps")
    end_reason: str  # what ended it: "released", "max_steps", or the protective-stop reason
    stopped: bool  # protective stop (e-stop)
    steps: int
    subject: str = ""
    instruction: str = ""
    seed: int = 0
    actions: list[list[float]] = field(default_factory=list)  # raw 7-DoF actions, in order

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["cube_xy"] = list(self.cube_xy)
        return d


def run_episode(env, policy, item: BinaryItem, layout: str, spec: EpisodeSpec | None = None, seed: int = 0,
                keep_actions: bool = True) -> EpisodeResult:
    """Run ``item`` in ``layout`` on ``env`` (:class:`embeval.sim.SimEnv`) with ``policy`` (a Policy)."""
    spec = spec or EpisodeSpec()
    scene, task = build_scene(item, layout, spec)
    obs = env.reset(seed, task, scene)
    policy.reset(task.instruction)
    cube_z0 = float(env.cell.object_pose("cube")[0][2])
    lifted, reason, actions, n = False, "max_steps", [], 0
    while n < spec.max_steps:
        action = policy.act(obs)
        if keep_actions:
            actions.append([round(float(v), 6) for v in action.vector])
        res = env.step(action)
        obs, n = res.observation, n + 1
        if res.stopped:
            reason = res.reason or "protective stop"
            break
        z = float(env.cell.object_pose("cube")[0][2])
        if z - cube_z0 >= spec.lift_m:
            lifted = True
        if spec.termination == "release_after_lift" and lifted and env.cell.gripper >= 0.5:
            reason = "released"
            break
    if env.cell.safety.ok and spec.settle_s > 0:
        env.cell.idle(spec.settle_s)
    pos, _ = env.cell.object_pose("cube")
    correct = item.correct_side_in(layout)
    z = classify(pos[:2], spec.left_card_xy, spec.right_card_xy, correct, spec.eps)
    return EpisodeResult(
        item=item.id, category=item.category, layout=layout, correct_side=correct, zone=z.zone, choice=z.choice,
        success=1.0 if z.zone == "correct" else 0.0, cube_xy=(round(float(pos[0]), 5), round(float(pos[1]), 5)),
        distance_correct=round(z.distance_correct, 5), termination=spec.termination, end_reason=reason,
        stopped=bool(env.cell.safety.status.stopped), steps=n, subject=str(getattr(policy, "id", "")),
        instruction=task.instruction, seed=int(seed), actions=actions,
    )


def sim_config(obs_width: int = 128, obs_height: int = 96, mode: str = "physics"):
    """The simulation settings Act2Answer episodes use (observation size matches the tiny VLA's cameras)."""
    from embeval.sim.workcell import SimConfig

    return SimConfig(obs_width=obs_width, obs_height=obs_height, mode=mode)


def obs_size_for(policy, default: tuple[int, int] = (128, 96)) -> tuple[int, int]:
    """(width, height) to render observations at: the policy's own input size when it declares one
    (``policy.cfg.image_size`` [H, W], e.g. the tiny VLA's 64x48), else ``default``. Rendering at the
    input size skips a resize and is about twice as fast as 128x96."""
    size = getattr(getattr(policy, "cfg", None), "image_size", None)
    if isinstance(size, int):
        return (size, size)
    if isinstance(size, (list, tuple)) and len(size) == 2:
        return (int(size[1]), int(size[0]))
    return default


def run_items(policy, items: Iterable[BinaryItem], spec: EpisodeSpec | None = None, seed: int = 0,
              layouts: tuple[str, ...] = ("original", "swapped"), env=None, keep_actions: bool = True,
              obs_size: tuple[int, int] | None = None) -> Iterator[EpisodeResult]:
    """Every item in every layout (both by default), one :class:`EpisodeResult` each, in order.

    Seeds: episode seed = ``derive_seed(seed, item id, layout)``. Creates (and closes) its own
    :class:`embeval.sim.SimEnv` unless ``env`` is given, rendering at ``obs_size`` (width, height;
    default :func:`obs_size_for` the policy).
    """
    from embeval.provenance import derive_seed
    from embeval.sim import SimEnv

    own = env is None
    env = env or SimEnv(sim_config(*(obs_size or obs_size_for(policy))))
    try:
        for item in items:
            for layout in layouts:
                yield run_episode(env, policy, item, layout, spec, derive_seed(seed, item.id, layout), keep_actions)
    finally:
        if own:
            env.close()


def write_results(results: Iterable[EpisodeResult | dict], path) -> Path:
    """Write episode (or VLM answer) records as JSONL (one object a line); returns the path."""
    import json

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for r in results:
            f.write(json.dumps(r.to_dict() if hasattr(r, "to_dict") else r, sort_keys=True) + "\n")
    return path


def read_results(path) -> list[dict[str, Any]]:
    """Records written by :func:`write_results` (or exported by a run), as dicts."""
    import json

    from embeval.errors import MissingFileError

    p = Path(path)
    if not p.is_file():
        raise MissingFileError(f"results file {p} not found; produce one with `embeval act2answer run --out {p.parent}`")
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
