"""One-call recipes behind ``embeval train ...``: demonstrations -> trained, evaluated, saved models."""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from embeval.action import gripper_closed
from embeval.errors import InvalidInputError
from embeval.subjects.embedded.nets import VLAConfig
from embeval.subjects.embedded.preprocess import resize_image
from embeval.subjects.embedded.training import DemoArrays, TrainConfig, train_vla

Log = Callable[[str], None]


def demo_arrays(root: str | Path, image_size, cameras, episodes: np.ndarray | None = None) -> DemoArrays:
    """Load a LeRobot demonstration folder (see :mod:`embeval.datasets.demos`) for a VLA of input size
    ``image_size``; state = TCP position (3) + gripper (1)."""
    from embeval.datasets import read_lerobot, validate_layout
    from embeval.datasets.demos import LEGACY_TASK_GEOMETRY, TASK_GEOMETRY

    have = sorted(k.split(".")[-1] for k, f in validate_layout(root)["features"].items() if f["dtype"] == "image")
    for cam in cameras:
        if cam not in have:
            raise InvalidInputError(f"{root} has no camera {cam!r}; it has {have}")
    # frames are decoded and resized one at a time (streamed), so only the model-size copies are held
    d = read_lerobot(root, images=[f"observation.images.{c}" for c in cameras], image_transform=lambda im: resize_image(im, image_size))
    keep = np.ones(len(d.episode_index), bool) if episodes is None else np.isin(d.episode_index, episodes)
    images = {cam: d.frames[f"observation.images.{cam}"] if keep.all() else d.frames[f"observation.images.{cam}"][keep]
              for cam in cameras}
    st = d.frames["observation.state"][keep]
    state = np.concatenate([st[:, :3], st[:, 7:8]], axis=1).astype(np.float32)
    aux = d.frames.get(TASK_GEOMETRY, d.frames.get(LEGACY_TASK_GEOMETRY))
    wp = d.frames.get("expert.waypoint")
    ph = d.frames.get("expert.phase")
    return DemoArrays(images, state, d.frames["action"][keep].astype(np.float64), d.task_index[keep], d.tasks,
                      d.episode_index[keep], None if aux is None else aux[keep].astype(np.float64),
                      None if wp is None else wp[keep].astype(np.float64),
                      None if ph is None else ph[keep, 0].astype(np.int64))


def concat_demos(a: DemoArrays, b: DemoArrays) -> DemoArrays:
    """Frames of ``a`` then ``b`` (tasks merged, ``b``'s episode indices shifted past ``a``'s)."""
    tasks = list(a.tasks) + [t for t in b.tasks if t not in a.tasks]
    tb = np.asarray([tasks.index(b.tasks[i]) for i in b.task_index])
    cat = lambda x, y: None if x is None or y is None else np.concatenate([x, y])  # noqa: E731
    return DemoArrays({c: np.concatenate([a.images[c], b.images[c]]) for c in a.images}, np.concatenate([a.state, b.state]),
                      np.concatenate([a.action, b.action]), np.concatenate([a.task_index, tb]), tasks,
                      np.concatenate([a.episode_index, b.episode_index + a.episode_index.max() + 1]),
                      cat(a.aux, b.aux), cat(a.waypoint, b.waypoint), cat(a.phase, b.phase))


def dagger_arrays(policy, episodes: int, seed: int, log: Log | None = None) -> DemoArrays:
    """Roll ``policy`` out on fresh scenes (the "dagger" seed stream); label every state in which
    nothing is held with what a freshly planned scripted expert would do from there (its waypoint,
    action and stage): with the gripper open it resumes where the TCP already is
    (:meth:`~embeval.sim.expert.ScriptedExpert.resume`: a TCP lowered over the object descends on);
    closed on nothing (a missed grasp) it starts over, opening and rising to the approach pose.
    Returns those frames."""
    from embeval.datasets.demos import episode_seed, expert_phase, task_geometry
    from embeval.sim.env import SimEnv
    from embeval.sim.workcell import SimConfig

    cfg = policy.cfg
    imgs: dict[str, list] = {c: [] for c in cfg.cameras}
    state, action, tidx, eidx, aux, wps, phases, tasks = [], [], [], [], [], [], [], []
    with SimEnv(SimConfig(obs_cameras=tuple(cfg.cameras))) as env:
        for i in range(episodes):
            obs = env.reset(seed=episode_seed(seed, i, "dagger"), task=("Pick", "Place")[i % 2])
            policy.reset(env.task.instruction)
            if env.task.instruction not in tasks:
                tasks.append(env.task.instruction)
            while not env.done:
                if env.cell.grasp is None:
                    fresh = env.expert()
                    if not gripper_closed(env.cell.gripper):
                        fresh.resume()
                    a = fresh.act(obs).vector
                    for c in cfg.cameras:
                        imgs[c].append(resize_image(obs.images[c], cfg.image_size))
                    state.append(np.r_[obs.state["tcp_pose"][:3], obs.state["gripper"][:1]])
                    action.append(a)
                    tidx.append(tasks.index(env.task.instruction))
                    eidx.append(i)
                    aux.append(task_geometry(env))
                    wps.append(fresh.waypoint)
                    phases.append(expert_phase(fresh))
                obs = env.step(policy.act(obs)).observation
            if log and (i + 1) % 20 == 0:
                log(f"dagger: {i + 1}/{episodes} rollouts, {len(action)} relabelled frames")
    return DemoArrays({c: np.stack(v) for c, v in imgs.items()}, np.asarray(state, np.float32), np.asarray(action),
                      np.asarray(tidx), tasks, np.asarray(eidx), np.asarray(aux), np.asarray(wps),
                      np.asarray(phases))


