"""One-call recipes behind ``embeval train ...``: demonstrations -> trained, evaluated, saved models."""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from embeval.errors import InvalidInputError
from embeval.subjects.embedded.nets import VLAConfig
from embeval.subjects.embedded.preprocess import resize_image
from embeval.subjects.embedded.training import DemoArrays, TrainConfig, train_vla

Log = Callable[[str], None]


def demo_arrays(root: str | Path, image_size, cameras, episodes: np.ndarray | None = None) -> DemoArrays:
    """Load a LeRobot demonstration folder (see :mod:`embeval.datasets.demos`) for a VLA of input size
    ``image_size``; state = TCP position (3) + gripper (1)."""
    from embeval.datasets import read_lerobot

    d = read_lerobot(root)
    keep = np.ones(len(d.episode_index), bool) if episodes is None else np.isin(d.episode_index, episodes)
    images = {}
    for cam in cameras:
        key = f"observation.images.{cam}"
        if key not in d.frames:
            raise InvalidInputError(f"{root} has no camera {cam!r}; it has {sorted(k.split('.')[-1] for k in d.frames if 'images' in k)}")
        images[cam] = np.stack([resize_image(im, image_size) for im in d.frames[key][keep]])
    st = d.frames["observation.state"][keep]
    state = np.concatenate([st[:, :3], st[:, 7:8]], axis=1).astype(np.float32)
    return DemoArrays(images, state, d.frames["action"][keep].astype(np.float64), d.task_index[keep], d.tasks,
                      d.episode_index[keep])


@dataclass
class VLARecipe:
    """Everything ``embeval train vla`` needs to reproduce a policy from a seed."""

    name: str = "tiny-vla"
    seed: int = 0
    demo_episodes: int = 80
    episode_fraction: float = 1.0  # train on this share of the demonstration episodes (population variety)
    arch: dict = field(default_factory=dict)  # VLAConfig overrides
    train: dict = field(default_factory=dict)  # TrainConfig overrides
    eval_episodes: int = 20


def train_vla_recipe(recipe: VLARecipe, out: str | Path, demos: str | Path | None = None, work: str | Path | None = None,
                     log: Log | None = print) -> dict:
    """Record demonstrations (unless ``demos`` is given), train, evaluate, save to ``out``; returns a report."""
    from embeval.datasets.demos import DemoConfig, record_demos
    from embeval.subjects.embedded.evaluate import evaluate_policy

    t0 = time.perf_counter()
    report: dict = {"recipe": asdict(recipe)}
    if demos is None:
        demos = Path(work or Path(out).parent / "_work") / f"demos-{recipe.seed}-{recipe.demo_episodes}"
        if not (Path(demos) / "meta" / "info.json").exists():
            rep = record_demos(demos, DemoConfig(episodes=recipe.demo_episodes, seed=recipe.seed), overwrite=True, log=log)
            report["demos"] = asdict(rep)
    vcfg = VLAConfig.from_dict({**VLAConfig().to_dict(), **recipe.arch})
    tcfg = TrainConfig(**{**asdict(TrainConfig()), **recipe.train})
    eps = None
    if recipe.episode_fraction < 1.0:
        from embeval.datasets import read_lerobot

        n = read_lerobot(demos).info["total_episodes"]
        rng = np.random.default_rng(recipe.seed)
        eps = np.sort(rng.choice(n, size=max(1, int(round(n * recipe.episode_fraction))), replace=False))
    t1 = time.perf_counter()
    data = demo_arrays(demos, vcfg.image_size, vcfg.cameras, eps)
    if log:
        log(f"{recipe.name}: {len(data)} frames from {len(np.unique(data.episode_index))} episodes "
            f"(loaded in {time.perf_counter() - t1:.0f} s); training {tcfg.steps} steps")
    policy, res = train_vla(data, vcfg, tcfg, seed=recipe.seed, id=recipe.name, log=log)
    report["train"] = res.to_dict()
    policy.meta.update({"recipe": asdict(recipe), "demos": str(demos)})
    if recipe.eval_episodes > 0:
        ev = evaluate_policy(policy, episodes=recipe.eval_episodes, seed=recipe.seed, log=log)
        report["eval"] = ev.to_dict()
        policy.meta["eval"] = ev.summary()
    policy.save(out)
    report["seconds"] = time.perf_counter() - t0
    (Path(out) / "report.json").write_text(json.dumps(report, indent=1, default=str))
    return report
