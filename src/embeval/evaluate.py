"""Evaluate a policy object on a named benchmark from Python (a training loop, a notebook): records and scores.

    from embeval.evaluate import evaluate
    result = evaluate(policy, "distorted-camera", env="Pick", distortion="gaussian_blur", level=3, seeds=[0, 1, 2])
    result.scores    # {"episodes": 3, "decision": ..., "execution": ..., "success": ..., "reference_success": ...}
    result.rows      # one scored row per item (here: per seed)
    result.records   # the episodes (embeval.scoring.record.EpisodeRecord): each seed's clean reference, then its run

``policy`` follows embeval's Policy protocol (``reset(instruction)``, ``act(observation) -> Action``: 7-DoF
frame-base actions, :mod:`embeval.action`). A benchmark (:data:`BENCHMARKS`) is items plus a scorer: a typed
config (an unknown parameter or value is refused before any episode runs), ``items`` (what one unit runs), ``unit``
(one item's episode records and scored row) and ``summary`` (the rows' scores). The vla-eval adapters
(:mod:`embeval.vla_eval_benchmarks`) run the same units. Benchmarks:

- ``distorted-camera``: Embodied-IQA's unit on the pybullet UR5 cell: per seed the clean reference episode, then the
  same seeded episode with every camera image distorted (:func:`embeval.sim.backends.score_episode`); Decision
  (first actions, per-pair form, 0..1), Execution (0..100), both runs' task success;
- ``scene-shift``: the same with the world changed instead of the images (an axis of :mod:`embeval.sim.perturb`
  at a level; :func:`embeval.sim.perturb.score.score_seed`);
- ``image-decision``: Embodied-IQA's Decision on still images: the policy's action per task on seeded synthetic
  tabletop references and their distorted copies, distances min-max normalised over all images (the paper's corpus
  form, :func:`embeval.scoring.decision.decision_corpus`); no episodes, one row per distorted image;
- ``act2answer``: Act2Answer's items (generated cards, ``categories`` x ``per_category``, both layouts) answered by
  moving the cube (:func:`embeval.act2answer.episode.run_items`); soft success rate per category and overall, with
  Wilson intervals, the regime against chance, swap consistency and the position-bias index.
"""
from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from embeval.errors import ConfigError
from embeval.registry import Registry
from embeval.scoring.record import EpisodeRecord


@dataclass
class Evaluation:
    """What :func:`evaluate` returns: the benchmark, its resolved config, every episode, one row per item, scores."""

    benchmark: str
    config: dict[str, Any]
    records: list[EpisodeRecord] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    scores: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"benchmark": self.benchmark, "config": self.config, "scores": self.scores, "rows": self.rows,
                "records": [r.to_dict() for r in self.records]}


@dataclass(frozen=True)
class Benchmark:
    """A benchmark: its typed ``config`` class, the env its units share, its items, one unit and the summary."""

    name: str
    description: str
    config: type
    make_env: Callable[[Any, Any], Any]  # (config, policy) -> env (closed by evaluate) or None
    items: Callable[[Any, Path], Sequence[Any]]  # (config, a scratch folder removed after the run)
    unit: Callable[[Any, Any, Any, Any], tuple[list[EpisodeRecord], dict[str, Any]]]  # (env, policy, config, item)
    summary: Callable[[list[dict[str, Any]], list[EpisodeRecord]], dict[str, Any]]  # (rows, records)


BENCHMARKS: Registry = Registry("benchmark")


def evaluate(policy, benchmark: str, **params: Any) -> Evaluation:
    """Run ``policy`` on ``benchmark`` (a :data:`BENCHMARKS` name) with ``params`` (its config's fields)."""
    bench = BENCHMARKS.get(benchmark)
    known = [f.name for f in fields(bench.config)]
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise ConfigError(f"benchmark {benchmark}: unknown parameter(s) {', '.join(unknown)}; it takes {', '.join(known)}")
    cfg = bench.config(**params)
    out = Evaluation(benchmark, asdict(cfg))
    with tempfile.TemporaryDirectory(prefix=f"embeval-{benchmark}-") as scratch:
        env = bench.make_env(cfg, policy)
        try:
            for item in bench.items(cfg, Path(scratch)):
                records, row = bench.unit(env, policy, cfg, item)
                out.records += records
                out.rows.append(row)
        finally:
            if env is not None:
                env.close()
    out.scores = bench.summary(out.rows, out.records)
    return out


# --------------------------------------------------------------------------- paired episodes on the UR5 cell
#: the most episode seeds (items) one call runs
MAX_SEEDS = 10_000