@dataclass
class VLARecipe:
    """Everything ``embeval train vla`` needs to reproduce a policy from a seed."""

    name: str = "tiny-vla"
    seed: int = 0  # initialisation, batches, data subset
    demo_seed: int = 0  # scenes + action noise of the demonstrations (shared by the population)
    demo_episodes: int = 400
    demo_kick_prob: float = 0.3  # DemoConfig.kick_prob of the demonstrations (recovery from cm-scale offsets)
    demo_kick_std: float = 0.015  # m
    start_episodes: int = 2000  # extra scenes contributing only their first expert frame (visual grounding)
    approach_episodes: int = 600  # extra scenes contributing their first ``approach_frames`` (noisy) expert frames
    approach_frames: int = 6
    carry_episodes: int = 600  # extra Place scenes contributing only their carry/lower/release frames (kicked)
    dagger_rounds: int = 0  # DAgger: roll the policy out, relabel states with nothing held by a fresh expert, fine-tune
    dagger_episodes: int = 60
    dagger_steps: int = 600
    episode_fraction: float = 1.0  # train on this share of the demonstration episodes (population variety)
    arch: dict = field(default_factory=lambda: {"action_mode": "delta"})  # VLAConfig overrides
    train: dict = field(default_factory=lambda: {"steps": 4000})  # TrainConfig overrides
    eval_episodes: int = 20
    record_workers: int = 2  # processes recording the datasets side by side (each dataset is seeded on its own)


def _record_one(job) -> dict:
    from embeval.datasets.demos import record_demos

    name, path, cfg = job
    return asdict(record_demos(path, cfg, overwrite=True, log=lambda m: print(f"[{name}] {m}", flush=True)))


def record_datasets(jobs, workers: int = 2, log: Log | None = print) -> list[tuple[str, dict]]:
    """Record ``(name, folder, DemoConfig)`` datasets, ``workers`` processes side by side (largest
    first); returns ``(name, DemoReport as dict)`` in ``jobs`` order. Every dataset depends only on
    its own config, so the result is the same for any ``workers``."""
    from embeval.datasets.demos import record_demos

    if not jobs:
        return []
    if workers <= 1 or len(jobs) == 1:
        return [(n, asdict(record_demos(p, c, overwrite=True, log=log))) for n, p, c in jobs]
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    order = sorted(range(len(jobs)), key=lambda i: -jobs[i][2].episodes * (jobs[i][2].max_frames or 30))
    if log:
        log(f"recording {len(jobs)} datasets in {min(workers, len(jobs))} processes: {', '.join(j[0] for j in jobs)}")
    with ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=mp.get_context("spawn")) as ex:
        futures = {i: ex.submit(_record_one, jobs[i]) for i in order}
        return [(jobs[i][0], futures[i].result()) for i in range(len(jobs))]


