"""Closed-loop sensitivity runs: each seed once unperturbed (the reference) and once under every scene
perturbation and image distortion, scored as ``sim episodes --distortion`` scores a distortion.

Decision (0..1, first action vs the reference's first action, per-pair normalisation) and Execution (0..100, final
TCP vs the reference's) of :func:`embeval.sim.backends.score_runs`. With ``keep_frames`` each row also carries the
first frame of one camera, reference and perturbed (uint8 HxWx3), for image-quality metrics: for a scene axis the
reference is the unperturbed render of the same seed (pixel-aligned only where the camera did not move), for a
distortion the clean frame it distorted.

:func:`run_study` runs a whole study (several subjects x many seeds) resumably: one JSON line per finished (subject,
seed) in ``rows.jsonl`` beside a ``study.json`` of its settings; a rerun with the same settings skips what is there.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from embeval.errors import ConfigError, NotApplicableError
from embeval.sim.perturb.compose import Perturbations

#: row ``kind``: a scene-level axis, or one of the 30 image distortions
SCENE, IMAGE = "scene", "distortion"
#: row ``family``: an embeval axis or image distortion (LIBERO-PRO's fixed variant suites: ``embeval.sim.libero.pro``)
EMBEVAL = "embeval"


def _check_grid(env, perturbations, keep_frames, camera) -> str | None:
    for p in perturbations:
        if len(p) != 1:
            raise ConfigError(f"score_grid scores one axis at a time, got {len(p)} in {p}")
    cams = tuple(getattr(env, "cameras", ()) or ())
    if keep_frames:
        camera = camera or (cams[0] if cams else None)
        if camera not in cams:
            raise ConfigError(f"camera {camera!r} is not rendered by this env (cameras: {', '.join(cams) or 'none'})")
    return camera


def score_seed(env, policy, seed: int, perturbations: Sequence[Perturbations] = (),
               distortions: Sequence[tuple[str, int]] = (), keep_frames: bool = False, camera: str | None = None,
               progress: Callable[[str], None] | None = None, reference=None,
               skipped: list[dict[str, Any]] | None = None, records: list | None = None) -> list[dict[str, Any]]:
    """The rows of one episode ``seed`` (see :func:`score_grid`): its unperturbed reference (run here unless given
    as ``reference``, an :class:`~embeval.scoring.record.EpisodeRecord` of the same seed), then every axis and
    distortion, each scored against that reference. ``progress`` gets one message per episode run here (or
    skipped). ``skipped``: where given, an axis the scene cannot take (:class:`~embeval.errors.NotApplicableError`)
    is appended there as ``{"axis", "level", "seed", "reason"}`` and the others go on; else the error propagates.
    ``records``: where given, every episode's record (without images) is appended there, the reference first (a
    scene perturbation's record carries what its axis drew in ``extra["perturbation"]``)."""
    from dataclasses import replace

    from embeval.sim.backends import run_episode, score_episode, score_runs

    camera = _check_grid(env, perturbations, keep_frames, camera)
    rows: list[dict[str, Any]] = []

    def frames(ref, dis) -> dict[str, Any]:
        if not keep_frames:
            return {}
        return {"reference_frame": ref.first_observation.images[camera], "frame": dis.first_observation.images[camera]}

    env.env.perturb = None
    ref = reference
    if ref is None:
        ref = run_episode(env, policy, seed)
        if progress:
            progress(f"seed {seed} unperturbed")
    if records is not None:
        records.append(ref.without_images())
    for pert in perturbations:
        env.env.perturb = pert
        try:
            dis = run_episode(env, policy, seed)
        except NotApplicableError as exc:
            if skipped is None:
                raise
            skipped.append({"axis": pert[0].axis, "level": pert[0].level, "seed": seed, "reason": str(exc)})
            if progress:
                progress(f"seed {seed} {pert[0].axis}:{pert[0].level} not applicable")
            continue
        sc = score_runs(ref, dis)
        if records is not None:
            drawn = {"axis": pert[0].axis, "level": pert[0].level, **dict(env.env.perturbation)}
            records.append(replace(dis.without_images(), extra={**dis.extra, "perturbation": drawn}))
        rows.append({"kind": SCENE, "axis": pert[0].axis, "level": pert[0].level, "seed": seed,
                     "decision": sc.decision, "execution": sc.execution.score,
                     "reference_success": bool(ref.outcome.success), "success": bool(dis.outcome.success),
                     "perturbation": dict(env.env.perturbation), **frames(ref, dis)})
        if progress:
            progress(f"seed {seed} {pert[0].axis}:{pert[0].level}")
    env.env.perturb = None
    for name, level in distortions:
        sc, _, dis = score_episode(env, policy, seed, (name, level, seed), reference=ref)
        if records is not None:
            records.append(dis.without_images())
        rows.append({"kind": IMAGE, "axis": name, "level": level, "seed": seed, "decision": sc.decision,
                     "execution": sc.execution.score, "reference_success": bool(ref.outcome.success),
                     "success": bool(dis.outcome.success), "perturbation": {}, **frames(ref, dis)})
        if progress:
            progress(f"seed {seed} {name}:{level}")
    return rows