def _seeds(seeds) -> tuple[int, ...]:
    from embeval.checks import integer

    seeds = (seeds,) if isinstance(seeds, (int, np.integer)) else seeds
    if isinstance(seeds, (str, bytes)) or not isinstance(seeds, Sequence):
        raise ConfigError(f"seeds: a list of episode seeds (integers), got {seeds!r}"[:200])
    if not 1 <= len(seeds) <= MAX_SEEDS:
        raise ConfigError(f"seeds: give 1..{MAX_SEEDS} episode seeds, got {len(seeds)}")
    return tuple(integer(s, "seeds", 0, 2**32 - 1, why="episode seeds") for s in seeds)


@dataclass(frozen=True)
class PairedConfig:
    """Episodes on the pybullet UR5 cell: the task (a verb of embeval.sim.tasks), the episode seeds, the episode
    length (policy steps) and the camera image size (pixels)."""

    env: str = "Pick"
    seeds: tuple[int, ...] = (1,)
    max_steps: int = 20
    width: int = 64
    height: int = 48

    def __post_init__(self):
        object.__setattr__(self, "seeds", _seeds(self.seeds))
        from embeval.checks import integer

        integer(self.max_steps, "max_steps", 1, 10_000, why="policy steps per episode")


@dataclass(frozen=True)
class DistortedCameraConfig(PairedConfig):
    distortion: str = "white_noise"  # a name of embeval.distortion
    level: int = 3  # 1..5
    distortion_seed: int = 0  # the frame seeds' base (embeval.distortion.frame_seed)

    def __post_init__(self):
        super().__post_init__()
        from embeval.distortion import N_LEVELS, get

        from embeval.checks import integer

        get(str(self.distortion))  # an unknown name fails here, naming the choices
        integer(self.level, "level", 1, N_LEVELS, why="a distortion level")


@dataclass(frozen=True)
class SceneShiftConfig(PairedConfig):
    axis: str = "camera_pose"  # an axis of embeval.sim.perturb (`embeval perturb list`)
    level: int = 3

    def __post_init__(self):
        super().__post_init__()
        self.perturbation()  # checks the axis and level

    def perturbation(self):
        from embeval.sim.perturb import Perturbations

        return Perturbations.parse(f"{self.axis}:{self.level}")


def cell_env(cfg: PairedConfig, _policy=None):
    """The pybullet cell's episode env of ``cfg`` (the task, image size and episode length)."""
    from embeval.sim.backends import make_episode_env

    return make_episode_env({"backend": "pybullet", "env": cfg.env, "width": cfg.width, "height": cfg.height,
                             "max_steps": cfg.max_steps})


def distorted_camera_unit(env, policy, cfg: DistortedCameraConfig, seed: int):
    """Seed ``seed``'s clean and distorted episodes (records without images) and its scored row."""
    from embeval.sim.backends import score_episode

    score, ref, dis = score_episode(env, policy, seed, (cfg.distortion, cfg.level, cfg.distortion_seed))
    row = {"seed": seed, "distortion": cfg.distortion, "level": cfg.level, **score.to_dict()}
    row["success"] = row["distorted_success"]
    return [ref.without_images(), dis.without_images()], row


def scene_shift_unit(env, policy, cfg: SceneShiftConfig, seed: int):
    """Seed ``seed``'s reference and perturbed episodes (records without images) and its scored row."""
    from embeval.sim.perturb.score import score_seed

    records: list[EpisodeRecord] = []
    (row,) = score_seed(env, policy, seed, [cfg.perturbation()], records=records)
    return records, row


def _paired_summary(rows: list[dict[str, Any]], _records) -> dict[str, Any]:
    """Means over the items: Decision (0..1), Execution (0..100), the changed and the reference runs' success."""
    mean = lambda k: float(np.mean([float(r[k]) for r in rows])) if rows else float("nan")  # noqa: E731
    return {"episodes": len(rows), "decision": mean("decision"), "execution": mean("execution"),
            "success": mean("success"), "reference_success": mean("reference_success")}


def _register(bench: Benchmark) -> None:
    BENCHMARKS.register(bench.name, bench, description=bench.description)


_register(Benchmark("distorted-camera", "Embodied-IQA's unit: a clean and a distorted-camera episode per seed "
                    "(Decision, Execution)", DistortedCameraConfig, cell_env, lambda c, _: c.seeds,
                    distorted_camera_unit, _paired_summary))
_register(Benchmark("scene-shift", "a reference and a scene-perturbed episode per seed (Decision, Execution)",
                    SceneShiftConfig, cell_env, lambda c, _: c.seeds, scene_shift_unit, _paired_summary))