def train_vla_recipe(recipe: VLARecipe, out: str | Path, demos: str | Path | None = None, work: str | Path | None = None,
                     log: Log | None = print) -> dict:
    """Record demonstrations (unless ``demos`` is given), train, evaluate, save to ``out``; returns a report."""
    from embeval.datasets.demos import DemoConfig
    from embeval.subjects.embedded.evaluate import evaluate_policy

    t0 = time.perf_counter()
    report: dict = {"recipe": asdict(recipe)}
    jobs: list[tuple[str, Path, DemoConfig]] = []  # (name, folder, config) of the datasets to train on
    if demos is None:
        kick = f"-kick{recipe.demo_kick_prob:g}x{recipe.demo_kick_std:g}" if recipe.demo_kick_prob > 0 else ""
        demos = Path(work or Path(out).parent / "_work") / f"demos-{recipe.demo_seed}-{recipe.demo_episodes}{kick}"
        jobs.append(("demos", Path(demos), DemoConfig(episodes=recipe.demo_episodes, seed=recipe.demo_seed,
                                                      kick_prob=recipe.demo_kick_prob, kick_std=recipe.demo_kick_std)))
    kick = dict(kick_prob=recipe.demo_kick_prob, kick_std=recipe.demo_kick_std)
    extra = []
    for name, n, cfg in (("starts", recipe.start_episodes, dict(noise=0.0, max_frames=1)),
                         ("approach", recipe.approach_episodes, dict(noise=0.3, max_frames=recipe.approach_frames)),
                         ("carry", recipe.carry_episodes, dict(verbs=("Place",), phases=("carry", "lower", "release"), **kick))):
        if n <= 0:
            continue
        tag = "-".join(f"{v:g}" if isinstance(v, float) else str(v) for v in cfg.values() if not isinstance(v, tuple))
        path = Path(demos).parent / f"{name}-{recipe.demo_seed}-{n}-{tag}"
        jobs.append((name, path, DemoConfig(episodes=n, seed=recipe.demo_seed, split=name, **cfg)))
        extra.append(path)
    todo = [j for j in jobs if not (j[1] / "meta" / "info.json").exists()]
    for name, rep in record_datasets(todo, recipe.record_workers, log):
        report[name] = rep
    vcfg = VLAConfig.from_dict({**VLAConfig().to_dict(), **recipe.arch})
    tcfg = TrainConfig(**{**asdict(TrainConfig()), **recipe.train})
    eps = None
    if recipe.episode_fraction < 1.0:
        from embeval.datasets import validate_layout

        n = validate_layout(demos)["total_episodes"]
        rng = np.random.default_rng(recipe.seed)
        eps = np.sort(rng.choice(n, size=max(1, int(round(n * recipe.episode_fraction))), replace=False))
    t1 = time.perf_counter()
    data = demo_arrays(demos, vcfg.image_size, vcfg.cameras, eps)
    for path in extra:
        data = concat_demos(data, demo_arrays(path, vcfg.image_size, vcfg.cameras))
    if log:
        log(f"{recipe.name}: {len(data)} frames from {len(np.unique(data.episode_index))} episodes "
            f"(loaded in {time.perf_counter() - t1:.0f} s); training {tcfg.steps} steps")
    policy, res = train_vla(data, vcfg, tcfg, seed=recipe.seed, id=recipe.name, log=log)
    report["train"] = res.to_dict()
    for r in range(recipe.dagger_rounds):
        extra_data = dagger_arrays(policy, recipe.dagger_episodes, recipe.seed + 1000 * (r + 1), log=log)
        data = concat_demos(data, extra_data)
        ft = TrainConfig(**{**asdict(tcfg), "steps": recipe.dagger_steps, "lr": tcfg.lr * 0.5})
        if log:
            log(f"{recipe.name}: DAgger round {r + 1}: +{len(extra_data)} relabelled frames; fine-tuning {ft.steps} steps")
        policy, res = train_vla(data, vcfg, ft, seed=recipe.seed + r + 1, id=recipe.name, log=log, init=policy)
        report[f"dagger{r + 1}"] = res.to_dict()
    policy.meta.update({"recipe": asdict(recipe), "demos": str(demos)})
    if recipe.eval_episodes > 0:
        ev = evaluate_policy(policy, episodes=recipe.eval_episodes, seed=recipe.seed, log=log)
        report["eval"] = ev.to_dict()
        policy.meta["eval"] = ev.summary()
    policy.save(out)
    report["seconds"] = time.perf_counter() - t0
    (Path(out) / "report.json").write_text(json.dumps(report, indent=1, default=str))
    return report


def render_vqa(scenes: int, seed: int, split: str = "train", camera: str = "third_person", width: int = 128,
               height: int = 96, log: Log | None = None):
    """VQA supervision from simulated reference scenes (5 tasks each, :func:`embeval.sim.tasks.make_reference_scene`):
    one example per (scene, task, prompt wrapper); returns :class:`~embeval.subjects.embedded.training.VQAArrays`
    (images at the render size; the model resizes)."""
    from embeval.datasets.demos import episode_seed
    from embeval.sim.tasks import make_reference_scene
    from embeval.sim.workcell import SimConfig, Workcell
    from embeval.subjects.embedded import vqa

    rng = np.random.default_rng(episode_seed(seed, 0, f"vqa-{split}"))
    images, prompts, pidx, rows, scene_idx = [], [], [], [], []
    with Workcell(SimConfig(mode="kinematic", settle_time=0.0, render=False)) as cell:
        from embeval.errors import ConfigError

        i = attempt = 0
        while i < scenes:
            try:
                scene, tasks = make_reference_scene(episode_seed(seed, attempt, f"vqa-{split}"))
            except ConfigError:  # a seed whose layout fails: take the next one
                attempt += 1
                continue
            attempt += 1
            cell.load(scene)
            img = cell.render(camera, width, height)
            for task in tasks:
                p = vqa.PROMPTS[int(rng.integers(len(vqa.PROMPTS)))].format(instruction=task.instruction)
                if p not in prompts:
                    prompts.append(p)
                images.append(img)
                pidx.append(prompts.index(p))
                rows.append(vqa.task_slots(scene, task))
                scene_idx.append(i)
            i += 1
            if log and i % 100 == 0:
                log(f"vqa {split}: {i}/{scenes} scenes rendered")
    return rows, np.stack(images), prompts, np.asarray(pidx), np.asarray(scene_idx)