def skipped_lines(skipped: Sequence[dict[str, Any]]) -> list[str]:
    """One line per axis and level that some scene could not take (``skipped`` of :func:`score_seed` or
    :func:`~embeval.sim.libero.pro.score_family`): where (the tasks, when rows name one), how many episodes, why."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for s in skipped:
        groups.setdefault((s["axis"], s["level"]), []).append(s)
    lines = []
    for (axis, level), items in groups.items():
        tasks = sorted({s["task"] for s in items if s.get("task")})
        where = f" on {', '.join(tasks)}" if tasks else ""
        lines.append(f"{axis}:{level}{where}: not scored in {len(items)} episode(s): {items[0]['reason']}")
    return lines


def score_grid(env, policy, seeds: Iterable[int], perturbations: Sequence[Perturbations] = (),
               distortions: Sequence[tuple[str, int]] = (), keep_frames: bool = False, camera: str | None = None,
               progress: Callable[[str], None] | None = None,
               skipped: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """One row per (seed, single-axis perturbation or (distortion, level)): ``kind``, ``axis`` (axis or distortion
    name), ``level``, ``seed``, ``decision``, ``execution``, ``reference_success``, ``success``, ``perturbation``
    (what the axis drew; {} for a distortion) and with ``keep_frames`` ``reference_frame``/``frame`` of ``camera``
    (default the env's first camera). ``env``: a pybullet :class:`~embeval.sim.backends.EpisodeEnv`. ``skipped``:
    as :func:`score_seed` (cells the scene cannot take go there instead of stopping the grid)."""
    camera = _check_grid(env, perturbations, keep_frames, camera)
    rows: list[dict[str, Any]] = []
    for s in seeds:
        rows += score_seed(env, policy, s, perturbations, distortions, keep_frames, camera, progress, skipped=skipped)
    return rows


# --------------------------------------------------------------------------- resumable studies
ROWS_FILE, MANIFEST_FILE = "rows.jsonl", "study.json"
#: what a skipped cell of ``rows.jsonl`` holds (a record whose ``skipped`` lacks them is read as cut short)
SKIP_KEYS = frozenset({"axis", "level", "seed", "reason"})
#: settings a resumed study may change: its rows are per (subject, seed), so more of either extend it
GROWABLE = ("subjects", "seeds")
#: the most seeds one --seeds may name
MAX_SEEDS = 100_000


@dataclass(frozen=True)
class StudyConfig:
    """What a study runs: every subject (shipped VLA name or subject YAML) on every seed of ``task``, unperturbed and
    under every ``axes`` x ``levels`` and ``distortions`` x ``levels``; cameras ``width`` x ``height`` px."""

    subjects: tuple[str, ...]
    seeds: tuple[int, ...]
    task: str = "Pick"
    axes: tuple[str, ...] = ()
    levels: tuple[int, ...] = (1, 3, 5)
    distortions: tuple[str, ...] = ()
    width: int = 64
    height: int = 64
    backend: str = "pybullet"
    extra: dict[str, Any] = field(default_factory=dict)  # anything else that changes the rows (e.g. max_steps)

    def __post_init__(self):
        if not self.subjects:
            raise ConfigError("a study needs at least one subject (--subjects NAME_OR_YAML ...)")
        if not self.seeds:
            raise ConfigError("a study needs at least one seed (--seeds 0-99)")
        if len(set(self.subjects)) != len(self.subjects):
            raise ConfigError(f"--subjects: a subject given twice in {', '.join(self.subjects)}")
        if not self.axes and not self.distortions:
            raise ConfigError("a study needs an axis or a distortion to score")

    def cells(self) -> tuple[list[Perturbations], list[tuple[str, int]]]:
        """The single-axis perturbations and (distortion, level) pairs each seed is scored under."""
        from embeval.sim.perturb import Perturbation

        return ([Perturbations([Perturbation(a, lv)]) for a in self.axes for lv in self.levels],
                [(d, lv) for d in self.distortions for lv in self.levels])

    @property
    def episodes_per_seed(self) -> int:
        """Episodes per (subject, seed): the reference and one per cell."""
        return 1 + len(self.axes) * len(self.levels) + len(self.distortions) * len(self.levels)

    def to_dict(self) -> dict[str, Any]:
        return json.loads(json.dumps(asdict(self)))  # tuples as lists: what study.json holds


def parse_seeds(text: str, what: str = "--seeds") -> tuple[int, ...]:
    """``"0-99"``, ``"0,3,7"`` or ``"0-9,20-29"`` -> the seeds (or ids), in order, each once; a one-line
    ConfigError naming ``what`` else."""
    out: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        lo, sep, hi = part.partition("-")
        try:
            a = int(lo)
            b = int(hi) if sep else a
        except ValueError:
            raise ConfigError(f"{what} {text!r}: write seeds as 0-99, 0,3,7 or 0-9,20-29 (whole numbers >= 0)") from None
        if a < 0 or b < a:
            raise ConfigError(f"{what} {part!r}: a range runs from a whole number >= 0 up to one >= it, e.g. 0-99")
        out += range(a, b + 1)
        if len(out) > MAX_SEEDS:
            raise ConfigError(f"{what} {text!r}: at most {MAX_SEEDS:,} seeds in one study")
    return tuple(dict.fromkeys(out))


def read_study(out_dir: Path, config: StudyConfig | None = None, skipped: dict | None = None,
               ) -> tuple[StudyConfig | None, dict[tuple[str, int], list]]:
    """The settings in ``out_dir/study.json`` and the finished ``{(subject, seed): rows}`` of ``rows.jsonl`` (a
    line cut short by an interruption is ignored). With ``config``: a folder written with other per-seed settings
    (anything but :data:`GROWABLE`) is a one-line ConfigError (start a new --out). ``skipped``: where given, filled
    with ``{(subject, seed): [cells the scene could not take]}`` of those records."""
    out_dir = Path(out_dir)
    man = out_dir / MANIFEST_FILE
    done: dict[tuple[str, int], list] = {}
    if not man.exists():
        return None, done
    try:
        stored = json.loads(man.read_text())
        old = StudyConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in stored.items()})
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{man}: not a study's settings ({exc}); give another --out") from None
    if config is not None:
        diff = [k for k, v in config.to_dict().items() if k not in GROWABLE and old.to_dict().get(k) != v]
        if diff:
            raise ConfigError(f"--out {out_dir} holds a study with other settings ({', '.join(diff)} differ); give a "
                              f"new --out, or the same settings to resume it (subjects and seeds may change)")
    rows = out_dir / ROWS_FILE
    if rows.exists():
        for line in rows.read_text().splitlines():
            try:
                rec = json.loads(line)
                if not isinstance(rec["rows"], list):
                    raise TypeError("rows is not a list")
                gone = rec.get("skipped", [])
                if not isinstance(gone, list) or not all(isinstance(g, dict) and SKIP_KEYS <= set(g) for g in gone):
                    raise TypeError("skipped is not a list of cells")
                done[(str(rec["subject"]), int(rec["seed"]))] = rec["rows"]
                if skipped is not None:
                    skipped[(str(rec["subject"]), int(rec["seed"]))] = gone
            except (ValueError, KeyError, TypeError):
                continue  # the last line of an interrupted write
    return old, done


def run_study(config: StudyConfig, out_dir: Path, load_policy: Callable[[str, Any], Any],
              make_env: Callable[[StudyConfig], Any] | None = None, progress_mode: str | None = None,
              log: Callable[[str], None] | None = None,
              skipped: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Run (or resume) ``config`` into ``out_dir``; every row of the study (each with ``subject`` and ``family``).
    ``skipped``: filled with the cells a scene could not take (as :func:`score_seed`, each with ``subject``; kept in
    ``rows.jsonl`` beside the rows, so a resumed study reports them too); they do not stop the study.

    Each finished (subject, seed) is appended to ``rows.jsonl`` at once, so an interrupted study loses at most the
    seed in progress; a rerun skips the (subject, seed) pairs already there, and may add subjects or seeds.
    ``load_policy(subject, env)`` builds a policy (called only for a subject with seeds left); ``make_env(config)``
    the episode env (default: the pybullet cell of ``config.task`` at ``width`` x ``height``), built once and shared
    by the subjects. Progress (:mod:`embeval.progress`) counts episodes."""
    from embeval.progress import Progress

    out_dir = Path(out_dir)
    gone: dict[tuple[str, int], list] = {}
    _, done = read_study(out_dir, config, skipped=gone)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / MANIFEST_FILE).write_text(json.dumps(config.to_dict(), indent=1) + "\n")
    pairs = [(s, seed) for s in config.subjects for seed in config.seeds]
    todo = [p for p in pairs if p not in done]
    if log and len(todo) < len(pairs):
        log(f"resuming {out_dir}: {len(pairs) - len(todo)} of {len(pairs)} (subject, seed) pairs already scored")
    perts, dists = config.cells()
    per = config.episodes_per_seed
    total = len(config.subjects) * len(config.seeds) * per
    if todo:
        env = (make_env or _pybullet_env)(config)
        bar = Progress(total, "perturb study", "episodes", initial=total - len(todo) * per, mode=progress_mode)
        try:
            path = out_dir / ROWS_FILE
            cut = path.exists() and path.stat().st_size > 0 and not path.read_bytes().endswith(b"\n")
            with path.open("a") as f:
                if cut:  # an interrupted write: end its line so the next record starts on its own
                    f.write("\n")
                policy, current = None, None
                for subject, seed in todo:
                    if subject != current:
                        policy, current = load_policy(subject, env), subject
                    bar.set_postfix(subject=subject)
                    left: list[dict[str, Any]] = []
                    rows = [{"subject": subject, "family": EMBEVAL, **r}
                            for r in score_seed(env, policy, seed, perts, dists, progress=lambda _m: bar.update(1),
                                                skipped=left)]
                    left = [{"subject": subject, **s} for s in left]
                    f.write(json.dumps({"subject": subject, "seed": seed, "rows": rows, "skipped": left}) + "\n")
                    f.flush()
                    done[(subject, seed)], gone[(subject, seed)] = rows, left
        finally:
            bar.close()
            env.close()
    if skipped is not None:
        skipped += [c for s in config.subjects for seed in config.seeds for c in gone.get((s, seed), [])]
    return [r for s in config.subjects for seed in config.seeds for r in done[(s, seed)]]


def _pybullet_env(config: StudyConfig):
    from embeval.sim.backends import SimSpec, make_episode_env

    if config.backend != "pybullet":
        raise ConfigError(f"run_study builds pybullet envs; give make_env for backend {config.backend!r}")
    return make_episode_env(SimSpec(backend="pybullet", env=config.task, width=config.width, height=config.height))