# --------------------------------------------------------------------------- Decision on still images
@dataclass(frozen=True)
class ImageDecisionConfig:
    """Embodied-IQA's Decision on still images: ``references`` seeded synthetic tabletop images (``width`` x
    ``height`` pixels), each distorted by every one of ``distortions`` at every one of ``levels``; the policy acts
    once per task in ``tasks`` on the reference and on the distorted image, given under every key of ``cameras``
    with the proprioception ``state`` (name -> numbers, e.g. ``{"tcp_pose": [0.4, 0, 0.3, 1, 0, 0, 0],
    "gripper": [1]}``). Scored as the paper does: distances min-max normalised over all the images together."""

    references: int = 4
    distortions: tuple[str, ...] = ("white_noise",)
    levels: tuple[int, ...] = (3,)
    width: int = 96
    height: int = 72
    tasks: tuple[str, ...] = ()  # (): embeval.scoring.decision.DEFAULT_TASKS
    cameras: tuple[str, ...] = ("third_person",)
    state: dict = field(default_factory=dict)
    seed: int = 0

    def __post_init__(self):
        from embeval import checks
        from embeval.distortion import N_LEVELS, get
        from embeval.image_io import MAX_IMAGE_SIDE
        from embeval.scoring.decision import DEFAULT_TASKS

        one = lambda v: (v,) if isinstance(v, (str, int, np.integer)) else v  # noqa: E731 - one name or level alone
        checks.integer(self.references, "references", 1, 1000, why="reference images")
        names = checks.strings(one(self.distortions), "distortions", fix="names of embeval.distortion")
        for n in names:
            get(n)  # an unknown name fails here, naming the choices
        levels = one(self.levels)
        if not isinstance(levels, (list, tuple)) or not levels:
            raise ConfigError(f"levels: a list of distortion levels 1..{N_LEVELS}, got {checks.shown(self.levels)[:100]}")
        levels = tuple(checks.integer(v, "levels", 1, N_LEVELS, why="distortion levels") for v in levels)
        for k in ("width", "height"):
            checks.integer(getattr(self, k), k, 8, MAX_IMAGE_SIDE, unit="pixels")
        tasks = checks.strings(one(self.tasks), "tasks", empty=True, fix="instructions") or DEFAULT_TASKS
        cams = checks.strings(one(self.cameras), "cameras", fix="image keys such as ['third_person', 'wrist']")
        if not isinstance(self.state, dict) or not all(
                isinstance(k, str) and isinstance(v, (list, tuple)) and v and all(checks.is_finite_number(x) for x in v)
                for k, v in self.state.items()):
            raise ConfigError(f"state: a mapping of state names to lists of finite numbers, e.g. "
                              f"{{'tcp_pose': [0.4, 0, 0.3, 1, 0, 0, 0], 'gripper': [1]}}, got {self.state!r}"[:300])
        checks.seed(self.seed, "seed", why="the images' and distortions' seed")
        for k, v in (("distortions", names), ("levels", levels), ("tasks", tasks), ("cameras", cams)):
            object.__setattr__(self, k, v)


def _image_items(cfg: ImageDecisionConfig, _scratch: Path):
    """(reference index, reference image, distortion, level, distorted image, the reference's shared dict) for every
    reference x distortion x level; every image seeded from ``cfg.seed`` (embeval.provenance.derive_seed). The dict
    keeps the policy's actions on the reference once its first unit has asked for them."""
    from embeval.distortion import distort
    from embeval.distortion.samples import synthetic_tabletop
    from embeval.provenance import derive_seed

    for k in range(cfg.references):
        ref = synthetic_tabletop(cfg.width, cfg.height, seed=derive_seed("image-decision", cfg.seed, k) % 2**32)
        shared: dict = {}
        for name in cfg.distortions:
            for level in cfg.levels:
                seed = derive_seed("image-decision", cfg.seed, k, name, level) % 2**32
                yield k, ref, name, level, distort(ref, name, level, seed=seed), shared


def _image_unit(_env, policy, cfg: ImageDecisionConfig, item):
    """One distorted image: the policy's action per task on it and on its reference (asked once per reference; the
    policy is reset with each task before each image, so both start alike). No episode records."""
    from embeval.action import Action, Observation

    k, ref, name, level, dist, shared = item
    state = {s: np.asarray(v, dtype=np.float64) for s, v in cfg.state.items()}

    def actions(img) -> list[list[float]]:
        out = []
        for task in cfg.tasks:
            policy.reset(task)
            a = policy.act(Observation(images={c: img for c in cfg.cameras}, instruction=task, state=state))
            out.append((a if isinstance(a, Action) else Action(np.asarray(a, dtype=np.float64))).vector.tolist())
        return out

    if "actions" not in shared:
        shared["actions"] = actions(ref)
    return [], {"reference": k, "distortion": name, "level": level, "reference_actions": [list(a) for a in shared["actions"]],
                "distorted_actions": actions(dist)}