def vqa_arrays(rows, images, prompts, pidx, scene_idx, vocab: dict[str, list[str]] | None = None):
    from embeval.subjects.embedded import vqa
    from embeval.subjects.embedded.training import VQAArrays

    vocab = vocab or vqa.slot_vocabulary([r["category"] for r in rows])
    labels = {s: np.asarray([vocab[s].index(r[s]) if r[s] in vocab[s] else 0 for r in rows]) for s in vocab}
    return VQAArrays(images, pidx, prompts, labels, vocab, vqa.TEMPLATE, scene_idx)


@dataclass
class VLMRecipe:
    """Everything ``embeval train vlm`` needs to reproduce a tiny VLM from a seed."""

    name: str = "tiny-vlm"
    seed: int = 0
    scenes: int = 300  # training reference scenes (x 5 tasks)
    scene_fraction: float = 1.0
    arch: dict = field(default_factory=dict)  # VLMConfig overrides
    train: dict = field(default_factory=lambda: {"steps": 400})
    eval_scenes: int = 60


def train_vlm_recipe(recipe: VLMRecipe, out: str | Path, log: Log | None = print, data_cache: dict | None = None) -> dict:
    """Render scenes, train, evaluate on held-out scenes (slot and exact-answer accuracy), save."""
    from embeval.subjects.embedded.nets import VLMConfig
    from embeval.subjects.embedded.training import train_vlm

    t0 = time.perf_counter()
    cache = data_cache if data_cache is not None else {}
    key = ("train", recipe.seed, recipe.scenes)
    if key not in cache:
        cache[key] = render_vqa(recipe.scenes, recipe.seed, "train", log=log)
    rows, images, prompts, pidx, sidx = cache[key]
    ekey = ("eval", recipe.seed, recipe.eval_scenes)
    if ekey not in cache:
        cache[ekey] = render_vqa(recipe.eval_scenes, recipe.seed, "eval", log=log)
    data = vqa_arrays(rows, images, prompts, pidx, sidx)
    if recipe.scene_fraction < 1.0:
        rng = np.random.default_rng(recipe.seed)
        chosen = rng.choice(recipe.scenes, size=max(1, int(recipe.scenes * recipe.scene_fraction)), replace=False)
        data = data.subset(np.isin(sidx, chosen))
    vcfg = VLMConfig.from_dict({**VLMConfig().to_dict(), **recipe.arch})
    data.images = np.stack([resize_image(im, vcfg.image_size) for im in data.images])
    tcfg = TrainConfig(**{**asdict(TrainConfig()), **recipe.train})
    if log:
        log(f"{recipe.name}: {len(data)} examples; training {tcfg.steps} steps")
    vlm, res = train_vlm(data, vcfg, tcfg, seed=recipe.seed, id=recipe.name, log=log)
    erows, eimages, eprompts, epidx, _ = cache[ekey]
    ev = evaluate_vlm(vlm, erows, eimages, [eprompts[i] for i in epidx])
    vlm.meta.update({"recipe": asdict(recipe), "eval": ev})
    vlm.save(out)
    report = {"recipe": asdict(recipe), "train": res.to_dict(), "eval": ev, "seconds": time.perf_counter() - t0}
    (Path(out) / "report.json").write_text(json.dumps(report, indent=1, default=str))
    return report


def evaluate_vlm(vlm, rows, images, prompts) -> dict:
    """Per-slot accuracy and exact-answer accuracy on held-out examples."""
    from embeval.subjects.embedded import vqa

    pred = []
    for i in range(0, len(prompts), 64):
        pred += vlm.predict_slots(list(images[i:i + 64]), prompts[i:i + 64])
    acc = {s: float(np.mean([p[s] == r[s] for p, r in zip(pred, rows)])) for s in rows[0]}
    exact = float(np.mean([vqa.TEMPLATE.format(**p) == vqa.TEMPLATE.format(**r) for p, r in zip(pred, rows)]))
    return {"examples": len(rows), "slot_accuracy": acc, "exact_answer_accuracy": exact}
