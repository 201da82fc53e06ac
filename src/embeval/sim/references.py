"""Reference-image generator for Embodied-IQA: N simulated scenes, each with 5 tasks of rising
difficulty (1..5), rendered from the wrist (first-person) and third-person cameras at the
RealSense D455-like 640x480 intrinsics.

Output folder layout::

    OUT/images/<scene_id>_<view>.png     RGB reference images
    OUT/scenes/<scene_id>.yaml           the scene spec (replayable: SceneSpec.from_yaml)
    OUT/manifest.json                    {"meta": {...}, "images": [ReferenceImage...]}
    OUT/manifest.csv                     one row per image, tasks flattened (task1..task5)

Example::

    from embeval.sim.references import generate_references
    records = generate_references(n=10, out_dir="refs", seed=0)
"""
from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from embeval.errors import ConfigError
from embeval.provenance import code_version, derive_seed
from embeval.sim.scene import SceneSpec
from embeval.sim.tasks import TaskSpec, make_reference_scene

#: view name in the manifest -> camera name in the scene
VIEWS: dict[str, str] = {"first_person": "wrist", "third_person": "third_person"}


@dataclass
class ReferenceImage:
    """One reference image and what it shows (a manifest row)."""

    image_id: str
    scene_id: str
    view: str  # "first_person" (wrist camera) | "third_person"
    camera: str
    path: str  # relative to the output folder
    width: int
    height: int
    main_object: str  # category of the first task's target, e.g. "cube"
    main_object_name: str
    main_object_color: str
    background: str  # background category, e.g. "wood"
    object_categories: list[str]
    seed: int
    tasks: list[dict[str, Any]] = field(default_factory=list)  # TaskSpec dicts (+ implemented), difficulty 1..5
    source: str = "simulated"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def reference_scene(seed: int) -> tuple[SceneSpec, list[TaskSpec]]:
    """The seeded reference scene, with the robot's home pose above the objects (for the wrist view)."""
    scene, tasks = make_reference_scene(seed)
    rng = np.random.default_rng(derive_seed("reference-home", seed))
    xs = [o.position[0] for o in scene.objects]
    ys = [o.position[1] for o in scene.objects]
    cx = float(np.clip(np.mean(xs), 0.42, 0.56))
    cy = float(np.clip(np.mean(ys), -0.10, 0.10))
    home = (cx + float(rng.uniform(-0.03, 0.03)), cy + float(rng.uniform(-0.03, 0.03)), float(rng.uniform(0.30, 0.36)),
            np.pi, 0.0, 0.0)
    return replace(scene, home_tcp=home), tasks


def easiest_task(seed: int) -> tuple[SceneSpec, TaskSpec]:
    """The reference scene of ``seed`` (:func:`reference_scene`) and its easiest task with a success predicate
    (lowest difficulty; the first on ties): the task Embodied-IQA's Execution protocol runs closed loop,
    once from the reference image and once from each distorted image."""
    scene, tasks = reference_scene(seed)
    usable = [t for t in tasks if t.implemented]
    if not usable:
        raise ConfigError(f"reference scene {seed} has no task with a success predicate")
    return scene, min(usable, key=lambda t: t.difficulty)


def image_task(k: int, seed: int = 0) -> tuple[SceneSpec, TaskSpec]:
    """Reference image ``k`` of ``generate_references(..., seed=seed)`` (scene ``sim<k:05d>``) and its easiest
    task (:func:`easiest_task`): what the ROS conductor's Execution protocol (``execution_images``) runs."""
    scene, task = easiest_task(derive_seed("reference", seed, k))
    return replace(scene, name=f"sim{k:05d}"), task


def generate_references(n: int, out_dir: str | Path, seed: int = 0, views: Sequence[str] = ("first_person", "third_person"),
                        width: int = 640, height: int = 480, start: int = 0, progress: bool = False) -> list[ReferenceImage]:
    """Render ``n`` reference scenes (scene k uses seed ``derive_seed(seed, k)``); returns the manifest rows.

    Already rendered images are kept (resume): a scene whose PNGs and YAML exist is not re-rendered.
    """
    from PIL import Image

    from embeval.sim.workcell import SimConfig, Workcell

    bad = [v for v in views if v not in VIEWS]
    if bad:
        raise ConfigError(f"unknown view(s) {bad}; use {sorted(VIEWS)}")
    if n < 1:
        raise ConfigError(f"n must be >= 1, got {n}")
    out = Path(out_dir)
    (out / "images").mkdir(parents=True, exist_ok=True)
    (out / "scenes").mkdir(parents=True, exist_ok=True)
    records: list[ReferenceImage] = []
    it = range(start, start + n)
    if progress:
        from tqdm import tqdm

        it = tqdm(it, desc="reference scenes", unit="scene")
    with Workcell(SimConfig(mode="physics")) as cell:
        for k in it:
            s = derive_seed("reference", seed, k)
            scene, tasks = reference_scene(s)
            scene_id = f"sim{k:05d}"
            scene.name = scene_id
            paths = {v: out / "images" / f"{scene_id}_{v}.png" for v in views}
            yaml_path = out / "scenes" / f"{scene_id}.yaml"
            if not (yaml_path.exists() and all(p.exists() for p in paths.values())):
                cell.load(scene)
                for v, pth in paths.items():
                    Image.fromarray(cell.render(VIEWS[v], width, height)).save(pth)
                scene.to_yaml(yaml_path)
            main = scene.object(tasks[0].target)
            for v, pth in paths.items():
                records.append(ReferenceImage(
                    image_id=f"{scene_id}_{v}", scene_id=scene_id, view=v, camera=VIEWS[v], path=str(pth.relative_to(out)),
                    width=width, height=height, main_object=main.category, main_object_name=main.name,
                    main_object_color=main.color_name, background=scene.background,
                    object_categories=sorted({o.category for o in scene.objects}), seed=int(s),
                    tasks=[{**t.to_dict(), "implemented": t.implemented} for t in tasks],
                ))
    write_manifest(records, out, {"n_scenes": n, "seed": seed, "start": start, "views": list(views), "width": width,
                                  "height": height, "code_version": code_version()})
    return records


def write_manifest(records: Sequence[ReferenceImage], out_dir: str | Path, meta: dict[str, Any] | None = None) -> None:
    """Write ``manifest.json`` and ``manifest.csv`` (tasks flattened to task<k>_verb/_instruction/_difficulty)."""
    out = Path(out_dir)
    (out / "manifest.json").write_text(json.dumps({"meta": meta or {}, "images": [r.to_dict() for r in records]}, indent=1))
    cols = ["image_id", "scene_id", "view", "camera", "path", "width", "height", "main_object", "main_object_name",
            "main_object_color", "background", "object_categories", "seed", "source"]
    tcols = [f"task{k}_{f}" for k in range(1, 6) for f in ("verb", "instruction", "difficulty", "implemented")]
    with open(out / "manifest.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(cols + tcols)
        for r in records:
            d = r.to_dict()
            row = [";".join(d[c]) if isinstance(d[c], list) else d[c] for c in cols]
            for t in r.tasks[:5]:
                row += [t["verb"], t["instruction"], t["difficulty"], t["implemented"]]
            w.writerow(row)


def load_manifest(out_dir: str | Path) -> list[ReferenceImage]:
    """Read the rows written by :func:`generate_references`."""
    from embeval.errors import MissingFileError

    path = Path(out_dir) / "manifest.json"
    if not path.exists():
        raise MissingFileError(f"{path} not found; generate it with `embeval sim references --n 10 --out {out_dir}`")
    return [ReferenceImage(**r) for r in json.loads(path.read_text())["images"]]