def _image_summary(rows: list[dict[str, Any]], _records) -> dict[str, Any]:
    """Decision per image (the sum over its tasks, 0..len(tasks)) from distances min-max normalised over every image
    (the paper's corpus form), written into each row; the mean over images, per distortion and level and in all."""
    from embeval.scoring.decision import OUTPUTS, decision_corpus

    scores = decision_corpus([(np.asarray(r["reference_actions"]), np.asarray(r["distorted_actions"])) for r in rows])
    for r, s in zip(rows, scores):
        r.update(s.outputs())
    by: dict[str, list[float]] = {}
    for r in rows:
        by.setdefault(f"{r['distortion']} {r['level']}", []).append(r["decision"])
    mean = lambda k: float(np.mean([r[k] for r in rows])) if rows else float("nan")  # noqa: E731
    return {"images": len(rows), **{k: mean(k) for k in OUTPUTS},
            "by_distortion": {k: float(np.mean(v)) for k, v in by.items()}}


_register(Benchmark("image-decision", "Embodied-IQA's Decision on still images: a policy's actions on reference and "
                    "distorted tabletop images, corpus-normalised", ImageDecisionConfig, lambda c, p: None, _image_items,
                    _image_unit, _image_summary))


# --------------------------------------------------------------------------- Act2Answer
@dataclass(frozen=True)
class Act2AnswerConfig:
    """Generated Act2Answer items (``per_category`` per category, drawn from ``seed``), each in both layouts, as
    episodes of at most ``max_steps`` policy steps on ``backend`` (embeval.act2answer.episode.BACKENDS)."""

    categories: tuple[str, ...] = ("color",)
    per_category: int = 2
    seed: int = 0
    max_steps: int = 40
    backend: str = "pybullet"
    start: str = ""  # "grasped" (the cube starts in the closed gripper) or "table"; "": the episode spec's default

    def __post_init__(self):
        from embeval.act2answer.generator import CATEGORIES

        cats = (self.categories,) if isinstance(self.categories, str) else tuple(self.categories)
        bad = [c for c in cats if c not in CATEGORIES]
        if not cats or bad:
            raise ConfigError(f"categories: choose from {', '.join(CATEGORIES)}, got {list(cats)!r}")
        object.__setattr__(self, "categories", cats)
        from embeval.checks import integer

        integer(self.per_category, "per_category", 1, 1000, why="items per category")
        self.spec()  # checks max_steps and start

    def spec(self):
        from embeval.act2answer.scene import EpisodeSpec

        return EpisodeSpec.from_dict({"max_steps": self.max_steps, **({"start": self.start} if self.start else {})})


def _act2answer_unit(_env, policy, cfg: Act2AnswerConfig, item):
    from embeval.act2answer.episode import run_items

    records = list(run_items(policy, [item], cfg.spec(), seed=cfg.seed, backend=cfg.backend))
    row = {"item": item.id, "category": item.category,
           **{f"success_{r.layout}": r.success for r in records}, **{f"zone_{r.layout}": r.zone for r in records}}
    return records, row


def _act2answer_items(cfg: Act2AnswerConfig, scratch: Path):
    from embeval.act2answer.generator import generate_items

    return generate_items(scratch / "items", list(cfg.categories), per_category=cfg.per_category, seed=cfg.seed)


def _act2answer_summary(_rows, records: list[EpisodeRecord]) -> dict[str, Any]:
    """Soft success rate per category and over all (``success``; swap-averaged, with its Wilson interval and regime);
    swap statistics."""
    from embeval.act2answer.aggregate import category_rates, swap_stats

    rates = {c.category: c.to_dict() for c in category_rates(records)}  # and "all": every category together
    return {"episodes": len(records), "success": rates["all"]["rate"] if records else float("nan"),
            "categories": rates, "swap": swap_stats(records).to_dict()}


_register(Benchmark("act2answer", "binary VQA items answered by moving the cube onto a card (soft success rate "
                    "per category)", Act2AnswerConfig, lambda c, p: None, _act2answer_items, _act2answer_unit,
                    _act2answer_summary))
