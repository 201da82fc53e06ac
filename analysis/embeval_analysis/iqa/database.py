"""Build an Embodied-IQA database: references x distortions x subjects -> Cognition / Decision scores.

Layout of a database folder ``DB``::

    DB/references/<ref_id>.png                 reference images (RGB)
    DB/distorted/<ref_id>__<type>__<level>.png  distorted images
    DB/manifest.json                           config, references (tasks, view, source, state), images
    DB/images.csv                              one row per distorted image (paths relative to DB)
    DB/run/                                    the embeval.runs folder of the "iqa" evaluator (resumable)
    DB/subject_scores.csv                      one row per (distorted image, subject): score and parts
    DB/scores.csv                              one row per distorted image: means over subjects

Scores (docs/scoring.md): Cognition per VLM = sum over 5 tasks of the weighted average
(BLEU-4 + ROUGE-L + 0.1 CIDEr-D) / 2.1 of the answer on the distorted image against the answer on the
reference (0..7.14); Decision per VLA = sum over 5 tasks of the mean of position / rotation / state
agreement (0..5). The image's score is the mean over subjects. Higher = the distortion changed less.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from embeval.errors import ConfigError, MissingFileError, load_yaml
from embeval.progress import Progress
from embeval.provenance import code_version, derive_seed

Log = Callable[[str], None]

#: how the database scores Execution (:func:`execution_scores`): the paper's protocol (the reference image's
#: easiest task, the policy acting closed loop over many steps on the camera stream, distorted for the distorted
#: image) or the earlier one (every implemented task's stored single action executed open loop, mean over tasks)
EXECUTION_PROTOCOLS = ("closed_loop", "all_tasks_one_action")


@dataclass
class BuildConfig:
    """What ``embeval iqa build`` builds (see ``config/iqa/default.yaml``)."""

    source: str = "sim"  # see embeval_analysis.iqa.sources.SOURCES
    source_params: dict[str, Any] = field(default_factory=lambda: {"n": 30, "size": [128, 96]})
    distortions: list[str] | str = "all"  # names from `embeval distort list`, or "all"
    levels: str | list[int] = "sample"  # "sample": one level per reference x type; "all"; or a list
    subjects: list[Any] | str = "embedded"  # "embedded" (shipped population) or subject specs (dicts / YAML paths)
    seed: int = 0
    batch_size: int = 128  # units per model call (policies with act_batch, VLMs with answer_batch)
    cameras: list[str] = field(default_factory=lambda: ["third_person", "wrist"])  # the image is given under these names
    execution_images: int = 0  # Execution score (simulation) for this many distorted images of simulated references
    execution_protocol: str = "closed_loop"  # "closed_loop" (paper: easiest task, multi-step) or "all_tasks_one_action"
    execution_max_steps: int | None = None  # closed_loop: step limit per run (None: the task's own budget, 50-60 steps)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "BuildConfig":
        allowed = set(cls.__dataclass_fields__)
        bad = sorted(set(d) - allowed)
        if bad:
            raise ConfigError(f"iqa build config: unknown field(s) {bad}; allowed: {sorted(allowed)}")
        return cls(**d)

    def validate(self) -> None:
        """:class:`ConfigError` naming the field (and its ``iqa build`` option) and the value given; run before any
        folder is created or image rendered."""
        from embeval import distortion
        from embeval_analysis.iqa.sources import _whole, check_params

        if not isinstance(self.source_params, dict):
            raise ConfigError(f"build.source_params: a mapping of source parameters, got {self.source_params!r}")
        check_params(self.source, self.source_params)
        for n in (distortion.list_distortions() if self.distortions == "all" else list(self.distortions)):
            distortion.get(n)  # ConfigError naming the choices
        _check_levels(self.levels)
        if not (_whole(self.execution_images) and self.execution_images >= 0):
            raise ConfigError(f"build.execution_images (--execution-images): the number of images scored in simulation "
                              f"must be a whole number >= 0 (0: none), got {self.execution_images!r}")
        if self.execution_protocol not in EXECUTION_PROTOCOLS:
            raise ConfigError(f"build.execution_protocol: {self.execution_protocol!r}; choose one of "
                              f"{', '.join(EXECUTION_PROTOCOLS)} (closed_loop: the paper's easiest task run closed loop)")
        m = self.execution_max_steps
        if m is not None and not (_whole(m) and m >= 1):
            raise ConfigError(f"build.execution_max_steps: a whole number of actions >= 1 or null (the task's own "
                              f"budget), got {m!r}")
        if not (_whole(self.seed) and self.seed >= 0):
            raise ConfigError(f"build.seed: a whole number >= 0, got {self.seed!r}")
        if not (_whole(self.batch_size) and self.batch_size >= 1):
            raise ConfigError(f"build.batch_size: a whole number >= 1, got {self.batch_size!r}")

    @classmethod
    def from_yaml(cls, path: str | Path) -> "BuildConfig":
        p = Path(path)
        if not p.is_file():
            raise MissingFileError(f"config {p} not found; start from config/iqa/default.yaml")
        doc = load_yaml(p, "IQA build config") or {}
        if not isinstance(doc, dict):
            raise ConfigError(f"IQA build config {p} must be a mapping with a 'build' section; start from config/iqa/default.yaml")
        cfg = cls.from_dict(doc.get("build", {}))
        if isinstance(cfg.subjects, list):  # subject YAML paths are relative to the config's folder
            cfg.subjects = [str((p.parent / s).resolve()) if isinstance(s, str) and (p.parent / s).exists() else s
                            for s in cfg.subjects]
        for key in ("path", "tasks_file"):
            v = cfg.source_params.get(key)
            if isinstance(v, str) and (p.parent / v).exists():
                cfg.source_params[key] = str((p.parent / v).resolve())
        return cfg


def resolve_subjects(subjects) -> list[dict[str, Any]]:
    """Subject specs (embeval.subjects format) from ``"embedded"`` or a list of specs / YAML paths."""
    if subjects == "embedded":
        from embeval.subjects.embedded.zoo import subject_specs

        specs = subject_specs("vla") + subject_specs("vlm")
        if not specs:
            from embeval.errors import MissingWeightsError

            raise MissingWeightsError("no embedded subjects are shipped; train them with `embeval train population` "
                                      "or list subject specs under build.subjects")
        return specs
    if not isinstance(subjects, list) or not subjects:
        raise ConfigError("build.subjects: 'embedded' or a non-empty list of subject specs")
    return [s if isinstance(s, dict) else str(s) for s in subjects]


def _levels_for(cfg: BuildConfig, ref_id: str, name: str) -> list[int]:
    from embeval.distortion import N_LEVELS

    if cfg.levels == "all":
        return list(range(1, N_LEVELS + 1))
    if cfg.levels == "sample":
        return [1 + derive_seed("iqa-level", cfg.seed, ref_id, name) % N_LEVELS]
    _check_levels(cfg.levels)
    return list(cfg.levels)


def _check_levels(levels) -> None:
    from embeval.distortion import N_LEVELS

    if levels in ("sample", "all") or (isinstance(levels, list) and levels
                                       and all(isinstance(v, int) and 1 <= v <= N_LEVELS for v in levels)):
        return
    raise ConfigError(f"build.levels (--levels): 'sample', 'all' or a list of levels 1..{N_LEVELS}, got {levels!r}")


def materialise(cfg: BuildConfig, db: str | Path, log: Log | None = print, refs=None, progress: bool = False) -> dict[str, Any]:
    """Write the reference and distorted images and the manifest (images already on disk are kept); ``progress``
    shows the references done (:mod:`embeval.progress`)."""
    from PIL import Image

    from embeval import distortion
    from embeval_analysis.iqa.sources import load_references

    db = Path(db)
    cfg.validate()
    names = distortion.list_distortions() if cfg.distortions == "all" else list(cfg.distortions)
    t0 = time.perf_counter()
    if refs is None:
        params = dict(cfg.source_params)
        if "size" in params and params["size"] is not None:
            params["size"] = tuple(params["size"])
        if cfg.source == "sim":
            params.setdefault("seed", cfg.seed)
            params.setdefault("work_dir", db / "_sim")
        if cfg.source == "maniskill":
            params.setdefault("seed", cfg.seed)
        refs = load_references(cfg.source, **params)
    (db / "references").mkdir(parents=True, exist_ok=True)  # only once the references are read
    (db / "distorted").mkdir(parents=True, exist_ok=True)
    cats = {n: distortion.get(n).category for n in names}
    images, references = [], []
    bar = Progress(len(refs) if hasattr(refs, "__len__") else None, "iqa build: distort", "references",
                   mode=None if progress else "off")
    for r in refs:
        rp = db / "references" / f"{r.ref_id}.png"
        if not rp.exists():
            Image.fromarray(r.image).save(rp)
        references.append({"ref_id": r.ref_id, "path": str(rp.relative_to(db)), "tasks": r.tasks, "scene_id": r.scene_id,
                           "view": r.view, "source": r.source, "state": r.state,
                           "height": int(r.image.shape[0]), "width": int(r.image.shape[1]), "sim_seed": r.sim_seed,
                           "outcome": r.outcome, **({"sim": r.sim} if r.sim else {})})
        # a recorded run's Execution score of the episode the reference frame was captured in (rosbag source)
        run_ex = {"run_execution": r.outcome["execution"]} if r.outcome and r.outcome.get("execution") is not None else {}
        for n in names:
            for lv in _levels_for(cfg, r.ref_id, n):
                image_id = f"{r.ref_id}__{n}__{lv}"
                p = db / "distorted" / f"{image_id}.png"
                if not p.exists():
                    img = distortion.distort(r.image, n, lv, seed=derive_seed("iqa-distort", cfg.seed, r.ref_id, n, lv) % 2**32)
                    Image.fromarray(img).save(p)
                images.append({"image_id": image_id, "ref_id": r.ref_id, "path": str(p.relative_to(db)),
                               "ref_path": str(rp.relative_to(db)), "distortion": n, "category": cats[n], "level": lv,
                               "scene_id": r.scene_id, "view": r.view, "source": r.source, **run_ex})
        bar.update(1)
    bar.close()
    manifest = {"config": asdict(cfg), "code_version": code_version(), "references": references, "images": images}
    (db / "manifest.json").write_text(json.dumps(manifest, indent=1))
    import pandas as pd

    pd.DataFrame(images).to_csv(db / "images.csv", index=False)
    if log:
        log(f"database {db}: {len(references)} references, {len(names)} distortion types, {len(images)} distorted images "
            f"({time.perf_counter() - t0:.1f} s)")
    return manifest


#: columns every reader of a database table relies on
TABLE_COLUMNS = {"scores.csv": ("image_id", "path", "ref_path", "scene_id"),
                 "images.csv": ("image_id", "path", "ref_path", "scene_id"),
                 "subject_scores.csv": ("image_id",)}


def read_table(db: str | Path, name: str = "scores.csv"):
    """A CSV table of database ``db`` (``scores.csv``, ``subject_scores.csv``, ``images.csv``) as a DataFrame.
    :class:`MissingFileError` / :class:`ConfigError` in one line naming the file when it is missing, empty, not UTF-8,
    not CSV, or lacks one of its :data:`TABLE_COLUMNS`."""
    import pandas as pd

    db = Path(db)
    f = db / name
    if not f.is_file():
        raise MissingFileError(f"{f} not found; build the database first with `embeval iqa build --out {db}`")
    fix = f"rebuild it with `embeval iqa build --out {db}` (finished units are kept), or check --db"
    try:
        table = pd.read_csv(f)
    except UnicodeDecodeError as exc:
        from embeval.errors import unicode_problem

        raise ConfigError(f"{f} is not UTF-8 text ({unicode_problem(exc)}), not a database table; {fix}") from None
    except pd.errors.EmptyDataError:
        raise ConfigError(f"{f} is empty, not a database table; {fix}") from None
    except pd.errors.ParserError as exc:
        raise ConfigError(f"{f} is not a valid CSV table ({' '.join(str(exc).split())}); {fix}") from None
    missing = [c for c in TABLE_COLUMNS.get(name, ()) if c not in table.columns]
    if missing:
        raise ConfigError(f"{f} has no column(s) {', '.join(missing)}; it is not this database's {name}: {fix}")
    return table


def load_manifest(db: str | Path) -> dict[str, Any]:
    p = Path(db) / "manifest.json"
    if not p.exists():
        raise MissingFileError(f"{p} not found; build the database first with `embeval iqa build --out {db}`")
    return json.loads(p.read_text())


def run_spec(cfg: BuildConfig, db: str | Path) -> dict[str, Any]:
    """The embeval.runs spec (evaluator ``iqa``) scoring every subject on every distorted image."""
    from embeval import distortion

    man = load_manifest(db)
    return {
        "name": "iqa-database",
        "evaluator": "iqa",
        "plugins": ["embeval_analysis.iqa.evaluator"],
        "subjects": resolve_subjects(cfg.subjects),
        "items": {"source": "list", "ids": [r["ref_id"] for r in man["references"]]},
        "distortions": sorted({im["distortion"] for im in man["images"]}),
        "levels": list(range(1, distortion.N_LEVELS + 1)),
        "seeds": [cfg.seed],
        "params": {"database": str(Path(db).resolve()), "cameras": list(cfg.cameras)},
        "backend": {"name": "local", "batch_size": int(cfg.batch_size), "progress": False, "unit_timeout_s": None},
    }


def score_subjects(cfg: BuildConfig, db: str | Path, log: Log | None = print, progress: bool = False):
    """Run (or resume) the ``iqa`` evaluator over the database; returns the run summary."""
    from embeval.runs.runner import run
    from embeval.runs.spec import parse_spec

    import embeval_analysis.iqa.evaluator  # noqa: F401  (registers "iqa")

    spec = parse_spec(run_spec(cfg, db), base_dir=Path(db).resolve())
    t0 = time.perf_counter()
    summary = run(spec, Path(db) / "run", progress=progress)
    if log:
        log(f"scored: {summary.done} units done, {summary.failed} failed ({time.perf_counter() - t0:.1f} s)")
    return summary


def aggregate(db: str | Path, log: Log | None = print):
    """Per-subject and mean scores from the run store -> ``subject_scores.csv`` and ``scores.csv``.

    Cognition is scored over the whole corpus of answers in one call (CIDEr-D needs the corpus; the
    paper's weighted average of 1 : 1 : 0.1, :mod:`embeval.scoring.cognition`), and so is Decision: the
    position and rotation distances of every VLA subject's task pairs are min-max normalised over the
    whole database (the paper's normalisation, :func:`decision_corpus`; rotation from the cosine of the
    rotation directions). Beside it: ``decision_angle`` (the same corpus form with the relative
    rotation angle, ``DecisionConfig(rotation="angle")``, the earlier default) and
    ``decision_per_pair`` (the per-pair form)."""
    import pandas as pd

    from embeval.runs.runner import load_run_spec
    from embeval.runs.store import ResultsStore
    import numpy as np

    from embeval.scoring.cognition import cognition_scores
    from embeval.scoring.decision import OUTPUTS as DECISION_OUTPUTS, DecisionConfig, decision_corpus

    db = Path(db)
    spec = load_run_spec(db / "run")
    with ResultsStore(db / "run" / "results.sqlite") as st:
        res = st.results(spec.hash)
    rows, answers, actions = [], {}, {}
    for (subject, item, dist, level, _seed), out in res.items():
        image_id = f"{item}__{dist}__{level}"
        if out.get("kind") == "vlm":
            answers[(subject, image_id)] = (out["reference_answers"], out["distorted_answers"])
        else:
            actions[(subject, image_id)] = (np.asarray(out["reference_actions"]), np.asarray(out["distorted_actions"]),
                                            out["decision"])
    if actions:
        pairs = [v[:2] for v in actions.values()]
        angle = decision_corpus(pairs, DecisionConfig(rotation="angle"))
        for (subject, image_id), s, sa in zip(actions, decision_corpus(pairs), angle):
            rows.append({"image_id": image_id, "subject": subject, "kind": "vla", **s.outputs(),
                         "decision_angle": sa.total, "decision_per_pair": actions[(subject, image_id)][2]})
    if answers:
        for (subject, image_id), s in cognition_scores(answers).items():
            rows.append({"image_id": image_id, "subject": subject, "kind": "vlm", "cognition": s.total,
                         "bleu": s.bleu, "rouge_l": s.rouge_l, "cider_d": s.cider_d})
    long = pd.DataFrame(rows)
    long.to_csv(db / "subject_scores.csv", index=False)
    images = pd.read_csv(db / "images.csv")
    parts = {"vla": [*DECISION_OUTPUTS, "decision_angle", "decision_per_pair"],
             "vlm": ["cognition", "bleu", "rouge_l", "cider_d"]}
    out = images.copy()
    for kind, cols in parts.items():
        sub = long[long["kind"] == kind] if not long.empty else long
        if sub.empty:
            continue
        mean = sub.groupby("image_id")[cols].mean()
        mean[f"n_{kind}"] = sub.groupby("image_id")["subject"].nunique()
        out = out.merge(mean, left_on="image_id", right_index=True, how="left")
    out.to_csv(db / "scores.csv", index=False)
    if log:
        n_vla = long.loc[long["kind"] == "vla", "subject"].nunique() if not long.empty else 0
        n_vlm = long.loc[long["kind"] == "vlm", "subject"].nunique() if not long.empty else 0
        log(f"scores: {len(out)} distorted images, {n_vla} VLA and {n_vlm} VLM subjects -> {db / 'scores.csv'}")
    return out, long


def execution_scores(db: str | Path, n_images: int, seed: int = 0, log: Log | None = print,
                     protocol: str = "closed_loop", max_steps: int | None = None, cameras=("third_person", "wrist"),
                     progress: bool = False, videos=None, num_envs: int = 1, exact: bool = False):
    """Execution score (0..100 and below, :mod:`embeval.scoring.execution`) in simulation for ``n_images``
    distorted images of simulated references (chosen with ``seed``), per VLA subject of the database.

    ``protocol="closed_loop"`` (default, the Embodied-IQA paper's: only "the task with the lowest
    difficulty level among the 5 tasks" is executed, the VLA acting over multiple steps): the reference
    scene's easiest task with a success predicate (:func:`embeval.sim.references.easiest_task`) is run
    closed loop from its start, once on clean camera frames (the reference run, once per subject and
    reference) and once with every frame distorted by the image's type and level (the distorted run),
    until success, a protective stop, or the step limit (``max_steps``, default the task's own budget).
    The policy sees the live frame of the reference image's view camera under every name in ``cameras``
    (as the database's Decision stage gives it the still image) and the cell's state. ManiSkill
    references (source ``maniskill``) run the env's own task closed loop the same way. The image's score
    is the mean over subjects.

    ``protocol="all_tasks_one_action"`` (the earlier default): every VLA subject's stored reference
    and distorted actions of each implemented task are executed open loop from the reference scene, one
    action each (ManiSkill: the first task's action); the image's score is the mean over tasks and subjects.

    ``videos`` (an :class:`embeval.recording.video.EpisodeRecorder`, closed_loop only): each distorted run is
    recorded as ``<subject>_<ref_id>_<distortion><level>_seed<seed>.mp4``, the clean frame beside the distorted one
    the policy saw (a failure: the distorted run did not succeed).

    ``num_envs`` > 1 (closed_loop only; 1..64): each subject's runs (the references not run yet, then or beside them
    the distorted runs) go to ``num_envs`` environments in worker processes, ONE batched policy call per step
    (:mod:`embeval.sim.vector`); the same runs, so the same rows for a deterministic policy; ``exact``: ask the policy
    through its batch-1 path per environment (bit for bit also for policies with their own batched forward).

    Adds ``execution`` to ``scores.csv`` and writes ``execution.csv`` (one row per image, subject and task)."""
    import pandas as pd

    from embeval.runs.runner import load_run_spec
    from embeval.runs.store import ResultsStore

    from embeval.sim.vector import check_num_envs

    if protocol not in EXECUTION_PROTOCOLS:
        raise ConfigError(f"execution protocol {protocol!r}; choose one of {', '.join(EXECUTION_PROTOCOLS)}")
    if check_num_envs(num_envs, "--num-envs") > 1 and protocol != "closed_loop":
        raise ConfigError(f"--num-envs {num_envs}: vectorises the closed-loop Execution runs only; use --execution-protocol "
                          "closed_loop or --num-envs 1")
    db = Path(db)
    man = load_manifest(db)
    refs = {r["ref_id"]: r for r in man["references"]
            if r.get("sim_seed") is not None or _episode_backend(r)}
    images = [im for im in man["images"] if im["ref_id"] in refs]
    if n_images <= 0 or not images:
        return None
    rng = np.random.default_rng(derive_seed("iqa-execution", seed))
    pick = [images[i] for i in sorted(rng.choice(len(images), size=min(n_images, len(images)), replace=False))]
    spec = load_run_spec(db / "run")
    t0 = time.perf_counter()
    rows, ref_cache, envs = [], {}, {}
    try:
        if protocol == "closed_loop":
            n_vla = sum(1 for e in spec.subjects if e.kind == "policy")
            with Progress(n_vla * len(pick), "iqa build: execution", "images", mode=None if progress else "off") as bar:
                rows = _closed_loop_rows(spec, pick, refs, envs, ref_cache, seed, max_steps, list(cameras), bar, videos,
                                         num_envs, exact)
        else:
            with ResultsStore(db / "run" / "results.sqlite") as st:
                res = st.results(spec.hash)
            for im in pick:
                ref = refs[im["ref_id"]]
                for (subject, item, dist, level, _s), out in res.items():
                    if out.get("kind") != "policy" or item != im["ref_id"] or dist != im["distortion"] or level != im["level"]:
                        continue
                    for t, verb, rec in _execute_tasks(ref, out, envs, ref_cache, subject):
                        rows.append({"image_id": im["image_id"], "subject": subject, "task": t, "verb": verb,
                                     "execution": rec.score, "reason": rec.reason, "distance_cm": rec.distance_cm})
    finally:
        for e in envs.values():
            e.close()
    ex = pd.DataFrame(rows)
    if ex.empty:
        return None
    ex.to_csv(db / "execution.csv", index=False)
    scores = pd.read_csv(db / "scores.csv").drop(columns=["execution"], errors="ignore")
    scores = scores.merge(ex.groupby("image_id")["execution"].mean(), left_on="image_id", right_index=True, how="left")
    scores.to_csv(db / "scores.csv", index=False)
    if log:
        what = (f"{len(ex)} closed-loop runs of the easiest task ({int(ex['distorted_steps'].sum())} distorted-run steps)"
                if protocol == "closed_loop" else f"{len(ex)} executed task actions")
        log(f"execution: {len(pick)} images, {what} ({time.perf_counter() - t0:.1f} s)")
    return scores


def _closed_loop_rows(spec, pick, refs, envs, cache, seed, max_steps, cameras, bar=None, videos=None, num_envs: int = 1,
                      exact: bool = False) -> list[dict]:
    """Rows of the closed-loop protocol (:func:`execution_scores`), one per picked image and VLA subject (each
    counted on ``bar``, an :class:`embeval.progress.Progress`, when given; each distorted run recorded by ``videos``;
    ``num_envs`` > 1: each subject's runs vectorised, :func:`_vector_runs`)."""
    from embeval.recording.video import maybe_episode
    from embeval.scoring.execution import execution_score
    from embeval.subjects.registry import SubjectSpec, load_subject

    rows = []
    for entry in spec.subjects:
        if entry.kind != "policy":
            continue
        policy = load_subject(SubjectSpec.from_mapping(entry.to_subject_mapping(), base_dir=Path(spec.base_dir)))
        try:
            # each distorted run's frames have their own seed (frame i of camera c: embeval.distortion.frame_seed)
            runs = [(refs[im["ref_id"]], (im["distortion"], int(im["level"]),
                                          derive_seed("iqa-execution-frames", seed, im["image_id"]) % 2**32),
                     f"{entry.id}_{im['ref_id']}_{im['distortion']}{int(im['level'])}_seed{seed}") for im in pick]
            if num_envs > 1:
                done = _vector_runs(entry.id, policy, runs, cache, max_steps, cameras, videos, num_envs, exact, bar)
            else:
                done = []
                for ref, dist, name in runs:
                    key = (entry.id, ref["ref_id"])
                    if key not in cache:
                        cache[key] = _closed_loop_run(ref, policy, None, envs, max_steps, cameras)
                    with maybe_episode(videos, name) as video:
                        dis_run = _closed_loop_run(ref, policy, dist, envs, max_steps, cameras)[0]
                        if video is not None:
                            video.finish(dis_run.success, f"Execution {execution_score(cache[key][0], dis_run).score:.1f}")
                    done.append(dis_run)
                    if bar is not None:
                        bar.update(1)
            for im, (ref, _, _), dis_run in zip(pick, runs, done):
                ref_run, t, verb = cache[(entry.id, ref["ref_id"])]
                rec = execution_score(ref_run, dis_run)
                rows.append({"image_id": im["image_id"], "subject": entry.id, "task": t, "verb": verb,
                             "execution": rec.score, "reason": rec.reason, "distance_cm": rec.distance_cm,
                             "reference_success": ref_run.success, "reference_steps": ref_run.n_actions,
                             "distorted_steps": dis_run.n_actions})
        finally:
            close = getattr(policy, "close", None)
            if callable(close):
                close()
    return rows


@dataclass(frozen=True)
class ClosedLoopTask:
    """The :class:`~embeval.sim.vector.EpisodeTask` of closed-loop Execution runs (pickled to the environment
    workers): a unit is ``(reference, distortion or None, video name or None, video index, the clean run's
    outcome or None)``; a worker's environment is the dict of simulators :func:`_closed_loop_run` builds on demand.
    ``videos``: (VideoPolicy, folder) of the distorted runs' videos (None: none). Returns ``(outcome, task index,
    verb, the kept video's path or None)``."""

    max_steps: int | None
    cameras: tuple[str, ...]
    videos: tuple[Any, str] | None = None

    def make_env(self) -> dict:
        return {}

    def local_policy(self, env):
        return None

    def run(self, env: dict, policy, unit):
        from embeval.recording.video import EpisodeRecorder, maybe_episode
        from embeval.scoring.execution import execution_score

        ref, dist, name, index, ref_outcome = unit
        recorder = EpisodeRecorder(*self.videos) if self.videos and name else None
        with maybe_episode(recorder, name or "", index) as video:
            out, t, verb = _closed_loop_run(ref, policy, dist, env, self.max_steps, list(self.cameras))
            path = None
            if video is not None:
                path = video.finish(out.success, f"Execution {execution_score(ref_outcome or out, out).score:.1f}")
        return out, t, verb, path

    def close(self, env: dict) -> None:
        for e in env.values():
            e.close()

    def describe(self, unit) -> str:
        ref, dist = unit[:2]
        return f"reference {ref['ref_id']} ({f'{dist[0]} level {dist[1]}' if dist else 'clean'})"


def _vector_runs(subject: str, policy, runs, cache, max_steps, cameras, videos, num_envs: int, exact: bool,
                 bar=None) -> list:
    """The distorted runs' outcomes of ``runs`` ([(reference, distortion, video name)]) for one subject, on
    ``num_envs`` environments (the references not in ``cache`` run too and are put there). With ``videos`` the
    references run first: a distorted run's worker captions its video with the run's Execution score."""
    from embeval.sim.vector import VectorPool
    from embeval.subjects.protocols import LoopSlots, batched

    index0 = 0
    if videos is not None:  # the runs' places in the recorder's count, as maybe_episode would number them
        index0, videos.count = videos.count, videos.count + len(runs)
    task = ClosedLoopTask(max_steps, tuple(cameras), (videos.policy, str(videos.out_dir)) if videos is not None else None)
    pool = VectorPool(task, num_envs)
    slots = LoopSlots(policy) if exact else batched(policy)
    todo = {r["ref_id"]: (r, None, None, None, None) for r, _, _ in runs if (subject, r["ref_id"]) not in cache}
    try:
        def go(units: list) -> list:
            out = [None] * len(units)
            for i, res in pool.run(slots, units):
                out[i] = res
                if bar is not None and units[i][1] is not None:
                    bar.update(1)
            return out

        def distorted(i: int, ref, dist, name):
            return (ref, dist, name if videos is not None else None, index0 + i,
                    cache[(subject, ref["ref_id"])][0] if videos is not None else None)

        if videos is None:  # one pass: references and distorted runs side by side
            done = go(list(todo.values()) + [distorted(i, *r) for i, r in enumerate(runs)])
        else:
            done = go(list(todo.values()))
        for ref_id, (out, t, verb, _) in zip(todo, done):
            cache[(subject, ref_id)] = (out, t, verb)
        if videos is not None:
            done = [None] * len(todo) + go([distorted(i, *r) for i, r in enumerate(runs)])
    finally:
        pool.close()
    dis = done[len(todo):]
    if videos is not None:
        videos.written.extend(p for _, _, _, p in dis if p is not None)
    return [out for out, _, _, _ in dis]


def _episode_backend(ref: dict) -> str | None:
    """The episode backend (:data:`embeval.sim.backend.SIM_BACKENDS`: maniskill, libero) that replays reference ``ref``
    from its ``sim`` record, or None (a pybullet scene seed, or no simulator)."""
    from embeval.sim.backend import SIM_BACKENDS

    backend = (ref.get("sim") or {}).get("backend")
    return backend if backend in SIM_BACKENDS and backend != "pybullet" else None


class _SeenCell:
    """The pybullet cell as a policy sees it in a closed-loop IQA run: each observation's ``cam`` image (distorted by
    ``distorter``, one frame index per observation, when given) under every key of ``cameras``; ``clean_images``: the
    undistorted ones (an episode video shows them beside)."""

    def __init__(self, env, cam: str, cameras: list[str], distorter, instruction: str):
        self.env, self.cam, self.cameras, self.distorter, self.instruction = env, cam, cameras, distorter, instruction
        self.clean_images: dict = {}

    @property
    def done(self) -> bool:
        return self.env.done

    def view(self, obs):
        from embeval.action import Observation

        raw = obs.images[self.cam]
        self.clean_images = dict.fromkeys(self.cameras, raw)
        img = raw if self.distorter is None else self.distorter(raw)
        return Observation(images={c: img for c in self.cameras}, instruction=self.instruction, state=obs.state)

    def step(self, action):
        res = self.env.step(action)
        res.observation = self.view(res.observation)
        return res


def _closed_loop_run(ref: dict, policy, distortion, envs: dict, max_steps: int | None, cameras: list[str]):
    """One closed-loop run of ``policy`` on reference ``ref``'s easiest task: (ExecutionOutcome, task index, verb).
    ``distortion``: ``(name, level, seed)`` applied to every frame, or None (clean frames)."""
    from embeval.sim.rollout import rollout

    sim = ref.get("sim") or {}
    if _episode_backend(ref):  # ManiSkill, LIBERO: the env's own task from the reference's seed
        from embeval.sim.backends import make_episode_env, run_episode
        from embeval_analysis.iqa.libero_source import episode_spec

        spec = episode_spec(dict(ref, sim={"camera": "base_camera", **sim}), cameras, max_steps)
        k = (f"{sim['backend']}-loop", json.dumps(spec, sort_keys=True))
        env = envs.get(k)
        if env is None:
            env = envs[k] = make_episode_env(spec)
        return run_episode(env, policy, int(sim["seed"]), distortion).outcome, 0, sim["env"]
    from embeval.distortion import FrameDistorter
    from embeval.sim import SimConfig, SimEnv
    from embeval.sim.execute import outcome
    from embeval.sim.references import VIEWS, easiest_task, reference_scene

    cam = VIEWS.get(ref.get("view"), "third_person")
    k = ("pybullet-loop", cam, int(ref["width"]), int(ref["height"]))
    env = envs.get(k)
    if env is None:
        env = envs[k] = SimEnv(SimConfig(obs_cameras=(cam,), obs_width=int(ref["width"]), obs_height=int(ref["height"])))
    sim_seed = int(ref["sim_seed"])
    scene, task = easiest_task(sim_seed)
    limit = min(task.max_steps, max_steps) if max_steps else task.max_steps
    distorter = FrameDistorter(distortion[0], distortion[1], seed=distortion[2], stream=cam) if distortion else None
    seen = _SeenCell(env, cam, cameras, distorter, task.instruction)
    obs = seen.view(env.reset(sim_seed, task, scene))
    policy.reset(task.instruction)
    n = rollout(seen, policy, obs, max_steps=limit, clean=(lambda: seen.clean_images) if distorter else None).steps
    if env.cell.safety.ok:
        env.cell.idle(0.3)  # released objects come to rest before the success predicate is read (as run_actions)
    return outcome(env, n), reference_scene(sim_seed)[1].index(task), task.verb


def _execute_tasks(ref: dict, out: dict, envs: dict, cache: dict, subject: str):
    """(task index, verb, ExecutionRecord) for the executable tasks of one reference and one policy result."""
    from embeval.scoring.execution import execution_score

    sim = ref.get("sim") or {}
    if _episode_backend(ref):  # ManiSkill, LIBERO: the first task's action from the reference's seed
        from embeval.sim.backends import execute_actions, make_episode_env
        from embeval_analysis.iqa.libero_source import episode_spec

        spec = episode_spec(ref, [], None, render=False)
        k = (sim["backend"], json.dumps(spec, sort_keys=True))
        env = envs.get(k)
        if env is None:
            env = envs[k] = make_episode_env(spec)
        key = (subject, ref["ref_id"], 0)
        if key not in cache:
            cache[key] = execute_actions(env, int(sim["seed"]), [out["reference_actions"][0]])
        dis = execute_actions(env, int(sim["seed"]), [out["distorted_actions"][0]])
        yield 0, sim["env"], execution_score(cache[key], dis)
        return
    from embeval.sim.env import SimEnv
    from embeval.sim.execute import execute_pair, run_actions
    from embeval.sim.references import reference_scene

    env = envs.get("pybullet")
    if env is None:
        env = envs["pybullet"] = SimEnv()
    scene, tasks = reference_scene(int(ref["sim_seed"]))
    for t, task in enumerate(tasks):
        if not task.implemented:
            continue
        key = (subject, ref["ref_id"], t)
        if key not in cache:
            cache[key] = run_actions(env, scene, task, [out["reference_actions"][t]], seed=int(ref["sim_seed"]))
        yield t, task.verb, execute_pair(env, scene, task, [out["reference_actions"][t]], [out["distorted_actions"][t]],
                                         seed=int(ref["sim_seed"]), reference_outcome=cache[key])


def build_database(cfg: BuildConfig, db: str | Path, log: Log | None = print, progress: bool = False, videos=None,
                   num_envs: int = 1, exact: bool = False):
    """materialise -> score_subjects -> aggregate (-> execution_scores); resumable at every step; ``progress``:
    each long stage shows its progress with an ETA on stderr (:mod:`embeval.progress`); ``videos``: an
    :class:`embeval.recording.video.EpisodeRecorder` of the closed-loop Execution runs; ``num_envs``, ``exact``: those
    runs vectorised (:func:`execution_scores`; execution only, the scores stay the same). Returns the scores frame."""
    cfg.validate()
    resolve_subjects(cfg.subjects)  # fail before rendering anything when subjects are missing
    materialise(cfg, db, log, progress=progress)
    summary = score_subjects(cfg, db, log, progress)
    if summary.failed:
        from embeval.errors import InvalidInputError

        raise InvalidInputError(f"{summary.failed} units failed (recorded in {Path(db) / 'run'}); fix the cause and run "
                                f"`embeval iqa build` again: finished units are kept")
    scores = aggregate(db, log)[0]
    if cfg.execution_images > 0:
        scores = execution_scores(db, cfg.execution_images, cfg.seed, log, cfg.execution_protocol, cfg.execution_max_steps,
                                  cfg.cameras, progress=progress, videos=videos, num_envs=num_envs, exact=exact)
        if scores is None:
            import pandas as pd

            scores = pd.read_csv(Path(db) / "scores.csv")
    return scores
